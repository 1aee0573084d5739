"""How the benchmark calls dgx, one adapter per suite (the only place that knows dgx's signatures).

Every adapter returns a :class:`~dgx.bench.prepared.Prepared` whose ``run()`` makes one dgx call on the
problem's tensors. A missing dgx function is reported as unavailable, not as a failure.
"""

from __future__ import annotations

from .mqa_problems import MqaProblem
from .mqa_suites import BLOCK_KV, MQA, PAGED_MQA
from .prepared import Prepared, Unavailable
from .problems import Problem

DGX_ENTRY_POINTS: dict[str, str] = {
    "dense": "fp8_gemm_nt",
    "wgrad": "fp8_gemm_nt",
    "contiguous": "m_grouped_fp8_gemm_nt_contiguous",
    "masked": "m_grouped_fp8_gemm_nt_masked",
    "k_grouped": "k_grouped_fp8_gemm_nt_contiguous",
    MQA: "fp8_mqa_logits",
    PAGED_MQA: "fp8_paged_mqa_logits",
    "moe": "silu_mul_quant",
    "bf16": "bf16_gemm_nt",
    "bf16_masked": "m_grouped_bf16_gemm_nt_masked",
    "bf16_contiguous": "m_grouped_bf16_gemm_nt_contiguous",
    "bf16_k_grouped": "k_grouped_bf16_gemm_tn_contiguous",
    "einsum": "einsum",
    "fp8_einsum": "fp8_einsum",
    "hc_prenorm": "tf32_hc_prenorm_gemm",
    "skip_head_mid": "fp8_gemm_nt_skip_head_mid",
}
"""Suite -> the dgx function the benchmark calls for it."""

DGX_HELPERS: dict[str, tuple[str, ...]] = {
    PAGED_MQA: ("get_paged_mqa_logits_metadata", "get_num_sms"),
    "moe": ("m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_contiguous"),
    "fp8_einsum": ("fp8_gemm_nt", "get_mn_major_tma_aligned_tensor"),
    "skip_head_mid": ("fp8_gemm_nt", "get_mn_major_tma_aligned_tensor"),
}
"""Suite -> the other dgx functions its adapter needs (called outside the timed call)."""


def call_k_grouped(dgx, a, b, d, ks, ks_tensor):
    """The one call of the K-grouped weight gradient (its signature is not final: change it here).

    ``a = (A_flat, SFA)``, ``b = (B_flat, SFB)``: group g's ``A_g [M, k_g]`` / ``B_g [N, k_g]``
    K-contiguous, stored one after another; scales per 1×128 stacked along K (``SFA [M, Σk/128]``,
    ``SFB [N, Σk/128]``). ``d [G, M, N]`` FP32, accumulated into (``d[g] += A_g·B_gᵀ``).
    """
    return dgx.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor)


def _import_dgx():
    try:
        import dgx
    except Exception as e:  # noqa: BLE001 - any import failure makes dgx unavailable
        raise Unavailable(f"import dgx failed: {type(e).__name__}: {e}") from None
    return dgx


def _need(dgx, name: str):
    fn = getattr(dgx, name, None)
    if fn is None:
        raise Unavailable(f"dgx.{name} does not exist (yet)")
    return fn


def unavailable_reason(suite: str) -> str | None:
    """Why this build of dgx cannot run ``suite``, or None if it can (no GPU needed): dgx does not import,
    or lacks the suite's function (:data:`DGX_ENTRY_POINTS`)."""
    if suite not in DGX_ENTRY_POINTS:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(DGX_ENTRY_POINTS)}")
    try:
        dgx = _import_dgx()
    except Unavailable as e:
        return str(e)
    for name in (DGX_ENTRY_POINTS[suite],) + DGX_HELPERS.get(suite, ()):
        if getattr(dgx, name, None) is None:
            return f"dgx.{name} does not exist in this build"
    return None


