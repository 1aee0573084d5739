"""The peers dgx is compared with, each checked correct on the same inputs before it is timed.

* ``cublaslt``   cuBLASLt with DeepSeek-style block scaling through ``torch.nn.functional.scaled_mm``
                 (``ScalingType.BlockWise1x128`` for A, scales M-major; ``BlockWise128x128`` for B,
                 scales ``(N/128, K/128)`` with K/128 padded to a multiple of 4, passed transposed).
                 Falls back to ``torch._scaled_mm`` with the blockwise scale layouts it infers. For
                 FP32-output suites: ``BlockWise1x128`` for both operands, else per-row scales over the
                 whole K (the report says which ran).
* ``triton``     a vLLM/SGLang-style blockwise FP8 Triton kernel (``triton_fp8``), best of a small
                 config sweep.
* ``bf16``       ``torch.matmul`` on the BF16 originals (BF16 out).
* ``fp8_tensor`` per-tensor FP8 cuBLASLt (``torch._scaled_mm`` with scalar scales): the speed of a
                 less precise recipe.
* ``deepgemm``   DeepGEMM itself (:mod:`dgx.bench.deepgemm`), on every suite, where a real DeepGEMM imports (never
                 dgx's own ``deep_gemm`` alias): its own API on the same tensors, converted once outside the timed
                 call where it takes another layout. A DeepGEMM call that raises or disagrees is *failed*.
* ``torch``      the MQA suites' peer (:mod:`dgx.bench.mqa_torch`): BF16 matmuls per chunk in plain torch.
                 Checked like dgx on the MQA suites (the float64 reference of a subset of rows, ``-inf``
                 positions exact); timed over fewer calls where one call is slow, and not run on the largest
                 decode cases (:data:`TORCH_MQA_MAX_PAIRS`).

Each peer runs on the suites named by its ``suites``: the GEMM peers on the GEMM suites, ``torch`` on the
MQA suites, dgx on all.

Grouped suites run the cuBLASLt, BF16 and per-tensor peers as a Python loop over groups (one launch
per group, on the valid rows only; the label says so); Triton is grouped natively for the M-grouped
layouts. Each implementation is verified with ``calc_diff < 1e-3`` against an FP32 reference built
from *its own* dequantised inputs (the problem's FP8 inputs, or the BF16 originals for BF16, or its
per-tensor / per-row requantised inputs). A peer that cannot run is *unavailable* with the reason; one
that runs but disagrees is *failed* with its ``calc_diff``; neither is timed, both are reported.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ..intmath import round_up
from .mqa_check import LogitsMismatch
from .mqa_problems import MqaProblem
from .moe_problems import MoeProblem
from .op_problems import CheckFailed, OpProblem
from .mqa_suites import MQA, MQA_SUITES, PAGED_MQA
from .prepared import Prepared, Unavailable
from .problems import Part, Problem, calc_diff, dequant_block, dequant_token, matmul_fp32, per_row_cast, per_tensor_cast
from .results import (
    BF16,
    CUBLASLT,
    DEEPGEMM,
    DGX,
    FAILED,
    FP8_TENSOR,
    NOT_RUN,
    OK,
    TORCH_MQA,
    TRITON,
    UNAVAILABLE,
    ImplResult,
)
from .suites import GEMM_SUITES, SUITES
from .timers import EVENTS, timer_function
from .timing import ITERS, WARMUP, Timing

DIFF_TOL = 1e-3

TORCH_MQA_MAX_PAIRS = 1 << 25
"""The torch MQA peer is not run on decode cases with more query-key pairs than this (B = 1024 at 65536
tokens: 64 and 128 M pairs, 50-100 ms a call and several GB of scores per chunk)."""
SLOW_CALL_US = 5000.0
"""A peer whose first timed call takes longer than this is timed over :data:`SLOW_WARMUP` warm-ups and
:data:`SLOW_ITERS` calls."""
SLOW_WARMUP = 1
SLOW_ITERS = 5


class Outcome(Exception):
    """Selection ended without a runnable, verified implementation."""

    def __init__(self, status: str, reason: str, diff: float | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.diff = diff


class Ctx:
    """Verification and timing shared by dgx and the peers."""

    def __init__(self, flush, warmup: int = WARMUP, iters: int = ITERS, tol: float = DIFF_TOL, timer: str = EVENTS):
        self.flush = flush
        self.warmup = warmup
        self.iters = iters
        self.tol = tol
        self.timer = timer
        self._time = timer_function(timer)  # validates the name

    def verify(self, problem: Problem, prep: Prepared) -> float:
        """Run once from a clean state and return ``calc_diff`` against the reference (inf if non-finite)."""
        import torch

        prep.reset()
        prep.run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        out = prep.output()
        if isinstance(problem, MqaProblem):
            try:
                return problem.check(out)
            except LogitsMismatch as e:
                raise Outcome(FAILED, str(e)) from None
        if isinstance(problem, MoeProblem):  # the checked rows against the reference of the impl's own operands
            try:
                return problem.check(out, bf16=prep.reference == "bf16")
            except ValueError as e:
                raise Outcome(FAILED, str(e)) from None
        if isinstance(problem, OpProblem):  # against the reference of the impl's own layout (a name, or the main one)
            try:
                return problem.check(out, prep.reference)
            except CheckFailed as e:
                raise Outcome(FAILED, str(e)) from None
        ref = prep.reference if prep.reference is not None else problem.ref
        if prep.includes_c:
            ref = ref + problem.c_rows
        if tuple(out.shape) != tuple(ref.shape):
            raise Outcome(FAILED, f"output rows/cols {tuple(out.shape)} != reference {tuple(ref.shape)}")
        if not bool(torch.isfinite(out).all()):
            return math.inf
        return calc_diff(out, ref)

    def time(self, fn, warmup: int | None = None, iters: int | None = None) -> Timing:
        """``fn`` timed with the context's timer (``events`` or ``kernel``, :mod:`dgx.bench.timers`)."""
        return self._time(fn, self.flush, self.warmup if warmup is None else warmup, self.iters if iters is None else iters)

    def first_passing(
        self, problem: Problem, candidates: list[tuple[str, Callable[[], Prepared]]], errors_fail: bool = False
    ) -> tuple[Prepared, float, str]:
        """The first candidate that builds, runs and verifies: ``(prepared, diff, note)``.

        Exceptions while building or calling make a candidate unavailable (``errors_fail``: failed);
        a wrong answer makes it failed. Raises :class:`Outcome` when none passes.
        """
        reasons: list[str] = []
        ran_wrong = False
        worst: float | None = None
        errored = False
        for label, build in candidates:
            try:
                prep = build()
                diff = self.verify(problem, prep)
            except Unavailable as e:
                reasons.append(f"{label}: {e}")
                continue
            except Outcome as e:
                reasons.append(f"{label}: {e.reason}")
                ran_wrong = True
                continue
            except Exception as e:  # noqa: BLE001 - report, never crash the run
                reasons.append(f"{label}: {type(e).__name__}: {_one_line(e)}")
                errored = True
                continue
            if not diff < self.tol:
                reasons.append(f"{label}: calc_diff {diff:.3g} >= {self.tol:g}")
                ran_wrong = True
                worst = diff if worst is None else max(worst, diff)
                continue
            prep.reference = None  # free the reference copy before timing
            prep.tried = reasons
            return prep, diff, prep.note or label
        status = FAILED if (ran_wrong or (errored and errors_fail)) else UNAVAILABLE
        raise Outcome(status, "; ".join(reasons) or "no candidate", worst)


