"""Input validation shared by the GEMM entry points. Every failure says what was expected and what came."""

from __future__ import annotations

from typing import Sequence

from .intmath import ceil_div  # noqa: F401 - the entry points size the scale tensors they check with it
from .tensors import TensorView, as_view, require_cuda


def unpack_pair(pair: object, name: str) -> tuple[object, object]:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{name}: expected a (tensor, scales) pair; got {type(pair).__name__}")
    return pair[0], pair[1]


def expect_dtype(v: TensorView, name: str, dtype: str) -> None:
    if v.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}; got {v.dtype}")


def expect_shape(v: TensorView, name: str, shape: Sequence[int]) -> None:
    if tuple(v.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}; got {tuple(v.shape)}")


def expect_ndim(v: TensorView, name: str, ndim: int) -> None:
    if v.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor; got {v.ndim}-D with shape {v.shape}")


def expect_tma_rows(v: TensorView, name: str) -> None:
    """Rows contiguous, each row start 16-byte aligned (what TMA needs)."""
    if v.shape[-1] > 1 and v.strides[-1] != 1:
        raise ValueError(f"{name}: expected contiguous rows (last stride 1); got strides {v.strides}")
    for dim in range(v.ndim - 1):
        if v.shape[dim] > 1 and (v.strides[dim] * v.itemsize) % 16:
            raise ValueError(
                f"{name}: TMA needs row strides that are a multiple of 16 bytes; got stride {v.strides[dim]} "
                f"elements x {v.itemsize} bytes along dim {dim} (shape {v.shape})"
            )
        if v.strides[dim] < 0:
            raise ValueError(f"{name}: negative strides are not supported; got {v.strides}")
    if v.ptr % 16:
        raise ValueError(f"{name}: TMA needs a 16-byte aligned base address; got 0x{v.ptr:x}")


def expect_nonnegative_strides(v: TensorView, name: str) -> None:
    if any(s < 0 for s in v.strides):
        raise ValueError(f"{name}: negative strides are not supported; got {v.strides}")
    if v.ptr % v.itemsize:
        raise ValueError(f"{name}: expected an address aligned to {v.itemsize} bytes; got 0x{v.ptr:x}")


def expect_contiguous(v: TensorView, name: str) -> None:
    acc = 1
    for size, stride in zip(reversed(v.shape), reversed(v.strides)):
        if size > 1 and stride != acc:
            raise ValueError(f"{name}: expected a contiguous row-major tensor; got shape {v.shape}, strides {v.strides}")
        acc *= size


def expect_positive_int(value: object, name: str) -> None:
    """`value` must be an int (not a bool) above 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive int; got {value!r}")


def expect_n_multiple_of_8(n: int, name: str = "d") -> None:
    """N (the output's columns) a multiple of 8: 16-byte rows of BF16 D (and of FP8 B) for TMA."""
    if n % 8:
        raise ValueError(f"{name}: N must be a multiple of 8 (16-byte rows for TMA); got N = {n}")


def expect_fp32_out_for_c(dv: TensorView) -> None:
    """d = c + a.b^T is the weight-gradient variant, which writes a float32 d."""
    if dv.dtype != "float32":
        raise ValueError("fp8_gemm_nt: c (d = c + a.b^T) needs a float32 d (the weight-gradient variant); got a "
                         f"{dv.dtype} d")


def expect_scaled_fp8_dtypes(av: TensorView, bv: TensorView, sfav: TensorView, sfbv: TensorView,
                             names: tuple[str, str, str, str] = ("A", "B", "SFA", "SFB")) -> None:
    """Two FP8 operands then their FP32 scales (`names` in that order), the dtypes of a scaled FP8 GEMM's inputs."""
    expect_dtype(av, names[0], "float8_e4m3fn")
    expect_dtype(bv, names[1], "float8_e4m3fn")
    expect_dtype(sfav, names[2], "float32")
    expect_dtype(sfbv, names[3], "float32")


def expect_fp8_operands(av: TensorView, sfav: TensorView, bv: TensorView, sfbv: TensorView, dv: TensorView) -> tuple[int, int, int]:
    """The checks every dense FP8 GEMM makes of A [M, K], B [N, K], their scales and D: 2-D, the FP8 and
    FP32 dtypes, one K > 0. Returns (M, N, K); D's dtype and the scales' shapes are the caller's."""
    for v, name in ((av, "A"), (bv, "B"), (dv, "d"), (sfav, "SFA"), (sfbv, "SFB")):
        expect_ndim(v, name, 2)
    expect_scaled_fp8_dtypes(av, bv, sfav, sfbv)
    m, k = av.shape
    n, kb = bv.shape
    if kb != k:
        raise ValueError(f"B: expected K = {k} columns like A; got shape {bv.shape}")
    if k == 0:
        raise ValueError("A: K must be positive; got K = 0")
    return m, n, k


def views_on_one_device(named: Sequence[tuple[object, str]]) -> list[TensorView]:
    """TensorViews of every tensor, all in CUDA memory of one device."""
    views = [as_view(obj, name) for obj, name in named]
    require_cuda(views[0], named[0][1])
    for v, (_, name) in zip(views[1:], named[1:]):
        require_cuda(v, name, views[0].device)
    return views
