"""A/B of the BF16 GEMM's ping-pong schedule against today's choice and cuBLAS, in one process on one card.

Per problem (the 18 dense anchor shapes in nt; nn and tn on the six M = 4096 shapes, where the 128-row tiles'
epilogues and the 64-byte-swizzled nn/tn tiles lost), the implementations, each checked against a float64 reference
on a NaN-poisoned output before it is timed (a wrong or refused one is noted and not timed):

- ``today``: the heuristic's choice without ping-pong tiles (what dgx runs by default);
- ``flag``: the heuristic's choice with them (DGX_BF16_PINGPONG=1), timed only where it differs from ``today``;
- ``pp <tile>``: ping-pong tiles forced: the model's best ping-pong tile and, on the M = 4096 rows, the fixed
  alternatives 64x256 and 128x128 / 128x160 alone or sharing an operand (those valid for the form);
- ``cublas``: torch.mm on the same tensors.

Timing (bf16_bench.py's Timer, docs/METHOD.md): 1 GB zeroed before each call, 5 warm-ups, 30 timed calls, median;
``--rounds`` rounds (default 3) per problem, the implementations' order reversed every other round; the figure is
the median of the rounds' medians. Prints a line per problem and a summary: geometric means of today and the flag's
choice against cuBLAS (all, decode M <= 128, large), of the best ping-pong tile against today, the large shapes'
share of the BF16 dense peak, and the rows where ping-pong wins by more than 2%: the data to calibrate
dgx.kernels.bf16_gemm_heuristics' ping-pong constants. JSON to $OUT/bf16_pp_ab.json (or --json PATH), rewritten
after every problem.

``--precompile`` (no GPU needed): builds every kernel the run times into DGX_CACHE_DIR in parallel processes, so the
GPU run compiles nothing. Run from the repository root with it on PYTHONPATH:

    python tests/device/bf16_pp_ab.py --precompile && python tests/device/bf16_pp_ab.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from bf16_bench import (  # noqa: E402  (the bench's method, shared)
    BF16_DENSE_PEAK_TFLOPS,
    DENSE,
    FORM_MAJORS,
    Impl,
    Row,
    Timer,
    checked,
    config_label,
    geomean,
    poisoned,
)

LARGE_M = 4096
# Fixed ping-pong alternatives on the large rows: (block_m, block_n, pair).
PP_TILES = ((64, 256, 0), (64, 256, 2), (128, 128, 2), (128, 160, 2), (128, 160, 1), (128, 128, 1))
WIN = 1.02  # a ping-pong tile "wins" a row when today's time is this much longer


def problems(forms_large: list[str]) -> list[tuple[str, int, int, int]]:
    """(form, M, N, K): every anchor in nt, the large ones in each of `forms_large` too."""
    out = [("nt", m, n, k) for m, n, k in DENSE]
    out += [(form, m, n, k) for form in forms_large for m, n, k in DENSE if m >= LARGE_M]
    return out


def plan(form: str, m: int, n: int, k: int, num_sms: int) -> dict:
    """{implementation name: Bf16GemmConfig} of one problem (``today`` first; duplicates of a config dropped)."""
    from dgx.kernels.bf16_gemm import Bf16GemmConfig, choose
    from dgx.kernels.bf16_gemm_heuristics import _better, candidates, estimate, stages_for

    ma, mb = FORM_MAJORS[form]
    today = choose("dense", m, n, k, 1, num_sms, major_a=ma, major_b=mb, pingpong=False)
    out = {"today": today}
    flag = choose("dense", m, n, k, 1, num_sms, major_a=ma, major_b=mb, pingpong=True)
    if flag != today:
        out["flag"] = flag
    best = None
    for c in candidates("dense", m, n, k, 1, num_sms, ma, mb, "bfloat16", False, pingpong=True):
        if c.schedule == "pingpong":
            e = estimate(c, m, k, 1, num_sms)
            best = e if best is None or _better(e, best, num_sms) else best
    tiles = [best.config] if best is not None else []
    if m >= LARGE_M:
        for bm, bn, pair in PP_TILES:
            try:
                tiles.append(Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, major_a=ma, major_b=mb, pair=pair,
                                            stages=stages_for(bm, bn, "bfloat16", schedule="pingpong"),
                                            schedule="pingpong"))
            except ValueError:
                continue  # not a kernel for this form (a shared N-major B, an M-major A shared on 64 rows)
    seen = set(out.values())
    for c in tiles:
        if c not in seen:
            out["pp " + config_label(c).replace(" ", "")] = c
            seen.add(c)
    return out


def all_configs(args) -> list:
    return list(dict.fromkeys(c for p in problems(args.forms_large) for c in plan(*p, args.num_sms).values()))


def run(args) -> dict:
    import torch

    import dgx
    from dgx import bf16

    num_sms = dgx.get_num_sms()
    device = torch.cuda.get_device_name()
    timer = Timer("events", args.rounds, args.warmup, args.iters)
    target = args.json or (os.path.join(os.environ["OUT"], "bf16_pp_ab.json") if os.environ.get("OUT") else None)
    rows: list[Row] = []
    labels: dict[str, dict[str, str]] = {}
    t0 = time.time()

    def result() -> dict:
        return {"device": device, "num_sms": num_sms, "rounds": args.rounds, "iters": args.iters,
                "seconds": round(time.time() - t0, 1), "jit": dgx.jit_stats(), "summary": summary(rows, device),
                "rows": [{"label": r.label, "flops": r.flops, "us": r.us, "errors": r.errors, "notes": r.notes,
                          "configs": labels[r.label]} for r in rows]}

    for form, m, n, k in problems(args.forms_large):
        ma, mb = FORM_MAJORS[form]
        gen = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
        if ma == "mn":
            a = a.T.contiguous().T
        if mb == "mn":
            b = b.T.contiguous().T
        ref = a.double() @ b.double().T
        configs = plan(form, m, n, k, num_sms)
        row = Row("dense", f"{form} {m}x{n}x{k}", 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n),
                  config_label(configs["today"]))
        labels[row.label] = {name: c.kernel_name for name, c in configs.items()}
        outs = {name: torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for name in configs}
        impls = {name: Impl(lambda c=c, d=outs[name]: bf16.bf16_gemm_nt(a, b, d, config=c), poisoned(outs[name]),
                            lambda _, d=outs[name]: d) for name, c in configs.items()}
        d_peer = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        impls["cublas"] = Impl(lambda: torch.mm(a, b.T, out=d_peer), poisoned(d_peer), lambda _: d_peer)
        ok = checked(impls, ref, torch.bfloat16, row)
        row.us = timer.compare(ok)
        rows.append(row)
        print(fmt(row), flush=True)
        del a, b, ref, outs, d_peer, impls, ok
        torch.cuda.empty_cache()
        if target:
            Path(target).write_text(json.dumps(result(), indent=1, default=str))
    final = result()
    print(json.dumps(final["summary"], indent=1))
    print(f"compiles during the run: {final['jit']['compiles']}; {final['seconds']} s")
    if target:
        Path(target).write_text(json.dumps(final, indent=1, default=str))
        print(f"wrote {target}")
    return final


def best_pp(row: Row) -> tuple[str, float]:
    """The fastest ping-pong implementation of a row (the flag's choice counts where it is a ping-pong tile)."""
    pp = {name: us for name, us in row.us.items() if name.startswith("pp ")}
    return min(pp.items(), key=lambda item: item[1]) if pp else ("", float("nan"))


def fmt(row: Row) -> str:
    us = row.us
    cells = [f"{row.label:>22} today {row.config:>18} {us.get('today', float('nan')):8.1f} us "
             f"{row.tflops('today') if 'today' in us else float('nan'):5.0f} TF"]
    if "cublas" in us and "today" in us:
        cells.append(f"cublas {us['cublas']:8.1f} us (today {us['cublas'] / us['today']:.3f}x)")
    if "flag" in us:
        cells.append(f"flag {us['flag']:8.1f} us ({us['today'] / us['flag']:.3f}x today)")
    name, t = best_pp(row)
    if name:
        cells.append(f"best {name} {t:8.1f} us ({us.get('today', float('nan')) / t:.3f}x today)")
    others = sorted((v, k) for k, v in us.items() if k.startswith("pp ") and k != name)
    if others:
        cells.append(" ".join(f"{k[3:]}={v:.1f}" for v, k in others))
    if row.notes:
        cells.append("; ".join(row.notes))
    return " | ".join(cells)


def _m(row: Row) -> int:
    return int(row.label.split()[1].split("x")[0])


def summary(rows: list[Row], device: str) -> dict:
    def ratio(r: Row, num: str, den: str) -> float:
        return r.us.get(num, float("nan")) / r.us.get(den, float("nan"))

    def flag_us(r: Row) -> float:
        return r.us.get("flag", r.us.get("today", float("nan")))

    out: dict = {}
    for name, sel in (("all", rows), ("decode", [r for r in rows if _m(r) <= 128]),
                      ("large", [r for r in rows if _m(r) >= LARGE_M])):
        if not sel:
            continue
        out[f"{name}_today_x_cublas"] = geomean(ratio(r, "cublas", "today") for r in sel)
        out[f"{name}_flag_x_cublas"] = geomean(r.us.get("cublas", float("nan")) / flag_us(r) for r in sel)
        out[f"{name}_min_today_x_cublas"] = min((ratio(r, "cublas", "today") for r in sel
                                                 if math.isfinite(ratio(r, "cublas", "today"))), default=float("nan"))
    pp_rows = [r for r in rows if best_pp(r)[0]]
    if pp_rows:
        out["best_pp_x_today"] = geomean(r.us.get("today", float("nan")) / best_pp(r)[1] for r in pp_rows)
        out["best_of_both_x_cublas"] = geomean(r.us.get("cublas", float("nan")) / min(r.us.get("today", math.inf),
                                                                                      best_pp(r)[1]) for r in rows)
        out["pp_wins"] = {r.label: f"{best_pp(r)[0]} {r.us['today'] / best_pp(r)[1]:.3f}x" for r in pp_rows
                          if "today" in r.us and r.us["today"] > WIN * best_pp(r)[1]}
    flagged = [r for r in rows if "flag" in r.us]
    if flagged:
        out["flag_x_today_changed_rows"] = geomean(ratio(r, "today", "flag") for r in flagged)
        out["flag_changed_rows"] = len(flagged)
    peak = next((v for key, v in BF16_DENSE_PEAK_TFLOPS.items() if key in device), None)
    large = [r for r in rows if _m(r) >= LARGE_M and r.label.startswith("nt")]
    if peak and large:
        out["large_nt_today_share_of_peak"] = geomean(r.tflops("today") / peak for r in large)
        out["large_nt_best_share_of_peak"] = geomean(
            r.flops / min(r.us.get("today", math.inf), best_pp(r)[1] if best_pp(r)[0] else math.inf) / 1e6 / peak
            for r in large)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--forms-large", default="nn,tn", help="forms run on the M = 4096 shapes besides nt")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--num-sms", type=int, default=132, help="(--precompile) SMs to plan for")
    p.add_argument("--precompile", action="store_true", help="build the kernels into DGX_CACHE_DIR (no GPU)")
    p.add_argument("--list", action="store_true", help="print each problem's implementations and stop (no GPU)")
    p.add_argument("--json", default=None, help="where to write the results (default: $OUT/bf16_pp_ab.json)")
    args = p.parse_args()
    args.forms_large = [f for f in args.forms_large.split(",") if f]
    bad = [f for f in args.forms_large if f not in FORM_MAJORS]
    if bad:
        p.error(f"--forms-large: unknown {bad}; expected some of {list(FORM_MAJORS)}")
    if args.rounds < 1 or args.iters < 1:
        p.error("--rounds and --iters: expected at least 1")
    if args.list:
        for prob in problems(args.forms_large):
            print(prob, {name: config_label(c) + (" pp" if c.schedule == "pingpong" else "")
                         for name, c in plan(*prob, args.num_sms).items()})
        return
    if args.precompile:
        from parallel_build import build_all

        print(json.dumps(build_all(all_configs(args))))
        return
    run(args)


if __name__ == "__main__":
    main()
