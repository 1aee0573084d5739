"""Device A/B for issue 44: candidate configs of dgx's M-grouped FP8 GEMMs against today's choice and DeepGEMM 2.6.1.

    python tests/device/moe_ab.py --precompile          # CPU only: builds every candidate into DGX_CACHE_DIR
    python tests/device/moe_ab.py [--only contiguous,masked] [--rounds 3] [--reps 30] [--spread 5] [--json F]

Candidates per shape (what the run decided: docs/PERFORMANCE.md): `default` (the heuristic, called without a config),
`dg_tile` (DeepGEMM 2.6.1's block sizes and cluster, tests/device/moe_compare.py's re-derivation, on dgx's kernel:
128x192 tiles, and 2-CTA pairs on the masked layout, are the new config space), `dg_tile_nopair` (its tile without
the cluster), `pair` (today's tile with DeepGEMM's cluster), `dg_stages` (DeepGEMM's tile and stage count where
they differ from dgx's). Duplicates are dropped. Each candidate is first run on NaN-poisoned outputs and checked
against the benchmark's FP32 reference of the dequantised inputs (calc_diff < 1e-3 over the valid rows, none left
unwritten); bitwise equality with `default` is reported. Then every implementation - the candidates, and DeepGEMM
2.6.1 through a real `import deep_gemm` (its own layouts: A [M, K] / [G, M_max, K] with TMA-aligned M-major SFA,
B [G, N, K] with SFB [G, N/128, K/128], `disable_ue8m0_cast=True`) - is timed as docs/METHOD.md says: 1 GiB zeroed
before each call, CUDA events, 5 warm-ups, median of `--reps`, in `--rounds` rounds whose order alternates.
Finally `default` is timed `--spread` times in a row (median each) to show its run-to-run spread.

Prints a table (µs, TFLOPS, ratio to default and to DeepGEMM) and writes everything to $OUT/moe_ab.json (or
--json). Run from the repository root with it on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # moe_compare, parallel_build
sys.path.insert(0, str(HERE.parents[1]))  # the repository

from dgx.bench.suites import Shape  # noqa: E402
from dgx.heuristics import max_stages, with_stage_rounds  # noqa: E402
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_MASKED, SHARE_A, SHARE_B, SHARE_NONE, GemmConfig  # noqa: E402
from moe_compare import deepgemm_choice, dgx_choice, shapes as compare_shapes  # noqa: E402

NUM_SMS = 132  # H100 SXM and H200; the device run checks the card's count


def _pair_of(cluster_m: int, cluster_n: int) -> int:
    return SHARE_B if cluster_m > 1 else SHARE_A if cluster_n > 1 else SHARE_NONE


def candidates(shape: Shape, num_sms: int = NUM_SMS) -> dict[str, GemmConfig | None]:
    """name -> config (None: the heuristic's own call) of the variants timed on `shape`; invalid ones left out."""
    layout = LAYOUT_CONTIGUOUS if shape.suite == "contiguous" else LAYOUT_MASKED
    today, _ = dgx_choice(shape, num_sms)
    m = shape.padded_m if shape.suite == "contiguous" else shape.m
    dg = deepgemm_choice(shape.suite, m, shape.n, shape.k, shape.groups, num_sms)
    dg_pair = _pair_of(dg.cluster_m, dg.cluster_n)
    out: dict[str, GemmConfig | None] = {"default": None}
    wanted = {
        "dg_tile": (dg.block_m, dg.block_n, None, dg_pair),
        "dg_tile_nopair": (dg.block_m, dg.block_n, None, SHARE_NONE),
        "pair": (today.block_m, today.block_n, today.stages, dg_pair),
        "dg_stages": (dg.block_m, dg.block_n, dg.stages, dg_pair),
    }
    seen = {today}
    for name, (bm, bn, stages, pair) in wanted.items():
        fit = max_stages(bm, bn)
        stages = min(stages or fit, fit)
        try:
            config = GemmConfig(shape.n, shape.k, bm, bn, stages, pair=pair, layout=layout)
        except ValueError:
            continue  # a tile or cluster dgx's kernel does not take
        if stages == fit:  # as the heuristic runs a tile: one stage fewer where that gives whole stage rounds
            config = with_stage_rounds(config)
        if config not in seen:
            seen.add(config)
            out[name] = config
    return out


def all_shapes(only: set[str]) -> list[Shape]:
    return [s for s in compare_shapes() if s.suite in only]


def precompile(only: set[str]) -> None:
    from parallel_build import build_all

    configs = set()
    for shape in all_shapes(only):
        today, _ = dgx_choice(shape, NUM_SMS)
        configs.add(today)
        configs.update(c for c in candidates(shape).values() if c is not None)
    t0 = time.time()
    build_all(sorted(configs, key=lambda c: c.kernel_name))
    print(f"precompiled {len(configs)} kernels in {time.time() - t0:.0f} s")


# ---- the device part ------------------------------------------------------------------------------------------------

def _flush_buffer():
    import torch

    return torch.empty(1 << 30, dtype=torch.uint8, device="cuda")


def time_call(fn, flush, reps: int, warm: int = 5) -> float:
    """docs/METHOD.md: µs, median of `reps` calls, each after zeroing 1 GiB (cold L2), CUDA events around it."""
    import torch

    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def import_deepgemm():
    """DeepGEMM itself (not dgx's drop-in), or (None, why)."""
    if os.environ.get("DGX_AS_DEEP_GEMM"):
        return None, "DGX_AS_DEEP_GEMM is set: `import deep_gemm` would give dgx's drop-in"
    try:
        import deep_gemm
    except Exception as e:  # noqa: BLE001 - any failure to import means no peer
        return None, f"import deep_gemm failed: {type(e).__name__}: {e}"
    path = str(Path(getattr(deep_gemm, "__file__", "") or "").resolve())
    dgx_root = str(HERE.parents[1].resolve())
    if not path or path.startswith(dgx_root + os.sep + "dgx"):
        return None, f"deep_gemm resolves to {path or '?'}, inside dgx"
    return deep_gemm, getattr(deep_gemm, "__version__", "?") + f" ({path})"


def deepgemm_call(deep_gemm, shape: Shape, t: dict):
    """A no-argument call of DeepGEMM's M-grouped GEMM on the problem's tensors, in its own layouts, with the A
    scales made TMA-aligned M-major beforehand (so the call launches the GEMM alone), and its output tensor."""
    import torch

    try:
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
    except ImportError:
        get_mn_major_tma_aligned_tensor = deep_gemm.get_mn_major_tma_aligned_tensor
    sfa = get_mn_major_tma_aligned_tensor(t["SFA"].contiguous())
    a, b = (t["A"], sfa), (t["B"], t["SFB"])
    d = torch.empty_like(t["D"])
    if shape.suite == "contiguous":
        idx = t["m_indices"]
        return (lambda: deep_gemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, idx, disable_ue8m0_cast=True)), d
    mm = t["masked_m"]
    return (lambda: deep_gemm.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, shape.m, disable_ue8m0_cast=True)), d


