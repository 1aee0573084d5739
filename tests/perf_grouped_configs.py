"""Device experiment: time explicit configs of the contiguous MoE GEMM on the benchmark's contiguous
problems (ANCHORS.md: group sizes m x U(0.7, 1.3), padded to 128 rows), in one process, in alternating
rounds. Every config is checked against the benchmark's reference first.

    python perf_grouped_configs.py BMxBN[sS][pP][gG][,...] [G,M,N,K ...]      (from tests/)

S: stages (default as many as fit), P: 1 shares A along N, 2 shares B along M, G: raster band width.
Without shapes: the four contiguous anchors.
"""

import statistics
import sys

import torch

import dgx
from dgx.bench.problems import build_problem, calc_diff
from dgx.bench.suites import builtin_suite, make_shape
from dgx.heuristics import max_stages
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, GemmConfig
from gpu_gemm_utils import bench_cold_l2, parse_blocks

ROUNDS = 3

runs = [parse_blocks(r) for r in sys.argv[1].split(",")]
if len(sys.argv) > 2:
    shapes = []
    for text in sys.argv[2:]:
        g, m, n, k = (int(x) for x in text.split(","))
        shapes.append(make_shape("contiguous", m, n, k, groups=g))
else:
    shapes = builtin_suite("contiguous")

for shape in shapes:
    p = build_problem(shape)
    t = p.tensors
    a, b, d, idx = (t["A"], t["SFA"]), (t["B"], t["SFB"]), t["D"], t["m_indices"]
    ok = []
    for bm, bn, stages, pair, group_n in runs:
        cfg = GemmConfig(shape.n, shape.k, bm, bn, stages or max_stages(bm, bn), group_n=group_n, pair=pair,
                         layout=LAYOUT_CONTIGUOUS)
        try:
            d.fill_(float("nan"))
            dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, idx, config=cfg)
            torch.cuda.synchronize()
            diff = calc_diff(p.valid_rows(d), p.ref)
            if not diff < 1e-3:
                raise RuntimeError(f"calc_diff {diff}")
            ok.append(cfg)
        except Exception as exc:
            print(f"{shape.label} {bm}x{bn}p{pair}: FAILED {str(exc)[:300]}", flush=True)
    times = {i: [] for i in range(len(ok))}
    for _ in range(ROUNDS):
        for i, cfg in enumerate(ok):
            times[i].append(bench_cold_l2(lambda: dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, idx, config=cfg)))
    for i, cfg in enumerate(ok):
        us = statistics.median(times[i])
        print(
            f"{shape.label} {cfg.block_m}x{cfg.block_n}s{cfg.stages}p{cfg.pair}g{cfg.group_n}: {us:8.1f} us "
            f"{shape.flops / us / 1e6:6.0f} TFLOPS  rounds {[round(x, 1) for x in times[i]]}",
            flush=True,
        )
    p.free()
    del a, b, d, idx
