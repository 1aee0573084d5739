"""What makes this install's kernel keys what they are, and how a cache or bundle built elsewhere differs.

A kernel's cache key holds the NVRTC version, dgx's headers and compile options and the arch
(dgx/jit.py: ``key_inputs``). Two installs whose NVRTC differs (``pip install 'dgx[torch]'`` may pull
another NVRTC than ``pip install dgx``) never share a kernel: each key differs. :func:`dgx.jit.key_fingerprint`
is a digest of every key input except the kernel's own source, so two installs that print the same
fingerprint (``dgx info``) build and look up the same keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

#: The ``compiler`` manifest field of a kernel built by this install looks like this (see jit.build_cubin).
COMPILER_PREFIX = "NVRTC "


def nvrtc_version() -> str:
    """NVRTC's ``major.minor`` as the cache key holds it."""
    from . import compiler

    major, minor = compiler.nvrtc_version()
    return f"{major}.{minor}"


def compiler_label() -> str:
    """The manifest's ``compiler`` of kernels this install builds, e.g. ``NVRTC 13.0``."""
    return COMPILER_PREFIX + nvrtc_version()


def foreign_compilers(compilers: Iterable[str | None]) -> Counter:
    """How many kernels each compiler other than this install's NVRTC built (``None``: unknown)."""
    mine = compiler_label()
    return Counter(c for c in compilers if c != mine)


def mismatch_note(foreign: Mapping[str | None, int], total: int, where: str) -> str:
    """One sentence on kernels of ``where`` built by another NVRTC, or "" if none."""
    if not foreign:
        return ""
    parts = ", ".join(f"{n} by {c or 'an unrecorded compiler'}" for c, n in sorted(foreign.items(), key=str))
    unusable = sum(foreign.values())
    return (
        f"{unusable} of the {total} kernels in {where} were built by another compiler than this install's "
        f"{compiler_label()} ({parts}): their keys never match here, so they are unusable on this install "
        "(build and serve with the same dgx, NVRTC and arch; compare `dgx info` on both machines)"
    )


def strict_mismatch_note() -> str:
    """For a strict-mode miss: the cache's kernels that another NVRTC built, if any, as a sentence."""
    from . import env
    from .cache import KernelCache

    root = env.cache_root()
    if not root.is_dir():
        return ""
    entries = KernelCache(root).entries()
    note = mismatch_note(foreign_compilers(e.compiler for e in entries), len(entries), f"the cache at {root}")
    return f". {note}" if note else ""
