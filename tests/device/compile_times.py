"""Where a warmup's seconds go (CPU only: NVRTC builds sm_90a cubins without a GPU): every kernel of a preset's
plan compiled with NVRTC's phase timer, against dgx/compile_cost.py's prediction.

    python tests/device/compile_times.py --preset deepseek-v3 -j 2 --save times.json

Prints the CPU seconds of the whole plan and per class of kernel (what compile_cost predicts for each class, and
the ratio), the share of each NVRTC phase (C++ front end, NVVM optimizer, PTX to SASS) and the slowest kernels.
Refit compile_cost's constants from the saved table when the kernels change. Nothing is written to the kernel
cache (the compiles do not go through dgx.jit). About 3 CPU minutes for deepseek-v3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def measure(item):
    """(name, CPU seconds, {phase: ms}) of one NVRTC compile of `src` with the warmup's options."""
    src, arch = item
    from cuda.bindings import nvrtc

    import ptx
    from dgx import compiler

    headers = ptx.headers()
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "time.csv")
        options = [*compiler.compile_options(arch), f"--time={table}"]
        cpu = time.process_time()
        err, prog = nvrtc.nvrtcCreateProgram(src.source.encode(), f"{src.name}.cu".encode(), len(headers),
                                             list(headers.values()), [n.encode() for n in headers])
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        nvrtc.nvrtcDestroyProgram(prog)
        cpu = time.process_time() - cpu
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"{src.name}: {result}")
        phases: dict[str, float] = defaultdict(float)
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                parts = [p.strip() for p in line.split(",")]
                phases[parts[1]] += float(parts[2])
    return src.name, cpu, dict(phases)


def kind_of(src) -> str:
    from math import gcd

    f = dict(src.summary)
    if f.get("family") != "fp8_gemm_nt":
        return "other families"
    block_n, k, split_k = int(f["block_n"]), int(f["k"]), int(f["split_k"])
    tile_kblocks = -(-k // 128) // split_k if k > 0 else 0
    if f["defer"] == "True" and block_n <= 32 and 0 < tile_kblocks <= 56:
        return "straight-line deferred"
    if f["wgrad"] == "False" and 128 % block_n and 128 // gcd(block_n, 128) <= 4:
        return "compiled-in B-scale split"
    return "ordinary"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--save", help="write {name: {cpu, phases, predicted, kind}} as JSON here")
    ap.add_argument("--top", type=int, default=15, help="list this many slowest kernels")
    ap.add_argument("--only", default="", help="only the kernels whose name contains this text")
    args = ap.parse_args()

    from dgx import compile_cost, warmup
    from dgx.limits import SUPPORTED_ARCH

    plan = warmup.plan(warmup.load_preset(args.preset), jobs=args.jobs)
    sources = [pk.source for pk in plan.kernels if args.only in pk.source.name]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(measure, [(s, SUPPORTED_ARCH) for s in sources]))
    wall = time.perf_counter() - t0
    by_name = {s.name: s for s in sources}
    table = {
        name: {"cpu": cpu, "phases": phases, "predicted": compile_cost.predicted_seconds(by_name[name]),
               "kind": kind_of(by_name[name])}
        for name, cpu, phases in rows
    }
    total = sum(r["cpu"] for r in table.values())
    predicted = sum(r["predicted"] for r in table.values())
    print(f"{len(table)} kernels: {total:.1f} CPU-s ({wall:.1f} s on {args.jobs} processes); predicted {predicted:.1f}")
    classes: dict[str, list] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in table.values():
        c = classes[r["kind"]]
        c[0] += 1
        c[1] += r["cpu"]
        c[2] += r["predicted"]
    for kind, (n, cpu, pred) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:28s} {n:4d} kernels {cpu:7.1f} CPU-s ({cpu / total:4.0%}); predicted {pred:7.1f} "
              f"(measured / predicted {cpu / pred:.2f})")
    phases: dict[str, float] = defaultdict(float)
    for r in table.values():
        for phase, ms in r["phases"].items():
            phases[phase] += ms
    all_ms = sum(phases.values())
    print("  NVRTC phases: " + ", ".join(f"{p} {ms / all_ms:.1%}" for p, ms in phases.items()))
    for name, r in sorted(table.items(), key=lambda kv: -kv[1]["cpu"])[: args.top]:
        print(f"  {r['cpu']:6.2f} s (predicted {r['predicted']:5.2f})  {name}")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