def _one_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------------
# helpers


def _looped(problem: Problem, make: Callable[[Part], tuple], note: str) -> Prepared:
    """One call per part (group).

    ``make(part)`` returns ``(fn, ref)`` or ``(fn, ref, rows)``: ``fn()`` returns the part's output,
    ``ref`` is its own FP32 reference (or None for the problem's), ``rows`` how many leading output
    rows are valid (for padded operands; None: all).
    """
    import torch

    fns, refs, keep = [], [], []
    for p in problem.parts:
        made = make(p)
        fns.append(made[0])
        refs.append(made[1])
        keep.append(made[2] if len(made) > 2 else None)
    outs: list[Any] = [None] * len(fns)

    if len(fns) == 1:
        f0 = fns[0]

        def run():
            outs[0] = f0()

    else:

        def run():
            for i, f in enumerate(fns):
                outs[i] = f()

    def output():
        parts = [(o if r is None else o[:r]).float() for o, r in zip(outs, keep)]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    own = None
    if any(r is not None for r in refs):
        own = torch.cat(refs) if len(refs) > 1 else refs[0]
    if len(fns) > 1:
        note += f", per-group loop ({len(fns)} launches)"
    return Prepared(run, output, reference=own, note=note)


def _m_major(s):
    """``(rows, cols)`` scales with strides ``(1, rows)`` (column-major / M-major)."""
    return s.t().contiguous().t()


