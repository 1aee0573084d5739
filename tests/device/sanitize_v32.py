"""Small runs of issue 39's new kernels for compute-sanitizer (memcheck, racecheck, synccheck), each synchronised
and checked: the HC pre-norm GEMM in every (block_m, cluster) variant with a K tail and splits, skip-head-mid, and the
paged MQA kernel with 16 heads, next_n 3 and 4, and indices= (a run longer than 32 tokens, a bad block id).

    compute-sanitizer --tool memcheck --report-api-errors no python tests/device/sanitize_v32.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import dgx  # noqa: E402
import dgx.mqa as mqa  # noqa: E402
from dgx.hc_prenorm import tf32_hc_prenorm_gemm  # noqa: E402
from dgx.kernels.hc_prenorm import HcPrenormConfig, stages_for  # noqa: E402
from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid  # noqa: E402
from gpu_gemm_utils import make_dense  # noqa: E402
from mqa_utils import compare, make_paged, make_varlen, ref_paged  # noqa: E402

m, n, k, splits = 70, 20, 1000, 3  # rows past M, N padded to 24, a K tail (1000 = 15 blocks + 40)
g = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
b = torch.randn(n, k, device="cuda", generator=g)
# Every tile and cluster with splits, one and two CTAs an SM (64-row tiles), and a cluster of 16 without splits.
HC_VARIANTS = [(bm, c, splits, p) for bm in (64, 128) for c in (1, 2, 4) for p in (1, 2) if bm == 64 or p == 1]
for block_m, cluster, sp, per_sm in HC_VARIANTS + [(64, 16, 1, 1)]:
    d = torch.full((sp, m, n), float("nan"), device="cuda")
    s = torch.full((sp, m), float("nan"), device="cuda")
    config = HcPrenormConfig(n, k, block_m, sp, cluster, stages_for(n, block_m, cluster, per_sm))
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=sp, config=config)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    rel = float((d.sum(0).double() - ref).norm() / ref.norm())
    rel_s = float((s.sum(0).double() - a.double().square().sum(-1)).norm() / a.double().square().sum(-1).norm())
    assert rel < 2e-3 and rel_s < 1e-4, (config, rel, rel_s)
    print("ok hc", config.kernel_name, flush=True)

a_, b_, a_fp8, b_fp8, plain = make_dense(65, 1024, 384, seed=2)
dgx.fp8_gemm_nt(a_fp8, b_fp8, plain)
d = torch.full((65, 1024 + 4 * 64), -1.0, device="cuda", dtype=torch.bfloat16)
fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, (128, 64, 128))
torch.cuda.synchronize()
v, pv = d.view(65, 4, 320), plain.view(65, 4, 256)
assert torch.equal(v[:, :, :128], pv[:, :, :128]) and torch.equal(v[:, :, 192:], pv[:, :, 128:])
assert (v[:, :, 128:192] == -1).all()
print("ok skip_head_mid", flush=True)

for heads, next_n, lens in ((16, 1, [1, 64, 65, 300]), (32, 3, [3, 200, 77]), (64, 4, [4, 130])):
    q, cache, w, ctx, table, values, scales = make_paged(len(lens), next_n, lens, heads, 64, seed=heads)
    table[0, 0] = 1 << 30
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 7)
    out = mqa.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 320, clean_logits=True)
    torch.cuda.synchronize()
    ref = ref_paged(q, values, scales, w, ctx, table.clamp(0, cache.shape[0] - 1), 320, True)
    ref[:next_n, :64] = float("nan")  # the bad block reads zeros: not compared
    compare(out.masked_fill(ref.isnan(), float("nan")), ref)
    print("ok paged", heads, next_n, flush=True)

# A run of 40 tokens over 24 blocks: groups of 4 in two chunks of blocks (the later groups read them from L2).
q, cache, w, ctx, table, indices, values, scales = make_varlen([1, 40, 3, 2], [5, 1500, 200, 1], 64, 64, seed=3)
sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 5, indices=indices)
out = mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, ctx, table, sched, 1600, True, indices=indices)
torch.cuda.synchronize()
compare(out, ref_paged(q, values, scales, w, ctx, table, 1600, True))
print("ok paged indices", flush=True)
