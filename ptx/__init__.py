"""Device code of dgx: CUDA headers (.cuh) with inline-PTX wrappers and kernels.

This package holds no Python logic beyond locating the headers: ``headers()`` returns every header's
name (relative to this folder) and content, which is what the compiler hands NVRTC and what the kernel
cache hashes (names are relative, so the key does not depend on where the package is installed).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["include_dir", "headers"]


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
