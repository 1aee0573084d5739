"""Per-row scales converted into the TMA-aligned M-major layout on the GPU, by dgx's scale-layout kernel
(ptx/scale_layout.cuh), into memory dgx owns, on the launch stream.

Where the converted scales live:

- Outside a CUDA-graph capture, in a workspace per (device, stream, thread, slot), made on first use and grown
  (never shrunk) as larger scales come: no allocation per call. Stream order makes the reuse safe: a thread's
  next conversion on that stream is queued after its previous GEMM, which read the workspace, and another
  thread, or another stream, has its own workspace (so two threads on one stream never interleave a conversion
  and a GEMM over the same memory). Growing frees the old workspace on its stream, after the work queued there.
- Under capture, in memory allocated on the capturing stream (``cuMemAllocAsync``) and freed on it after the
  GEMM (``cuMemFreeAsync``): the graph owns the allocation, every replay gets its own, and no replay shares memory
  with an eager call or another graph. (A workspace would be baked into the graph: replays of two graphs on two
  streams, or a replay beside eager calls, would race on it.)

The first conversion in a process warns (once) that converting ahead, with get_mn_major_tma_aligned_tensor,
saves the extra kernel on every call.
"""

from __future__ import annotations

import warnings
from _thread import get_ident
from dataclasses import dataclass

from . import runtime
from .errors import LayoutConversionWarning
from .intmath import round_up
from .kernels import scale_layout
from .tensors import TensorView
from . import caches

_warned = False
_workspaces: dict[tuple[int, int, int, str], tuple[int, int]] = caches.per_process({})  # key -> (address, bytes)
MIN_WORKSPACE = 1 << 16


@dataclass(frozen=True)
class Conversion:
    """One conversion made for a call: where the scales went (`address`), what the kernel was given, and whether
    the memory is the capture's (then freed after the GEMM by :meth:`release`)."""

    address: int
    stream: int
    captured: bool
    slot: str
    rows: int
    cols: int
    groups: int
    strides: tuple[int, int, int]  # the source's (group, row, column) strides in floats
    dst_ld: int
    nbytes: int

    def release(self) -> None:
        """After the GEMM that reads it is queued: frees capture-owned memory on its stream (no-op otherwise)."""
        if self.captured:
            runtime.free_async(self.address, self.stream)


def _warn_once(name: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"dgx: {name} is not in the TMA-aligned M-major layout, so every call converts it on the GPU first (one "
            "extra kernel). Convert it once ahead with dgx.get_mn_major_tma_aligned_tensor (dgx.per_token_cast_to_fp8 "
            "makes that layout) to save it. This warning is shown once per process.",
            LayoutConversionWarning,
            stacklevel=5,  # the caller of the entry point (fp8_gemm_nt -> scales_for_tma -> convert -> here)
        )


def buffer(device: int, stream: int, slot: str, nbytes: int) -> tuple[int, bool]:
    """(address, capture-owned) of `nbytes` for converted scales on `stream` (see the module docstring)."""
    if runtime.stream_capturing(stream):
        return runtime.alloc_async(nbytes, stream), True
    key = (device, stream, get_ident(), slot)
    found = _workspaces.get(key)
    if found is None or found[1] < nbytes:
        size = max(nbytes, MIN_WORKSPACE, 2 * found[1] if found else 0)
        address = runtime.alloc_async(size, stream)
        if found is not None:
            runtime.free_async(found[0], stream)  # after the work queued on the stream, the only one using it
        found = _workspaces[key] = (address, size)
    return found[0], False


def layout_of(view: TensorView) -> tuple[int, int, int, tuple[int, int, int]]:
    """(groups, rows, columns, (group, row, column) strides) of [rows, cols] or [groups, rows, cols] scales."""
    if view.ndim == 3:
        groups, rows, cols = view.shape
        return groups, rows, cols, tuple(view.strides)
    rows, cols = view.shape
    return 1, rows, cols, (0, view.strides[0], view.strides[1])


def convert(view: TensorView, stream: int, slot: str, name: str, warn: bool = True) -> tuple[TensorView, Conversion]:
    """`view` (float32 scales [M, KB] or [G, M, KB], any non-negative strides) copied into the TMA-aligned
    M-major layout by the scale-layout kernel on `stream`: the copy's view, and the conversion made. `warn`: the
    once-per-process hint to convert ahead (not for an entry point whose documented layout is converted)."""
    if warn:
        _warn_once(name)
    groups, rows, cols, strides = layout_of(view)
    ld = round_up(rows, 4)
    nbytes = 4 * groups * cols * ld
    address, captured = buffer(view.device, stream, slot, nbytes)
    conversion = Conversion(address, stream, captured, slot, rows, cols, groups, strides, ld, nbytes)
    try:
        launch(conversion, view.ptr, view.device)
    except BaseException:
        conversion.release()
        raise
    if view.ndim == 3:
        out = TensorView(address, (groups, rows, cols), (cols * ld, 1, ld), "float32", view.device)
    else:
        out = TensorView(address, (rows, cols), (1, ld), "float32", view.device)
    return out, conversion


def launch(conversion: Conversion, src: int, device: int) -> None:
    """Queues the scale-layout kernel for `conversion` reading from `src`."""
    c = conversion
    launcher = scale_layout.launcher(device, c.rows, c.cols, c.groups)
    launcher.launch(c.stream, scale_layout.pack(src, c.address, c.strides, c.rows, c.cols, c.dst_ld))
