"""The DeepGEMM names of the newer kernel families: ONE table, name -> implementation.

Each line is a stand-in with DeepGEMM's signature that raises FamilyMissingError ("dgx has no BF16 GEMM family
yet"); every registered family (dgx/families) that names a module in ``Family.deep_gemm`` replaces the lines of the
names it implements with its functions (which must keep DeepGEMM's signatures: tests/test_deep_gemm_api.py checks
every name against the recorded API), so a new family changes nothing here.

dgx.deep_gemm, dgx.deep_gemm.legacy and DeepGEMM's test runner take these names from here only.
"""

from __future__ import annotations

from .standins import pending

BF16 = "BF16 GEMM"
EINSUM = "einsum"
HC_PRENORM = "HyperConnection pre-norm GEMM (tf32_hc_prenorm_gemm)"
SKIP_HEAD_MID = "head-split FP8 GEMM (fp8_gemm_nt_skip_head_mid)"
MQA_FP4 = "fp8_fp4 MQA logits (DeepGEMM 2.6's indexer API)"

# name -> implementation (top level of deep_gemm)
TOP_LEVEL = {
    "bf16_gemm_nt": pending("bf16_gemm_nt", BF16),
    "bf16_gemm_nn": pending("bf16_gemm_nn", BF16),
    "bf16_gemm_tn": pending("bf16_gemm_tn", BF16),
    "bf16_gemm_tt": pending("bf16_gemm_tt", BF16),
    "m_grouped_bf16_gemm_nt_contiguous": pending("m_grouped_bf16_gemm_nt_contiguous", BF16),
    "m_grouped_bf16_gemm_nn_contiguous": pending("m_grouped_bf16_gemm_nn_contiguous", BF16),
    "m_grouped_bf16_gemm_nt_masked": pending("m_grouped_bf16_gemm_nt_masked", BF16),
    "bf16_m_grouped_gemm_nt_masked": pending("bf16_m_grouped_gemm_nt_masked", BF16),  # DeepGEMM's older alias
    "k_grouped_bf16_gemm_tn_contiguous": pending("k_grouped_bf16_gemm_tn_contiguous", BF16),
    "einsum": pending("einsum", EINSUM),
    "fp8_einsum": pending("fp8_einsum", EINSUM),
    "tf32_hc_prenorm_gemm": pending("tf32_hc_prenorm_gemm", HC_PRENORM),
    "fp8_gemm_nt_skip_head_mid": pending("fp8_gemm_nt_skip_head_mid", SKIP_HEAD_MID),
    "fp8_fp4_mqa_logits": pending("fp8_fp4_mqa_logits", MQA_FP4),
    "fp8_fp4_paged_mqa_logits": pending("fp8_fp4_paged_mqa_logits", MQA_FP4),
}

# name -> implementation (deep_gemm.legacy: DeepGEMM's Triton BF16 grouped GEMMs for A100, same family)
LEGACY = {
    "m_grouped_bf16_gemm_nt_contiguous_tl": pending("m_grouped_bf16_gemm_nt_contiguous_tl", BF16, "deep_gemm.legacy"),
    "m_grouped_bf16_gemm_nn_contiguous_tl": pending("m_grouped_bf16_gemm_nn_contiguous_tl", BF16, "deep_gemm.legacy"),
    "a_fused_m_grouped_bf16_gemm_nt_contiguous_tl": pending(
        "a_fused_m_grouped_bf16_gemm_nt_contiguous_tl", BF16, "deep_gemm.legacy"),
    "a_fused_m_grouped_bf16_gemm_nn_contiguous_tl": pending(
        "a_fused_m_grouped_bf16_gemm_nn_contiguous_tl", BF16, "deep_gemm.legacy"),
    "a_fused_k_grouped_bf16_gemm_tn_contiguous_tl": pending(
        "a_fused_k_grouped_bf16_gemm_tn_contiguous_tl", BF16, "deep_gemm.legacy"),
    "b_fused_k_grouped_bf16_gemm_tn_contiguous_tl": pending(
        "b_fused_k_grouped_bf16_gemm_tn_contiguous_tl", BF16, "deep_gemm.legacy"),
}


def _registered() -> tuple[dict, dict]:
    """DeepGEMM's names the registered families implement: (top level, legacy)."""
    import importlib

    from .. import families

    top, legacy = {}, {}
    for family in families.FAMILIES:
        if family.deep_gemm:
            module = importlib.import_module(family.deep_gemm)
            top.update(getattr(module, "DEEP_GEMM", {}))
            legacy.update(getattr(module, "DEEP_GEMM_LEGACY", {}))
    return top, legacy


_top, _legacy = _registered()
TOP_LEVEL.update(_top)
LEGACY.update(_legacy)
