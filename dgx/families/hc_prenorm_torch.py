"""The HyperConnection pre-norm GEMM's torch operator (registered by dgx.torch_ops), the function that calls it, and
DeepGEMM's name (dgx.deep_gemm takes DEEP_GEMM)."""

from __future__ import annotations

import torch

from .. import hc_prenorm
from .base import TorchOp, fake_inplace


def _real(a, b, d, s, num_splits=None):
    hc_prenorm.tf32_hc_prenorm_gemm(a, b, d, s, num_splits)
    torch._C._increment_version((d, s))


TORCH_OPS = (
    TorchOp("tf32_hc_prenorm_gemm", "(Tensor a, Tensor b, Tensor(a!) d, Tensor(b!) s, int? num_splits=None) -> ()",
            _real, fake_inplace),
)

_ops = torch.ops.dgx


def tf32_hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, s: torch.Tensor,
                         num_splits: int | None = None) -> None:
    """dgx.tf32_hc_prenorm_gemm as the operator torch.ops.dgx.tf32_hc_prenorm_gemm."""
    _ops.tf32_hc_prenorm_gemm.default(a, b, d, s, num_splits)


def _deep_gemm(a, b, d, sqr_sum, num_splits=None):
    """DeepGEMM's tf32_hc_prenorm_gemm (see dgx.tf32_hc_prenorm_gemm; `sqr_sum` is its `s`)."""
    hc_prenorm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)


_deep_gemm.__name__ = _deep_gemm.__qualname__ = "tf32_hc_prenorm_gemm"
LEGACY: tuple[str, ...] = ()
__all__ = ["TORCH_OPS", "tf32_hc_prenorm_gemm"]
DEEP_GEMM = {"tf32_hc_prenorm_gemm": _deep_gemm}