def prepare_dgx(problem: Problem | MqaProblem) -> Prepared:
    """dgx on ``problem``, in the layout dgx takes (see :func:`~dgx.bench.problems.build_problem`)."""
    dgx = _import_dgx()
    if isinstance(problem, MqaProblem):
        return prepare_dgx_mqa(dgx, problem)
    t = problem.tensors
    s = problem.shape
    # Per-row scales in the TMA-aligned MN-major layout the kernels read as they are (converted once,
    # untimed): SFA always, SFB where B is scaled per row (the weight gradients).
    to_mn_major = getattr(dgx, "get_mn_major_tma_aligned_tensor", lambda sf: sf)
    a = (t["A"], to_mn_major(t["SFA"]))
    b = (t["B"], to_mn_major(t["SFB"]) if s.suite in ("wgrad", "k_grouped") else t["SFB"])
    d = t["D"]

    def poison():
        # NaN before the correctness run: an element left unwritten fails the check
        d.fill_(float("nan"))

    if s.suite == "dense":
        f = _need(dgx, DGX_ENTRY_POINTS["dense"])
        return Prepared(lambda: f(a, b, d), lambda: problem.valid_rows(d), reset=poison)

    if s.suite == "wgrad":
        f = _need(dgx, DGX_ENTRY_POINTS["wgrad"])

        def reset():
            d.copy_(problem.c)

        return Prepared(lambda: f(a, b, d, c=d), lambda: problem.valid_rows(d), reset=reset, includes_c=True)

    if s.suite == "contiguous":
        f = _need(dgx, DGX_ENTRY_POINTS["contiguous"])
        align_fn = getattr(dgx, "get_mk_alignment_for_contiguous_layout", None)
        if align_fn is not None and int(align_fn()) != 128:
            raise Unavailable(
                f"dgx.get_mk_alignment_for_contiguous_layout() is {align_fn()}, the benchmark builds 128-row segments"
            )
        mi = t["m_indices"]
        return Prepared(lambda: f(a, b, d, mi), lambda: problem.valid_rows(d), reset=poison)

    if s.suite == "masked":
        f = _need(dgx, DGX_ENTRY_POINTS["masked"])
        mm = t["masked_m"]
        expected = s.m
        return Prepared(lambda: f(a, b, d, mm, expected), lambda: problem.valid_rows(d), reset=poison)

    if s.suite == "k_grouped":
        _need(dgx, DGX_ENTRY_POINTS["k_grouped"])
        ks, kst = t["ks"], t["ks_tensor"]

        def reset():
            d.copy_(problem.c)

        return Prepared(
            lambda: call_k_grouped(dgx, a, b, d, ks, kst),
            lambda: problem.valid_rows(d),
            reset=reset,
            includes_c=True,
        )

    raise Unavailable(f"no dgx adapter for suite {s.suite!r}")


def prepare_dgx_mqa(dgx, problem: MqaProblem) -> Prepared:
    """dgx's MQA logits on ``problem`` (see :mod:`dgx.bench.mqa_problems`), into an output allocated here.

    Prefill: ``fp8_mqa_logits`` with ``clean_logits=True``, FP32 logits [S, S_kv]. Decode: the schedule from
    ``get_paged_mqa_logits_metadata`` is computed once, here (serving computes it once per step, in a kernel
    of its own); the timed call is ``fp8_paged_mqa_logits`` alone, with ``clean_logits=False`` (its default:
    positions past a sequence's blocks are left as they were). ``output()`` gives the checked rows.
    """
    import torch

    t = problem.tensors
    s = problem.shape
    out = torch.empty(s.rows, s.width, dtype=torch.float32, device=t["q"].device)
    rows = problem.row_index()

    def poison():
        # NaN before the correctness run: a compared position left unwritten fails the check
        out.fill_(float("nan"))

    def output():
        return out.index_select(0, rows)

    if s.suite == MQA:
        f = _need(dgx, DGX_ENTRY_POINTS[MQA])
        q, kv, w, ks, ke = t["q"], (t["kv"], t["kv_scales"]), t["weights"], t["ks"], t["ke"]
        return Prepared(lambda: f(q, kv, w, ks, ke, clean_logits=True, out=out), output, reset=poison)

    if s.suite == PAGED_MQA:
        f = _need(dgx, DGX_ENTRY_POINTS[PAGED_MQA])
        meta = _need(dgx, DGX_HELPERS[PAGED_MQA][0])
        num_sms = int(_need(dgx, DGX_HELPERS[PAGED_MQA][1])(out.device.index or 0))
        q, cache, w, lens, table = t["q"], t["kv_cache"], t["weights"], t["context_lens"], t["block_table"]
        schedule = meta(lens, BLOCK_KV, num_sms)
        width = s.max_context_len
        return Prepared(
            lambda: f(q, cache, w, lens, table, schedule, width, clean_logits=False, out=out),
            output,
            reset=poison,
            note=f"schedule from get_paged_mqa_logits_metadata({num_sms} SMs) computed once, outside the timed call",
        )

    raise Unavailable(f"no dgx adapter for suite {s.suite!r}")
