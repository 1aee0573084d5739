"""The implementations of the MoE expert block the ``moe`` suite times, each checked against the float64 reference of
its own operands before it is timed, and each timed as a whole (both GEMMs and what runs between them).

* ``dgx``               fused: GEMM1 with the SwiGLU + FP8-output epilogue (``swiglu=True``, the gate-up weight
                        converted once by ``dgx.prepare_gate_up``), then GEMM2. Unavailable, with the reason, while
                        this build's GEMMs have no ``swiglu`` keyword.
* ``dgx_unfused``       dgx GEMM1 (BF16 [rows, 2I]) -> ``dgx.silu_mul_quant`` -> dgx GEMM2.
* ``deepgemm_unfused``  DeepGEMM's own GEMMs (an ``import deep_gemm`` that is not dgx's) with ``dgx.silu_mul_quant``
                        between; unavailable where no such DeepGEMM is importable.
* ``torch_bf16``        the plain BF16 layer: ``torch.bmm`` (masked) or ``torch._grouped_mm`` (contiguous; a loop
                        of matmuls where it is missing), ``silu(gate) * up``, the second GEMM.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable

from .moe_problems import MoeProblem
from .moe_suites import MOE_SUITES
from .peers import Ctx, Peer
from .prepared import Prepared, Unavailable
from .results import DEEPGEMM_UNFUSED, DGX, DGX_UNFUSED, TORCH_BF16

FUSED_KEYWORD = "swiglu"


def fused_unavailable_reason(dgx_module: Any) -> str | None:
    """Why this dgx cannot run the fused block (None: it can): its grouped GEMMs need the ``swiglu`` keyword and
    dgx needs ``prepare_gate_up``."""
    missing = []
    for name in ("m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_contiguous"):
        f = getattr(dgx_module, name, None)
        try:
            params = inspect.signature(f).parameters if f is not None else {}
        except (TypeError, ValueError):
            params = {}
        if FUSED_KEYWORD not in params:
            missing.append(f"{name}(..., {FUSED_KEYWORD}=)")
    if not callable(getattr(dgx_module, "prepare_gate_up", None)):
        missing.append("prepare_gate_up")
    if missing:
        return f"this dgx has no fused SwiGLU epilogue yet (missing {', '.join(missing)})"
    return None


def real_deep_gemm() -> tuple[Any | None, str]:
    """(DeepGEMM's module, "") when ``import deep_gemm`` gives DeepGEMM itself, else (None, why not): not importable,
    or dgx's own drop-in (DGX_AS_DEEP_GEMM, or a module that lives inside dgx)."""
    try:
        import deep_gemm
    except Exception as e:  # noqa: BLE001 - any import failure means it is not there
        return None, f"DeepGEMM is not importable ({type(e).__name__}: {e})"
    import dgx

    where = os.path.realpath(getattr(deep_gemm, "__file__", "") or "")
    inside = os.path.dirname(os.path.realpath(dgx.__file__))
    if not where or where.startswith(inside + os.sep) or getattr(deep_gemm, "__name__", "").startswith("dgx"):
        return None, f"`import deep_gemm` gives dgx's drop-in ({where or 'no file'}), not DeepGEMM"
    return deep_gemm, ""


def _first(module: Any, *names: str) -> Callable:
    """The first of `names` `module` has; with DeepGEMM's ``disable_ue8m0_cast`` set where the function takes it (the
    benchmark's scales are FP32 values, which DeepGEMM must not round to powers of two)."""
    for name in names:
        f = getattr(module, name, None)
        if callable(f):
            try:
                takes = "disable_ue8m0_cast" in inspect.signature(f).parameters
            except (TypeError, ValueError):
                takes = False
            return functools.partial(f, disable_ue8m0_cast=True) if takes else f
    raise Unavailable(f"{getattr(module, '__name__', module)} has none of {', '.join(names)}")


class _Buffers:
    """The block's intermediate and output tensors, allocated once per case (not timed)."""

    def __init__(self, problem: MoeProblem):
        import torch

        s, t = problem.shape, problem.tensors
        lead = (s.experts, s.max_m) if s.layout == "masked" else (s.padded_m,)
        dev = t["x"].device
        self.gate_up = torch.empty(*lead, 2 * s.inter, device=dev, dtype=torch.bfloat16)
        self.out = torch.empty(*lead, s.hidden, device=dev, dtype=torch.bfloat16)


def _gemms(module: Any, problem: MoeProblem) -> tuple[Callable, Callable]:
    """(GEMM1 into a BF16 [.., 2I], GEMM2 from an FP8 (y, sf) into the BF16 output) of `module` (dgx or DeepGEMM) for
    the case's layout."""
    s, t = problem.shape, problem.tensors
    if s.layout == "masked":
        f = _first(module, "m_grouped_fp8_gemm_nt_masked", "m_grouped_gemm_fp8_fp8_bf16_nt_masked")
        masked_m, expected = t["masked_m"], s.tokens
        return (lambda a, d: f(a, t["w1_fp8"], d, masked_m, expected),
                lambda a, d: f(a, t["w2_fp8"], d, masked_m, expected))
    f = _first(module, "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous")
    m_indices = t["m_indices"]
    return lambda a, d: f(a, t["w1_fp8"], d, m_indices), lambda a, d: f(a, t["w2_fp8"], d, m_indices)


def _unfused(module: Any, problem: MoeProblem, note: str) -> Prepared:
    import dgx

    t, buf = problem.tensors, _Buffers(problem)
    gemm1, gemm2 = _gemms(module, problem)
    masked_m = t.get("masked_m")

    # y and its scales allocated once, as the fused block's are (no allocation inside the timed block)
    y, sf = dgx.silu_mul_quant(buf.gate_up, masked_m=masked_m)

    def run():
        gemm1(t["a"], buf.gate_up)
        dgx.silu_mul_quant(buf.gate_up, masked_m=masked_m, out=y, out_scales=sf)
        gemm2((y, sf), buf.out)

    return Prepared(run, lambda: problem.pick(buf.out), note=note)


def _fused(problem: MoeProblem) -> Prepared:
    import dgx
    import torch

    from ..moe_activation import scale_layout

    why = fused_unavailable_reason(dgx)
    if why:
        raise Unavailable(why)
    s, t = problem.shape, problem.tensors
    b2 = dgx.prepare_gate_up(*t["w1_fp8"])
    buf = _Buffers(problem)
    # the fused GEMM1's FP8 output and its scales, in the layout GEMM2 reads (what silu_mul_quant allocates)
    lead = buf.out.shape[:-1]
    y = torch.empty(*lead, s.inter, device=buf.out.device, dtype=torch.float8_e4m3fn)
    shape, strides = scale_layout(s.experts if s.layout == "masked" else None, lead[-1], s.inter // 128, False)
    sf = torch.empty_strided(shape, strides, device=buf.out.device, dtype=torch.float32)
    del buf.gate_up  # the fused block never holds the BF16 intermediate
    _, gemm2 = _gemms(dgx, problem)
    if s.layout == "masked":
        masked_m, expected = t["masked_m"], s.tokens

        def gemm1():
            dgx.m_grouped_fp8_gemm_nt_masked(t["a"], b2, (y, sf), masked_m, expected, swiglu=True)
    else:
        m_indices = t["m_indices"]

        def gemm1():
            dgx.m_grouped_fp8_gemm_nt_contiguous(t["a"], b2, (y, sf), m_indices, swiglu=True)

    def run():
        gemm1()
        gemm2((y, sf), buf.out)

    return Prepared(run, lambda: problem.pick(buf.out), note="GEMM1 with the fused SwiGLU + FP8 epilogue, then GEMM2")


def _torch_bf16(problem: MoeProblem) -> Prepared:
    import torch

    s, t = problem.shape, problem.tensors
    x, w1, w2 = t["x"], t["w1"], t["w2"]
    buf = _Buffers(problem)
    inter = s.inter

    def act(gate_up):
        return torch.nn.functional.silu(gate_up[..., :inter]) * gate_up[..., inter:]

    if s.layout == "masked":
        w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)

        def run():
            torch.bmm(act(torch.bmm(x, w1t)), w2t, out=buf.out)

        note = "torch.bmm over every Mmax row, silu(gate) * up in BF16, torch.bmm"
    elif hasattr(torch, "_grouped_mm"):
        offs = t["offsets"]
        w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)

        def run():
            buf.out.copy_(torch._grouped_mm(act(torch._grouped_mm(x, w1t, offs=offs)), w2t, offs=offs))

        note = "torch._grouped_mm over the padded segments, silu(gate) * up in BF16, torch._grouped_mm"
    else:
        from .moe_problems import segment_starts

        spans = list(zip(segment_starts(s), s.group_ms))

        def run():
            for g, (start, m) in enumerate(spans):
                rows = x[start:start + m]
                buf.out[start:start + m] = act(rows @ w1[g].T) @ w2[g].T

        note = f"a loop of torch.matmul per expert ({s.experts} x 2 launches)"
    return Prepared(run, lambda: problem.pick(buf.out), note=note)


