"""Ctrl-C and SIGTERM for commands that run worker processes (``dgx warmup``).

The parent decides what an interrupt means; workers never see one:

* :func:`guard` records SIGINT and SIGTERM in the main process instead of raising, so the parent can
  stop handing out work, let the running jobs finish (first signal) or kill them (second signal), and
  exit with every worker reaped.
* :func:`spawning` blocks both signals while worker processes are started: a child inherits the blocked
  mask through fork and exec, so a Ctrl-C that reaches the whole process group while a worker is still
  starting stays pending until :func:`worker_init` has set the worker to ignore it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The user interrupted the work (SIGINT or SIGTERM); ``signum`` says which."""

    def __init__(self, signum: int, message: str = ""):
        self.signum = signum
        super().__init__(message or f"interrupted by {signal_name(signum)}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass
class InterruptState:
    """What :func:`guard` has seen: how many interrupts, and the first one's signal."""

    count: int = 0
    signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.count > 0

    def interrupted(self) -> Interrupted:
        return Interrupted(self.signum or signal.SIGINT)


@contextmanager
def guard() -> Iterator[InterruptState]:
    """Record SIGINT and SIGTERM while the block runs (main thread only; elsewhere nothing changes).

    The previous handlers come back on exit; an interrupt seen by the guard is not re-raised: the
    caller reads the returned state and acts on it.
    """
    state = InterruptState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def record(signum, frame):  # noqa: ARG001 - signal handler signature
        state.count += 1
        if state.signum is None:
            state.signum = signum

    previous = {sig: signal.signal(sig, record) for sig in SIGNALS}
    try:
        yield state
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def spawning() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread while the block starts worker processes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def worker_init() -> None:
    """First thing a worker process does: ignore SIGINT and SIGTERM (the parent stops or kills it)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def kill_workers(pool) -> int:
    """SIGKILL every worker process of a ProcessPoolExecutor; return how many were alive."""
    processes = list(getattr(pool, "_processes", {}).values())
    killed = 0
    for proc in processes:
        if proc.is_alive():
            proc.kill()
            killed += 1
    for proc in processes:
        proc.join(timeout=5)
    return killed