# --------------------------------------------------------------------------------------------------
# peers


class Peer:
    name = ""
    suites: tuple[str, ...] = GEMM_SUITES
    """The suites this implementation runs on."""

    def runs_on(self, suite: str) -> bool:
        return suite in self.suites

    def select(self, problem: Problem, ctx: Ctx) -> tuple[Prepared, float, str]:
        raise NotImplementedError

    def timing_plan(self, prep: Prepared, ctx: Ctx) -> tuple[int | None, int | None, str]:
        """(warm-ups, timed calls, note) for a verified implementation; None: the context's defaults."""
        return None, None, ""

    def kernel_note(self, kernels: list[str]) -> str:
        """What the report says of the GPU activities the kernel timer summed for one call (none: events timer)."""
        return f"kernel timer: {len(kernels)} GPU activities a call, summed" if len(kernels) > 1 else ""

    def measure(self, problem: Problem, ctx: Ctx) -> ImplResult:
        try:
            prep, diff, note = self.select(problem, ctx)
        except Outcome as o:
            return ImplResult(self.name, o.status, o.reason, diff=o.diff, tolerance=ctx.tol)
        except Unavailable as e:
            return ImplResult(self.name, UNAVAILABLE, str(e), tolerance=ctx.tol)
        try:
            warmup, iters, how = self.timing_plan(prep, ctx)
            t = ctx.time(prep.run, warmup, iters)
        except Exception as e:  # noqa: BLE001
            return ImplResult(self.name, FAILED, f"timing raised {type(e).__name__}: {_one_line(e)}", diff=diff)
        how = "; ".join(x for x in (how, self.kernel_note(t.kernels)) if x)
        if how:
            note = f"{note}; {how}" if note else how
        return ImplResult(
            self.name,
            OK,
            "",
            t.median_us,
            t.min_us,
            t.max_us,
            diff,
            ctx.tol,
            note,
            prep.config,
            [round(x, 3) for x in t.samples_us],
            list(prep.tried),
        )


class DgxImpl(Peer):
    name = DGX
    suites = GEMM_SUITES + MQA_SUITES  # the moe suite's implementations: dgx.bench.moe_impls

    def select(self, problem, ctx):
        from .subject import prepare_dgx

        prep, diff, note = ctx.first_passing(problem, [("dgx", lambda: prepare_dgx(problem))], errors_fail=True)
        return prep, diff, "" if note == "dgx" else note


class DeepGemm(Peer):
    """DeepGEMM itself, found by :func:`dgx.bench.deepgemm.find_deep_gemm` (never dgx's alias)."""

    name = DEEPGEMM
    # the GEMM and MQA suites; the MoE block times DeepGEMM's GEMMs as its own impl (deepgemm_unfused)
    suites = GEMM_SUITES + MQA_SUITES

    def __init__(self, info):
        self.info = info  # a found dgx.bench.deepgemm.DeepGemmInfo

    def select(self, problem, ctx):
        from .deepgemm import prepare_deepgemm

        label = f"DeepGEMM {self.info.version or ''}".strip()
        return ctx.first_passing(problem, [(label, lambda: prepare_deepgemm(self.info.module, problem))],
                                 errors_fail=True)

    def kernel_note(self, kernels):
        if not kernels:
            return ""
        return f"kernel timer: {len(kernels)} GPU activities a call, summed ({', '.join(kernels)})"


