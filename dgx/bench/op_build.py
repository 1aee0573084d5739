"""Build one single-operation case's problem: the dispatch to its suite's builder (:mod:`dgx.bench.bf16_problems`,
:mod:`dgx.bench.v32_problems`)."""

from __future__ import annotations

from .bf16_suites import BF16_SUITES
from .op_problems import OpProblem
from .op_shape import OpShape


def build_op_problem(shape: OpShape, seed: int = 0, device: str = "cuda") -> OpProblem:
    """The operands and references of one case (dispatch on its suite)."""
    if shape.suite in BF16_SUITES:
        from .bf16_problems import build_bf16_problem

        return build_bf16_problem(shape, seed, device)
    from .v32_problems import build_v32_problem

    return build_v32_problem(shape, seed, device)
