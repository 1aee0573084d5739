"""Which exceptions are the user's to fix (a setting, a file, a size), and the one line that says so.

The ``dgx`` command prints these as ``Error: <line>`` with exit status 1 instead of a traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno

# OS errors that come from the user's files and settings (permissions, full or read-only disks, missing
# or misplaced paths), not from dgx.
_USER_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOENT, errno.ENOTDIR,
     errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP}
)


def _os_message(exc: OSError) -> str:
    where = exc.filename if exc.filename is not None else ""
    text = exc.strerror or str(exc)
    line = f"{text}: {where}" if where else text
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        line += " (make it writable, or set DGX_CACHE_DIR to a directory you can write if it is the kernel cache)"
    return line


def user_message(exc: BaseException) -> str | None:
    """The one-line message for an error the user can fix, or None if ``exc`` is not one."""
    from .cache import CacheError

    from .errors import ConfigError
    from .problems import ArchError, ProblemError

    if isinstance(exc, CacheError):
        text = str(exc)
        if "DGX_CACHE_DIR" not in text and "bundle" not in text:
            text += " (the kernel cache root is DGX_CACHE_DIR, else $XDG_CACHE_HOME/dgx or ~/.cache/dgx)"
        return text
    if isinstance(exc, (ConfigError, ProblemError, ArchError)):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in _USER_ERRNOS:
        return _os_message(exc)
    return None
