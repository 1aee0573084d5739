"""Quick dense timing against peers in one process (DESIGN.md method); the full tool is `dgx bench`."""

import statistics
import sys

import torch

import dgx
from gpu_gemm_utils import make_dense

SHAPES = [(m, n, k) for m in (64, 128, 4096) for (n, k) in
          ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]
ANCHOR = dict(zip(SHAPES, [129, 201, 154, 271, 180, 148, 230, 394, 277, 501, 328, 272, 1114, 1251, 926, 1463, 1410, 1189]))

flush = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")


def bench(fn, warm=5, reps=30):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def cublas_blockwise(a_fp8, b_fp8, m, n, k):
    from torch.nn.functional import ScalingType, SwizzleType, scaled_mm
    kb = -(-k // 128)
    sfa = a_fp8[1].t().contiguous().t()  # M-major
    pad = (-kb) % 4
    sfb = torch.nn.functional.pad(b_fp8[1], (0, pad)) if pad else b_fp8[1]
    def run():
        return scaled_mm(a_fp8[0], b_fp8[0].t(), sfa, ScalingType.BlockWise1x128, sfb.contiguous(), ScalingType.BlockWise128x128,
                         output_dtype=torch.bfloat16)
    return run


rows = []
for (m, n, k) in SHAPES:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    t = bench(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d))
    flops = 2 * m * n * k
    try:
        t_cb = bench(cublas_blockwise(a_fp8, b_fp8, m, n, k))
    except Exception as exc:
        t_cb = float("nan"); print("cublas:", exc, file=sys.stderr)
    t_bf = bench(lambda: a @ b.T)
    c = dgx.heuristics.choose_dense(m, n, k, dgx.get_num_sms()).config
    tf = flops / t / 1e6
    rows.append((m, n, k, c.block_m, c.block_n, c.stages, t, tf, ANCHOR[(m, n, k)], tf / ANCHOR[(m, n, k)], flops / t_cb / 1e6, flops / t_bf / 1e6))
print(f"{'M':>5} {'N':>6} {'K':>6} {'cfg':>12} {'us':>8} {'TFLOPS':>7} {'DG':>6} {'xDG':>5} {'cuBLASLt':>8} {'bf16':>6}")
for r in rows:
    print(f"{r[0]:>5} {r[1]:>6} {r[2]:>6} {f'{r[3]}x{r[4]}s{r[5]}':>12} {r[6]:>8.1f} {r[7]:>7.0f} {r[8]:>6} {r[9]:>5.2f} {r[10]:>8.0f} {r[11]:>6.0f}")
import math
print("geomean x DeepGEMM:", math.exp(sum(math.log(r[9]) for r in rows) / len(rows)))
