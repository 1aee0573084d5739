"""Run tasks in spawned worker processes, at most ``jobs`` at a time, stoppable by Ctrl-C or SIGTERM.

:func:`run_tasks` hands a task to a worker only when one is free, so nothing waits in a queue that an
interrupt could not take back. On the first SIGINT or SIGTERM it stops handing out tasks and either waits
for the running ones (``finish_running=True``: their results still count) or kills the workers at once;
a second signal kills them. Either way every worker is reaped before it returns: no process is left
behind (the pool's resource tracker exits once the workers have).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from . import interrupts

#: How often the waiting loop looks at the interrupt state (seconds).
POLL_SECONDS = 0.1


@dataclass
class PoolOutcome:
    """How a run ended: which tasks never started, which were killed while running, and the signal."""

    signum: int | None = None
    not_started: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        return self.signum is not None


def _init_worker(initializer: Callable[[], None] | None) -> None:
    interrupts.worker_init()
    if initializer is not None:
        initializer()


def run_tasks(
    fn: Callable[..., Any],
    tasks: Sequence[tuple],
    *,
    jobs: int,
    on_done: Callable[[int, Any, BaseException | None], None],
    state: interrupts.InterruptState,
    finish_running: bool = True,
    on_interrupt: Callable[[int], None] | None = None,
    initializer: Callable[[], None] | None = None,
    order: Sequence[int] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> PoolOutcome:
    """Run ``fn(*tasks[i])`` for every i in up to ``jobs`` spawned processes.

    Tasks are handed out in ``order`` (a permutation of their indices; default: as given), each when a
    worker is free; ``on_start(i)`` is called as task i is handed out. ``on_done(i, result, error)`` is
    called in this process as each task ends (``error`` is the exception the task raised, or the pool's
    when its worker died). ``not_started`` and ``killed`` of the outcome are task indices. ``state`` is the
    :func:`dgx.interrupts.guard` the caller holds; ``on_interrupt(running)`` is called once, at the
    first interrupt, with the number of tasks still running (to say what happens next).
    """
    outcome = PoolOutcome()
    if not tasks:
        return outcome
    sequence = list(range(len(tasks))) if order is None else list(order)
    if sorted(sequence) != list(range(len(tasks))):
        raise ValueError(f"order: expected a permutation of the {len(tasks)} task indices, got {order!r}")
    workers = max(1, min(jobs, len(tasks)))
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(initializer,))
    inflight: dict[Future, int] = {}
    next_task = 0
    announced = False
    try:
        while next_task < len(tasks) or inflight:
            while next_task < len(tasks) and len(inflight) < workers and not state.requested:
                index = sequence[next_task]
                if on_start is not None:
                    on_start(index)
                with interrupts.spawning():
                    future = pool.submit(fn, *tasks[index])
                inflight[future] = index
                next_task += 1
            if state.requested:
                if outcome.signum is None:
                    outcome.signum = state.signum
                    outcome.not_started = sorted(sequence[next_task:])
                    next_task = len(tasks)
                if state.count >= 2 or not finish_running:
                    break
                if not announced:
                    announced = True
                    if on_interrupt is not None:
                        on_interrupt(len(inflight))
            if not inflight:
                break
            done, _ = wait(list(inflight), timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            for future in done:
                index = inflight.pop(future)
                try:
                    result, error = future.result(), None
                except BaseException as exc:  # noqa: BLE001 - the task's own error, or a dead worker's
                    result, error = None, exc
                on_done(index, result, error)
    finally:
        if inflight:
            interrupts.kill_workers(pool)
            outcome.killed = sorted(inflight.values())
        pool.shutdown(wait=True, cancel_futures=True)
    return outcome

