"""The on-disk kernel store: one directory per key, atomic writes, per-key locks, verified loads.

Layout under the root (mode 0700, owned by us)::

    <root>/<key[:2]>/<key>/kernel.cubin
    <root>/<key[:2]>/<key>/manifest.json
    <root>/tmp/      entries being written, imports being staged (same filesystem as the entries)
    <root>/locks/    <key>.lock, one per key ever built (empty files, flock'ed; never deleted, since
                     deleting a lock file another process holds would break mutual exclusion)

An entry only ever appears whole: it is written into a fresh directory under ``tmp/``, its files
and the directory are fsync'ed, and the directory is renamed into place. Every load checks the
manifest's key against the directory and the cubin's size and sha256 against the manifest; an
entry that fails is removed (under its key's lock, after a second look), a
:class:`CacheCorruptionWarning` is issued, and the kernel is rebuilt when next needed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CacheCorruptionWarning, CacheError, CacheMissError, CacheReadOnlyError, CacheSecurityError

FORMAT_VERSION = 1
CUBIN_NAME = "kernel.cubin"
MANIFEST_NAME = "manifest.json"
ENTRY_FILES = frozenset({CUBIN_NAME, MANIFEST_NAME})
TMP_DIR = "tmp"
LOCK_DIR = "locks"
#: Leftovers under tmp/ older than this (a crashed writer) are removed by the constructor, verify() and clear().
STALE_TMP_SECONDS = 3600.0
MAX_MANIFEST_BYTES = 1 << 20

# Fields the store writes itself; manifest_extra may not set them.
_RESERVED = frozenset({"format", "key", "cubin_sha256", "cubin_size", "created", "extra"})
# Fields of manifest_extra that are lifted to the top level of the manifest; the rest go under "extra".
_PROMOTED = {"name": str, "inputs": Mapping, "compiler": str}
_HEX = frozenset("0123456789abcdef")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def is_key(value: object) -> bool:
    """True if ``value`` is a cache key: 64 lowercase hex digits."""
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def check_key(key: object) -> str:
    if not is_key(key):
        raise ValueError(f"not a kernel cache key (64 lowercase hex digits from compute_key): {key!r}")
    return key  # type: ignore[return-value]


@dataclass(frozen=True)
class EntryInfo:
    """One cache entry as its manifest describes it (the cubin is not re-hashed by entries())."""

    key: str
    size: int
    created: float
    name: str | None
    compiler: str | None
    inputs: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :meth:`KernelCache.verify`: ``corrupt`` keys were removed when ``removed`` is True."""

    ok: tuple[str, ...]
    corrupt: tuple[str, ...]
    reasons: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    removed: bool = True


@dataclass(frozen=True)
class CacheStats:
    """Counters of one KernelCache object (this process only).

    ``misses`` counts lookups that found the key neither in memory nor on disk at first look;
    a process that then waited for another's build and loaded it counts a ``hits_disk`` too.
    """

    hits_memory: int = 0
    hits_disk: int = 0
    misses: int = 0
    builds: int = 0
    corrupt: int = 0


