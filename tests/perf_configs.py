"""Device experiment: time explicit configs (block sizes the validator may not allow yet) under a header
variant, against the current headers, in one process. Configs are checked correct before timing.

    python perf_configs.py VARIANT BMxBN[,BMxBN...] [M,N,K ...]    (from tests/; VARIANT: ../.dev/fp8_gemm_<VARIANT>.cuh)
"""

import statistics
import sys
from pathlib import Path

import torch

import dgx
import ptx
from dgx import gemm
from dgx.kernels import fp8_gemm as family
from gpu_gemm_utils import bench_cold_l2, check_dense, make_dense

variant = sys.argv[1]
blocks = [tuple(int(x) for x in b.split("x")) for b in sys.argv[2].split(",")]
shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[3:]] or [(4096, 4096, 7168), (4096, 7168, 16384)]
BASE = ptx.headers()
VARIANT = {**BASE, "fp8_gemm.cuh": (Path(__file__).resolve().parent.parent / ".dev" / f"fp8_gemm_{variant}.cuh").read_bytes()}
family.validate_blocks = lambda *a, **k: ""  # let the experiment reach tiles the validator does not offer yet
bench = bench_cold_l2


def use(headers):
    ptx.headers = lambda: headers
    for cache in (gemm._plans, gemm._params, gemm._fast):
        cache.clear()


for m, n, k in shapes:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    runs = [("current", BASE, (128, 128))] + [(variant, VARIANT, blk) for blk in blocks]
    for name, headers, (bm, bn) in runs:
        per_stage = family.smem_bytes(bm, bn, 1) - bm * bn * 2
        cfg = family.GemmConfig(n, k, bm, bn, min((family.SMEM_LIMIT - bm * bn * 2) // per_stage, 16))
        use(headers)
        try:
            d.fill_(float("nan"))
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            check_dense(d, a, b, a_fp8, b_fp8)
            ts = [bench(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)) for _ in range(3)]
            t = statistics.median(ts)
            print(f"{m}x{n}x{k} {name:>8} {bm}x{bn}s{cfg.stages}: {t:8.1f} us {2 * m * n * k / t / 1e6:6.0f} TFLOPS  runs {[round(x, 1) for x in ts]}", flush=True)
        except Exception as exc:
            print(f"{m}x{n}x{k} {name:>8} {bm}x{bn}: FAILED {str(exc)[:200]}", flush=True)
    del a, b, a_fp8, b_fp8, d
