"""Builds every dgx kernel that `dgx bench` would launch for the given suites into DGX_CACHE_DIR, in parallel
processes, so the timed run compiles nothing.

    python tests/device/precompile_suites.py --suite bf16,einsum [--jobs 16] [--device cuda]

Each case's dgx implementation is prepared and called once with the driver stood in (tests/driver_stand_in.py):
the launch path plans every kernel it would load, nothing is launched, and the kernel sources it asked for are
collected; those missing from the cache are then compiled by tests/device/parallel_build.py's workers. Single-
operation suites only (the GEMM suites have `dgx warmup`). ``--device cpu`` builds the inputs on the CPU (no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (ROOT, os.path.join(ROOT, "tests"), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)


def collect_sources(suites: list[str], device: str) -> tuple[dict, list[str]]:
    """{kernel name: KernelSource} over every case of `suites`, and the cases whose preparation failed (with why)."""
    from driver_stand_in import stand_in

    from dgx import jit
    from dgx.bench import suites as S
    from dgx.bench.op_build import build_op_problem
    from dgx.bench.op_impls import op_impls

    builders = op_impls(with_peers=False)[0].builders
    found, failed = {}, []
    with stand_in(record=False):
        planned = jit.get_kernel  # the stand-in's: nothing compiled, nothing loaded

        def record(src, dev):
            found.setdefault(src.name, src)
            return planned(src, dev)

        jit.get_kernel = record
        for suite in suites:
            for shape in S.builtin_suite(suite):
                try:
                    problem = build_op_problem(shape, device=device)
                    builders[suite](problem).run()
                except Exception as exc:  # noqa: BLE001 - reported, the other cases still build
                    failed.append(f"{suite} {shape.label}: {type(exc).__name__}: {exc}")
    return found, failed


def main() -> int:
    from dgx.bench.op_suites import OP_SUITES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=",".join(OP_SUITES), help="comma-separated single-operation suites")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cuda", help="where the cases' inputs are made (cuda or cpu)")
    args = ap.parse_args()
    suites = [s for s in args.suite.split(",") if s]
    unknown = [s for s in suites if s not in OP_SUITES]
    if unknown:
        ap.error(f"--suite: expected names from {', '.join(OP_SUITES)}; got {', '.join(unknown)}")
    t0 = time.time()
    found, failed = collect_sources(suites, args.device)
    planned_s = time.time() - t0
    from parallel_build import build_sources

    built = build_sources(found.values(), args.jobs)
    print(json.dumps({"suites": suites, "kernels": len(found), "planned_s": round(planned_s, 1), **built,
                      "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
