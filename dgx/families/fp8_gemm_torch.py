"""The FP8 GEMM family's torch operators (registered by dgx.torch_ops): schemas, real and fake implementations, and
the functions of the plain signatures (pairs as pairs) that compiled code calls."""

from __future__ import annotations

from typing import Sequence

import torch

from .. import gemm, grouped, wgrad
from ..checks import unpack_pair
from .base import TorchOp, bump_version, fake_inplace

TORCH_OPS = (
    TorchOp("fp8_gemm_nt", "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c=None) -> ()",
            lambda a, sfa, b, sfb, d, c=None: bump_version(gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c), d),
            fake_inplace),
    TorchOp("m_grouped_fp8_gemm_nt_contiguous",
            "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor m_indices) -> ()",
            lambda a, sfa, b, sfb, d, m_indices: bump_version(
                grouped.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices), d),
            fake_inplace),
    TorchOp("m_grouped_fp8_gemm_nt_masked",
            "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor masked_m, int expected_m) -> ()",
            lambda a, sfa, b, sfb, d, masked_m, expected_m: bump_version(
                grouped.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m), d),
            fake_inplace),
    TorchOp("k_grouped_fp8_gemm_nt_contiguous",
            "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int[] ks, Tensor? ks_tensor=None) -> ()",
            lambda a, sfa, b, sfb, d, ks, ks_tensor=None: bump_version(
                wgrad.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_tensor), d),
            fake_inplace),
)

_ops = torch.ops.dgx


def fp8_gemm_nt(a, b, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.fp8_gemm_nt((A, SFA), (B, SFB), d, c) as the operator torch.ops.dgx.fp8_gemm_nt (see there)."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.fp8_gemm_nt.default(A, SFA, B, SFB, d, c)


def m_grouped_fp8_gemm_nt_contiguous(a, b, d: torch.Tensor, m_indices: torch.Tensor) -> None:
    """dgx.m_grouped_fp8_gemm_nt_contiguous as the operator torch.ops.dgx.m_grouped_fp8_gemm_nt_contiguous."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.m_grouped_fp8_gemm_nt_contiguous.default(A, SFA, B, SFB, d, m_indices)


def m_grouped_fp8_gemm_nt_masked(a, b, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int) -> None:
    """dgx.m_grouped_fp8_gemm_nt_masked as the operator torch.ops.dgx.m_grouped_fp8_gemm_nt_masked."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.m_grouped_fp8_gemm_nt_masked.default(A, SFA, B, SFB, d, masked_m, expected_m)


def k_grouped_fp8_gemm_nt_contiguous(a, b, d: torch.Tensor, ks: Sequence[int],
                                     ks_tensor: torch.Tensor | None = None) -> None:
    """dgx.k_grouped_fp8_gemm_nt_contiguous as the operator torch.ops.dgx.k_grouped_fp8_gemm_nt_contiguous
    (`ks` host ints: under torch.compile each distinct `ks` is a constant of the graph)."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.k_grouped_fp8_gemm_nt_contiguous.default(A, SFA, B, SFB, d, list(ks), ks_tensor)


# Legacy names, as in dgx.

def gemm_fp8_fp8_bf16_nt(lhs, rhs, out: torch.Tensor) -> None:
    """Legacy name of fp8_gemm_nt(lhs, rhs, out)."""
    fp8_gemm_nt(lhs, rhs, out)


def wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out: torch.Tensor) -> None:
    """Legacy name: out += lhs . rhs^T (fp8_gemm_nt(lhs, rhs, out, c=out) with a float32 out)."""
    fp8_gemm_nt(lhs, rhs, out, out)


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out: torch.Tensor, m_indices: torch.Tensor) -> None:
    """Legacy name of m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)."""
    m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out: torch.Tensor, masked_m: torch.Tensor,
                                          expected_m: int) -> None:
    """Legacy name of m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)."""
    m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)


def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out: torch.Tensor, batch_sizes: Sequence[int]) -> None:
    """Legacy name of k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes)."""
    k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes)


LEGACY = ("gemm_fp8_fp8_bf16_nt", "wgrad_gemm_fp8_fp8_fp32_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
          "m_grouped_gemm_fp8_fp8_bf16_nt_masked", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt")
__all__ = ["TORCH_OPS", *(op.name for op in TORCH_OPS), *LEGACY]
