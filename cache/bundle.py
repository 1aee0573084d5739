"""Kernel bundles: a compressed tar of verified cache entries, to carry a warm cache between machines.

A bundle holds only regular files named ``<key>/manifest.json`` and ``<key>/kernel.cubin``
(directory members named ``<key>`` are tolerated). :func:`import_bundle` trusts nothing in it:
it streams the whole archive into a staging directory under the cache's ``tmp/``, refusing
absolute paths, ``..``, links, devices and any other non-regular member, unexpected names,
duplicates, oversized archives (decompressed size and member count are capped) and entries that
fail the same checks as a cache load. Only when every entry has passed does it move entries into
the cache, each with an atomic rename under its key's lock, so an interrupted import leaves a
consistent cache.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import lzma
import os
import shutil
import tarfile
import tempfile
import zlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import BundleError, CacheMissError
from .store import (
    CUBIN_NAME,
    ENTRY_FILES,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    EntryCorrupt,
    KernelCache,
    check_cubin,
    check_key,
    fsync_dir,
    is_key,
    manifest_bytes,
    parse_manifest,
    write_all,
)

#: Default cap on the decompressed size of a bundle's members.
MAX_TOTAL_BYTES = 4 << 30
#: Default cap on the number of members of a bundle.
MAX_MEMBERS = 100_000
# Cap on a pax / GNU long-name header's payload, which tarfile reads into memory before we see the member.
_MAX_META_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_META_TYPES = frozenset(
    {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}
)


#: The optional member describing the bundle (who built it: the caller's ``metadata``), a JSON object.
BUNDLE_META_NAME = "bundle.json"


@dataclass(frozen=True)
class ImportReport:
    """Keys moved into the cache, and keys skipped because a valid entry was there already.

    ``metadata`` is the bundle's ``bundle.json`` (None for bundles without one); ``compilers`` maps every
    key of the bundle to its manifest's ``compiler`` field (None where it has none).
    """

    imported: tuple[str, ...]
    skipped: tuple[str, ...]
    metadata: Mapping[str, Any] | None = field(default=None, compare=False)
    compilers: Mapping[str, str | None] = field(default_factory=dict, compare=False)


def _compression(path: str, compression: str | None) -> str:
    if compression is None:
        lower = path.lower()
        if lower.endswith((".tar.gz", ".tgz")):
            compression = "gz"
        elif lower.endswith((".tar.xz", ".txz")):
            compression = "xz"
        else:
            raise ValueError(f"bundle file {path!r} must end in .tar.gz, .tgz, .tar.xz or .txz")
    if compression not in ("gz", "xz"):
        raise ValueError(f"compression must be 'gz' or 'xz', got {compression!r}")
    return compression


def export_bundle(
    cache: KernelCache,
    path: str | os.PathLike,
    keys: Iterable[str] | None = None,
    *,
    compression: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Write the verified entries of ``cache`` (all, or ``keys``) to a tar.gz / tar.xz at ``path``.

    Each entry is verified as it is read; a corrupt one is removed (with a
    CacheCorruptionWarning) and left out. A key given in ``keys`` that is not in the cache raises
    CacheMissError. The archive is written to a temporary file beside ``path`` and renamed over it,
    and is reproducible (fixed order, owners and gzip timestamp); like any temporary file it gets mode
    0600 (chmod it to share it). ``metadata`` (a JSON-able dict: who built the kernels) is written first,
    as ``bundle.json``. Returns the number of entries written.
    """
    path = os.fspath(path)
    kind = _compression(path, compression)
    explicit = keys is not None
    wanted = sorted({check_key(k) for k in keys}) if keys is not None else cache._disk_keys()
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, "the directory to write the bundle into does not exist", directory)
    meta_bytes = None
    if metadata is not None:
        meta_bytes = (json.dumps(dict(metadata), sort_keys=True, indent=2) + "\n").encode("utf-8")
    fd, part = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part", dir=directory)
    written = 0
    try:
        with open(fd, "wb") as raw:
            if kind == "gz":
                compressed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            else:
                compressed = lzma.LZMAFile(raw, "wb", preset=6)
            with compressed, tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar:
                if meta_bytes is not None:
                    info = tarfile.TarInfo(BUNDLE_META_NAME)
                    info.size = len(meta_bytes)
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(meta_bytes))
                for key in wanted:
                    found = cache._disk_entry(key)
                    if found is None:
                        if explicit:
                            raise CacheMissError(key, cache.root)
                        continue
                    cubin, manifest = found
                    for name, data in ((MANIFEST_NAME, manifest_bytes(manifest)), (CUBIN_NAME, cubin)):
                        info = tarfile.TarInfo(f"{key}/{name}")
                        info.size = len(data)
                        info.mtime = int(manifest["created"])
                        info.mode = 0o644
                        tar.addfile(info, io.BytesIO(data))
                    written += 1
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(part, path)
    except BaseException:
        try:
            os.unlink(part)
        except FileNotFoundError:
            pass
        raise
    return written


