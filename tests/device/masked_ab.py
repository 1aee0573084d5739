"""Device A/B for issue 44's masked MoE GEMMs: candidate configs against today's choice, DeepGEMM 2.6.1 and the
read floor, on the masked suite and the MoE block's masked GEMMs.

    python tests/device/masked_ab.py --precompile            # CPU only: builds every candidate into DGX_CACHE_DIR
    python tests/device/masked_ab.py --predict               # CPU only: the candidates and the model's µs per shape
    python tests/device/masked_ab.py [--only suite,moe] [--rounds 3] [--reps 30] [--no-deepgemm] [--json F]

Shapes: the masked suite (dgx/bench/suites.py, M_max 4096) plus 16g·64×4096×7168, and the masked GEMMs of the MoE
block (dgx/bench/moe_suites.py: 32 experts x 16/64/256 tokens, 16 x 64, 8 x 128; the block's own `masked_m` and
M_max) at GEMM1's N 4096 K 7168 and GEMM2's N 7168 K 2048.

Candidates (what the run decided: docs/PERFORMANCE.md; names are stable, the JSON keeps the kernel names), for decode
shapes (expected rows per group <= 128) built from 64-row tiles:
  default          the heuristic (called without a config)
  w128             64x128, stages capped by today's 168 KiB ring (6)
  w128_s8          64x128, 8 stages (a 194 KiB ring, DeepGEMM's)
  w128_s8_pm       64x128 s8, B shared by pairs along M (DeepGEMM 2.6.1's pick; not deferred, as F2 measured it)
  w128_s8_pm_d     the same, deferred promotion
  w128_s8_pm_sb    the same as w128_s8_pm, B loads L2 evict-first
  w192_s6          64x192, 6 stages (194 KiB ring)
  w192_sb          64x192 as the heuristic runs it, B loads L2 evict-first
  w128_sk2         64x128, split-K over 2-CTA clusters
  tall / tall_sb   128x128 (one m-block per group of up to 128 rows: B read once per group), plain / evict-first
  tall_pm          128x128, B shared by pairs along M (groups past 128 rows read B once)
and for the others (128-row tiles): default, pn (128x128, A shared by pairs along N: DeepGEMM's), sk2 (the default
tile split-K 2), sb (the default with evict-first B), pm (128x128, B shared by pairs along M). Invalid or duplicate configs are dropped.

Each candidate is checked on NaN-poisoned outputs against the FP32 reference (calc_diff < 1e-3, no valid row left
unwritten) before it is timed (docs/METHOD.md: 1 GiB zeroed before each call, CUDA events, 5 warm-ups, median of
--reps, --rounds rounds alternating the order). Each shape's read floor (dgx.bench.read_floor: a read-only kernel over
the shape's bytes_moved, same timer and flush) is timed in the same rounds; `floor` = floor µs / µs. `model` is
the fluid makespan estimate below (memory-bound shapes only), with the bandwidth the shape's read floor measured
(CPU --predict: --bw), for a group's repeated B reads all from L2 - all from HBM.

Prints per shape and writes $OUT/masked_ab.json (or --json). Run from the repository root with it on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # moe_ab, moe_compare, parallel_build
sys.path.insert(0, str(HERE.parents[1]))  # the repository

from dgx.bench.moe_suites import INTER, HIDDEN, MASKED_CASES, moe_case  # noqa: E402
from dgx.bench.suites import Shape  # noqa: E402
from dgx.heuristics import max_stages, pipeline_stages, tile_cycles, with_deferred_promotion  # noqa: E402
from dgx.intmath import ceil_div  # noqa: E402
from dgx.kernels.fp8_gemm import LAYOUT_MASKED, SHARE_A, SHARE_B, SHARE_NONE, GemmConfig, smem_bytes  # noqa: E402
from moe_compare import dgx_choice, shapes as compare_shapes  # noqa: E402

NUM_SMS = 132
DECODE_MAX_M = 128  # expected rows per group up to this: a decode shape, memory-bound on B
RING_DG = smem_bytes(64, 128, 8) - smem_bytes(64, 128, 0)  # DeepGEMM's eight 64x128 stages (194 KiB)

# The MoE block's masked cases whose GEMMs the A/B times (experts, expected tokens per expert), and its two GEMMs.
MOE_CASES = ((32, 16), (32, 64), (32, 256), (16, 64), (8, 128))
MOE_GEMMS = ((2 * INTER, HIDDEN), (HIDDEN, INTER))  # GEMM1 (gate and up) N 4096 K 7168; GEMM2 N 7168 K 2048


def ab_shapes(only: set[str]) -> list[tuple[str, Shape]]:
    """(source, shape): 'suite' for the masked suite (+ 16g·64), 'moe' for the MoE block's masked GEMMs."""
    out = []
    if "suite" in only:
        out += [("suite", s) for s in compare_shapes() if s.suite == "masked"]
    if "moe" in only:
        if not set(MOE_CASES) <= set(MASKED_CASES):
            raise ValueError(f"MOE_CASES {MOE_CASES} must be cases of the MoE suite {MASKED_CASES}")
        for experts, tokens in MOE_CASES:
            case = moe_case("masked", experts, tokens)
            for n, k in MOE_GEMMS:
                out.append(("moe", Shape("masked", tokens, n, k, experts, case.max_m, case.group_ms)))
    return out