class MoePeer(Peer):
    """An implementation of the expert block (the ``moe`` suite only)."""

    suites = MOE_SUITES
    bf16 = False  # checked against the reference of the BF16 originals (else of the FP8 operands)

    def build(self, problem: MoeProblem) -> Prepared:
        raise NotImplementedError

    def select(self, problem, ctx: Ctx):
        def build():
            prep = self.build(problem)
            prep.reference = "bf16" if self.bf16 else "fp8"
            return prep

        prep, diff, note = ctx.first_passing(problem, [(self.name, build)], errors_fail=self.name == DGX_UNFUSED)
        return prep, diff, "" if note == self.name else note


class DgxFused(MoePeer):
    name = DGX

    def build(self, problem):
        return _fused(problem)


class DgxUnfused(MoePeer):
    name = DGX_UNFUSED

    def build(self, problem):
        import dgx

        return _unfused(dgx, problem, "dgx GEMM1 (BF16 out), dgx.silu_mul_quant, dgx GEMM2")


class DeepGemmUnfused(MoePeer):
    name = DEEPGEMM_UNFUSED

    def build(self, problem):
        module, why = real_deep_gemm()
        if module is None:
            raise Unavailable(why)
        version = getattr(module, "__version__", "?")
        return _unfused(module, problem, f"DeepGEMM {version} GEMMs, dgx.silu_mul_quant between")


class TorchBf16(MoePeer):
    name = TORCH_BF16
    bf16 = True

    def build(self, problem):
        return _torch_bf16(problem)


def moe_impls(with_peers: bool) -> list[MoePeer]:
    """The fused block and dgx's unfused one always; DeepGEMM's and torch's with the peers."""
    impls: list[MoePeer] = [DgxFused(), DgxUnfused()]
    if with_peers:
        impls += [DeepGemmUnfused(), TorchBf16()]
    return impls
