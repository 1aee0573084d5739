"""Runs one dense GEMM once and checks it (for a debugger or sanitizer): python debug_one.py M N K [mn]."""

import sys

import torch

import dgx
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import check_dense, make_dense

m, n, k = (int(x) for x in sys.argv[1:4])
a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
sfa = a_fp8[1]
if len(sys.argv) > 4 and sys.argv[4] == "mn":
    sfa = dgx.get_mn_major_tma_aligned_tensor(sfa)
dgx.fp8_gemm_nt((a_fp8[0], sfa), b_fp8, d)
torch.cuda.synchronize()
print(check_dense(d, a, b, a_fp8, b_fp8))
