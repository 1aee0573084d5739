"""Host cost of calling an op through torch's dispatcher, measured with no-op bodies (no GPU needed): shared by
tests/test_torch_ops.py and the device script tests/device/torch_ops_overhead.py."""

from __future__ import annotations

import timeit
from typing import Callable, Optional

import torch

NAMESPACE = "dgx_timing"
_GEMM_SCHEMA = "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c=None) -> ()"
_registered: dict[str, object] = {}


def per_call_us(fn: Callable[[], object], calls: int = 20000, repeat: int = 5) -> float:
    """The best of `repeat` runs of `calls` calls of `fn`, in µs per call."""
    fn()
    return min(timeit.repeat(fn, number=calls, repeat=repeat)) / calls * 1e6


def _noop(a, sfa, b, sfb, d, c=None) -> None:
    return None


def noop_ops() -> tuple[Callable, Callable]:
    """Two no-op operators with fp8_gemm_nt's schema (d written in place), made once per process: one
    registered as dgx.torch_ops registers (Library define + impl + fake), one with torch.library.custom_op."""
    if not _registered:
        lib = torch.library.Library(NAMESPACE, "DEF")
        lib.define("gemm_library" + _GEMM_SCHEMA)
        lib.impl("gemm_library", _noop, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::gemm_library", _noop, lib=lib)

        @torch.library.custom_op(f"{NAMESPACE}::gemm_custom_op", mutates_args=("d",))
        def gemm_custom_op(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                           c: Optional[torch.Tensor] = None) -> None:
            return None

        gemm_custom_op.register_fake(_noop)
        _registered.update(lib=lib, custom_op=gemm_custom_op)
    ops = getattr(torch.ops, NAMESPACE)
    return ops.gemm_library.default, ops.gemm_custom_op.default


def dispatch_overhead_us(calls: int = 20000) -> dict[str, float]:
    """µs per call of a plain Python no-op and of the two no-op operators, on CPU tensors."""
    library_op, custom_op = noop_ops()
    t = [torch.empty(4) for _ in range(5)]
    return {
        "plain function": per_call_us(lambda: _noop(*t), calls),
        "Library op (dgx.torch_ops' way)": per_call_us(lambda: library_op(*t), calls),
        "torch.library.custom_op": per_call_us(lambda: custom_op(*t), calls),
    }


def wrapper_overhead_us(calls: int = 20000) -> dict[str, float]:
    """µs per call of dgx.torch_ops.fp8_gemm_nt against the plain function it wraps, with the plain function's
    body replaced by a no-op: the whole cost of the operator layer (pairs, dispatch, version bump)."""
    from dgx import gemm, torch_ops

    a = (torch.empty(4), torch.empty(4))
    b = (torch.empty(4), torch.empty(4))
    d = torch.empty(4)
    real = gemm.fp8_gemm_nt

    def noop(a, b, d, c=None, *, stream=None, config=None) -> None:
        return None

    gemm.fp8_gemm_nt = noop
    try:
        return {
            "plain fp8_gemm_nt (no-op body)": per_call_us(lambda: gemm.fp8_gemm_nt(a, b, d), calls),
            "dgx.torch_ops.fp8_gemm_nt (same body)": per_call_us(lambda: torch_ops.fp8_gemm_nt(a, b, d), calls),
        }
    finally:
        gemm.fp8_gemm_nt = real
