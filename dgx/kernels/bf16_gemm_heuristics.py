"""Config choice for the BF16 GEMM family: pure Python, no GPU, unit-tested on the CPU.

The model: a persistent grid of one CTA per SM (or per cluster: 2-CTA multicast pairs, split-K clusters of 2, 4 or
8, as many as fit at once) runs ceil(units / slots) waves of tiles. A tile costs, per k-block of 64 of K, the larger
of its tensor-core time (2·BM·BN·64 FLOP at 4096 BF16 FLOP/clk per SM, plus a per-k-block issue cost, more for one
math warpgroup, which has no other warpgroup to hide it behind; one-warpgroup tiles may take 2 or 4 K atoms per
k-block to share it) and the time its SM takes to stream the k-block's A and B into shared memory; plus an
epilogue. Split-K tiles run 1/split of the k-blocks and then sum the cluster's partials through distributed shared
memory (a cost after the stream, never hidden). Two floors bound the whole grid: HBM (every operand byte once, D
written, C read) and the L2-to-SM traffic of all tiles (a shared operand at 3/4 of its tiles' reads). The lowest
estimate wins; near-ties (1%) go to more SMs busy per wave, then larger tiles, then no cluster, then fewer K atoms.

Calibration: the floors' rates, the per-SM stream rate and the 64-byte-swizzle penalty are fitted to the dense
suite timed on an H200 (tests/device/bf16_bench.py, every form, M 64 / 128 / 4096; docs/PERFORMANCE.md): the
decode shapes' times follow a fixed cost plus the larger of the HBM floor (~3.6 TB/s) and the L2-to-SM floor
(~9.3 TB/s), so narrow 64-row tiles at M = 128, which read every B tile twice and A once per tile, lose to wide
tiles whose K is split over a cluster; the split-K reduction's cost is the FP8 family's measurement.

Ping-pong tiles (``schedule="pingpong"``, weighed only with ``pingpong=True`` or DGX_BF16_PINGPONG=1 until a device
run confirms the model): each math warpgroup owns whole 64- or 128-row tiles and the two take turns at the tensor
cores, so a tile's epilogue and first-stage latency hide under the other warpgroup's k-loop; the CTA pays them once,
after its last tile. Their MMA issue cost per k-block is a guess (PINGPONG_KBLOCK_ISSUE_CLK), and a ping-pong tile
must beat the best other by PINGPONG_MARGIN to be chosen.

Decode (M <= DECODE_MAX_M): every candidate runs one wave on the same HBM floor, so what the floors leave out decides
(the H200 decode sweep, M 64 and 128, 8 configs of distinct kinds per shape). Two costs are counted there only: a
64-row tile at 64 < M <= 128 streams each B tile twice, once per row of tiles, where one 128-row tile reads it once,
and the second stream is not free under the HBM floor (RESTREAMED_B_HBM_SHARE of B's HBM time); a multicast pair pays
a fixed lockstep cost no floor hides (PAIR_FIXED_CLK). Without them the 64-row and 128-row tiles tied on the HBM
floor and the near-tie rule (more SMs busy per wave: the 64-row tiles have twice the CTAs) or the candidates' order
chose the 64-row ones, 5-9% slower at M = 128. Above DECODE_MAX_M every tile height re-reads B and the terms are
unmeasured: left out.

M enters the estimate only through block counts (rows rounded up to 64 in the floors) and the decode terms, which
switch at M = 64 and 128, so the choice is constant between consecutive multiples of the block heights:
dgx.enumeration.m_samples covers every M of a warm-up range.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache

from .. import env
from ..intmath import ceil_div
from .bf16_gemm_config import (
    BLOCK_K,
    LAYOUT_CONTIGUOUS,
    LAYOUT_CONTIGUOUS_PSUM,
    LAYOUT_DENSE,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    SHARE_A,
    SHARE_B,
    SHARE_NONE,
    K_ATOMS,
    Bf16GemmConfig,
    max_stages,
    stage_bytes,
)

BLOCK_MS = (64, 128, 256)
# BF16 dense: 989 TFLOPS / 132 SMs / 1.83 GHz is 4096; the large shapes ran at 0.87-0.89 of this model with 4096 on
# an H200 (128x256 tiles 787-790 TFLOPS), at any tile: the effective rate.
TENSOR_FLOP_PER_CLK_PER_SM = 3600
KBLOCK_ISSUE_CLK = {1: 160.0, 2: 60.0}  # per k-block and math warpgroup count: barrier wait, issue, wait_group
# Ping-pong: one warpgroup issues at a time, but the next k-block's MMAs stay queued behind the current ones as with
# two cooperative warpgroups (not measured yet: tests/device/bf16_pp_ab.py times it).
PINGPONG_KBLOCK_ISSUE_CLK = 60.0
# How much faster the model must find a ping-pong tile than the best other before choosing it (its costs are
# guesses until a device run calibrates them).
PINGPONG_MARGIN = 0.03
# Ping-pong tiles weighed: 64 rows by 16..256 columns (at most 128 accumulators) and 128 rows by 16..160 (two m64
# slices, at most 160).
PINGPONG_BLOCK_MS = (64, 128)
STREAM_BYTES_PER_CLK_PER_SM = 57  # what one SM's TMA ring takes in (~100 GB/s: 66 CTAs of 64x32 tiles took that)
L2_BYTES_PER_CLK = 5300  # L2 to SMs, all SMs together (~9.7 TB/s at 1.83 GHz: the H200 decode times' fit, ~9.3,
# raised to where 4096x4096x7168 on 128x256 tiles, 9.2 TB/s of L2 reads at 306 µs, is bound by its MMAs)
HBM_BYTES_PER_CLK = 1950  # ~3.6 TB/s at 1.83 GHz: the H200 decode times' fit (the H100's ~3.0 TB/s ranks alike)
# A multicast operand costs 3/4 of its tile's L2 reads, not 1/2: on 128x4096x7168 (64x64 tiles, H200) the stream
# took 24.1 µs unshared, 23.2 with A shared and 22.7 with B shared (the pair's lockstep and the multicast's own cost).
MULTICAST_L2_SHARE = 0.75
EPILOGUE_BYTES_PER_CLK = 64
TILE_FIXED_CLK = 400  # per tile: the first stage's latency not hidden by the previous tile
# An MN-major operand whose tile is not whole 64-element atoms is stored with a 64-byte swizzle: its wgmma reads
# ran ~17% slower (nn/tn 4096x24576x1536 and 4096x32768x512 on 128x224 tiles: 659 and 578 TFLOPS, where the nt
# form's 256x144 ran 749 and 631 on an H200).
SWIZZLE64_MMA_FACTOR = 1.18
# Split-K: each tile ends with its partial published to the cluster, the peers' shares read over distributed
# shared memory and summed (the FP8 family measured 1.5 µs on 64x32 split 2 and 2.5 µs on 64x144 split 8).
SPLIT_REDUCE_CLK = 2000
SPLIT_REDUCE_BYTES_PER_CLK = 16
SPLITS = (2, 4, 8)
# Decode problems (M up to this many rows, per group when masked) get the two terms below: calibrated on the H200
# decode sweep (tests/device/bf16_bench.py --shapes decode --sweep 8), unmeasured above.
DECODE_MAX_M = 128
# The second stream of each B tile by the other row of 64-row tiles (64 < M <= 128, B not multicast), as a share of
# B's HBM time: at M = 128 such tiles ran 9-29% of B's HBM time behind 128-row tiles of the same area or width
# (128 x 7168 x 2048: 64x144 18.5 µs, 128x80 17.0; 128 x 24576 x 1536: 64x192 34.9, 128x192 31.7; H200); 0.2 fits
# the sweep's M = 128 rows best (least squares, each shape's fixed cost free).
RESTREAMED_B_HBM_SHARE = 0.2
# A 2-CTA multicast pair's fixed cost (cluster launch, the peers' barriers, the shared stages' two consumers in
# lockstep), at M <= DECODE_MAX_M: the same tile alone ran 0.4-1.0 µs faster than paired on six decode shapes.
PAIR_FIXED_CLK = 1000
# Clusters of 4 and 8 CTAs that fit at once on a 132-SM Hopper (cudaOccupancyMaxActiveClusters, one CTA per SM):
# 30 and 15, not 132 / 4 and 132 / 8 (a cluster stays in one GPC, and the GPCs' SM counts are not multiples of 4).
RESIDENT_SM_SHARE = 120 / 132
# One-warpgroup (64-row) tiles keep at most this many bytes of stages in flight (the FP8 family measured more to
# be slower; PERFLOG exp. 14), and every tile at least MIN_STAGES.
ONE_WG_RING_BYTES = 168 * 1024
MIN_STAGES = 3
# One-warpgroup tiles may take 2 or 4 K atoms per k-block (fewer barrier round trips and MMA waits per K, the
# per-k-block issue cost shared), keeping at least this many stages.
MIN_MERGED_STAGES = 4
# Contiguous segments are padded to this many rows (dgx.get_mk_alignment_for_contiguous_layout()).
CONTIGUOUS_ALIGNMENT = 128

#: The shapes-file kinds the family serves, and the layout each runs.
KIND_LAYOUTS = {
    "dense": LAYOUT_DENSE,
    "m_grouped_contiguous": LAYOUT_CONTIGUOUS,
    "m_grouped_contiguous_psum": LAYOUT_CONTIGUOUS_PSUM,
    "m_grouped_masked": LAYOUT_MASKED,
    "k_grouped": LAYOUT_K_GROUPED,
}


def resident_clusters(size: int, num_sms: int) -> int:
    """Clusters of `size` CTAs (one per SM) that run at once: every SM for single CTAs and pairs, ~120 of 132 SMs
    for clusters of 4 and 8."""
    if size <= 2:
        return max(num_sms // size, 1)
    return max(int(num_sms * RESIDENT_SM_SHARE) // size, 1)


@dataclass(frozen=True)
class Estimate:
    config: Bf16GemmConfig
    units: int  # scheduler work units (tiles, or tile pairs)
    waves: int
    cycles: float


def block_ns(major_b: str) -> tuple[int, ...]:
    """The tile widths tried: multiples of 16 (K-major B), or of 32 (N-major B: whole 64-byte swizzle atoms)."""
    return tuple(range(32 if major_b == "mn" else 16, 257, 32 if major_b == "mn" else 16))


def stages_for(block_m: int, block_n: int, out_dtype: str, k_atoms: int = 1, split_k: int = 1,
               schedule: str = "cooperative") -> int:
    """As many stages as fit, and for one-warpgroup tiles no more than ONE_WG_RING_BYTES of them."""
    stages = max_stages(block_m, block_n, out_dtype, k_atoms, split_k, schedule)
    if block_m == 64 and schedule == "cooperative":
        stages = min(stages, max(ONE_WG_RING_BYTES // stage_bytes(block_m, block_n, k_atoms), MIN_STAGES))
    return stages


def swizzle64(config: Bf16GemmConfig) -> bool:
    """Whether an MN-major operand tile of the config is stored with the slower 64-byte swizzle."""
    return any(config.swizzle(op) == 64 for op in ("a", "b"))


def tile_cycles(config: Bf16GemmConfig, k: int) -> float:
    """Estimated cycles of one tile over K (split-K: one CTA's range of it): k-blocks x the larger of its MMA and
    stream times, plus its epilogue (split-K: the cluster's reduction). Ping-pong: the k-blocks only (the epilogue
    runs under the other warpgroup's turn; :func:`pingpong_tail_cycles` is the CTA's last one)."""
    pingpong = config.schedule == "pingpong"
    atoms = config.k_atoms
    k_blocks = ceil_div(ceil_div(k, BLOCK_K * atoms), config.split_k)
    mma = atoms * 2 * config.block_m * config.block_n * BLOCK_K / TENSOR_FLOP_PER_CLK_PER_SM
    if swizzle64(config):
        mma *= SWIZZLE64_MMA_FACTOR
    mma += PINGPONG_KBLOCK_ISSUE_CLK if pingpong else KBLOCK_ISSUE_CLK[config.math_warpgroups]
    stream = atoms * (config.block_m + config.block_n) * 128 / STREAM_BYTES_PER_CLK_PER_SM
    if config.split_k > 1:
        epilogue = SPLIT_REDUCE_CLK + config.block_m * config.block_n * 4 / SPLIT_REDUCE_BYTES_PER_CLK
    else:
        epilogue = (config.block_m * config.block_n * config.out_bytes * (2 if config.with_c else 1)
                    / EPILOGUE_BYTES_PER_CLK)
    if pingpong:
        return k_blocks * max(mma, stream)
    return k_blocks * max(mma, stream) + epilogue + TILE_FIXED_CLK


def pingpong_tail_cycles(config: Bf16GemmConfig) -> float:
    """A ping-pong CTA's exposed tail: its last tile's epilogue and a tile's first-stage latency (0 otherwise)."""
    if config.schedule != "pingpong":
        return 0.0
    return (config.block_m * config.block_n * config.out_bytes * (2 if config.with_c else 1) / EPILOGUE_BYTES_PER_CLK
            + TILE_FIXED_CLK)


def split_reduce_cycles(config: Bf16GemmConfig) -> float:
    """The split-K reduction of one tile (0 without split-K): it follows the tile's stream, so no floor hides it."""
    if config.split_k == 1:
        return 0.0
    return SPLIT_REDUCE_CLK + config.block_m * config.block_n * 4 / SPLIT_REDUCE_BYTES_PER_CLK


def estimate(config: Bf16GemmConfig, m: int, k: int, groups: int, num_sms: int) -> Estimate:
    """The model's cycles for `config` on M rows (masked: per group; contiguous: all groups'), K (K-grouped: a
    typical group's) and `groups`."""
    units = config.units(m)
    if config.layout in (LAYOUT_MASKED, LAYOUT_K_GROUPED):
        units *= groups
    slots = resident_clusters(config.cluster, num_sms)
    waves = max(ceil_div(units, slots), 1)
    compute = waves * tile_cycles(config, k) + pingpong_tail_cycles(config)
    per_group = config.layout in (LAYOUT_MASKED, LAYOUT_K_GROUPED)  # every group has its own rows of D
    rows = ceil_div(m, 64) * 64 * (groups if per_group else 1)  # rows of D (and of A, but K-grouped)
    a_bytes = rows * k * 2  # K-grouped: each group's M x k_g
    b_bytes = config.n * k * 2 * (1 if config.layout == LAYOUT_DENSE else groups)
    d_bytes = rows * config.n * config.out_bytes * (2 if config.with_c else 1)
    restreamed = b_bytes * RESTREAMED_B_HBM_SHARE if restreams_b(config, m) else 0.0
    hbm = (a_bytes + b_bytes + restreamed + d_bytes) / HBM_BYTES_PER_CLK
    tiles = units * (1 if config.pair == SHARE_NONE else 2)  # (a split-K unit is one tile over the cluster's CTAs)
    a_rows = config.block_m * (MULTICAST_L2_SHARE if config.pair == SHARE_A else 1)
    b_rows = config.block_n * (MULTICAST_L2_SHARE if config.pair == SHARE_B else 1)
    l2 = tiles * ceil_div(k, BLOCK_K) * (a_rows + b_rows) * 128 / L2_BYTES_PER_CLK  # (per 64 of K: any k_atoms)
    # The split-K reduction follows each tile's stream: the floors do not hide it.
    floor = max(hbm, l2) + waves * split_reduce_cycles(config)
    return Estimate(config, units, waves, max(compute, floor) + pair_lockstep_cycles(config, m))


def restreams_b(config: Bf16GemmConfig, m: int) -> bool:
    """Whether a decode problem's B is streamed twice: 64-row tiles at 64 < M <= DECODE_MAX_M (two rows of tiles
    where one 128-row tile holds every row), B not multicast to the pair's two rows; dense and masked (per group)."""
    return (config.block_m == 64 and 64 < m <= DECODE_MAX_M and config.pair != SHARE_B
            and config.layout in (LAYOUT_DENSE, LAYOUT_MASKED))


def pair_lockstep_cycles(config: Bf16GemmConfig, m: int) -> float:
    """A multicast pair's fixed cost at M <= DECODE_MAX_M (0 otherwise), on top of the floors: none hides it."""
    return PAIR_FIXED_CLK if config.pair != SHARE_NONE and m <= DECODE_MAX_M else 0.0


def _better(a: Estimate, b: Estimate, num_sms: int) -> bool:
    """Whether `a` beats `b`: fewer cycles; within 1% (a memory floor both reach), more SMs busy per wave (a margin against
    the per-SM stream rate the model guesses), then larger tiles, then no cluster. A ping-pong tile against a
    cooperative one: only by PINGPONG_MARGIN fewer cycles."""
    if a.config.schedule != b.config.schedule:
        if a.config.schedule == "pingpong":
            return a.cycles < b.cycles * (1 - PINGPONG_MARGIN)
        return not b.cycles < a.cycles * (1 - PINGPONG_MARGIN)
    if a.cycles < b.cycles * 0.99:
        return True
    if a.cycles > b.cycles * 1.01:
        return False
    busy = a.units * a.config.cluster / a.waves - b.units * b.config.cluster / b.waves  # SMs busy per wave
    if abs(busy) >= 1:
        return busy > 0
    if a.cycles != b.cycles:
        return a.cycles < b.cycles
    area = a.config.block_m * a.config.block_n - b.config.block_m * b.config.block_n
    if area:
        return area > 0
    if a.config.pair != b.config.pair:
        return a.config.pair < b.config.pair
    if a.config.split_k != b.config.split_k:
        return a.config.split_k < b.config.split_k
    return a.config.k_atoms < b.config.k_atoms


def candidates(kind: str, m: int, n: int, k: int, groups: int, num_sms: int, major_a: str, major_b: str,
               out_dtype: str, with_c: bool, alignment: int = CONTIGUOUS_ALIGNMENT,
               pingpong: bool = False) -> list[Bf16GemmConfig]:
    """Every config the heuristic weighs for the problem (see :func:`choose`); ping-pong tiles too with `pingpong`."""
    layout = KIND_LAYOUTS[kind]
    if layout == LAYOUT_CONTIGUOUS_PSUM:
        block_m_options = (128,) if alignment % 128 == 0 else (64,)
    elif layout in (LAYOUT_CONTIGUOUS, LAYOUT_MASKED):
        block_m_options = (64, 128)
    else:
        block_m_options = BLOCK_MS
    out = []
    for bm in block_m_options:
        if layout in (LAYOUT_DENSE, LAYOUT_K_GROUPED, LAYOUT_MASKED) and (bm == 256 and m <= 128 or bm == 128 and m <= 64):
            continue  # the tile would be mostly padding
        for bn, k_atoms in ((bn, ka) for bn in block_ns(major_b) for ka in (K_ATOMS if bm == 64 else (1,))):
            if k_atoms > 2 and layout == LAYOUT_K_GROUPED:
                continue
            stages = stages_for(bm, bn, out_dtype, k_atoms)
            if stages < (MIN_STAGES if k_atoms == 1 else MIN_MERGED_STAGES):
                continue
            for pair in pairings(layout, m, n, bm, bn, num_sms):
                config = dict(n=n, k=0 if layout == LAYOUT_K_GROUPED else k, block_m=bm, block_n=bn, stages=stages,
                              major_a=major_a, major_b=major_b, out_dtype=out_dtype, with_c=with_c, layout=layout,
                              pair=pair, k_atoms=k_atoms)
                try:
                    out.append(Bf16GemmConfig(**config))
                except ValueError:
                    continue  # a combination the kernel does not support (validate says which)
            out += split_candidates(layout, m, n, k, groups, num_sms, bm, bn, k_atoms, major_a, major_b, out_dtype,
                                    with_c)
    if pingpong:
        out += pingpong_candidates(layout, m, n, k, num_sms, block_m_options, major_a, major_b, out_dtype, with_c)
    return out


def pairings(layout: int, m: int, n: int, bm: int, bn: int, num_sms: int) -> list[int]:
    """The pairings a bm x bn tile may take, alone first: a pair only of dense or contiguous layouts with two SMs,
    sharing A only where (dense) a pair has two column tiles, sharing B only where it has two row tiles."""
    out = [SHARE_NONE]
    if num_sms < 2 or layout not in (LAYOUT_DENSE, LAYOUT_CONTIGUOUS):
        return out
    if layout == LAYOUT_DENSE and ceil_div(n, bn) >= 2:
        out.append(SHARE_A)
    if ceil_div(m, bm) >= 2:
        out.append(SHARE_B)
    return out


def pingpong_candidates(layout: int, m: int, n: int, k: int, num_sms: int, block_m_options: tuple[int, ...],
                        major_a: str, major_b: str, out_dtype: str, with_c: bool) -> list[Bf16GemmConfig]:
    """Ping-pong variants of the layout's tile heights (64 and 128 rows: a whole tile in one warpgroup's
    registers), each alone or sharing an operand with a pair, where the problem has more than one tile per SM
    (fewer, and the second warpgroup has nothing to alternate with)."""
    out = []
    for bm in (b for b in block_m_options if b in PINGPONG_BLOCK_MS):
        if layout in (LAYOUT_DENSE, LAYOUT_K_GROUPED, LAYOUT_MASKED) and bm == 128 and m <= 64:
            continue
        for bn in block_ns(major_b):
            if ceil_div(m, bm) * ceil_div(n, bn) <= num_sms:
                continue
            stages = stages_for(bm, bn, out_dtype, schedule="pingpong")
            if stages < MIN_STAGES:
                continue
            for pair in pairings(layout, m, n, bm, bn, num_sms):
                try:
                    out.append(Bf16GemmConfig(n=n, k=0 if layout == LAYOUT_K_GROUPED else k, block_m=bm, block_n=bn,
                                              stages=stages, major_a=major_a, major_b=major_b, out_dtype=out_dtype,
                                              with_c=with_c, layout=layout, pair=pair, schedule="pingpong"))
                except ValueError:
                    continue  # more accumulators than a warpgroup holds, or another unsupported combination
    return out


def split_candidates(layout: int, m: int, n: int, k: int, groups: int, num_sms: int, bm: int, bn: int, k_atoms: int,
                     major_a: str, major_b: str, out_dtype: str, with_c: bool) -> list[Bf16GemmConfig]:
    """Split-K variants of a (bm, bn, k_atoms) tile: only where the unsplit tiles leave SMs idle (their clusters
    still fit in one wave), the K ranges are whole k-blocks, and the partial tile leaves room for the ring."""
    if layout not in (LAYOUT_DENSE, LAYOUT_MASKED) or bm > 128:
        return []
    tiles = ceil_div(m, bm) * ceil_div(n, bn) * (groups if layout == LAYOUT_MASKED else 1)
    out = []
    for split in SPLITS:
        if tiles > resident_clusters(split, num_sms):
            break  # more than one wave of clusters: splitting adds waves, not busy SMs
        if ceil_div(k, BLOCK_K * k_atoms) % split:
            continue
        stages = stages_for(bm, bn, out_dtype, k_atoms, split)
        if stages < (MIN_STAGES if k_atoms == 1 else MIN_MERGED_STAGES):
            continue
        try:
            out.append(Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a=major_a,
                                      major_b=major_b, out_dtype=out_dtype, with_c=with_c, layout=layout,
                                      k_atoms=k_atoms, split_k=split))
        except ValueError:
            continue
    return out


