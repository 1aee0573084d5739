"""The FP8 GEMM family's launch arguments: what a call hands the kernel (:class:`Operands`), turned into tensor
maps and packed by member name into the kernel's parameters (:data:`dgx.kernels.fp8_gemm.INTERFACE`)."""

from __future__ import annotations

from typing import NamedTuple

from .. import runtime
from ..intmath import ceil_div, round_up
from ..layout import SfaTma
from ..runtime import Swizzle
from .fp8_gemm import INTERFACE, GemmConfig


class Operands(NamedTuple):
    """Addresses and 2-D extents of everything a GEMM kernel reads and writes (the tensor maps' input).
    A tuple, so that building one and looking it up per call stays cheap; build it with keywords.

    A and D are seen as [rows, K] / [rows, N], B as [groups * N, K]; SFA as `sfa_layout.kb` rows of
    `sfa_layout.m` floats (M-major). Leading dimensions are in elements, addresses are device addresses."""

    a: int
    a_rows: int
    lda: int
    b: int
    b_rows: int
    ldb: int
    d: int
    d_rows: int
    ldd: int
    sfa: int
    sfa_layout: SfaTma
    sfb: int
    m: int  # the kernel's m: rows (masked, K-grouped: rows per group)
    grouped_layout: int = 0  # address of m_indices, masked_m or the K-grouped groups' K
    groups: int = 1
    sfb_layout: SfaTma | None = None  # weight gradient: the per-row B scales (N-major), like SFA
    k: int = 0  # K extent of the A and B maps when it is not the config's
    group_maps: int = 0  # K-grouped: device address of the groups' tensor maps of A and B
    accumulate: bool = False  # weight gradient: D holds C and the kernel adds to it (else D is overwritten)


def pack_operands(config: GemmConfig, ops: Operands) -> runtime.ParamPack:
    """The kernel's parameters for `ops`: tensor maps encoded, every member packed by name."""
    n, k = config.n, ops.k or config.k
    tmap_a = runtime.encode_tensor_map_2d("uint8", ops.a, k, ops.a_rows, ops.lda, 128, config.box_rows_a, Swizzle.B128)
    tmap_b = runtime.encode_tensor_map_2d("uint8", ops.b, k, ops.b_rows, ops.ldb, 128, config.box_rows_b, Swizzle.B128)
    span = config.d_span
    d_swizzle = Swizzle(span if span > 16 else 0)
    wg_rows = config.block_m // config.math_warpgroups
    sfa = ops.sfa_layout
    tmap_sfa = runtime.encode_tensor_map_2d("float32", ops.sfa, sfa.m, sfa.kb, sfa.row_stride, config.block_m, 1)
    if config.wgrad:  # FP32 D (TMA reduce-add or store); B's scales get a map like A's
        sfb = ops.sfb_layout
        tmap_sfb = runtime.encode_tensor_map_2d("float32", ops.sfb, sfb.m, sfb.kb, sfb.row_stride, config.block_n, 1)
        tmap_d = runtime.encode_tensor_map_2d("float32", ops.d, n, ops.d_rows, ops.ldd * 4, span // 4, wg_rows, d_swizzle)
    else:
        tmap_d = runtime.encode_tensor_map_2d("bfloat16", ops.d, config.d_cols, ops.d_rows, ops.ldd * 2, span // 2,
                                              wg_rows, d_swizzle)
        if config.b_scales_in_stage:
            tmap_sfb = _sfb_row_map(ops, n, k)
        else:
            # The kernel reads no B-scale map here (GemmConfig.b_scales_in_stage is False); the member still
            # needs a valid CUtensorMap, and the A-scale map is one.
            tmap_sfb = tmap_sfa
    return INTERFACE.pack(
        tmap_a=tmap_a,
        tmap_b=tmap_b,
        tmap_d=tmap_d,
        tmap_sfa=tmap_sfa,
        tmap_sfb=tmap_sfb,
        sfb=ops.sfb,
        sfa=ops.sfa,
        sfa_rows=sfa.m,
        sfa_stride=sfa.row_stride // 4,
        m=ops.m,
        grouped_layout=ops.grouped_layout,
        num_groups=ops.groups,
        d_ptr=ops.d,
        ld_d=ops.ldd,
        accumulate=int(ops.accumulate),
        group_maps=ops.group_maps,
    )


def _sfb_row_map(ops: Operands, n: int, k: int):
    """The B scales as one row of floats from the 16-byte boundary at or below SFB, in boxes of 4 (the BF16
    one-slice tiles load them into each stage). cuTensorMapEncodeTiled refuses rank 1 as called here, so a
    map of one row."""
    if ops.sfb % 4:
        raise ValueError(f"SFB: expected a float32 address (4-byte aligned); got 0x{ops.sfb:x}")
    lead = ops.sfb % 16
    count = ops.groups * ceil_div(n, 128) * ceil_div(k, 128) + lead // 4
    return runtime.encode_tensor_map_2d("float32", ops.sfb - lead, count, 1, round_up(count * 4, 16), 4, 1)
