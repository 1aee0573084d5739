"""silu_mul_quant's bandwidth on the GPU: kernel-only time (CUPTI through torch.profiler, 1 GB zeroed before each
call, 5 warm-ups, median of 30) on the MoE suite's masked and contiguous shapes (I = 2048), as GB/s of the bytes
that must move (x read once, y and the scales written once) and as a share of the card's HBM peak (goal: 80%); beside
it the read floor (a kernel that only reads as many bytes) and torch's unfused expression (silu * up, then
per_token_cast_to_fp8) for scale. Also each variant (clamp, UE8M0, packed) on the largest shape, and events timing.

    python tests/device/smq_bench.py --out $OUT/smq_bench.json

prints one line per case and writes the table as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import dgx
from dgx.bench.hbm import hbm_peak_gbps
from dgx.bench.kernel_timer import time_kernels
from dgx.bench.moe_suites import builtin_moe_suite
from dgx.bench.read_floor import ReadFloor
from dgx.bench.timing import L2Flusher, time_gpu
from dgx.deep_gemm.utils import per_token_cast_to_fp8

INTER = 2048


def cases():
    """(label, x shape, masked_m or None): the MoE suite's masked decode and contiguous prefill rows, plus two
    larger contiguous ones."""
    out = []
    for s in builtin_moe_suite():
        if s.layout == "masked":
            out.append((s.label, (s.experts, s.max_m, 2 * INTER), list(s.group_ms)))
        else:
            out.append((s.label, (s.padded_m, 2 * INTER), None))
    out += [("contiguous 65536 rows", (65536, 2 * INTER), None), ("contiguous 1024 rows", (1024, 2 * INTER), None)]
    return out


def moved_bytes(shape, counts) -> int:
    rows = sum(counts) if counts is not None else shape[0]
    return rows * (2 * INTER * 2 + INTER + INTER // 128 * 4)


def torch_unfused(x):
    inter = x.shape[-1] // 2
    h = torch.nn.functional.silu(x[..., :inter].float()) * x[..., inter:].float()
    return per_token_cast_to_fp8(h.reshape(-1, inter), use_ue8m0=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="smq_bench.json")
    args = ap.parse_args()
    flush = L2Flusher()
    peak = hbm_peak_gbps(torch.cuda.get_device_name())
    floor = ReadFloor(time_kernels, flush, 5, 30)
    rows = []
    print(f"{torch.cuda.get_device_name()}: HBM peak {peak} GB/s")
    for label, shape, counts in cases():
        x = torch.randn(shape, device="cuda").to(torch.bfloat16)
        masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda") if counts is not None else None
        variants = [("fp32", {})]
        if label.startswith("contiguous 65536") or label.startswith("masked 32e·256"):
            variants += [("clamp", {"swiglu_limit": 7.0}), ("ue8m0", {"use_ue8m0": True}),
                         ("packed", {"use_ue8m0": True, "packed_ue8m0": True})]
        nbytes = moved_bytes(shape, counts)
        floor_us = floor.us(nbytes)
        for name, kw in variants:
            y, sf = dgx.silu_mul_quant(x, masked_m=masked_m, **kw)
            call = lambda: dgx.silu_mul_quant(x, masked_m=masked_m, out=y, out_scales=sf, **kw)  # noqa: E731
            k = time_kernels(call, flush)
            e = time_gpu(call, flush)
            gbps = nbytes / (k.median_us * 1e-6) / 1e9
            row = dict(case=label, variant=name, bytes=nbytes, kernel_us=k.median_us, events_us=e.median_us,
                       gbps=gbps, hbm_share=gbps / peak if peak else None, read_floor_us=floor_us,
                       floor_share=floor_us / k.median_us)
            if name == "fp32" and counts is None:
                row["torch_unfused_events_us"] = time_gpu(lambda: torch_unfused(x), flush).median_us
            rows.append(row)
            share = f"{row['hbm_share']:.0%} of HBM peak" if peak else "peak unknown"
            print(f"{label:28s} {name:7s} {k.median_us:8.1f} µs kernel ({e.median_us:8.1f} events) {gbps:7.0f} GB/s "
                  f"{share}; read floor {floor_us:.1f} µs ({row['floor_share']:.0%})"
                  + (f"; torch unfused {row['torch_unfused_events_us']:.1f} µs" if "torch_unfused_events_us" in row
                     else ""))
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "hbm_peak_gbps": peak, "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
