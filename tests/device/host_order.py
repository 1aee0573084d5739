"""Device experiment: why `dgx bench`'s host section reads 2-4 µs more per call than tests/device/host_cost.py.

Both run the same measurement (dgx.bench.timing.pattern_cost) on the same patterns; the benchmark does it in a
process that has loaded its peers and run the kernel suites first. This script measures dgx's host patterns, and a
one-kernel torch call as the driver's reference, in one process at three points: fresh; after a kernel-timer
(torch.profiler) session; after the dense suite with its peers (events timer, no host section). Each point also
with Python's garbage collector off during the timing, to see whether collections of a larger heap are the cost.

    python host_order.py [--json FILE]      (from tests/device/)
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def measure(label: str, table: dict) -> None:
    import torch

    import dgx
    from dgx.bench import host_patterns
    from dgx.bench.timing import pattern_cost

    x = torch.zeros(16, device="cuda")
    patterns = [("torch/add_", lambda i: x.add_(1.0), None)]
    patterns += [(p.key, p.step, p.prep) for p in host_patterns.all_patterns(dgx, "cuda") if p.kind != "k_grouped"]
    for gc_off in (False, True):
        key = f"{label}{' gc-off' if gc_off else ''}"
        row = {}
        if gc_off:
            gc.collect()
            gc.disable()
        try:
            for name, step, prep in patterns:
                row[name] = round(pattern_cost(step, prep, 1000).cpu_us, 2)
        finally:
            gc.enable()
        table[key] = row
        print(f"{key:28s} " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import warnings

    import torch

    warnings.simplefilter("ignore")
    table: dict = {}
    measure("fresh", table)

    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import L2Flusher

    flush = L2Flusher()
    x = torch.zeros(1 << 20, device="cuda")
    time_kernels(lambda: x.add_(1.0), flush)
    measure("after profiler", table)

    from dgx.bench.runner import run_suite

    run_suite(suite="dense", peers=True, host=False, timer="events")
    print(f"gc counts {gc.get_count()}, objects {len(gc.get_objects())}", flush=True)
    measure("after dense suite", table)

    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
