"""Runs DeepGEMM's own test files against dgx: ``deep_gemm`` resolves to ``dgx.deep_gemm``.

    python tests/device/run_deep_gemm_tests.py PATH/test_core.py [PATH/test_fp8_fp4.py ...] [--only test_gemm]

Before a test file is imported, a package named ``deep_gemm`` is put into ``sys.modules``: every public name of
``dgx.deep_gemm``, plus what DeepGEMM's test files use beyond the API, written here (not copied): the submodules
``deep_gemm.testing`` (bench_kineto, calc_diff, count_bytes, ...), ``deep_gemm.utils`` (the quantisation and
layout helpers; the FP4 ones raise NotImplementedError, FP4 being sm_100 only) and ``deep_gemm.jit_kernels.utils``
(the 1.x alignment name), the 1.x GEMM names the last pure-Python test file calls (``gemm_fp8_fp8_bf16_nt``, ...,
``get_col_major_tma_aligned_tensor``) and stand-ins for the cuBLASLt wrappers (``cublaslt_gemm_nt`` ..., torch's
``_scaled_mm``, for the tests' speed comparisons only). dgx.deep_gemm itself holds only the API's names.

Each test file's folder goes first on ``sys.path`` (its ``generators`` module), the file is imported under another
name, and the statements of its ``if __name__ == '__main__':`` block run in order (seeds, prints), except that
each call of a ``test_*`` function is run on its own: a failure is printed with its traceback and the next test
runs. A file without such a block has its ``test_*`` functions run in order. The last lines say which tests passed
and failed (``RESULT <file>::<test> PASS|FAIL <seconds>``); the exit status is 1 if any failed.

``bench_kineto`` profiles like DeepGEMM's (a CUDA-activity torch profiler, ``num_tests`` calls, each after an L2
flush; ``--bench-tests N`` overrides the count) and returns the mean time per launch of the kernels whose name
contains the given string. dgx's kernels are named ``dgx_fp8_gemm_nt*``: a name DeepGEMM gives its own kernels that
matches nothing (``fp8_wgrad_gemm``) is timed as dgx's kernels in the call, or, when none ran, as the whole call
with CUDA events; with several names, only the first falls back and the others are 0.

No GPU is touched before a test runs, so the module machinery is checked on the CPU too (tests/test_deep_gemm_shim.py).
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import os
import sys
import time
import traceback
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_BENCH_TESTS: list[int | None] = [None]  # --bench-tests


# --- deep_gemm.testing ------------------------------------------------------------------------------------------


def calc_diff(x, y) -> float:
    """1 - 2 sum(xy) / sum(x^2 + y^2) in float64 (0 for two all-zero tensors)."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if float(denominator) == 0.0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)


