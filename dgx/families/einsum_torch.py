"""The einsum family's torch operator (registered by dgx.torch_ops), the function that calls it, and DeepGEMM's
``einsum`` (dgx.deep_gemm takes DEEP_GEMM), whose ``use_cublaslt=True`` runs the contraction through torch (cuBLAS)
instead, so DeepGEMM's test can time cuBLAS against the kernels."""

from __future__ import annotations

import torch

from .. import bf16_einsum as entry
from .base import TorchOp, bump_version, fake_inplace

TORCH_OPS = (
    TorchOp("einsum", "(str expr, Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None) -> ()",
            lambda expr, a, b, d, c=None: bump_version(entry.einsum(expr, a, b, d, c), d), fake_inplace),
)

_ops = torch.ops.dgx


def einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.einsum as the operator torch.ops.dgx.einsum."""
    _ops.einsum.default(expr, a, b, d, c)


def torch_einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None
                 ) -> None:
    """The same contraction through torch (cuBLAS), into d: torch.einsum in BF16 (its own accumulation), added to
    c (an FP32 d) or copied into d. Checked like dgx.einsum first, so a bad call fails the same way."""
    plain = "".join(expr.split()) if isinstance(expr, str) else expr
    if plain == "bmk,bnk->mn":
        # The S batch folded into K: one [M, S x K] . [S x K, N] product (torch.einsum makes the same copies).
        s, m, k = a.shape
        out = torch.mm(a.permute(1, 0, 2).reshape(m, s * k), b.permute(1, 0, 2).reshape(b.shape[1], s * k).t())
        if c is not None:
            torch.add(c, out.float(), out=d)
        else:
            d.copy_(out)
    else:
        d.copy_(torch.einsum(plain, a, b))


def _deep_gemm(expr, a, b, d, c=None, use_cublaslt=False):
    """DeepGEMM's einsum (see dgx.einsum): 'bmk,bnk->mn', 'bhr,hdr->bhd' or 'bhd,hdr->bhr'; use_cublaslt=True
    runs it through torch (cuBLAS) instead of dgx's kernels."""
    if not isinstance(use_cublaslt, bool):
        raise TypeError(f"use_cublaslt: expected a bool; got {type(use_cublaslt).__name__}")
    if use_cublaslt:
        from ..bf16_einsum import check

        check(expr, a, b, d, c)
        torch_einsum(expr, a, b, d, c)
    else:
        entry.einsum(expr, a, b, d, c)


_deep_gemm.__name__ = _deep_gemm.__qualname__ = "einsum"
LEGACY: tuple[str, ...] = ()
__all__ = ["TORCH_OPS", "einsum"]
DEEP_GEMM = {"einsum": _deep_gemm}
