"""Device experiment: the FFMA interleave pass on vs off on the benchmark's shapes (dense, contiguous,
masked), alternating on/off `rounds` times in one process (docs/METHOD.md timing: cold L2, CUDA events,
median of 30). Outputs are checked bitwise equal between the two (the pass changes only scheduling bits).

NVRTC already interleaves the promotion FFMAs (yield set on every other one), and the pass leaves such
runs alone by default; forced onto them at its default fraction 0.5 it finds nothing to change either
(the cubin is byte-identical to "off"). So "on" here forces it with fraction 1.0 (yield on every FFMA of
the run, reuse cleared), the strongest setting, as DeepGEMM's measurement forced its pass onto NVCC 13.0
output. The script asserts that the two cubins differ.

    python perf_sass_pass.py [rounds] [suite ...]     (from tests/device/, repository on PYTHONPATH)
"""

import dataclasses
import os
import statistics
import sys

import torch

from dgx import gemm, jit, launch
from dgx.bench.problems import build_problem
from dgx.bench.subject import prepare_dgx
from dgx.bench.suites import builtin_suite
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import bench_cold_l2

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SUITES = sys.argv[2:] or ["dense", "contiguous", "masked"]
_settings = jit.sass_pass_settings


def _forced(src):
    settings = _settings(src)
    return dataclasses.replace(settings, skip_interleaved=False, fraction=1.0) if settings.enabled else settings


jit.sass_pass_settings = _forced
bench = bench_cold_l2


def use(mode: str) -> None:
    os.environ["DGX_SASS_INTERLEAVE"] = mode
    for cache in (launch._plans, launch._params, gemm._entries):
        cache.clear()


def prep_config_source():
    """The source of the kernel the last call planned (dense or grouped)."""
    plans = list(launch._plans.values())
    return plans[-1].config.render()


rows = []
for suite in SUITES:
    for shape in builtin_suite(suite):
        problem = build_problem(shape)
        prep = prepare_dgx(problem)
        outs = {}
        for mode in ("off", "on"):
            use(mode)
            prep.reset()
            prep.run()
            torch.cuda.synchronize()
            outs[mode] = prep.output().clone()
        same = torch.equal(outs["off"], outs["on"])
        src = prep_config_source()
        cubins = {}
        for mode in ("off", "on"):
            os.environ["DGX_SASS_INTERLEAVE"] = mode
            cubins[mode] = jit.get_cubin(src, "sm_90a")
        if cubins["off"] == cubins["on"]:
            raise SystemExit(f"{shape}: the pass did not change the cubin")
        times = {"off": [], "on": []}
        for _ in range(ROUNDS):
            for mode in ("off", "on"):
                use(mode)
                prep.run()  # plan outside the timed calls
                times[mode].append(bench(prep.run))
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        spread = max(max(v) / min(v) - 1 for v in times.values())
        label = f"{suite} {shape.groups}g {shape.m}x{shape.n}x{shape.k}" if shape.groups > 1 else f"{suite} {shape.m}x{shape.n}x{shape.k}"
        rows.append((label, off, on, on / off, spread, same, times))
        print(f"{label:>34}  off {off:8.1f} us  on {on:8.1f} us  on/off {on / off:.3f}  spread {spread * 100:.1f}%  "
              f"bitwise {'same' if same else 'DIFFERENT'}  runs off {times['off']} on {times['on']}", flush=True)
        del problem, prep, outs

ratios = [r[3] for r in rows]
geo = statistics.geometric_mean(ratios)
print(f"geomean on/off over {len(rows)} shapes: {geo:.4f}; max spread {max(r[4] for r in rows) * 100:.1f}%")
print("| shape | off µs | on µs | on/off | spread |")
print("|---|---:|---:|---:|---:|")
for label, off, on, ratio, spread, same, _ in rows:
    print(f"| {label} | {off:.1f} | {on:.1f} | {ratio:.3f} | {spread * 100:.1f}% |")
