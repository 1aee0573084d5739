"""DeepGEMM's ``deep_gemm.mega`` (the Mega MoE kernels: dispatch, both expert GEMMs and combine in one kernel over
symmetric memory), which exists for sm_100 only: every name takes DeepGEMM's arguments and raises Sm100OnlyError."""

from __future__ import annotations

from .standins import sm100_only, sm100_only_class

__all__ = [
    "SymmBuffer",
    "get_symm_buffer_for_mega_moe",
    "transform_weights_for_mega_moe",
    "fp8_fp4_mega_moe",
    "bf16_mega_moe",
]

_WHAT = "the Mega MoE kernels are"
_MODULE = "deep_gemm.mega"

SymmBuffer = sm100_only_class("SymmBuffer", _WHAT, _MODULE)
get_symm_buffer_for_mega_moe = sm100_only("get_symm_buffer_for_mega_moe", _WHAT, _MODULE)
transform_weights_for_mega_moe = sm100_only("transform_weights_for_mega_moe", _WHAT, _MODULE)
fp8_fp4_mega_moe = sm100_only("fp8_fp4_mega_moe", _WHAT, _MODULE)
bf16_mega_moe = sm100_only("bf16_mega_moe", _WHAT, _MODULE)
