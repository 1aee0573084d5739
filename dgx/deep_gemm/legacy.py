"""DeepGEMM's ``deep_gemm.legacy``: its Triton BF16 grouped GEMMs written for A100 (``*_tl``). They belong to the BF16
GEMM family; the names and DeepGEMM's signatures come from dgx.deep_gemm.pending (the one table of names whose
family dgx is building). The Triton kernels and tuning configs that module also exposes are not provided."""

from __future__ import annotations

from .pending import LEGACY

__all__ = [
    "m_grouped_bf16_gemm_nt_contiguous_tl",
    "m_grouped_bf16_gemm_nn_contiguous_tl",
    "a_fused_m_grouped_bf16_gemm_nt_contiguous_tl",
    "a_fused_m_grouped_bf16_gemm_nn_contiguous_tl",
    "a_fused_k_grouped_bf16_gemm_tn_contiguous_tl",
    "b_fused_k_grouped_bf16_gemm_tn_contiguous_tl",
]

m_grouped_bf16_gemm_nt_contiguous_tl = LEGACY["m_grouped_bf16_gemm_nt_contiguous_tl"]
m_grouped_bf16_gemm_nn_contiguous_tl = LEGACY["m_grouped_bf16_gemm_nn_contiguous_tl"]
a_fused_m_grouped_bf16_gemm_nt_contiguous_tl = LEGACY["a_fused_m_grouped_bf16_gemm_nt_contiguous_tl"]
a_fused_m_grouped_bf16_gemm_nn_contiguous_tl = LEGACY["a_fused_m_grouped_bf16_gemm_nn_contiguous_tl"]
a_fused_k_grouped_bf16_gemm_tn_contiguous_tl = LEGACY["a_fused_k_grouped_bf16_gemm_tn_contiguous_tl"]
b_fused_k_grouped_bf16_gemm_tn_contiguous_tl = LEGACY["b_fused_k_grouped_bf16_gemm_tn_contiguous_tl"]
