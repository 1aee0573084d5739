"""Device experiment: the dense GEMM kernel of this tree against header variants of it (same config, same inputs),
outputs checked against the float64 reference and compared bitwise with the first variant (unless
--diagnostic), timed kernel-only (dgx bench's kernel timer) after the benchmark's flush (docs/METHOD.md; with
--clean also after a clean one) in alternating rounds, on the dense suite's decode shapes or those given.

    python gemm_ab.py [--diagnostic] [--precompile] [--shapes MxNxK,...] [--json FILE] VARIANT ...   (tests/device/)

A VARIANT is `current` (this tree) or a header overlay (tests/gpu_gemm_utils.variant_headers: ../.dev/hdr_<name>/),
optionally with flags after @: sb / nosb (the heuristic's config with B streamed evict-first or not, GemmConfig.stream_b),
tBMxBN (BMxBN tiles instead of the heuristic's), e.g. current@t64x128@sb.
PERF_ROUNDS (default 3) sets the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dgx.bench.suites import DENSE_MNK  # noqa: E402
from dgx.heuristics import choose_dense  # noqa: E402

NUM_SMS = 132
ROUNDS = int(os.environ.get("PERF_ROUNDS", "3"))
DECODE = [s for s in DENSE_MNK if s[0] <= 128]  # the dense suite's decode shapes (docs/PEERS.md)


def variant_config(name: str, cfg, m: int = 64):
    """`cfg` as variant `name` runs it: flags after the headers, each after an @: `sb` / `nosb` stream B
    evict-first or not; `tBMxBN` takes BMxBN tiles (the heuristic's stage count and promotion rule for them)."""
    import dataclasses

    from dgx.heuristics import pipeline_stages, with_deferred_promotion

    for flag in name.split("@")[1:]:
        if flag in ("sb", "nosb"):
            cfg = dataclasses.replace(cfg, stream_b=flag == "sb")
        elif flag.startswith("t"):
            bm, bn = (int(x) for x in flag[1:].split("x"))
            tile = dataclasses.replace(cfg, block_m=bm, block_n=bn, stages=pipeline_stages(bm, bn), defer=False)
            units = -(-m // bm) * -(-cfg.n // bn)
            cfg = with_deferred_promotion(tile, units, NUM_SMS)
        else:
            raise SystemExit(f"variant {name}: unknown flag {flag!r} (sb, nosb, tBMxBN)")
    return cfg


def parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--diagnostic", action="store_true", help="variants compute wrong results on purpose: no bitwise check")
    ap.add_argument("--shapes", default="", help="comma-separated MxNxK (default: the 12 decode shapes)")
    ap.add_argument("--clean", action="store_true", help="also time after a clean flush (1 GB zeroed, then 256 MB read)")
    ap.add_argument("--json", default="")
    ap.add_argument("variants", nargs="+")
    args = ap.parse_args()
    shapes = [parse_shape(s) for s in args.shapes.split(",")] if args.shapes else DECODE
    from gpu_gemm_utils import use_headers, variant_headers

    if args.precompile:
        from dgx import jit

        for v in args.variants:
            use_headers(variant_headers(v.split("@")[0]))
            for m, n, k in shapes:
                jit.get_cubin(variant_config(v, choose_dense(m, n, k, NUM_SMS).config, m).render(), "sm_90a")
        print(f"built {len(shapes)} kernels x {len(args.variants)} variants", flush=True)
        return 0

    import torch

    import dgx
    from gpu_gemm_utils import check_dense, kernel_rounds, l2_flushes, make_dense

    flushes = l2_flushes(clean=args.clean)
    results = []
    for m, n, k in shapes:
        a, b, a_fp8, b_fp8, d = make_dense(m, n, k, seed=1)
        a_fp8 = (a_fp8[0], dgx.get_mn_major_tma_aligned_tensor(a_fp8[1]))
        base = choose_dense(m, n, k, NUM_SMS).config
        first = None
        for v in args.variants:
            use_headers(variant_headers(v.split("@")[0]))
            cfg = variant_config(v, base, m)
            d.fill_(float("nan"))
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            if not args.diagnostic:
                check_dense(d, a, b, a_fp8, b_fp8)  # raises past the GEMM tests' tolerances
            if first is None:
                first = d.clone()
            elif not args.diagnostic:
                same = torch.equal(d.view(torch.int16), first.view(torch.int16))
                print(f"{m}x{n}x{k}: {v} {'bitwise equal to' if same else 'differs in bits from'} {args.variants[0]}")
        calls = {v: (lambda a_fp8=a_fp8, b_fp8=b_fp8, d=d, cfg=variant_config(v, base, m):
                     dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)) for v in args.variants}

        def prepare(v: str) -> None:
            use_headers(variant_headers(v.split("@")[0]))
            calls[v]()  # compiled and planned with these headers before the timed calls

        samples = kernel_rounds(calls, flushes, ROUNDS, prepare)
        keys = list(samples)
        moved = m * k + n * k + 2 * m * n
        line = []
        for v, f in keys:
            us = statistics.median(samples[(v, f)])
            results.append({"shape": [m, n, k], "config": variant_config(v, base, m).kernel_name, "variant": v,
                            "flush": f, "us": us, "gbps": moved / us / 1e3, "rounds": samples[(v, f)]})
            line.append(f"{v}{'' if f == 'dirty' else ' ' + f} {us:6.2f} us {moved / us / 1e3:5.0f} GB/s")
        print(f"{m}x{n}x{k} {base.kernel_name}: " + " | ".join(line), flush=True)
        del a, b, a_fp8, b_fp8, d, first
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
