"""Input checks of the BF16 GEMM entry points (dgx.bf16): operands' major-ness, shapes, dtypes, TMA alignment.
Every failure is a TypeError or ValueError that names the argument, says what was expected and what came."""

from __future__ import annotations

from typing import NamedTuple

from .checks import expect_dtype, expect_ndim, expect_shape
from .intmath import round_up
from .limits import MAX_DIM
from .tensors import TensorView, as_view, require_cuda


class Operand(NamedTuple):
    """A 2-D operand as the kernel reads it: [rows, K] with K contiguous ("k"), or rows contiguous ("mn"), and the
    stride in elements between its lines (rows for "k", K for "mn")."""

    view: TensorView
    major: str
    ld: int


def transposed(v: TensorView, dims: tuple[int, int] = (0, 1)) -> TensorView:
    """`v` with dimensions `dims` swapped (a view: the same memory read the other way)."""
    shape, strides = list(v.shape), list(v.strides)
    i, j = dims
    shape[i], shape[j] = shape[j], shape[i]
    strides[i], strides[j] = strides[j], strides[i]
    return TensorView(v.ptr, tuple(shape), tuple(strides), v.dtype, v.device, v.device_kind)


def expect_bf16(v: TensorView, name: str, ndim: int) -> None:
    expect_ndim(v, name, ndim)
    expect_dtype(v, name, "bfloat16")


def expect_aligned_base(v: TensorView, name: str) -> None:
    if v.ptr % 16:
        raise ValueError(f"{name}: TMA needs a 16-byte aligned base address; got 0x{v.ptr:x}")


def expect_line_stride(stride: int, itemsize: int, name: str, what: str) -> None:
    """A stride TMA steps by: non-negative, a multiple of 16 bytes."""
    if stride < 0 or (stride * itemsize) % 16:
        raise ValueError(
            f"{name}: TMA needs {what} that are a multiple of 16 bytes; got a stride of {stride} elements x "
            f"{itemsize} bytes"
        )


def operand(v: TensorView, name: str, rows_name: str) -> Operand:
    """The major-ness and line stride of a 2-D [rows, K] operand (its last two dimensions; `rows_name` is "M" or
    "N"): K-major when K is contiguous (stride 1), else MN-major when the rows are. A dimension of extent 1 has any
    stride. Raises ValueError when neither is contiguous or TMA cannot read the lines."""
    rows, k = v.shape[-2], v.shape[-1]
    s_rows, s_k = v.strides[-2], v.strides[-1]
    if v.numel() == 0:  # never read
        return Operand(v, "k", round_up(max(k, 1), 8))
    if k <= 1 or s_k == 1:
        major, ld = "k", s_rows if rows > 1 else round_up(max(k, 1), 8)
        what = f"rows (stride along {rows_name})"
    elif rows <= 1 or s_rows == 1:
        major, ld = "mn", s_k if k > 1 else round_up(max(rows, 1), 8)
        what = "lines of K (stride along K)"
    else:
        raise ValueError(
            f"{name}: expected K contiguous (strides (S, 1)) or {rows_name} contiguous (strides (1, S)); got shape "
            f"{v.shape} with strides {v.strides}"
        )
    expect_line_stride(ld, v.itemsize, name, what)
    expect_aligned_base(v, name)
    return Operand(v, major, ld)


def expect_rows_contiguous(v: TensorView, name: str) -> None:
    """The last dimension contiguous, every other stride a multiple of 16 bytes (rows TMA writes or reads), base
    16-byte aligned. An empty tensor is never read or written: anything goes."""
    if v.numel() == 0:
        return
    if v.shape[-1] > 1 and v.strides[-1] != 1:
        raise ValueError(f"{name}: expected contiguous rows (last stride 1); got strides {v.strides}")
    for dim in range(v.ndim - 1):
        if v.shape[dim] > 1:
            expect_line_stride(v.strides[dim], v.itemsize, name, f"strides along dim {dim}")
    expect_aligned_base(v, name)


def flat_rows(v: TensorView) -> TensorView:
    """`v` [..., rows, cols] as 2-D [all rows, cols] (its leading dimensions must be stacked: expect_stacked): the row
    pitch is the stride of the innermost leading dimension longer than 1."""
    rows, pitch = 1, None
    for size, stride in zip(reversed(v.shape[:-1]), reversed(v.strides[:-1])):
        if pitch is None and size > 1:
            pitch = stride
        rows *= size
    if pitch is None:
        pitch = round_up(max(v.shape[-1], 1), 8)
    return TensorView(v.ptr, (rows, v.shape[-1]), (pitch, v.strides[-1]), v.dtype, v.device, v.device_kind)


def expect_stacked(v: TensorView, name: str, dim: int = 0) -> None:
    """Dimension `dim` steps over whole copies of the next one (groups stored one after another), so `dim` and the
    next read as one dimension of their product."""
    if v.shape[dim] > 1 and v.shape[dim + 1] > 0 and v.strides[dim] != v.shape[dim + 1] * v.strides[dim + 1]:
        raise ValueError(
            f"{name}: expected the groups stored one after another (stride along dim {dim} = {v.shape[dim + 1]} x "
            f"{v.strides[dim + 1]}); got strides {v.strides}"
        )


def expect_n_multiple_of_8(n: int, name: str = "d") -> None:
    if n % 8:
        raise ValueError(f"{name}: N must be a multiple of 8 (16-byte rows of D for TMA); got N = {n}")


def expect_below_limit(value: int, name: str, what: str) -> None:
    if value > MAX_DIM:
        raise ValueError(f"{name}: {what} must be at most {MAX_DIM} (32-bit tile arithmetic); got {value}")


def expect_out(dv: TensorView, shape: tuple[int, ...], dtypes: tuple[str, ...] = ("bfloat16", "float32")) -> None:
    """D: one of `dtypes`, `shape`, rows TMA can write."""
    if dv.dtype not in dtypes:
        raise TypeError(f"d: expected dtype {' or '.join(dtypes)}; got {dv.dtype}")
    expect_shape(dv, "d", shape)
    expect_rows_contiguous(dv, "d")


def c_view(c, dv: TensorView) -> TensorView | None:
    """C as a view checked against D (DeepGEMM's rule: C has D's dtype and shape), or None."""
    if c is None:
        return None
    cv = as_view(c, "c")
    require_cuda(cv, "c", dv.device)
    if cv.dtype != dv.dtype:
        raise TypeError(f"c: expected dtype {dv.dtype} like d; got {cv.dtype}")
    expect_shape(cv, "c", dv.shape)
    expect_rows_contiguous(cv, "c")
    if cv.ptr == dv.ptr and cv.strides != dv.strides:
        raise ValueError(f"c: is d's memory with other strides ({cv.strides} against {dv.strides})")
    return cv


def expect_compiled_dims(compiled_dims: object) -> None:
    """DeepGEMM's `compiled_dims` (which of M, N, K its kernels compile in): accepted, unused (dgx compiles N and K
    and takes M at run time)."""
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims: expected a str such as 'nk'; got {type(compiled_dims).__name__}")


def expect_int32_vector(v: TensorView, name: str, length: int) -> None:
    expect_ndim(v, name, 1)
    expect_dtype(v, name, "int32")
    expect_shape(v, name, (length,))
    if length > 1 and v.strides[0] != 1:
        raise ValueError(f"{name}: expected a contiguous tensor; got strides {v.strides}")
    if v.ptr % 4:
        raise ValueError(f"{name}: expected a 4-byte aligned address; got 0x{v.ptr:x}")