class CublasLt(Peer):
    """cuBLASLt blockwise (BF16 out) or FP32-out blockwise / per-row (weight-gradient suites)."""

    name = CUBLASLT

    def select(self, problem, ctx):
        import torch

        F = torch.nn.functional
        fp32 = problem.out_dtype == torch.float32
        have_v2 = hasattr(F, "scaled_mm") and hasattr(F, "ScalingType")
        cands: list[tuple[str, Callable[[], Prepared]]] = []
        # cuBLASLt refuses (CUBLAS_STATUS_NOT_SUPPORTED) some row counts with blockwise scales, e.g.
        # a group's 9615 rows: then the group's A is padded with zero rows (not timed; the padded
        # rows' outputs are dropped) and the note says so.
        aligned = all(p.a.shape[0] % 16 == 0 for p in problem.parts)
        pads = (0,) if aligned else (0, 16, 128)

        def add(label, api, pad_k, pad_m):
            suffix = f", M padded to x{pad_m}" if pad_m else ""
            cands.append((label + suffix, lambda: self._blockwise(problem, api, pad=pad_k, pad_m=pad_m)))

        if not fp32:
            kb = problem.parts[0].sfb.shape[1]
            if have_v2:
                for pm in pads:
                    add("F.scaled_mm 1x128/128x128", "v2", True, pm)
                if kb % 4:
                    add("F.scaled_mm 1x128/128x128 unpadded", "v2", False, 0)
            else:
                cands.append(("F.scaled_mm", lambda: _raise(Unavailable("torch.nn.functional.scaled_mm is missing"))))
            for pm in pads:
                add("torch._scaled_mm blockwise", "v1", False, pm)
        else:
            if have_v2:
                for pm in pads:
                    add("F.scaled_mm 1x128/1x128 FP32 out", "v2", False, pm)
            for pm in pads:
                add("torch._scaled_mm 1x128/1x128 FP32 out", "v1", False, pm)
            cands.append(("torch._scaled_mm per-row over whole K, FP32 out", lambda: self._rowwise(problem)))
        return ctx.first_passing(problem, cands)

    @staticmethod
    def _blockwise(problem: Problem, api: str, pad: bool, pad_m: int = 0) -> Prepared:
        import torch

        F = torch.nn.functional
        out_dtype = problem.out_dtype

        def make(p: Part):
            a, sfa, rows = p.a.contiguous(), p.sfa, None
            m = a.shape[0]
            if pad_m and m % pad_m:
                mp = round_up(m, pad_m)
                a = torch.zeros(mp, a.shape[1], dtype=a.dtype, device=a.device)
                a[:m] = p.a
                sfa = torch.ones(mp, p.sfa.shape[1], dtype=torch.float32, device=a.device)
                sfa[:m] = p.sfa
                rows = m
            mat_b = p.b.contiguous().t()  # (K, N), column-major
            sa = _m_major(sfa)  # (m, kb) strides (1, m)
            block = p.b_scale == "block"
            if api == "v2":
                ST = F.ScalingType
                if block:
                    nb, kb = p.sfb.shape
                    kbp = round_up(kb, 4) if pad else kb
                    sfb = torch.zeros(nb, kbp, dtype=torch.float32, device=p.sfb.device)
                    sfb[:, :kb] = p.sfb
                    sb = sfb.t()  # (kbp, nb) strides (1, kbp)
                    rb = ST.BlockWise128x128
                else:
                    sb = _m_major(p.sfb)  # (N, kb) strides (1, N)
                    rb = ST.BlockWise1x128
                ra = ST.BlockWise1x128
                return (lambda: F.scaled_mm(a, mat_b, sa, ra, sb, rb, output_dtype=out_dtype)), None, rows
            # legacy torch._scaled_mm infers the recipe from the scale shapes and strides
            if block:
                sb = p.sfb.contiguous().t()  # (kb, nb) strides (1, kb)
            else:
                sb = p.sfb.t().contiguous()  # (kb, N) contiguous: its .t() is (N, kb) strides (1, N)
            return (lambda: torch._scaled_mm(a, mat_b, sa, sb, out_dtype=out_dtype)), None, rows

        if api == "v2":
            note = "F.scaled_mm BlockWise1x128/" + ("BlockWise128x128" if problem.parts[0].b_scale == "block" else "BlockWise1x128")
            if problem.parts[0].b_scale == "block":
                note += " (B scales K/128 padded to x4)" if pad else " (B scales unpadded)"
        else:
            note = "torch._scaled_mm blockwise (recipe inferred from scale layouts)"
        if pad_m and any(p.a.shape[0] % pad_m for p in problem.parts):
            note += f", groups' rows padded to x{pad_m} (cuBLASLt refused the unpadded counts)"
        if out_dtype == torch.float32:
            note += ", FP32 out, without the +c"
        return _looped(problem, make, note)

    @staticmethod
    def _rowwise(problem: Problem) -> Prepared:
        import torch

        def make(p: Part):
            a_dq = dequant_token(p.a, p.sfa)
            b_dq = dequant_token(p.b, p.sfb) if p.b_scale == "row" else dequant_block(p.b, p.sfb)
            qa, sa = per_row_cast(a_dq)  # (m, 1)
            qb, sb = per_row_cast(b_dq)  # (N, 1)
            sb_t = sb.t().contiguous()  # (1, N)
            ref = matmul_fp32(qa.float() * sa, qb.float() * sb)
            mat_b = qb.t()
            return (lambda: torch._scaled_mm(qa, mat_b, sa, sb_t, out_dtype=torch.float32)), ref

        return _looped(problem, make, "torch._scaled_mm per-row scales over the whole K (blockwise unavailable), FP32 out, without the +c")


