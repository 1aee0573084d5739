"""The einsum family's kernels: DeepGEMM's three sm_90 BF16 contractions on the BF16 GEMM kernel (ptx/bf16_gemm.cuh)
with the scheduler's two batched layouts, plus one small reduction kernel (ptx/einsum_reduce.cuh).

- ``'bhr,hdr->bhd'`` / ``'bhd,hdr->bhr'`` (MLA up/down projections): the batched layout, one GEMM per head h, M = b,
  over 3-D tensor maps of the strided views (x [b, h, k] as (k, b, h), y as (k, n, h) K-major or (n, k, h) N-major,
  z [b, h, n] as (n, b, h)): no copies. :func:`choose_batched` picks the tile.
- ``'bmk,bnk->mn'`` (the S batch summed): the batch-sum layout, one M x N output whose reduction runs over (s, k),
  cut into ranges that run on their own CTAs; each range stores its FP32 partial into a workspace
  [ranges, M, N], and the reduction kernel sums the ranges in order (+ C) into D: bitwise deterministic.
  :func:`choose_batch_sum` picks the tile (from M, N, K only: one kernel serves every S), :func:`batch_sum_ranges`
  the ranges for an S.

The heuristics reuse the BF16 family's cost model (dgx.kernels.bf16_gemm_heuristics): pure Python, CPU-tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import jit, runtime
from ..intmath import ceil_div
from .bf16_gemm_config import BLOCK_K, LAYOUT_BATCH_SUM, LAYOUT_BATCHED, Bf16GemmConfig
from .bf16_gemm_heuristics import (
    HBM_BYTES_PER_CLK,
    L2_BYTES_PER_CLK,
    MIN_MERGED_STAGES,
    MIN_STAGES,
    PINGPONG_BLOCK_MS,
    Estimate,
    _better,
    block_ns,
    pingpong_tail_cycles,
    stages_for,
    tile_cycles,
)
from .interface import KernelInterface, Param

#: The contractions, by DeepGEMM's expression.
BMK_BNK_MN = "bmk,bnk->mn"
BHR_HDR_BHD = "bhr,hdr->bhd"
BHD_HDR_BHR = "bhd,hdr->bhr"
EXPRESSIONS = (BMK_BNK_MN, BHR_HDR_BHD, BHD_HDR_BHR)
#: The batched forms' B major-ness: y [h, d, r] is K-major for 'bhr,hdr->bhd' (K = r) and N-major for
#: 'bhd,hdr->bhr' (K = d, N = r).
BATCHED_MAJOR_B = {BHR_HDR_BHD: "k", BHD_HDR_BHR: "mn"}

# Batch-sum: a range of the (s, k) reduction runs at least this many k-blocks, so its partial tile (stored and read
# back once) stays small next to what it streams.
MIN_KBLOCKS_PER_RANGE = 4
# Batch-sum tiles keep at least this many stages beside their FP32 staging tile (a memory-bound stream).
BATCH_SUM_MIN_STAGES = 3


# --- 'bhr,hdr->bhd' and 'bhd,hdr->bhr': the batched layout -------------------------------------------------------


def batched_estimate(config: Bf16GemmConfig, b: int, heads: int, k: int, num_sms: int) -> Estimate:
    """The BF16 model's cycles for `config` on `heads` GEMMs of b x N x K: waves of tiles, bounded below by HBM
    (x, y and z once) and by the L2-to-SM traffic of every tile."""
    units = config.units(b) * heads
    waves = max(ceil_div(units, num_sms), 1)
    compute = waves * tile_cycles(config, k) + pingpong_tail_cycles(config)
    rows = ceil_div(b, 64) * 64 * heads
    hbm = (rows * k * 2 + heads * config.n * k * 2 + rows * config.n * config.out_bytes) / HBM_BYTES_PER_CLK
    l2 = units * ceil_div(k, BLOCK_K) * (config.block_m + config.block_n) * 128 / L2_BYTES_PER_CLK
    return Estimate(config, units, waves, max(compute, hbm, l2))


def batched_candidates(b: int, n: int, k: int, major_b: str, heads: int = 1, num_sms: int = 132,
                       pingpong: bool = False) -> list[Bf16GemmConfig]:
    """Every tile :func:`choose_batched` weighs: 64/128/256-row tiles (none mostly padding), every width the
    operand allows up to N, one-warpgroup tiles with 1, 2 or 4 K atoms per stage; no pair, no split-K (3-D maps).
    With `pingpong`, also ping-pong tiles of 64 and 128 rows where the heads' tiles outnumber the SMs (each math
    warpgroup its own tiles: one's epilogue, the store of z, runs under the other's MMAs)."""
    out = []
    if pingpong:
        out += _batched_pingpong_candidates(b, n, k, major_b, heads, num_sms)
    widest = ceil_div(n, 32 if major_b == "mn" else 16) * (32 if major_b == "mn" else 16)
    for bm in (64, 128, 256):
        if bm == 256 and b <= 128 or bm == 128 and b <= 64:
            continue
        for bn in block_ns(major_b):
            if bn > max(widest, 32):
                continue
            for k_atoms in (1, 2, 4) if bm == 64 else (1,):
                stages = stages_for(bm, bn, "bfloat16", k_atoms)
                if stages < (MIN_STAGES if k_atoms == 1 else MIN_MERGED_STAGES):
                    continue
                try:
                    out.append(Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a="k",
                                              major_b=major_b, layout=LAYOUT_BATCHED, k_atoms=k_atoms))
                except ValueError:
                    continue
    return out


def _batched_pingpong_candidates(b: int, n: int, k: int, major_b: str, heads: int,
                                 num_sms: int) -> list[Bf16GemmConfig]:
    out = []
    widest = ceil_div(n, 32 if major_b == "mn" else 16) * (32 if major_b == "mn" else 16)
    for bm in PINGPONG_BLOCK_MS:
        if bm == 128 and b <= 64:
            continue
        for bn in block_ns(major_b):
            if bn > max(widest, 32) or ceil_div(b, bm) * ceil_div(n, bn) * heads <= num_sms:
                continue
            stages = stages_for(bm, bn, "bfloat16", schedule="pingpong")
            if stages < MIN_STAGES:
                continue
            try:
                out.append(Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a="k",
                                          major_b=major_b, layout=LAYOUT_BATCHED, schedule="pingpong"))
            except ValueError:
                continue  # more accumulators than one warpgroup holds
    return out


def choose_batched(expr: str, b: int, heads: int, n: int, k: int, num_sms: int = 132,
                   pingpong: bool | None = None) -> Bf16GemmConfig:
    """The kernel of a batched einsum (`expr` 'bhr,hdr->bhd' or 'bhd,hdr->bhr'): `heads` GEMMs of `b` rows,
    N (d, or r) and K (r, or d). `pingpong`: also weigh ping-pong tiles; None reads DGX_BF16_PINGPONG (off unless
    set, as for the BF16 family, until a device run confirms the model). ValueError naming what is wrong."""
    if expr not in BATCHED_MAJOR_B:
        raise ValueError(f"expr: expected one of {', '.join(BATCHED_MAJOR_B)}; got {expr!r}")
    for name, value in (("b", b), ("heads", heads), ("n", n), ("k", k), ("num_sms", num_sms)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"choose_batched: {name} must be a positive int; got {value!r}")
    if pingpong is None:
        from .. import env

        pingpong = env.bf16_pingpong()
    return _choose_batched(BATCHED_MAJOR_B[expr], b, heads, n, k, num_sms, bool(pingpong))


def l2_rows(config: Bf16GemmConfig, b: int, heads: int) -> int:
    """Rows of A and B every tile streams per k-block, all tiles together: the L2-to-SM traffic."""
    return config.units(b) * heads * (config.block_m + config.block_n)


def _better_batched(a: Estimate, b_est: Estimate, b: int, heads: int, num_sms: int) -> bool:
    """Fewer cycles; within 1% (both on a memory floor: x streamed once at large b, the weights at small b), more
    SMs busy per wave (by more than 5% of them: one SM's stream cannot carry a share of HBM); then the tile that
    streams fewer bytes from L2 (a full-width tile reads x once, not once per N block); then the BF16 family's
    order. A ping-pong tile against a cooperative one: only by PINGPONG_MARGIN fewer cycles."""
    if a.config.schedule != b_est.config.schedule:
        return _better(a, b_est, num_sms)
    if abs(a.cycles - b_est.cycles) > 0.01 * min(a.cycles, b_est.cycles):
        return a.cycles < b_est.cycles
    busy_a, busy_b = a.units / a.waves, b_est.units / b_est.waves  # SMs busy per wave: HBM wants them all
    if abs(busy_a - busy_b) > 0.05 * num_sms:
        return busy_a > busy_b
    la, lb = l2_rows(a.config, b, heads), l2_rows(b_est.config, b, heads)
    if abs(la - lb) > 0.05 * min(la, lb):
        return la < lb
    return _better(a, b_est, num_sms)


@lru_cache(maxsize=4096)
def _choose_batched(major_b: str, b: int, heads: int, n: int, k: int, num_sms: int,
                    pingpong: bool = False) -> Bf16GemmConfig:
    best = None
    for config in batched_candidates(b, n, k, major_b, heads, num_sms, pingpong):
        est = batched_estimate(config, b, heads, k, num_sms)
        if best is None or _better_batched(est, best, b, heads, num_sms):
            best = est
    if best is None:
        raise ValueError(f"einsum: no kernel config fits b={b} heads={heads} N={n} K={k} (B {major_b}-major)")
    return best.config


# --- 'bmk,bnk->mn': the batch-sum layout -------------------------------------------------------------------------


def batch_sum_candidates(m: int, n: int, k: int) -> list[Bf16GemmConfig]:
    """The tiles :func:`choose_batch_sum` weighs: 64 rows for M <= 64, else 128; widths by 16 up to N (256 at
    most) that leave BATCH_SUM_MIN_STAGES beside the FP32 staging tile; K atoms of 128 of K where K allows."""
    out = []
    for bm in (64,) if m <= 64 else (128,):
        for bn in range(16, min(256, ceil_div(n, 16) * 16) + 1, 16):
            for k_atoms in (2, 1) if k % 128 == 0 else (1,):
                stages = stages_for(bm, bn, "float32", k_atoms)
                if stages < BATCH_SUM_MIN_STAGES:
                    continue
                try:
                    out.append(Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a="k",
                                              major_b="k", out_dtype="float32", layout=LAYOUT_BATCH_SUM,
                                              k_atoms=k_atoms))
                except ValueError:
                    continue
    return out


def choose_batch_sum(m: int, n: int, k: int, num_sms: int = 132) -> Bf16GemmConfig:
    """The GEMM kernel of 'bmk,bnk->mn' for M x N outputs over K per batch (any S): the tile that streams the
    fewest bytes from L2 into the SMs per batch (tiles x (BM + BN) rows per k-block, padding counted), then the
    deeper ring, then K atoms of 128."""
    for name, value in (("m", m), ("n", n), ("k", k), ("num_sms", num_sms)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"choose_batch_sum: {name} must be a positive int; got {value!r}")
    return _choose_batch_sum(m, n, k)


@lru_cache(maxsize=4096)
def _choose_batch_sum(m: int, n: int, k: int) -> Bf16GemmConfig:
    def cost(c: Bf16GemmConfig) -> tuple:
        tiles = ceil_div(m, c.block_m) * ceil_div(n, c.block_n)
        return (tiles * (c.block_m + c.block_n), -c.stages * c.k_atoms, -c.k_atoms)

    found = sorted(batch_sum_candidates(m, n, k), key=cost)
    if not found:
        raise ValueError(f"einsum bmk,bnk->mn: no kernel config fits M={m} N={n} K={k}")
    return found[0]


def batch_sum_tiles(config: Bf16GemmConfig, m: int) -> int:
    return ceil_div(m, config.block_m) * ceil_div(config.n, config.block_n)


def batch_sum_ranges(config: Bf16GemmConfig, m: int, s: int, num_sms: int) -> int:
    """How many ranges the (s, k) reduction of S batches is cut into: as many as keep every SM busy in one wave of
    tiles x ranges CTAs, each range at least MIN_KBLOCKS_PER_RANGE k-blocks (at least one range)."""
    total = s * ceil_div(config.k, BLOCK_K * config.k_atoms)
    return max(1, min(num_sms // batch_sum_tiles(config, m), total // MIN_KBLOCKS_PER_RANGE, total))


# --- the reduction kernel of 'bmk,bnk->mn' -----------------------------------------------------------------------

# d[m, n] = (c[m, n] +) sum over r of partials[r, m, n], r in order (ptx/einsum_reduce.cuh).
REDUCE_INTERFACE = KernelInterface(
    "BatchSumReduceParams",
    (
        Param("partials", "const float*"),
        Param("d", "void*"),
        Param("c", "const float*", 0),
        Param("m", "int"),
        Param("n", "int"),
        Param("ranges", "int"),
        Param("ld_d", "long long"),
        Param("ld_c", "long long", 0),
    ),
)
REDUCE_THREADS = 256
REDUCE_BLOCKS_PER_SM = 4


@dataclass(frozen=True)
class BatchSumReduceConfig:
    """The reduction kernel of 'bmk,bnk->mn': D FP32 (optionally + C) or BF16."""

    out_dtype: str = "float32"
    with_c: bool = False
    threads: int = REDUCE_THREADS

    def __post_init__(self) -> None:
        problem = ""
        if self.out_dtype not in ("float32", "bfloat16"):
            problem = f"out_dtype must be float32 or bfloat16; got {self.out_dtype!r}"
        elif self.with_c and self.out_dtype != "float32":
            problem = "C is added to an FP32 D only"
        elif self.threads % 32 or not 32 <= self.threads <= 1024:
            problem = f"threads must be a multiple of 32 in 32..1024; got {self.threads}"
        if problem:
            raise ValueError(f"invalid einsum reduction config {self}: {problem}")

    @property
    def kernel_name(self) -> str:
        out = "f32" if self.out_dtype == "float32" else "bf16"
        return f"dgx_bf16_bmn_bnk_mn_gemm_impl_reduce_{out}{'_c' if self.with_c else ''}_w{self.threads}"

    def grid(self, m: int, n: int, num_sms: int) -> int:
        return max(1, min(ceil_div(m * (n // 4), self.threads), num_sms * REDUCE_BLOCKS_PER_SM))

    def render(self) -> jit.KernelSource:
        return _render_reduce(self)


#: Every reduction kernel a 'bmk,bnk->mn' call may launch (warm-up builds them all: they do not depend on the shape).
REDUCE_CONFIGS = (BatchSumReduceConfig("float32", False), BatchSumReduceConfig("float32", True),
                  BatchSumReduceConfig("bfloat16", False))


@lru_cache(maxsize=None)
def _render_reduce(config: BatchSumReduceConfig) -> jit.KernelSource:
    f32 = "true" if config.out_dtype == "float32" else "false"
    body = f"dgx::batch_sum_reduce_body<{f32}, {'true' if config.with_c else 'false'}, {config.threads}>"
    return jit.KernelSource(
        name=config.kernel_name,
        source='#include "einsum_reduce.cuh"\n' + REDUCE_INTERFACE.render_entry(config.kernel_name, config.threads,
                                                                                 body),
        summary=(("family", "einsum"), ("kernel", "bmk,bnk->mn reduction"), ("out_dtype", config.out_dtype),
                 ("with_c", str(config.with_c)), ("threads", str(config.threads))),
        warmup_hint="--shapes FILE with any {\"kind\": \"einsum_bmk_bnk_mn\", ...} entry (every such entry builds "
                    "the reduction kernels)",
    )


def pack_reduce(partials: int, d: int, c: int, m: int, n: int, ranges: int, ld_d: int, ld_c: int
                ) -> runtime.ParamPack:
    """The reduction kernel's parameters."""
    return REDUCE_INTERFACE.pack(partials=partials, d=d, c=c, m=m, n=n, ranges=ranges, ld_d=ld_d, ld_c=ld_c)


__all__ = [
    "BATCHED_MAJOR_B", "BHD_HDR_BHR", "BHR_HDR_BHD", "BMK_BNK_MN", "BatchSumReduceConfig", "EXPRESSIONS",
    "REDUCE_CONFIGS", "REDUCE_INTERFACE", "batch_sum_candidates", "batch_sum_ranges", "batch_sum_tiles",
    "batched_candidates", "batched_estimate", "choose_batch_sum", "choose_batched", "pack_reduce",
]
