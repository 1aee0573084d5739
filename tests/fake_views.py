"""TensorViews of fake device tensors for CPU tests of input checks: never dereferenced (every check runs before
anything would launch)."""

from __future__ import annotations

from dgx.tensors import TensorView

BASE = 0x7F0000000000  # a 16-byte aligned address


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(tuple(shape)):
        strides.append(acc)
        acc *= size
    return tuple(reversed(strides))


def fake_view(shape, dtype: str = "float32", strides=None, ptr: int = BASE, device: int = 0) -> TensorView:
    """A TensorView on cuda:`device` (contiguous unless `strides` is given)."""
    return TensorView(ptr, tuple(shape), tuple(strides) if strides is not None else contiguous_strides(shape), dtype,
                      device)
