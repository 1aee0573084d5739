"""CPU only: dgx's config and tile order for the M-grouped MoE GEMMs beside what DeepGEMM 2.6.1 (git 54e2261) would
run on the same problem (issue 44).

    python tests/device/moe_compare.py [--sms 132] [--tiles 3] [--json F]

For every shape of the contiguous and masked suites (dgx/bench/suites.py) and the issue's losing shapes, prints:
- dgx's choice (dgx.heuristics.choose_grouped, as the launch layer calls it) and its grid;
- DeepGEMM 2.6.1's choice, re-derived below in Python from reading its sm_90 heuristic (block sizes, cluster,
  stage count, grid), and the block count per scheduler group its tile swizzle uses;
- the tile order each scheduler walks: the first tiles of the first CTAs, and what the first wave touches
  (distinct m-blocks, n-blocks and groups; the A and B bytes a wave reads, where that is where L2 reuse lives).

The DeepGEMM model is a re-derivation of its rules, not its code. Where a rule comes from:
- block sizes, clusters, stage counts, the cost model and comparator: csrc/jit_kernels/heuristics/sm90.hpp
  (SM90ArchSpec) and common.hpp (get_best_config);
- what M the model sees (contiguous: the rows of all groups and one group; masked: expected_m and the group count),
  and that sm_90 never swaps A and B (its storage config requires swap_ab == 0): csrc/jit_kernels/impls/
  sm90_fp8_gemm_1d2d.hpp and the same sm90.hpp;
- the tile order: deep_gemm/include/deep_gemm/scheduler/gemm.cuh (Scheduler::get_next_block,
  get_swizzled_block_idx, get_num_1d_blocks_per_group);
- the grid: every SM (LaunchConfig num_sms = the device's SM count), tiles iter * num_sms + blockIdx.x.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, when run from anywhere

from dgx.bench.suites import MASKED_M_MAX, MK_ALIGNMENT, Shape, align, builtin_suite, make_shape  # noqa: E402
from dgx.heuristics import choose_grouped  # noqa: E402
from dgx.intmath import ceil_div  # noqa: E402
from dgx.kernels.fp8_gemm import SHARE_A, SHARE_B, GemmConfig  # noqa: E402
from dgx.kinds import Layout  # noqa: E402

# The losing shapes that are not in the suites (groups, expected M, N, K; masked with M_max 4096).
EXTRA_MASKED = ((16, 64, 4096, 7168),)

SMEM_CAPACITY = 232448
MAX_STAGES = 16


@dataclass(frozen=True)
class DgChoice:
    """DeepGEMM 2.6.1's sm_90 FP8 1D2D config for one problem, as its heuristic picks it."""

    block_m: int
    block_n: int
    cluster_m: int  # 2: two CTAs along M share B (multicast on B)
    cluster_n: int  # 2: two CTAs along N share A (multicast on A)
    stages: int
    smem_bytes: int
    num_waves: int
    last_wave_util: int
    num_cycles: int
    blocks_per_group: int  # the scheduler's swizzle: m-blocks (or n-blocks when A is multicast) per group

    @property
    def multicast_on_a(self) -> bool:
        return self.cluster_n > 1

    @property
    def cluster(self) -> int:
        return self.cluster_m * self.cluster_n

    def describe(self) -> str:
        share = {(1, 1): "no cluster", (2, 1): "B multicast (pairs along M)", (1, 2): "A multicast (pairs along N)"}
        return (f"{self.block_m}x{self.block_n} s{self.stages}, {share[(self.cluster_m, self.cluster_n)]}, "
                f"{self.num_waves} waves (last {self.last_wave_util} SMs), swizzle {self.blocks_per_group} "
                f"{'n' if self.multicast_on_a else 'm'}-blocks per group, grid = every SM")


