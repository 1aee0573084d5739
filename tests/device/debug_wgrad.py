"""Repeats one weight-gradient GEMM and checks every run (hunting an intermittent failure):
python debug_wgrad.py M N K [runs]."""

import sys

import torch

import dgx
from dgx.torch_utils import dequantize, per_token_cast_to_fp8

m, n, k = (int(x) for x in sys.argv[1:4])
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 10
a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
b_rm = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), mn_major=False)
b_mn = (b_rm[0], dgx.get_mn_major_tma_aligned_tensor(b_rm[1]))
ref = dequantize(*a, 1).double() @ dequantize(*b_rm, 1).double().T
c = torch.randn(m, n, device="cuda")
ref += c.double()
for label, b in (("SFB row-major (converted per call)", b_rm), ("SFB MN-major", b_mn)):
    bad = []
    for i in range(runs):
        d = c.clone()
        dgx.fp8_gemm_nt(a, b, d, c=d)
        torch.cuda.synchronize()
        rel = float((d.double() - ref).norm() / ref.norm())
        if rel > 5e-4:
            bad.append((i, rel))
    print(label, f"{len(bad)}/{runs} bad", bad[:5], flush=True)
    t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    d = c.clone()
    t[0].record()
    for _ in range(10):
        dgx.fp8_gemm_nt(a, b, d, c=d)
    t[1].record(); torch.cuda.synchronize()
    print(label, f"{t[0].elapsed_time(t[1]) / 10 * 1e3:.1f} us/call (warm L2)", flush=True)
