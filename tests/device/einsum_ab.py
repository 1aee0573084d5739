"""A/B of the per-head einsums' tiles: per problem, the heuristic's pick against the other candidate configs and
torch, timed in one process in alternating rounds, so one device run says which tile each problem wants.

Problems: einsum_bench.py's 'bhr,hdr->bhd' and 'bhd,hdr->bhr' ((h, r, d) (128, 512, 128) and (8, 4096, 1024) x b 4,
32, 128, 4096, 8192). Candidates per problem: the heuristic's pick (DGX_BF16_PINGPONG off: today's default), its
pick with ping-pong tiles weighed, and the --top best cooperative and --top best ping-pong tiles by the model
(dgx.kernels.einsum.batched_estimate), each run through ``dgx.einsum(..., config=...)``. Every candidate is
checked against an FP32 reference (output poisoned with NaN first) before it is timed; one that fails is reported
and not timed.

Method (docs/METHOD.md): 1 GB zeroed before each call (cold L2), --warmup warm-ups, --iters timed calls, median;
CUDA events (``--timer kernel``: kernel-only through CUPTI). The candidates and torch run in one order in even
rounds and reversed in odd ones (--rounds, default 3); each figure is the median of the rounds' medians.

Prints per problem torch's time, the pick's, the fastest candidate's, and the ratios; at the end, per suite, the
geometric mean of torch / pick and torch / fastest (the oracle: what a heuristic that chose the measured best would
reach) with the worst problem. Writes JSON (every candidate's time) to $OUT/einsum_ab.json when OUT is set (or --json).

Run from the repository root with it on PYTHONPATH:
    python tests/device/einsum_ab.py --precompile [--num-sms 132]     # CPU: builds every candidate (optional)
    python tests/device/einsum_ab.py [--suite bhr,bhd] [--top 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import einsum_bench as bench  # noqa: E402

SUITES = ("bhr", "bhd")


def candidates(suite: str, dims: tuple, num_sms: int, top: int) -> dict[str, object]:
    """name -> Bf16GemmConfig of one problem: 'pick' (today's heuristic), 'pick_pp' (with ping-pong weighed, if it
    differs), then the model's --top best cooperative and ping-pong tiles by kernel name."""
    from dgx.kernels import einsum as K

    b, h, r, d = dims
    expr = bench.SUITES[suite]
    n, k = (d, r) if suite == "bhr" else (r, d)
    pick = K.choose_batched(expr, b, h, n, k, num_sms, pingpong=False)
    out = {"pick": pick}
    pick_pp = K.choose_batched(expr, b, h, n, k, num_sms, pingpong=True)
    if pick_pp != pick:
        out["pick_pp"] = pick_pp
    every = K.batched_candidates(b, n, k, K.BATCHED_MAJOR_B[expr], h, num_sms, pingpong=True)
    ranked = sorted(every, key=lambda c: K.batched_estimate(c, b, h, k, num_sms).cycles)
    for schedule in ("cooperative", "pingpong"):
        for config in [c for c in ranked if c.schedule == schedule][:top]:
            if config not in out.values():
                out[config.kernel_name] = config
    return out


def precompile(args) -> None:
    from parallel_build import build_all

    found = []
    for suite, _, _, dims in bench.problems(args.suites):
        found += [c for c in candidates(suite, dims, args.num_sms, args.top).values() if c not in found]
    print(f"{len(found)} kernels", flush=True)
    print(json.dumps(build_all(found)))


