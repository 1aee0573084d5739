"""Cache keys: a sha256 of a canonical serialization of everything that changes a binary.

The caller hands over the key inputs (rendered source, header contents, compiler version,
options, arch, SASS-pass version ...). Nothing machine-specific may enter a key, or a cache built
in one image would miss in another: name headers **relative to their include directory** and
never put absolute paths, user names or host names into the inputs.

The serialization is explicit and versioned (it never uses ``hash()``, ``repr()`` or pickle), so a
key is the same in every process, on every machine and under every Python version:

* every value is written as a one-byte type tag followed by a big-endian 64-bit length and
  the payload: ``s`` UTF-8 str, ``b`` bytes, ``i`` decimal int, ``?`` bool, ``n`` None,
  ``l`` list/tuple (element count, then the elements), ``m`` mapping (item count, then the items
  sorted by the UTF-8 bytes of their keys, each key length-prefixed);
* the whole stream starts with a scheme tag, so a change of scheme changes every key.

Length prefixes make it unambiguous: ``{"a": "bc"}`` and ``{"ab": "c"}``, ``"1"`` and ``1``,
``b"x"`` and ``"x"`` all give different keys.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Mapping
from typing import Union

KEY_SCHEME = b"dgx-kernel-cache-key/v1\x00"

_MAX_DEPTH = 32
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")

KeyValue = Union[str, bytes, int, bool, None, list, tuple, Mapping]


def _u64(n: int) -> bytes:
    return struct.pack(">Q", n)


def _absolute(name: str) -> bool:
    return name.startswith(("/", "\\", "~")) or bool(_WINDOWS_DRIVE.match(name))


def _feed(h: "hashlib._Hash", value: object, where: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"compute_key: {where} is nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, bool):  # before int: bool is an int subclass
        h.update(b"?" + _u64(1) + (b"\x01" if value else b"\x00"))
    elif isinstance(value, int):
        raw = str(value).encode("ascii")
        h.update(b"i" + _u64(len(raw)) + raw)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        h.update(b"s" + _u64(len(raw)))
        h.update(raw)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        h.update(b"b" + _u64(len(raw)))
        h.update(raw)
    elif value is None:
        h.update(b"n" + _u64(0))
    elif isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"compute_key: {where} has a key of type {type(k).__name__}; mapping keys must be str")
            if _absolute(k):
                raise ValueError(
                    f"compute_key: {where} has the key {k!r}, an absolute path. Keys must not depend on where "
                    "files live: name headers relative to their include directory"
                )
            items.append((k.encode("utf-8"), k, v))
        items.sort(key=lambda item: item[0])
        h.update(b"m" + _u64(len(items)))
        for raw_key, k, v in items:
            h.update(_u64(len(raw_key)))
            h.update(raw_key)
            _feed(h, v, f"{where}[{k!r}]", depth + 1)
    elif isinstance(value, (list, tuple)):
        h.update(b"l" + _u64(len(value)))
        for i, v in enumerate(value):
            _feed(h, v, f"{where}[{i}]", depth + 1)
    else:
        raise TypeError(
            f"compute_key: {where} has type {type(value).__name__}; expected str, bytes, int, bool, None, "
            "a list/tuple of these or a Mapping with str keys (floats are refused: format them yourself)"
        )


def compute_key(inputs: Mapping[str, KeyValue]) -> str:
    """Return the cache key (64 lowercase hex digits) of ``inputs``.

    ``inputs`` maps names to str, bytes, int, bool, None, lists/tuples of those, or nested
    mappings (e.g. header name -> content). Order of mapping items does not matter; order of
    list items does. Mapping keys that look like absolute paths are refused (ValueError).
    """
    if not isinstance(inputs, Mapping):
        raise TypeError(f"compute_key: inputs must be a Mapping, got {type(inputs).__name__}")
    h = hashlib.sha256(KEY_SCHEME)
    _feed(h, inputs, "inputs", 0)
    return h.hexdigest()
