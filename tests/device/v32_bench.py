"""Device benchmark of the DeepSeek-V3.2/V4 kernels of issue 39 that need no BF16 GEMM: each checked, then timed
against its torch peer in one process, with docs/METHOD.md's method (1 GB zeroed before each call, CUDA events, 5
warm-ups, median of 30) and kernel-only (CUPTI through torch.profiler) for the memory-bound ones.

- hc:   dgx.hc_prenorm.tf32_hc_prenorm_gemm on DeepGEMM's shapes (M 13 .. 8192, N 24, K 7168 .. 28672, no splits
        or 16) against ``a.float() @ b.T`` plus ``a.float().square().sum(-1)`` (TF32 allowed). Goals: kernel-only
        >= 80% of the card's HBM bandwidth at M >= 4096, events >= 3x the peer at M <= 137.
- skip: dgx.skip_head_mid.fp8_gemm_nt_skip_head_mid on DeepGEMM's shapes against dgx.fp8_gemm_nt on the same
        shape (goal: within 2%) and against the FP8 GEMM followed by the copies into the padded layout.
- mqa:  the paged MQA kernel with 16 heads, next_n 3 and 4, and indices= against today's 64-head next_n 1 case
        (goal: the same share of HBM bandwidth, kernel-only), the prefill kernel with 16 heads; the torch peer
        (dgx.bench.mqa_torch) timed alongside.

Writes $OUT/v32.json (or --json PATH). ``--precompile`` builds every kernel the run uses into DGX_CACHE_DIR on a
machine without a GPU (NVRTC only) and exits; ``--sweep`` also times every (block_m, cluster) variant of the
pre-norm GEMM per shape (kernel-only), to check the heuristic's choice.

    python tests/device/v32_bench.py [--precompile] [--only hc,skip,mqa] [--sweep] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dgx.kernels import hc_prenorm as H  # noqa: E402
from dgx.kernels import mqa_logits as M  # noqa: E402

from dgx.bench.v32_suites import HC_CASES, SKIP_CASES  # noqa: E402  (the `dgx bench` hc_prenorm / skip_head_mid cases)

NUM_SMS = 132
# (heads, next_n, batch, average context, tokens per sequence for indices= or None); the first is today's anchor.
PAGED_CASES = [(64, 1, 64, 8192, None), (64, 1, 256, 8192, None),
               (16, 1, 64, 8192, None), (16, 1, 256, 8192, None), (16, 2, 256, 8192, None), (16, 4, 256, 8192, None),
               (32, 3, 128, 8192, None), (32, 4, 128, 8192, None), (64, 3, 64, 8192, None), (64, 4, 64, 8192, None),
               (64, 2, 256, 8192, None), (64, 1, 256, 8192, 6), (16, 1, 256, 8192, 6), (64, 1, 64, 65536, 10)]
PREFILL_CASES = [(16, 128, 4096, 8192), (64, 128, 4096, 8192)]  # heads, dim, S, S_kv (causal)
SKIP_ROUNDS = 6


def hc_configs(sweep: bool):
    out = set()
    for m, n, k, s in HC_CASES:
        out.add(H.choose_config(m, n, k, s or 1, NUM_SMS))
        if sweep:
            out.update(sweep_configs(n, k, s or 1))
    return out


def sweep_configs(n, k, splits):
    out = []
    for block_m in H.BLOCK_MS:
        for cluster in H.CLUSTERS:
            if cluster > 1 and H.ceil_div(k, H.BLOCK_K) // splits < cluster:
                continue
            out.append(H.HcPrenormConfig(n, k, block_m, splits, cluster, H.stages_for(n, block_m, cluster)))
    return out


def skip_configs():
    from dgx.skip_head_mid import choose_config

    out = set()
    for m, n, k, hs in SKIP_CASES:
        c = choose_config(m, n, k, hs, NUM_SMS)
        out.update((c, dataclasses.replace(c, head_splits=None)))
    return out


def mqa_configs():
    out = {M.PagedScheduleConfig(), M.PagedScheduleConfig(True)}
    for heads, next_n, _, _, tokens in PAGED_CASES:
        out.add(M.varlen_config(heads, 128, False) if tokens else M.paged_config(heads, 128, next_n, False))
    for heads, dim, _, _ in PREFILL_CASES:
        out.update((M.prefill_config(heads, dim, False, False), M.MqaCleanConfig(False, False, False)))
    return out


def precompile(only: set[str], sweep: bool) -> None:
    configs = set()
    if "hc" in only:
        configs |= hc_configs(sweep)
    if "skip" in only:
        configs |= skip_configs()
    if "mqa" in only:
        configs |= mqa_configs()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from parallel_build import build_all

    print(f"built {build_all(sorted(configs, key=lambda c: c.kernel_name))}", flush=True)


# --- helpers on the device ----------------------------------------------------------------------------------------


class Bench:
    def __init__(self):
        import torch

        from dgx.bench.hbm import hbm_peak_gbps
        from dgx.bench.timing import L2Flusher

        self.torch = torch
        self.flush = L2Flusher()
        self.device = torch.cuda.get_device_name()
        self.peak_gbps = hbm_peak_gbps(self.device)
        src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy = self.kernel(lambda: dst.copy_(src))
        self.copy_gbps = 2 * src.numel() / copy / 1e3
        del src, dst

    def events(self, fn) -> float:
        from dgx.bench.timing import time_gpu

        return time_gpu(fn, self.flush).median_us

    def kernel(self, fn) -> float:
        from dgx.bench.kernel_timer import time_kernels

        return time_kernels(fn, self.flush).median_us

    def both(self, fn) -> dict:
        return {"events_us": self.events(fn), "kernel_us": self.kernel(fn)}

    def shares(self, nbytes: int, us: float) -> dict:
        gbps = nbytes / us / 1e3
        out = {"gbps": gbps, "share_of_copy": gbps / self.copy_gbps}
        if self.peak_gbps:
            out["share_of_peak"] = gbps / self.peak_gbps
        return out


# --- hc -------------------------------------------------------------------------------------------------------


def run_hc(b: Bench, sweep: bool) -> list[dict]:
    torch = b.torch
    from dgx.bench.v32_impls import hc_torch
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm
    from dgx.torch_utils import calc_diff

    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    for m, n, k, splits in HC_CASES:
        g = torch.Generator(device="cuda").manual_seed(m + k)
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=g)
        lead = () if splits is None else (splits,)
        d = torch.full(lead + (m, n), float("nan"), device="cuda")
        s = torch.full(lead + (m,), float("nan"), device="cuda")
        tf32_hc_prenorm_gemm(a, w, d, s, num_splits=splits)
        fd, fs = (d, s) if splits is None else (d.sum(0), s.sum(0))
        ref_d = a.double() @ w.double().T
        ref_s = a.double().square().sum(-1)
        rel = float((fd.double() - ref_d).norm() / ref_d.norm())
        rel_s = float((fs.double() - ref_s).norm() / ref_s.norm())
        diff = max(calc_diff(fd, a.float() @ w.T), calc_diff(fs, a.float().square().sum(-1)))
        ok = bool(rel < 2e-3 and rel_s < 1e-4 and diff < 1e-8 and not torch.isnan(d).any())
        del ref_d, ref_s

        peer = hc_torch(a, w)  # the hc_prenorm suite's peer (TF32 allowed for its call)

        mine = b.both(lambda: tf32_hc_prenorm_gemm(a, w, d, s, num_splits=splits))
        theirs = b.both(peer)
        nbytes = m * k * 2 + n * k * 4 + (splits or 1) * (m * n + m) * 4
        config = H.choose_config(m, n, k, splits or 1, NUM_SMS)
        row = {"m": m, "n": n, "k": k, "splits": splits, "config": config.kernel_name, "check": ok, "rel_err": rel,
               "calc_diff_vs_torch_tf32": diff, "dgx": mine, "torch": theirs,
               "speedup_events": theirs["events_us"] / mine["events_us"],
               "speedup_kernel": theirs["kernel_us"] / mine["kernel_us"], **b.shares(nbytes, mine["kernel_us"])}
        if m >= 4096:
            row["goal"] = "kernel-only >= 80% of HBM"
            row["goal_met"] = row.get("share_of_peak", row["share_of_copy"]) >= 0.8
        elif m <= 137:
            row["goal"] = ">= 3x torch (events)"
            row["goal_met"] = row["speedup_events"] >= 3.0
        if sweep:
            row["sweep_kernel_us"] = {
                c.kernel_name: b.kernel(lambda c=c: tf32_hc_prenorm_gemm(a, w, d, s, num_splits=splits, config=c))
                for c in sweep_configs(n, k, splits or 1)}
        rows.append(row)
        print(f"hc m={m:5} k={k:5} splits={splits or 0:2}: {'ok ' if ok else 'BAD'} dgx {mine['kernel_us']:7.1f} us "
              f"kernel / {mine['events_us']:7.1f} events, {row['gbps']:6.0f} GB/s "
              f"({100 * row.get('share_of_peak', row['share_of_copy']):3.0f}%), torch {theirs['events_us']:7.1f} "
              f"events: {row['speedup_events']:4.1f}x  {config.kernel_name}", flush=True)
        del a, w, d, s
    return rows


# --- skip -----------------------------------------------------------------------------------------------------


def run_skip(b: Bench) -> list[dict]:
    torch = b.torch
    import dgx
    from dgx.bench.v32_impls import gemm_then_copy as copy_peer
    from dgx.skip_head_mid import choose_config, fp8_gemm_nt_skip_head_mid
    from gpu_gemm_utils import check_dense, kernel_rounds, make_dense

    rows = []
    for m, n, k, hs in SKIP_CASES:
        left, mid, right = hs
        heads = n // (left + right)
        a, w, a_fp8, b_fp8, plain = make_dense(m, n, k, seed=m + n)
        config = choose_config(m, n, k, hs, NUM_SMS)
        dgx.fp8_gemm_nt(a_fp8, b_fp8, plain, config=dataclasses.replace(config, head_splits=None))
        check_dense(plain, a, w, a_fp8, b_fp8)
        d = torch.zeros(m, heads * (left + mid + right), device="cuda", dtype=torch.bfloat16)
        fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, hs)
        v, pv = d.view(m, heads, -1), plain.view(m, heads, -1)
        ok = bool(torch.equal(v[:, :, :left], pv[:, :, :left]) and torch.equal(v[:, :, left + mid:], pv[:, :, left:])
                  and (v[:, :, left:left + mid] == 0).all())
        tmp = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        gemm_then_copy = copy_peer(dgx, a_fp8, b_fp8, d, hs, tmp)  # the skip_head_mid suite's peer

        def skip():
            fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, hs)

        def gemm_only():
            dgx.fp8_gemm_nt(a_fp8, b_fp8, plain)

        mine = b.both(skip)
        gemm = b.both(gemm_only)
        peer = b.both(gemm_then_copy)
        # The 2% goal is within run-to-run noise of one measurement each: kernel-only medians in alternating rounds.
        rounds = kernel_rounds({"skip": skip, "gemm": gemm_only}, {"dirty": b.flush}, SKIP_ROUNDS)
        alternating = statistics.median(rounds[("gemm", "dirty")]) / statistics.median(rounds[("skip", "dirty")])
        row = {"m": m, "n": n, "k": k, "head_splits": hs, "config": config.kernel_name, "check": ok, "dgx": mine,
               "fp8_gemm_nt": gemm, "gemm_then_copy": peer, "rounds_kernel_us": {name: v for (name, _), v in rounds.items()},
               "vs_fp8_gemm_nt_kernel": alternating,
               "vs_fp8_gemm_nt_events": gemm["events_us"] / mine["events_us"],
               "vs_gemm_then_copy_events": peer["events_us"] / mine["events_us"],
               "tflops": 2 * m * n * k / mine["kernel_us"] / 1e6}
        row["goal"] = "within 2% of fp8_gemm_nt (kernel-only)"
        row["goal_met"] = row["vs_fp8_gemm_nt_kernel"] >= 0.98
        rows.append(row)
        print(f"skip m={m:5} n={n:5} k={k:5}: {'ok ' if ok else 'BAD'} {mine['kernel_us']:7.1f} us kernel, "
              f"fp8_gemm_nt {gemm['kernel_us']:7.1f} ({row['vs_fp8_gemm_nt_kernel']:.3f}x), gemm+copy "
              f"{peer['events_us']:7.1f} events ({row['vs_gemm_then_copy_events']:.2f}x)", flush=True)
    return rows


# --- mqa ------------------------------------------------------------------------------------------------------


def _check_paged_rows(out, q, values, scales, w, ctx, table, max_len, rows):
    """The float64 reference of the sequences of the given output rows (unclean: positions past each query's
    visited blocks are not compared), compared."""
    import torch

    from mqa_utils import compare, ref_paged

    next_n, heads = q.shape[1], w.shape[1]
    idx = torch.tensor(sorted({r // next_n for r in rows}), device="cuda")
    w_rows = w.view(q.shape[0], next_n, heads)[idx].reshape(-1, heads)
    ref = ref_paged(q[idx], values, scales, w_rows, ctx[idx], table[idx], max_len, False)
    compare(out.view(q.shape[0], next_n, -1)[idx].reshape(-1, max_len), ref)


def run_mqa(b: Bench) -> list[dict]:
    torch = b.torch
    import dgx.mqa as mqa
    from dgx.bench.mqa_torch import paged_logits, prefill_logits
    from mqa_utils import compare, make_paged, make_prefill, make_varlen, ref_prefill, windows

    rows = []
    anchor = {}
    for heads, next_n, batch, avg, tokens in PAGED_CASES:
        rng = random.Random(heads * 7 + next_n + batch)
        if tokens:
            per_seq = [rng.randint(1, tokens) for _ in range(batch)]
            base = [rng.randint(int(0.7 * avg), int(1.3 * avg)) for _ in range(batch)]
            q, cache, w, ctx, table, indices, values, scales = make_varlen(per_seq, base, heads, 128, seed=batch)
            seq_lens = [bb + t - 1 for bb, t in zip(base, per_seq)]
        else:
            seq_lens = [rng.randint(int(0.7 * avg), int(1.3 * avg)) for _ in range(batch)]
            q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, seq_lens, heads, 128, seed=batch)
            indices = None
        max_len = int(ctx.max()) + 64
        sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, indices=indices)
        out = torch.full((q.shape[0] * q.shape[1], max_len), float("nan"), device="cuda")

        def call():
            mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, ctx, table, sched, max_len, False, indices=indices,
                                         out=out)

        call()
        rows_checked = sorted(rng.sample(range(out.shape[0]), min(8, out.shape[0])))
        _check_paged_rows(out, q, values, scales, w, ctx, table, max_len, rows_checked)  # varlen: next_n 1 rows
        mine = b.both(call)
        lens_host = ctx.view(-1).tolist() if indices is not None else seq_lens
        if indices is None and ctx.ndim == 1:
            peer_fn = lambda: paged_logits(q, cache, w, ctx, table, lens_host, max_len)  # noqa: E731
        else:  # one row per token: the peer's next_n 1 form over the tokens
            peer_fn = lambda: paged_logits(q, cache, w, ctx.view(-1), table, lens_host, max_len)  # noqa: E731
        peer = {"events_us": b.events(peer_fn)}
        kv_bytes = sum((length + 63) // 64 for length in seq_lens) * 64 * (128 + 4)
        logit_bytes = sum(ctx.view(-1).tolist()) * 4 * (next_n if indices is None and ctx.ndim == 1 else 1)
        nbytes = q.numel() + w.numel() * 4 + kv_bytes + logit_bytes
        row = {"heads": heads, "next_n": next_n, "batch": batch, "avg_context": avg, "tokens_per_seq": tokens,
               "dgx": mine, "torch": peer, "speedup_events": peer["events_us"] / mine["events_us"],
               **b.shares(nbytes, mine["kernel_us"])}
        key = (batch, avg)
        if heads == 64 and next_n == 1 and not tokens:
            anchor[key] = row["gbps"]
        if key in anchor and not (heads == 64 and next_n == 1 and not tokens):
            row["vs_64_head_next_n_1"] = row["gbps"] / anchor[key]
            row["goal"] = "bandwidth share of the 64-head next_n 1 case"
            row["goal_met"] = row["vs_64_head_next_n_1"] >= 0.95
        rows.append(row)
        print(f"paged h={heads:2} n={next_n} b={batch:4} ctx={avg:5} tok={tokens or 0:2}: {mine['kernel_us']:7.1f} us "
              f"kernel, {row['gbps']:6.0f} GB/s ({100 * row.get('share_of_peak', row['share_of_copy']):3.0f}%)"
              f"{'  %.2fx the 64-head next_n 1 case' % row['vs_64_head_next_n_1'] if 'vs_64_head_next_n_1' in row else ''}"
              f", torch {peer['events_us']:8.1f} us events", flush=True)
        del q, cache, w, ctx, table, values, scales, out
    for heads, dim, s, skv in PREFILL_CASES:
        q, kv, scales, w = make_prefill(s, skv, heads, dim)
        ks, ke = windows("causal", s, skv)
        out = torch.empty(s, skv, device="cuda")
        call = lambda: mqa.fp8_fp4_mqa_logits((q, None), (kv, scales), w, ks, ke, out=out)  # noqa: E731
        call()
        check = list(range(0, s, max(1, s // 16)))
        idx = torch.tensor(check, device="cuda")
        compare(out[idx], ref_prefill(q[idx], kv, scales, w[idx], ks[idx], ke[idx]))
        mine = b.both(call)
        peer = {"events_us": b.events(lambda: prefill_logits(q, kv, scales, w, ks, ke))}
        flops = 2 * heads * dim * int((ke.long() - ks.long()).sum())
        rows.append({"prefill": True, "heads": heads, "dim": dim, "s": s, "s_kv": skv, "dgx": mine, "torch": peer,
                     "tflops": flops / mine["kernel_us"] / 1e6, "speedup_events": peer["events_us"] / mine["events_us"]})
        print(f"prefill h={heads} d={dim} S={s} S_kv={skv}: {mine['kernel_us']:7.1f} us kernel, "
              f"{rows[-1]['tflops']:6.0f} TFLOPS, torch {peer['events_us']:8.1f} us events", flush=True)
        del q, kv, scales, w, out
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true", help="build the kernels (no GPU needed) and exit")
    ap.add_argument("--only", default="hc,skip,mqa", help="comma-separated suites: hc, skip, mqa")
    ap.add_argument("--sweep", action="store_true", help="hc: also time every (block_m, cluster) variant")
    ap.add_argument("--json", default="", help="output path (default: $OUT/v32.json, else ./v32.json)")
    args = ap.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {"hc", "skip", "mqa"}
    if unknown:
        ap.error(f"--only: unknown suites {sorted(unknown)}")
    if args.precompile:
        precompile(only, args.sweep)
        return 0
    b = Bench()
    print(f"{b.device}: copy {b.copy_gbps:.0f} GB/s, datasheet {b.peak_gbps} GB/s", flush=True)
    result = {"device": b.device, "copy_gbps": b.copy_gbps, "hbm_peak_gbps": b.peak_gbps}
    if "hc" in only:
        result["hc"] = run_hc(b, args.sweep)
    if "skip" in only:
        result["skip"] = run_skip(b)
    if "mqa" in only:
        result["mqa"] = run_mqa(b)
    rows = [r for suite in ("hc", "skip", "mqa") for r in result.get(suite, [])]
    result["checks_failed"] = sum(1 for r in rows if r.get("check") is False)
    result["goals_missed"] = [{k: r[k] for k in r if k in ("m", "n", "k", "splits", "heads", "next_n", "batch",
                                                           "tokens_per_seq", "goal")}
                              for r in rows if r.get("goal_met") is False]
    path = Path(args.json) if args.json else Path(os.environ.get("OUT", ".")) / "v32.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}: {result['checks_failed']} checks failed, {len(result['goals_missed'])} goals missed")
    return 1 if result["checks_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
