"""Runs one dense GEMM a few times, for a profiler: python ncu_one.py M N K [BLOCK_M BLOCK_N [PAIR]]."""

import sys

import torch

import dgx
from dgx.heuristics import max_stages
from dgx.kernels.fp8_gemm import GemmConfig
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import make_dense

m, n, k = (int(x) for x in sys.argv[1:4])
config = None
if len(sys.argv) > 5:
    bm, bn = int(sys.argv[4]), int(sys.argv[5])
    pair = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    config = GemmConfig(n, k, bm, bn, max_stages(bm, bn), pair=pair)
a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
for _ in range(4):
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
torch.cuda.synchronize()
