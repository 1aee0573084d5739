"""Exception and warning types of the kernel cache.

``cache`` is a leaf package (stdlib only), so these do not derive from dgx's error types;
dgx catches them where it needs to (e.g. :class:`CacheMissError` becomes its strict-mode error).
"""

from __future__ import annotations

import os


class CacheError(Exception):
    """Base class of every kernel-cache error."""


class CacheSecurityError(CacheError):
    """The cache root is not private to us, so a cubin found there cannot be trusted.

    Attributes:
        root: the refused directory.
        reasons: what is wrong with it, one phrase each.
    """

    def __init__(self, root: str, reasons: list[str], fixes: list[str]):
        self.root = root
        self.reasons = list(reasons)
        super().__init__(
            f"refusing to use {root!r} as the kernel cache: it is {' and '.join(reasons)}. "
            "Whoever can write there can plant a cubin, and someone else's cubin would run on our GPU. "
            f"Fix: {'; '.join(fixes)}."
        )


class CacheReadOnlyError(CacheError):
    """The cache root cannot be written (or created) by us; loading existing kernels still works.

    Attributes:
        root: the cache root.
    """

    def __init__(self, root: str | os.PathLike, what: str):
        self.root = os.fspath(root)
        super().__init__(
            f"kernel cache root {self.root!r} {what}. Make it writable (chmod u+w), or set DGX_CACHE_DIR to a "
            "directory you can write"
        )


class CacheMissError(CacheError):
    """A kernel is not in the cache and building it was not allowed (``allow_build=False``).

    Attributes:
        key: the missing kernel's cache key.
        root: the cache root that was searched.
    """

    def __init__(self, key: str, root: str | os.PathLike | None = None):
        self.key = key
        self.root = None if root is None else os.fspath(root)
        where = f" at {self.root}" if self.root else ""
        super().__init__(f"kernel {key} is not in the kernel cache{where} and building it is not allowed")


class BundleError(CacheError):
    """A kernel bundle was refused; nothing from it was imported.

    Attributes:
        path: the bundle's path.
        reason: what was wrong with it.
    """

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"refusing to import kernel bundle {self.path}: {reason}; nothing was imported")


class CacheCorruptionWarning(UserWarning):
    """A cache entry failed verification; it was removed (and is rebuilt when next needed)."""
