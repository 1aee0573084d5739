"""Programmatic dependent launch (PDL): DeepGEMM's process-wide set_pdl/get_pdl switch, off by default.

Stored here for dgx.deep_gemm; the launch layer reads ``get_pdl()`` to decide whether kernels are launched with
the programmatic-stream-serialization attribute.
"""

from __future__ import annotations

__all__ = ["set_pdl", "get_pdl"]

_enabled = False


def set_pdl(enabled: bool) -> None:
    """Turns programmatic dependent launch on (True) or off (False, the default) for later dgx launches."""
    global _enabled
    _enabled = bool(enabled)


def get_pdl() -> bool:
    """Whether programmatic dependent launch is on (see :func:`set_pdl`)."""
    return _enabled
