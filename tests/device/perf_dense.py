"""Quick dense timing against peers in one process (docs/METHOD.md); the full tool is `dgx bench`.

Also sweeps a few configs per shape (each checked correct first) to calibrate the heuristic."""

import math
import sys

import torch

import dgx
from dgx.heuristics import choose_dense, max_stages
from dgx.kernels.fp8_gemm import GemmConfig
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import bench_cold_l2, check_dense, make_dense

SHAPES = [(m, n, k) for m in (64, 128, 4096) for (n, k) in
          ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]
ANCHOR = dict(zip(SHAPES, [129, 201, 154, 271, 180, 148, 230, 394, 277, 501, 328, 272, 1114, 1251, 926, 1463, 1410, 1189]))
SWEEP = [(128, 128, 0), (128, 128, 1), (128, 128, 2), (128, 160, 1), (128, 160, 2), (256, 80, 1), (128, 144, 2)]
SWEEP_SMALL = [(64, 16, 0), (64, 16, 1), (64, 32, 1), (64, 64, 1), (64, 128, 0), (64, 128, 1)]

bench = bench_cold_l2


def cublas_blockwise(a_fp8, b_fp8, m, n, k):
    from torch.nn.functional import ScalingType, scaled_mm
    kb = -(-k // 128)
    sfa = a_fp8[1].t().contiguous().t()  # M-major
    pad = (-kb) % 4
    # cuBLASLt wants B's scales as (K/128, N/128), with the K/128 extent padded to a multiple of 4.
    padded = torch.nn.functional.pad(b_fp8[1], (0, pad)) if pad else b_fp8[1]
    variants = [padded.t(), padded.t()[:kb], b_fp8[1].t()]
    errors = []
    for sfb in variants:
        def run(sfb=sfb):
            return scaled_mm(a_fp8[0], b_fp8[0].t(), sfa, ScalingType.BlockWise1x128, sfb, ScalingType.BlockWise128x128,
                             output_dtype=torch.bfloat16)
        try:
            run()
            return run
        except Exception as exc:
            errors.append(str(exc)[:200])
    raise RuntimeError("; ".join(errors))


rows, sweep_rows = [], []
for (m, n, k) in SHAPES:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    flops = 2 * m * n * k
    c = choose_dense(m, n, k, dgx.get_num_sms()).config
    t = bench(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d))
    try:
        run = cublas_blockwise(a_fp8, b_fp8, m, n, k)
        out = run()
        ok = dgx.torch_utils.calc_diff(out, a.float() @ b.float().T) < 1e-3
        t_cb = bench(run) if ok else float("nan")
        if not ok:
            print("cublas blockwise: wrong result", file=sys.stderr)
    except Exception as exc:
        t_cb = float("nan"); print("cublas:", exc, file=sys.stderr)
    t_bf = bench(lambda: a @ b.T)
    tf = flops / t / 1e6
    rows.append((m, n, k, f"{c.block_m}x{c.block_n}s{c.stages}p{c.pair}", t, tf, ANCHOR[(m, n, k)], tf / ANCHOR[(m, n, k)], flops / t_cb / 1e6, flops / t_bf / 1e6))
    for bm, bn, pair in (SWEEP if m == 4096 else SWEEP_SMALL):
        try:
            cfg = GemmConfig(n, k, bm, bn, max_stages(bm, bn), pair=pair)
        except ValueError:
            continue
        d.fill_(float("nan"))
        try:
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            check_dense(d, a, b, a_fp8, b_fp8)
            ts = bench(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg))
            grid = [p.launcher.shape.grid[0] for key, p in dgx.launch._plans.items() if p.config == cfg][0]
            sweep_rows.append((m, n, k, f"{bm}x{bn}s{cfg.stages}p{pair}g{grid}", ts, flops / ts / 1e6))
        except Exception as exc:
            sweep_rows.append((m, n, k, f"{bm}x{bn}p{pair}", float("nan"), float("nan")))
            print("sweep", m, n, k, bm, bn, pair, "FAILED:", str(exc)[:300], file=sys.stderr)
    del a, b, a_fp8, b_fp8, d

print("sweep:")
for r in sweep_rows:
    print(f"  {r[0]:>5} {r[1]:>6} {r[2]:>6} {r[3]:>18} {r[4]:>8.1f} us {r[5]:>6.0f} TFLOPS")
print(f"{'M':>5} {'N':>6} {'K':>6} {'cfg':>14} {'us':>8} {'TFLOPS':>7} {'DG':>6} {'xDG':>5} {'cuBLASLt':>8} {'bf16':>6}")
for r in rows:
    print(f"{r[0]:>5} {r[1]:>6} {r[2]:>6} {r[3]:>18} {r[4]:>8.1f} {r[5]:>7.0f} {r[6]:>6} {r[7]:>5.2f} {r[8]:>8.0f} {r[9]:>6.0f}")
print("geomean x DeepGEMM:", math.exp(sum(math.log(r[7]) for r in rows) / len(rows)))