def dgx_call(shape: Shape, t: dict, config):
    import dgx

    # SFA made TMA-aligned M-major once, as DeepGEMM's call gets it: the timed call launches the GEMM alone
    a, b, d = (t["A"], dgx.get_mn_major_tma_aligned_tensor(t["SFA"])), (t["B"], t["SFB"]), t["D"]
    if shape.suite == "contiguous":
        idx = t["m_indices"]
        return lambda: dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, idx, config=config)
    mm = t["masked_m"]
    return lambda: dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, shape.m, config=config)


def check(problem, out, fn) -> float:
    """Run `fn` once on a NaN-poisoned `out`; calc_diff of its valid rows against the FP32 reference (raises when
    rows are left unwritten or calc_diff >= 1e-3)."""
    import torch

    from dgx.bench.problems import calc_diff

    out.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    rows = problem.valid_rows(out)
    if torch.isnan(rows).any():
        raise RuntimeError(f"{int(torch.isnan(rows).sum())} valid output elements left unwritten")
    diff = float(calc_diff(rows, problem.ref))
    if not diff < 1e-3:
        raise RuntimeError(f"calc_diff {diff:.3e} >= 1e-3")
    return diff


def run_shape(shape: Shape, deep_gemm, flush, rounds: int, reps: int, spread: int) -> dict:
    import torch

    from dgx.bench.problems import build_problem

    p = build_problem(shape)
    t = p.tensors
    record = {"label": shape.label, "suite": shape.suite, "group_ms": list(shape.group_ms),
              "flops": shape.flops, "impls": {}}
    impls = {}
    default_out = None
    for name, config in candidates(shape).items():
        fn = dgx_call(shape, t, config)
        entry = record["impls"][name] = {"config": config.kernel_name if config else dgx_choice(shape, NUM_SMS)[0].kernel_name}
        try:
            entry["calc_diff"] = check(p, t["D"], fn)
            rows = p.valid_rows(t["D"])
            if default_out is None:
                default_out = rows.clone()
            entry["bitwise_equal_default"] = bool(torch.equal(rows, default_out))
            impls[name] = fn
        except Exception as e:  # noqa: BLE001 - a failing candidate is reported, not timed
            entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    if deep_gemm is not None:
        entry = record["impls"]["deepgemm"] = {"config": "DeepGEMM 2.6.1's own"}
        try:
            fn, d = deepgemm_call(deep_gemm, shape, t)
            entry["calc_diff"] = check(p, d, fn)
            impls["deepgemm"] = fn
        except Exception as e:  # noqa: BLE001
            entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    names = list(impls)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            record["impls"][name].setdefault("rounds_us", []).append(time_call(impls[name], flush, reps))
    for name in names:
        us = statistics.median(record["impls"][name]["rounds_us"])
        record["impls"][name]["us"] = us
        record["impls"][name]["tflops"] = shape.flops / us / 1e6
    if "default" in impls:
        record["default_spread_us"] = [time_call(impls["default"], flush, reps) for _ in range(spread)]
    p.free()
    torch.cuda.empty_cache()
    return record


