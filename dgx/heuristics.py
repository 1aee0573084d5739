"""Config choice for the FP8 GEMM kernels: pure Python, no GPU, unit-tested on the CPU.

The model: a persistent grid of `num_sms` CTAs (or num_sms / 2 clusters) runs ceil(units / slots)
waves. A tile costs, per 128 of K, the cycles measured for the kernel on an H100 (docs/PERFLOG.md,
2026-11-22): one math warpgroup (BLOCK_M 64) spends ~650 clk per k-block on its dependent chain of
four wgmma plus promotion, growing slowly with BLOCK_N; two math warpgroups cost a fixed part per
k-block (larger for BLOCK_M 256, which runs two m64 slices per warpgroup) plus a part proportional to
the tile's area, and 20% more where the kernel picks a tile's B-scale block per column group at run
time. Plus an epilogue per tile. The lowest estimate wins; ties go to larger tiles. Constants only need
to rank configs the way the device does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import lru_cache, wraps

from . import env
from .intmath import ceil_div
from .kinds import Layout
from .kernels.fp8_epilogue import Epilogue
from .kernels.fp8_gemm import (
    SHARE_A,
    SHARE_B,
    SHARE_NONE,
    SMEM_LIMIT,
    GemmConfig,
    runtime_k_allowed,
    runtime_n_allowed,
    runtime_stream_b_allowed,
    scale_split_compiled_in,
    smem_bytes,
    validate_blocks,
    validate_head_splits,
)

ONE_WG_BASE_CLK = 590.0  # per k-block, BLOCK_M 64, BLOCK_N 16 (measured)
ONE_WG_CLK_PER_COL = 1.8  # per extra output column (measured: 64x128 ~ 850 clk)
ONE_WG_PAIR_PENALTY = 1.08  # multicast costs the latency-bound small tiles (measured 5-12%)
# Two math warpgroups, per k-block: base + per-element cost, fitted to tiles of 128x96..160 and 256x64..128
# timed on 4096x{2112,4096,24576} (a 128x128 tile: ~1034 clk).
TWO_WG_BASE_CLK = {128: 430.0, 256: 563.0}
TWO_WG_CLK_PER_ELEM = 0.0369
# BLOCK_N whose split between two B-scale blocks is a run-time value in the kernel (a select per column
# group): 128x144, 256x80 and 256x88 ran 18-31% slower than the fit.
TWO_WG_RUNTIME_SPLIT_PENALTY = 1.2
# The weight gradient with deferred promotion (128 rows, BLOCK_N 64-112): its per-k-block cost fitted to
# 128x96 and 128x112 on 16384x7168x4096 (PERFLOG exp. 19) has a fixed part of ~240 clk instead of 430, and
# no chain term (a warpgroup's next MMAs are issued before its promotion).
WGRAD_DEFERRED_BASE_CLK = 240.0
STREAM_BYTES_PER_CLK_PER_SM = 57  # what one SM's TMA ring takes in (~100 GB/s)
# Contiguous MoE GEMMs with 128-row tiles and B shared along M by 2-CTA clusters: 1-7% faster than unshared
# on the four contiguous anchors (128x160, PERFLOG experiment 12): L2 throughput was the limit (84% of peak
# unshared, 76% shared). Dense GEMMs do not take it: their M=4096 choices (256-row tiles) gained nothing.
CONTIGUOUS_SHARED_B_FACTOR = 0.95
SHARED_B_MIN_WAVES = 4
# Where the model picks 128x160 sharing B on the contiguous layout, 128x192 sharing B (DeepGEMM 2.6.1's contiguous
# tile) ran 3.4-7.2% faster on all four contiguous anchors (H200, tests/device/moe_ab.py, issue 44): fewer L2 bytes
# per FLOP on an L2-bound tile, which the cycle model does not see. Taken as measured, not modelled.
CONTIGUOUS_WIDE_BLOCK_N = 192
CONTIGUOUS_WIDE_GAIN = 1.05
EPILOGUE_BYTES_PER_CLK = 64
MAX_STAGES = 16
# One-warpgroup (64-row) tiles keep at most this many bytes of stages (A, B, A scales) in flight: on the M=64
# anchors the fastest stage count of each tile (64x16 s16, 64x32 s13, 64x128 s6, 64x192 s5; 64x56 s10-12) is
# the most that stays within 168 KiB; filling shared memory was 2-5% slower on four of them (PERFLOG exp. 14).
ONE_WG_RING_BYTES = 168 * 1024

# Deferred promotion (a second accumulator set; PERFLOG experiment 16) paid on every 64-row tile measured (up to
# 9%: their k-blocks are latency-bound) and on 128-row tiles that run in one wave (3-7%); it cost 128-row tiles
# in two or more waves up to 4% (128x96 on 128x24576x1536, 128x128 on 4096x4096x7168) and moved the masked
# anchors by +-2%. So: 64-row tiles, and 128-row tiles whose grid is one wave.
DEFER_MAX_WAVES_TWO_WG = 1

# 128-row BF16 tiles wider than this compile without spills (up to 192: DeepGEMM 2.6.1's contiguous 128x192), but
# have not been timed here; the heuristic leaves them out until tests/device/moe_ab.py measures them (issue 44).
MAX_BLOCK_N_128 = 160

BLOCK_MS = (64, 128, 256)
BLOCK_NS = tuple(range(16, 257, 8))


@dataclass(frozen=True)
class Choice:
    config: GemmConfig
    num_tiles: int  # scheduler units: tiles, or tile pairs for 2-CTA clusters
    waves: int
    est_cycles: float


def max_stages(block_m: int, block_n: int, wgrad: bool = False, split_k: int = 1) -> int:
    """The most pipeline stages that fit in shared memory next to the staged output tile (split-K: the
    partial tile)."""
    tile = smem_bytes(block_m, block_n, 0, wgrad, False, split_k)
    per_stage = smem_bytes(block_m, block_n, 1, wgrad, False, split_k) - tile
    return min((SMEM_LIMIT - tile) // per_stage, MAX_STAGES)


def pipeline_stages(block_m: int, block_n: int) -> int:
    """The stage count the M-grouped and dense layouts run a tile with: as many as fit, and for
    one-warpgroup tiles no more than ONE_WG_RING_BYTES of stages (A, B, A scales) in flight."""
    stages = max_stages(block_m, block_n)
    if block_m == 64:
        stage_bytes = smem_bytes(block_m, block_n, 1) - smem_bytes(block_m, block_n, 0)
        stages = min(stages, max(ONE_WG_RING_BYTES // stage_bytes, 3))
    return stages


def with_deferred_promotion(config: GemmConfig, units: int, num_sms: int) -> GemmConfig:
    """`config`, with deferred promotion where it pays and fits in registers: every weight gradient (its promotion,
    a scale per column, is twice the BF16 kernel's work: 4-12% on the benchmark's shapes, PERFLOG exp. 19); BF16
    tiles as DEFER_MAX_WAVES_TWO_WG says, but not where the B-scale split is compiled in."""
    if validate_blocks(config.block_m, config.block_n, config.pair, defer=True, wgrad=config.wgrad):
        return config
    if config.wgrad:
        return replace(config, defer=True)
    if 128 % config.block_n and scale_split_compiled_in(config.block_n):
        return config  # the k-loop is compiled once per B-scale split: 7x the compile time (6 s on 64x96)
    waves = ceil_div(units, max(num_sms // config.cluster, 1))
    if config.block_m == 64 or waves <= DEFER_MAX_WAVES_TWO_WG:
        return replace(config, defer=True)
    return config


def with_one_raster_band(config: GemmConfig) -> GemmConfig:
    """`config` walking all of N in one raster band where the default bands would leave a ragged last one (fewer
    than two bands' worth of n-blocks): that band re-reads all of A for a few columns. Dense weight gradients,
    7168x2112 (17 n-blocks of 128, 21 of 104; bands of 16 + 1 / 16 + 5): 162.8 -> 158.9 µs at K 4096, 289.3 ->
    282.2 at K 8192 (PERFLOG, wgrad raster). Wider bands on every shape were slower (up to 10%)."""
    n_blocks = ceil_div(config.n, config.block_n)
    if config.group_n < n_blocks < 2 * config.group_n:
        return replace(config, group_n=n_blocks)
    return config


def with_stage_rounds(config: GemmConfig) -> GemmConfig:
    """`config` with one stage fewer where that makes its k-block count a multiple of the stage count, for
    the contiguous layout's BF16 one-slice tiles: their k-loop then runs rounds of compile-time stages (every
    tile starts at stage 0), 128 instead of 146 instructions per k-block on 128x160. Measured on the four
    contiguous anchors: 4-6% faster with 4 stages than with 5 (PERFLOG exp. 28, 30). Not taken for the masked
    layout (128x128, 1-3 tiles per SM: +2% to -4.5%) nor dense 128x96 (12 k-blocks: 3% slower with 6 than 7)."""
    if not config.b_scales_in_stage or config.layout != Layout.CONTIGUOUS:
        return config
    k_blocks = ceil_div(config.k, 128)
    for stages in (config.stages, config.stages - 1):
        if stages >= 3 and k_blocks % stages == 0:
            return replace(config, stages=stages)
    return config


# Below this K a decode tile's B stream is short, and evict-first B ran 2-6% slower with a clean L2 (N 24576 and
# 32768 at K 1536 and 512; PERFLOG, L2 policy).
STREAM_B_MIN_K = 2048
# Tiles narrower than 32 columns stream B evict-first only when B holds at least this many bytes: with the k-loop
# run as one chunk, 64x2112x7168 and 128x2112x7168 (15.1 MB) ran 7% faster after the flush and within 0.5% with a
# clean L2, 64x1536x7168 (11 MB) 2% faster and 4% slower clean, 64x576x7168 (4 MB) no faster (PERFLOG 2026-11-24,
# fourth session).
STREAM_B_NARROW_MIN_BYTES = 12 << 20


def with_streamed_b(config: GemmConfig, m: int) -> GemmConfig:
    """`config` with B's loads marked L2 evict-first where the grid has one row of M tiles, so every B tile is read
    once: the stream then leaves other kernels' lines (and their pending write-backs) in L2. Measured on the dense
    decode shapes (M 64 and 128, kernel-only, PERFLOG L2 policy): 6-15% faster after the benchmark's flush
    (docs/METHOD.md), which leaves L2 dirty, and within 1% with a clean L2, except 64-row N 4096 K 7168 (2% slower
    clean, 12% faster dirty). Not for short K (STREAM_B_MIN_K), nor for 16-column tiles over less than STREAM_B_NARROW_MIN_BYTES of
    B."""
    if config.layout != Layout.DENSE or config.wgrad or config.split_k > 1:
        return config
    if ceil_div(m, config.block_m) > 1 or config.k < STREAM_B_MIN_K:
        return config
    if config.block_n < 32 and config.n * config.k < STREAM_B_NARROW_MIN_BYTES:
        return config
    return replace(config, stream_b=True)


def _require_positive(what: str, **values: int) -> None:
    if any(v <= 0 for v in values.values()):
        raise ValueError(f"{what} needs positive {', '.join(values)}; got {', '.join(str(v) for v in values.values())}")


def tile_cycles(block_m: int, block_n: int, k: int, pair: int = SHARE_NONE, pow2_n: bool = False,
                defer: bool = False, wgrad: bool = False) -> float:
    """Estimated cycles of one tile: k-blocks x per-k-block cost, plus the epilogue. `pow2_n`: charge the
    run-time-split penalty to every BLOCK_N that is not a power of two (kernels measured only with those).
    `defer`: the tile promotes deferred; a one-warpgroup tile then pays the run-time split too (its chain
    no longer hides the per-column-group select: 64x56 and 64x72 ran 2-12% slower than 64x64 on the
    M=64, N=7168 anchors, PERFLOG exp. 16); a deferred two-warpgroup weight gradient has its own fixed part."""
    k_blocks = ceil_div(k, 128)
    chain = ONE_WG_BASE_CLK + ONE_WG_CLK_PER_COL * (block_n - 16)  # every warpgroup pays this latency
    if block_m == 64:
        mma = chain * (ONE_WG_PAIR_PENALTY if pair != SHARE_NONE else 1.0)
        if defer and not scale_split_compiled_in(block_n):
            mma *= TWO_WG_RUNTIME_SPLIT_PENALTY
    else:
        base = WGRAD_DEFERRED_BASE_CLK if defer and wgrad else TWO_WG_BASE_CLK[block_m]
        rate = base + TWO_WG_CLK_PER_ELEM * block_m * block_n
        # (The weight gradient scales B per column: no split to select.)
        if not wgrad and not scale_split_compiled_in(block_n) or pow2_n and block_n & (block_n - 1):
            rate *= TWO_WG_RUNTIME_SPLIT_PENALTY
        # A deferred weight gradient hides the chain behind the other accumulator set's MMAs.
        mma = rate if defer and wgrad else max(chain, rate)
    load = (block_m + block_n) * 128 / STREAM_BYTES_PER_CLK_PER_SM
    epilogue = block_m * block_n * 2 / EPILOGUE_BYTES_PER_CLK
    return k_blocks * max(mma, load) + epilogue


def candidates(m: int, n: int) -> list[tuple[int, int, int]]:
    """(block_m, block_n, pair) the kernel supports that make sense for M x N."""
    out = []
    for bm in BLOCK_MS:
        if bm == 256 and m <= 128 or bm == 128 and m <= 64:
            continue  # the tile would be mostly padding
        for bn in BLOCK_NS:
            if max_stages(bm, bn) < 3 or bm == 128 and bn > MAX_BLOCK_N_128:
                continue
            for pair in (SHARE_NONE, SHARE_A, SHARE_B):
                if pair == SHARE_A and ceil_div(n, bn) < 2 or pair == SHARE_B and ceil_div(m, bm) < 2:
                    continue
                if not validate_blocks(bm, bn, pair):
                    out.append((bm, bn, pair))
    return out


def dense_options(m: int, n: int, k: int, num_sms: int):
    """(config, scheduler units) of every dense FP8 GEMM kernel the heuristic weighs for M x N x K."""
    for bm, bn, pair in candidates(m, n):
        if pair != SHARE_NONE and num_sms < 2:
            continue
        config = GemmConfig(n, k, bm, bn, pipeline_stages(bm, bn), pair=pair)
        units = config.units(m)
        yield with_streamed_b(with_stage_rounds(with_deferred_promotion(config, units, num_sms)), m), units


def _offers_runtime_shape(choose):
    """Wraps a cached choose_* function: its config as with_runtime_shape makes it (N, K and B's L2 policy at run
    time under DGX_GEMM_RUNTIME_N, _K and _STREAM_B). Applied after the cache, so the variables are read on every
    call."""

    @wraps(choose)
    def choose_with_option(*args, **kwargs) -> Choice:
        choice = choose(*args, **kwargs)
        config = with_runtime_shape(choice.config)
        return choice if config is choice.config else replace(choice, config=config)

    choose_with_option.cache_clear = choose.cache_clear
    return choose_with_option


def with_runtime_shape(config: GemmConfig) -> GemmConfig:
    """`config` with N, K and B's L2 policy at run time as DGX_GEMM_RUNTIME_N, DGX_GEMM_RUNTIME_K and
    DGX_GEMM_RUNTIME_STREAM_B ask, where it allows them (GemmConfig.runtime_n / runtime_k / runtime_stream_b: not
    with head splits or fused epilogues; K where the k-loop needs no compile-time k-block count; the policy for the
    dense layout). Unchanged with none set."""
    runtime_n = env.gemm_runtime_n() and runtime_n_allowed(config)
    runtime_k = env.gemm_runtime_k() and runtime_k_allowed(config)
    runtime_stream_b = env.gemm_runtime_stream_b() and runtime_stream_b_allowed(config)
    if not (runtime_n or runtime_k or runtime_stream_b):
        return config
    return replace(config, runtime_n=runtime_n or config.runtime_n, runtime_k=runtime_k or config.runtime_k,
                   runtime_stream_b=runtime_stream_b or config.runtime_stream_b)


@_offers_runtime_shape
@lru_cache(maxsize=4096)
def choose_dense(m: int, n: int, k: int, num_sms: int) -> Choice:
    """The dense FP8 GEMM config for an M x N x K problem on `num_sms` SMs."""
    _require_positive("choose_dense", m=m, n=n, k=k, num_sms=num_sms)
    return _best(f"fp8_gemm_nt M={m} N={n} K={k}", dense_options(m, n, k, num_sms), k, num_sms)


def choose_dense_fitting(m: int, n: int, k: int, num_sms: int, fits, what: str = "") -> Choice:
    """choose_dense's pick among the configs that `fits` (a predicate on GemmConfig) accepts."""
    _require_positive("choose_dense_fitting", m=m, n=n, k=k, num_sms=num_sms)
    options = ((c, u) for c, u in dense_options(m, n, k, num_sms) if fits(c))
    return _best(what or f"fp8_gemm_nt M={m} N={n} K={k}", options, k, num_sms)


