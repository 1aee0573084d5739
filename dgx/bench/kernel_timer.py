"""Kernel-only GPU time per call: CUPTI through ``torch.profiler``, launch gaps excluded.

:func:`time_kernels` runs the calls the way :func:`~dgx.bench.timing.time_gpu` does (``flush()`` before
each call, warm-ups first) under ``torch.profiler.profile(activities=[ProfilerActivity.CUDA])`` and takes,
per call, the summed device duration of the GPU work that call launched: its kernels, and its copies and
memsets (a device-to-device ``copy_`` is a copy, not a kernel). A call that launches several kernels (a peer
that converts its scales, then runs its GEMM; a per-group loop) counts all of them, back to back: the idle
time between them is not counted. Work on other streams is summed too, so overlapping kernels would count
twice; every implementation the benchmark times runs on the current stream.

How the calls are told apart: each timed call is fenced on the GPU timeline by two tiny delimiter kernels
(``torch.cuda._sleep``, whose kernel is ``spin_kernel``) launched on the same stream right before and
right after it::

    flush()  [spin_kernel]  fn()  [spin_kernel]   flush()  [spin_kernel]  fn()  [spin_kernel]  ...

Call *i*'s work is every device activity that starts between the *2i*-th and the *(2i+1)*-th delimiter in
device time. The flush runs before the opening delimiter, so it is never counted, whatever its kernel is
called. Nothing here depends on CUPTI linking a kernel to the API call that launched it (dgx launches
through the driver API, whose launches the profiler does not always record) nor on aligning CPU and GPU
clocks: only the order of the device activities on one stream, which is the order they were launched in.

:func:`group_calls` is that grouping as a pure function of ``(name, start_us, duration_us)`` records, so
it is tested without a GPU. torch is imported inside :func:`time_kernels` only.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, Iterable, Sequence

from .timing import ITERS, WARMUP, Timing

DELIMITER_KERNEL = "spin_kernel"
"""Name (substring) of the delimiter kernel: ``torch.cuda._sleep``'s ``at::cuda::spin_kernel``."""
DELIMITER_CYCLES = 1000
"""Clock cycles each delimiter spins for (under a microsecond)."""


class KernelTimerError(RuntimeError):
    """The profiler did not record what the kernel timer needs (no CUPTI, lost records, a call without GPU work)."""


@dataclasses.dataclass(frozen=True)
class DeviceEvent:
    """One GPU activity (kernel, copy or memset) as the profiler recorded it."""

    name: str
    start_us: float
    duration_us: float


@dataclasses.dataclass(frozen=True)
class CallKernels:
    """The GPU work of one timed call."""

    total_us: float  # summed durations
    names: tuple[str, ...]  # in device order


def _as_event(e: DeviceEvent | Sequence) -> DeviceEvent:
    if isinstance(e, DeviceEvent):
        return e
    name, start, duration = e[0], e[1], e[2]
    return DeviceEvent(str(name), float(start), float(duration))


def group_calls(
    events: Iterable[DeviceEvent | Sequence], calls: int, delimiter: str = DELIMITER_KERNEL
) -> list[CallKernels]:
    """Per call, the summed duration of the device activities between its two delimiters.

    ``events``: every GPU activity the profiler recorded on the device (any order), as :class:`DeviceEvent`
    or ``(name, start_us, duration_us)``. There must be exactly ``2 · calls`` delimiters (an activity whose
    name contains ``delimiter``): the *2i*-th and *(2i+1)*-th in start order fence call *i*. Activities
    outside every pair (the L2 flush before each call) are not counted, the delimiters neither.

    Raises :class:`KernelTimerError` naming what was expected when nothing was recorded, when the
    delimiters do not add up, or when a call has no GPU activity between its delimiters.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    evs = sorted((_as_event(e) for e in events), key=lambda e: e.start_us)
    expected = (
        f"{2 * calls} delimiter kernels ({delimiter}) fencing {calls} timed call(s), and each call's own kernels, "
        "copies or memsets between them"
    )
    if not evs:
        raise KernelTimerError(
            f"torch.profiler recorded no CUDA kernel, copy or memset at all (expected {expected}); is CUPTI "
            "available to torch.profiler here (a CUDA build of torch, CUPTI found, no other profiler attached)? "
            "`--timer events` needs no profiler"
        )
    fences = [i for i, e in enumerate(evs) if delimiter in e.name]
    if len(fences) != 2 * calls:
        seen = sorted({e.name for e in evs if delimiter not in e.name})
        shown = ", ".join(seen[:6]) + (f", … ({len(seen)} names)" if len(seen) > 6 else "")
        raise KernelTimerError(
            f"torch.profiler recorded {len(fences)} delimiter kernels ({delimiter}), expected {expected}; "
            f"{len(evs) - len(fences)} other activities recorded ({shown or 'none'}): records lost, or the "
            "work ran elsewhere"
        )
    out: list[CallKernels] = []
    for c in range(calls):
        lo, hi = fences[2 * c], fences[2 * c + 1]
        inside = evs[lo + 1 : hi]
        if not inside:
            raise KernelTimerError(
                f"timed call {c} of {calls}: no CUDA kernel, copy or memset between its delimiters (expected "
                f"{expected}); did the call launch its work on another device, or none?"
            )
        out.append(CallKernels(sum(e.duration_us for e in inside), tuple(e.name for e in inside)))
    return out


def _type_name(device_type) -> str:
    return str(getattr(device_type, "name", device_type)).rsplit(".", 1)[-1].upper()


def device_events(prof, device_index: int | None = None) -> list[DeviceEvent]:
    """The GPU activities (kernels, copies, memsets) of a finished ``torch.profiler.profile`` on one device.

    GPU-side user annotations (``record_function`` ranges mirrored on the device) are not work and are left out.
    """
    out = []
    for e in prof.events():
        if _type_name(getattr(e, "device_type", "")) != "CUDA":
            continue
        if getattr(e, "is_user_annotation", False):
            continue
        if device_index is not None and getattr(e, "device_index", device_index) != device_index:
            continue
        start, end = e.time_range.start, e.time_range.end
        out.append(DeviceEvent(e.name, float(start), float(end - start)))
    return out


def time_kernels(
    fn: Callable[[], object], flush: Callable[[], None] | None, warmup: int = WARMUP, iters: int = ITERS
) -> Timing:
    """Kernel-only time of ``fn`` on the current stream: ``flush()`` before each call, ``warmup`` calls
    unprofiled, then ``iters`` profiled calls; per call the summed duration of its GPU work (see the module).

    Returns a :class:`~dgx.bench.timing.Timing` like :func:`~dgx.bench.timing.time_gpu` (median, min, max, samples in µs) whose ``kernels`` are the
    names of one call's GPU activities. Raises :class:`KernelTimerError` when the profiler records no GPU
    activity (CUPTI unavailable) or the calls cannot be told apart.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        raise KernelTimerError(
            f"the kernel timer fences each call with torch.cuda._sleep ({DELIMITER_KERNEL}), which this torch "
            f"({torch.__version__}) lacks; use --timer events"
        )
    for _ in range(warmup):
        if flush is not None:
            flush()
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            if flush is not None:
                flush()
            sleep(DELIMITER_CYCLES)
            fn()
            sleep(DELIMITER_CYCLES)
        torch.cuda.synchronize()
    calls = group_calls(device_events(prof, torch.cuda.current_device()), iters)
    samples = [c.total_us for c in calls]
    return Timing(statistics.median(samples), min(samples), max(samples), samples, list(calls[0].names))
