"""Config choice for the FP8 GEMM kernels: pure Python, no GPU, unit-tested on the CPU.

The model: a persistent grid of `num_sms` CTAs runs ceil(tiles / num_sms) waves. A tile costs, per
128 of K, the larger of its tensor-core time and the time to stream its A and B slices into the SM,
plus an epilogue. The config with the lowest estimated time wins; ties go to larger tiles (fewer
bytes re-read from L2). Numbers are H100 SXM figures; they only need to rank configs correctly.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import lru_cache

from . import env
from .kernels.fp8_gemm import SMEM_LIMIT, GemmConfig, smem_bytes, validate_blocks

FP8_FLOP_PER_CLK_PER_SM = 8192  # dense e4m3 wgmma: 1979 TFLOP/s / 132 SMs / 1.83 GHz
STREAM_BYTES_PER_CLK_PER_SM = 57  # what one SM's TMA ring sustains (~100 GB/s at 1.75 GHz, measured by DeepGEMM-like kernels)
EPILOGUE_BYTES_PER_CLK = 64
MAX_STAGES = 16

BLOCK_MS = (64, 128, 256)
BLOCK_NS = tuple(range(16, 257, 8))


@dataclass(frozen=True)
class Choice:
    config: GemmConfig
    num_tiles: int
    waves: int
    est_cycles: float


def max_stages(block_m: int, block_n: int) -> int:
    stages = (SMEM_LIMIT - block_m * block_n * 2) // (block_m * 128 + block_n * 128 + 16)
    return min(stages, MAX_STAGES)


def tile_cycles(block_m: int, block_n: int, k: int) -> float:
    k_blocks = -(-k // 128)
    mma = block_m * block_n * 128 * 2 / FP8_FLOP_PER_CLK_PER_SM * (1 + 16 / block_n)
    load = (block_m + block_n) * 128 / STREAM_BYTES_PER_CLK_PER_SM
    epilogue = block_m * block_n * 2 / EPILOGUE_BYTES_PER_CLK
    return k_blocks * max(mma, load) + epilogue


def candidates(m: int) -> list[tuple[int, int]]:
    out = []
    for bm in BLOCK_MS:
        if bm == 256 and m <= 128:
            continue
        for bn in BLOCK_NS:
            if not validate_blocks(bm, bn) and max_stages(bm, bn) >= 3:
                out.append((bm, bn))
    return out


@lru_cache(maxsize=4096)
def choose_dense(m: int, n: int, k: int, num_sms: int) -> Choice:
    """The dense FP8 GEMM config for an M x N x K problem on `num_sms` SMs."""
    if m <= 0 or n <= 0 or k <= 0 or num_sms <= 0:
        raise ValueError(f"choose_dense needs positive m, n, k, num_sms; got {m}, {n}, {k}, {num_sms}")
    best: Choice | None = None
    for bm, bn in candidates(m):
        tiles = -(-m // bm) * -(-n // bn)
        waves = -(-tiles // num_sms)
        cycles = waves * tile_cycles(bm, bn, k)
        stages = max_stages(bm, bn)
        cand = Choice(GemmConfig(n, k, bm, bn, stages), tiles, waves, cycles)
        if best is None or _better(cand, best):
            best = cand
    assert best is not None  # candidates() is never empty for valid inputs
    if env.print_configs():
        c = best.config
        print(
            f"dgx: fp8_gemm_nt M={m} N={n} K={k} SMs={num_sms}: block {c.block_m}x{c.block_n}, {c.stages} stages, "
            f"{best.num_tiles} tiles in {best.waves} waves",
            file=sys.stderr,
        )
    return best


def _better(a: Choice, b: Choice) -> bool:
    if a.est_cycles < b.est_cycles * 0.999:
        return True
    if a.est_cycles > b.est_cycles * 1.001:
        return False
    return a.config.block_m * a.config.block_n > b.config.block_m * b.config.block_n