class Bf16(Peer):
    name = BF16

    def select(self, problem, ctx):
        import torch

        def build():
            def make(p: Part):
                a, b = p.a16.contiguous(), p.b16.contiguous()
                return (lambda: torch.matmul(a, b.t())), matmul_fp32(a, b)

            return _looped(problem, make, "torch.matmul on the BF16 originals, BF16 out")

        return ctx.first_passing(problem, [("torch.matmul bf16", build)])


class Fp8PerTensor(Peer):
    name = FP8_TENSOR

    def select(self, problem, ctx):
        import torch

        out_dtype = problem.out_dtype

        def build():
            def make(p: Part):
                qa, sa = per_tensor_cast(p.a16)
                qb, sb = per_tensor_cast(p.b16)
                ref = matmul_fp32(qa.float() * sa, qb.float() * sb)
                mat_b = qb.t()
                return (lambda: torch._scaled_mm(qa, mat_b, sa, sb, out_dtype=out_dtype)), ref

            note = "torch._scaled_mm per-tensor scales (requantised BF16 originals)"
            if out_dtype == torch.float32:
                note += ", FP32 out, without the +c"
            return _looped(problem, make, note)

        return ctx.first_passing(problem, [("torch._scaled_mm per-tensor", build)])


class Triton(Peer):
    """Blockwise FP8 Triton kernel, best of a config sweep (the best config is kept across repeats)."""

    name = TRITON

    def __init__(self):
        self.best: dict[tuple, Any] = {}

    def select(self, problem, ctx):
        try:
            from . import triton_fp8
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"triton not importable: {type(e).__name__}: {_one_line(e)}") from None
        key = (problem.shape.suite, problem.shape.label, problem.shape.group_ms, problem.shape.group_ks)
        configs = [self.best[key]] if key in self.best else triton_fp8.configs_for(problem.shape)
        reasons: list[str] = []
        best = None
        ran_wrong = False
        worst = None
        for cfg in configs:
            label = triton_fp8.config_label(cfg)
            try:
                prep = triton_fp8.prepare(problem, cfg)
                diff = ctx.verify(problem, prep)
            except Exception as e:  # noqa: BLE001
                reasons.append(f"{label}: {type(e).__name__}: {_one_line(e, 160)}")
                continue
            if not diff < ctx.tol:
                reasons.append(f"{label}: calc_diff {diff:.3g}")
                ran_wrong = True
                worst = diff if worst is None else max(worst, diff)
                continue
            if len(configs) > 1:
                try:
                    t = ctx.time(prep.run, warmup=2, iters=10).median_us
                except Exception as e:  # noqa: BLE001 - e.g. the kernel timer lost its records: next config
                    reasons.append(f"{label}: timing raised {type(e).__name__}: {_one_line(e, 160)}")
                    continue
            else:
                t = 0.0
            if best is None or t < best[0]:
                best = (t, cfg, prep, diff)
        if best is None:
            raise Outcome(FAILED if ran_wrong else UNAVAILABLE, "; ".join(reasons) or "no config", worst)
        _, cfg, prep, diff = best
        self.best[key] = cfg
        n_ok = len(configs) - len(reasons)
        sweep = f"best of {n_ok}/{len(configs)} configs" if len(configs) > 1 else "config from the first repeat's sweep"
        prep.config = f"{triton_fp8.config_label(cfg)} ({sweep})"
        if reasons and len(configs) > 1:
            prep.config += f"; rejected: {'; '.join(reasons)}"
        return prep, diff, prep.note


