"""Host cost of the torch-operator layer: CPU time per call of dgx.fp8_gemm_nt against dgx.torch_ops.fp8_gemm_nt
and torch.ops.dgx.fp8_gemm_nt (64 x 2112 x 7168, the same cached tensors every call), then the dispatcher's cost
with no-op bodies on this host. Usage: python torch_ops_overhead.py [calls]"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils, torch_op_timing
import dgx  # noqa: E402
import dgx.torch_ops  # noqa: E402
from gpu_gemm_utils import make_dense  # noqa: E402
from torch_op_timing import dispatch_overhead_us, wrapper_overhead_us  # noqa: E402

CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = 5


def cpu_us_per_call(fn, calls: int, chunk: int = 200) -> float:
    """CPU time of `calls` calls in µs per call: timed in chunks of `chunk` back-to-back calls with the GPU drained
    between chunks (untimed), so the launch queue never fills and blocks the host on the GPU."""
    total = 0.0
    for start in range(0, calls, chunk):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(min(chunk, calls - start)):
            fn()
        total += time.perf_counter() - t0
    torch.cuda.synchronize()
    return total / calls * 1e6


a, b, a_fp8, b_fp8, d = make_dense(64, 2112, 7168)
(A, SFA), (B, SFB) = a_fp8, b_fp8
paths = {
    "dgx.fp8_gemm_nt": lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d),
    "dgx.torch_ops.fp8_gemm_nt": lambda: dgx.torch_ops.fp8_gemm_nt(a_fp8, b_fp8, d),
    "torch.ops.dgx.fp8_gemm_nt": lambda: torch.ops.dgx.fp8_gemm_nt(A, SFA, B, SFB, d),
}
for fn in paths.values():  # compile, load and fill the fast-path cache
    fn()
torch.cuda.synchronize()
best = {name: float("inf") for name in paths}
for _ in range(ROUNDS):  # alternating rounds, the best of each
    for name, fn in paths.items():
        best[name] = min(best[name], cpu_us_per_call(fn, CALLS))
base = best["dgx.fp8_gemm_nt"]
print(f"fp8_gemm_nt 64x2112x7168, CPU time per call (best of {ROUNDS} rounds of {CALLS} calls):")
for name, us in best.items():
    print(f"  {name}: {us:.2f} us" + ("" if name == "dgx.fp8_gemm_nt" else f" (+{us - base:.2f} us)"))
print("dispatcher with no-op bodies, this host:")
for name, us in {**dispatch_overhead_us(), **wrapper_overhead_us()}.items():
    print(f"  {name}: {us:.2f} us/call")