def count_bytes(*tensors) -> int:
    """Bytes of every tensor given (nested tuples and lists walked, None skipped)."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def assert_bitwise_equal(x, y, label: str = "") -> None:
    """Raises AssertionError naming the first differing byte unless x and y hold the same bytes."""
    import torch

    if x.shape != y.shape or x.dtype != y.dtype:
        raise AssertionError(f"{label}: shapes/dtypes differ: {tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}")
    xb, yb = x.contiguous().view(torch.uint8).flatten(), y.contiguous().view(torch.uint8).flatten()
    if not torch.equal(xb, yb):
        first = int((xb != yb).nonzero()[0])
        raise AssertionError(f"{label}: bitwise mismatch, first at byte {first} of {xb.numel()} "
                             f"({int((xb != yb).sum())} bytes differ)")


def get_arch_major() -> int:
    import torch

    return torch.cuda.get_device_capability()[0]


def test_filter(condition):
    """Runs the decorated function only when condition() holds (else prints that it was filtered)."""

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if condition():
                return fn(*args, **kwargs)
            print(f"{fn.__name__}: filtered by {condition}")
            return None

        return wrapper

    return decorator


def ignore_env(name: str, condition):
    """Runs the decorated function with environment variable `name` removed while condition() holds."""

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not condition():
                return fn(*args, **kwargs)
            saved = os.environ.pop(name, None)
            try:
                return fn(*args, **kwargs)
            finally:
                if saved is not None:
                    os.environ[name] = saved

        return wrapper

    return decorator


_flush: list = []


def _l2_flush():
    import torch

    if not _flush:
        _flush.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))  # well above a Hopper L2
    _flush[0].zero_()


def bench(fn, num_warmups: int = 5, num_tests: int = 10, high_precision: bool = False) -> float:
    """Mean seconds per call of fn over num_tests calls after num_warmups (CUDA events, one L2 flush first)."""
    import torch

    torch.cuda.synchronize()
    _l2_flush()
    for _ in range(num_warmups):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(num_tests):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / num_tests


def _device_us(event) -> float:
    """Microseconds of GPU time of a profiler row (a kernel's: its total over its launches)."""
    names = ("device_time_total", "self_device_time_total") if hasattr(event, "device_time_total") else (
        "cuda_time_total", "self_cuda_time_total")
    return max(float(getattr(event, name, 0.0) or 0.0) for name in names)


def bench_kineto(fn, kernel_names, num_tests: int = 30, suppress_kineto_output: bool = False, trace_path=None,
                 flush_l2: bool = True, with_multiple_kernels: bool = False, barrier=None):
    """Mean seconds per launch of the kernels whose names contain each of `kernel_names` (a str, or a tuple: then
    a tuple of times), over num_tests calls of fn profiled with torch's CUDA-activity profiler. See the module for
    names that match nothing."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if int(os.environ.get("DG_USE_NVIDIA_TOOLS", "0")):
        return (1,) * len(kernel_names) if isinstance(kernel_names, tuple) else 1
    names = (kernel_names,) if isinstance(kernel_names, str) else tuple(kernel_names)
    num_tests = _BENCH_TESTS[0] or num_tests
    fn()  # compiles and loads what it needs outside the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(num_tests):
            if flush_l2:
                _l2_flush()
            if barrier is not None:
                barrier()
            fn()
        torch.cuda.synchronize()
    if trace_path is not None:
        prof.export_chrome_trace(trace_path)
    kernels = [(e.key, _device_us(e), e.count) for e in prof.key_averages()]

    def mean_of(match) -> float | None:
        total = count = 0
        for key, us, n in kernels:
            if match(key):
                total, count = total + us, count + n
        return total / count / 1e6 if count else None

    times = [mean_of(lambda key, name=name: name in key) for name in names]
    if all(t is None for t in times):
        fallback = mean_of(lambda key: key.startswith("dgx_"))
        if fallback is None:
            fallback = bench(fn, num_warmups=1, num_tests=num_tests)
        times[0] = fallback
    times = [t or 0.0 for t in times]
    return tuple(times) if isinstance(kernel_names, tuple) else times[0]


# --- stand-ins outside DeepGEMM's FP8 API ---------------------------------------------------------------------------


def cublaslt_gemm_nt(a, b, d, c=None) -> None:
    """d = a . b^T (+ c) for FP8 a [M, K], b [N, K] with unit scales through torch._scaled_mm (cuBLASLt), or a plain
    float matmul where _scaled_mm refuses the shape: a reference for the tests' speed comparisons only."""
    import torch

    one = torch.ones((), dtype=torch.float32, device=a.device)
    try:
        out = torch._scaled_mm(a.contiguous(), b.contiguous().t(), scale_a=one, scale_b=one, out_dtype=d.dtype)
    except Exception:  # noqa: BLE001 - shapes _scaled_mm does not take (M = 1, ...)
        out = (a.float() @ b.float().t()).to(d.dtype)
    if c is not None:
        out = out + c
    d.copy_(out)


def cublaslt_gemm_nn(a, b, d, c=None) -> None:
    cublaslt_gemm_nt(a, b.t(), d, c)


def cublaslt_gemm_tn(a, b, d, c=None) -> None:
    cublaslt_gemm_nt(a.t(), b.t(), d, c)


def cublaslt_gemm_tt(a, b, d, c=None) -> None:
    cublaslt_gemm_nt(a.t(), b, d, c)


def _fp4_only(name: str):
    """A name their test files import for FP4 cases, which sm_90 never reaches: calling it says why it cannot run."""

    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"{name}: FP4 operands are sm_100 only (DeepGEMM too); dgx runs FP8 on sm_90")

    unavailable.__name__ = name
    return unavailable


# --- the package ----------------------------------------------------------------------------------------------------

_TESTING_NAMES = ("calc_diff", "count_bytes", "assert_bitwise_equal", "get_arch_major", "test_filter", "ignore_env",
                  "bench", "bench_kineto")
_UTILS_FROM_API = ("ceil_div", "align", "ceil_to_ue8m0", "pack_ue8m0_to_int", "unpack_ue8m0_from_int",
                   "per_token_cast_to_fp8", "per_channel_cast_to_fp8", "per_block_cast_to_fp8",
                   "per_custom_dims_cast_to_fp8", "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor",
                   "get_mn_major_tma_aligned_packed_ue8m0_tensor", "set_mk_alignment_for_contiguous_layout",
                   "get_mk_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout",
                   "get_k_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout")
_FP4_UTILS = ("per_token_cast_to_fp4", "transpose_packed_fp4", "cast_back_from_fp4")


