"""Small fp8_gemm_nt runs for compute-sanitizer: one per config family (1 or 2 math warpgroups, no
cluster, 2-CTA clusters sharing A or B, BLOCK_N with two B-scale blocks per tile)."""

import torch

import dgx
from dgx.kernels.fp8_gemm import GemmConfig
from dgx.heuristics import max_stages
from gpu_gemm_utils import check_dense, make_dense

FAMILIES = [
    (65, 256, 576, 64, 16, 0),
    (129, 576, 576, 128, 128, 1),
    (300, 288, 320, 128, 144, 2),
    (257, 136, 256, 256, 64, 1),
]
for m, n, k, bm, bn, pair in FAMILIES:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    cfg = GemmConfig(n, k, bm, bn, min(max_stages(bm, bn), 4), pair=pair)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    print("ok", cfg.kernel_name)
