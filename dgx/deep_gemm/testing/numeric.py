"""DeepGEMM's ``deep_gemm.testing.numeric``: the accuracy measure its tests use, byte counts and bitwise equality."""

from __future__ import annotations

__all__ = ["calc_diff", "count_bytes", "assert_bitwise_equal"]


def calc_diff(x, y) -> float:
    """1 - 2 sum(xy) / sum(x^2 + y^2) in float64 (0 for two all-zero tensors): 0 when x == y, about the mean squared
    relative error / 2 otherwise."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if float(denominator) == 0.0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)


def count_bytes(*tensors) -> int:
    """Bytes of every tensor given (nested tuples and lists walked, None skipped)."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def assert_bitwise_equal(x, y, label: str = "") -> None:
    """Raises AssertionError naming the first differing byte unless x and y hold the same bytes (same shape and
    dtype too)."""
    import torch

    where = f" ({label})" if label else ""
    if x.shape != y.shape or x.dtype != y.dtype:
        raise AssertionError(f"bitwise mismatch{where}: shapes/dtypes differ: {tuple(x.shape)} {x.dtype} vs "
                             f"{tuple(y.shape)} {y.dtype}")
    xb, yb = x.contiguous().view(torch.uint8).flatten(), y.contiguous().view(torch.uint8).flatten()
    if not torch.equal(xb, yb):
        differ = xb != yb
        first = int(differ.nonzero()[0])
        element = first // x.element_size()
        raise AssertionError(f"bitwise mismatch{where}: {int(differ.sum())} of {xb.numel()} bytes differ, the first "
                             f"at byte {first} (element {element}: {x.flatten()[element].item()} vs "
                             f"{y.flatten()[element].item()})")
