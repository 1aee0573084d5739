"""The single-operation suites of this round's families, together: BF16 GEMMs (:mod:`dgx.bench.bf16_suites`) and
issue 39's einsums, HC pre-norm GEMM and skip-head-mid (:mod:`dgx.bench.v32_suites`). Pure Python."""

from __future__ import annotations

from .bf16_suites import BF16_SUITES, builtin_bf16_suite
from .op_shape import OpShape
from .v32_suites import V32_SUITES, builtin_v32_suite

OP_SUITES = BF16_SUITES + V32_SUITES
"""Suite names, in the order ``--suite all`` runs them (after the MoE block)."""


def builtin_op_suite(suite: str) -> list[OpShape]:
    """The fixed cases of one single-operation suite."""
    if suite in BF16_SUITES:
        return builtin_bf16_suite(suite)
    if suite in V32_SUITES:
        return builtin_v32_suite(suite)
    raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(OP_SUITES)}")
