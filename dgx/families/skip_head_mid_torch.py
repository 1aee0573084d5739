"""fp8_gemm_nt_skip_head_mid's torch operator (registered by dgx.torch_ops), the function that calls it, and
DeepGEMM's name and signature (dgx.deep_gemm takes DEEP_GEMM)."""

from __future__ import annotations

from typing import Sequence

import torch

from .. import skip_head_mid
from ..checks import unpack_pair
from .base import TorchOp, bump_version, fake_inplace

TORCH_OPS = (
    TorchOp("fp8_gemm_nt_skip_head_mid",
            "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int[] head_splits) -> ()",
            lambda a, sfa, b, sfb, d, head_splits: bump_version(
                skip_head_mid.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, tuple(head_splits)), d),
            fake_inplace),
)

_ops = torch.ops.dgx


def fp8_gemm_nt_skip_head_mid(a, b, d: torch.Tensor, head_splits: Sequence[int]) -> None:
    """dgx.fp8_gemm_nt_skip_head_mid as the operator torch.ops.dgx.fp8_gemm_nt_skip_head_mid."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.fp8_gemm_nt_skip_head_mid.default(A, SFA, B, SFB, d, list(head_splits))


def _deep_gemm(a, b, d, head_splits, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    """DeepGEMM's fp8_gemm_nt_skip_head_mid: recipe None or (1, 128, 128) (FP32 scales, UE8M0-valued ones included;
    packed UE8M0 unpacked on the GPU first, as dgx.deep_gemm's FP8 GEMMs do); see dgx.fp8_gemm_nt_skip_head_mid."""
    from ..deep_gemm import fp8

    fp8._check_ignored(compiled_dims, disable_ue8m0_cast)
    fp8._refuse_fp4("fp8_gemm_nt_skip_head_mid", a, b, recipe, None, None)
    if fp8._recipe_form(recipe, None, None, weight_gradient_allowed=False) not in (None, "bf16"):
        raise ValueError(f"recipe: expected None or (1, 128, 128); got {recipe!r}")
    (A, sfa), (B, sfb) = fp8._pair(a, "a"), fp8._pair(b, "b")
    if isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor):
        kb, m, n = -(-int(A.shape[-1]) // 128), int(A.shape[0]), int(B.shape[0])
        sfa = fp8._fp32_scales(sfa, "SFA", m, kb, False, "M")
        sfb = fp8._fp32_scales(sfb, "SFB", -(-n // 128), kb, True, "ceil(N/128)")
    skip_head_mid.fp8_gemm_nt_skip_head_mid((A, sfa), (B, sfb), d, tuple(head_splits))


_deep_gemm.__name__ = _deep_gemm.__qualname__ = "fp8_gemm_nt_skip_head_mid"
LEGACY: tuple[str, ...] = ()
__all__ = ["TORCH_OPS", "fp8_gemm_nt_skip_head_mid"]
DEEP_GEMM = {"fp8_gemm_nt_skip_head_mid": _deep_gemm}