def estimate(config: GemmConfig, units: int, k: int, num_sms: int, tiles_per_unit: int = 1) -> Choice:
    """The model's estimate of one option: `units` scheduler units of `config` on `num_sms` SMs, in whole waves of
    the clusters that fit (`tiles_per_unit`: tiles one CTA runs back to back per unit, a SwiGLU unit's gate and up
    tiles), each tile as tile_cycles says. What _best ranks, and what device sweeps rank their candidates by."""
    waves = tiles_per_unit * ceil_div(units, num_sms // config.cluster)
    # The plain weight gradient (per-column B scales) ran non-power-of-two BLOCK_N slower (128x96 and
    # 128x112 4-8% behind 128x128; deferred, they lead); masked groups ran 128x160 18% slower than 128x128
    # on 2 of the 3 N=7168 anchors (their counts vary around expected_m, so the wave count the model sees
    # is a guess).
    pow2_n = config.wgrad and not config.defer or config.layout == Layout.MASKED
    cycles = waves * tile_cycles(config.block_m, config.block_n, k, config.pair, pow2_n, config.defer, config.wgrad)
    if config.layout == Layout.CONTIGUOUS and config.pair == SHARE_B:
        cycles *= CONTIGUOUS_SHARED_B_FACTOR
    return Choice(config, units, waves, cycles)


def _best(what: str, options, k: int, num_sms: int, tiles_per_unit: int = 1) -> Choice:
    """The (config, scheduler units) option with the fewest estimated cycles (ties: larger tiles, then no
    cluster); printed to stderr under DGX_PRINT_CONFIGS. `what` names the problem in messages. `tiles_per_unit`:
    tiles one CTA runs back to back per unit (a SwiGLU unit: its gate and up tiles), which the waves count in."""
    best: Choice | None = None
    for config, units in options:
        cand = estimate(config, units, k, num_sms, tiles_per_unit)
        if best is None or _better(cand, best):
            best = cand
    if best is None:
        raise ValueError(f"{what}: no kernel config fits")
    if env.print_configs():
        c = best.config
        print(
            f"dgx: {what} SMs={num_sms}: block {c.block_m}x{c.block_n}, {c.stages} stages, pair {c.pair}, "
            f"{'deferred promotion, ' if c.defer else ''}{f'split-K {c.split_k}, ' if c.split_k > 1 else ''}"
            f"{'B evict-first, ' if c.stream_b else ''}"
            f"{best.num_tiles} units in {best.waves} waves",
            file=sys.stderr,
        )
    return best


def _better(a: Choice, b: Choice) -> bool:
    if a.est_cycles < b.est_cycles * 0.999:
        return True
    if a.est_cycles > b.est_cycles * 1.001:
        return False
    area = a.config.block_m * a.config.block_n - b.config.block_m * b.config.block_n
    if area:
        return area > 0
    return a.config.pair < b.config.pair  # no cluster when it buys nothing


# Contiguous MoE segments are padded to this many rows, so a block of 64 or 128 rows never spans two
# groups (the kernel takes a block's group from its first row).
CONTIGUOUS_ALIGNMENT = 128


@_offers_runtime_shape
@lru_cache(maxsize=4096)
def choose_grouped(layout: int, m: int, n: int, k: int, groups: int, num_sms: int) -> Choice:
    """The config of a grouped FP8 GEMM (Layout.CONTIGUOUS or Layout.MASKED).

    `m` is the rows of all groups together (contiguous) or the expected rows of one group (masked).
    Blocks are 64 or 128 rows: contiguous blocks must divide the segments' alignment, and masked groups'
    counts vary around `m`, so 256-row blocks waste more padded rows than they save (measured: 11-24% slower
    on 5 of the 6 masked anchors). Contiguous 128-row tiles may run as 2-CTA clusters sharing B along M
    (a pair shares only when both blocks are of one group); masked ones run without clusters.
    """
    if layout not in (Layout.CONTIGUOUS, Layout.MASKED):
        raise ValueError(f"choose_grouped: layout must be contiguous ({Layout.CONTIGUOUS}) or masked ({Layout.MASKED}); got {layout}")
    _require_positive("choose_grouped", m=m, n=n, k=k, groups=groups, num_sms=num_sms)

    name = "contiguous" if layout == Layout.CONTIGUOUS else "masked"
    best = _best(f"grouped ({name}) M={m} N={n} K={k} groups={groups}",
                 grouped_options(layout, m, n, k, groups, num_sms), k, num_sms)
    c = best.config
    if c.layout == Layout.CONTIGUOUS and c.pair == SHARE_B and (c.block_m, c.block_n) == (128, 160):
        if not validate_blocks(128, CONTIGUOUS_WIDE_BLOCK_N, SHARE_B):
            wide = GemmConfig(n, k, 128, CONTIGUOUS_WIDE_BLOCK_N, pipeline_stages(128, CONTIGUOUS_WIDE_BLOCK_N),
                              pair=SHARE_B, layout=layout)
            units = wide.units(m)
            wide = with_stage_rounds(with_deferred_promotion(wide, units, num_sms))
            waves = ceil_div(units, num_sms // wide.cluster)
            best = Choice(wide, units, waves, best.est_cycles / CONTIGUOUS_WIDE_GAIN)
    return best


# Masked decode GEMMs (expected rows per group up to MASKED_DECODE_MAX_M) are memory-bound on B, the experts'
# weights. Their groups' counts spread around the expected M, so a 64-row tile runs two m-blocks on many groups and
# reads their B twice, unless the tile holds the group ("tall": 128-row tiles, one m-block for up to 128 rows) or two
# CTAs share B ("pair_m": 64x128 pairs along M with eight stages, 194 KiB, DeepGEMM 2.6.1's pick). None keeps the cycle
# model's pick. tests/device/masked_ab.py measures the rules (issue 44; docs/PERFORMANCE.md): "tall" is on.
MASKED_DECODE_RULE: str | None = "tall"
MASKED_DECODE_RULES = ("tall", "pair_m")
# Measured (H200, tests/device/masked_ab.py, one run against DeepGEMM 2.6.1): "tall" 1.16x today's pick over the
# decode shapes (1.24-1.32x at 16-64 rows a group), 1.03-1.10x DeepGEMM, 91-93% of the read floor; at 16 rows a
# group level with the model's 64-row pick (0.99-1.00x), so it starts above that.
MASKED_DECODE_MIN_M = 17
MASKED_DECODE_MAX_M = 128
MASKED_DECODE_PAIR_STAGES = 8


def masked_decode_options(rule: str, m: int, n: int, k: int, groups: int, num_sms: int):
    """(config, scheduler units) a masked decode GEMM weighs under MASKED_DECODE_RULE `rule`."""
    if rule not in MASKED_DECODE_RULES:
        raise ValueError(f"MASKED_DECODE_RULE must be None or one of {MASKED_DECODE_RULES}; got {rule!r}")
    if rule == "pair_m" and num_sms >= 2:
        stages = min(max_stages(64, 128), MASKED_DECODE_PAIR_STAGES)
        config = GemmConfig(n, k, 64, 128, stages, pair=SHARE_B, layout=Layout.MASKED)
        yield config, config.units(m) * groups
        return
    block_m = 128 if rule == "tall" else 64
    for bm, bn, pair in candidates(max(m, 65), n):  # (candidates drops 128-row tiles for M <= 64)
        if bm != block_m or pair != SHARE_NONE:
            continue
        config = GemmConfig(n, k, bm, bn, pipeline_stages(bm, bn), layout=Layout.MASKED)
        units = config.units(m) * groups
        yield with_deferred_promotion(config, units, num_sms), units


def grouped_options(layout: int, m: int, n: int, k: int, groups: int, num_sms: int, decode_rule: bool = True):
    """(config, scheduler units) of every M-grouped kernel choose_grouped weighs. `decode_rule` False: the model's
    tiles even where M falls in the masked decode rule's band (the caller decided the rule by another M)."""
    if (layout == Layout.MASKED and decode_rule and MASKED_DECODE_RULE is not None
            and MASKED_DECODE_MIN_M <= m <= MASKED_DECODE_MAX_M):
        yield from masked_decode_options(MASKED_DECODE_RULE, m, n, k, groups, num_sms)
        return
    for bm, bn, pair in candidates(m, n):
        if CONTIGUOUS_ALIGNMENT % bm:
            continue
        if pair != SHARE_NONE and (layout != Layout.CONTIGUOUS or pair != SHARE_B or bm != 128 or num_sms < 2):
            continue
        if pair == SHARE_B and ceil_div(m, bm) * ceil_div(n, bn) < SHARED_B_MIN_WAVES * num_sms:
            continue  # measured only where every SM runs many tiles; a short grid gains no L2 relief
        config = GemmConfig(n, k, bm, bn, pipeline_stages(bm, bn), pair=pair, layout=layout)
        units = config.units(m) * (groups if layout == Layout.MASKED else 1)
        yield with_stage_rounds(with_deferred_promotion(config, units, num_sms)), units


@_offers_runtime_shape
@lru_cache(maxsize=4096)
def choose_wgrad(m: int, n: int, k: int, num_sms: int, layout: int = Layout.DENSE, groups: int = 1) -> Choice:
    """The config of a weight-gradient GEMM (FP32 D = C + A.B^T, both operands scaled per row): dense, or
    Layout.K_GROUPED with `groups` outputs of M x N and `k` the typical K of a group. No multicast."""
    if layout not in (Layout.DENSE, Layout.K_GROUPED):
        raise ValueError(f"choose_wgrad: layout must be dense ({Layout.DENSE}) or K-grouped ({Layout.K_GROUPED}); got {layout}")
    _require_positive("choose_wgrad", m=m, n=n, k=k, groups=groups, num_sms=num_sms)

    if layout == Layout.DENSE and m >= 256 and n >= 256:
        # Plain 128x128 tiles beat the deferred ones the model prefers at every K, their k-loop in stage rounds
        # (compile-time stages and barriers; inside the ring where the k-blocks do not fill whole rounds): 0.8-2.5%
        # on the six K = 4096 shapes of the benchmark before the rounds, 6-7.5% on five of the six K = 8192 ones
        # and 5-10% on three of four shapes with 33-65 k-blocks, level on the others (PERFLOG, wgrad tiles;
        # 2026-11-24 fifth session).
        plain = with_one_raster_band(GemmConfig(n, k, 128, 128, max_stages(128, 128, wgrad=True), wgrad=True))
        return _best(f"wgrad M={m} N={n} K={k} groups={groups}", [(plain, plain.units(m))], k, num_sms)
    if layout == Layout.K_GROUPED and m >= 256 and n >= 256:
        # K-grouped: plain 128x128 at any K. A deferred tile runs a group's k-blocks in chunks of 8 and the rest one
        # at a time with nothing to overlap, and groups' K are rarely multiples of 1024: on the six K-grouped
        # shapes of the benchmark (groups of base K +-128), 5-16% faster than the deferred 128x112 (PERFLOG,
        # 2026-11-24 fifth session).
        plain = GemmConfig(n, 0, 128, 128, max_stages(128, 128, wgrad=True), layout=Layout.K_GROUPED, wgrad=True)
        return _best(f"wgrad (K-grouped) M={m} N={n} K={k} groups={groups}", [(plain, plain.units(m) * groups)], k,
                     num_sms)

    def options():
        for bm, bn, pair in candidates(m, n):
            # 256-row tiles (256x64, 3 stages: the FP32 tile is 64 KB) ran 4% slower than 128x128 on 7168x2112.
            if pair != SHARE_NONE or bm == 256 or max_stages(bm, bn, wgrad=True) < 3:
                continue
            config = GemmConfig(n, 0 if layout == Layout.K_GROUPED else k, bm, bn, max_stages(bm, bn, wgrad=True),
                                layout=layout, wgrad=True)
            if layout == Layout.DENSE:
                config = with_one_raster_band(config)
            units = config.units(m) * groups
            yield with_deferred_promotion(config, units, num_sms), units

    kind = "wgrad (K-grouped)" if layout == Layout.K_GROUPED else "wgrad"
    return _best(f"{kind} M={m} N={n} K={k} groups={groups}", options(), k, num_sms)


def expect_psum_alignment(alignment: int) -> None:
    if alignment % 64:
        raise ValueError(
            f"alignment: the prefix-sum layout needs the groups aligned to a multiple of 64 rows (dgx's tiles are 64 "
            f"or 128 rows high); got {alignment}"
        )


def psum_config(m: int, n: int, k: int, groups: int, num_sms: int, alignment: int = CONTIGUOUS_ALIGNMENT) -> GemmConfig:
    """The prefix-sum layout's config for M rows in all (the heuristic's M), N, K and `groups`: the contiguous
    layout's heuristic with tiles as high as the groups' alignment allows (128 rows for a multiple of 128, else 64:
    the kernel starts each group at its predecessor's end rounded up to the tile height, so a tile lower than the
    alignment would also run tiles of gap rows, as DeepGEMM's sm_90 kernel, whose tile height is the alignment,
    does not) and without 2-CTA clusters (the prefix-sum layout runs single CTAs)."""
    return choose_contiguous_psum(m, n, k, groups, num_sms, alignment).config


@_offers_runtime_shape
@lru_cache(maxsize=4096)
def choose_contiguous_psum(m: int, n: int, k: int, groups: int, num_sms: int,
                           alignment: int = CONTIGUOUS_ALIGNMENT) -> Choice:
    """:func:`psum_config` with the choice's units and waves."""
    best = _best(f"grouped (contiguous, prefix sums) M={m} N={n} K={k} groups={groups}",
                 psum_options(m, n, k, num_sms, alignment), k, num_sms)
    return replace(best, config=replace(best.config, layout=int(Layout.CONTIGUOUS_PSUM)))


def psum_options(m: int, n: int, k: int, num_sms: int, alignment: int = CONTIGUOUS_ALIGNMENT):
    """(config, scheduler units) of every prefix-sum kernel choose_contiguous_psum weighs (in the contiguous
    layout, which it turns into the prefix-sum one)."""
    expect_psum_alignment(alignment)
    block_m = 128 if alignment % 128 == 0 else 64
    for bm, bn, pair in candidates(max(m, block_m + 1), n):  # (candidates drops 128-row tiles for M <= 64)
        if bm != block_m or pair != SHARE_NONE:
            continue
        config = GemmConfig(n, k, bm, bn, pipeline_stages(bm, bn), layout=int(Layout.CONTIGUOUS))
        units = config.units(m)
        yield with_stage_rounds(with_deferred_promotion(config, units, num_sms)), units


def fused_stages(config: GemmConfig, epilogue: Epilogue) -> int:
    """`config`'s stage count, or fewer where the epilogue's output tile leaves less shared memory (SwiGLU's stash)."""
    stages = config.stages
    while stages > 2 and smem_bytes(config.block_m, config.block_n, stages, config.wgrad, config.defer,
                                    config.split_k, epilogue) > SMEM_LIMIT:
        stages -= 1
    return stages


@lru_cache(maxsize=4096)
def choose_fused(kind: str, m: int, n: int, k: int, groups: int, num_sms: int, epilogue: Epilogue,
                 alignment: int = CONTIGUOUS_ALIGNMENT, block_m: int | None = None) -> Choice:
    """The config of a GEMM of `kind` ('dense', 'm_grouped_contiguous', 'm_grouped_masked' or
    'm_grouped_contiguous_psum'; M as their heuristics take it) with a fused `epilogue`: the same model over the
    tiles that can run it (FP8 output: 128 columns, one quantisation group; SwiGLU: 64 or 128 rows, its stash in
    shared memory), with as many stages as fit beside the epilogue's output tile. Scheduler units are counted in
    whole units: a SwiGLU unit is a gate and an up tile one CTA runs, and masked groups' units follow the spread of
    their counts around `m` (masked_units). `block_m`: only tiles of that many rows (device A/Bs)."""
    _require_positive("choose_fused", m=m, n=n, k=k, groups=groups, num_sms=num_sms)
    return _best(f"fused {epilogue.tag} {kind} M={m} N={n} K={k} groups={groups}",
                 fused_options(kind, m, n, k, groups, num_sms, epilogue, alignment, block_m), k, num_sms,
                 tiles_per_unit=fused_tiles_per_unit(epilogue))


def fused_tiles_per_unit(epilogue: Epilogue) -> int:
    """Tiles one CTA runs back to back per scheduler unit of a fused kernel: a SwiGLU unit's gate and up tiles."""
    return 2 if epilogue.swiglu else 1


def fused_options(kind: str, m: int, n: int, k: int, groups: int, num_sms: int, epilogue: Epilogue,
                  alignment: int = CONTIGUOUS_ALIGNMENT, block_m: int | None = None):
    """(config, scheduler units) of every fused kernel choose_fused weighs (its arguments as it takes them): the
    layout's own options whose tile can run `epilogue`, with the stages that fit beside its output tile."""
    masked = kind == "m_grouped_masked"
    if kind == "dense":
        options = dense_options(m, n, k, num_sms)
    elif kind == "m_grouped_contiguous":
        options = grouped_options(Layout.CONTIGUOUS, m, n, k, groups, num_sms)
    elif masked:
        # The tiles the groups' largest counts can use (128 rows for expected M 64: counts reach 83), but the decode
        # rule's band starts at the expected M, as for the plain masked GEMM, whose band it was measured on: at 13-16
        # tokens the largest count (17-21) would otherwise force 128-row tiles on groups a 64-row tile holds.
        options = grouped_options(Layout.MASKED, ceil_div(m * MASKED_SPREAD[1], 1), n, k, groups, num_sms,
                                  decode_rule=m >= MASKED_DECODE_MIN_M)
    elif kind == "m_grouped_contiguous_psum":
        options = psum_options(m, n, k, num_sms, alignment)
    else:
        raise ValueError(f"choose_fused: fused epilogues are for the dense and M-grouped FP8 GEMMs "
                         f"(dense, m_grouped_contiguous, m_grouped_masked, m_grouped_contiguous_psum); got {kind!r}")
    for config, units in options:
        if config.split_k != 1 or epilogue.validate_tile(config.block_m, config.block_n, n):
            continue
        if block_m is not None and config.block_m != block_m:
            continue  # (device A/Bs: the best tile of another height)
        layout = int(Layout.CONTIGUOUS_PSUM) if kind == "m_grouped_contiguous_psum" else config.layout
        fused = replace(config, stages=fused_stages(config, epilogue), layout=layout, epilogue=epilogue)
        yield fused, fused_units(fused, kind, m, groups, units)


def fused_units(config: GemmConfig, kind: str, m: int, groups: int, units: int | None = None) -> int:
    """Scheduler units of a fused `config` for a `kind` GEMM of M (as choose_fused takes it) and `groups`, counted
    in whole units (SwiGLU: gate + up tile pairs, which one CTA runs: the last wave is whole pairs); masked groups
    from the spread of their counts (masked_units). `units`: the layout's own count, kept where neither applies."""
    if kind == "m_grouped_masked":
        return masked_units(config, m, groups)
    if config.epilogue is not None and config.epilogue.swiglu or units is None:
        return config.units(m)
    return units


# Masked groups' counts around expected_m: uniform over this range of it (DeepGEMM's tests and dgx's MoE bench).
MASKED_SPREAD = (0.7, 1.3)


def masked_units(config: GemmConfig, m: int, groups: int) -> int:
    """Scheduler units of `groups` masked groups whose counts spread over MASKED_SPREAD x m: the expected number of
    row blocks per group (not those of exactly m rows: counts past a block boundary add a block to their group),
    or with pairs along M (B shared) of block pairs, as the scheduler counts them (a group's odd last block takes a
    whole pair)."""
    lo, hi = MASKED_SPREAD
    samples = [max(1, round(m * (lo + (hi - lo) * (i + 0.5) / 32))) for i in range(32)]
    per_pair = 2 if config.pair == SHARE_B else 1
    blocks = sum(ceil_div(ceil_div(c, config.block_m), per_pair) for c in samples) / len(samples)
    return max(1, round(blocks * groups)) * (config.units(config.block_m))


def choose_skip_head_mid(m: int, n: int, k: int, head_splits: tuple[int, int, int], num_sms: int) -> GemmConfig:
    """fp8_gemm_nt's config for M x N x K with the head splits, when its store spans fit them (the same kernel
    with its output columns remapped); else the heuristic's best among the tiles whose spans do."""
    config = choose_dense(m, n, k, num_sms).config
    if not validate_head_splits(head_splits, n, config.block_n):
        return replace(config, head_splits=head_splits, runtime_n=False, runtime_k=False,
                       runtime_stream_b=False)  # (N, K and the policy compiled in)
    fitting = choose_dense_fitting(m, n, k, num_sms, lambda c: not validate_head_splits(head_splits, n, c.block_n),
                                   f"fp8_gemm_nt_skip_head_mid M={m} N={n} K={k} head_splits={head_splits}")
    return replace(fitting.config, head_splits=head_splits)


@lru_cache(maxsize=4096)
def choose_batched(m: int, n: int, k: int, groups: int, num_sms: int) -> Choice:
    """The config of the batched layout (dgx.fp8_einsum's 'bhr,hdr->bhd': `groups` GEMMs of M x N x K, every row
    valid): the dense model over all groups' tiles, single CTAs (each loads its tile of a group's 3-D view
    itself), 64-, 128- or 256-row tiles as for a dense GEMM of M rows."""
    _require_positive("choose_batched", m=m, n=n, k=k, groups=groups, num_sms=num_sms)

    def options():
        for bm, bn, pair in candidates(m, n):
            if pair != SHARE_NONE:
                continue
            config = GemmConfig(n, k, bm, bn, pipeline_stages(bm, bn), layout=int(Layout.BATCHED))
            units = config.units(m) * groups
            yield with_deferred_promotion(config, units, num_sms), units

    return _best(f"batched M={m} N={n} K={k} groups={groups}", options(), k, num_sms)
