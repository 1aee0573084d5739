"""The deployment recipe on a GPU host: warm a cache for a preset, then plan a sample of every entry's M in strict mode.

    python strict_sample.py --preset deepseek-v3 --per-entry 8 --json result.json    (DGX_CACHE_DIR: an empty folder)

Step 1 builds the preset into DGX_CACHE_DIR as `dgx warmup` does, for this device's SM count (timed: cold, then a
second, cached run). Step 2 sets DGX_JIT_STRICT=1 and, for every GEMM entry, asks the server's own path
(dgx.launch.plan, or the prefix-sum layout's plan) for M = 1, the entry's largest M and `--per-entry` M drawn at
random: each loads its kernel from the cache on the GPU, or fails with the strict-mode error naming it. Nothing is
launched. Prints the counts and every failure; exit status 1 on any. The CPU test tests/test_warmup_coverage.py
sweeps the same against the warmed key set without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def sample_ms(spec, per_entry: int, rng: random.Random) -> list[int]:
    from dgx import enumeration, warmup
    from dgx.heuristics import CONTIGUOUS_ALIGNMENT
    from dgx.kinds import M_GROUPED_CONTIGUOUS_PSUM

    limit = spec.m_limit(warmup.DEFAULT_MAX_M)
    if spec.kind == "m_grouped_contiguous":  # M_sum: multiples of the alignment
        top = enumeration.m_range(spec.kind, spec.groups, limit) - 1
        steps = top // CONTIGUOUS_ALIGNMENT
        return sorted({CONTIGUOUS_ALIGNMENT, steps * CONTIGUOUS_ALIGNMENT,
                       *(rng.randint(1, steps) * CONTIGUOUS_ALIGNMENT for _ in range(per_entry))})
    top = enumeration.psum_top(spec.groups, limit) if spec.kind == M_GROUPED_CONTIGUOUS_PSUM else limit
    return sorted({1, top, *(rng.randint(1, top) for _ in range(per_entry))})


def plan_in_strict_mode(spec, m: int) -> str:
    """The kernel the server's path loads for `spec` at M (raises JitStrictError when the cache lacks it)."""
    from dgx import launch
    from dgx.grouped_psum import _plan as psum_plan
    from dgx.heuristics import CONTIGUOUS_ALIGNMENT
    from dgx.kinds import M_GROUPED_CONTIGUOUS_PSUM, GemmKind

    if spec.kind == M_GROUPED_CONTIGUOUS_PSUM:
        found = psum_plan(m, spec.n, spec.k, spec.groups, 0, m, CONTIGUOUS_ALIGNMENT, None)
    else:
        found = launch.plan(GemmKind(spec.kind), m, spec.n, spec.k, 0, groups=spec.groups or 1)
    return found.config.kernel_name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("--per-entry", type=int, default=8, help="random M per entry (besides 1 and the largest)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-warmup", action="store_true", help="DGX_CACHE_DIR is warm already")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    if not os.environ.get("DGX_CACHE_DIR"):
        ap.error("set DGX_CACHE_DIR to the cache to warm and check (an empty folder for a cold run)")

    from dgx import jit, warmup
    from dgx.device import get_num_sms
    from dgx.errors import JitStrictError

    specs = warmup.load_preset(args.preset)
    num_sms = get_num_sms(0)
    out: dict = {"preset": args.preset, "num_sms": num_sms, "cache": "DGX_CACHE_DIR"}
    if not args.no_warmup:
        for run in ("cold", "cached"):
            t0 = time.perf_counter()
            result = warmup.warmup(specs, num_sms=num_sms, jobs=args.jobs)
            out[run] = {**result.to_json(), "wall": round(time.perf_counter() - t0, 2)}
            print(f"warmup ({run}): {out[run]}", flush=True)
            if result.failed:
                print(f"FAILED to build: {result.failures[:3]}")
                return 1
    os.environ["DGX_JIT_STRICT"] = "1"
    jit.reset_jit_stats()
    rng = random.Random(args.seed)
    asked, loaded, failures = 0, set(), []
    for spec in specs:
        if not isinstance(spec, warmup.ShapeSpec):
            continue
        for m in sample_ms(spec, args.per_entry, rng):
            asked += 1
            try:
                loaded.add(plan_in_strict_mode(spec, m))
            except JitStrictError as exc:
                failures.append(f"{spec.label} M={m}: {exc}")
    stats = jit.jit_stats()
    out.update(asked=asked, kernels_loaded=len(loaded), compiles=stats["compiles"], failures=failures)
    print(f"strict mode: {asked} M asked over the preset's GEMM entries, {len(loaded)} kernels loaded from the "
          f"cache, {stats['compiles']} compiled, {len(failures)} missing")
    for line in failures:
        print(f"  MISSING {line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if failures or stats["compiles"] else 0


if __name__ == "__main__":
    sys.exit(main())
