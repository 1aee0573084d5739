"""The silu_mul_quant family's torch operator (registered by dgx.torch_ops), which allocates its outputs (for
torch.compile: the fake implementation gives their shapes and the scales' M-major strides), and the function that
calls it."""

from __future__ import annotations

import torch

from .. import moe_activation as entry
from ..kernels.silu_mul_quant import BLOCK
from .base import TorchOp


def _real(x, masked_m=None, swiglu_limit=None, use_ue8m0=False, packed_ue8m0=False):
    return entry.silu_mul_quant(x, masked_m=masked_m, swiglu_limit=swiglu_limit, use_ue8m0=use_ue8m0,
                                packed_ue8m0=packed_ue8m0)


def _fake(x, masked_m=None, swiglu_limit=None, use_ue8m0=False, packed_ue8m0=False):
    masked = masked_m is not None
    if x.dim() != (3 if masked else 2):
        raise ValueError(f"x: expected a {3 if masked else 2}-D tensor; got shape {tuple(x.shape)}")
    if x.shape[-1] % (2 * BLOCK):
        raise ValueError(f"x: expected a last dimension 2I with I a multiple of {BLOCK}; got {x.shape[-1]}")
    if packed_ue8m0 and not use_ue8m0:
        raise ValueError("packed_ue8m0: packing needs UE8M0 scales (use_ue8m0=True)")
    inter = x.shape[-1] // 2
    y = x.new_empty((*x.shape[:-1], inter), dtype=torch.float8_e4m3fn)
    shape, strides = entry.scale_layout(x.shape[0] if masked else None, x.shape[-2], inter // BLOCK, packed_ue8m0)
    sf = x.new_empty_strided(shape, strides, dtype=torch.int32 if packed_ue8m0 else torch.float32)
    return y, sf


_ARGS = "Tensor? masked_m=None, float? swiglu_limit=None, bool use_ue8m0=False, bool packed_ue8m0=False"
TORCH_OPS = (TorchOp("silu_mul_quant", f"(Tensor x, {_ARGS}) -> (Tensor, Tensor)", _real, _fake),)

_ops = torch.ops.dgx


def silu_mul_quant(x: torch.Tensor, *, masked_m: torch.Tensor | None = None, swiglu_limit: float | None = None,
                   use_ue8m0: bool = False, packed_ue8m0: bool = False, out: torch.Tensor | None = None,
                   out_scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """dgx.silu_mul_quant as the operator torch.ops.dgx.silu_mul_quant, which allocates its outputs (what torch.compile
    and CUDA graphs take). Given `out` / `out_scales`, dgx.silu_mul_quant writes them directly (eager code: a
    compiled graph breaks there)."""
    limit = None if swiglu_limit is None else float(swiglu_limit)
    if out is None and out_scales is None:
        return _ops.silu_mul_quant.default(x, masked_m, limit, use_ue8m0, packed_ue8m0)
    return entry.silu_mul_quant(x, masked_m=masked_m, swiglu_limit=limit, use_ue8m0=use_ue8m0,
                                packed_ue8m0=packed_ue8m0, out=out, out_scales=out_scales)


LEGACY: tuple[str, ...] = ()
__all__ = ["TORCH_OPS", "silu_mul_quant"]