def stages_within(block_m: int, block_n: int, ring: int, split_k: int = 1) -> int:
    """The most stages that fit shared memory and keep at most `ring` bytes of stages (A, B, A scales)."""
    per_stage = smem_bytes(block_m, block_n, 1) - smem_bytes(block_m, block_n, 0)
    return max(min(max_stages(block_m, block_n, split_k=split_k), ring // per_stage), 2)


def is_decode(shape: Shape) -> bool:
    return shape.m <= DECODE_MAX_M


def candidates(shape: Shape, num_sms: int = NUM_SMS) -> dict[str, GemmConfig | None]:
    """name -> config (None: the heuristic's own call) of the variants timed on `shape`; invalid ones left out."""
    n, k = shape.n, shape.k
    today, _ = dgx_choice(shape, num_sms)
    units = today.units(shape.max_m) * shape.groups

    def cfg(bm, bn, stages, pair=SHARE_NONE, split_k=1, stream_b=False, defer="auto"):
        c = GemmConfig(n, k, bm, bn, stages, pair=pair, layout=LAYOUT_MASKED, split_k=split_k, stream_b=stream_b)
        if defer == "auto":  # as the heuristic would run the tile
            c = with_deferred_promotion(c, units, num_sms)
        elif defer:
            c = replace(c, defer=True)
        return c

    if is_decode(shape):
        s8 = stages_within(64, 128, RING_DG)
        wanted = {
            "w128": lambda: cfg(64, 128, pipeline_stages(64, 128)),
            "w128_s8": lambda: cfg(64, 128, s8),
            "w128_s8_pm": lambda: cfg(64, 128, s8, SHARE_B, defer=False),
            "w128_s8_pm_d": lambda: cfg(64, 128, s8, SHARE_B, defer=True),
            "w128_s8_pm_sb": lambda: cfg(64, 128, s8, SHARE_B, stream_b=True, defer=False),
            "w192_s6": lambda: cfg(64, 192, min(6, max_stages(64, 192))),
            "w192_sb": lambda: cfg(64, 192, pipeline_stages(64, 192), stream_b=True),
            "w128_sk2": lambda: cfg(64, 128, stages_within(64, 128, RING_DG, 2), split_k=2),
            "tall": lambda: cfg(128, 128, pipeline_stages(128, 128)),
            "tall_sb": lambda: cfg(128, 128, pipeline_stages(128, 128), stream_b=True),
            "tall_pm": lambda: cfg(128, 128, pipeline_stages(128, 128), SHARE_B),
        }
    else:
        wanted = {
            "pn": lambda: cfg(128, 128, pipeline_stages(128, 128), SHARE_A),
            "sk2": lambda: cfg(today.block_m, today.block_n, max_stages(today.block_m, today.block_n, split_k=2),
                               split_k=2),
            "sb": lambda: replace(today, stream_b=True),
            "pm": lambda: cfg(128, 128, pipeline_stages(128, 128), SHARE_B),
        }
    out: dict[str, GemmConfig | None] = {"default": None}
    seen = {today}
    for name, make in wanted.items():
        try:
            config = make()
        except ValueError:
            continue  # a tile, cluster or split the kernel does not take for this shape
        if config not in seen:
            seen.add(config)
            out[name] = config
    return out


# ---- the model: a fluid makespan of the persistent grid (CPU) ------------------------------------------------------

CLOCK_HZ = 1.75e9  # SM clock under a memory-bound load (H100/H200 run 1.6-1.98 GHz)
# The heuristic's chain cycles (tile_cycles) scaled to F2's H200 run of 16g·64×4096×7168: 64x128 s8 pairs along M
# took 147.8 µs for 8 rounds of units, ~0.7 of what tile_cycles gives at CLOCK_HZ.
CHAIN_SCALE = 0.7
LAUNCH_US = 2.0  # launch, first loads' latency, last tile's store
SPLIT_REDUCE_US = 0.5  # a split-K tile's partial sums through distributed shared memory
H200_STREAM_BW = 3.9e12  # bytes/s a read-only kernel reaches on H200 under the benchmark's flush (guess; --bw)


def unit_work(shape: Shape, config: GemmConfig, group_rows: int, repeat_hbm: float) -> list[tuple[float, float]]:
    """(HBM bytes, least seconds) of each scheduler unit of one group: B's tile (a pair along M reads it once, along
    N both tiles' B; a group's second and later m-units read it again, from HBM for the share `repeat_hbm`, from L2
    for the rest), A's rows once per m-block (L2 serves the other n-blocks), and the chain of k-blocks one CTA runs
    (tile_cycles), which caps how fast a unit streams."""
    bm, bn, k = config.block_m, config.block_n, shape.k
    m_blocks = ceil_div(group_rows, bm)
    n_blocks = ceil_div(shape.n, bn)
    m_units = ceil_div(m_blocks, 2) if config.pair == SHARE_B else m_blocks
    n_units = ceil_div(n_blocks, 2) if config.pair == SHARE_A else n_blocks
    b_bytes = bn * k * (2 if config.pair == SHARE_A else 1)
    a_bytes = min(group_rows, bm * (2 if config.pair == SHARE_B else 1)) * k / n_units
    secs = CHAIN_SCALE * tile_cycles(bm, bn, k // config.split_k, config.pair, False, config.defer) / CLOCK_HZ
    if config.split_k > 1:
        secs += SPLIT_REDUCE_US * 1e-6
    return [(b_bytes * (1.0 if mu == 0 else repeat_hbm) + a_bytes, secs)
            for mu in range(m_units) for _ in range(n_units)]


def predict_us(shape: Shape, config: GemmConfig, num_sms: int = NUM_SMS, bw: float = H200_STREAM_BW,
               repeat_hbm: float = 1.0) -> float:
    """Makespan of the grid dgx launches (sized on M_max, as dgx.grouped does): units go round-robin to clusters;
    at every moment the running units share `bw` equally, each capped by its chain (water-filling). Within a unit
    bytes stream at a constant rate: no L2 bandwidth limit, so compute-bound shapes are not modelled."""
    units = [u for rows in shape.group_ms if rows > 0 for u in unit_work(shape, config, rows, repeat_hbm)]
    if not units:
        return LAUNCH_US
    slots = config.grid(config.units(shape.max_m) * shape.groups, num_sms) // config.cluster
    queues = [units[i::slots] for i in range(slots)]
    left = [q[0][0] if q else 0.0 for q in queues]  # bytes left of each cluster's current unit
    pos = [0] * slots
    t = 0.0
    while True:
        active = [i for i in range(slots) if pos[i] < len(queues[i])]
        if not active:
            return t * 1e6 + LAUNCH_US
        caps = {i: queues[i][pos[i]][0] / queues[i][pos[i]][1] for i in active}
        rate, budget = {}, bw
        for j, i in enumerate(sorted(active, key=caps.get)):  # water-filling: the capped ones first
            rate[i] = min(caps[i], budget / (len(active) - j))
            budget -= rate[i]
        dt = min(left[i] / rate[i] for i in active)
        t += dt
        for i in active:
            left[i] -= rate[i] * dt
            if left[i] <= 1e-6 * queues[i][pos[i]][0]:
                pos[i] += 1
                left[i] = queues[i][pos[i]][0] if pos[i] < len(queues[i]) else 0.0


def config_of(shape: Shape, config: GemmConfig | None) -> GemmConfig:
    return config if config is not None else dgx_choice(shape, NUM_SMS)[0]


def predict(only: set[str], bw: float) -> list[dict]:
    rows = []
    for source, shape in ab_shapes(only):
        floor = shape.bytes_moved / bw * 1e6
        pred = {name: [predict_us(shape, config_of(shape, c), NUM_SMS, bw, r) for r in (0.0, 1.0)]
                for name, c in candidates(shape).items()}
        rows.append({"source": source, "label": shape.label, "floor_us": floor, "model_us_l2_to_hbm": pred})
        best = min(pred, key=lambda n: sum(pred[n]))
        print(f"{source:>5} {shape.label:<22} floor {floor:6.1f} us  " + "  ".join(
            f"{n} {lo:.0f}-{hi:.0f}{'*' if n == best else ''}" for n, (lo, hi) in pred.items()))
    return rows


def precompile(only: set[str]) -> None:
    from parallel_build import build_all

    from dgx.bench.read_floor import CONFIG as READ_STREAM

    configs = {config_of(s, c) for _, s in ab_shapes(only) for c in candidates(s).values()}
    configs.add(READ_STREAM)
    t0 = time.time()
    build_all(sorted(configs, key=lambda c: c.kernel_name))
    print(f"precompiled {len(configs)} kernels in {time.time() - t0:.0f} s")


# ---- the device part ------------------------------------------------------------------------------------------------

def run_shape(source: str, shape: Shape, deep_gemm, flush, rounds: int, reps: int) -> dict:
    import torch

    from dgx.bench.problems import build_problem
    from dgx.bench.read_floor import ReadFloor
    from moe_ab import check, deepgemm_call, dgx_call, time_call

    p = build_problem(shape)
    t = p.tensors
    rec = {"source": source, "label": shape.label, "group_ms": list(shape.group_ms), "max_m": shape.max_m,
           "flops": shape.flops, "bytes": shape.bytes_moved, "decode": is_decode(shape), "impls": {}}
    impls, default_out = {}, None
    for name, config in candidates(shape).items():
        fn = dgx_call(shape, t, config)
        entry = rec["impls"][name] = {"config": config_of(shape, config).kernel_name}
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
        entry = rec["impls"]["deepgemm"] = {"config": "DeepGEMM's own"}
        try:
            fn, d = deepgemm_call(deep_gemm, shape, t)
            entry["calc_diff"] = check(p, d, fn)
            impls["deepgemm"] = fn
        except Exception as e:  # noqa: BLE001
            entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"

    class _Median:  # ReadFloor's timer returns an object with median_us
        def __init__(self, us):
            self.median_us = us

    floors = []
    names = list(impls)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            rec["impls"][name].setdefault("rounds_us", []).append(time_call(impls[name], flush, reps))
        floor = ReadFloor(lambda fn, fl, warm, iters: _Median(time_call(fn, flush, iters, warm)), None, 5, reps)
        floors.append(floor.us(shape.bytes_moved))
    rec["floor_us"] = statistics.median(floors)
    bw = shape.bytes_moved / (rec["floor_us"] * 1e-6)
    for name in names:
        e = rec["impls"][name]
        e["us"] = statistics.median(e["rounds_us"])
        e["tflops"] = shape.flops / e["us"] / 1e6
        e["floor_share"] = rec["floor_us"] / e["us"]
    for name, config in candidates(shape).items():
        rec["impls"][name]["model_us"] = [predict_us(shape, config_of(shape, config), NUM_SMS, bw, r) for r in (0.0, 1.0)]
    p.free()
    torch.cuda.empty_cache()
    return rec


def print_record(rec: dict) -> None:
    imps = rec["impls"]
    base, dg = imps.get("default", {}).get("us"), imps.get("deepgemm", {}).get("us")
    print(f"== {rec['source']} {rec['label']}  (M_max {rec['max_m']}, read floor {rec['floor_us']:.1f} us)")
    for name, e in imps.items():
        if "us" not in e:
            print(f"  {name:>14}: {e.get('error', 'not timed')}  [{e['config']}]")
            continue
        vs_default = f"{base / e['us']:.3f}x default" if base else ""
        vs_dg = f"{dg / e['us']:.3f}x DeepGEMM" if dg else ""
        model = f"model {e['model_us'][0]:4.0f}-{e['model_us'][1]:4.0f}" if "model_us" in e else " " * 15
        same = "" if name in ("default", "deepgemm") else ("bitwise=default" if e.get("bitwise_equal_default") else "differs")
        print(f"  {name:>14}: {e['us']:8.1f} us {e['tflops']:5.0f} TF  floor {100 * e['floor_share']:4.0f}%  "
              f"{vs_default:>15} {vs_dg:>16}  {model}  rounds {[round(x, 1) for x in e['rounds_us']]}  {same}  "
              f"[{e['config']}]")


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarize(records: list[dict]) -> None:
    print("\n== per candidate: geomean vs default and vs DeepGEMM; shapes >= 1.0x DeepGEMM; shapes >= 90% of floor")
    for decode in (True, False):
        rs = [r for r in records if r["decode"] == decode]
        if not rs:
            continue
        names = sorted({n for r in rs for n in r["impls"]})
        for name in names:
            got = [r for r in rs if "us" in r["impls"].get(name, {})]
            vs_def = [r["impls"]["default"]["us"] / r["impls"][name]["us"] for r in got if "us" in r["impls"].get("default", {})]
            vs_dg = [r["impls"]["deepgemm"]["us"] / r["impls"][name]["us"] for r in got if "us" in r["impls"].get("deepgemm", {})]
            floor_ok = sum(r["impls"][name]["floor_share"] >= 0.9 for r in got)
            print(f"  {'decode' if decode else 'other':>6} {name:>14}: {geomean(vs_def):.3f}x default, "
                  f"{geomean(vs_dg):.3f}x DeepGEMM, {sum(x >= 1.0 for x in vs_dg)}/{len(vs_dg)} >= 1.0x DeepGEMM, "
                  f"{floor_ok}/{len(got)} >= 90% floor")
        best = []
        for r in rs:
            timed = {n: e["us"] for n, e in r["impls"].items() if "us" in e and n != "deepgemm"}
            if timed:
                name = min(timed, key=timed.get)
                best.append(name)
                dg = r["impls"].get("deepgemm", {}).get("us")
                print(f"    best {r['source']:>5} {r['label']:<22} {name:>14} "
                      f"{f'{dg / timed[name]:.3f}x DeepGEMM' if dg else ''}  floor {100 * r['floor_us'] / timed[name]:.0f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true", help="build every candidate (no GPU needed) and exit")
    ap.add_argument("--predict", action="store_true", help="print the model's µs per candidate (no GPU) and exit")
    ap.add_argument("--bw", type=float, default=H200_STREAM_BW, help="--predict: bytes/s the read floor reaches")
    ap.add_argument("--only", default="suite,moe", help="shape sources: suite, moe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-deepgemm", action="store_true")
    ap.add_argument("--json", help="default: $OUT/masked_ab.json, else ./masked_ab.json")
    args = ap.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if not only or not only <= {"suite", "moe"}:
        ap.error(f"--only takes suite and moe; got {args.only}")
    if args.precompile:
        precompile(only)
        return 0
    if args.predict:
        rows = predict(only, args.bw)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return 0

    import torch

    import dgx
    from dgx.device import get_num_sms
    from moe_ab import _flush_buffer, import_deepgemm

    sms = get_num_sms(torch.cuda.current_device())
    if sms != NUM_SMS:
        print(f"note: this card has {sms} SMs; the candidates and the model assume {NUM_SMS}", flush=True)
    deep_gemm, why = (None, "--no-deepgemm") if args.no_deepgemm else import_deepgemm()
    meta = {"card": torch.cuda.get_device_name(), "sms": sms, "torch": torch.__version__, "dgx": dgx.__version__,
            "deepgemm": why, "rounds": args.rounds, "reps": args.reps, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(json.dumps(meta), flush=True)
    flush = _flush_buffer()
    records = []
    t0 = time.time()
    for source, shape in ab_shapes(only):
        rec = run_shape(source, shape, deep_gemm, flush, args.rounds, args.reps)
        records.append(rec)
        print_record(rec)
        sys.stdout.flush()
    summarize(records)
    meta["seconds"] = round(time.time() - t0, 1)
    out = Path(args.json) if args.json else Path(os.environ.get("OUT", ".")) / "masked_ab.json"
    out.write_text(json.dumps({"meta": meta, "shapes": records}, indent=1))
    print(f"wrote {out} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
