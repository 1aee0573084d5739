"""DeepGEMM's ``deep_gemm.testing.bench``: timing helpers for its tests, on dgx's kernels.

``bench_kineto`` profiles like DeepGEMM's (a CUDA-activity torch profiler, ``num_tests`` calls, each after an L2
flush) and returns the mean time per launch of the kernels whose name contains the given string. dgx's kernels have
dgx's names (``dgx_fp8_gemm_nt...``): a name DeepGEMM gives its own kernels that matches nothing here
(``fp8_wgrad_gemm``, ``pack_fp32_into_ue8m0``) is timed as the dgx kernels the call launched or, when none ran, as
the whole call with CUDA events; with several names only the first falls back, the others read 0. With
``DG_USE_NVIDIA_TOOLS=1`` (under Nsight or compute-sanitizer) it profiles nothing and returns 1 per name, as
DeepGEMM's does.
"""

from __future__ import annotations

import os
import sys

__all__ = ["bench", "empty_suppress", "suppress_stdout_stderr", "bench_kineto"]

# Calls per bench_kineto when set (DeepGEMM's test runner's --bench-tests): the tests' own counts otherwise.
num_tests_override: int | None = None

_flush: list = []


def _l2_flush() -> None:
    import torch

    if not _flush:
        _flush.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))  # well above a Hopper L2 (50 MB)
    _flush[0].zero_()


def bench(fn, num_warmups: int = 5, num_tests: int = 10, high_precision: bool = False) -> float:
    """Mean seconds per call of fn over num_tests calls after num_warmups (CUDA events, one L2 flush first; with
    high_precision a large matmul first, so the launches queue behind it)."""
    import torch

    torch.cuda.synchronize()
    _l2_flush()
    for _ in range(num_warmups):
        fn()
    if high_precision:
        x = torch.randn((8192, 8192), dtype=torch.float, device="cuda")
        x @ x
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(num_tests):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / num_tests


class empty_suppress:  # noqa: N801 - DeepGEMM's name
    """A context manager that does nothing (bench_kineto's stand-in for suppress_stdout_stderr)."""

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return None


class suppress_stdout_stderr:  # noqa: N801 - DeepGEMM's name
    """Silences stdout and stderr, Python's and the process's file descriptors 1 and 2 (so C++ prints too), inside
    the block."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self._devnull = os.open(os.devnull, os.O_WRONLY)
        self._saved = [(fd, os.dup(fd)) for fd in (1, 2)]
        for fd, _ in self._saved:
            os.dup2(self._devnull, fd)
        self._streams = (sys.stdout, sys.stderr)
        self._null = open(os.devnull, "w")  # noqa: SIM115 - closed in __exit__
        sys.stdout = sys.stderr = self._null
        return self

    def __exit__(self, *_):
        sys.stdout, sys.stderr = self._streams
        for fd, saved in self._saved:
            os.dup2(saved, fd)
            os.close(saved)
        os.close(self._devnull)
        self._null.close()
        return None


def _device_us(event) -> float:
    """Microseconds of GPU time of a profiler row (a kernel's: its total over its launches)."""
    names = ("device_time_total", "self_device_time_total") if hasattr(event, "device_time_total") else (
        "cuda_time_total", "self_cuda_time_total")
    return max(float(getattr(event, name, 0.0) or 0.0) for name in names)


def bench_kineto(fn, kernel_names, num_tests: int = 30, suppress_kineto_output: bool = False, trace_path=None,
                 flush_l2: bool = True, with_multiple_kernels: bool = False, barrier=None):
    """Mean seconds per launch of the kernels whose names contain each of `kernel_names` (a str, or a tuple: then
    a tuple of times), over num_tests calls of fn profiled with torch's CUDA-activity profiler. See the module for
    names that match nothing. `with_multiple_kernels` is accepted: rows of one name are always summed here."""
    from ...env import deep_gemm_use_nvidia_tools

    if not isinstance(kernel_names, (str, tuple)):
        raise TypeError(f"kernel_names: expected a str or a tuple of str; got {type(kernel_names).__name__}")
    if deep_gemm_use_nvidia_tools():
        return (1,) * len(kernel_names) if isinstance(kernel_names, tuple) else 1
    import torch
    from torch.profiler import ProfilerActivity, profile

    names = (kernel_names,) if isinstance(kernel_names, str) else kernel_names
    num_tests = num_tests_override or num_tests
    fn()  # compiles and loads what it needs outside the profile
    torch.cuda.synchronize()
    quiet = suppress_stdout_stderr if suppress_kineto_output else empty_suppress
    with quiet():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(num_tests):
                if flush_l2:
                    _l2_flush()
                if barrier is not None:
                    torch.cuda._sleep(int(2e7))  # a long kernel first, so no rank's launches wait on its CPU
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
