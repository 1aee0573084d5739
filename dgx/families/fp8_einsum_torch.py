"""fp8_einsum's torch operator (registered by dgx.torch_ops), the function that calls it, and DeepGEMM's name and
signature (dgx.deep_gemm takes DEEP_GEMM)."""

from __future__ import annotations

import torch

from ..fp8_einsum import fp8_einsum as _fp8_einsum
from ..fp8_einsum import normalize_expr
from ..checks import unpack_pair
from .base import TorchOp, bump_version, fake_inplace

TORCH_OPS = (
    TorchOp("fp8_einsum",
            "(str expr, Tensor x, Tensor sfx, Tensor y, Tensor sfy, Tensor(a!) z) -> ()",
            lambda expr, x, sfx, y, sfy, z: bump_version(_fp8_einsum(expr, (x, sfx), (y, sfy), z), z),
            fake_inplace),
)

_ops = torch.ops.dgx


def fp8_einsum(expr: str, a, b, d: torch.Tensor) -> None:
    """dgx.fp8_einsum as the operator torch.ops.dgx.fp8_einsum."""
    x, sfx = unpack_pair(a, "a")
    y, sfy = unpack_pair(b, "b")
    _ops.fp8_einsum.default(expr, x, sfx, y, sfy, d)


def _deep_gemm(expr, a, b, d, c=None, recipe=(1, 128, 128)):
    """DeepGEMM's fp8_einsum: on sm_90 'bhr,hdr->bhd' with recipe (1, 128, 128) (FP32 scales, UE8M0-valued ones
    included) and no c; the sm_100 expressions raise Sm100OnlyError. See dgx.fp8_einsum."""
    from ..deep_gemm import fp8

    normalize_expr(expr)
    fp8._refuse_fp4("fp8_einsum", a, b, recipe, None, None)
    if recipe is not None and fp8._recipe_form(recipe, None, None, weight_gradient_allowed=False) != "bf16":
        raise ValueError(f"recipe: expected (1, 128, 128) for 'bhr,hdr->bhd'; got {recipe!r}")
    if c is not None:
        raise ValueError("c: 'bhr,hdr->bhd' writes z = x . y^T per head and adds no c (DeepGEMM's sm_90 kernel "
                         "neither); got a tensor")
    _fp8_einsum(expr, a, b, d)


_deep_gemm.__name__ = _deep_gemm.__qualname__ = "fp8_einsum"
LEGACY: tuple[str, ...] = ()
__all__ = ["TORCH_OPS", "fp8_einsum"]
DEEP_GEMM = {"fp8_einsum": _deep_gemm}
