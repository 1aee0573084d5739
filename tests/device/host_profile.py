"""CPU profile of dgx's per-call Python path, on any machine (no GPU needed).

The driver calls (tensor-map encodes, launches, stream-ordered allocations, capture queries) are replaced by
stand-ins (tests/driver_stand_in.py) and the tensors are CPU torch tensors read as cuda:0, so what is timed
is dgx's own Python: torch attribute reads, checks, plan and parameter caches, packing, and the Python side
of the driver calls (argument building). Add the driver's own time to predict a device figure (docs/METHOD.md:
cuLaunchKernelEx about 3.7 µs through cuda-bindings, a tensor-map encode about 1.2 µs).

    cd tests/device && PYTHONPATH=../.. python host_profile.py [--calls N] [--rounds R] [--only KIND/NAME ...]
                                                            [--cprofile KIND/NAME] [--steps] [--json PATH]

Prints µs per call for every pattern of dgx.bench.host_patterns (the call's own cost: the loop with the call
minus the loop that only builds the pattern's tensors), the driver calls each pattern made per call, and
the cost of the primitive steps of a call.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: driver_stand_in (dgx: from PYTHONPATH)

import torch  # noqa: E402

import dgx  # noqa: E402
from dgx import runtime  # noqa: E402
from dgx.bench.host_patterns import all_patterns  # noqa: E402
from driver_stand_in import stand_in  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for i in range(calls):
        fn(i)
    return (time.perf_counter_ns() - t0) / calls / 1e3


def best_ns_per_call(fn, calls: int, rounds: int) -> float:
    """ns per call of fn(), the best of `rounds` rounds of `calls` calls (after one call outside the timing)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def measure(pattern, calls: int, rounds: int) -> tuple[float, float]:
    """(µs per call of the call itself, µs per call of building its tensors): the best of `rounds` short rounds of
    each, alternating (the minimum is what a quiet machine gives; other processes only add to a round)."""
    for i in range(50):  # plans, caches, first-call work
        pattern.step(i)
    steps, preps = [], []
    for _ in range(rounds):
        steps.append(per_call_us(pattern.step, calls))
        preps.append(per_call_us(pattern.prep, calls) if pattern.prep else 0.0)
    prep = min(preps)
    return min(steps) - prep, prep


def primitives(calls: int = 2000, rounds: int = 10) -> list[tuple[str, float]]:
    """ns per primitive step of a call, on this machine, with the stand-ins."""
    t = torch.zeros(64, 7168, dtype=torch.float8_e4m3fn)
    out = []

    def timeit(label, fn):
        out.append((label, best_ns_per_call(fn, calls, rounds)))

    timeit("t.data_ptr()", t.data_ptr)
    timeit("t.shape", lambda: t.shape)
    timeit("t.stride()", t.stride)
    timeit("t.dtype", lambda: t.dtype)
    timeit("t.device", lambda: t.device)
    timeit("read all five of one tensor", lambda: (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device))
    timeit("tensors.as_view(t)", lambda: dgx.tensors.as_view(t, "A"))
    timeit("encode_tensor_map_2d (stand-in driver call)",
           lambda: runtime.encode_tensor_map_2d("uint8", 1 << 40, 7168, 64, 7168, 128, 64, runtime.Swizzle.B128))
    kernel = runtime.LoadedKernel("dgx_stand_in", object(), object(), 0, 0)
    launcher = runtime.Launcher(kernel, runtime.LaunchShape((132, 1, 1), (256, 1, 1)))
    pack = runtime.ParamPack.of_members(bytes(1024), (0, 128, 256))
    timeit("Launcher.launch (stand-in cuLaunchKernelEx)", lambda: launcher.launch(0, pack))
    timeit("ParamPack.of_members (1 KB image)", lambda: runtime.ParamPack.of_members(bytes(1024), (0, 128, 256)))
    return out


