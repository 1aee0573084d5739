"""Device A/B of DGX_GEMM_RUNTIME_N: every FP8 GEMM kernel the option changes in a preset, with N compiled in (today's
kernel) against N at run time (GemmConfig.runtime_n), on the same inputs: outputs compared bit for bit (the two differ
only in where N comes from), then timed with the benchmark's method (1 GiB flush before each call, 5 warm-ups,
median of 30; docs/METHOD.md), the two alternating over PERF_ROUNDS rounds (default 3).

    python tests/device/warmup_ab.py --preset deepseek-v3 --json $OUT/warmup_ab.json

For each entry of the preset of a kind the option covers (dense, m_grouped_masked, m_grouped_contiguous) every
distinct config the heuristics pick over the entry's M range (the warm-up's M samples) is run once, at the largest M
that picked it (masked: that expected M per group, every group full; contiguous: that M_sum in equal groups aligned
to 128). Prints one line per (entry, config): M, both medians and run-time / compiled; then the geometric mean and
the worst ratio. Exit status 1 if any output differs. --max-per-entry bounds the configs per entry.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

NUM_SMS = 132
ROUNDS = int(os.environ.get("PERF_ROUNDS", "3"))
KINDS = ("dense", "m_grouped_masked", "m_grouped_contiguous")


def configs_with_m(spec, default_max_m: int) -> dict:
    """{config: the largest M (the kind's M) that picked it} over the M values warm-up asks for this entry."""
    from dgx import enumeration, families, heuristics
    from dgx.kinds import Layout

    kind = families.kind(spec.kind)
    limit = spec.m_limit(default_max_m)
    ms = enumeration.m_values(kind.m_space, spec.groups, limit, 1, enumeration.m_range(kind.m_space, spec.groups, limit))
    found: dict = {}
    for m in ms:
        if spec.kind == "dense":
            config = heuristics.choose_dense(m, spec.n, spec.k, NUM_SMS).config
        else:
            layout = Layout.MASKED if spec.kind == "m_grouped_masked" else Layout.CONTIGUOUS
            config = heuristics.choose_grouped(layout, m, spec.n, spec.k, spec.groups, NUM_SMS).config
        found[config] = m
    return found


def make_call(spec, m: int):
    """A function of a config running it on fresh inputs of the entry at M, and the output it writes."""
    import torch

    import dgx
    from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    n, k = spec.n, spec.k
    if spec.kind == "dense":
        a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        b = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        return (lambda config: dgx.fp8_gemm_nt(a, b, d, config=config)), d
    groups = spec.groups
    bq = [per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(groups)]
    b = (torch.stack([x for x, _ in bq]), torch.stack([s for _, s in bq]))
    if spec.kind == "m_grouped_masked":
        aq = [per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16)) for _ in range(groups)]
        a = (torch.stack([x for x, _ in aq]), torch.stack([s for _, s in aq]))
        d = torch.empty(groups, m, n, device="cuda", dtype=torch.bfloat16)
        masked_m = torch.full((groups,), m, device="cuda", dtype=torch.int32)
        return (lambda config: dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m=m, config=config)), d
    per_group = max(128, m // groups // 128 * 128)
    rows = per_group * groups
    m_indices = torch.arange(groups, device="cuda", dtype=torch.int32).repeat_interleave(per_group)
    a = per_token_cast_to_fp8(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16))
    d = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    return (lambda config: dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, config=config)), d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("--max-m", type=int, default=8192, help="M range of entries that set none (as dgx warmup)")
    ap.add_argument("--max-per-entry", type=int, default=0, help="at most this many configs per entry (0: all)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()

    import torch

    from dgx import warmup
    from gpu_gemm_utils import bench_cold_l2

    torch.manual_seed(0)
    rows, mismatches, seen = [], 0, set()
    for spec in warmup.load_preset(args.preset):
        if spec.kind not in KINDS:
            continue
        found = sorted(configs_with_m(spec, args.max_m).items(), key=lambda kv: kv[1])
        if args.max_per_entry:
            found = found[-args.max_per_entry:]
        for config, m in found:
            if (spec.label, config) in seen:
                continue
            seen.add((spec.label, config))
            runtime = dataclasses.replace(config, runtime_n=True)
            call, d_fixed = make_call(spec, m)  # the same inputs for both

            def fixed_fn(call=call, config=config):
                call(config)

            def runtime_fn(call=call, runtime=runtime):
                call(runtime)

            fixed_fn()
            out_fixed = d_fixed.clone()
            d_fixed.fill_(float("nan"))
            runtime_fn()
            torch.cuda.synchronize()
            same = torch.equal(out_fixed, d_fixed)
            mismatches += not same
            times = {"compiled": [], "runtime": []}
            for r in range(ROUNDS):
                order = [("compiled", fixed_fn), ("runtime", runtime_fn)]
                for name, fn in (order if r % 2 == 0 else order[::-1]):
                    times[name].append(bench_cold_l2(fn))
            t_c, t_r = statistics.median(times["compiled"]), statistics.median(times["runtime"])
            row = {"entry": spec.label, "m": m, "kernel": config.kernel_name, "runtime_kernel": runtime.kernel_name,
                   "compiled_us": t_c, "runtime_us": t_r,
                   "ratio": t_r / t_c, "identical": same}
            rows.append(row)
            print(f"{spec.label:45s} M {m:6d} {config.kernel_name:60s} {row['compiled_us']:9.2f} {row['runtime_us']:9.2f} "
                  f"{row['ratio']:.3f}{'' if same else '  OUTPUT DIFFERS'}", flush=True)
    if rows:
        gm = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
        worst = max(rows, key=lambda r: r["ratio"])
        print(f"{len(rows)} (entry, config) pairs: run-time N / N compiled in, geometric mean {gm:.4f}, worst "
              f"{worst['ratio']:.3f} ({worst['entry']}, M {worst['m']}, {worst['kernel']}); {mismatches} outputs differ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