class _Limited(io.RawIOBase):
    """A reader that refuses to deliver more than ``limit`` bytes (the decompression-bomb guard)."""

    def __init__(self, inner, limit: int, path: str):
        self._inner = inner
        self._left = limit
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._inner.read(min(len(buffer), self._left + 1))
        if len(data) > self._left:
            raise BundleError(self._path, "it decompresses to more than the allowed size (decompression bomb?)")
        self._left -= len(data)
        buffer[: len(data)] = data
        return len(data)


class _GuardedTarInfo(tarfile.TarInfo):
    """Refuses oversized pax / long-name headers before tarfile reads their payload into memory."""

    def _proc_member(self, tarfile_obj):  # noqa: D401 - tarfile hook
        if self.type in _META_TYPES and self.size > _MAX_META_BYTES:
            raise tarfile.ReadError(f"a {self.size}-byte extended header (over {_MAX_META_BYTES})")
        return super()._proc_member(tarfile_obj)


def _member_target(member: tarfile.TarInfo) -> tuple[str, str | None]:
    """(key, file name) a member stands for, (key, None) for a tolerated directory; else a reason (ValueError)."""
    name = member.name
    if not name:
        raise ValueError("a member has an empty name")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ValueError(f"member {name!r} has an absolute path")
    if "\\" in name or "\x00" in name:
        raise ValueError(f"member {name!r} has a backslash or NUL in its name")
    parts = name.split("/")
    if ".." in parts:
        raise ValueError(f"member {name!r} has a '..' path component")
    if member.issym():
        raise ValueError(f"member {name!r} is a symlink (to {member.linkname!r})")
    if member.islnk():
        raise ValueError(f"member {name!r} is a hard link (to {member.linkname!r})")
    if member.ischr() or member.isblk():
        raise ValueError(f"member {name!r} is a device")
    if member.isdir():
        if len(parts) == 1 and is_key(parts[0]):
            return parts[0], None
        raise ValueError(f"member {name!r} is an unexpected directory")
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        raise ValueError(f"member {name!r} is not a regular file (tar type {member.type!r})")
    if name == BUNDLE_META_NAME:
        return "", BUNDLE_META_NAME
    if len(parts) != 2 or not is_key(parts[0]) or parts[1] not in ENTRY_FILES:
        raise ValueError(
            f"member {name!r} has an unexpected name (a bundle holds only <key>/{MANIFEST_NAME} and <key>/{CUBIN_NAME})"
        )
    return parts[0], parts[1]


