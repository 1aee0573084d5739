"""GPU timing with the method of docs/METHOD.md, and host (CPU) cost per call.

Two GPU timers, chosen by name (``dgx bench --timer``, :mod:`dgx.bench.timers`), with the same protocol:
each call preceded by zeroing a 1 GB buffer (cold L2), 5 warm-ups, 30 timed calls; median (min and max
kept), in µs.

* ``events`` (the default), :func:`time_gpu`: CUDA events recorded right before and after each call, so a
  sample also holds what passes on the GPU between the two events besides the call's kernels: the gaps
  between launches (the GPU idle while the host issues the next kernel) and the events' own cost, which
  matter below about 20 µs.
* ``kernel``, :func:`~dgx.bench.kernel_timer.time_kernels`: the kernel-only duration, CUPTI through
  ``torch.profiler``: per call, the summed device duration of the kernels (and copies and memsets) the call
  launched, launch gaps excluded; several kernels in one call are summed. This is the clock DeepGEMM
  publishes its figures on.

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
HOST_CHUNK = 100


@dataclasses.dataclass
class Timing:
    median_us: float
    min_us: float
    max_us: float
    samples_us: list[float]
    kernels: list[str] = dataclasses.field(default_factory=list)  # kernel timer: one call's GPU activities


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


@dataclasses.dataclass
class HostTiming:
    cpu_us: float  # per call: the smaller of the held and plain figures
    plain_us: float  # per call, plain back-to-back loop
    wall_us: float  # per call, plain loop including the synchronisation after it
    held: bool  # cpu_us was measured with the GPU held busy
    saturated: bool  # some chunk took as long as the hold: the launch queue may have filled


HOST_REPEAT = 3
"""Runs of :func:`host_cost` per figure in :func:`pattern_cost`, the least kept."""


@dataclasses.dataclass
class PatternTiming:
    """:func:`pattern_cost`'s figures, µs per call, the pattern's own tensor building (``prep_us``) taken off."""

    cpu_us: float
    plain_us: float
    wall_us: float
    prep_us: float | None  # the least-cpu run of the prep loop; None where the pattern builds nothing
    held: bool
    saturated: bool


def pattern_cost(step: Callable[[int], object], prep: Callable[[int], object] | None, calls: int = HOST_CALLS,
                 repeat: int = HOST_REPEAT, start: int = 1000) -> PatternTiming:
    """The host cost of one call pattern (dgx.bench.host_patterns): :func:`host_cost` of ``step(i)`` over
    successive i from ``start``, less that of ``prep(i)`` (the tensors the pattern builds before the call) where
    there is one; each the least (by cpu_us) of ``repeat`` runs, as other processes only add to a run.

    The one method of ``dgx bench``'s host section and of tests/device/host_cost.py: the same hold, warm-up,
    repeats and subtraction, so their figures differ only by what the process holds and runs besides (the
    benchmark has its peers' libraries loaded and has run the kernel suites before)."""
    import itertools

    def best(fn: Callable[[int], object]) -> HostTiming:
        counter = itertools.count(start)
        return min((host_cost(lambda: fn(next(counter)), calls) for _ in range(max(1, repeat))),
                   key=lambda h: h.cpu_us)

    h = best(step)
    if prep is None:
        return PatternTiming(h.cpu_us, h.plain_us, h.wall_us, None, h.held, h.saturated)
    hp = best(prep)
    return PatternTiming(h.cpu_us - hp.cpu_us, h.plain_us - hp.plain_us, h.wall_us - hp.wall_us, hp.cpu_us, h.held,
                         h.saturated)


def host_cost(
    fn: Callable[[], object],
    calls: int = HOST_CALLS,
    warmup: int = HOST_WARMUP,
    chunk: int = HOST_CHUNK,
) -> HostTiming:
    """CPU µs per call of ``fn`` (cached kernel, same tensors), ``perf_counter`` around the calls, no
    synchronisation inside a loop, one after.

    Two figures. *plain*: ``calls`` back-to-back calls. If the kernel is shorter than the host path
    this is the host cost; if it is longer, the host waits on the launch queue and this measures the
    GPU. *held*: the same calls in chunks of ``chunk``, each chunk issued while the GPU is held busy
    by ``torch.cuda._sleep`` for longer than the chunk takes to issue, so the host never waits on
    the GPU (a chunk that takes as long as the hold is flagged ``saturated``). The reported
    ``cpu_us`` is the smaller of the two: plain can only overstate the host cost, and launching
    behind a held GPU was seen to cost a few µs more per call for some launch paths.
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
    plain = (t1 - t0) / calls * 1e6
    wall = (t2 - t0) / calls * 1e6

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return HostTiming(plain, plain, wall, False, False)
    hold_s = max(0.02, 3 * plain * 1e-6 * chunk)
    try:
        mhz = torch.cuda.get_device_properties(torch.cuda.current_device()).clock_rate / 1e3
    except Exception:  # noqa: BLE001 - older torch: assume Hopper's boost clock
        mhz = 1980.0
    cycles = int(hold_s * mhz * 1e6) or int(hold_s * 1.98e9)
    total = 0.0
    done = 0
    saturated = False
    while done < calls:
        n = min(chunk, calls - done)
        sleep(cycles)
        c0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - c0
        torch.cuda.synchronize()
        total += dt
        done += n
        if dt >= 0.8 * hold_s:
            saturated = True
    held = total / calls * 1e6
    # A plain loop can only overstate the host cost (by waiting on the GPU); issuing behind a held
    # GPU was seen to cost a few µs more per launch for some calls. Report the smaller.
    return HostTiming(min(held, plain), plain, wall, True, saturated and held <= plain)
