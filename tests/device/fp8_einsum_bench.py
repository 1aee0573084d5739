"""Device benchmark of dgx.fp8_einsum('bhr,hdr->bhd'): checked, then timed against the plain ways in one process,
with docs/METHOD.md's method (1 GB zeroed before each call, CUDA events, 5 warm-ups, median of 30) and kernel-only
(CUPTI through torch.profiler: every kernel of a call summed, so dgx's includes its scale-layout kernel).

Peers, on the same inputs:
- ``gemm_loop``: dgx's own fp8_gemm_nt once per head, on strided views of x and z (no copies, no dequantisation),
  with each head's scales converted to the M-major layout ahead (outside the timing): the FP8 way without a
  batched kernel, h launches per call;
- ``torch_bf16``: torch.einsum on the BF16 originals (cuBLAS batched GEMM).

Shapes: DeepSeek's MLA projections h x d x r = 8 x 1024 x 4096 and 128 x 128 x 512, b in 4, 32, 128, 4096, 8192 and
the odd 1, 17, 4097; FP32 and UE8M0-valued scales are checked, the FP32 ones timed. Rounds alternate which
implementation goes first. Writes $OUT/fp8_einsum.json (or --json PATH): per case the times, TFLOPS, GB/s (x, y,
scales and z once) and the ratios peer time / dgx time (> 1: dgx faster), and their geometric means.
``--precompile`` builds every kernel the run uses into DGX_CACHE_DIR on a machine without a GPU and exits.

    python tests/device/fp8_einsum_bench.py [--precompile] [--rounds 2] [--only 8x1024x4096] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dgx.bench.v32_suites import FP8_EINSUM_BS as BS  # noqa: E402  (the `dgx bench --suite fp8_einsum` cases)
from dgx.bench.v32_suites import FP8_EINSUM_SHAPES as SHAPES  # noqa: E402  (h, d, r)

NUM_SMS = 132
IMPLS = ("dgx", "gemm_loop", "torch_bf16")


def configs() -> set:
    from dgx.heuristics import choose_batched, choose_dense
    from dgx.kernels import scale_layout

    out = {scale_layout.CONFIG}
    for h, d, r in SHAPES:
        for b in BS:
            out.add(choose_batched(b, d, r, h, NUM_SMS).config)
            out.add(choose_dense(b, d, r, NUM_SMS).config)
    return out


def precompile() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from parallel_build import build_all

    print(f"built {build_all(sorted(configs(), key=lambda c: c.kernel_name))}", flush=True)


def run_case(b: int, h: int, d: int, r: int, rounds: int, flush) -> dict:
    import torch

    import dgx
    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import time_gpu
    from fp8_einsum_utils import check, make

    row: dict = {"b": b, "h": h, "d": d, "r": r}
    # Checks: both scale kinds against float64 (the timed inputs are the FP32-scaled ones).
    for ue8m0 in (True, False):
        x, y, xs, ys, z = make(b, h, d, r, ue8m0, seed=b + d)
        try:
            dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)
            torch.cuda.synchronize()
            check(z, x, y, xs, ys)
            row[f"check_{'ue8m0' if ue8m0 else 'fp32'}"] = True
        except AssertionError as exc:
            row[f"check_{'ue8m0' if ue8m0 else 'fp32'}"] = False
            row["check_error"] = str(exc)
    # The per-head loop (the suite's peer): strided views, scales per head converted once ahead.
    from dgx.bench.v32_impls import head_loop

    z_loop = torch.full_like(z, float("nan"))
    gemm_loop = head_loop(dgx, xs, ys, z_loop)

    gemm_loop()
    torch.cuda.synchronize()
    try:
        check(z_loop, x, y, xs, ys)
        row["check_gemm_loop"] = True
    except AssertionError as exc:
        row["check_gemm_loop"] = False
        row["check_gemm_loop_error"] = str(exc)
    fns = {
        "dgx": lambda: dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z),
        "gemm_loop": gemm_loop,
        "torch_bf16": lambda: torch.einsum("bhr,hdr->bhd", x, y),  # its output allocated per call, as a model does
    }
    events = {k: [] for k in IMPLS}
    kernel = {k: [] for k in IMPLS}
    for rnd in range(rounds):
        order = IMPLS if rnd % 2 == 0 else tuple(reversed(IMPLS))
        for name in order:
            events[name].append(time_gpu(fns[name], flush).median_us)
            try:
                kernel[name].append(time_kernels(fns[name], flush).median_us)
            except Exception as exc:  # noqa: BLE001 - CUPTI missing: events only
                row["kernel_timer_error"] = f"{type(exc).__name__}: {exc}"
    flops = 2 * b * h * d * r
    nbytes = b * h * r + h * d * r + 4 * (b * h * -(-r // 128) + h * -(-d // 128) * -(-r // 128)) + 2 * b * h * d
    for name in IMPLS:
        ev = statistics.median(events[name])
        row[f"{name}_events_us"] = ev
        if kernel[name]:
            row[f"{name}_kernel_us"] = statistics.median(kernel[name])
    row["dgx_tflops"] = flops / row["dgx_events_us"] / 1e6
    row["dgx_gbps"] = nbytes / row["dgx_events_us"] / 1e3
    for peer in IMPLS[1:]:
        row[f"x_{peer}_events"] = row[f"{peer}_events_us"] / row["dgx_events_us"]
        if f"{peer}_kernel_us" in row and "dgx_kernel_us" in row:
            row[f"x_{peer}_kernel"] = row[f"{peer}_kernel_us"] / row["dgx_kernel_us"]
    return row


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true", help="build the kernels (no GPU needed) and exit")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per case (median of their medians)")
    ap.add_argument("--only", default="", help="only the shapes HxDxR given, comma-separated (e.g. 8x1024x4096)")
    ap.add_argument("--bs", default="", help="only these b, comma-separated")
    ap.add_argument("--json", default="", help="output path (default: $OUT/fp8_einsum.json, else ./fp8_einsum.json)")
    args = ap.parse_args()
    if args.precompile:
        precompile()
        return 0
    import torch

    from dgx.bench.timing import L2Flusher

    shapes = [s for s in SHAPES if not args.only or "x".join(map(str, s)) in args.only.split(",")]
    bs = [int(v) for v in args.bs.split(",")] if args.bs else list(BS)
    flush = L2Flusher()
    device = torch.cuda.get_device_name()
    print(f"{device}", flush=True)
    rows = []
    for h, d, r in shapes:
        for b in bs:
            row = run_case(b, h, d, r, args.rounds, flush)
            rows.append(row)
            print(f"b={b:5d} h={h:3d} d={d:4d} r={r:4d}: dgx {row['dgx_events_us']:8.1f} us "
                  f"({row.get('dgx_kernel_us', float('nan')):8.1f} kernel) {row['dgx_tflops']:6.0f} TFLOPS "
                  f"{row['dgx_gbps']:6.0f} GB/s | x gemm_loop {row['x_gemm_loop_events']:.2f} | "
                  f"x torch_bf16 {row['x_torch_bf16_events']:.2f} | checks "
                  f"{row['check_fp32'] and row['check_ue8m0'] and row['check_gemm_loop']}", flush=True)
            torch.cuda.empty_cache()
    result = {
        "device": device,
        "rows": rows,
        "geomean": {f"x_{peer}_{clock}": geomean(r.get(f"x_{peer}_{clock}") for r in rows)
                    for peer in IMPLS[1:] for clock in ("events", "kernel")},
        "never_slower_than_torch_bf16": all(r["x_torch_bf16_events"] >= 1.0 for r in rows),
        "checks_failed": sum(1 for r in rows for k in ("check_fp32", "check_ue8m0", "check_gemm_loop")
                             if r.get(k) is False),
    }
    path = Path(args.json) if args.json else Path(os.environ.get("OUT", ".")) / "fp8_einsum.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"geomeans {json.dumps(result['geomean'])}")
    print(f"wrote {path}: {result['checks_failed']} checks failed")
    return 1 if result["checks_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
