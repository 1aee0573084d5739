"""What a preset's warm-up builds under each set of run-time shape options (CPU only: enumeration, no compile).

    python tests/device/warmup_census.py --preset deepseek-v3

For the options off, N at run time (DGX_GEMM_RUNTIME_N), N and K (with DGX_GEMM_RUNTIME_K), and N, K and B's L2
policy (with DGX_GEMM_RUNTIME_STREAM_B) at run time: the
kernels of the plan and their predicted NVRTC CPU seconds (dgx/compile_cost.py), in all and per class of FP8 GEMM
kernel: a straight-line k-loop (narrow deferred decode tiles, K compiled in by nature), the weight gradient, K at
run time, K compiled in (lean rounds, split-K, head splits, fused epilogues, or the option off). The measured
figure is a cold `dgx warmup --preset ... -j 2` under /usr/bin/time (user + sys of it and its workers).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OPTION_SETS = {"off": {}, "n": {"DGX_GEMM_RUNTIME_N": "1"},
               "nk": {"DGX_GEMM_RUNTIME_N": "1", "DGX_GEMM_RUNTIME_K": "1"},
               "nks": {"DGX_GEMM_RUNTIME_N": "1", "DGX_GEMM_RUNTIME_K": "1", "DGX_GEMM_RUNTIME_STREAM_B": "1"}}


def kernel_class(summary: dict) -> str:
    from dgx.kernels.fp8_gemm import WHOLE_LOOP_K_BLOCKS

    if summary.get("family") != "fp8_gemm_nt":
        return "other families"
    k, split, block_n = int(summary["k"]), int(summary.get("split_k", "1")), int(summary["block_n"])
    tile_k_blocks = -(-k // 128) // split if k > 0 else 0
    if summary.get("defer") == "True" and block_n <= 32 and 0 < tile_k_blocks <= WHOLE_LOOP_K_BLOCKS:
        return "straight-line k-loop"
    if summary.get("wgrad") == "True":
        return "weight gradient"
    return "K at run time" if summary.get("runtime_k") == "True" else "K compiled in"


def census(preset: str, options: dict, max_m: int, jobs: int) -> tuple[int, float, dict]:
    from dgx import compile_cost, warmup

    for name in ("DGX_GEMM_RUNTIME_N", "DGX_GEMM_RUNTIME_K", "DGX_GEMM_RUNTIME_STREAM_B"):
        os.environ.pop(name, None)
    os.environ.update(options)
    plan = warmup.plan(warmup.load_preset(preset), max_m=max_m, jobs=jobs)
    classes: dict = defaultdict(lambda: [0, 0.0])
    for kernel in plan.kernels:
        seconds = compile_cost.predicted_seconds(kernel.source)
        row = classes[kernel_class(dict(kernel.source.summary))]
        row[0] += 1
        row[1] += seconds
    return len(plan.kernels), sum(r[1] for r in classes.values()), dict(classes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("--max-m", type=int, default=8192)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    args = ap.parse_args()
    for label, options in OPTION_SETS.items():
        count, seconds, classes = census(args.preset, options, args.max_m, args.jobs)
        print(f"options {label:3s}: {count:4d} kernels, {seconds:6.1f} predicted CPU-s")
        for name, (n, s) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
            print(f"    {name:22s} {n:4d} kernels {s:6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