class TorchMqa(Peer):
    """The MQA suites' peer: plain torch, BF16 matmuls per chunk (:mod:`dgx.bench.mqa_torch`)."""

    name = TORCH_MQA
    suites = MQA_SUITES

    def __init__(self, max_pairs: int = TORCH_MQA_MAX_PAIRS):
        self.max_pairs = max_pairs

    def select(self, problem, ctx):
        from . import mqa_torch

        s = problem.shape
        if s.suite == PAGED_MQA and s.pairs > self.max_pairs:
            raise Outcome(
                NOT_RUN,
                f"not timed: {s.pairs / 2**20:.0f} M query-key pairs, over the {self.max_pairs / 2**20:.0f} M the "
                "torch reference is run on (it would take 50 ms or more a call)",
            )
        t = problem.tensors
        out: list = [None]
        rows = problem.row_index()

        if s.suite == MQA:
            q, kv, sc, w, ks, ke = t["q"], t["kv"], t["kv_scales"], t["weights"], t["ks"], t["ke"]

            def run():
                out[0] = mqa_torch.prefill_logits(q, kv, sc, w, ks, ke)

            note = (f"BF16 einsum per {mqa_torch.prefill_chunk(s.heads, s.seq_len_kv)} queries on keys dequantised "
                    "to BF16 once per call, FP32 ReLU/weights/sum, -inf outside the windows")
        else:
            q, cache, w, lens, table = t["q"], t["kv_cache"], t["weights"], t["context_lens"], t["block_table"]
            host_lens, width = list(problem.context_lens), s.max_context_len

            def run():
                out[0] = mqa_torch.paged_logits(q, cache, w, lens, table, host_lens, width)

            chunk = mqa_torch.paged_chunk(s.heads, s.next_n, s.dim, width)
            note = (f"per {chunk} sequences: blocks gathered through the block table and dequantised to BF16, BF16 "
                    "einsum, FP32 ReLU/weights/sum, -inf past each query's limit")

        def build() -> Prepared:
            return Prepared(run, lambda: out[0].index_select(0, rows), note=note)

        return ctx.first_passing(problem, [("torch reference", build)])

    def timing_plan(self, prep, ctx):
        first = ctx.time(prep.run, warmup=0, iters=1).median_us
        if first <= SLOW_CALL_US:
            return None, None, ""
        warmup, iters = min(ctx.warmup, SLOW_WARMUP), min(ctx.iters, SLOW_ITERS)
        return warmup, iters, f"timed over {iters} calls after {warmup} warm-up ({first / 1e3:.0f} ms a call)"


def _raise(e: Exception):
    raise e


def make_impls(with_peers: bool, deep_gemm=None) -> list[Peer]:
    """dgx first, then the peers (in report order); each runs on the suites its ``runs_on`` accepts. ``deep_gemm``:
    a :class:`~dgx.bench.deepgemm.DeepGemmInfo`; DeepGEMM is a peer (right after dgx) where it found one."""
    impls: list[Peer] = [DgxImpl()]
    if with_peers:
        if deep_gemm is not None and deep_gemm.found:
            impls.append(DeepGemm(deep_gemm))
        impls += [CublasLt(), Triton(), Bf16(), Fp8PerTensor(), TorchMqa()]
    return impls


def impl_order(impls: list[Peer], round_index: int) -> list[Peer]:
    """The order the implementations run in on each case of round (repeat) ``round_index``: dgx and DeepGEMM swap
    places from one round to the next (dgx first in even rounds, DeepGEMM in odd ones), so neither always runs on
    the GPU state the other leaves; the other peers keep their places."""
    order = list(impls)
    names = [impl.name for impl in order]
    if round_index % 2 and DGX in names and DEEPGEMM in names:
        i, j = names.index(DGX), names.index(DEEPGEMM)
        order[i], order[j] = order[j], order[i]
    return order
