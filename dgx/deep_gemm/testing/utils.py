"""DeepGEMM's ``deep_gemm.testing.utils``: the architecture query and the decorators its tests use."""

from __future__ import annotations

import functools
import os

__all__ = ["get_arch_major", "test_filter", "ignore_env"]


def get_arch_major() -> int:
    """The current CUDA device's compute capability major (9 on Hopper)."""
    import torch

    return torch.cuda.get_device_capability()[0]


def test_filter(condition):
    """Runs the decorated function only when condition() holds (else prints that it was filtered)."""

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if condition():
                return fn(*args, **kwargs)
            print(f"{fn.__name__}:\n > Filtered by {condition}\n")
            return None

        return wrapper

    return decorator


test_filter.__test__ = False  # a decorator, not a test (pytest collects names starting with "test")


def ignore_env(name: str, condition):
    """Runs the decorated function with environment variable `name` removed while condition() holds (put back after,
    also when the function raises)."""

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not condition():
                return fn(*args, **kwargs)
            saved = os.environ.pop(name, None)
            try:
                return fn(*args, **kwargs)
            finally:
                if saved is not None:
                    os.environ[name] = saved

        return wrapper

    return decorator
