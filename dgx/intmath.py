"""Integer helpers shared by the planners, the checks and the kernel families."""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up (b > 0)."""
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """The smallest multiple of b (> 0) at or above a."""
    return -(-a // b) * b
