"""dgx's BF16 einsums against the plain torch way, in one process, each implementation checked against an FP32
reference (TF32 off) before it is timed.

Peers (docs/PEERS.md): 'bmk,bnk->mn' as torch would run it, the S batch folded into K (one cuBLAS [M, S x K] .
[S x K, N] product after the permuting copies torch.einsum also makes), added to c for an FP32 d; the per-head forms
as ``torch.einsum(expr, x, y)`` (cuBLAS batched over the heads, its own output).

Method (docs/METHOD.md): before each call a 1 GB buffer is zeroed (cold L2), 5 warm-ups, 30 timed calls, median;
CUDA events around each call (``--timer kernel``: kernel-only, CUPTI through torch.profiler, every kernel of the call
summed). Within a problem the implementations run in alternating order per round (``--rounds``, default 2): the
figure is the median of the rounds' medians.

Problems: DeepGEMM's test_einsum.py shapes. 'bmk,bnk->mn': S 129 / 4096 / 8192 x (M, N, K) (128, 384, 128),
(256, 256, 256), (384, 128, 384), FP32 d = d + ... and BF16 d. 'bhr,hdr->bhd' and 'bhd,hdr->bhr': (h, r, d)
(128, 512, 128) and (8, 4096, 1024) x b 4, 32, 128, 4096, 8192. ``--suite`` bmk, bhr, bhd (comma-separated, or all).

Prints a table and, per suite and overall, the geometric mean of torch's time over dgx's and the worst case (goal:
>= 1.1x and never below 1.0); also a determinism check (two dgx runs of every problem, bitwise equal). Writes JSON
to $OUT/einsum.json when OUT is set (or --json PATH).

``--precompile`` (no GPU needed): builds every kernel the run would use for ``--num-sms`` SMs into DGX_CACHE_DIR.

Run from the repository root with it on PYTHONPATH:
    python tests/device/einsum_bench.py [--suite all] [--timer events|kernel] [--rounds 2]
    python tests/device/einsum_bench.py --precompile [--num-sms 132]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The problems are the `dgx bench --suite einsum` cases' (dgx.bench.v32_suites): one definition.
from dgx.bench.v32_suites import EINSUM_FORMS as SUITES  # noqa: E402
from dgx.bench.v32_suites import HEAD_B, HEAD_SHAPES, SUM_S, SUM_SHAPES  # noqa: E402,F401


def problems(suites) -> list[tuple]:
    """(suite, label, expr, dims) for every problem of `suites`."""
    out = []
    if "bmk" in suites:
        for s in SUM_S:
            for m, n, k in SUM_SHAPES:
                for out_dtype in ("float32", "bfloat16"):
                    out.append(("bmk", f"S={s} {m}x{n}x{k} {'FP32 +c' if out_dtype == 'float32' else 'BF16'}",
                                SUITES["bmk"], (s, m, n, k, out_dtype)))
    for suite in ("bhr", "bhd"):
        if suite in suites:
            for h, r, d in HEAD_SHAPES:
                for b in HEAD_B:
                    out.append((suite, f"b={b} h={h} r={r} d={d}", SUITES[suite], (b, h, r, d)))
    return out


def configs(suites, num_sms: int) -> list:
    from dgx.kernels import einsum as K

    found = []
    for suite, _, expr, dims in problems(suites):
        if suite == "bmk":
            s, m, n, k, _ = dims
            found.append(K.choose_batch_sum(m, n, k, num_sms))
        else:
            b, h, r, d = dims
            n, k = (d, r) if suite == "bhr" else (r, d)
            found.append(K.choose_batched(expr, b, h, n, k, num_sms))
    if "bmk" in suites:
        found += list(K.REDUCE_CONFIGS)
    return found


def precompile(args) -> None:
    from parallel_build import build_all

    print(json.dumps(build_all(configs(args.suites, args.num_sms))))


# --- GPU run -----------------------------------------------------------------------------------------------------


def make(suite: str, dims: tuple):
    """(dgx call, torch call, dgx's output, torch's output getter, flops, bytes, reference) of one problem."""
    import torch

    import dgx
    from dgx.families.einsum_torch import torch_einsum

    bf16 = torch.bfloat16
    if suite == "bmk":
        s, m, n, k, out_dtype = dims
        a = torch.randn(s, m, k, device="cuda").to(bf16)
        b = torch.randn(s, n, k, device="cuda").to(bf16)
        ref = torch.einsum("bmk,bnk->mn", a.float(), b.float())
        if out_dtype == "float32":
            c = torch.randn(m, n, device="cuda")
            ref = ref + c
            d, dt = torch.full((m, n), float("nan"), device="cuda"), torch.full((m, n), float("nan"), device="cuda")
            fns = (lambda: dgx.einsum("bmk,bnk->mn", a, b, d, c), lambda: torch_einsum("bmk,bnk->mn", a, b, dt, c))
            moved = a.numel() * 2 + b.numel() * 2 + m * n * 4 * 3
        else:
            d, dt = (torch.full((m, n), float("nan"), device="cuda", dtype=bf16) for _ in range(2))
            fns = (lambda: dgx.einsum("bmk,bnk->mn", a, b, d), lambda: torch_einsum("bmk,bnk->mn", a, b, dt))
            moved = a.numel() * 2 + b.numel() * 2 + m * n * 2
        return fns[0], fns[1], d, (lambda: dt), 2.0 * s * m * n * k, moved, ref
    b, h, r, d = dims
    expr = SUITES[suite]
    fy = torch.randn(h, d, r + 128, device="cuda").to(bf16)
    y = fy[:, :, :r]  # DeepGEMM's test: a strided slice
    x = torch.randn((b, h, r) if suite == "bhr" else (b, h, d), device="cuda").to(bf16)
    n = d if suite == "bhr" else r
    z = torch.full((b, h, n), float("nan"), device="cuda", dtype=bf16)
    held = {}

    def peer():
        held["z"] = torch.einsum(expr, x, y)

    ref = torch.einsum(expr, x.float(), y.float())
    moved = x.numel() * 2 + y.numel() * 2 + z.numel() * 2
    return (lambda: dgx.einsum(expr, x, y, z)), peer, z, (lambda: held["z"]), 2.0 * b * h * r * d, moved, ref


def rel_error(out, ref) -> float:
    if out is None or bool(out.isnan().any()):
        return float("inf")
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-30))


def run(args) -> dict:
    import torch

    from bf16_bench import Timer

    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer(args.timer, args.rounds, args.warmup, args.iters)
    rows = []
    for suite, label, expr, dims in problems(args.suites):
        fn, peer, out, peer_out, flops, moved, ref = make(suite, dims)
        tol = 1e-4 if out.dtype == torch.float32 else 3e-3
        fn()
        peer()
        torch.cuda.synchronize()
        errors = {"dgx": rel_error(out, ref), "torch": rel_error(peer_out(), ref)}
        row = {"suite": suite, "label": label, "expr": expr, "dims": list(dims), "flops": flops, "bytes": moved,
               "errors": errors, "us": {}, "notes": []}
        if errors["dgx"] > tol:
            row["notes"].append(f"dgx FAILED its check: error {errors['dgx']:.2e} > {tol:.0e}")
        else:
            # A second run gives the same bits (d = c + sum with c another tensor: each run writes the same d).
            first = out.clone()
            fn()
            torch.cuda.synchronize()
            bits = torch.int16 if out.dtype == torch.bfloat16 else torch.int32
            row["deterministic"] = bool(torch.equal(first.view(bits), out.view(bits)))
            row["us"] = timer.compare({"dgx": fn, "torch": peer})
        rows.append(row)
        us = row["us"]
        ratio = us.get("torch", float("nan")) / us.get("dgx", float("nan")) if us else float("nan")
        row["ratio"] = ratio
        print(f"{suite} {label:32s} dgx {us.get('dgx', float('nan')):9.1f} us  torch {us.get('torch', float('nan')):9.1f}"
              f" us  x{ratio:5.2f}  {moved / us.get('dgx', float('nan')) / 1e3 if us else float('nan'):7.0f} GB/s  "
              f"{flops / us.get('dgx', float('nan')) / 1e6 if us else float('nan'):6.0f} TFLOPS  "
              f"err {errors['dgx']:.1e}/{errors['torch']:.1e}  det {row.get('deterministic')}  {' '.join(row['notes'])}",
              flush=True)
        del fn, peer, out, ref
        torch.cuda.empty_cache()
    return {"rows": rows, "summary": summary(rows)}


def geomean(values) -> float:
    values = [v for v in values if v == v and v > 0 and v != float("inf")]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows) -> dict:
    out = {}
    for suite in [*SUITES, "all"]:
        picked = [r for r in rows if suite in ("all", r["suite"]) and r["us"]]
        if not picked:
            continue
        ratios = [r["ratio"] for r in picked]
        worst = min(picked, key=lambda r: r["ratio"])
        out[suite] = {"problems": len(picked), "geomean_x_torch": round(geomean(ratios), 3),
                      "worst_x_torch": round(worst["ratio"], 3), "worst": worst["label"],
                      "failed_checks": sum(1 for r in rows if suite in ("all", r["suite"]) and not r["us"]),
                      "not_deterministic": sum(1 for r in picked if r.get("deterministic") is False)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="all", help=f"comma-separated: {', '.join(SUITES)}, or all")
    p.add_argument("--timer", default="events", choices=["events", "kernel"])
    p.add_argument("--rounds", type=int, default=2, help="rounds of alternating order per problem (median of them)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--num-sms", type=int, default=132, help="(--precompile) SMs to plan for")
    p.add_argument("--precompile", action="store_true", help="build the kernels into DGX_CACHE_DIR (no GPU)")
    p.add_argument("--json", default=None, help="where to write the results (default: $OUT/einsum.json if OUT set)")
    args = p.parse_args()
    suites = [s for s in args.suite.split(",") if s]
    args.suites = list(SUITES) if "all" in suites else suites
    bad = [s for s in args.suites if s not in SUITES]
    if bad or not args.suites:
        p.error(f"--suite: unknown {bad}; expected some of {', '.join(SUITES)} or all")
    for name in ("rounds", "iters"):
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
                   "iters": args.iters, "warmup": args.warmup, "seconds": round(time.time() - t0, 1),
                   "jit": dgx.jit_stats()})
    print(json.dumps(result["summary"], indent=1))
    print(f"compiles during the run: {result['jit']['compiles']}; {result['seconds']} s")
    target = args.json or (os.path.join(os.environ["OUT"], "einsum.json") if os.environ.get("OUT") else None)
    if target:
        Path(target).write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