class EntryCorrupt(Exception):
    """Internal: an entry failed verification (``reason`` says how)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def parse_manifest(key: str, raw: bytes) -> dict[str, Any]:
    """Parse and check a manifest read from the entry directory ``key``; raise EntryCorrupt if bad."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise EntryCorrupt(f"{MANIFEST_NAME} is {len(raw)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit")

    def no_constants(name: str) -> object:
        raise ValueError(f"non-standard JSON constant {name}")

    try:
        manifest = json.loads(raw.decode("utf-8"), parse_constant=no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EntryCorrupt(f"{MANIFEST_NAME} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise EntryCorrupt(f"{MANIFEST_NAME} holds a {type(manifest).__name__}, not an object")
    fmt = manifest.get("format")
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise EntryCorrupt(f"{MANIFEST_NAME} has format {fmt!r}; this version reads format {FORMAT_VERSION}")
    if manifest.get("key") != key:
        raise EntryCorrupt(f"{MANIFEST_NAME} names key {manifest.get('key')!r}, not its directory's {key}")
    sha = manifest.get("cubin_sha256")
    if not is_key(sha):
        raise EntryCorrupt(f"{MANIFEST_NAME} has no valid cubin_sha256 ({sha!r})")
    size = manifest.get("cubin_size")
    if type(size) is not int or size < 0:
        raise EntryCorrupt(f"{MANIFEST_NAME} has no valid cubin_size ({size!r})")
    created = manifest.get("created")
    if type(created) not in (int, float):
        raise EntryCorrupt(f"{MANIFEST_NAME} has no valid created time ({created!r})")
    return manifest


def check_cubin(manifest: Mapping[str, Any], size: int, sha256: str) -> None:
    """Raise EntryCorrupt unless a cubin of ``size`` bytes and digest ``sha256`` is the one ``manifest`` describes."""
    if size != manifest["cubin_size"]:
        raise EntryCorrupt(
            f"{CUBIN_NAME} is {size} bytes, the manifest says {manifest['cubin_size']} (truncated or altered)"
        )
    if sha256 != manifest["cubin_sha256"]:
        raise EntryCorrupt(f"{CUBIN_NAME} has sha256 {sha256}, the manifest says {manifest['cubin_sha256']} (altered)")


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")


def make_manifest(key: str, cubin: bytes, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Build the manifest of a new entry. ``name``, ``inputs`` and ``compiler`` of ``extra`` go to the top level."""
    extra = dict(extra or {})
    clash = sorted(_RESERVED & extra.keys())
    if clash:
        raise ValueError(f"manifest_extra may not set {clash}: the cache writes those fields itself")
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "key": key,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "cubin_size": len(cubin),
        "created": time.time(),
    }
    for name, kind in _PROMOTED.items():
        if name in extra:
            value = extra.pop(name)
            if not isinstance(value, kind):
                raise TypeError(f"manifest_extra[{name!r}] must be a {kind.__name__}, got {type(value).__name__}")
            manifest[name] = dict(value) if kind is Mapping else value
    manifest["extra"] = extra
    try:
        manifest_bytes(manifest)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"manifest_extra must be JSON-serializable (str keys, no NaN): {exc}") from None
    return manifest


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems do not fsync directories
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_file(directory: str, name: str, data: bytes) -> None:
    """Create ``directory/name`` (must not exist), write ``data``, fsync."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (os.write may take fewer bytes than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_at(dir_fd: int, name: str) -> bytes:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise EntryCorrupt(f"{name} is missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EntryCorrupt(f"{name} is a symlink") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EntryCorrupt(f"{name} is not a regular file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _remove_tree(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _make_parents(path: str) -> None:
    """Create the parents of the cache root; a parent that cannot be made is a CacheError naming it."""
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CacheError(
            f"kernel cache root {path!r} cannot be created: a component of {parent!r} is a file, not a directory"
        ) from None
    except PermissionError:
        raise CacheReadOnlyError(path, f"cannot be created (no permission to create {parent!r})") from None
    except OSError as exc:  # a virtual or read-only filesystem (/proc, /sys), a name too long, ...
        raise CacheError(
            f"kernel cache root {path!r} cannot be created: creating {parent!r} failed: {exc.strerror or exc}"
        ) from None


#: Other names a cache root may hold besides its own layout: the dumps dgx writes under it for DeepGEMM's
#: DG_JIT_DUMP_* variables, the plan records of dgx warmup (plans/), and the lost+found of a filesystem mounted as
#: the root.
ROOT_EXTRAS = frozenset({"dumps", "plans", "lost+found"})


def _is_layout_name(name: str) -> bool:
    """True for a name a kernel cache root may hold: tmp/, locks/, a two-hex-digit shard directory, ROOT_EXTRAS."""
    return name in (TMP_DIR, LOCK_DIR) or name in ROOT_EXTRAS or (len(name) == 2 and _HEX.issuperset(name))


def _check_is_cache(root: str) -> None:
    """Raise CacheError if ``root`` holds anything a kernel cache does not (it is some other directory: creating
    tmp/ and locks/ in it, or clearing it, would mix the cache into someone's files)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return  # unreadable: the permission checks and the loads say what is wrong
    foreign = [n for n in names if not _is_layout_name(n)]
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise CacheError(
            f"kernel cache root {root!r} is not a kernel cache: it holds {shown}, and a cache holds only tmp/, "
            "locks/, two-hex-digit shard directories, dumps/, plans/ and lost+found; use an empty or new directory"
        )


def _check_root(root: str) -> None:
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(
            f"kernel cache root {root!r} exists and is not a directory: set DGX_CACHE_DIR to a directory "
            "(or move the file away)"
        )
    uid = os.geteuid()
    reasons: list[str] = []
    fixes: list[str] = []
    shared = bool(st.st_mode & stat.S_ISVTX) and bool(st.st_mode & 0o002)  # /tmp and the like
    if st.st_uid != uid:
        reasons.append(f"owned by uid {st.st_uid}, not by us (uid {uid})")
        fixes.append("use a cache directory you own")
    if shared:
        reasons.append(f"a directory shared by every user (mode {stat.S_IMODE(st.st_mode):o})")
        fixes = [f"use a directory of your own inside it, e.g. {os.path.join(root, 'dgx-cache')}"]
    elif st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        reasons.append(f"writable by {who} (mode {stat.S_IMODE(st.st_mode):o})")
        fixes.append(f"chmod 700 {root}" if st.st_uid == uid else "use a cache directory you own")
    if reasons:
        raise CacheSecurityError(root, reasons, list(dict.fromkeys(fixes)))


class KernelCache:
    """Kernels (cubin bytes) stored on disk under ``root`` with an in-process dict in front.

    ``root`` is created with mode 0700 (parents with the default mode). A root that is writable
    by group or others, or owned by another uid, is refused with :class:`CacheSecurityError`; one that
    holds anything but a cache's own layout (another directory's files) with :class:`CacheError`.
    A symlinked root is resolved once, here. Safe to share between threads and processes.
    """

    def __init__(self, root: str | os.PathLike):
        given = os.path.abspath(os.fspath(root))
        _make_parents(given)
        try:
            os.mkdir(given, 0o700)
        except FileExistsError:
            pass
        except PermissionError:
            raise CacheReadOnlyError(given, "cannot be created (no permission to write its parent)") from None
        except OSError as exc:
            if exc.errno == errno.EROFS:
                raise CacheReadOnlyError(given, "cannot be created (its parent is on a read-only filesystem)") from None
            raise CacheError(f"kernel cache root {given!r} cannot be created: {exc.strerror or exc}") from None
        else:
            os.chmod(given, 0o700)  # the umask may have taken bits away; never adds any
        real = os.path.realpath(given)
        _check_root(real)
        _check_is_cache(real)
        self._root = real
        self._tmp = os.path.join(real, TMP_DIR)
        self._locks = os.path.join(real, LOCK_DIR)
        self._writable = os.access(real, os.W_OK | os.X_OK)
        if self._writable:
            self._ensure_layout()
            self._sweep_tmp(STALE_TMP_SECONDS)
        self._mem: dict[str, bytes] = {}
        self._mutex = threading.Lock()
        self._counts = dict.fromkeys(("hits_memory", "hits_disk", "misses", "builds", "corrupt"), 0)
        self._held = threading.local()

    # -- public API ---------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return Path(self._root)

    @property
    def read_only(self) -> bool:
        """True if we cannot write under the root: loads work, builds, imports and removals do not."""
        return not self._writable

    def require_writable(self, action: str = "write to it") -> None:
        """Raise CacheReadOnlyError (saying what could not be done) unless the root is writable."""
        if not self._writable:
            raise CacheReadOnlyError(self._root, f"is not writable by uid {os.geteuid()}, so dgx cannot {action}")

    @property
    def stats(self) -> CacheStats:
        with self._mutex:
            return CacheStats(**self._counts)

    def entry_dir(self, key: str) -> Path:
        """Where the entry of ``key`` lives (whether or not it exists)."""
        return Path(self._entry_path(check_key(key)))

    def get_or_build(
        self, key: str, build: Callable[[], tuple[bytes, Mapping[str, Any]]], *, allow_build: bool = True
    ) -> bytes:
        """Return the cubin of ``key``, building and storing it first if no valid entry exists.

        ``build()`` returns ``(cubin, manifest_extra)``; ``manifest_extra`` is a JSON-able dict whose
        ``name`` (str), ``inputs`` (a summary of the key inputs) and ``compiler`` (str) become
        top-level manifest fields, the rest goes under ``extra``. Processes (and threads) that need the same
        new key at once build it once: one holds the key's lock and builds, the others wait and load.
        If ``build`` raises, nothing is stored and the exception propagates. With
        ``allow_build=False`` a missing kernel raises :class:`CacheMissError`.
        """
        check_key(key)
        cubin = self._lookup(key, count=True)
        if cubin is not None:
            return cubin
        if not allow_build:
            raise CacheMissError(key, self._root)
        self.require_writable(f"store the new kernel {key[:16]}")
        with self._key_lock(key):
            found = self._load_locked(key)
            if found is not None:  # another process built it while we waited
                cubin = found[0]
                self._count("hits_disk")
            else:
                cubin, extra = self._check_build_result(key, build())
                cubin = self._publish(key, cubin, make_manifest(key, cubin, extra))
                self._count("builds")
        self._remember(key, cubin)
        return cubin

    def load(self, key: str) -> bytes | None:
        """The cubin of ``key`` from memory or a verified disk entry, or None."""
        return self._lookup(check_key(key), count=True)

    def contains(self, key: str) -> bool:
        """True if a valid entry of ``key`` exists (in memory or verified on disk)."""
        return self._lookup(check_key(key), count=False) is not None

    def store(self, key: str, cubin: bytes, manifest_extra: Mapping[str, Any] | None = None) -> None:
        """Store ``cubin`` under ``key``. If a valid entry exists already, it is kept (first writer wins)."""
        check_key(key)
        cubin, extra = self._check_build_result(key, (cubin, manifest_extra))
        self.require_writable(f"store the kernel {key[:16]}")
        with self._key_lock(key):
            found = self._load_locked(key)
            stored = found[0] if found is not None else self._publish(key, cubin, make_manifest(key, cubin, extra))
        self._remember(key, stored)

    def manifest(self, key: str) -> dict[str, Any] | None:
        """The manifest of a verified disk entry of ``key``, or None."""
        found = self._disk_entry(check_key(key))
        return None if found is None else found[1]

    def entries(self) -> list[EntryInfo]:
        """Every entry on disk with a readable manifest, sorted by key (cubins are not re-hashed)."""
        out = []
        for key in self._disk_keys():
            try:
                fd = os.open(self._entry_path(key), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC)
            except OSError:
                continue
            try:
                manifest = parse_manifest(key, _read_at(fd, MANIFEST_NAME))
            except (EntryCorrupt, OSError):
                continue
            finally:
                os.close(fd)
            out.append(
                EntryInfo(
                    key=key,
                    size=manifest["cubin_size"],
                    created=float(manifest["created"]),
                    name=manifest.get("name") if isinstance(manifest.get("name"), str) else None,
                    compiler=manifest.get("compiler") if isinstance(manifest.get("compiler"), str) else None,
                    inputs=manifest.get("inputs") if isinstance(manifest.get("inputs"), dict) else {},
                )
            )
        return out

    def verify(self, remove: bool = True) -> VerifyReport:
        """Check every entry on disk; remove the corrupt ones when ``remove`` (no warnings: the report says it)."""
        ok: list[str] = []
        corrupt: list[str] = []
        reasons: dict[str, str] = {}
        remove = remove and self._writable  # a read-only cache is checked, not changed: the report says so
        for key in self._disk_keys():
            try:
                found = self._read_disk(key)
            except EntryCorrupt as exc:
                if not remove:
                    corrupt.append(key)
                    reasons[key] = exc.reason
                    continue
                with self._key_lock(key):  # look again under the lock before removing anything
                    try:
                        found = self._read_disk(key)
                    except EntryCorrupt as again:
                        self._discard(key)
                        self._count("corrupt")
                        corrupt.append(key)
                        reasons[key] = again.reason
                        continue
            if found is not None:
                ok.append(key)
        if remove:
            self._sweep_tmp(STALE_TMP_SECONDS)
        return VerifyReport(ok=tuple(ok), corrupt=tuple(corrupt), reasons=reasons, removed=remove)

    def clear(self) -> int:
        """Remove every entry (and this object's in-memory copies), the lock files no process holds and
        the emptied shard directories; return how many entries were removed."""
        self.require_writable("remove its kernels")
        removed = sum(1 for key in self._disk_keys() if self._discard(key))
        with self._mutex:
            self._mem.clear()
        self._sweep_tmp(STALE_TMP_SECONDS)
        self._remove_idle_locks()
        self._remove_empty_shards()
        return removed

    def remove_abandoned(self, keys: Iterable[str]) -> int:
        """Remove the unfinished files of builds of ``keys`` whose writer is gone (killed mid-write).

        A key's staging directories are removed only while we hold its lock, so a build still running
        elsewhere (which holds the lock) is never touched. Returns how many directories were removed.
        """
        if not self._writable:
            return 0
        removed = 0
        try:
            names = os.listdir(self._tmp)
        except FileNotFoundError:
            return 0
        for key in keys:
            prefix = f"new-{check_key(key)[:16]}-"
            mine = [n for n in names if n.startswith(prefix)]
            if not mine:
                continue
            with self._key_lock(key):
                for name in mine:
                    _remove_tree(os.path.join(self._tmp, name))
                    removed += 1
        return removed

    def __repr__(self) -> str:
        return f"KernelCache({self._root!r})"

    # -- internals (also used by bundle.py) -----------------------------------------------------------

    def _entry_path(self, key: str) -> str:
        return os.path.join(self._root, key[:2], key)

    def _ensure_layout(self) -> None:
        for d in (self._tmp, self._locks):
            os.makedirs(d, mode=0o700, exist_ok=True)

    def _remove_idle_locks(self) -> None:
        """Delete the lock files no process holds. Safe: _key_lock re-checks after locking that its file
        is still the one at the path, so a process that opened a lock file we delete starts over."""
        try:
            names = os.listdir(self._locks)
        except FileNotFoundError:
            return
        for name in names:
            if not (name.endswith(".lock") and is_key(name[:-5])):
                continue
            path = os.path.join(self._locks, name)
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | _O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # someone holds it: keep it
                os.close(fd)
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)

    def _remove_empty_shards(self) -> None:
        try:
            shards = os.listdir(self._root)
        except FileNotFoundError:
            return
        for shard in shards:
            if len(shard) == 2 and _HEX.issuperset(shard):
                try:
                    os.rmdir(os.path.join(self._root, shard))
                except OSError:  # not empty (an entry landed meanwhile), or not a directory
                    pass

    def _count(self, name: str) -> None:
        with self._mutex:
            self._counts[name] += 1

    def _remember(self, key: str, cubin: bytes) -> None:
        with self._mutex:
            self._mem[key] = cubin

    def _disk_keys(self) -> list[str]:
        keys = []
        try:
            shards = os.listdir(self._root)
        except FileNotFoundError:
            return keys
        for shard in shards:
            if len(shard) != 2 or not _HEX.issuperset(shard):
                continue
            try:
                names = os.listdir(os.path.join(self._root, shard))
            except (NotADirectoryError, FileNotFoundError):
                continue
            keys.extend(n for n in names if is_key(n) and n.startswith(shard))
        return sorted(keys)

    def _read_disk(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """The verified entry of ``key``: (cubin, manifest); None if absent; EntryCorrupt if it fails a check."""
        try:
            dfd = os.open(self._entry_path(key), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise EntryCorrupt("the entry is not a directory") from None
            raise
        try:  # both files through one directory fd: one consistent entry even if it is renamed meanwhile
            manifest = parse_manifest(key, _read_at(dfd, MANIFEST_NAME))
            cubin = _read_at(dfd, CUBIN_NAME)
        finally:
            os.close(dfd)
        check_cubin(manifest, len(cubin), hashlib.sha256(cubin).hexdigest())
        return cubin, manifest

    def _load_locked(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """_read_disk for a caller holding the key's lock: a corrupt entry is removed with a warning."""
        try:
            return self._read_disk(key)
        except EntryCorrupt as exc:
            self._discard(key)
            self._count("corrupt")
            warnings.warn(
                f"kernel cache entry {key} in {self._root} was corrupt: {exc.reason}; it was removed "
                "and will be rebuilt when needed",
                CacheCorruptionWarning,
                stacklevel=4,
            )
            return None

    def _disk_entry(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        try:
            return self._read_disk(key)
        except EntryCorrupt as exc:  # maybe a writer or remover raced us: decide under the lock
            if not self._writable:  # nobody writes here: it is corrupt, and it cannot be removed
                self._count("corrupt")
                warnings.warn(
                    f"kernel cache entry {key} in {self._root} is corrupt: {exc.reason}; the cache is read-only, "
                    "so it was left in place and is treated as missing",
                    CacheCorruptionWarning,
                    stacklevel=4,
                )
                return None
            with self._key_lock(key):
                return self._load_locked(key)

    def _lookup(self, key: str, *, count: bool) -> bytes | None:
        with self._mutex:
            cubin = self._mem.get(key)
        if cubin is not None:
            if count:
                self._count("hits_memory")
            return cubin
        found = self._disk_entry(key)
        if found is None:
            if count:
                self._count("misses")
            return None
        if count:
            self._count("hits_disk")
        self._remember(key, found[0])
        return found[0]

    def _discard(self, key: str) -> bool:
        """Move the entry of ``key`` out of sight atomically, then delete it. False if there was none."""
        trash = os.path.join(self._tmp, f"trash-{key[:16]}-{uuid.uuid4().hex}")
        try:
            os.rename(self._entry_path(key), trash)
        except FileNotFoundError:
            return False
        with self._mutex:
            self._mem.pop(key, None)
        _remove_tree(trash)
        return True

    def _mkdtemp(self, prefix: str) -> str:
        try:
            return tempfile.mkdtemp(prefix=prefix, dir=self._tmp)
        except FileNotFoundError:  # someone removed tmp/ (e.g. rm -rf of its content)
            self._ensure_layout()
            return tempfile.mkdtemp(prefix=prefix, dir=self._tmp)

    def _sweep_tmp(self, max_age: float) -> None:
        now = time.time()
        try:
            names = os.listdir(self._tmp)
        except FileNotFoundError:
            return
        for name in names:
            path = os.path.join(self._tmp, name)
            try:
                if now - os.lstat(path).st_mtime > max_age:
                    _remove_tree(path)
            except OSError:
                pass

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        held = self._held.__dict__.setdefault("keys", set())
        if key in held:
            raise CacheError(f"kernel {key} was requested again while it is being built or stored (recursive build?)")
        path = os.path.join(self._locks, key + ".lock")
        fd = self._open_locked(path)
        try:
            held.add(key)
            try:
                yield
            finally:
                held.discard(key)
        finally:
            os.close(fd)  # releases the flock

    def _open_locked(self, path: str) -> int:
        """Open and flock the lock file at ``path``; retry if it was deleted or replaced meanwhile (clear()
        deletes idle lock files), so that every holder holds the file that is at the path."""
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o600)
            except FileNotFoundError:
                self._ensure_layout()
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    @staticmethod
    def _check_build_result(key: str, result: object) -> tuple[bytes, Mapping[str, Any]]:
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"build for kernel {key} must return (cubin: bytes, manifest_extra: dict), got {type(result).__name__}"
            )
        cubin, extra = result
        if not isinstance(cubin, (bytes, bytearray, memoryview)):
            raise TypeError(f"cubin of kernel {key} must be bytes, got {type(cubin).__name__}")
        cubin = bytes(cubin)
        if not cubin:
            raise ValueError(f"cubin of kernel {key} is empty")
        if extra is None:
            extra = {}
        if not isinstance(extra, Mapping):
            raise TypeError(f"manifest_extra of kernel {key} must be a dict, got {type(extra).__name__}")
        return cubin, extra

    def _publish(self, key: str, cubin: bytes, manifest: Mapping[str, Any]) -> bytes:
        """Write a new entry (caller holds the key's lock); return the cubin that ends up in place."""
        staged = self._mkdtemp(f"new-{key[:16]}-")
        try:
            write_file(staged, CUBIN_NAME, cubin)
            write_file(staged, MANIFEST_NAME, manifest_bytes(manifest))
            fsync_dir(staged)
            theirs = self._move_into_place(key, staged)
            return cubin if theirs is None else theirs
        finally:
            if os.path.lexists(staged):
                _remove_tree(staged)

    def _move_into_place(self, key: str, staged: str) -> bytes | None:
        """Rename the complete, fsync'ed entry directory ``staged`` to the entry of ``key`` (caller holds the lock).

        Returns None if ours landed, or the cubin of a valid entry that was there already (ours is
        then left where it was, for the caller to delete).
        """
        shard = os.path.join(self._root, key[:2])
        try:
            os.mkdir(shard, 0o700)
        except FileExistsError:
            pass
        else:
            fsync_dir(self._root)
        for _ in range(3):
            try:
                os.rename(staged, self._entry_path(key))
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
                found = self._load_locked(key)  # someone else's entry: use it if it is valid, else it is gone now
                if found is not None:
                    return found[0]
            else:
                fsync_dir(shard)
                return None
        raise CacheError(
            f"could not move the new entry of kernel {key} into {shard}: the destination keeps reappearing"
        )
