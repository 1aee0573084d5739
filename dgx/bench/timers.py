"""The benchmark's GPU timers by name (``dgx bench --timer``): ``events`` (the default) and ``kernel``.

``events``: :func:`~dgx.bench.timing.time_gpu`, CUDA events around each call. ``kernel``:
:func:`~dgx.bench.kernel_timer.time_kernels`, the kernel-only time through ``torch.profiler``. Both take
``(fn, flush, warmup, iters)`` and return a :class:`~dgx.bench.timing.Timing`. Pure Python: no torch at import.
"""

from __future__ import annotations

from typing import Callable

from .kernel_timer import time_kernels
from .timing import Timing, time_gpu

EVENTS = "events"
KERNEL = "kernel"
TIMERS = (EVENTS, KERNEL)
"""The timers, by name; ``events`` is the default."""

TIMER_METHOD = {
    EVENTS: "CUDA events around each call (launch gaps included)",
    KERNEL: (
        "kernel-only GPU time per call (CUPTI through torch.profiler: the summed duration of the kernels, copies "
        "and memsets the call launched; launch gaps excluded, as in DeepGEMM's published figures)"
    ),
}
"""How each timer measures, for the reports."""


def check_timer(name: str) -> str:
    """``name`` if it is a timer, else ``ValueError`` naming the choices."""
    if name not in TIMERS:
        raise ValueError(f"unknown timer {name!r}; expected one of {', '.join(TIMERS)}")
    return name


def timer_function(name: str) -> Callable[..., Timing]:
    """The timing function of a timer: ``f(fn, flush, warmup, iters) -> Timing``."""
    return {EVENTS: time_gpu, KERNEL: time_kernels}[check_timer(name)]
