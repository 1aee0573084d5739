"""Exceptions raised by sass_tools (a leaf package: it cannot use dgx's error types)."""

from __future__ import annotations


class SassToolsError(Exception):
    """Base class of every sass_tools error."""


class CubinError(SassToolsError, ValueError):
    """The bytes are not a cubin this package can read, or a request does not fit the cubin."""


class NvdisasmError(SassToolsError, RuntimeError):
    """nvdisasm failed on a cubin."""


class NvdisasmNotFoundError(NvdisasmError, FileNotFoundError):
    """nvdisasm is not installed."""
