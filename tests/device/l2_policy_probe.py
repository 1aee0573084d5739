"""Device experiment: what the cold-L2 flush leaves behind, and the L2 evict-first policy on streamed operands.

The benchmark's flush (docs/METHOD.md) zeroes 1 GB before each timed call, so L2 starts the call full of dirty
lines; a kernel that streams tens of MB through L2 evicts them and HBM writes them back during its run, on top of
its own traffic.
This script times the memory-bound kernels kernel-only after two flushes, the method's ("dirty": zero 1 GB) and
a "clean" one (zero 1 GB, then read 256 MB, so L2 holds clean lines), for a torch copy, the dense decode GEMMs
and the paged MQA decode kernel, each with and without the evict-first policy on its streamed operand (the
GEMM's B: GemmConfig.stream_b; the cache: MqaLogitsConfig.stream_kv). Outputs of the two variants must be
bitwise equal.

    python l2_policy_probe.py [--precompile] [--json FILE]      (from tests/device/)
"""

from __future__ import annotations

import argparse
import dataclasses
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
from dgx.kernels.mqa_logits import paged_config  # noqa: E402

NUM_SMS = 132
ROUNDS = int(os.environ.get("PERF_ROUNDS", "2"))
GEMMS = [s for s in DENSE_MNK if s[0] <= 128]  # the dense suite's decode shapes (docs/PEERS.md)
MASKED = [(16, 64, 4096, 7168), (32, 32, 7168, 2048)]  # groups, rows per group, N, K: the decode MoE sizes
PAGED = [(64, 8192, 1), (64, 8192, 2), (256, 8192, 1), (1024, 8192, 1), (64, 65536, 1)]


def gemm_configs(m, n, k):
    base = choose_dense(m, n, k, NUM_SMS).config
    return [("base", base), ("stream_b", dataclasses.replace(base, stream_b=True))]


def masked_configs(groups, rows, n, k):
    from dgx.heuristics import choose_grouped
    from dgx.kernels.fp8_gemm import LAYOUT_MASKED

    base = choose_grouped(LAYOUT_MASKED, rows, n, k, groups, NUM_SMS).config
    return [("base", base), ("stream_b", dataclasses.replace(base, stream_b=True))]


def paged_configs(next_n):
    base = paged_config(64, 128, next_n, False)
    return [("base", base), ("stream_kv", dataclasses.replace(base, stream_kv=True))]


def precompile() -> None:
    from dgx import jit

    configs = {c for s in GEMMS for _, c in gemm_configs(*s)} | {c for n in (1, 2) for _, c in paged_configs(n)}
    configs |= {c for s in MASKED for _, c in masked_configs(*s)}
    for c in sorted(configs, key=lambda c: c.kernel_name):
        jit.get_cubin(c.render(), "sm_90a")
    print(f"built {len(configs)} kernels", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.precompile:
        precompile()
        return 0

    import torch

    import dgx
    from gpu_gemm_utils import check_dense, kernel_rounds, l2_flushes, make_dense
    from mqa_utils import make_paged

    flushes = l2_flushes()
    results = []

    def run(label, variants, moved):
        """variants: [(name, fn)]; every (variant, flush) timed kernel-only in alternating rounds."""
        samples = kernel_rounds(dict(variants), flushes, ROUNDS)
        line = []
        for v, f in samples:
            us = statistics.median(samples[(v, f)])
            results.append({"case": label, "variant": v, "flush": f, "us": us, "rounds": samples[(v, f)],
                            "gbps": moved / us / 1e3})
            line.append(f"{v}/{f} {us:7.1f} us {moved / us / 1e3:5.0f} GB/s")
        print(f"{label:28s} " + " | ".join(line), flush=True)

    # A torch device copy of 15.1 MB (read + write), no variants: the flush's effect alone.
    src = torch.empty(15_100_000, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    run("copy 15.1 MB", [("copy", lambda: dst.copy_(src))], 2 * src.numel())

    for m, n, k in GEMMS:
        a, b, a_fp8, b_fp8, d = make_dense(m, n, k, seed=1)
        a_fp8 = (a_fp8[0], dgx.get_mn_major_tma_aligned_tensor(a_fp8[1]))
        outs = []
        variants = []
        for name, cfg in gemm_configs(m, n, k):
            d.fill_(float("nan"))
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            check_dense(d, a, b, a_fp8, b_fp8)
            outs.append(d.clone())
            variants.append((name, lambda cfg=cfg: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)))
        if not torch.equal(outs[0], outs[1]):
            raise SystemExit(f"{m}x{n}x{k}: stream_b changed the output")
        moved = m * k + n * k + 2 * m * n
        run(f"gemm {m}x{n}x{k} {gemm_configs(m, n, k)[0][1].block_n}", variants, moved)
        del a, b, a_fp8, b_fp8, d, outs

    from test_gpu_grouped import _check_masked, _masked_inputs

    for groups, rows, n, k in MASKED:
        torch.manual_seed(0)
        a, b, d = _masked_inputs(groups, rows, n, k)
        masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
        outs, variants = [], []
        for name, cfg in masked_configs(groups, rows, n, k):
            d.fill_(float("nan"))
            dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, rows, config=cfg)
            torch.cuda.synchronize()
            _check_masked(a, b, d, [rows] * groups, rows)
            outs.append(d.clone())
            variants.append((name, lambda cfg=cfg: dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, rows,
                                                                                    config=cfg)))
        if not torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)):
            raise SystemExit(f"masked {groups}x{rows}x{n}x{k}: stream_b changed the output")
        run(f"masked {groups}x{rows}x{n}x{k}", variants, groups * (rows * k + n * k + 2 * rows * n))
        del a, b, d, outs

    for batch, avg, next_n in PAGED:
        q, cache, w, ctx, table, _, _ = make_paged(batch, next_n, [avg] * batch, spare_blocks=0)
        sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS)
        out = torch.empty(batch * next_n, avg, device="cuda")
        outs, variants = [], []
        for name, cfg in paged_configs(next_n):
            out.fill_(float("nan"))
            dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, avg, out=out, config=cfg)
            torch.cuda.synchronize()
            outs.append(out.clone())
            variants.append((name, lambda cfg=cfg: dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, avg,
                                                                            out=out, config=cfg)))
        if not torch.equal(outs[0], outs[1]):
            raise SystemExit(f"paged B={batch} ctx={avg}: stream_kv changed the output")
        moved = batch * avg * 132 + out.numel() * 4
        run(f"paged B={batch} ctx={avg} n={next_n}", variants, moved)
        del q, cache, w, ctx, table, out, outs

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
