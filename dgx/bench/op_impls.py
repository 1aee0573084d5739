"""The implementations of the single-operation suites (BF16 GEMMs, einsums, the HC pre-norm GEMM, skip-head-mid) as
the runner's peers: which runs on which suite, and how each is built (:mod:`dgx.bench.bf16_impls`,
:mod:`dgx.bench.v32_impls`)."""

from __future__ import annotations

from typing import Callable

from . import bf16_impls as B
from . import v32_impls as V
from .bf16_suites import BF16, BF16_CONTIGUOUS, BF16_K_GROUPED, BF16_MASKED, BF16_SUITES
from .op_problems import OpProblem
from .op_suites import OP_SUITES
from .peers import Ctx, Peer
from .prepared import Prepared, Unavailable
from .results import BF16 as CUBLAS_BF16
from .results import (CUBLAS_LOOP, DEEPGEMM, DGX, FP8_GEMM_COPY, FP8_GEMM_NT, GEMM_LOOP, TORCH_EINSUM, TORCH_FP32,
                      TORCH_GROUPED)
from .v32_suites import EINSUM, FP8_EINSUM, HC_PRENORM, SKIP_HEAD_MID


class OpImpl(Peer):
    """One implementation: per suite it runs on, the function that builds it for a case."""

    def __init__(self, name: str, builders: dict[str, Callable[[OpProblem], Prepared]], errors_fail: bool = False):
        self.name = name
        self.builders = builders
        self.suites = tuple(s for s in OP_SUITES if s in builders)
        self.errors_fail = errors_fail  # dgx: an exception is a failure, not "unavailable"

    def select(self, problem, ctx: Ctx):
        build = self.builders[problem.shape.suite]
        prep, diff, note = ctx.first_passing(problem, [(self.name, lambda: build(problem))],
                                             errors_fail=self.errors_fail)
        return prep, diff, "" if note == self.name else note


def _deepgemm_builder(info) -> Callable[[OpProblem], Prepared]:
    def build(problem: OpProblem) -> Prepared:
        if info is None or not info.found:
            raise Unavailable(getattr(info, "reason", "") or "DeepGEMM is not importable")
        label = f"DeepGEMM {info.version or ''}".strip()
        prep = B.prepare_module(info.module, problem, label)
        prep.note = "; ".join(x for x in (f"{label}'s {B.DGX_FUNCTIONS[problem.shape.suite]}", prep.note) if x)
        return prep

    return build


def op_impls(with_peers: bool, deep_gemm=None) -> list[OpImpl]:
    """dgx on every single-operation suite; with the peers: DeepGEMM's BF16 GEMMs (where ``deep_gemm``, a
    :class:`~dgx.bench.deepgemm.DeepGemmInfo`, found one), cuBLAS, the grouped peers, torch's einsums, the per-head
    GEMM loop, the FP32 pre-norm and the plain FP8 GEMM (with and without the copies)."""
    dgx_builders = {s: B.prepare_dgx for s in BF16_SUITES}
    dgx_builders.update({s: V.prepare_dgx for s in (EINSUM, FP8_EINSUM, HC_PRENORM, SKIP_HEAD_MID)})
    impls = [OpImpl(DGX, dgx_builders, errors_fail=True)]
    if not with_peers:
        return impls
    if deep_gemm is not None and deep_gemm.found:
        impls.append(OpImpl(DEEPGEMM, {s: _deepgemm_builder(deep_gemm) for s in BF16_SUITES}, errors_fail=True))
    impls += [
        OpImpl(CUBLAS_BF16, {BF16: B.prepare_cublas}),
        OpImpl(TORCH_GROUPED, {BF16_MASKED: B.prepare_grouped, BF16_CONTIGUOUS: B.prepare_grouped}),
        OpImpl(CUBLAS_LOOP, {BF16_K_GROUPED: B.prepare_k_grouped_loop}),
        OpImpl(TORCH_EINSUM, {EINSUM: V.prepare_torch_einsum, FP8_EINSUM: V.prepare_torch_einsum}),
        OpImpl(GEMM_LOOP, {FP8_EINSUM: V.prepare_gemm_loop}),
        OpImpl(TORCH_FP32, {HC_PRENORM: V.prepare_hc_torch}),
        OpImpl(FP8_GEMM_NT, {SKIP_HEAD_MID: V.prepare_fp8_gemm}),
        OpImpl(FP8_GEMM_COPY, {SKIP_HEAD_MID: V.prepare_gemm_copy}),
    ]
    return impls
