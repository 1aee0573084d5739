"""Config choice for the BF16 GEMM family: pure Python, no GPU, unit-tested on the CPU.

The model: a persistent grid of one CTA per SM (or per two SMs for 2-CTA clusters) runs ceil(units / slots) waves of
tiles. A tile costs, per k-block of 64 of K, the larger of its tensor-core time (2·BM·BN·64 FLOP at 4096 BF16
FLOP/clk per SM, plus a per-k-block issue cost, more for one math warpgroup, which has no other warpgroup to hide
it behind; one-warpgroup tiles may take 2 or 4 K atoms per k-block to share it) and the time its SM takes to stream the k-block's A and B into shared memory; plus an epilogue. Two
floors bound the whole grid: HBM (every operand byte once, D written, C read) and the L2-to-SM traffic of all
tiles (a shared operand counted once per cluster). The lowest estimate wins; ties go to larger tiles, then no
cluster, then fewer K atoms (near-ties: more SMs busy per wave first). The constants are first estimates from the H100's datasheet and the FP8 family's measured per-SM stream
rate; they only need to rank configs the way the device does (tests/device/bf16_bench.py --sweep times the
candidates around the choice, to calibrate them).

M enters the estimate only through block counts (rows rounded up to 64 in the floors), so the choice is constant
between consecutive multiples of the block heights: dgx.enumeration.m_samples covers every M of a warm-up range.
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
TENSOR_FLOP_PER_CLK_PER_SM = 4096  # BF16 dense: 989 TFLOPS / 132 SMs / 1.83 GHz
KBLOCK_ISSUE_CLK = {1: 160.0, 2: 60.0}  # per k-block and math warpgroup count: barrier wait, issue, wait_group
STREAM_BYTES_PER_CLK_PER_SM = 57  # what one SM's TMA ring takes in (measured for the FP8 family, ~100 GB/s)
L2_BYTES_PER_CLK = 6000  # L2 to SMs, all SMs together (~10.5 TB/s at 1.75 GHz: cuBLAS moves ~9 TB/s on 128x256 tiles)
HBM_BYTES_PER_CLK = 1700  # ~3.0 TB/s measured copy bandwidth at 1.75 GHz
EPILOGUE_BYTES_PER_CLK = 64
TILE_FIXED_CLK = 400  # per tile: the first stage's latency not hidden by the previous tile
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


@dataclass(frozen=True)
class Estimate:
    config: Bf16GemmConfig
    units: int  # scheduler work units (tiles, or tile pairs)
    waves: int
    cycles: float


def block_ns(major_b: str) -> tuple[int, ...]:
    """The tile widths tried: multiples of 16 (K-major B), or of 32 (N-major B: whole 64-byte swizzle atoms)."""
    return tuple(range(32 if major_b == "mn" else 16, 257, 32 if major_b == "mn" else 16))


def stages_for(block_m: int, block_n: int, out_dtype: str, k_atoms: int = 1) -> int:
    """As many stages as fit, and for one-warpgroup tiles no more than ONE_WG_RING_BYTES of them."""
    stages = max_stages(block_m, block_n, out_dtype, k_atoms)
    if block_m == 64:
        stages = min(stages, max(ONE_WG_RING_BYTES // stage_bytes(block_m, block_n, k_atoms), MIN_STAGES))
    return stages


def tile_cycles(config: Bf16GemmConfig, k: int) -> float:
    """Estimated cycles of one tile over K: k-blocks x the larger of its MMA and stream times, plus its epilogue."""
    atoms = config.k_atoms
    k_blocks = ceil_div(k, BLOCK_K * atoms)
    mma = atoms * 2 * config.block_m * config.block_n * BLOCK_K / TENSOR_FLOP_PER_CLK_PER_SM
    mma += KBLOCK_ISSUE_CLK[config.math_warpgroups]
    stream = atoms * (config.block_m + config.block_n) * 128 / STREAM_BYTES_PER_CLK_PER_SM
    epilogue = config.block_m * config.block_n * config.out_bytes * (2 if config.with_c else 1) / EPILOGUE_BYTES_PER_CLK
    return k_blocks * max(mma, stream) + epilogue + TILE_FIXED_CLK


def estimate(config: Bf16GemmConfig, m: int, k: int, groups: int, num_sms: int) -> Estimate:
    """The model's cycles for `config` on M rows (masked: per group; contiguous: all groups'), K (K-grouped: a
    typical group's) and `groups`."""
    units = config.units(m)
    if config.layout in (LAYOUT_MASKED, LAYOUT_K_GROUPED):
        units *= groups
    slots = max(num_sms // config.cluster, 1)
    waves = max(ceil_div(units, slots), 1)
    compute = waves * tile_cycles(config, k)
    per_group = config.layout in (LAYOUT_MASKED, LAYOUT_K_GROUPED)  # every group has its own rows of D
    rows = ceil_div(m, 64) * 64 * (groups if per_group else 1)  # rows of D (and of A, but K-grouped)
    a_bytes = rows * k * 2  # K-grouped: each group's M x k_g
    b_bytes = config.n * k * 2 * (1 if config.layout == LAYOUT_DENSE else groups)
    d_bytes = rows * config.n * config.out_bytes * (2 if config.with_c else 1)
    hbm = (a_bytes + b_bytes + d_bytes) / HBM_BYTES_PER_CLK
    tiles = units * config.cluster
    a_rows = config.block_m // 2 if config.pair == SHARE_A else config.block_m
    b_rows = config.block_n // 2 if config.pair == SHARE_B else config.block_n
    l2 = tiles * ceil_div(k, BLOCK_K) * (a_rows + b_rows) * 128 / L2_BYTES_PER_CLK  # (per 64 of K: any k_atoms)
    return Estimate(config, units, waves, max(compute, hbm, l2))


def _better(a: Estimate, b: Estimate, num_sms: int) -> bool:
    """Whether `a` beats `b`: fewer cycles; within 1% (a memory floor both reach), more SMs busy per wave (a margin against
    the per-SM stream rate the model guesses), then larger tiles, then no cluster."""
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
    return a.config.k_atoms < b.config.k_atoms


def candidates(kind: str, m: int, n: int, k: int, groups: int, num_sms: int, major_a: str, major_b: str,
               out_dtype: str, with_c: bool, alignment: int = CONTIGUOUS_ALIGNMENT) -> list[Bf16GemmConfig]:
    """Every config the heuristic weighs for the problem (see :func:`choose`)."""
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
            for pair in (SHARE_NONE, SHARE_A, SHARE_B):
                if pair != SHARE_NONE and (num_sms < 2 or layout not in (LAYOUT_DENSE, LAYOUT_CONTIGUOUS)):
                    continue
                if pair == SHARE_A and (layout != LAYOUT_DENSE or ceil_div(n, bn) < 2):
                    continue
                if pair == SHARE_B and ceil_div(m, bm) < 2:
                    continue
                config = dict(n=n, k=0 if layout == LAYOUT_K_GROUPED else k, block_m=bm, block_n=bn, stages=stages,
                              major_a=major_a, major_b=major_b, out_dtype=out_dtype, with_c=with_c, layout=layout,
                              pair=pair, k_atoms=k_atoms)
                try:
                    out.append(Bf16GemmConfig(**config))
                except ValueError:
                    continue  # a combination the kernel does not support (validate says which)
    return out


def choose(kind: str, m: int, n: int, k: int, groups: int = 1, num_sms: int = 132, *, major_a: str = "k",
           major_b: str = "k", out_dtype: str = "bfloat16", with_c: bool = False,
           alignment: int = CONTIGUOUS_ALIGNMENT) -> Bf16GemmConfig:
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

    Raises ValueError naming what is wrong when the problem has no config.
    """
    if kind not in KIND_LAYOUTS:
        raise ValueError(f"kind: expected one of {', '.join(KIND_LAYOUTS)}; got {kind!r}")
    for name, value in (("m", m), ("n", n), ("k", k), ("groups", groups), ("num_sms", num_sms)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"choose: {name} must be a positive int; got {value!r}")
    return _choose(kind, m, n, k, groups, num_sms, major_a, major_b, out_dtype, bool(with_c), alignment)


@lru_cache(maxsize=4096)
def _choose(kind: str, m: int, n: int, k: int, groups: int, num_sms: int, major_a: str, major_b: str, out_dtype: str,
            with_c: bool, alignment: int) -> Bf16GemmConfig:
    best: Estimate | None = None
    for config in candidates(kind, m, n, k, groups, num_sms, major_a, major_b, out_dtype, with_c, alignment):
        est = estimate(config, m, k, groups, num_sms)
        if best is None or _better(est, best, num_sms):
            best = est
    if best is None:
        raise ValueError(f"bf16 {kind} M={m} N={n} K={k}: no kernel config fits "
                         f"(majors {major_a}/{major_b}, out {out_dtype}, with_c {with_c})")
    if env.print_configs():
        c = best.config
        print(f"dgx: bf16 {kind} ({c.form}) M={m} N={n} K={k} groups={groups} SMs={num_sms}: block "
              f"{c.block_m}x{c.block_n}, {c.stages} stages, pair {c.pair}, {best.units} units in {best.waves} waves",
              file=sys.stderr)
    return best.config


def warmup_configs(kind: str, n: int, k: int, groups: int = 1, max_m: int = 8192, num_sms: int = 132, *,
                   major_a: str | None = None, major_b: str | None = None, out_dtype: str | None = None,
                   with_c: bool | None = None, alignment: int = CONTIGUOUS_ALIGNMENT) -> list[Bf16GemmConfig]:
    """Every config :func:`choose` can pick for a (kind, N, K, groups) entry over M = 1..max_m (contiguous: M_sum up
    to groups x max_m in multiples of 128, capped as dgx.enumeration caps it), distinct, in order of first use.

    The operand forms default to the kind's usual one: dense and the M-grouped kinds nt with a BF16 D and no C, the
    K-grouped kind tn (A and B MN-major) with an FP32 D += A.B^T.
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
                               with_c=with_c, alignment=alignment))
    return list(seen)


__all__ = ["choose", "warmup_configs", "candidates", "estimate", "tile_cycles", "stages_for", "KIND_LAYOUTS",
           "CONTIGUOUS_ALIGNMENT"]
