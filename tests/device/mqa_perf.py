"""Device script: MQA-logits timings (prefill TFLOPS on in-window pairs, paged GB/s on the bytes that must move),
with the torch peer a user would write (BF16 matmul per chunk). Usage: python tests/device/mqa_perf.py [OUT.json]"""

import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dgx  # noqa: E402
from gpu_gemm_utils import bench_cold_l2  # noqa: E402
from mqa_utils import make_paged, make_prefill, windows  # noqa: E402

HBM_PEAK = 3.35e12


def torch_prefill(q, kv, scales, w, ks, ke, chunk=256):
    """What a user writes without dgx: dequantise to BF16, one matmul per query chunk, mask."""
    k = (kv.float() * scales[:, None]).bfloat16()
    s, skv = q.shape[0], kv.shape[0]
    out = torch.empty(s, skv, device="cuda")
    cols = torch.arange(skv, device="cuda")
    for i in range(0, s, chunk):
        qc = q[i:i + chunk].bfloat16()
        score = torch.einsum("qhd,jd->qhj", qc, k).float().relu_()
        logit = torch.einsum("qhj,qh->qj", score, w[i:i + chunk])
        inside = (cols[None] >= ks[i:i + chunk, None]) & (cols[None] < ke[i:i + chunk, None])
        out[i:i + chunk] = logit.masked_fill_(~inside, float("-inf"))
    return out


def prefill_rows(reps):
    rows = []
    for skv in (8192, 65536):
        s = 4096
        q, kv, scales, w = make_prefill(s, skv)
        ks, ke = windows("causal", s, skv)
        pairs = (ke.long() - ks.long()).clamp(min=0).sum().item()
        flops = 2 * 64 * 128 * pairs
        out = torch.empty(s, skv, device="cuda")
        t = bench_cold_l2(lambda: dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke, out=out), reps=reps)
        row = {"suite": "mqa", "S": s, "S_kv": skv, "window": "causal", "dgx_us": t, "dgx_tflops": flops / t / 1e6}
        if skv == 8192:
            tp = bench_cold_l2(lambda: torch_prefill(q, kv, scales, w, ks, ke), warm=1, reps=5)
            row.update(torch_us=tp, torch_tflops=flops / tp / 1e6)
        rows.append(row)
        print(row, flush=True)
    return rows


def paged_case(batch, next_n, lens, reps, num_sms):
    q, cache, w, ctx, table, _, _ = make_paged(batch, next_n, lens, spare_blocks=0)
    max_len = max(lens)
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, num_sms)
    out = torch.empty(batch * next_n, max_len, device="cuda")
    t = bench_cold_l2(lambda: dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, out=out), reps=reps)
    blocks = sum((c + 63) // 64 for c in lens)
    moved = blocks * 64 * (128 + 4) + batch * next_n * max_len * 4 + q.numel() + w.numel() * 4
    return t, moved


def paged_rows(reps):
    rows = []
    num_sms = dgx.get_num_sms()
    for avg in (8192, 65536):
        for batch in (64, 256, 1024):
            for next_n in (1, 2):
                lens = [avg] * batch
                t, moved = paged_case(batch, next_n, lens, reps, num_sms)
                row = {"suite": "paged_mqa", "B": batch, "next_n": next_n, "avg_context": avg, "lens": "equal",
                       "dgx_us": t, "GBps": moved / t / 1e3, "hbm_share": moved / t / 1e-6 / HBM_PEAK}
                rows.append(row)
                print(row, flush=True)
    # Ragged: lengths varying 10x within the batch, same total as equal lengths: time against the balanced case.
    for batch, avg in ((256, 8192), (64, 65536)):
        rng = random.Random(1)
        raw = [rng.uniform(1, 10) for _ in range(batch)]
        lens = [max(1, int(avg * r * batch / sum(raw))) for r in raw]
        t_r, moved = paged_case(batch, 1, lens, reps, num_sms)
        t_e, _ = paged_case(batch, 1, [sum(lens) // batch] * batch, reps, num_sms)
        row = {"suite": "paged_mqa", "B": batch, "next_n": 1, "avg_context": avg, "lens": "10x ragged",
               "dgx_us": t_r, "balanced_us": t_e, "ratio": t_r / t_e, "GBps": moved / t_r / 1e3,
               "hbm_share": moved / t_r / 1e-6 / HBM_PEAK}
        rows.append(row)
        print(row, flush=True)
    return rows


def main():
    reps = int(os.environ.get("REPS", "30"))
    rows = prefill_rows(reps) + paged_rows(reps)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