def print_record(rec: dict) -> None:
    imps = rec["impls"]
    base = imps.get("default", {}).get("us")
    dg = imps.get("deepgemm", {}).get("us")
    print(f"== {rec['suite']} {rec['label']}")
    for name, e in imps.items():
        if "us" not in e:
            print(f"  {name:>15}: {e.get('error', 'not timed')}  [{e['config']}]")
            continue
        vs_default = f"{base / e['us']:.3f}x default" if base else ""
        vs_dg = f"{dg / e['us']:.3f}x DeepGEMM" if dg else ""
        same = "" if name in ("default", "deepgemm") else ("bitwise=default" if e.get("bitwise_equal_default") else "differs")
        print(f"  {name:>15}: {e['us']:9.1f} us {e['tflops']:6.0f} TFLOPS  {vs_default:>15} {vs_dg:>16}  "
              f"rounds {[round(x, 1) for x in e['rounds_us']]}  {same}  [{e['config']}]")
    if rec.get("default_spread_us"):
        sp = rec["default_spread_us"]
        print(f"  default 5 in a row: {[round(x, 1) for x in sp]} (spread {100 * (max(sp) - min(sp)) / min(sp):.1f}%)")


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true", help="build every candidate (no GPU needed) and exit")
    ap.add_argument("--only", default="contiguous,masked", help="suites: contiguous, masked")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--spread", type=int, default=5, help="times the default is timed in a row for the spread")
    ap.add_argument("--no-deepgemm", action="store_true")
    ap.add_argument("--json", help="default: $OUT/moe_ab.json, else ./moe_ab.json")
    args = ap.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if not only <= {"contiguous", "masked"}:
        ap.error(f"--only takes contiguous and masked; got {args.only}")
    if args.precompile:
        precompile(only)
        return 0

    import torch

    import dgx
    from dgx.device import get_num_sms

    sms = get_num_sms(torch.cuda.current_device())
    if sms != NUM_SMS:
        print(f"note: this card has {sms} SMs; the candidates were derived for {NUM_SMS}", flush=True)
    deep_gemm, why = (None, "--no-deepgemm") if args.no_deepgemm else import_deepgemm()
    meta = {"card": torch.cuda.get_device_name(), "sms": sms, "torch": torch.__version__, "dgx": dgx.__version__,
            "deepgemm": why, "rounds": args.rounds, "reps": args.reps, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(json.dumps(meta), flush=True)
    flush = _flush_buffer()
    records = []
    t0 = time.time()
    for shape in all_shapes(only):
        rec = run_shape(shape, deep_gemm, flush, args.rounds, args.reps, args.spread)
        records.append(rec)
        print_record(rec)
        sys.stdout.flush()
    print("\n== geometric means over the shapes (time of the reference / time of the candidate)")
    names = sorted({n for r in records for n in r["impls"]} - {"deepgemm"})
    for suite in sorted(only):
        rs = [r for r in records if r["suite"] == suite]
        best = [r["impls"]["default"]["us"] / min(e["us"] for n, e in r["impls"].items() if "us" in e and n != "deepgemm")
                for r in rs if "us" in r["impls"].get("default", {})]
        for name in names:
            vs_default = [r["impls"]["default"]["us"] / r["impls"][name]["us"] for r in rs
                          if "us" in r["impls"].get(name, {}) and "us" in r["impls"].get("default", {})]
            vs_dg = [r["impls"]["deepgemm"]["us"] / r["impls"][name]["us"] for r in rs
                     if "us" in r["impls"].get(name, {}) and "us" in r["impls"].get("deepgemm", {})]
            print(f"  {suite:>10} {name:>15}: {geomean(vs_default):.3f}x default over {len(vs_default)} shapes, "
                  f"{geomean(vs_dg):.3f}x DeepGEMM over {len(vs_dg)}")
        print(f"  {suite:>10} {'best per shape':>15}: {geomean(best):.3f}x default")
    meta["seconds"] = round(time.time() - t0, 1)
    out = Path(args.json) if args.json else Path(os.environ.get("OUT", ".")) / "moe_ab.json"
    out.write_text(json.dumps({"meta": meta, "shapes": records}, indent=1))
    print(f"wrote {out} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
