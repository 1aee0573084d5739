"""Device experiment: time explicit configs of the M-grouped MoE GEMMs on the benchmark's problems
(docs/PEERS.md: contiguous group sizes m x U(0.7, 1.3), padded to 128 rows; masked counts likewise), in one
process, in alternating rounds. Every config is checked against the benchmark's reference first.

    python perf_grouped_configs.py [VARIANT:]BMxBN[sS][pP][gG][d][,...] [[m:]G,M,N,K ...]      (from tests/device/)

S: stages (default as many as fit), P: 1 shares A along N, 2 shares B along M, G: raster band width,
d: deferred promotion; VARIANT as in perf_configs.py (default `current`). A shape prefixed `m:` is masked
(M: expected rows per group), else contiguous. Without shapes: the four contiguous anchors.
"""

import os
import statistics
import sys

import torch

import dgx
from dgx.bench.problems import build_problem, calc_diff
from dgx.bench.suites import builtin_suite, make_shape
from dgx.heuristics import max_stages
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_MASKED, GemmConfig
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import bench_cold_l2, parse_run, round_order, use_headers, variant_headers

ROUNDS = int(os.environ.get("PERF_ROUNDS", "3"))  # alternating rounds per config


def run_of(text: str):
    variant, blocks, flags = parse_run(text)
    return (variant,) + blocks + ("d" in flags,)


runs = [run_of(r) for r in sys.argv[1].split(",")]
HEADERS = {v: variant_headers(v) for v in {r[0] for r in runs}}
if len(sys.argv) > 2:
    shapes = []
    for text in sys.argv[2:]:
        suite = "masked" if text.startswith("m:") else "contiguous"
        g, m, n, k = (int(x) for x in text.removeprefix("m:").split(","))
        shapes.append(make_shape(suite, m, n, k, groups=g))
else:
    shapes = builtin_suite("contiguous")

for shape in shapes:
    p = build_problem(shape)
    t = p.tensors
    a, b, d = (t["A"], t["SFA"]), (t["B"], t["SFB"]), t["D"]
    masked = shape.suite == "masked"
    layout = LAYOUT_MASKED if masked else LAYOUT_CONTIGUOUS
    if masked:
        mm = t["masked_m"]

        def call(cfg):
            return dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, shape.m, config=cfg)
    else:
        idx = t["m_indices"]

        def call(cfg):
            return dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, idx, config=cfg)
    ok = []
    for variant, bm, bn, stages, pair, group_n, defer in runs:
        use_headers(HEADERS[variant])
        cfg = GemmConfig(shape.n, shape.k, bm, bn, stages or max_stages(bm, bn), group_n=group_n, pair=pair,
                         layout=layout, defer=defer)
        try:
            d.fill_(float("nan"))
            call(cfg)
            torch.cuda.synchronize()
            diff = calc_diff(p.valid_rows(d), p.ref)
            if not diff < 1e-3:
                raise RuntimeError(f"calc_diff {diff}")
            ok.append((variant, cfg))
        except Exception as exc:
            print(f"{shape.label} {variant} {bm}x{bn}p{pair}: FAILED {str(exc)[:300]}", flush=True)
    times = {i: [] for i in range(len(ok))}
    for r in range(ROUNDS):
        for i in round_order(len(ok), r):
            variant, cfg = ok[i]
            use_headers(HEADERS[variant])
            times[i].append(bench_cold_l2(lambda: call(cfg)))
    for i, (variant, cfg) in enumerate(ok):
        us = statistics.median(times[i])
        print(
            f"{shape.label} {variant:>8} {cfg.block_m}x{cfg.block_n}s{cfg.stages}p{cfg.pair}g{cfg.group_n}"
            f"{'d' if cfg.defer else ''}: {us:8.1f} us "
            f"{shape.flops / us / 1e6:6.0f} TFLOPS  rounds {[round(x, 1) for x in times[i]]}",
            flush=True,
        )
    p.free()
    del a, b, d
