"""The inputs and references of one single-operation case, and the check every implementation passes before it is
timed (torch; the GPU in the benchmark, the CPU in tests).

A problem holds its tensors and one or more references (float64 where the device scripts used float64, FP32 with
TF32 off for the BF16 einsums, as their script does), each under a name: an implementation whose output is laid out
differently (the plain FP8 GEMM next to skip-head-mid) is compared with the reference of its own layout. The check:
no NaN or inf, the normwise relative error ``|out - ref| / |ref|`` within the problem's tolerance (BF16 output 3e-3,
FP32 output 1e-4, or the case's own), and ``calc_diff`` (docs/METHOD.md), which the report records.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .op_shape import OpShape
from .problems import calc_diff

MAIN = "main"
"""The name of a problem's reference unless an implementation names another."""
BF16_TOL = 3e-3
FP32_TOL = 1e-4


class CheckFailed(ValueError):
    """An implementation's output is not within the tolerance of its reference (the message says by how much)."""


def default_tolerance(shape: OpShape) -> float:
    return FP32_TOL if shape.out_dtype == "float32" else BF16_TOL


def rel_error(out, ref) -> float:
    """Normwise relative error of ``out`` against ``ref`` in float64 (inf where ``out`` is not finite)."""
    import torch

    if not bool(torch.isfinite(out).all()):
        return math.inf
    ref = ref.double()
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


@dataclasses.dataclass
class OpProblem:
    """One case: its operands (``tensors``), its references by name (``refs``) and the check's tolerance."""

    shape: OpShape
    tensors: dict[str, Any]
    refs: dict[str, Any]
    tolerance: float
    tolerances: dict[str, float] = dataclasses.field(default_factory=dict)  # a reference's own, where it differs

    def check(self, out, reference: str | None = None) -> float:
        """``calc_diff`` of ``out`` against the named reference (:data:`MAIN` by default); inf where ``out`` holds
        NaN or inf. Raises :class:`CheckFailed` where the shapes differ or the normwise relative error is over the
        tolerance."""
        name = reference or MAIN
        if name not in self.refs:
            raise CheckFailed(f"no reference {name!r}; this case has {', '.join(self.refs)}")
        ref = self.refs[name]
        tol = self.tolerances.get(name, self.tolerance)
        if isinstance(ref, tuple):  # several outputs (the HC pre-norm GEMM's d and s): each checked on its own
            if not isinstance(out, tuple) or len(out) != len(ref):
                raise CheckFailed(f"expected {len(ref)} outputs, got {type(out).__name__}")
            return max(self._check_one(o, r, tol) for o, r in zip(out, ref))
        return self._check_one(out, ref, tol)

    def _check_one(self, out, ref, tol: float) -> float:
        if tuple(out.shape) != tuple(ref.shape):
            raise CheckFailed(f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
        err = rel_error(out, ref)
        if math.isinf(err):
            return math.inf
        if not err <= tol:
            raise CheckFailed(f"normwise relative error {err:.3g} against the float64 reference > {tol:g}")
        return calc_diff(out.double(), ref.double())

    def free(self) -> None:
        self.tensors.clear()
        self.refs.clear()
