"""Small BF16 GEMM runs for compute-sanitizer (racecheck, memcheck, synccheck), one per kernel variant: 1 or 2 math
warpgroups, 256-row tiles (two m64 slices per warpgroup), 2-CTA clusters sharing A or B, every dense form (MN-major
operands with 128- and 64-byte atoms), FP32 D, C added in place, split-K clusters of 2, 4 and 8 summing through
distributed shared memory (planned for 16 SMs, so each cluster runs several tiles), masked (partial blocks stored
from registers; split-K),
contiguous (m_indices with a skipped block, prefix sums, N-major B), K-grouped (an empty group), the ping-pong
schedule (dense in every form, masked, K-grouped; planned for 4 SMs, many tiles a CTA). Each run is checked
against float64 and prints one line; several tiles per CTA (small grids) exercise the ring across tiles.

    compute-sanitizer --tool racecheck python tests/device/bf16_sanitize.py
    compute-sanitizer --tool memcheck --report-api-errors no python tests/device/bf16_sanitize.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dgx  # noqa: E402
from dgx import bf16  # noqa: E402
from dgx.kernels.bf16_gemm import (  # noqa: E402
    LAYOUT_CONTIGUOUS,
    LAYOUT_CONTIGUOUS_PSUM,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    Bf16GemmConfig,
)

BF16, F32 = torch.bfloat16, torch.float32
FORMS = {"nt": ("k", "k"), "nn": ("k", "mn"), "tn": ("mn", "mn"), "tt": ("mn", "k")}
failures = []


def randn(*shape):
    return torch.randn(*shape, device="cuda").to(BF16)


def check(name, out, ref, tol):
    err = float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))
    ok = err <= tol and not torch.isnan(out).any()
    print(f"{'ok  ' if ok else 'FAIL'} {name}: error {err:.2e}", flush=True)
    if not ok:
        failures.append(name)


def operand(rows, k, major):
    return randn(rows, k) if major == "k" else randn(k, -(-rows // 8) * 8)[:, :rows].T


# (form, M, N, K, block_m, block_n, stages, pair, out, with_c): grids of a few CTAs, several tiles each.
DENSE = [
    ("nt", 65, 256, 576, 64, 16, 4, 0, BF16, False),
    ("nt", 129, 576, 520, 128, 128, 3, 1, BF16, False),
    ("nt", 300, 288, 320, 128, 144, 3, 2, BF16, False),
    ("nt", 257, 136, 256, 256, 64, 3, 1, BF16, False),
    ("nn", 200, 480, 384, 128, 96, 4, 0, BF16, False),  # 64-byte atoms of an N-major B
    ("tn", 300, 256, 448, 256, 128, 3, 0, BF16, False),
    ("tt", 129, 256, 384, 128, 128, 4, 1, BF16, False),  # an M-major A shared
    ("nt", 130, 264, 384, 128, 88, 4, 0, F32, False),
    ("nt", 130, 264, 384, 128, 88, 4, 0, F32, True),
    ("nn", 65, 512, 256, 64, 256, 3, 1, BF16, True),
    ("nt", 65, 256, 1000, 64, 16, 4, 1, BF16, False, 2),  # 128 of K per k-block, a K tail
    ("tn", 70, 288, 640, 64, 96, 2, 0, BF16, False, 4),  # 256 of K per k-block, 64-byte atoms of B
]
for form, m, n, k, bm, bn, stages, pair, out, with_c, *k_atoms in DENSE:
    ma, mb = FORMS[form]
    a, b = operand(m, k, ma), operand(n, k, mb)
    ref = a.double() @ b.double().T
    if with_c:
        d = torch.randn(m, n, device="cuda").to(out)
        ref = ref + d.double()
    else:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    cfg = Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a=ma, major_b=mb,
                         out_dtype="float32" if out == F32 else "bfloat16", with_c=with_c, pair=pair,
                         k_atoms=k_atoms[0] if k_atoms else 1)
    bf16.bf16_gemm_nt(a, b, d, c=d if with_c else None, config=cfg)
    torch.cuda.synchronize()
    check(cfg.kernel_name, d, ref, 3e-3 if out == BF16 else 1e-4)

# Split-K: clusters of 2, 4 and 8 CTAs, planned for 16 SMs so each cluster sums several tiles in turn (the tile
# barriers' parities); BF16 and FP32 D, C added in place, an N tail, MN-major operands.
# (form, M, N, K, block_m, block_n, stages, out, with_c, split_k, k_atoms)
SPLIT = [
    ("nt", 200, 288, 512, 64, 144, 4, BF16, False, 8, 1),
    ("tn", 130, 264, 640, 128, 96, 4, F32, True, 2, 1),
    ("tt", 65, 200, 1024, 64, 64, 4, BF16, False, 4, 2),
]
dgx.set_num_sms(16)
for form, m, n, k, bm, bn, stages, out, with_c, split_k, k_atoms in SPLIT:
    ma, mb = FORMS[form]
    a, b = operand(m, k, ma), operand(n, k, mb)
    ref = a.double() @ b.double().T
    if with_c:
        d = torch.randn(m, n, device="cuda").to(out)
        ref = ref + d.double()
    else:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    cfg = Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a=ma, major_b=mb,
                         out_dtype="float32" if out == F32 else "bfloat16", with_c=with_c, k_atoms=k_atoms,
                         split_k=split_k)
    bf16.bf16_gemm_nt(a, b, d, c=d if with_c else None, config=cfg)
    torch.cuda.synchronize()
    check(cfg.kernel_name, d, ref, 3e-3 if out == BF16 else 1e-4)
g, m_max, n, k = 3, 200, 256, 512
a, b = randn(g, m_max, k), randn(g, n, k)
d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=BF16)
counts = [70, 0, 999]
cfg = Bf16GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=4, layout=LAYOUT_MASKED, split_k=2)
bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(counts, device="cuda", dtype=torch.int32), 64, config=cfg)
torch.cuda.synchronize()
for j, c in enumerate(counts):
    rows = min(c, m_max)
    if rows:
        check(f"{cfg.kernel_name} group {j}", d[j, :rows], a[j, :rows].double() @ b[j].double().T, 3e-3)
    if not torch.isnan(d[j, rows:]).all():
        print(f"FAIL masked split-K group {j}: rows past the count written")
        failures.append("masked split-K rows")
dgx.set_num_sms(torch.cuda.get_device_properties(0).multi_processor_count)

# Masked: partial blocks, an empty group, a count over M_max.
g, m_max, n, k = 3, 200, 256, 320
a, b = randn(g, m_max, k), randn(g, n, k)
d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=BF16)
counts = [70, 0, 999]
cfg = Bf16GemmConfig(n=n, k=k, block_m=128, block_n=64, stages=4, layout=LAYOUT_MASKED)
bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(counts, device="cuda", dtype=torch.int32), 64, config=cfg)
torch.cuda.synchronize()
for j, c in enumerate(counts):
    rows = min(c, m_max)
    if rows:
        check(f"{cfg.kernel_name} group {j}", d[j, :rows], a[j, :rows].double() @ b[j].double().T, 3e-3)
    if not torch.isnan(d[j, rows:]).all():
        print(f"FAIL masked group {j}: rows past the count written")
        failures.append("masked rows")

# Contiguous: m_indices with a skipped (-1) block and a bad index; prefix sums; N-major B.
g, n, k = 3, 256, 320
rows = [100, 0, 200]
seg = [128, 0, 256]
m_sum = sum(seg) + 128
a, b = randn(m_sum, k), randn(g, n, k)
idx = torch.full((m_sum,), -1, device="cuda", dtype=torch.int32)
idx[:100] = 0
idx[128:328] = 2
idx[384:] = 9  # out of range: skipped
for nn in (False, True):
    d = torch.full((m_sum, n), float("nan"), device="cuda", dtype=BF16)
    cfg = Bf16GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=4, layout=LAYOUT_CONTIGUOUS,
                         major_b="mn" if nn else "k")
    call = bf16.m_grouped_bf16_gemm_nn_contiguous if nn else bf16.m_grouped_bf16_gemm_nt_contiguous
    call(a, b.transpose(1, 2).contiguous() if nn else b, d, idx, config=cfg)
    torch.cuda.synchronize()
    check(f"{cfg.kernel_name} group 0", d[:100], a[:100].double() @ b[0].double().T, 3e-3)
    check(f"{cfg.kernel_name} group 2", d[128:328], a[128:328].double() @ b[2].double().T, 3e-3)
psum = torch.tensor([100, 100, 328], device="cuda", dtype=torch.int32)
d = torch.full((m_sum, n), float("nan"), device="cuda", dtype=BF16)
cfg = Bf16GemmConfig(n=n, k=k, block_m=128, block_n=64, stages=4, layout=LAYOUT_CONTIGUOUS_PSUM)
bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True, config=cfg)
torch.cuda.synchronize()
check(f"{cfg.kernel_name} group 0", d[:100], a[:100].double() @ b[0].double().T, 3e-3)
check(f"{cfg.kernel_name} group 2", d[128:328], a[128:328].double() @ b[2].double().T, 3e-3)

# K-grouped: an empty group, C added in place, M not a multiple of the tile.
ks = [128, 0, 256]
m, n = 136, 264
a, b = randn(sum(ks), m), randn(sum(ks), n)
d = torch.randn(len(ks), m, n, device="cuda")
c = d.clone()
cfg = Bf16GemmConfig(n=n, k=0, block_m=128, block_n=64, stages=4, layout=LAYOUT_K_GROUPED, major_a="mn",
                     major_b="mn", out_dtype="float32", with_c=True)
bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, device="cuda", dtype=torch.int32), d, config=cfg)
torch.cuda.synchronize()
start = 0
for j, kg in enumerate(ks):
    ref = c[j].double() + a[start:start + kg].double().T @ b[start:start + kg].double()
    check(f"{cfg.kernel_name} group {j}", d[j], ref, 1e-4)
    start += kg

# Ping-pong: the two math warpgroups alternate whole tiles and take turns at the tensor cores (named barriers), each
# staging its own output tile. Planned for 4 SMs, so each CTA runs many tiles, odd and even counts, both warpgroups
# on the shared ring; a K-grouped run whose tiles have different k-block counts; a masked one with partial blocks.
# (form, M, N, K, block_m, block_n, stages, pair, out, with_c)
PINGPONG = [
    ("nt", 300, 520, 384, 64, 128, 4, 2, BF16, False),
    ("nn", 257, 288, 320, 128, 96, 4, 1, BF16, False),
    ("tn", 130, 264, 640, 64, 64, 4, 0, F32, True),
    ("tt", 65, 200, 1000, 128, 64, 3, 0, F32, False),
]
dgx.set_num_sms(4)
for form, m, n, k, bm, bn, stages, pair, out, with_c in PINGPONG:
    ma, mb = FORMS[form]
    a, b = operand(m, k, ma), operand(n, k, mb)
    ref = a.double() @ b.double().T
    if with_c:
        d = torch.randn(m, n, device="cuda").to(out)
        ref = ref + d.double()
    else:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    cfg = Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, major_a=ma, major_b=mb,
                         out_dtype="float32" if out == F32 else "bfloat16", with_c=with_c, pair=pair,
                         schedule="pingpong")
    bf16.bf16_gemm_nt(a, b, d, c=d if with_c else None, config=cfg)
    torch.cuda.synchronize()
    check(cfg.kernel_name, d, ref, 3e-3 if out == BF16 else 1e-4)
g, m_max, n, k = 3, 200, 256, 320
a, b = randn(g, m_max, k), randn(g, n, k)
d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=BF16)
counts = [70, 0, 999]
cfg = Bf16GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=4, layout=LAYOUT_MASKED, schedule="pingpong")
bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(counts, device="cuda", dtype=torch.int32), 64, config=cfg)
torch.cuda.synchronize()
for j, c in enumerate(counts):
    rows = min(c, m_max)
    if rows:
        check(f"{cfg.kernel_name} group {j}", d[j, :rows], a[j, :rows].double() @ b[j].double().T, 3e-3)
    if not torch.isnan(d[j, rows:]).all():
        print(f"FAIL ping-pong masked group {j}: rows past the count written")
        failures.append("ping-pong masked rows")
ks = [384, 0, 128, 256]
m, n = 136, 264
a, b = randn(sum(ks), m), randn(sum(ks), n)
d = torch.randn(len(ks), m, n, device="cuda")
c = d.clone()
cfg = Bf16GemmConfig(n=n, k=0, block_m=64, block_n=64, stages=4, layout=LAYOUT_K_GROUPED, major_a="mn",
                     major_b="mn", out_dtype="float32", with_c=True, schedule="pingpong")
bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, device="cuda", dtype=torch.int32), d, config=cfg)
torch.cuda.synchronize()
start = 0
for j, kg in enumerate(ks):
    ref = c[j].double() + a[start:start + kg].double().T @ b[start:start + kg].double()
    check(f"{cfg.kernel_name} group {j}", d[j], ref, 1e-4)
    start += kg
dgx.set_num_sms(torch.cuda.get_device_properties(0).multi_processor_count)

print(f"{len(failures)} failures: {failures}" if failures else "all ok")
sys.exit(1 if failures else 0)
