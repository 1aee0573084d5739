"""Host (CPU) cost per call of dgx in the patterns serving and training engines produce, on a GPU machine.

    cd tests/device && PYTHONPATH=../.. python host_cost.py [--calls N] [--repeat R] [--only KIND/NAME ...]
                                                         [--json PATH] [--dgx PATH] [--device cpu]

For every pattern of dgx.bench.host_patterns (dense 64x2112x7168: same tensors, a fresh output, M changing, the
engine's fresh slices with changing M, a row-major SFA; the contiguous and masked grouped calls; the weight
gradient; K-grouped for reference) it prints:

- ``µs/call``: CPU µs of the dgx call itself, with a cached kernel: dgx.bench.timing.pattern_cost, the method of
  ``dgx bench``'s host section (the same defaults too): host_cost of the pattern's loop (the GPU held busy so the
  host never waits on it; the least of ``--repeat`` runs), minus the same loop that only builds the pattern's
  fresh tensors (``prep``). The two can still differ by what their process holds: the benchmark has its peers'
  libraries loaded and has run its kernel suites first;
- ``plain``: the same from a plain back-to-back loop (where the kernel is longer than the host path, this
  measures the GPU);
- ``python``: the same call with the driver calls stood in for (tests/driver_stand_in.py: no launch, no encode),
  timed here: dgx's Python; ``driver`` is the rest (cuLaunchKernelEx and the like);
- ``in situ``: the call alone, timed one by one (perf_counter_ns around each call, the pattern's tensors built
  outside the timed spans, the GPU held busy per chunk as above; the timer's own cost taken off): no subtraction,
  so it is free of the prep loop's noise; where it is well below ``µs/call``, the subtraction is what differs
  (building and freeing fresh tensors costs more in the loop with the calls than alone);
- ``encodes``: tensor maps encoded per call in steady state (0 when addresses are relocated in place);
- the goal of the issue for the pattern, where it set one.

``--dgx PATH`` imports dgx from another tree (a baseline: the patterns and stand-ins still come from this one).
``--device cpu`` is a dry run of the script on a machine without a GPU (CPU tensors, every driver call stood in
for): it checks the script, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve()
TESTS, ROOT = HERE.parents[1], HERE.parents[2]

def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _python_us(pattern, calls: int = 400, rounds: int = 15) -> float:
    """µs of the call itself (the pattern's loop minus its tensor building): best of short rounds, alternating."""
    def per_call(fn):
        t = time.perf_counter_ns()
        for i in range(calls):
            fn(i)
        return (time.perf_counter_ns() - t) / calls / 1e3

    for i in range(50):
        pattern.step(i)
    steps = [per_call(pattern.step) for _ in range(rounds)]
    preps = [per_call(pattern.prep) for _ in range(rounds)] if pattern.prep else [0.0]
    return min(steps) - min(preps)


def in_situ_us(pattern, calls: int, chunk: int = 100, hold: bool = True, rounds: int = 3) -> float:
    """µs per call of ``pattern.call`` alone, each call timed by itself, its arguments built just before, outside
    the timed span (see the module docstring); the least of `rounds` runs. With `hold`, each chunk of calls is
    issued behind torch.cuda._sleep (the GPU never makes the host wait)."""
    import torch

    ns = time.perf_counter_ns
    sleep = getattr(torch.cuda, "_sleep", None) if hold else None
    best = float("inf")
    i = 1000
    for _ in range(rounds):
        total = overhead = 0
        done = 0
        while done < calls:
            n = min(chunk, calls - done)
            if sleep is not None:
                sleep(int(0.02 * 1.98e9))
            for _ in range(n):
                args = pattern.args(i)
                i += 1
                t = ns()
                pattern.call(args)
                total += ns() - t
                t = ns()
                overhead += ns() - t
            del args
            if sleep is not None:
                torch.cuda.synchronize()
            done += n
        best = min(best, (total - overhead) / calls / 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000,
                    help="calls per measurement (default 1000, as dgx bench's host section)")
    ap.add_argument("--repeat", type=int, default=3, help="measurements per pattern, the least kept (default 3)")
    ap.add_argument("--only", nargs="*", default=None, help="KIND/NAME of the patterns to run")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--dgx", default=None, help="import dgx from this tree instead (a baseline)")
    ap.add_argument("--no-stand-in", action="store_true", help="skip the Python-only (driver stood in) column")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a dry run of this script without a GPU (every driver call stood in for)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.dgx or ROOT))
    sys.path.insert(1, str(TESTS))
    if args.device == "cpu":
        import contextlib

        import torch

        stand_in = _load("driver_stand_in_dry", TESTS / "driver_stand_in.py").stand_in
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda._sleep = None  # host_cost then times the plain loop only
        torch.cuda.get_device_name = lambda *a, **k: "no GPU (dry run, driver stood in)"
        with contextlib.ExitStack() as stack:
            stack.enter_context(stand_in(record=False))
            run(args)
        return
    run(args)


