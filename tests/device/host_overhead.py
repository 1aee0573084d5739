"""Host-side costs on the device: smoke kernel cold compile / warm load, CPU time per call."""

import os
import shutil
import tempfile
import time

import torch

root = tempfile.mkdtemp(prefix="dgx-host-")
os.environ["DGX_CACHE_DIR"] = os.path.join(root, "cache")

from dgx import jit  # noqa: E402
from dgx.kernels.smoke import smoke  # noqa: E402
import dgx  # noqa: E402
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import make_dense  # noqa: E402

src = torch.randn(64, 64, device="cuda")
dst = torch.empty_like(src)
torch.cuda.synchronize()
t0 = time.perf_counter(); smoke(src, dst); torch.cuda.synchronize(); cold = time.perf_counter() - t0
stats = jit.jit_stats()
# Warm load: a new process would find the cubin on disk; emulate by dropping the in-process caches.
jit._loaded.clear(); jit._caches.clear()
t0 = time.perf_counter(); smoke(src, dst); torch.cuda.synchronize(); warm = time.perf_counter() - t0
print(f"smoke: cold (compile + store + load + launch) {cold * 1e3:.1f} ms (NVRTC {stats['compile_seconds'] * 1e3:.1f} ms); "
      f"warm (disk load + launch) {warm * 1e3:.2f} ms")


def per_call_us(fn, n=1000):
    fn(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


print(f"smoke: CPU time per call {per_call_us(lambda: smoke(src, dst)):.1f} us (full Python path, 1000 calls)")
a, b, a_fp8, b_fp8, d = make_dense(64, 2112, 7168)
print(f"fp8_gemm_nt 64x2112x7168: CPU time per call {per_call_us(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d)):.1f} us (1000 calls)")
a, b, a_fp8, b_fp8, d = make_dense(4096, 7168, 2048)
print(f"fp8_gemm_nt 4096x7168x2048: CPU time per call {per_call_us(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d), 200):.1f} us (200 calls)")
for n, k in ((7168, 2048), (2112, 7168), (24576, 1536)):
    cfg = dgx.heuristics.choose_dense(4096, n, k, 132).config
    t0 = time.perf_counter(); jit.build_cubin(cfg.render(), "sm_90a"); dt = time.perf_counter() - t0
    print(f"NVRTC compile {cfg.kernel_name}: {dt:.2f} s")
shutil.rmtree(root)
