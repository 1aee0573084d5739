"""DeepGEMM's Python API on dgx's sm_90 kernels: ``import dgx.deep_gemm as deep_gemm`` is the whole switch (or, with
``DGX_AS_DEEP_GEMM=1`` in the environment, a plain ``import deep_gemm``: see dgx/deep_gemm_alias.py).

Every public name of DeepGEMM's package at the commit recorded in ``api_54e2261.json`` is here, with DeepGEMM's
parameters and defaults (tests/test_deep_gemm_api.py checks them), in four kinds:

- run by dgx's kernels: the FP8 GEMMs (dense, M-grouped contiguous and masked, K-grouped, the ``fp8_fp4_*`` names
  with FP8 operands), the indexer's ``fp8_mqa_logits``/``fp8_paged_mqa_logits``, the layout and quantisation
  helpers (``utils``, plain torch where DeepGEMM's are), the runtime settings, ``testing``;
- ``cublaslt_gemm_{nt,nn,tn,tt}``: through torch (cuBLAS/cuBLASLt);
- sm_100 only (FP4 operands, the Mega MoE kernels, ``k_grouped_fp8_gemm_tn_contiguous``, varlen ``indices``): raise
  dgx.errors.Sm100OnlyError, a NotImplementedError;
- the names of newer kernel families (BF16 GEMMs, einsum, the HyperConnection GEMM, ``fp8_gemm_nt_skip_head_mid``,
  the ``fp8_fp4_*mqa_logits`` API, ``legacy``): ``pending.py``'s one table, where each registered family
  (dgx/families: ``Family.deep_gemm``) puts its functions; a name no registered family implements raises
  dgx.errors.FamilyMissingError naming the family.

See the submodules for what each accepts beyond DeepGEMM and what it ignores on sm_90.
"""

from . import legacy, mega, testing, utils
from .cublaslt import cublaslt_gemm_nn, cublaslt_gemm_nt, cublaslt_gemm_tn, cublaslt_gemm_tt
from .fp8 import (
    fp8_fp4_gemm_nn,
    fp8_fp4_gemm_nt,
    fp8_fp4_gemm_tn,
    fp8_fp4_gemm_tt,
    fp8_gemm_nn,
    fp8_gemm_nt,
    fp8_gemm_tn,
    fp8_gemm_tt,
    fp8_m_grouped_gemm_nt_masked,
    k_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nn_contiguous,
    m_grouped_fp8_fp4_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nt_masked,
    m_grouped_fp8_gemm_nn_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
    transform_sf_into_required_layout,
)
from .mega import (
    SymmBuffer,
    bf16_mega_moe,
    fp8_fp4_mega_moe,
    get_symm_buffer_for_mega_moe,
    transform_weights_for_mega_moe,
)
from .mqa import fp8_mqa_logits, fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from .pending import TOP_LEVEL as _PENDING
from .settings import (
    get_num_sms,
    get_pdl,
    get_tc_util,
    set_block_size_multiple_of,
    set_ignore_compile_dims,
    set_num_sms,
    set_pdl,
    set_tc_util,
)
from .standins import sm100_only as _sm100_only
from .utils import *  # noqa: F403 - DeepGEMM's package re-exports every name of its utils
from .utils import __all__ as _utils_names
from .utils import dist, layout, math  # noqa: F401 - DeepGEMM's star import brings these modules too

__version__ = "2.6.1"  # the DeepGEMM release whose API this mirrors (dgx's own version: dgx.__version__)


k_grouped_fp8_gemm_tn_contiguous = _sm100_only("k_grouped_fp8_gemm_tn_contiguous",
                                               "the K-grouped FP8 GEMM with MN-major operands is")

# The families dgx is building: one line each in pending.py.
bf16_gemm_nt = _PENDING["bf16_gemm_nt"]
bf16_gemm_nn = _PENDING["bf16_gemm_nn"]
bf16_gemm_tn = _PENDING["bf16_gemm_tn"]
bf16_gemm_tt = _PENDING["bf16_gemm_tt"]
m_grouped_bf16_gemm_nt_contiguous = _PENDING["m_grouped_bf16_gemm_nt_contiguous"]
m_grouped_bf16_gemm_nn_contiguous = _PENDING["m_grouped_bf16_gemm_nn_contiguous"]
m_grouped_bf16_gemm_nt_masked = _PENDING["m_grouped_bf16_gemm_nt_masked"]
bf16_m_grouped_gemm_nt_masked = _PENDING["bf16_m_grouped_gemm_nt_masked"]
k_grouped_bf16_gemm_tn_contiguous = _PENDING["k_grouped_bf16_gemm_tn_contiguous"]
einsum = _PENDING["einsum"]
fp8_einsum = _PENDING["fp8_einsum"]
tf32_hc_prenorm_gemm = _PENDING["tf32_hc_prenorm_gemm"]
fp8_gemm_nt_skip_head_mid = _PENDING["fp8_gemm_nt_skip_head_mid"]
fp8_fp4_mqa_logits = _PENDING["fp8_fp4_mqa_logits"]
fp8_fp4_paged_mqa_logits = _PENDING["fp8_fp4_paged_mqa_logits"]

__all__ = [
    # runtime settings
    "set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_ignore_compile_dims",
    "set_block_size_multiple_of", "set_pdl", "get_pdl",
    # cuBLASLt (through torch)
    "cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt",
    # FP8 GEMMs
    "fp8_fp4_gemm_nt", "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt", "fp8_gemm_nt_skip_head_mid",
    "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
    # BF16 GEMMs
    "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "bf16_m_grouped_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous",
    # einsum, attention (the indexer), HyperConnection, layout
    "einsum", "fp8_einsum",
    "fp8_fp4_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_fp4_paged_mqa_logits", "fp8_mqa_logits",
    "fp8_paged_mqa_logits",
    "tf32_hc_prenorm_gemm",
    "transform_sf_into_required_layout",
    # Mega MoE (sm_100)
    "SymmBuffer", "get_symm_buffer_for_mega_moe", "transform_weights_for_mega_moe", "fp8_fp4_mega_moe", "bf16_mega_moe",
    # deep_gemm.utils
    *_utils_names,
]
