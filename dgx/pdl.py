"""Programmatic dependent launch (PDL): a process-wide switch, off by default (DeepGEMM's set_pdl/get_pdl).

With PDL on, every dgx kernel is launched with the programmatic-stream-serialization attribute, so on Hopper it
may start while the kernel before it on the stream is still running: its prologue (barrier init, tensor-map
prefetch) overlaps that kernel's tail, and it waits (``griddepcontrol.wait``, ptx/pdl.cuh) for the predecessor's
completion and memory flush before it reads or writes global memory. Results are bitwise the same either way; the
gain is a few microseconds per kernel in chains of short kernels, such as a decode step under a CUDA graph.

The switch is read at every launch (dgx.runtime.Launcher), so a change applies from the next call on; CUDA graphs
captured earlier keep the edges they were captured with. It is one flag for the process, for every thread and
device, as in DeepGEMM. A kernel whose code has no griddepcontrol.wait (checked when it is loaded) is launched
without the attribute whatever the switch says, so a kernel that was not written for PDL never starts early.
"""

from __future__ import annotations

__all__ = ["set_pdl", "get_pdl"]

# Read directly by dgx.runtime.Launcher.launch (a module attribute costs less than a call per launch).
_enabled = False


def set_pdl(enabled: bool) -> None:
    """Launches every later dgx kernel with programmatic dependent launch (True) or without it (False, the default)."""
    global _enabled
    _enabled = bool(enabled)


def get_pdl() -> bool:
    """Whether dgx kernels are launched with programmatic dependent launch (see :func:`set_pdl`)."""
    return _enabled
