"""Small MQA-logits runs for compute-sanitizer (memcheck, racecheck, synccheck): prefill with random windows
(full and compressed, FP32 and BF16, out-of-range ks/ke) and paged decode with ragged lengths, a bad block id,
next_n 1 and 2 and per-token lengths, each checked against the float64 reference."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dgx  # noqa: E402
from mqa_utils import compare, make_paged, make_prefill, ref_paged, ref_prefill, windows  # noqa: E402

q, kv, sc, w = make_prefill(37, 333, seed=1)
ks, ke = windows("random", 37, 333, seed=1)
ks[0], ke[1] = -50, 5000
for max_seqlen_k, dtype in ((0, torch.float32), (100, torch.bfloat16)):
    out = dgx.fp8_mqa_logits(q, (kv, sc), w, ks, ke, max_seqlen_k=max_seqlen_k, logits_dtype=dtype)
    torch.cuda.synchronize()
    compare(out, ref_prefill(q, kv, sc, w, ks, ke, max_seqlen_k), tol=2e-3 if max_seqlen_k == 0 else 1e-2)
    print("ok prefill", max_seqlen_k, dtype, flush=True)

for next_n, lens in ((1, [1, 64, 65, 300, 129]), (2, [2, 200, 77])):
    qp, cache, wp, ctx, table, values, scales = make_paged(len(lens), next_n, lens, seed=next_n)
    table[0, 0] = 1 << 30
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, 7)
    out = dgx.fp8_paged_mqa_logits(qp, cache, wp, ctx, table, sched, 320, clean_logits=True)
    torch.cuda.synchronize()
    ref = ref_paged(qp, values, scales, wp, ctx, table.clamp(0, cache.shape[0] - 1), 320, True)
    ref[:next_n, :64] = float("nan")  # the bad block reads zeros: not compared
    compare(out.masked_fill(ref.isnan(), float("nan")), ref)
    ctx2 = torch.stack([ctx] * next_n, dim=1).contiguous()
    sched2 = dgx.get_paged_mqa_logits_metadata(ctx2, 64, 5)
    dgx.fp8_paged_mqa_logits(qp, cache, wp, ctx2, table, sched2, 320, logits_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    print("ok paged", next_n, flush=True)