def build_modules() -> dict[str, types.ModuleType]:
    """The ``deep_gemm`` package and its submodules, by module name (not yet in sys.modules)."""
    import dgx
    import dgx.deep_gemm as api

    here = globals()  # this module's functions (it may run as __main__ or be loaded from its path)
    pkg = types.ModuleType("deep_gemm", "dgx.deep_gemm under DeepGEMM's name, for DeepGEMM's test files")
    pkg.__path__ = [os.path.dirname(dgx.__file__)]  # a package (the tests print it), holding no files of its own
    pkg.__version__ = f"dgx {dgx.__version__}"
    for name in api.__all__:
        setattr(pkg, name, getattr(api, name))

    testing = types.ModuleType("deep_gemm.testing")
    for name in _TESTING_NAMES:
        setattr(testing, name, here[name])
    utils = types.ModuleType("deep_gemm.utils")
    for name in _UTILS_FROM_API:
        setattr(utils, name, getattr(api, name))
    for name in _FP4_UTILS:
        setattr(utils, name, _fp4_only(name))
    jit_kernels = types.ModuleType("deep_gemm.jit_kernels")
    jit_utils = types.ModuleType("deep_gemm.jit_kernels.utils")
    jit_utils.get_m_alignment_for_contiguous_layout = api.get_mk_alignment_for_contiguous_layout
    jit_kernels.utils = jit_utils

    pkg.testing, pkg.utils, pkg.jit_kernels = testing, utils, jit_kernels
    # What the test files take from the package itself beyond the API: testing and utils names (DeepGEMM's
    # __init__ imports them with *), the 1.x names of the last pure-Python version and the cuBLASLt stand-ins.
    for name in _TESTING_NAMES:
        setattr(pkg, name, here[name])
    for name in _FP4_UTILS:
        setattr(pkg, name, getattr(utils, name))
    pkg.gemm_fp8_fp8_bf16_nt = dgx.gemm_fp8_fp8_bf16_nt
    pkg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous = dgx.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous
    pkg.m_grouped_gemm_fp8_fp8_bf16_nt_masked = dgx.m_grouped_gemm_fp8_fp8_bf16_nt_masked
    pkg.wgrad_gemm_fp8_fp8_fp32_nt = dgx.wgrad_gemm_fp8_fp8_fp32_nt
    pkg.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt = dgx.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt
    pkg.get_col_major_tma_aligned_tensor = api.get_mn_major_tma_aligned_tensor
    for name in ("cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt"):
        setattr(pkg, name, here[name])
    return {"deep_gemm": pkg, "deep_gemm.testing": testing, "deep_gemm.utils": utils,
            "deep_gemm.jit_kernels": jit_kernels, "deep_gemm.jit_kernels.utils": jit_utils}


def install() -> types.ModuleType:
    """Puts the ``deep_gemm`` package into sys.modules (replacing any there) and returns it."""
    modules = build_modules()
    sys.modules.update(modules)
    return modules["deep_gemm"]


# --- running a test file ----------------------------------------------------------------------------------------------


def _main_block(tree: ast.Module) -> list[ast.stmt] | None:
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
                and node.test.left.id == "__name__" and len(node.test.comparators) == 1
                and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value == "__main__"):
            return node.body
    return None


def _test_call(stmt: ast.stmt) -> str | None:
    """The name of the test_* function a statement calls with no arguments, if that is all it does."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
        if stmt.value.func.id.startswith("test_") and not stmt.value.args and not stmt.value.keywords:
            return stmt.value.func.id
    return None


def run_file(path: str, only: set[str] | None = None) -> list[tuple[str, str, float]]:
    """Imports the test file at `path` with deep_gemm installed and runs it as described in the module; returns
    (test, "PASS" or "FAIL", seconds) per test run."""
    path = os.path.abspath(path)
    label = os.path.basename(path)
    install()
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    for stale in ("generators",):  # a previous file's helper module of the same name
        sys.modules.pop(stale, None)
    results: list[tuple[str, str, float]] = []
    t0 = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location(f"_deep_gemm_test_{len(sys.modules)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except BaseException:  # noqa: BLE001 - reported, then the next file
        traceback.print_exc()
        return [("<import>", "FAIL", time.perf_counter() - t0)]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    body = _main_block(tree)
    if body is None:
        body = [ast.parse(f"{name}()").body[0] for name in vars(module) if name.startswith("test_")
                and callable(getattr(module, name))]
    for stmt in body:
        name = _test_call(stmt)
        if name is None:
            code = compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec")
            exec(code, vars(module))  # setup: seeds, flags, prints
            continue
        if only and name not in only:
            continue
        print(f"=== {label}::{name}", flush=True)
        t = time.perf_counter()
        try:
            getattr(module, name)()
            status = "PASS"
        except BaseException as exc:  # noqa: BLE001 - reported, then the next test
            if isinstance(exc, KeyboardInterrupt):
                raise
            traceback.print_exc()
            status = "FAIL"
        seconds = time.perf_counter() - t
        print(f"=== {label}::{name} {status} ({seconds:.1f} s)", flush=True)
        results.append((name, status, seconds))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="DeepGEMM test files (test_core.py, test_fp8_fp4.py, ...)")
    parser.add_argument("--only", action="append", default=None, help="run only this test function (repeatable)")
    parser.add_argument("--bench-tests", type=int, default=None, help="calls per bench_kineto (default: the test's)")
    args = parser.parse_args(argv)
    _BENCH_TESTS[0] = args.bench_tests
    summary = []
    for path in args.files:
        for name, status, seconds in run_file(path, set(args.only) if args.only else None):
            summary.append((os.path.basename(path), name, status, seconds))
    print()
    for label, name, status, seconds in summary:
        print(f"RESULT {label}::{name} {status} {seconds:.1f}")
    failed = [s for s in summary if s[2] != "PASS"]
    print(f"deep_gemm tests on dgx: {len(summary) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or not summary else 0


if __name__ == "__main__":
    sys.exit(main())
