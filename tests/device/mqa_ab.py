"""Device experiment: the MQA-logits kernels of this tree against header variants of them (same config, same
inputs), outputs compared bitwise, then timed kernel-only (dgx bench's kernel timer, docs/METHOD.md's flush) in
alternating rounds: the paged kernel on the decode anchors of `dgx bench --suite paged_mqa` and a ragged batch, or
with --prefill the prefill kernel on the two causal anchors of `--suite mqa` (TFLOPS on the in-window work).

    python mqa_ab.py [--prefill] [--precompile] [--json FILE] VARIANT ...      (from tests/device/)

A VARIANT is `current` (this tree) or a header overlay, optionally with @[wW][sN] (the decode kernel with W math
warpgroups and N KV stages), of tests/gpu_gemm_utils.variant_headers
(../.dev/hdr_<name>/*.cuh replacing the tree's headers). --precompile builds every variant's kernels into the
kernel cache and exits (no GPU needed; use the target's NVRTC and carry the cache with DGX_CACHE_DIR).
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

from dgx.kernels.mqa_logits import paged_config, prefill_config  # noqa: E402

NUM_SMS = 132
ROUNDS = int(os.environ.get("PERF_ROUNDS", "3"))
# (batch, context lengths, next_n): the suite's anchors at 8K and one at 64K, and a ragged batch (10x spread).
CASES = [(64, 8192, 1), (64, 8192, 2), (256, 8192, 1), (256, 8192, 2), (1024, 8192, 1), (64, 65536, 1),
         (256, "ragged", 1)]


def lengths(batch: int, avg) -> list[int]:
    if avg != "ragged":
        return [avg] * batch
    import random

    rng = random.Random(7)
    raw = [rng.uniform(1.0, 10.0) for _ in range(batch)]
    scale = 8192 * batch / sum(raw)
    return [max(1, int(x * scale)) for x in raw]


def use_variant(name: str) -> None:
    """Compile with the headers of `name` (a trailing @[wW][sN], the decode kernel's shape, is not part of them)."""
    from dgx import mqa
    from gpu_gemm_utils import use_headers, variant_headers

    use_headers(variant_headers(name.split("@")[0]))
    mqa._launchers.clear()


def variant_config(name: str, cfg):
    """`cfg`, with the math warpgroups and KV stages of a variant named HEADERS@[wW][sN] (W math warpgroups, N KV
    stages)."""
    import dataclasses
    import re

    _, _, spec = name.partition("@")
    found = re.fullmatch(r"(?:w(\d+))?(?:s(\d+))?", spec)
    if found is None:
        raise SystemExit(f"variant {name!r}: expected HEADERS@[wW][sN]")
    wgs, stages = found.groups()
    changes = {"math_wgs": int(wgs)} if wgs else {}
    if stages:
        changes["kv_stages"] = int(stages)
    return dataclasses.replace(cfg, **changes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--prefill", action="store_true")
    ap.add_argument("--diagnostic", action="store_true", help="variants compute wrong results on purpose: no bitwise check")
    ap.add_argument("--json", default="")
    ap.add_argument("variants", nargs="+")
    args = ap.parse_args()
    configs = [paged_config(64, 128, n, False) for n in (1, 2)] + [prefill_config(64, 128, False, False)]
    if args.precompile:
        from dgx import jit
        from dgx.kernels.mqa_logits import MqaCleanConfig, PagedScheduleConfig

        for v in args.variants:
            use_variant(v)
            for c in configs + [PagedScheduleConfig(), MqaCleanConfig(True, False, False, 1)]:
                jit.get_cubin(c.render(), "sm_90a")
        print(f"built {len(configs)} kernels x {len(args.variants)} variants", flush=True)
        return 0

    import torch

    import dgx
    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import L2Flusher
    from gpu_gemm_utils import round_order
    from mqa_utils import make_paged

    flush = L2Flusher()
    results = []
    if args.prefill:
        results = run_prefill(args.variants, flush, check=not args.diagnostic)
    for batch, avg, next_n in [] if args.prefill else CASES:
        lens = lengths(batch, avg)
        q, cache, w, ctx, table, _, _ = make_paged(batch, next_n, lens, spare_blocks=0)
        width = max(lens)
        use_variant("current")
        sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS)
        out = torch.empty(batch * next_n, width, device="cuda")
        base = paged_config(64, 128, next_n, False)
        first = None
        for v in args.variants:
            use_variant(v)
            cfg = variant_config(v, base)
            out.fill_(float("nan"))  # positions past a sequence's blocks stay NaN: compared as bits below
            dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, width, out=out, config=cfg)
            torch.cuda.synchronize()
            if first is None:
                first = out.clone()
            elif not args.diagnostic and not torch.equal(out.view(torch.int32), first.view(torch.int32)):
                raise SystemExit(f"B={batch} ctx={avg} n={next_n}: variant {v} differs from {args.variants[0]}")
        samples = {v: [] for v in args.variants}
        for r in range(ROUNDS):
            for i in round_order(len(args.variants), r):
                v = args.variants[i]
                use_variant(v)
                cfg = variant_config(v, base)
                call = lambda q=q, cache=cache, w=w, ctx=ctx, table=table, out=out, cfg=cfg: dgx.fp8_paged_mqa_logits(  # noqa: E731
                    q, cache, w, ctx, table, sched, width, out=out, config=cfg)
                call()
                samples[v].append(time_kernels(call, flush).median_us)
        moved = sum(lens) * 132 + out.numel() * 4
        line = []
        for v in args.variants:
            us = statistics.median(samples[v])
            results.append({"case": [batch, avg, next_n], "variant": v, "us": us, "gbps": moved / us / 1e3,
                            "rounds": samples[v]})
            line.append(f"{v} {us:7.1f} us {moved / us / 1e3:5.0f} GB/s ({moved / us / 1e3 / 3350:4.0%})")
        print(f"B={batch:5d} ctx={avg!s:>6} n={next_n}: " + " | ".join(line), flush=True)
        del q, cache, w, ctx, table, out, first
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def run_prefill(variants: list[str], flush, check: bool = True) -> list[dict]:
    import torch

    import dgx
    from dgx.bench.kernel_timer import time_kernels
    from gpu_gemm_utils import round_order
    from mqa_utils import causal_anchor

    results = []
    cfg = prefill_config(64, 128, False, False)
    for skv in (8192, 65536):
        s = 4096
        q, kv, sc, w, ks, ke, out, flops = causal_anchor(s, skv)
        first = None
        for v in variants:
            use_variant(v)
            out.fill_(float("nan"))
            dgx.fp8_mqa_logits(q, (kv, sc), w, ks, ke, out=out, config=cfg)
            torch.cuda.synchronize()
            if first is None:
                first = out.clone()
            elif check and not torch.equal(out.view(torch.int32), first.view(torch.int32)):
                raise SystemExit(f"prefill S_kv={skv}: variant {v} differs from {variants[0]}")
        samples = {v: [] for v in variants}
        for r in range(ROUNDS):
            for i in round_order(len(variants), r):
                v = variants[i]
                use_variant(v)
                call = lambda q=q, kv=kv, sc=sc, w=w, ks=ks, ke=ke, out=out: dgx.fp8_mqa_logits(  # noqa: E731
                    q, (kv, sc), w, ks, ke, out=out, config=cfg)
                call()
                samples[v].append(time_kernels(call, flush, iters=10).median_us)
        line = []
        for v in variants:
            us = statistics.median(samples[v])
            results.append({"prefill": [s, skv], "variant": v, "us": us, "tflops": flops / us / 1e6,
                            "rounds": samples[v]})
            line.append(f"{v} {us:8.1f} us {flops / us / 1e6:6.0f} TFLOPS")
        print(f"prefill S={s} S_kv={skv}: " + " | ".join(line), flush=True)
        del q, kv, sc, w, out, first
    return results


if __name__ == "__main__":
    sys.exit(main())
