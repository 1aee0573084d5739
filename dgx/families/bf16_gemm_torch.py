"""The BF16 GEMM family's torch operators (registered by dgx.torch_ops), the functions that call them, and its
functions under DeepGEMM's names and signatures (dgx.deep_gemm takes DEEP_GEMM and DEEP_GEMM_LEGACY)."""

from __future__ import annotations

from typing import Sequence

import torch

from .. import bf16
from .base import TorchOp, bump_version, fake_inplace

_FORMS = ("nt", "nn", "tn", "tt")


def _dense_op(form: str) -> TorchOp:
    name = f"bf16_gemm_{form}"
    return TorchOp(name, "(Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None) -> ()",
                   lambda a, b, d, c=None: bump_version(getattr(bf16, name)(a, b, d, c), d), fake_inplace)


def _contiguous_op(form: str) -> TorchOp:
    name = f"m_grouped_bf16_gemm_{form}_contiguous"
    return TorchOp(name, "(Tensor a, Tensor b, Tensor(a!) d, Tensor grouped_layout, bool use_psum_layout=False) -> ()",
                   lambda a, b, d, grouped_layout, use_psum_layout=False: bump_version(
                       getattr(bf16, name)(a, b, d, grouped_layout, use_psum_layout=use_psum_layout), d),
                   fake_inplace)


TORCH_OPS = (
    *(_dense_op(form) for form in _FORMS),
    _contiguous_op("nt"),
    _contiguous_op("nn"),
    TorchOp("m_grouped_bf16_gemm_nt_masked",
            "(Tensor a, Tensor b, Tensor(a!) d, Tensor masked_m, int expected_m) -> ()",
            lambda a, b, d, masked_m, expected_m: bump_version(
                bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m), d),
            fake_inplace),
    TorchOp("k_grouped_bf16_gemm_tn_contiguous",
            "(Tensor a, Tensor b, Tensor(a!) d, int[] ks, Tensor? ks_tensor=None, Tensor? c=None) -> ()",
            lambda a, b, d, ks, ks_tensor=None, c=None: bump_version(
                bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_tensor, c), d),
            fake_inplace),
)

_ops = torch.ops.dgx


# The plain signatures, calling the operators: what compiled code should call.

def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.bf16_gemm_nt as the operator torch.ops.dgx.bf16_gemm_nt."""
    _ops.bf16_gemm_nt.default(a, b, d, c)


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.bf16_gemm_nn as the operator torch.ops.dgx.bf16_gemm_nn."""
    _ops.bf16_gemm_nn.default(a, b, d, c)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.bf16_gemm_tn as the operator torch.ops.dgx.bf16_gemm_tn."""
    _ops.bf16_gemm_tn.default(a, b, d, c)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.bf16_gemm_tt as the operator torch.ops.dgx.bf16_gemm_tt."""
    _ops.bf16_gemm_tt.default(a, b, d, c)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, use_psum_layout: bool = False) -> None:
    """dgx.m_grouped_bf16_gemm_nt_contiguous as the operator of that name."""
    _ops.m_grouped_bf16_gemm_nt_contiguous.default(a, b, d, grouped_layout, use_psum_layout)


def m_grouped_bf16_gemm_nn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, use_psum_layout: bool = False) -> None:
    """dgx.m_grouped_bf16_gemm_nn_contiguous as the operator of that name."""
    _ops.m_grouped_bf16_gemm_nn_contiguous.default(a, b, d, grouped_layout, use_psum_layout)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int) -> None:
    """dgx.m_grouped_bf16_gemm_nt_masked as the operator of that name."""
    _ops.m_grouped_bf16_gemm_nt_masked.default(a, b, d, masked_m, expected_m)


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks: Sequence[int],
                                      ks_tensor: torch.Tensor | None = None, c: torch.Tensor | None = None) -> None:
    """dgx.k_grouped_bf16_gemm_tn_contiguous as the operator of that name (`ks` host ints: a constant of a
    compiled graph)."""
    _ops.k_grouped_bf16_gemm_tn_contiguous.default(a, b, d, list(ks), ks_tensor, c)


LEGACY: tuple[str, ...] = ()
__all__ = ["TORCH_OPS", *(op.name for op in TORCH_OPS)]


# DeepGEMM's names and signatures.

def _alignment() -> int:
    from ..deep_gemm import settings

    return settings.get_mk_alignment_for_contiguous_layout()


def _deep_gemm_contiguous(form: str):
    plain = getattr(bf16, f"m_grouped_bf16_gemm_{form}_contiguous")

    if form == "nt":
        def contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False, ensure_zero_padding=True,
                       expected_m_for_psum_layout=None):
            plain(a, b, d, grouped_layout, compiled_dims, use_psum_layout, ensure_zero_padding,
                  expected_m_for_psum_layout, alignment=_alignment() if use_psum_layout else None)
    else:
        def contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False, ensure_zero_padding=True):
            plain(a, b, d, grouped_layout, compiled_dims, use_psum_layout, ensure_zero_padding,
                  alignment=_alignment() if use_psum_layout else None)
    contiguous.__name__ = contiguous.__qualname__ = f"m_grouped_bf16_gemm_{form}_contiguous"
    contiguous.__doc__ = plain.__doc__
    return contiguous


def k_grouped_bf16_gemm_tn_contiguous_deep_gemm(a, b, d, ks_cpu, grouped_layout, c=None, compiled_dims="mn",
                                                use_psum_layout=False):
    """DeepGEMM's k_grouped_bf16_gemm_tn_contiguous: `ks_cpu` the groups' K as host ints, `grouped_layout` the same
    as an int32 tensor on the GPU (see dgx.bf16.k_grouped_bf16_gemm_tn_contiguous)."""
    bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout, c, compiled_dims, use_psum_layout)


k_grouped_bf16_gemm_tn_contiguous_deep_gemm.__name__ = "k_grouped_bf16_gemm_tn_contiguous"
k_grouped_bf16_gemm_tn_contiguous_deep_gemm.__qualname__ = "k_grouped_bf16_gemm_tn_contiguous"


def _legacy_contiguous(form: str):
    plain = getattr(bf16, f"m_grouped_bf16_gemm_{form}_contiguous")

    def contiguous_tl(a, b, d, m_indices):
        plain(a, b, d, m_indices)

    contiguous_tl.__name__ = contiguous_tl.__qualname__ = f"m_grouped_bf16_gemm_{form}_contiguous_tl"
    contiguous_tl.__doc__ = f"deep_gemm.legacy's {contiguous_tl.__name__} (m_indices) on dgx's BF16 kernel."
    return contiguous_tl


DEEP_GEMM = {
    **{f"bf16_gemm_{form}": getattr(bf16, f"bf16_gemm_{form}") for form in _FORMS},
    "m_grouped_bf16_gemm_nt_contiguous": _deep_gemm_contiguous("nt"),
    "m_grouped_bf16_gemm_nn_contiguous": _deep_gemm_contiguous("nn"),
    "m_grouped_bf16_gemm_nt_masked": bf16.m_grouped_bf16_gemm_nt_masked,
    "bf16_m_grouped_gemm_nt_masked": bf16.m_grouped_bf16_gemm_nt_masked,  # DeepGEMM's older name
    "k_grouped_bf16_gemm_tn_contiguous": k_grouped_bf16_gemm_tn_contiguous_deep_gemm,
}
DEEP_GEMM_LEGACY = {f"m_grouped_bf16_gemm_{form}_contiguous_tl": _legacy_contiguous(form) for form in ("nt", "nn")}