def run(args) -> None:
    import torch

    import dgx
    from dgx import runtime

    # pattern_cost of this tree (the GPU held busy while the calls are issued), whichever dgx is measured.
    timing = _load("host_timing_here", ROOT / "dgx" / "bench" / "timing.py")

    # The patterns of this tree, whichever dgx is measured (a baseline tree may have none).
    patterns_mod = _load("host_patterns_here", ROOT / "dgx" / "bench" / "host_patterns.py")

    print(f"dgx from {Path(dgx.__file__).parent}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    warnings.simplefilter("once")
    patterns = [p for p in patterns_mod.all_patterns(dgx, args.device) if not args.only or p.key in args.only]
    t0 = time.perf_counter()
    failed = {}
    for p in patterns:  # compile and load every kernel first, outside the timed loops
        try:
            for i in range(2 * len(patterns_mod.M_SIZES)):
                p.step(i)
        except Exception as e:  # noqa: BLE001 - reported, the other patterns still run
            failed[p.key] = f"{type(e).__name__}: {e}"
            print(f"{p.key}: failed: {failed[p.key]}")
    torch.cuda.synchronize()
    patterns = [p for p in patterns if p.key not in failed]
    print(f"warm-up (kernels compiled or loaded): {time.perf_counter() - t0:.1f} s")

    encodes = [0]
    real_encode = runtime.encode_tensor_map

    def counting_encode(*a, **k):
        encodes[0] += 1
        return real_encode(*a, **k)

    results = {}
    for p in patterns:
        # dgx.bench.timing.pattern_cost: the method of `dgx bench`'s host section (same hold, repeats, prep).
        pt = timing.pattern_cost(p.step, p.prep, args.calls, args.repeat)
        prep = pt.prep_us or 0.0
        situ = in_situ_us(p, args.calls)
        runtime.encode_tensor_map = counting_encode
        encodes[0] = 0
        for i in range(200):
            p.step(5000 + i)
        runtime.encode_tensor_map = real_encode
        torch.cuda.synchronize()
        results[p.key] = {
            "label": p.label, "cpu_us": round(pt.cpu_us, 2), "plain_us": round(pt.plain_us, 2),
            "prep_us": round(prep, 2), "in_situ_us": round(situ, 2), "held": pt.held, "saturated": pt.saturated, "encodes_per_call": encodes[0] / 200,
            "goal_us": patterns_mod.GOALS_US.get(p.key),
        }
        print(f"  {p.key}: {results[p.key]['cpu_us']:.2f} µs/call", flush=True)
    if not args.no_stand_in:
        stand_in = _load("driver_stand_in_here", TESTS / "driver_stand_in.py").stand_in
        with stand_in(record=False):
            for p in patterns_mod.all_patterns(dgx, args.device):
                if p.key in results:
                    try:
                        us = _python_us(p)
                    except Exception as e:  # noqa: BLE001
                        print(f"{p.key}: stand-in run failed: {type(e).__name__}: {e}")
                        continue
                    results[p.key]["python_us"] = round(us, 2)
                    results[p.key]["python_in_situ_us"] = round(in_situ_us(p, 400, hold=False, rounds=15), 2)
                    results[p.key]["driver_us"] = round(results[p.key]["cpu_us"] - us, 2)
    print()
    header = f"{'pattern':<24} {'µs/call':>8} {'plain':>7} {'prep':>6} {'python':>7} {'driver':>7} {'situ':>6} {'py-situ':>7} {'encodes':>8} {'goal':>6}  what"
    print(header)
    print("-" * len(header))
    for key, r in results.items():
        goal = r["goal_us"]
        mark = "" if goal is None else (" ok" if r["cpu_us"] <= goal else " OVER")
        print(f"{key:<24} {r['cpu_us']:8.2f} {r['plain_us']:7.2f} {r['prep_us']:6.2f} {r.get('python_us', float('nan')):7.2f} "
              f"{r.get('driver_us', float('nan')):7.2f} {r['in_situ_us']:6.2f} {r.get('python_in_situ_us', float('nan')):7.2f} "
              f"{r['encodes_per_call']:8.2f} "
              f"{'-' if goal is None else f'{goal:.0f}':>6}{mark}  {r['label']}")
    for key, why in failed.items():
        print(f"{key:<24} failed: {why}")
    print("\nµs/call: held-GPU CPU time per call minus the pattern's own tensor building (prep); python: the same call "
          "with the driver calls stood in for; driver: the difference; situ / py-situ: the call alone, timed call by call "
          "(held GPU / driver stood in), no prep subtraction.")
    if args.json:
        env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "dgx_path": str(Path(dgx.__file__).parent),
               "calls": args.calls, "repeat": args.repeat, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
               "cpus": os.cpu_count()}
        Path(args.json).write_text(json.dumps({"env": env, "results": results, "failed": failed}, indent=1))


if __name__ == "__main__":
    main()