def run(args) -> dict:
    import torch

    import dgx
    from bf16_bench import Timer
    from dgx.device import get_num_sms

    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer(args.timer, args.rounds, args.warmup, args.iters)
    num_sms = get_num_sms(torch.cuda.current_device())
    rows = []
    for suite, label, expr, dims in bench.problems(args.suites):
        x, y, z, ref = _operands(suite, dims)
        b, h, r, d = dims
        flops, moved = 2.0 * b * h * r * d, x.numel() * 2 + y.numel() * 2 + z.numel() * 2
        held = {}

        def peer():
            held["z"] = torch.einsum(expr, x, y)

        fns, errors = {"torch": peer}, {}
        peer()
        torch.cuda.synchronize()
        errors["torch"] = bench.rel_error(held["z"], ref)
        for name, config in candidates(suite, dims, num_sms, args.top).items():
            def fn(config=config):
                dgx.einsum(expr, x, y, z, config=config)

            z.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            errors[name] = bench.rel_error(z, ref)
            if errors[name] <= 3e-3:
                fns[name] = fn
        us = timer.compare(fns)
        dgx_names = [n for n in us if n != "torch"]
        best = min(dgx_names, key=lambda n: us[n])
        row = {"suite": suite, "label": label, "dims": list(dims), "flops": flops, "bytes": moved, "us": us,
               "errors": errors, "best": best, "failed": [n for n in errors if n not in fns]}
        row["x_pick"] = us["torch"] / us["pick"] if "pick" in us else float("nan")
        row["x_best"] = us["torch"] / us[best]
        rows.append(row)
        print(f"{suite} {label:26s} torch {us['torch']:8.1f}  pick {us.get('pick', float('nan')):8.1f} "
              f"(x{row['x_pick']:.3f})  best {us[best]:8.1f} (x{row['x_best']:.3f}) {best}"
              f"{'  FAILED: ' + ', '.join(row['failed']) if row['failed'] else ''}", flush=True)
        for name in sorted(dgx_names, key=lambda n: us[n]):
            print(f"      {us[name]:8.1f} us  {moved / us[name] / 1e3:6.0f} GB/s  {name}")
        del fns, peer, held, x, y, z, ref
        torch.cuda.empty_cache()
    return {"rows": rows, "summary": summary(rows)}


def _operands(suite: str, dims: tuple):
    """x, y (a strided slice, as in DeepGEMM's test), z poisoned, and the FP32 reference of one problem."""
    import torch

    b, h, r, d = dims
    bf16 = torch.bfloat16
    y = torch.randn(h, d, r + 128, device="cuda").to(bf16)[:, :, :r]
    x = torch.randn((b, h, r) if suite == "bhr" else (b, h, d), device="cuda").to(bf16)
    z = torch.full((b, h, d if suite == "bhr" else r), float("nan"), device="cuda", dtype=bf16)
    return x, y, z, torch.einsum(bench.SUITES[suite], x.float(), y.float())


def summary(rows) -> dict:
    out = {}
    for suite in [*SUITES, "all"]:
        picked = [r for r in rows if suite in ("all", r["suite"])]
        if not picked:
            continue
        out[suite] = {
            "problems": len(picked),
            "geomean_pick_x_torch": round(bench.geomean([r["x_pick"] for r in picked]), 3),
            "worst_pick_x_torch": round(min(r["x_pick"] for r in picked), 3),
            "geomean_best_x_torch": round(bench.geomean([r["x_best"] for r in picked]), 3),
            "worst_best_x_torch": round(min(r["x_best"] for r in picked), 3),
            "best_differs_from_pick": sum(1 for r in picked if r["best"] != "pick"),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="bhr,bhd", help="comma-separated: bhr, bhd")
    p.add_argument("--top", type=int, default=4, help="best cooperative and best ping-pong tiles by the model, each")
    p.add_argument("--timer", default="events", choices=["events", "kernel"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--num-sms", type=int, default=132, help="(--precompile) SMs to plan for")
    p.add_argument("--precompile", action="store_true", help="build every candidate into DGX_CACHE_DIR (no GPU)")
    p.add_argument("--json", default=None, help="where to write the results (default: $OUT/einsum_ab.json)")
    args = p.parse_args()
    args.suites = [s for s in args.suite.split(",") if s]
    if not args.suites or any(s not in SUITES for s in args.suites):
        p.error(f"--suite: expected some of {', '.join(SUITES)}")
    for name in ("rounds", "iters", "top"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: expected at least 1")
    if args.precompile:
        precompile(args)
        return

    import torch

    import dgx

    t0 = time.time()
    result = run(args)
    result.update({"device": torch.cuda.get_device_name(), "timer": args.timer, "rounds": args.rounds,
                   "iters": args.iters, "warmup": args.warmup, "top": args.top,
                   "seconds": round(time.time() - t0, 1), "jit": dgx.jit_stats()})
    print(json.dumps(result["summary"], indent=1))
    print(f"compiles during the run: {result['jit']['compiles']}; {result['seconds']} s")
    target = args.json or (os.path.join(os.environ["OUT"], "einsum_ab.json") if os.environ.get("OUT") else None)
    if target:
        Path(target).write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
