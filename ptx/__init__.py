"""Device code of dgx: CUDA headers (.cuh) with inline-PTX wrappers and kernels.

This package holds no Python logic beyond locating the headers: ``headers()`` returns every header's
name (relative to this folder) and content; ``included(source)`` the ones a kernel's source includes,
directly or through other headers, which is what the compiler hands NVRTC and what the kernel cache hashes
(names are relative, so the key does not depend on where the package is installed; a header no kernel
includes changes no key).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

__all__ = ["include_dir", "headers", "included"]

# `#include "name"` (quoted: dgx's own headers; device code includes no system header).
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def include_dir() -> Path:
    """The folder that holds the .cuh headers."""
    return Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def _read_headers(folder: str) -> tuple[tuple[str, bytes], ...]:
    root = Path(folder)
    return tuple(sorted((p.name, p.read_bytes()) for p in root.glob("*.cuh")))


def headers() -> dict[str, bytes]:
    """Every header as {relative name: content}, read once per process."""
    return dict(_read_headers(str(include_dir())))


def included(source: str, available: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """The headers of `available` (default :func:`headers`) that `source` includes, directly or through other
    headers, as {name: content} in name order. A quoted include that names no available header is left to the
    compiler to report."""
    if available is None:
        available = headers()
    found: dict[str, bytes] = {}
    pending = _INCLUDE.findall(source)
    while pending:
        name = pending.pop()
        if name in found or name not in available:
            continue
        content = available[name]
        found[name] = content
        pending.extend(_INCLUDE.findall(content.decode("utf-8", "replace")))
    return dict(sorted(found.items()))
