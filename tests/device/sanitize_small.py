"""Small fp8_gemm_nt runs for compute-sanitizer: one per config family (1 or 2 math warpgroups, no
cluster, 2-CTA clusters sharing A or B (dense and contiguous), BLOCK_N with two B-scale blocks per tile,
selected at run time or compiled in, 256-row tiles as two m64 slices per warpgroup (in stage rounds with
and without unused stages), an odd number of
8-column groups ending the stmatrix epilogue with a two-matrix store, deferred promotion with one or two
math warpgroups, alone or in a cluster, and on 16- and 32-column tiles whose whole k-loop is one chunk; split-K
clusters; weight gradients dense (deferred, 256-row, plain 128x128 in stage rounds, several tiles per CTA stored by
the producer) and K-grouped)."""

import torch

import dgx
from dgx.torch_utils import dequantize
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_K_GROUPED, GemmConfig
from dgx.heuristics import max_stages
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import check_dense, make_dense

FAMILIES = [
    (65, 256, 576, 64, 16, 0),
    (129, 576, 576, 128, 128, 1),
    (300, 288, 320, 128, 144, 2),
    (257, 136, 256, 256, 64, 1),
    (300, 480, 384, 256, 128, 0),
    (200, 480, 384, 128, 160, 0),
    (200, 480, 512, 128, 160, 2),  # 4 k-blocks, 4 stages: rounds of compile-time stages, B shared
    (130, 264, 384, 256, 88, 0),
    (300, 256, 4480, 256, 128, 1),  # 35 k-blocks, 3 stages: lean stage rounds with an unused stage, A shared
    (259, 384, 4480, 256, 128, 0),  # the A-scale warp's loads end inside a row's last 16 bytes (M % 4 = 3)
    (65, 256, 1280, 64, 56, 0, True),  # deferred: a chunk of 8 k-blocks and a tail of 2
    (129, 576, 640, 128, 64, 2, True),
    (65, 256, 1280, 64, 16, 0, True),  # deferred 16-column tile: its whole k-loop (10 k-blocks) as one chunk
    (129, 288, 7168, 128, 32, 0, True),  # the same with two math warpgroups over 56 k-blocks
]
for m, n, k, bm, bn, pair, *defer in FAMILIES:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    cfg = GemmConfig(n, k, bm, bn, min(max_stages(bm, bn), 4), pair=pair, defer=bool(defer))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    print("ok", cfg.kernel_name)
# A decode tile with B's loads L2 evict-first (GemmConfig.stream_b, as the heuristic picks for one row of M tiles).
for n, bn in ((520, 64), (272, 16)):  # the second a 16-column tile (as for N 2112 at K 7168)
    a, b, a_fp8, b_fp8, d = make_dense(40, n, 2176)
    cfg = GemmConfig(n, 2176, 64, bn, 4, defer=True, stream_b=True)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    print("ok", cfg.kernel_name)

# Split-K: clusters of 2, 3 and 4 CTAs summing partial tiles through distributed shared memory; the first runs
# several tiles per cluster (its partial buffer handed back and reused), the third is the weight gradient.
for m, n, k, bm, bn, split in [(300, 272, 768, 64, 64, 2), (65, 256, 768, 128, 96, 3)]:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    cfg = GemmConfig(n, k, bm, bn, min(max_stages(bm, bn, False, split), 4), split_k=split)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    print("ok split-K", cfg.kernel_name)
a_w = dgx.per_token_cast_to_fp8(torch.randn(130, 1024, device="cuda", dtype=torch.bfloat16))
b_w = dgx.per_token_cast_to_fp8(torch.randn(136, 1024, device="cuda", dtype=torch.bfloat16))
d_w = torch.randn(130, 136, device="cuda")
cfg = GemmConfig(136, 1024, 128, 64, 4, wgrad=True, split_k=4)
dgx.fp8_gemm_nt(a_w, b_w, d_w, c=d_w, config=cfg)
torch.cuda.synchronize()
print("ok split-K weight gradient", cfg.kernel_name)

