"""The BF16 GEMM family (ptx/bf16_gemm.cuh): D = A . B^T (+ C) with FP32 accumulation.

One kernel template covers A and B each K-major or MN-major (the nt / nn / tn / tt forms, natively: wgmma reads either
major-ness from shared memory), D BF16 or FP32, C added in place, and every scheduler layout (dense, M-grouped
contiguous with m_indices or prefix sums, masked, K-grouped). The family's surface, in one place:

- :class:`Bf16GemmConfig`: everything a kernel compiles in; ``render()`` gives its jit.KernelSource;
- :func:`choose`: the heuristic's config for a problem (pure Python);
- :func:`warmup_configs`: every config the heuristic can pick for a (kind, N, K, groups, max_m) warm-up entry;
- :data:`INTERFACE`, :class:`Bf16Operands`, :func:`pack_operands`: the kernel's parameters and how a call fills them;
- the entry points themselves are dgx.bf16's.
"""

from __future__ import annotations

from .bf16_gemm_args import Bf16Operands, pack_operands
from .bf16_gemm_config import (
    FORMS,
    INTERFACE,
    K_ATOMS,
    LAYOUT_CONTIGUOUS,
    LAYOUT_CONTIGUOUS_PSUM,
    LAYOUT_DENSE,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    MAJORS,
    OUT_DTYPES,
    SCHEDULES,
    SHARE_A,
    SHARE_B,
    SHARE_NONE,
    SMEM_LIMIT,
    MAX_STAGES,
    Bf16GemmConfig,
    max_stages,
    smem_bytes,
    stage_bytes,
    validate,
)
from .bf16_gemm_heuristics import KIND_LAYOUTS, choose, warmup_configs

__all__ = [
    "Bf16GemmConfig", "Bf16Operands", "FORMS", "INTERFACE", "KIND_LAYOUTS", "K_ATOMS", "LAYOUT_CONTIGUOUS",
    "LAYOUT_CONTIGUOUS_PSUM", "LAYOUT_DENSE", "LAYOUT_K_GROUPED", "LAYOUT_MASKED", "MAJORS", "MAX_STAGES",
    "OUT_DTYPES", "SCHEDULES", "SHARE_A", "SHARE_B", "SHARE_NONE", "SMEM_LIMIT", "choose", "max_stages", "pack_operands",
    "smem_bytes", "stage_bytes", "validate", "warmup_configs",
]
