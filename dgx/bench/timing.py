"""GPU timing with the method of DESIGN.md, and host (CPU) cost per call.

* :func:`time_gpu`: CUDA events around each call, each call preceded by zeroing a 1 GB buffer (cold
  L2), 5 warm-ups, 30 timed calls; median (min and max kept).
* :func:`host_cost`: CPU µs per call over 1000 calls of a cached kernel on the same tensors,
  ``time.perf_counter`` around the loop, no synchronisation inside it (one after).

torch is imported inside the functions, so importing this module needs no GPU and no torch.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable

WARMUP = 5
ITERS = 30
FLUSH_BYTES = 1 << 30
HOST_CALLS = 1000
HOST_WARMUP = 20


@dataclasses.dataclass
class Timing:
    median_us: float
    min_us: float
    max_us: float
    samples_us: list[float]


class L2Flusher:
    """A 1 GB device buffer whose zeroing evicts the 50 MB L2 before each timed call."""

    def __init__(self, nbytes: int = FLUSH_BYTES, device: str = "cuda"):
        import torch

        self.buf = torch.empty(nbytes, dtype=torch.int8, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


def time_gpu(
    fn: Callable[[], object],
    flush: Callable[[], None] | None,
    warmup: int = WARMUP,
    iters: int = ITERS,
) -> Timing:
    """Time ``fn`` on the current stream: events around each call, ``flush()`` before each call."""
    import torch

    for _ in range(warmup):
        if flush is not None:
            flush()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if flush is not None:
            flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return Timing(statistics.median(samples), min(samples), max(samples), samples)


def host_cost(fn: Callable[[], object], calls: int = HOST_CALLS, warmup: int = HOST_WARMUP) -> tuple[float, float]:
    """``(cpu_us_per_call, wall_us_per_call)``.

    cpu: ``perf_counter`` around ``calls`` back-to-back calls, no synchronisation inside the loop.
    wall: the same loop up to the synchronisation after it. If cpu is close to wall, the GPU may have
    been the bottleneck (the launch queue filled and the host waited): the report flags it.
    """
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6
