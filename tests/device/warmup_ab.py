"""Device A/B of DGX_GEMM_RUNTIME_N, _K and _STREAM_B: every FP8 GEMM kernel the options change in a preset, with N, K
and B's L2 policy compiled in (today's kernel) against the option's kernel (GemmConfig.runtime_n / runtime_k /
runtime_stream_b as the heuristics set them under the options), on the same inputs: outputs compared bit for bit (the
two differ only in where N, K and the policy come from), then timed with the benchmark's method (1 GiB flush before
each call, 5 warm-ups, median of 30; docs/METHOD.md), the two alternating over PERF_ROUNDS rounds (default 3).

    python tests/device/warmup_ab.py --preset deepseek-v3 --options nks --json $OUT/warmup_ab.json

--options: letters of n (DGX_GEMM_RUNTIME_N), k (DGX_GEMM_RUNTIME_K), s (DGX_GEMM_RUNTIME_STREAM_B); the default,
nks, is what a warm-up with all three variables builds. --kinds restricts the entries; --timer kernel times
kernel-only (CUPTI) instead of events around the call; --recheck X re-times every pair slower than 1 + X with three
times the rounds and reports that (the first ratio stays in the JSON as first_ratio).

For each entry of the preset of a kind the options cover (dense, m_grouped_masked, m_grouped_contiguous, wgrad) every
distinct config the heuristics pick over the entry's M range (the warm-up's M samples) is run once, at the largest M
that picked it (masked: that expected M per group, every group full; contiguous: that M_sum in equal groups aligned
to 128). Prints one line per (entry, config): M, both medians and run-time / compiled; then the geometric mean and
the worst ratio, over all pairs and per option kernel kind (N only, N and K). Exit status 1 if any output differs.
--max-per-entry bounds the configs per entry.
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
KINDS = ("dense", "m_grouped_masked", "m_grouped_contiguous", "wgrad")


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
        elif spec.kind == "wgrad":
            config = heuristics.choose_wgrad(m, spec.n, spec.k, NUM_SMS).config
        else:
            layout = Layout.MASKED if spec.kind == "m_grouped_masked" else Layout.CONTIGUOUS
            config = heuristics.choose_grouped(layout, m, spec.n, spec.k, spec.groups, NUM_SMS).config
        found[config] = m
    return found


OPTION_VARIABLES = {"n": "DGX_GEMM_RUNTIME_N", "k": "DGX_GEMM_RUNTIME_K", "s": "DGX_GEMM_RUNTIME_STREAM_B"}


def option_config(config, options: str):
    """`config` as the heuristics return it under the options (letters of "nks"; dgx.heuristics.with_runtime_shape)."""
    from dgx import heuristics

    saved = {v: os.environ.get(v) for v in OPTION_VARIABLES.values()}
    for letter, name in OPTION_VARIABLES.items():
        os.environ[name] = "1" if letter in options else "0"
    try:
        return heuristics.with_runtime_shape(config)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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
    if spec.kind == "wgrad":  # FP32 D = C + A.B^T, both operands scaled per row (C apart from D: calls repeat alike)
        a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        b = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        c = torch.randn(m, n, device="cuda", dtype=torch.float32)
        d = torch.empty(m, n, device="cuda", dtype=torch.float32)
        return (lambda config: dgx.fp8_gemm_nt(a, b, d, c=c, config=config)), d
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
    ap.add_argument("--options", default="nks", help="which run-time options to time: letters of n (N), k (K), s (B's "
                    "L2 policy); default all three")
    ap.add_argument("--shard", default="1/1", help="I/S: run only the I-th of S equal slices of the pairs (1-based)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds of preset entries to time")
    ap.add_argument("--timer", choices=("events", "kernel"), default="events",
                    help="events: CUDA events around each call (host launch included); kernel: kernel-only (CUPTI)")
    ap.add_argument("--recheck", type=float, default=0.0,
                    help="re-time every pair slower than 1 + this with three times the rounds (0: no recheck)")
    ap.add_argument("--list", action="store_true", help="only list the (entry, M, kernel) pairs (no GPU needed)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--kinds: names from {','.join(KINDS)}; got {args.kinds!r}")
    if not args.options or set(args.options) - set(OPTION_VARIABLES):
        ap.error(f"--options: letters of {''.join(OPTION_VARIABLES)}; got {args.options!r}")
    for name in OPTION_VARIABLES.values():  # the heuristics pick today's kernels
        os.environ.pop(name, None)

    from dgx import warmup

    if args.list:
        pairs = [(spec.label, m, config, option_config(config, args.options))
                 for spec in warmup.load_preset(args.preset) if spec.kind in kinds
                 for config, m in sorted(configs_with_m(spec, args.max_m).items(), key=lambda kv: kv[1])]
        changed = [p for p in pairs if p[3] != p[2]]
        for label, m, config, runtime in changed:
            print(f"{label:45s} M {m:6d} {config.kernel_name:60s} -> {runtime.kernel_name}")
        print(f"{len(changed)} of {len(pairs)} (entry, config) pairs change; "
              f"{len({p[3].kernel_name for p in changed})} option kernels replace {len({p[2] for p in changed})}")
        return 0

    import torch

    from gpu_gemm_utils import bench_cold_l2

    if args.timer == "kernel":
        from dgx.bench.kernel_timer import time_kernels
        from dgx.bench.timing import L2Flusher

        flusher = L2Flusher()

        def measure(fn):
            return time_kernels(fn, flusher).median_us
    else:
        measure = bench_cold_l2

    def timed(fixed_fn, runtime_fn, rounds):
        times = {"compiled": [], "runtime": []}
        for r in range(rounds):
            order = [("compiled", fixed_fn), ("runtime", runtime_fn)]
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                times[name].append(measure(fn))
        return statistics.median(times["compiled"]), statistics.median(times["runtime"])

    shard, shards = (int(x) for x in args.shard.split("/"))
    torch.manual_seed(0)
    rows, mismatches, seen, index = [], 0, set(), 0
    for spec in warmup.load_preset(args.preset):
        if spec.kind not in kinds:
            continue
        found = sorted(configs_with_m(spec, args.max_m).items(), key=lambda kv: kv[1])
        if args.max_per_entry:
            found = found[-args.max_per_entry:]
        for config, m in found:
            if (spec.label, config) in seen:
                continue
            seen.add((spec.label, config))
            runtime = option_config(config, args.options)
            if runtime == config:
                continue  # the option leaves this kernel as it is
            index += 1
            if (index - 1) % shards != shard - 1:
                continue
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
            t_c, t_r = timed(fixed_fn, runtime_fn, ROUNDS)
            first = t_r / t_c
            if args.recheck and first > 1 + args.recheck:  # noise or a real loss: three times the rounds decide
                t_c, t_r = timed(fixed_fn, runtime_fn, 3 * ROUNDS)
            row = {"entry": spec.label, "m": m, "kernel": config.kernel_name, "runtime_kernel": runtime.kernel_name,
                   "runtime_n": runtime.runtime_n, "runtime_k": runtime.runtime_k,
                   "runtime_stream_b": runtime.runtime_stream_b,
                   "compiled_us": t_c, "runtime_us": t_r,
                   "ratio": t_r / t_c, "first_ratio": first, "identical": same, "timer": args.timer}
            rows.append(row)
            print(f"{spec.label:45s} M {m:6d} {config.kernel_name:60s} {row['compiled_us']:9.2f} {row['runtime_us']:9.2f} "
                  f"{row['ratio']:.3f}{'' if same else '  OUTPUT DIFFERS'}", flush=True)
    groups = {"all": rows, "K compiled in": [r for r in rows if not r["runtime_k"]],
              "K at run time": [r for r in rows if r["runtime_k"]],
              "B's policy at run time": [r for r in rows if r["runtime_stream_b"]]}
    for name, group in groups.items():
        if group:
            gm = math.exp(sum(math.log(r["ratio"]) for r in group) / len(group))
            worst = max(group, key=lambda r: r["ratio"])
            print(f"{name}: {len(group)} (entry, config) pairs, option / compiled in: geometric mean {gm:.4f}, worst "
                  f"{worst['ratio']:.3f} ({worst['entry']}, M {worst['m']}, {worst['kernel']}), "
                  f"{sum(r['ratio'] > 1.02 for r in group)} slower by more than 2%")
    print(f"{mismatches} outputs differ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