def choose(kind: str, m: int, n: int, k: int, groups: int = 1, num_sms: int = 132, *, major_a: str = "k",
           major_b: str = "k", out_dtype: str = "bfloat16", with_c: bool = False,
           alignment: int = CONTIGUOUS_ALIGNMENT, pingpong: bool | None = None) -> Bf16GemmConfig:
    """The BF16 GEMM config for one problem.

    Args:
        kind: a shapes-file kind: "dense", "m_grouped_contiguous", "m_grouped_contiguous_psum", "m_grouped_masked"
            or "k_grouped".
        m: rows of D: all groups' (contiguous, psum), the expected rows of one group (masked), M of every group's
            output (K-grouped).
        n, k: N, and K (K-grouped: a typical group's K).
        groups: the group count (1 for dense).
        num_sms: SMs the grid may use.
        major_a, major_b: "k" or "mn" (dgx.kernels.bf16_gemm.FORMS names the pairs).
        out_dtype: "bfloat16" or "float32"; with_c: D = C + A.B^T (reduce-add into D).
        alignment: the prefix-sum layout's group alignment (a multiple of 64): it sets the tile height.
        pingpong: also weigh ping-pong tiles; None (the default) reads DGX_BF16_PINGPONG (off unless set).

    Raises ValueError naming what is wrong when the problem has no config.
    """
    if kind not in KIND_LAYOUTS:
        raise ValueError(f"kind: expected one of {', '.join(KIND_LAYOUTS)}; got {kind!r}")
    for name, value in (("m", m), ("n", n), ("k", k), ("groups", groups), ("num_sms", num_sms)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"choose: {name} must be a positive int; got {value!r}")
    pingpong = env.bf16_pingpong() if pingpong is None else bool(pingpong)
    return _choose(kind, m, n, k, groups, num_sms, major_a, major_b, out_dtype, bool(with_c), alignment, pingpong)


