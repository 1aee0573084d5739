"""The FP8 GEMM family's launch arguments: what a call hands the kernel (:class:`Operands`), turned into tensor
maps and packed by member name into the kernel's parameters (:data:`dgx.kernels.fp8_gemm.INTERFACE`)."""

from __future__ import annotations

from collections import namedtuple

from .. import runtime
from ..intmath import ceil_div, round_up
from ..runtime import Swizzle
from .fp8_gemm import FUSED_INTERFACE, INTERFACE, LAYOUT_BATCHED, GemmConfig


# What a call gives for the tensor maps (and the members derived from them): addresses, extents (leading dimensions
# in elements), layouts; then those a call may leave out, with their values.
_MAP_INPUTS = ("a", "a_rows", "lda",  # A [rows, K]
               "b", "b_rows", "ldb",  # B [groups * N, K]
               "d", "d_rows", "ldd",  # D [rows, N]
               "sfa_layout")  # SFA: `sfa_layout.kb` rows of `sfa_layout.m` floats (M-major)
_MAP_DEFAULTS = {"sfb_layout": None,  # weight gradient: the per-row B scales (N-major), like SFA
                 "k": 0,  # K extent of the A and B maps when it is not the config's
                 # batched layout: A [rows, groups, K] and D [rows, groups, N], `num_groups` groups this many
                 # elements apart (rows lda / ldd apart)
                 "a_group_stride": 0, "d_group_stride": 0}
# Members pack_operands computes from the map inputs; every other member of INTERFACE is passed through as given.
_DERIVED = frozenset(("tmap_a", "tmap_b", "tmap_d", "tmap_sfa", "tmap_sfb", "sfa_rows", "sfa_stride", "d_ptr", "ld_d"))
# (The fused-epilogue kernels' struct is INTERFACE's members and then theirs: Operands holds them all, with defaults.)
_PASSED = tuple(p for p in FUSED_INTERFACE.params if p.name not in _DERIVED)
_PASSED_PLAIN = tuple(p for p in _PASSED if p.name in {q.name for q in INTERFACE.params})
_REQUIRED = list(_MAP_INPUTS) + [p.name for p in _PASSED if p.default is None]
_OPTIONAL = {**_MAP_DEFAULTS, **{p.name: p.default for p in _PASSED if p.default is not None}}

#: Addresses, extents and run-time values of everything a GEMM kernel reads and writes: the map inputs above, then
#: every member of the kernel's parameter struct (dgx.kernels.fp8_gemm.INTERFACE) not derived from them, under its
#: own name and with its default. A tuple, so that building one and looking it up per call stays cheap; build it
#: with keywords. A new run-time parameter is one INTERFACE line, its value here, and its use in the kernel.
Operands = namedtuple("Operands", _REQUIRED + list(_OPTIONAL), defaults=list(_OPTIONAL.values()))


def pack_operands(config: GemmConfig, ops: Operands) -> runtime.ParamPack:
    """The kernel's parameters for `ops`: tensor maps encoded, every member packed by name."""
    n, k = config.n, ops.k or config.k
    batched = config.layout == LAYOUT_BATCHED
    if batched:  # dims innermost first: K, group, row (a box is one group's rows, as the 2-D box's)
        tmap_a = runtime.encode_tensor_map("uint8", ops.a, (k, ops.num_groups, ops.a_rows),
                                           (ops.a_group_stride, ops.lda), (128, 1, config.box_rows_a), Swizzle.B128)
    else:
        tmap_a = runtime.encode_tensor_map_2d("uint8", ops.a, k, ops.a_rows, ops.lda, 128, config.box_rows_a,
                                              Swizzle.B128)
    tmap_b = runtime.encode_tensor_map_2d("uint8", ops.b, k, ops.b_rows, ops.ldb, 128, config.box_rows_b, Swizzle.B128)
    span = config.d_span
    d_swizzle = Swizzle(span if span > 16 else 0)
    wg_rows = config.block_m // config.math_warpgroups
    sfa = ops.sfa_layout
    tmap_sfa = runtime.encode_tensor_map_2d("float32", ops.sfa, sfa.m, sfa.kb, sfa.row_stride, config.block_m, 1)
    epilogue = config.epilogue
    if epilogue is not None and epilogue.fp8:  # FP8 D: one 128-byte (128-channel) span per tile, rows of a warpgroup
        tmap_sfb = _sfb_row_map(ops, n, k) if config.b_scales_in_stage else tmap_sfa
        tmap_d = runtime.encode_tensor_map_2d("uint8", ops.d, n // epilogue.out_cols_divisor, ops.d_rows, ops.ldd, 128,
                                              wg_rows, Swizzle.B128)
    elif config.wgrad:  # FP32 D (TMA reduce-add or store); B's scales get a map like A's
        sfb = ops.sfb_layout
        tmap_sfb = runtime.encode_tensor_map_2d("float32", ops.sfb, sfb.m, sfb.kb, sfb.row_stride, config.block_n, 1)
        tmap_d = runtime.encode_tensor_map_2d("float32", ops.d, n, ops.d_rows, ops.ldd * 4, span // 4, wg_rows, d_swizzle)
    else:
        if batched:
            tmap_d = runtime.encode_tensor_map("bfloat16", ops.d, (n, ops.num_groups, ops.d_rows),
                                               (ops.d_group_stride * 2, ops.ldd * 2), (span // 2, 1, wg_rows), d_swizzle)
        else:
            tmap_d = runtime.encode_tensor_map_2d("bfloat16", ops.d, config.d_cols, ops.d_rows, ops.ldd * 2,
                                                  span // 2, wg_rows, d_swizzle)
        if config.b_scales_in_stage:
            tmap_sfb = _sfb_row_map(ops, n, k)
        else:
            # The kernel reads no B-scale map here (GemmConfig.b_scales_in_stage is False); the member still
            # needs a valid CUtensorMap, and the A-scale map is one.
            tmap_sfb = tmap_sfa
    passed = _PASSED if epilogue is not None else _PASSED_PLAIN
    extra = {}  # the members of what comes at run time, last (GemmConfig.interface)
    if config.runtime_n:
        extra["n"] = n
    if config.runtime_k:
        extra["k"] = config.k
    if config.runtime_stream_b:
        extra["stream_b"] = int(config.stream_b)
    return config.interface.pack(
        **extra,
        tmap_a=tmap_a,
        tmap_b=tmap_b,
        tmap_d=tmap_d,
        tmap_sfa=tmap_sfa,
        tmap_sfb=tmap_sfb,
        sfa_rows=sfa.m,
        sfa_stride=sfa.row_stride // 4,
        d_ptr=ops.d,
        ld_d=ops.ldd,
        **{p.name: getattr(ops, p.name) for p in passed},
    )


def _sfb_row_map(ops: Operands, n: int, k: int):
    """The B scales as one row of floats from the 16-byte boundary at or below SFB, in boxes of 4 (the BF16
    one-slice tiles load them into each stage). cuTensorMapEncodeTiled refuses rank 1 as called here, so a
    map of one row."""
    if ops.sfb % 4:
        raise ValueError(f"SFB: expected a float32 address (4-byte aligned); got 0x{ops.sfb:x}")
    lead = ops.sfb % 16
    count = ops.num_groups * ceil_div(n, 128) * ceil_div(k, 128) + lead // 4
    return runtime.encode_tensor_map_2d("float32", ops.sfb - lead, count, 1, round_up(count * 4, 16), 4, 1)
