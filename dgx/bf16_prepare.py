"""What a BF16 GEMM call queues on its stream before (or instead of) the kernel: C copied into D where the kernel adds
into D and C is another tensor (DeepGEMM's rule, so the kernel only ever reduce-adds into D), and D zeroed where the
kernel writes nothing (K = 0 without C, K-grouped groups with no K). Stream-ordered driver copies and memsets, so a
CUDA graph captures them with the kernel."""

from __future__ import annotations

from . import runtime
from .tensors import TensorView


def _rows(v: TensorView) -> tuple[int, int, int]:
    """(rows, row pitch in bytes, row width in bytes) of a tensor whose last dimension is contiguous and whose
    leading dimensions are stacked (each steps over whole copies of the next: one pitch between all rows)."""
    rows = 1
    for size in v.shape[:-1]:
        rows *= size
    pitch = v.strides[-2] * v.itemsize if v.ndim > 1 else v.shape[-1] * v.itemsize
    return rows, pitch, v.shape[-1] * v.itemsize


def copy_into(dst: TensorView, src: TensorView, stream: int) -> None:
    """dst = src, elementwise (same shape and dtype, rows contiguous, leading dimensions stacked)."""
    rows, dst_pitch, width = _rows(dst)
    _, src_pitch, _ = _rows(src)
    if rows and width:
        runtime.copy_rows(dst.ptr, dst_pitch, src.ptr, src_pitch, width, rows, stream)


def zero_rows(v: TensorView, first: int, count: int, stream: int) -> None:
    """Rows [first, first + count) of `v` (viewed as its rows: leading dimensions stacked) set to +0.0."""
    _, pitch, width = _rows(v)
    if count <= 0 or width == 0:
        return
    drv = runtime._driver()
    address = v.ptr + first * pitch
    handle = drv.CUstream(stream)
    if v.itemsize == 4:
        runtime.check(drv.cuMemsetD2D32Async(address, pitch, 0, width // 4, count, handle), "cuMemsetD2D32Async")
    else:
        runtime.check(drv.cuMemsetD2D16Async(address, pitch, 0, width // 2, count, handle), "cuMemsetD2D16Async")