@lru_cache(maxsize=4096)
def _choose(kind: str, m: int, n: int, k: int, groups: int, num_sms: int, major_a: str, major_b: str, out_dtype: str,
            with_c: bool, alignment: int, pingpong: bool = False) -> Bf16GemmConfig:
    best: Estimate | None = None
    for config in candidates(kind, m, n, k, groups, num_sms, major_a, major_b, out_dtype, with_c, alignment,
                             pingpong):
        est = estimate(config, m, k, groups, num_sms)
        if best is None or _better(est, best, num_sms):
            best = est
    if best is None:
        raise ValueError(f"bf16 {kind} M={m} N={n} K={k}: no kernel config fits "
                         f"(majors {major_a}/{major_b}, out {out_dtype}, with_c {with_c})")
    if env.print_configs():
        c = best.config
        print(f"dgx: bf16 {kind} ({c.form}) M={m} N={n} K={k} groups={groups} SMs={num_sms}: block "
              f"{c.block_m}x{c.block_n}, {c.stages} stages, pair {c.pair}, split-K {c.split_k}, {c.schedule}, "
              f"{best.units} units in "
              f"{best.waves} waves", file=sys.stderr)
    return best.config


def warmup_configs(kind: str, n: int, k: int, groups: int = 1, max_m: int = 8192, num_sms: int = 132, *,
                   major_a: str | None = None, major_b: str | None = None, out_dtype: str | None = None,
                   with_c: bool | None = None, alignment: int = CONTIGUOUS_ALIGNMENT,
                   pingpong: bool | None = None) -> list[Bf16GemmConfig]:
    """Every config :func:`choose` can pick for a (kind, N, K, groups) entry over M = 1..max_m (contiguous: M_sum up
    to groups x max_m in multiples of 128, capped as dgx.enumeration caps it), distinct, in order of first use.

    The operand forms default to the kind's usual one: dense and the M-grouped kinds nt with a BF16 D and no C, the
    K-grouped kind tn (A and B MN-major) with an FP32 D += A.B^T. `pingpong` as for :func:`choose` (None: the
    environment's DGX_BF16_PINGPONG).
    """
    from ..enumeration import CONTIGUOUS_SUM, PSUM, ROWS, m_values

    if kind not in KIND_LAYOUTS:
        raise ValueError(f"kind: expected one of {', '.join(KIND_LAYOUTS)}; got {kind!r}")
    k_grouped = kind == "k_grouped"
    major_a = major_a or ("mn" if k_grouped else "k")
    major_b = major_b or ("mn" if k_grouped else "k")
    out_dtype = out_dtype or ("float32" if k_grouped else "bfloat16")
    with_c = k_grouped if with_c is None else with_c
    space = {"m_grouped_contiguous": CONTIGUOUS_SUM, "m_grouped_contiguous_psum": PSUM}.get(kind, ROWS)
    ms = m_values(space, groups, max_m, 1, max_m * max(groups, 1) + 1)
    seen: dict[Bf16GemmConfig, None] = {}
    for m in ms:
        seen.setdefault(choose(kind, m, n, k, groups, num_sms, major_a=major_a, major_b=major_b, out_dtype=out_dtype,
                               with_c=with_c, alignment=alignment, pingpong=pingpong))
    return list(seen)


__all__ = ["choose", "warmup_configs", "candidates", "estimate", "tile_cycles", "stages_for", "resident_clusters",
           "pingpong_candidates", "pingpong_tail_cycles", "restreams_b", "pair_lockstep_cycles",
           "KIND_LAYOUTS", "CONTIGUOUS_ALIGNMENT"]
