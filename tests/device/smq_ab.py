"""silu_mul_quant A/B on the GPU: the precise kernel (expf and IEEE division, four units a half-warp: the kernel
before the fast forms) against the fast kernel at one, two, four and eight units a half-warp, on the MoE suite's
masked and contiguous shapes (I = 2048) and two larger contiguous ones. Variants are timed in alternating rounds
(each round in another order), each timing kernel-only (CUPTI through torch.profiler) and with CUDA events, 1 GB
zeroed before each call, 5 warm-ups, median of 30; per case the read floor (a kernel that only reads as many bytes)
with the same timer. Reports GB/s of the bytes that must move (x read once, y and the scales written once), the share
of the HBM peak (goal 80%) and of the read floor, marks the variant the heuristic picks, and checks first that every
fast variant writes the same bytes as the heuristic's and that the precise one agrees within FP8 rounding.

    python tests/device/smq_ab.py --out $OUT/smq_ab.json [--rounds 3] [--only masked]

prints one line per case and variant (the median over rounds of each round's median) and writes every sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dgx.bench.hbm import hbm_peak_gbps  # noqa: E402
from dgx.bench.kernel_timer import time_kernels  # noqa: E402
from dgx.bench.read_floor import ReadFloor  # noqa: E402
from dgx.bench.timing import L2Flusher, time_gpu  # noqa: E402
from dgx.kernels import silu_mul_quant as K  # noqa: E402
from dgx.moe_activation import _silu_mul_quant  # noqa: E402
from dgx.torch_utils import calc_diff  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "device"))
from smq_bench import INTER, cases, moved_bytes  # noqa: E402

VARIANTS = {
    "precise u4": dict(unroll=4, fast_silu=False),
    "fast u1": dict(unroll=1),
    "fast u2": dict(unroll=2),
    "fast u4": dict(unroll=4),
    "fast u8": dict(unroll=8),
}


def _dequant(y, sf):
    return (y.double().unflatten(-1, (-1, 128)) * sf.double().unsqueeze(-1)).flatten(-2)


def _run(x, masked_m, kw, config, y, sf):
    return _silu_mul_quant(x, masked_m, kw.get("swiglu_limit"), kw.get("use_ue8m0", False),
                           kw.get("packed_ue8m0", False), y, sf, None, config)


def _check(x, masked_m, kw, configs, chosen):
    """Every fast variant's bytes equal the heuristic's; the precise variant within FP8 rounding of them."""
    outs = {}
    for name, config in configs.items():
        y, sf = _run(x, masked_m, kw, config, None, None)
        outs[name] = (y, sf)
    torch.cuda.synchronize()
    ref_y, ref_sf = outs[chosen]
    rows = masked_m.tolist() if masked_m is not None else None
    for name, (y, sf) in outs.items():
        if rows is not None:  # only the counted rows are written
            pairs = [(y[g, :n], sf[g, :n], ref_y[g, :n], ref_sf[g, :n]) for g, n in enumerate(rows) if n]
        else:
            pairs = [(y, sf, ref_y, ref_sf)]
        for a_y, a_sf, b_y, b_sf in pairs:
            if name.startswith("fast"):
                if not (torch.equal(a_y.view(torch.uint8), b_y.view(torch.uint8)) and torch.equal(a_sf, b_sf)):
                    raise SystemExit(f"{name} writes other bytes than {chosen}")
            else:
                diff = calc_diff(_dequant(a_y, a_sf), _dequant(b_y, b_sf))
                if diff > 1e-4:
                    raise SystemExit(f"{name} is {diff:.2e} (calc_diff) from {chosen}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="smq_ab.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="cases whose label contains this")
    args = ap.parse_args()
    flush = L2Flusher()
    peak = hbm_peak_gbps(torch.cuda.get_device_name())
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    floor = ReadFloor(time_kernels, flush, 5, 30)
    print(f"{torch.cuda.get_device_name()} ({num_sms} SMs): HBM peak {peak} GB/s; {args.rounds} rounds")
    todo = [(label, shape, counts, "fp32", {}) for label, shape, counts in cases() if args.only in label]
    todo += [(label, shape, counts, "clamp", {"swiglu_limit": 7.0}) for label, shape, counts in cases()
             if label.startswith("contiguous 65536") and args.only in label]
    rows = []
    for label, shape, counts, variant, kw in todo:
        x = torch.randn(shape, device="cuda").to(torch.bfloat16)
        masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda") if counts is not None else None
        groups, mmax = (shape[0], shape[1]) if counts is not None else (1, shape[0])
        mode = "fp32"
        clamp = "swiglu_limit" in kw
        chosen_config = K.choose_config(mmax, INTER // 128, groups, num_sms, clamp, mode)
        configs = {name: K.SiluMulQuantConfig(clamp, mode, **v) for name, v in VARIANTS.items()}
        chosen = next(n for n, c in configs.items() if c == chosen_config)
        _check(x, masked_m, kw, configs, chosen)
        y, sf = _run(x, masked_m, kw, configs[chosen], None, None)
        nbytes = moved_bytes(shape, counts)
        floor_us = floor.us(nbytes)
        samples = {n: {"kernel": [], "events": []} for n in configs}
        names = list(configs)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            if r % 2:
                order.reverse()
            for name in order:
                config = configs[name]
                call = lambda: _run(x, masked_m, kw, config, y, sf)  # noqa: E731
                samples[name]["kernel"].append(time_kernels(call, flush).median_us)
                samples[name]["events"].append(time_gpu(call, flush).median_us)
        for name in names:
            k = statistics.median(samples[name]["kernel"])
            e = statistics.median(samples[name]["events"])
            gbps = nbytes / (k * 1e-6) / 1e9
            row = dict(case=label, variant=variant, impl=name, heuristic=name == chosen, bytes=nbytes, kernel_us=k,
                       events_us=e, gbps=gbps, hbm_share=gbps / peak if peak else None, read_floor_us=floor_us,
                       floor_share=floor_us / k, kernel_samples_us=samples[name]["kernel"],
                       events_samples_us=samples[name]["events"])
            rows.append(row)
            share = f"{row['hbm_share']:4.0%} of HBM" if peak else "peak unknown"
            spread = max(samples[name]["kernel"]) - min(samples[name]["kernel"])
            print(f"{label:24s} {variant:5s} {name:10s}{'*' if name == chosen else ' '} {k:8.1f} µs kernel "
                  f"(±{spread:4.1f} over rounds; {e:8.1f} events) {gbps:6.0f} GB/s {share}; read floor {floor_us:.1f} "
                  f"µs ({row['floor_share']:.0%})")
        case_rows = [r for r in rows if r["case"] == label and r["variant"] == variant]
        best = min(case_rows, key=lambda r: r["kernel_us"])
        picked = next(r for r in case_rows if r["heuristic"])
        print(f"{'':24s} best {best['impl']}; the heuristic's ({picked['impl']}) at "
              f"{best['kernel_us'] / picked['kernel_us']:.3f} of it")
        del x, y, sf, masked_m
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "hbm_peak_gbps": peak, "rounds": args.rounds,
                   "rows": rows}, f, indent=1)
    print(f"wrote {args.out} (* = the heuristic's choice)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
