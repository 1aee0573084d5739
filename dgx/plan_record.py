"""Plan records: a warmup's list of kernels, kept beside the cache so that the same warmup need not enumerate again.

Enumerating a preset asks the heuristics thousands of times (seconds of CPU); a record answers in milliseconds.
A record is found under a key that covers everything the enumeration's answer depends on: the entries (kinds and
shapes, not their notes), ``max_m``, the SM count and the arch, the NVRTC version and every other cache-key input
shared by all kernels (:func:`dgx.jit.key_fingerprint`), and the content of dgx's own code (:func:`code_digest`:
heuristics, kernel renderers and key computation alike, so an edited checkout never reuses a stale record even
where the version number stayed). Any change gives another key, hence no record, hence a fresh enumeration.

Records live in ``<cache root>/plans/<key>.json.gz`` (gzip'ed JSON: the deepseek-v3 preset's is 55 KB instead of
1.9 MB), written whole (a temporary file renamed into place); the kernel store ignores that folder, and only the
:data:`KEEP_RECORDS` most recently used stay. A record that cannot be read, parsed or checked (its own checksum) is
ignored and rewritten; a read-only cache is read, never written. A record saves the enumeration only: every kernel
it names is still looked up in the cache, and one missing is compiled from the source the record holds.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import jit
from .jit import KernelSource

#: Bump when the record's layout or the meaning of its fields changes.
RECORD_FORMAT = 1
#: The folder under the cache root that holds the records.
PLANS_DIR = "plans"
SUFFIX = ".json.gz"
#: Records kept (the most recently used); older ones are removed as a new one is written.
KEEP_RECORDS = 16
#: The packages whose files decide what a plan holds (heuristics, renderers, headers, key computation).
_CODE_PACKAGES = ("dgx", "dgx.ptx", "dgx.cache", "dgx.sass_tools")
_CODE_SUFFIXES = (".py", ".cuh", ".json")


@dataclass(frozen=True)
class RecordedKernel:
    """One kernel of a recorded plan: its cache key, source and why the plan holds it."""

    key: str
    source: KernelSource
    used_by: tuple[str, ...]
    helper: bool = False


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A sha256 of every source file of the packages that decide a plan, named relative to their package (so the
    same code installed elsewhere gives the same digest)."""
    import importlib

    h = hashlib.sha256()
    for package in _CODE_PACKAGES:
        root = Path(importlib.import_module(package).__file__).parent
        nested = {sub.split(".", 1)[1] for sub in _CODE_PACKAGES if sub.startswith(package + ".")}  # hashed alone
        files = sorted(p for p in root.rglob("*") if p.suffix in _CODE_SUFFIXES and "__pycache__" not in p.parts
                       and p.relative_to(root).parts[0] not in nested)
        for path in files:
            name = f"{package}/{path.relative_to(root).as_posix()}".encode()
            data = path.read_bytes()
            h.update(len(name).to_bytes(8, "big") + name + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def record_key(entries: Sequence[dict[str, Any]], *, max_m: int, num_sms: int, arch: str,
               options: dict[str, Any] | None = None) -> str:
    """The key of the record for a plan of ``entries`` (each an entry's defining fields, in the plan's order).
    ``options``: settings that change which kernels the heuristics pick (e.g. DGX_GEMM_RUNTIME_N); none leaves
    the key as it was without them."""
    from .cache import compute_key

    inputs = {
        "format": RECORD_FORMAT,
        "entries": [dict(e) for e in entries],
        "max_m": max_m,
        "num_sms": num_sms,
        "arch": arch,
        "code": code_digest(),
        "fingerprint": jit.key_fingerprint(arch),
    }
    if options:
        inputs["options"] = dict(options)
    return compute_key(inputs)


def record_path(root: str | os.PathLike, key: str) -> Path:
    return Path(root) / PLANS_DIR / f"{key}{SUFFIX}"


def _encode(kernels: Iterable[RecordedKernel]) -> list[dict[str, Any]]:
    return [
        {
            "key": k.key,
            "name": k.source.name,
            "source": k.source.source,
            "dynamic_smem": k.source.dynamic_smem,
            "summary": [list(pair) for pair in k.source.summary],
            "warmup_hint": k.source.warmup_hint,
            "used_by": list(k.used_by),
            "helper": k.helper,
        }
        for k in kernels
    ]


def _checksum(rows: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _decode(rows: list[dict[str, Any]]) -> list[RecordedKernel]:
    out = []
    for row in rows:
        src = KernelSource(
            name=row["name"],
            source=row["source"],
            dynamic_smem=int(row["dynamic_smem"]),
            summary=tuple((str(a), str(b)) for a, b in row["summary"]),
            warmup_hint=row["warmup_hint"],
        )
        out.append(RecordedKernel(row["key"], src, tuple(row["used_by"]), bool(row["helper"])))
    return out


def load(root: str | os.PathLike, key: str) -> tuple[list[RecordedKernel], float] | None:
    """The kernels of the record ``key`` under the cache ``root`` and the seconds its enumeration took, or None
    when there is no usable record (absent, unreadable, malformed, or failing its checksum)."""
    path = record_path(root, key)
    try:
        data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        if data.get("format") != RECORD_FORMAT or data.get("key") != key:
            return None
        rows = data["kernels"]
        if not isinstance(rows, list) or data.get("checksum") != _checksum(rows):
            return None
        found = _decode(rows), float(data.get("seconds", 0.0))
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError):
        return None
    try:
        os.utime(path)  # recently used: kept by _prune
    except OSError:
        pass
    return found


def save(root: str | os.PathLike, key: str, kernels: Iterable[RecordedKernel], seconds: float,
         inputs: dict[str, Any] | None = None) -> bool:
    """Writes the record ``key`` under the cache ``root`` whole (temporary file, then rename); returns whether it
    was written (a read-only or vanished cache is left as it is)."""
    rows = _encode(kernels)
    body = {
        "format": RECORD_FORMAT,
        "key": key,
        "inputs": inputs or {},  # for people reading the file; the key is what decides
        "seconds": round(seconds, 3),
        "checksum": _checksum(rows),
        "kernels": rows,
    }
    folder = Path(root) / PLANS_DIR
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(gzip.compress(json.dumps(body, separators=(",", ":")).encode("utf-8"), mtime=0))
            os.replace(tmp, record_path(root, key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return False
    _prune(folder)
    return True


def _prune(folder: Path) -> None:
    """Removes all but the KEEP_RECORDS most recently used records (and temporary files a crash left an hour ago)."""
    try:
        records = sorted(folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
        for path in records[KEEP_RECORDS:]:
            path.unlink()
        for path in folder.glob(".*.tmp"):
            if path.stat().st_mtime < time.time() - 3600:
                path.unlink()
    except OSError:  # another warmup pruned it first
        pass
