"""The K-grouped GEMM's per-group tensor maps in device memory, made once per problem and launch stream.

The kernel picks one map of A_g and one of B_g per group at run time (their row strides differ), so they live in
device memory, not in the parameters. What those maps hold depends only on the operands' base addresses, M, N,
the groups' sizes and the config's TMA boxes, so one buffer serves every call with the same of those: it is
encoded and copied to the device on the first such call, on its launch stream, and read by every later call on
that stream (stream order makes the copy visible to them without any synchronisation; a call on another stream
gets a buffer of its own).

Buffers are never freed: a CUDA graph captured from a call that used one reads it on every replay. They are few
(128 bytes per map, two maps per group) and bounded: past :data:`LIMIT` buffers, calls with new addresses make
the maps per call (dgx.runtime.DeviceTensorMaps, freed after the kernel), as do calls under graph capture (whose
copy the graph owns).
"""

from __future__ import annotations

import threading

from . import runtime
from .runtime import Swizzle
from . import caches

LIMIT = 1024
"""Most buffers kept (16 groups: 4 KB each)."""

_maps: dict[tuple, runtime.DeviceTensorMaps] = caches.per_process({})
_lock = threading.Lock()


def encode_group_maps(a_ptr: int, b_ptr: int, m: int, n: int, ks: tuple[int, ...], box_rows_a: int,
                      box_rows_b: int) -> list:
    """One map of A_g [M, k_g] and one of B_g [N, k_g] per group (K-contiguous, stored one after another from
    `a_ptr` / `b_ptr`); None for both of an empty group (never visited)."""
    maps, offset = [], 0
    for kg in ks:
        if kg:
            maps.append(runtime.encode_tensor_map_2d("uint8", a_ptr + m * offset, kg, m, kg, 128, box_rows_a,
                                                     Swizzle.B128))
            maps.append(runtime.encode_tensor_map_2d("uint8", b_ptr + n * offset, kg, n, kg, 128, box_rows_b,
                                                     Swizzle.B128))
        else:
            maps += [None, None]
        offset += kg
    return maps


def group_maps(a_ptr: int, b_ptr: int, m: int, n: int, ks: tuple[int, ...], box_rows_a: int, box_rows_b: int,
               device: int, stream: int) -> tuple[runtime.DeviceTensorMaps, bool]:
    """(the groups' maps in device memory, whether they are kept): a kept buffer is the same for every call with
    these arguments and must not be released; one that is not kept (graph capture, or :data:`LIMIT` reached) is the
    caller's to release after its launch."""
    key = (a_ptr, b_ptr, m, n, ks, box_rows_a, box_rows_b, device, stream)
    kept = _maps.get(key)
    if kept is not None:
        return kept, True
    maps = encode_group_maps(a_ptr, b_ptr, m, n, ks, box_rows_a, box_rows_b)
    if len(_maps) >= LIMIT or runtime.stream_capturing(stream):
        return runtime.DeviceTensorMaps(maps, stream), False
    made = runtime.DeviceTensorMaps(maps, stream)
    with _lock:
        kept = _maps.setdefault(key, made)
    if kept is not made:  # another thread made the same buffer meanwhile: this one is freed after the launch
        return made, False
    return made, True


def kept_count() -> int:
    """How many buffers are kept (tests and diagnostics)."""
    return len(_maps)
