"""Device experiment: the driver's CPU cost of a launch when consecutive launches change kernel or parameters.

dgx's host patterns where M changes between calls (dense/m_changes, dense/engine) cost 2-5 µs more per call than
the same-tensor pattern on some hosts, with the same Python part. This script times cuLaunchKernelEx alone, with
the very configs, functions and parameter buffers dgx's fast path launches (its entries for 64x2112x7168-style
decode GEMMs), while the GPU is held busy so that no launch waits on it: one entry again and again; two entries of
one kernel (other parameters) alternating; two kernels alternating; the 13 decode sizes in turn (two kernels, 13
parameter buffers); and a one-kernel torch call for reference. CPU ns per launch, least of 5 runs of 200.

    python launch_switch.py [--json FILE]      (from tests/device/)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128)  # dgx.bench.host_patterns.M_SIZES


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import torch

    import dgx
    from dgx import gemm
    from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    n, k = 2112, 7168
    b = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    entries = {}
    for m in SIZES:
        a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        dgx.fp8_gemm_nt(a, b, d)
        dgx.fp8_gemm_nt(a, b, d)
        key = next(key for key in gemm._entries if key[0] == m)
        entries[m] = (gemm._entries[key], (a, d))  # keep the tensors alive
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream

    def launch_fn(entry):
        config = entry.launcher.config_for(stream)
        fn, function, params = entry.launch_kernel, entry.function, entry.params
        return lambda: fn(config, function, params, 0)

    launches = {m: launch_fn(e) for m, (e, _) in entries.items()}
    x = torch.zeros(16, device="cuda")
    sequences = {
        "one entry (M 64)": [launches[64]],
        "two entries, one kernel (M 16, 64)": [launches[16], launches[64]],
        "two kernels (M 64, 128)": [launches[64], launches[128]],
        "13 sizes in turn (2 kernels)": [launches[m] for m in SIZES],
        "torch x.add_(1)": [lambda: x.add_(1.0)],
    }
    result = {}
    for name, seq in sequences.items():
        best = float("inf")
        for _ in range(5):
            torch.cuda._sleep(40_000_000)  # hold the GPU: the launches below queue behind it
            count = 200
            t0 = time.perf_counter_ns()
            for i in range(count):
                seq[i % len(seq)]()
            t1 = time.perf_counter_ns()
            torch.cuda.synchronize()
            best = min(best, (t1 - t0) / count)
        result[name] = round(best, 1)
        print(f"{name:40s} {best:8.1f} ns/launch", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