def _stage(path: str, staging: str, max_total_bytes: int, max_members: int) -> dict[str, dict[str, tuple[int, str]]]:
    """Stream the archive into ``staging/<key>/<file>``; return {key: {file: (size, sha256)}}."""
    staged: dict[str, dict[str, tuple[int, str]]] = {}
    total = 0
    members = 0
    with open(path, "rb") as f:
        magic = f.read(len(_XZ_MAGIC))
        f.seek(0)
        if magic.startswith(_GZIP_MAGIC):
            decompressed = gzip.GzipFile(fileobj=f, mode="rb")
        elif magic == _XZ_MAGIC:
            decompressed = lzma.LZMAFile(f, "rb")
        else:
            raise BundleError(path, "it is not a gzip- or xz-compressed tar archive")
        # Headers and padding count too: allow them some room beyond the members' own bytes.
        cap = max_total_bytes + (max_members + 2) * 2048 + (1 << 20)
        limited = io.BufferedReader(_Limited(decompressed, cap, path))
        try:
            with tarfile.open(fileobj=limited, mode="r|", tarinfo=_GuardedTarInfo) as tar:
                for member in tar:
                    members += 1
                    if members > max_members:
                        raise BundleError(path, f"it has more than {max_members} members")
                    try:
                        key, fname = _member_target(member)
                    except ValueError as exc:
                        raise BundleError(path, str(exc)) from None
                    if fname == BUNDLE_META_NAME:
                        if "" in staged:
                            raise BundleError(path, f"member {member.name!r} appears twice")
                        if member.size > MAX_MANIFEST_BYTES:
                            raise BundleError(path, f"member {member.name!r} ({member.size} bytes) is over the size limit")
                        staged[""] = {BUNDLE_META_NAME: _copy_member(tar.extractfile(member), os.path.join(staging, BUNDLE_META_NAME))}
                        continue
                    entry = staged.setdefault(key, {})
                    if fname is None:
                        continue
                    if fname in entry:
                        raise BundleError(path, f"member {member.name!r} appears twice")
                    limit = MAX_MANIFEST_BYTES if fname == MANIFEST_NAME else max_total_bytes
                    if member.size > limit or total + member.size > max_total_bytes:
                        raise BundleError(
                            path, f"member {member.name!r} ({member.size} bytes) goes over the size limit"
                        )
                    total += member.size
                    os.makedirs(os.path.join(staging, key), mode=0o700, exist_ok=True)
                    entry[fname] = _copy_member(tar.extractfile(member), os.path.join(staging, key, fname))
                    if entry[fname][0] != member.size:
                        raise BundleError(path, f"member {member.name!r} is truncated")
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError) as exc:
            raise BundleError(path, f"it is not a readable tar archive ({exc})") from None
    return staged


def _copy_member(src, dest: str) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
            write_all(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return size, h.hexdigest()


def import_bundle(
    cache: KernelCache,
    path: str | os.PathLike,
    *,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    max_members: int = MAX_MEMBERS,
) -> ImportReport:
    """Import a bundle written by :func:`export_bundle` into ``cache``, all or nothing.

    Raises :class:`BundleError` (and imports nothing) if any member or entry of the archive is
    refused. Entries already present (and valid) in the cache are skipped, not replaced.
    """
    path = os.fspath(path)
    cache.require_writable("import kernels into it")
    staging = cache._mkdtemp("import-")
    try:
        staged = _stage(path, staging, max_total_bytes, max_members)
        metadata = _read_metadata(path, staging) if staged.pop("", None) is not None else None
        compilers: dict[str, str | None] = {}
        for key, files in sorted(staged.items()):
            missing = sorted(ENTRY_FILES - files.keys())
            if missing:
                raise BundleError(path, f"entry {key} lacks {', '.join(missing)}")
            with open(os.path.join(staging, key, MANIFEST_NAME), "rb") as f:
                raw = f.read()
            try:
                manifest = parse_manifest(key, raw)
                check_cubin(manifest, *files[CUBIN_NAME])
            except EntryCorrupt as exc:
                raise BundleError(path, f"entry {key}: {exc.reason}") from None
            compiler = manifest.get("compiler")
            compilers[key] = compiler if isinstance(compiler, str) else None
        imported: list[str] = []
        skipped: list[str] = []
        for key in sorted(staged):
            entry_dir = os.path.join(staging, key)
            fsync_dir(entry_dir)
            with cache._key_lock(key):
                if cache._load_locked(key) is not None or cache._move_into_place(key, entry_dir) is not None:
                    skipped.append(key)
                else:
                    imported.append(key)
        return ImportReport(tuple(imported), tuple(skipped), metadata, compilers)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _read_metadata(path: str, staging: str) -> dict[str, Any]:
    with open(os.path.join(staging, BUNDLE_META_NAME), "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError(path, f"its {BUNDLE_META_NAME} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BundleError(path, f"its {BUNDLE_META_NAME} holds a {type(data).__name__}, not an object")
    return data


def read_bundle_metadata(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``bundle.json`` of a bundle, without importing anything (None if it has none or is unreadable)."""
    try:
        with tarfile.open(os.fspath(path), mode="r:*") as tar:
            member = tar.next()
            if member is None or member.name != BUNDLE_META_NAME or not member.isfile():
                return None
            if member.size > MAX_MANIFEST_BYTES:
                return None
            data = json.loads(tar.extractfile(member).read().decode("utf-8"))
    except (OSError, tarfile.TarError, ValueError, EOFError, zlib.error, lzma.LZMAError):
        return None
    return data if isinstance(data, dict) else None
