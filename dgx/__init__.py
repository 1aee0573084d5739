"""dgx: Hopper kernels for LLM inference and training (FP8 GEMMs with DeepSeek-V3 fine-grained scaling, MoE grouped
GEMMs, weight gradients, the DeepSeek-V3.2 indexer, and the families registered in dgx/families).

Kernels are CUDA source rendered by Python, compiled at run time by NVRTC (a SASS pass is available, off by
default), cached on disk under portable keys and launched through the CUDA driver API. Inputs are any
DLPack-capable tensors.
"""

from .device import get_num_sms, set_num_sms
from .errors import CompileError, CudaError, DgxError, JitStrictError, LayoutConversionWarning
from .gemm import fp8_gemm_nt, gemm_fp8_fp8_bf16_nt, wgrad_gemm_fp8_fp8_fp32_nt
from .grouped import (
    get_mk_alignment_for_contiguous_layout,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
    m_grouped_gemm_fp8_fp8_bf16_nt_contiguous,
    m_grouped_gemm_fp8_fp8_bf16_nt_masked,
)
from .fused import GateUpWeight, prepare_gate_up
from .jit import jit_stats, reset_jit_stats
from .pdl import get_pdl, set_pdl
from .version import __version__
from .mqa import fp8_mqa_logits, fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from .wgrad import k_grouped_fp8_gemm_nt_contiguous, k_grouped_wgrad_gemm_fp8_fp8_fp32_nt
from .layout import get_mn_major_tma_aligned_tensor, get_tma_aligned_size, transform_sf_into_required_layout
from . import families as _families


__all__ = [
    "fp8_gemm_nt",
    "gemm_fp8_fp8_bf16_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "get_mk_alignment_for_contiguous_layout",
    "prepare_gate_up",
    "GateUpWeight",
    "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt",
    "wgrad_gemm_fp8_fp8_fp32_nt",
    "fp8_mqa_logits",
    "fp8_paged_mqa_logits",
    "get_paged_mqa_logits_metadata",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "transform_sf_into_required_layout",
    "set_num_sms",
    "get_num_sms",
    "set_pdl",
    "get_pdl",
    "jit_stats",
    "reset_jit_stats",
    "CompileError",
    "CudaError",
    "DgxError",
    "JitStrictError",
    "LayoutConversionWarning",
]


def _export_families() -> None:
    """Each registered family's public functions (dgx/families: Family.api) as dgx's own."""
    import importlib

    for family in _families.FAMILIES:
        if family.api:
            module = importlib.import_module(family.api)
            globals().update({name: getattr(module, name) for name in module.__all__})
            __all__.extend(name for name in module.__all__ if name not in __all__)


_export_families()


def __getattr__(name: str):
    # Torch helpers live in an optional module; reach them as dgx.per_token_cast_to_fp8 etc. too.
    if name in ("per_token_cast_to_fp8", "per_block_cast_to_fp8"):
        from . import torch_utils

        return getattr(torch_utils, name)
    # The torch operators (torch.ops.dgx.*): importing the module imports torch and registers them. dgx.deep_gemm:
    # DeepGEMM's current API on dgx (imports torch).
    if name in ("torch_ops", "deep_gemm"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dgx' has no attribute {name!r}")
