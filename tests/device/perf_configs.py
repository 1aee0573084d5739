"""Device experiment: time explicit configs (block sizes the validator may not allow yet), each under the
current headers or a header variant, in one process, in alternating rounds. Configs are checked correct
before timing.

    python perf_configs.py RUN[,RUN...] [M,N,K ...]      (from tests/device/)

RUN is [VARIANT:]BMxBN[sS][pP][gG][u][d] (S stages, default as many as fit; P: 1 shares A along N, 2 shares
B along M; G: units per raster band along N, default 16; u: a grid of one CTA per SM instead of the fewest
CTAs that keep the wave count; d: deferred promotion). VARIANT is `current` (the working tree's headers, the
default) or parts joined by '+', each naming <repository>/.dev/fp8_gemm_<PART>.cuh and/or a folder <repository>/.dev/hdr_<PART>/
of headers that replace the working tree's (e.g. `unif+hint`).
PERF_ROUNDS (environment, default 3) sets the number of alternating rounds.
A variant whose kernel stages no BF16 output tile (`kSmemD = kWgrad ? ...`) gets its shared memory
computed without one.
"""

import os
import statistics
import sys

import torch

import dgx
from dgx.kernels import fp8_gemm as family
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import bench_cold_l2, check_dense, make_dense, parse_run, round_order, use_headers, variant_headers

ROUNDS = int(os.environ.get("PERF_ROUNDS", "3"))  # alternating rounds per config


def run_of(text: str):
    variant, (bm, bn, stages, pair, group_n), flags = parse_run(text, "ud")
    return variant, bm, bn, stages, pair, "u" in flags, group_n, "d" in flags


runs = [run_of(r) for r in sys.argv[1].split(",")]
shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[2:]] or [(4096, 4096, 7168), (4096, 7168, 16384)]
HEADERS = {v: variant_headers(v) for v in {r[0] for r in runs}}
family.validate_blocks = lambda *a, **k: ""  # let the experiment reach tiles the validator does not offer yet
SMEM_WITH_D = family.smem_bytes


def smem_without_d(bm, bn, stages, wgrad=False):
    return SMEM_WITH_D(bm, bn, stages, wgrad) - (0 if wgrad else bm * bn * 2)


def smem_of(headers):
    return smem_without_d if b"kSmemD = kWgrad ?" in headers["fp8_gemm.cuh"] else SMEM_WITH_D


BALANCED_GRID = family.GemmConfig.grid


def full_grid(self, units, num_sms):
    return max(min(units, num_sms // self.cluster), 1) * self.cluster


def use(headers, full=False):
    use_headers(headers)
    family.smem_bytes = smem_of(headers)
    family.GemmConfig.grid = full_grid if full else BALANCED_GRID


for m, n, k in shapes:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    ok = []
    for variant, bm, bn, stages, pair, full, group_n, defer in runs:
        use(HEADERS[variant], full)
        tile = family.smem_bytes(bm, bn, 0)
        per_stage = family.smem_bytes(bm, bn, 1) - tile
        stages = stages or min((family.SMEM_LIMIT - tile) // per_stage, 16)
        cfg = family.GemmConfig(n, k, bm, bn, stages, group_n=group_n, pair=pair, defer=defer)
        try:
            d.fill_(float("nan"))
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            check_dense(d, a, b, a_fp8, b_fp8)
            ok.append((variant, cfg, full))
        except Exception as exc:
            print(f"{m}x{n}x{k} {variant:>8} {bm}x{bn}p{pair}: FAILED {str(exc)[:300]}", flush=True)
    times = {i: [] for i in range(len(ok))}
    for r in range(ROUNDS):
        for i in round_order(len(ok), r):
            variant, cfg, full = ok[i]
            use(HEADERS[variant], full)
            times[i].append(bench_cold_l2(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)))
    for i, (variant, cfg, full) in enumerate(ok):
        t = statistics.median(times[i])
        print(
            f"{m}x{n}x{k} {variant:>8} {cfg.block_m}x{cfg.block_n}s{cfg.stages}p{cfg.pair}g{cfg.group_n}{'u' if full else ''}"
            f"{'d' if cfg.defer else ''}: {t:8.1f} us "
            f"{2 * m * n * k / t / 1e6:6.0f} TFLOPS  rounds {[round(x, 1) for x in times[i]]}",
            flush=True,
        )
    del a, b, a_fp8, b_fp8, d