def _dg_stages(block_m: int, block_n: int, k: int) -> tuple[int, int]:
    """(stages, shared memory) as sm90.hpp get_pipeline_config counts them for the FP8 1D2D kernel, BF16 D."""
    smem_cd = align(block_m * block_n * 2, 1024)
    smem_barriers = MAX_STAGES * 8 * 2
    per_stage = block_m * 128 + block_n * 128 + align(block_m * 4, 128)
    uniform_sfb = 1 if 128 % block_n == 0 else 2
    smem_extra_sfb = align(ceil_div(k, 128) * 4 * uniform_sfb, 8)
    extra = smem_cd + smem_barriers + smem_extra_sfb
    stages = min((SMEM_CAPACITY - extra) // per_stage, MAX_STAGES)
    return stages, extra + stages * per_stage


def _dg_blocks_per_group(block_m: int, block_n: int, num_sms: int, multicast_on_a: bool) -> int:
    """gemm.cuh get_num_1d_blocks_per_group: 8 or 16, whichever keeps a wave's rows + columns smallest (ties: 8)."""
    best, usage_min = 0, None
    for c in (8, 16):
        usage = c * block_n + ceil_div(num_sms, c) * block_m if multicast_on_a else c * block_m + ceil_div(num_sms, c) * block_n
        if usage_min is None or usage < usage_min:
            best, usage_min = c, usage
    return best


def deepgemm_choice(layout: str, m: int, n: int, k: int, groups: int, num_sms: int) -> DgChoice:
    """DeepGEMM 2.6.1's pick for an M-grouped FP8 GEMM on sm_90 (`layout` 'contiguous': m = rows of all groups,
    the model sees one group of them; 'masked': m = expected rows per group, the model sees `groups` of them)."""
    if layout == "contiguous":
        expected_m, expected_groups, block_ms = m, 1, (MK_ALIGNMENT,)
    elif layout == "masked":
        expected_m, expected_groups, block_ms = m, groups, (64, 128)
    else:
        raise ValueError(f"layout must be 'contiguous' or 'masked'; got {layout!r}")
    block_ns = [bn for bn in range(16, 193, 16)
                if not (bn > 128 and bn % (bn - 128) and 128 % (bn - 128))]  # the 1D2D kernel's unroll rule
    l2_per_cycle = int(min(64.0 * num_sms, 8e6 / 1.3e3))
    l1_per_cycle = 128 * num_sms
    best: tuple[int, DgChoice] | None = None
    for cluster_m, cluster_n in ((1, 1), (1, 2), (2, 1)):  # its loop order: cluster_m outer, cluster_n inner
        if num_sms % (cluster_m * cluster_n):
            continue
        for bm in block_ms:
            for bn in block_ns:
                if layout == "masked" and ceil_div(n, bn) % (cluster_m * cluster_n):
                    continue  # multicast legality for the masked layout
                stages, smem = _dg_stages(bm, bn, k)
                if stages < 3 or (bm * bn < 128 * 192 and stages < 4):
                    continue
                blocks = ceil_div(expected_m, bm) * ceil_div(n, bn) * expected_groups
                waves = ceil_div(blocks, num_sms)
                last = blocks % num_sms or num_sms
                l2_ab = k * (bm // cluster_n + bn // cluster_m)
                l1_ab = k * (bm + bn)
                l1_tc = k * (max(64, bm) + bn) + bm * bn * 2
                cd = bm * bn * 2
                l2_cycles = (l2_ab + cd) * blocks // l2_per_cycle
                l1_cycles = (l1_ab + l1_tc + cd) * blocks // l1_per_cycle
                efficiency = blocks / (waves * num_sms)
                cycles = int(max(l1_cycles, l2_cycles) / efficiency)
                if cluster_m * cluster_n > 1 and waves <= 1:
                    cycles = 2**63 - 1  # no multicast for one wave
                choice = DgChoice(bm, bn, cluster_m, cluster_n, stages, smem, waves, last, cycles,
                                  _dg_blocks_per_group(bm, bn, num_sms, cluster_n > 1))
                if best is None or cycles < best[0]:  # strictly fewer: the first candidate wins ties
                    best = (cycles, choice)
    if best is None:
        raise ValueError(f"no DeepGEMM config for {layout} M={m} N={n} K={k} groups={groups}")
    return best[1]


# ---- the problems' actual block structure ------------------------------------------------------------------------

def contiguous_block_groups(shape: Shape, block_m: int) -> list[int]:
    """The group of every block of `block_m` rows of the contiguous A (-1: a block that starts in padding)."""
    out = []
    for g, rows in enumerate(shape.group_ms):
        padded = align(rows, MK_ALIGNMENT)
        for start in range(0, padded, block_m):
            out.append(g if start < rows else -1)
    return out


# ---- tile orders --------------------------------------------------------------------------------------------------

def dgx_tiles(shape: Shape, config: GemmConfig, grid: int) -> list[list[tuple[int, int, int]]]:
    """(group, m-block in the group, n-block) of each CTA's tiles in order, as ptx/scheduler.cuh walks them (a pair
    unit gives its CTAs one tile each; a skipped contiguous block gives none)."""
    cluster = config.cluster
    slots = grid // cluster
    nb = ceil_div(shape.n, config.block_n)
    n_units = ceil_div(nb, 2) if config.pair == SHARE_A else nb
    per_cta: list[list[tuple[int, int, int]]] = [[] for _ in range(grid)]

    def raster(u: int, m_units: int) -> tuple[int, int]:
        band_units = m_units * config.group_n
        band, in_band = divmod(u, band_units)
        first_n = band * config.group_n
        width = min(config.group_n, n_units - first_n)
        mu = in_band // width
        return mu, first_n + in_band - mu * width

    if shape.suite == "contiguous":
        block_group = contiguous_block_groups(shape, config.block_m)
        starts = {}
        for i, g in enumerate(block_group):
            if g >= 0:
                starts.setdefault(g, i)
        mb = len(block_group)
        m_units = ceil_div(mb, 2) if config.pair == SHARE_B else mb
        for u in range(m_units * n_units):
            mu, nu = raster(u, m_units)
            cta_slot = u % slots
            for rank in range(cluster):
                m_block = mu * 2 + rank if config.pair == SHARE_B else mu
                n_block = nu * 2 + rank if config.pair == SHARE_A else nu
                g = block_group[m_block] if m_block < mb else -1
                if g >= 0 and n_block < nb:
                    per_cta[cta_slot * cluster + rank].append((g, m_block - starts[g], n_block))
        return per_cta
    # masked: groups one after another, each a grid of its valid rows' blocks
    before = 0
    for g, rows in enumerate(shape.group_ms):
        m_units = ceil_div(rows, config.block_m)
        for u in range(m_units * n_units):
            mu, nu = raster(u, m_units)
            per_cta[(before + u) % slots].append((g, mu, nu))
        before += m_units * n_units
    return per_cta


def deepgemm_tiles(shape: Shape, choice: DgChoice, num_sms: int) -> list[list[tuple[int, int, int]]]:
    """(group, m-block in the group, n-block) of each CTA's tiles in order, as DeepGEMM 2.6.1's sm_90 scheduler
    walks them (contiguous: every block of A, padding ones included, as its math skips them; listed here only when
    valid)."""
    nb = ceil_div(shape.n, choice.block_n)
    per_cta: list[list[tuple[int, int, int]]] = [[] for _ in range(num_sms)]
    c = choice.blocks_per_group
    multicast = choice.cluster

    def swizzle(idx: int, num_m: int) -> tuple[int, int]:
        primary, secondary = (nb, num_m) if choice.multicast_on_a else (num_m, nb)
        per_group = secondary * c
        grp, in_group = divmod(idx, per_group)
        first = grp * c
        in_grp_blocks = min(c, primary - first)
        if multicast > 1 and in_grp_blocks % 2:
            if in_group < (in_grp_blocks ^ 1) * secondary:
                in_grp_blocks ^= 1
            else:
                in_group -= (in_grp_blocks ^ 1) * secondary
                first += in_grp_blocks ^ 1
                in_grp_blocks = 1
        if choice.multicast_on_a:
            return in_group // in_grp_blocks, first + in_group % in_grp_blocks
        return first + in_group % in_grp_blocks, in_group // in_grp_blocks

    if shape.suite == "contiguous":
        block_group = contiguous_block_groups(shape, choice.block_m)
        starts = {}
        for i, g in enumerate(block_group):
            if g >= 0:
                starts.setdefault(g, i)
        total = len(block_group) * nb
        for idx in range(total):
            mblk, nblk = swizzle(idx, len(block_group))
            g = block_group[mblk]
            if g >= 0:
                per_cta[idx % num_sms].append((g, mblk - starts[g], nblk))
        return per_cta
    before = 0
    for g, rows in enumerate(shape.group_ms):
        num_m = ceil_div(rows, choice.block_m)
        for i in range(num_m * nb):
            mblk, nblk = swizzle(i, num_m)
            per_cta[(before + i) % num_sms].append((g, mblk, nblk))
        before += num_m * nb
    return per_cta


def wave_footprint(per_cta: list[list[tuple[int, int, int]]], wave: int, block_m: int, block_n: int, k: int) -> dict:
    """What the `wave`-th tile of every CTA touches together: distinct (group, m-block), (group, n-block), groups,
    and the bytes of A and B they read (FP8: one byte per element)."""
    tiles = [t[wave] for t in per_cta if len(t) > wave]
    ms = {(g, mb) for g, mb, _ in tiles}
    ns = {(g, nb) for g, _, nb in tiles}
    return {
        "tiles": len(tiles),
        "m_blocks": len(ms),
        "n_blocks": len(ns),
        "groups": len({g for g, _, _ in tiles}),
        "a_mb": round(len(ms) * block_m * k / 1e6, 1),
        "b_mb": round(len(ns) * block_n * k / 1e6, 1),
    }


def tiles_per_cta(per_cta) -> tuple[int, int]:
    counts = [len(t) for t in per_cta]
    return min(counts), max(counts)


# ---- the comparison -----------------------------------------------------------------------------------------------

def shapes() -> list[Shape]:
    out = list(builtin_suite("contiguous")) + list(builtin_suite("masked"))
    out += [make_shape("masked", m, n, k, g, max_m=MASKED_M_MAX) for g, m, n, k in EXTRA_MASKED]
    return out


def dgx_choice(shape: Shape, num_sms: int):
    """(config, grid) as the launch layer picks them (dgx.grouped -> dgx.launch.plan)."""
    if shape.suite == "contiguous":
        config = choose_grouped(Layout.CONTIGUOUS, shape.padded_m, shape.n, shape.k, shape.groups, num_sms).config
        units = config.units(shape.padded_m)
    else:
        m = min(shape.m, shape.max_m)
        config = choose_grouped(Layout.MASKED, m, shape.n, shape.k, shape.groups, num_sms).config
        units = config.units(shape.max_m) * shape.groups
    return config, config.grid(units, num_sms)


def describe_dgx(config: GemmConfig, grid: int) -> str:
    share = {0: "no cluster", SHARE_A: "A multicast (pairs along N)", SHARE_B: "B multicast (pairs along M)"}[config.pair]
    extra = []
    if config.defer:
        extra.append("deferred promotion")
    if config.stage_rounds:
        extra.append("stage rounds")
    return (f"{config.block_m}x{config.block_n} s{config.stages}, {share}, raster bands of {config.group_n} "
            f"n-units{', ' + ', '.join(extra) if extra else ''}, grid {grid}")


def compare(shape: Shape, num_sms: int, first_tiles: int) -> dict:
    mm = shape.padded_m if shape.suite == "contiguous" else shape.m
    config, grid = dgx_choice(shape, num_sms)
    dg = deepgemm_choice(shape.suite, mm, shape.n, shape.k, shape.groups, num_sms)
    ours = dgx_tiles(shape, config, grid)
    theirs = deepgemm_tiles(shape, dg, num_sms)
    return {
        "label": shape.label,
        "suite": shape.suite,
        "group_ms": list(shape.group_ms),
        "dgx": {"config": describe_dgx(config, grid), "block_m": config.block_m, "block_n": config.block_n,
                "stages": config.stages, "pair": config.pair, "grid": grid,
                "tiles_per_cta": tiles_per_cta(ours),
                "first_tiles": {cta: ours[cta][:first_tiles] for cta in (0, 1, 2, 3)},
                "wave0": wave_footprint(ours, 0, config.block_m, config.block_n, shape.k),
                "wave1": wave_footprint(ours, 1, config.block_m, config.block_n, shape.k)},
        "deepgemm": {"config": dg.describe(), **asdict(dg),
                     "tiles_per_cta": tiles_per_cta(theirs),
                     "first_tiles": {cta: theirs[cta][:first_tiles] for cta in (0, 1, 2, 3)},
                     "wave0": wave_footprint(theirs, 0, dg.block_m, dg.block_n, shape.k),
                     "wave1": wave_footprint(theirs, 1, dg.block_m, dg.block_n, shape.k)},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="SM count (H100 SXM and H200: 132)")
    ap.add_argument("--tiles", type=int, default=3, help="first tiles listed per CTA")
    ap.add_argument("--json", help="also write the comparison as JSON here")
    args = ap.parse_args(argv)
    rows = [compare(s, args.sms, args.tiles) for s in shapes()]
    for r in rows:
        print(f"== {r['suite']} {r['label']}  rows per group {r['group_ms']}")
        for who in ("dgx", "deepgemm"):
            x = r[who]
            print(f"  {who:>8}: {x['config']}")
            print(f"            tiles per CTA {x['tiles_per_cta'][0]}-{x['tiles_per_cta'][1]}; wave 0 {x['wave0']}; "
                  f"wave 1 {x['wave1']}")
            firsts = "; ".join(f"CTA {c}: " + " ".join(f"g{g}m{m}n{n}" for g, m, n in t)
                               for c, t in x["first_tiles"].items())
            print(f"            first tiles (group, m-block in group, n-block): {firsts}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