# B scales starting 12 bytes into their buffer: the scale map, and the boxes the producer loads, begin before them.
a, b, a_fp8, b_fp8, d = make_dense(200, 480, 576)
buf = torch.zeros(b_fp8[1].numel() + 3, device="cuda")
sfb = buf[3:].view(b_fp8[1].shape)
sfb.copy_(b_fp8[1])
cfg = GemmConfig(480, 576, 128, 160, 4)
dgx.fp8_gemm_nt(a_fp8, (b_fp8[0], sfb), d, config=cfg)
torch.cuda.synchronize()
check_dense(d, a, b, a_fp8, b_fp8)
print("ok shifted B scales", cfg.kernel_name)

# Grouped layouts: contiguous with padding, an empty group and a bad index; masked with a count of 0,
# one past M_max and a partial last block (stored row by row).
m_indices = torch.full((384,), -1, dtype=torch.int32, device="cuda")
m_indices[:100] = 0
m_indices[128:256] = 5  # a bad index: that block is skipped
m_indices[256:300] = 2
a16 = torch.randn(384, 320, device="cuda", dtype=torch.bfloat16)
a_q = dgx.per_token_cast_to_fp8(a16)
b_parts = [dgx.per_block_cast_to_fp8(torch.randn(272, 320, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
b_q = (torch.stack([q for q, _ in b_parts]), torch.stack([s for _, s in b_parts]))
d = torch.full((384, 272), float("nan"), device="cuda", dtype=torch.bfloat16)
dgx.m_grouped_fp8_gemm_nt_contiguous(a_q, b_q, d, m_indices)
torch.cuda.synchronize()
print("ok contiguous")
# The same with pairs sharing B along M: a valid block paired with a bad one, and one paired past M_sum.
d.fill_(float("nan"))
cfg = GemmConfig(272, 320, 128, 128, 4, pair=2, layout=LAYOUT_CONTIGUOUS)
dgx.m_grouped_fp8_gemm_nt_contiguous(a_q, b_q, d, m_indices, config=cfg)
torch.cuda.synchronize()
assert torch.isnan(d[128:256]).all() and not torch.isnan(d[:100]).any()
print("ok contiguous pairs")
# Stage rounds on the contiguous layout (K = 512: 4 k-blocks, 4 stages), pairs as above.
a16 = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16)
a_r = dgx.per_token_cast_to_fp8(a16)
b_parts = [dgx.per_block_cast_to_fp8(torch.randn(320, 512, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
b_r = (torch.stack([q for q, _ in b_parts]), torch.stack([s for _, s in b_parts]))
d_r = torch.full((384, 320), float("nan"), device="cuda", dtype=torch.bfloat16)
cfg = GemmConfig(320, 512, 128, 160, 4, pair=2, layout=LAYOUT_CONTIGUOUS)
dgx.m_grouped_fp8_gemm_nt_contiguous(a_r, b_r, d_r, m_indices, config=cfg)
torch.cuda.synchronize()
assert torch.isnan(d_r[128:256]).all() and not torch.isnan(d_r[:100]).any()
print("ok contiguous stage rounds")

a16 = torch.randn(3, 72, 320, device="cuda", dtype=torch.bfloat16)
parts = [dgx.per_token_cast_to_fp8(a16[g], mn_major=False) for g in range(3)]
a_q = (torch.stack([q for q, _ in parts]), dgx.get_mn_major_tma_aligned_tensor(torch.stack([s for _, s in parts])))
d = torch.full((3, 72, 272), float("nan"), device="cuda", dtype=torch.bfloat16)
masked_m = torch.tensor([0, 73, 41], dtype=torch.int32, device="cuda")
dgx.m_grouped_fp8_gemm_nt_masked(a_q, b_q, d, masked_m, 40)
torch.cuda.synchronize()
assert torch.isnan(d[2, 41:]).all() and not torch.isnan(d[1]).any()
print("ok masked")

# Weight gradients: dense FP32 accumulate in place, and K-grouped with an empty group (both with deferred
# promotion, as the heuristic picks; K-grouped with run-time tails of one k-block chunks).
a_q = dgx.per_token_cast_to_fp8(torch.randn(136, 384, device="cuda", dtype=torch.bfloat16))
b_q = dgx.per_token_cast_to_fp8(torch.randn(72, 384, device="cuda", dtype=torch.bfloat16))
d = torch.randn(136, 72, device="cuda")
dgx.fp8_gemm_nt(a_q, b_q, d, c=d)
torch.cuda.synchronize()
print("ok wgrad")
d = torch.randn(300, 72, device="cuda")
a_q = dgx.per_token_cast_to_fp8(torch.randn(300, 384, device="cuda", dtype=torch.bfloat16))
dgx.fp8_gemm_nt(a_q, b_q, d, c=d, config=GemmConfig(72, 384, 256, 64, 3, wgrad=True))
torch.cuda.synchronize()
print("ok wgrad 256 rows")
# Plain 128x128 weight-gradient tiles, partial last tiles along M and N: 8 k-blocks of 4 stages (whole stage rounds),
# and 9 (ring k-blocks up to stage 0, rounds, then the ring again, from another offset every tile).
for k_w, rounds in ((1024, True), (1152, False)):
    a_q = dgx.per_token_cast_to_fp8(torch.randn(300, k_w, device="cuda", dtype=torch.bfloat16))
    b_q2 = dgx.per_token_cast_to_fp8(torch.randn(264, k_w, device="cuda", dtype=torch.bfloat16))
    d = torch.zeros(300, 264, device="cuda")
    cfg = GemmConfig(264, k_w, 128, 128, 4, wgrad=True)
    assert cfg.stage_rounds == rounds, cfg
    dgx.fp8_gemm_nt(a_q, b_q2, d, c=d, config=cfg)
    torch.cuda.synchronize()
    ref = dequantize(*a_q, 1).double() @ dequantize(*b_q2, 1).double().T
    assert float((d.double() - ref).norm() / ref.norm()) < 5e-4
    print("ok wgrad plain 128x128,", "stage rounds" if rounds else "rounds inside the ring")
# Several tiles per CTA (288 tiles, partial along M and N), each written out by the producer during the CTA's next
# tile: 5 k-blocks (a span after the fifth, the rest at the tile's end) and 16 (a span a k-block from the fifth on),
# added to a C that is not zero.
for k_w in (640, 2048):
    a_q = dgx.per_token_cast_to_fp8(torch.randn(2200, k_w, device="cuda", dtype=torch.bfloat16))
    b_q2 = dgx.per_token_cast_to_fp8(torch.randn(2000, k_w, device="cuda", dtype=torch.bfloat16))
    c = torch.randn(2200, 2000, device="cuda")
    d = c.clone()
    dgx.fp8_gemm_nt(a_q, b_q2, d, c=d, config=GemmConfig(2000, k_w, 128, 128, 4, wgrad=True))
    torch.cuda.synchronize()
    ref = dequantize(*a_q, 1).double() @ dequantize(*b_q2, 1).double().T + c.double()
    assert float((d.double() - ref).norm() / ref.norm()) < 5e-4
    print("ok wgrad plain 128x128, several tiles per CTA, K", k_w)

ks = [256, 0, 128]
a16 = torch.randn(72, sum(ks), device="cuda", dtype=torch.bfloat16)
b16 = torch.randn(136, sum(ks), device="cuda", dtype=torch.bfloat16)
(aq, sfa), (bq, sfb) = dgx.per_token_cast_to_fp8(a16), dgx.per_token_cast_to_fp8(b16)
a_flat = torch.cat([aq[:, 0:256].reshape(-1), aq[:, 256:384].reshape(-1)])
b_flat = torch.cat([bq[:, 0:256].reshape(-1), bq[:, 256:384].reshape(-1)])
d = torch.zeros(3, 72, 136, device="cuda")
dgx.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, ks)
torch.cuda.synchronize()
assert torch.equal(d[1], torch.zeros_like(d[1]))
print("ok k_grouped")
# The plain 128x128 K-grouped tile (the heuristic's for M and N of 256 or more).
d = torch.zeros(3, 72, 136, device="cuda")
dgx.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, ks,
                                     config=GemmConfig(136, 0, 128, 128, 4, layout=LAYOUT_K_GROUPED, wgrad=True))
torch.cuda.synchronize()
assert torch.equal(d[1], torch.zeros_like(d[1]))
print("ok k_grouped plain 128x128")
# Groups of 5, 0, 9 and 3 k-blocks: the plain tile's ring k-blocks up to stage 0, its stage rounds and its ring tail
# from every offset of the ring.
ks2 = [640, 0, 1152, 384]
a16 = torch.randn(72, sum(ks2), device="cuda", dtype=torch.bfloat16)
b16 = torch.randn(136, sum(ks2), device="cuda", dtype=torch.bfloat16)
(aq, sfa), (bq, sfb) = dgx.per_token_cast_to_fp8(a16), dgx.per_token_cast_to_fp8(b16)
bounds = [0, 640, 640, 1792, 2176]
a_flat = torch.cat([aq[:, bounds[g]:bounds[g + 1]].reshape(-1) for g in range(4)])
b_flat = torch.cat([bq[:, bounds[g]:bounds[g + 1]].reshape(-1) for g in range(4)])
d = torch.zeros(4, 72, 136, device="cuda")
dgx.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, ks2,
                                     config=GemmConfig(136, 0, 128, 128, 4, layout=LAYOUT_K_GROUPED, wgrad=True))
torch.cuda.synchronize()
for g in (0, 2, 3):
    ref = dequantize(aq[:, bounds[g]:bounds[g + 1]], sfa[:, bounds[g] // 128:bounds[g + 1] // 128], 1).double() @ \
        dequantize(bq[:, bounds[g]:bounds[g + 1]], sfb[:, bounds[g] // 128:bounds[g + 1] // 128], 1).double().T
    rel = float((d[g].double() - ref).norm() / ref.norm())
    assert rel < 5e-4, (g, rel)
assert torch.equal(d[1], torch.zeros_like(d[1]))
print("ok k_grouped plain 128x128, rounds inside the ring")

# The prefix-sum contiguous layout (one end row per group; groups start at the previous end rounded up to 128),
# packed UE8M0 scales unpacked on the GPU, and a row-major SFA converted by the scale-layout kernel.
import dgx.deep_gemm as dg  # noqa: E402

rows = [100, 0, 130, 1]
starts = [0]
for r in rows[:-1]:
    starts.append(-(-(starts[-1] + r) // 128) * 128)
psum = torch.tensor([s + r for s, r in zip(starts, rows)], dtype=torch.int32, device="cuda")
m_sum = starts[-1] + rows[-1]
a_p = dg.per_token_cast_to_fp8(torch.randn(m_sum, 256, device="cuda", dtype=torch.bfloat16), False)
a_p = (a_p[0], dg.get_mn_major_tma_aligned_tensor(a_p[1]))
parts = [dgx.per_block_cast_to_fp8(torch.randn(192, 256, device="cuda", dtype=torch.bfloat16)) for _ in rows]
b_p = (torch.stack([q for q, _ in parts]), torch.stack([s for _, s in parts]))
d_p = torch.full((m_sum, 192), float("nan"), device="cuda", dtype=torch.bfloat16)
dg.m_grouped_fp8_gemm_nt_contiguous(a_p, b_p, d_p, psum, use_psum_layout=True)
torch.cuda.synchronize()
print("ok prefix sums")
a, b, a_fp8, b_fp8, d = make_dense(130, 256, 512)
a_u = dg.per_token_cast_to_fp8(a, True)
dg.fp8_gemm_nt((a_u[0], dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(a_u[1])), b_fp8, d)
torch.cuda.synchronize()
print("ok packed UE8M0 scales")
dgx.fp8_gemm_nt((a_fp8[0], a_fp8[1].contiguous()), b_fp8, d)  # row-major SFA: converted on the GPU
torch.cuda.synchronize()
check_dense(d, a, b, a_fp8, b_fp8)
print("ok row-major SFA")