def fast_path_steps(calls: int = 2000, rounds: int = 10) -> list[tuple[str, float]]:
    """ns per step of dgx.fp8_gemm_nt's fast path (dense 64x2112x7168, CPU tensors, stand-in driver)."""
    from _thread import get_ident

    from dgx import gemm
    from dgx.bench.host_patterns import _m_major

    m, n, k = 64, 2112, 7168
    A, SFA = torch.zeros(m, k, dtype=torch.float8_e4m3fn), _m_major(torch, m, k // 128, "cpu")
    B, SFB = torch.zeros(n, k, dtype=torch.float8_e4m3fn), torch.ones(n // 128 + 1, k // 128)
    d = torch.zeros(m, n, dtype=torch.bfloat16)
    a, b = (A, SFA), (B, SFB)
    dgx.fp8_gemm_nt(a, b, d)  # the full path makes the entry (or replaces another pattern's under this key)
    dgx.fp8_gemm_nt(a, b, d)  # the fast path's first launch on stream 0
    key = (A.shape[0], B.shape, True, get_ident())
    entry = gemm._entries[key]
    ptrs = (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(), d.data_ptr())
    moved = (ptrs[0] + 4096, ptrs[1] + 4096, ptrs[2], ptrs[3], ptrs[4] + 4096)
    out = []

    def timeit(label, fn):
        out.append((label, best_ns_per_call(fn, calls, rounds)))

    def hint():
        if config_none is None and type(a) is tuple and type(b) is tuple and (c is None or c is d):
            A_, SFA_ = a
            B_, SFB_ = b
            return gemm._entries.get((A_.shape[0], B_.shape, c is None, get_ident()))

    config_none, c = None, None
    timeit("argument tests, unpacking, hint key, lookup", hint)
    timeit("entry.check: the C++ guard over 5 tensors", lambda: entry.check(A, SFA, B, SFB, d))
    timeit("5 x data_ptr() into a tuple", lambda: (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(),
                                                    d.data_ptr()))
    timeit("relocate: residues and 8 words (new addresses)", lambda: entry.relocate(entry.words, *moved))
    timeit("current stream", lambda: entry.current_stream(0))
    config = entry.launcher.config_for(0)  # the config the fast path takes from the launcher's table for stream 0
    timeit("the launch (stand-in cuLaunchKernelEx)", lambda: entry.launch_kernel(config, entry.function, entry.params, 0))
    timeit("whole call, same tensors", lambda: dgx.fp8_gemm_nt(a, b, d))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=400, help="calls per round")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--only", nargs="*", default=None, help="KIND/NAME of the patterns to run")
    ap.add_argument("--cprofile", default=None, help="KIND/NAME: print cProfile's top functions for it")
    ap.add_argument("--json", default=None)
    ap.add_argument("--steps", action="store_true", help="also time the steps of the dense fast path one by one")
    args = ap.parse_args()
    os.environ.setdefault("DGX_NUM_SMS", "132")
    warnings.simplefilter("ignore")
    results = {}
    with stand_in(record=False) as s:
        drv = s.driver
        patterns = all_patterns(dgx, "cpu")
        print(f"{'pattern':<26} {'µs/call':>8} {'prep µs':>8} {'encodes':>8} {'launches':>8}  what")
        for p in patterns:
            if args.only and p.key not in args.only:
                continue
            try:
                us, prep = measure(p, args.calls, args.rounds)
            except Exception as e:  # noqa: BLE001 - a pattern this tree cannot run on the CPU
                print(f"{p.key:<26} {'-':>8} {'-':>8} {'-':>8} {'-':>8}  {type(e).__name__}: {str(e)[:90]}")
                results[p.key] = {"error": f"{type(e).__name__}: {e}"}
                continue
            e0, l0 = drv.encodes, drv.launch_count
            for i in range(1000):
                p.step(i)
            enc, lau = (drv.encodes - e0) / 1000, (drv.launch_count - l0) / 1000
            print(f"{p.key:<26} {us:8.2f} {prep:8.2f} {enc:8.2f} {lau:8.2f}  {p.label}")
            results[p.key] = {"us": round(us, 3), "prep_us": round(prep, 3), "encodes_per_call": enc,
                              "launches_per_call": lau}
            if args.cprofile == p.key:
                prof = cProfile.Profile()
                prof.enable()
                for i in range(args.calls):
                    p.step(i)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        print()
        print("primitive steps (ns each, this machine, stand-in driver calls):")
        prims = primitives()
        for label, ns in prims:
            print(f"  {label:<50} {ns:8.0f}")
        results["primitives_ns"] = {label: round(ns, 1) for label, ns in prims}
        if args.steps:
            print("\nsteps of the dense fast path (ns each):")
            steps = fast_path_steps()
            for label, ns in steps:
                print(f"  {label:<50} {ns:8.0f}")
            results["fast_path_steps_ns"] = {label: round(ns, 1) for label, ns in steps}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
