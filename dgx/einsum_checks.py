"""Input checks of dgx.einsum: the expression, dtypes, shapes, the strides TMA takes, and aliasing. Every failure is a
TypeError or ValueError naming the argument, saying what was expected and what came, raised before anything is
queued."""

from __future__ import annotations

from typing import NamedTuple

from .bf16_checks import expect_aligned_base, expect_line_stride
from .checks import expect_dtype, expect_ndim
from .intmath import round_up
from .kernels.einsum import EXPRESSIONS
from .tensors import TensorView

#: The most S x k-blocks of 'bmk,bnk->mn' (the flattened (s, k) reduction is counted in 32-bit ints).
MAX_BATCH_KBLOCKS = 2**31 - 1


def expect_expr(expr: object) -> str:
    """DeepGEMM's expression, spaces ignored: one of dgx.kernels.einsum.EXPRESSIONS."""
    if not isinstance(expr, str):
        raise TypeError(f"expr: expected a str such as 'bmk,bnk->mn'; got {type(expr).__name__}")
    plain = "".join(expr.split())
    if plain not in EXPRESSIONS:
        raise ValueError(f"expr: expected one of {', '.join(repr(e) for e in EXPRESSIONS)} (the contractions dgx "
                         f"runs on sm_90); got {expr!r}")
    return plain


class Strided3d(NamedTuple):
    """A 3-D tensor as a TMA map reads it: its shape and the strides (elements) of its two outer dimensions, with
    a valid stride standing in for a dimension of extent 1 (whose stride is never stepped)."""

    view: TensorView
    outer: int  # stride of dimension 0
    middle: int  # stride of dimension 1


def strided_3d(v: TensorView, name: str, dtypes: tuple[str, ...] = ("bfloat16",)) -> Strided3d:
    """`v` 3-D of one of `dtypes`, its last dimension contiguous, the other two strides multiples of 16 bytes (any
    order, overlapping none of its own elements), its base 16-byte aligned."""
    expect_ndim(v, name, 3)
    if v.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {' or '.join(dtypes)}; got {v.dtype}")
    d0, d1, d2 = v.shape
    s0, s1, s2 = v.strides
    if d2 > 1 and s2 != 1:
        raise ValueError(f"{name}: expected its last dimension contiguous (stride 1); got strides {v.strides}")
    row = round_up(max(d2, 1), 8)  # the stand-in stride of a dimension of extent 1: a 16-byte multiple
    middle = s1 if d1 > 1 else row
    outer = s0 if d0 > 1 else middle * max(d1, 1)
    if v.numel():
        for stride, dim in ((middle, 1), (outer, 0)):
            expect_line_stride(stride, v.itemsize, name, f"strides along dim {dim}")
        for stride, extent, dim in ((middle, d1, 1), (outer, d0, 0)):
            if extent > 1 and stride < d2:
                raise ValueError(f"{name}: dim {dim} steps {stride} elements, less than a row of {d2}: its rows "
                                 f"overlap (strides {v.strides})")
        expect_aligned_base(v, name)
    return Strided3d(v, outer, middle)


def extent_bytes(v: TensorView) -> tuple[int, int]:
    """[first, last) bytes a tensor of non-negative strides touches (empty: (ptr, ptr))."""
    if v.numel() == 0:
        return v.ptr, v.ptr
    last = sum((size - 1) * stride for size, stride in zip(v.shape, v.strides))
    return v.ptr, v.ptr + (last + 1) * v.itemsize


def expect_no_overlap(out: TensorView, out_name: str, inputs: list[tuple[TensorView, str]]) -> None:
    """The output shares no byte of memory with any input (it is written while they are read)."""
    lo, hi = extent_bytes(out)
    for v, name in inputs:
        a, b = extent_bytes(v)
        if lo < b and a < hi:
            raise ValueError(f"{out_name}: overlaps {name} in memory ({out_name} at 0x{lo:x}..0x{hi:x}, {name} at "
                             f"0x{a:x}..0x{b:x}); the kernel writes {out_name} while it reads {name}")


def expect_out_2d(dv: TensorView, shape: tuple[int, int], dtypes: tuple[str, ...], name: str = "d") -> int:
    """D (or C) [M, N]: one of `dtypes`, rows contiguous and 16-byte aligned, N a multiple of 8. Its row stride."""
    expect_ndim(dv, name, 2)
    if dv.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {' or '.join(dtypes)}; got {dv.dtype}")
    if tuple(dv.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}; got {tuple(dv.shape)}")
    m, n = shape
    if n % 8:
        raise ValueError(f"{name}: N must be a multiple of 8 (16-byte rows); got N = {n}")
    if dv.numel() == 0:
        return n
    if n > 1 and dv.strides[1] != 1:
        raise ValueError(f"{name}: expected contiguous rows (last stride 1); got strides {dv.strides}")
    ld = dv.strides[0] if m > 1 else n
    expect_line_stride(ld, dv.itemsize, name, "rows")
    if m > 1 and ld < n:
        raise ValueError(f"{name}: rows overlap (row stride {ld} < {n})")
    expect_aligned_base(dv, name)
    return ld


def expect_bf16_3d(v: TensorView, name: str) -> None:
    expect_ndim(v, name, 3)
    expect_dtype(v, name, "bfloat16")
