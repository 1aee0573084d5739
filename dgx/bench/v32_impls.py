"""The implementations issue 39's suites time, each checked against its float64 reference before it is timed.

``einsum``         ``dgx``: ``dgx.einsum``; ``torch_einsum``: the plain torch way (``bmk,bnk->mn`` as
                   :func:`dgx.families.einsum_torch.torch_einsum` runs it, the S batch folded into K, one cuBLAS
                   product; the per-head forms ``torch.einsum``, cuBLAS batched over the heads, its own output).
``fp8_einsum``     ``dgx``: ``dgx.fp8_einsum('bhr,hdr->bhd')``; ``gemm_loop``: ``dgx.fp8_gemm_nt`` once per head on
                   strided views (each head's scales converted ahead, untimed); ``torch_einsum``: ``torch.einsum`` on
                   the BF16 originals (checked against their own float64 reference).
``hc_prenorm``     ``dgx``: ``dgx.tf32_hc_prenorm_gemm`` (with splits: the partial sums added outside the timed call,
                   for the check); ``torch_fp32``: ``a.float() @ b.T`` (TF32 allowed) plus ``a.float().square().sum(-1)``.
``skip_head_mid``  ``dgx``: ``dgx.fp8_gemm_nt_skip_head_mid``; ``fp8_gemm_nt``: ``dgx.fp8_gemm_nt`` on the same shape
                   (unpadded output, checked against its own reference); ``fp8_gemm_copy``: ``dgx.fp8_gemm_nt``, then
                   the copies into the padded layout.

:func:`head_loop`, :func:`hc_torch` and :func:`gemm_then_copy` are the peers' calls, shared with the device scripts.
"""

from __future__ import annotations

from typing import Any, Callable

from .op_problems import OpProblem
from .prepared import Prepared, Unavailable
from .v32_problems import BF16_PRODUCT_REF, BF16_REF, PLAIN_REF
from .v32_suites import BHR_EXPR, EINSUM, FP8_EINSUM, HC_PRENORM, SKIP_HEAD_MID, SUM_EXPR

DGX_FUNCTIONS = {
    EINSUM: "einsum",
    FP8_EINSUM: "fp8_einsum",
    HC_PRENORM: "tf32_hc_prenorm_gemm",
    SKIP_HEAD_MID: "fp8_gemm_nt_skip_head_mid",
}
"""Suite -> the dgx function it times."""


def _dgx():
    try:
        import dgx
    except Exception as e:  # noqa: BLE001
        raise Unavailable(f"import dgx failed: {type(e).__name__}: {e}") from None
    return dgx


def _need(module, name: str):
    f = getattr(module, name, None)
    if not callable(f):
        raise Unavailable(f"dgx.{name} does not exist in this build")
    return f


def _nan(t):
    return lambda: t.fill_(float("nan"))


# ---- the peers' calls (shared with the device scripts) -----------------------------------------------------------


def head_loop(dgx, xs, ys, z) -> Callable[[], None]:
    """``bhr,hdr->bhd`` as ``dgx.fp8_gemm_nt`` once per head on strided views of x and z, each head's scales
    converted to the M-major layout here (ahead of any timing)."""
    (xq, sfx), (yq, sfy) = xs, ys
    heads = [((xq[:, i, :], dgx.get_mn_major_tma_aligned_tensor(sfx[:, i, :].contiguous())), (yq[i], sfy[i]))
             for i in range(xq.shape[1])]
    outs = [z[:, i, :] for i in range(xq.shape[1])]

    def run():
        for (a, b), out in zip(heads, outs):
            dgx.fp8_gemm_nt(a, b, out)

    return run


def hc_torch(a, b) -> Callable[[], tuple[Any, Any]]:
    """The pre-norm GEMM the plain way: ``a.float() @ b.T`` with TF32 allowed (set for the call only) and the rows'
    sums of squares."""
    import torch

    def run():
        matmul = torch.backends.cuda.matmul
        prev = matmul.allow_tf32
        matmul.allow_tf32 = True
        try:
            af = a.float()
            return af @ b.T, af.square().sum(-1)
        finally:
            matmul.allow_tf32 = prev

    return run


def gemm_then_copy(dgx, a, b, d, head_splits, tmp) -> Callable[[], None]:
    """``dgx.fp8_gemm_nt`` into ``tmp`` [M, N], then each head's left and right columns copied into the padded
    ``d`` [M, heads × (left + mid + right)]."""
    left, mid, _ = head_splits
    m = d.shape[0]
    v = d.view(m, tmp.shape[1] // (head_splits[0] + head_splits[2]), -1)
    t = tmp.view(m, v.shape[1], -1)

    def run():
        dgx.fp8_gemm_nt(a, b, tmp)
        v[:, :, :left].copy_(t[:, :, :left])
        v[:, :, left + mid:].copy_(t[:, :, left:])

    return run


# ---- dgx ---------------------------------------------------------------------------------------------------------


def _poison_padded(d, head_splits):
    """NaN in every column the call writes, zeros in the mid columns it leaves (the reference holds zeros there)."""
    left, mid, right = head_splits

    def reset():
        d.fill_(float("nan"))
        d.view(d.shape[0], -1, left + mid + right)[:, :, left:left + mid].zero_()

    return reset


def prepare_dgx(problem: OpProblem) -> Prepared:
    import torch

    dgx = _dgx()
    s, t = problem.shape, problem.tensors
    f = _need(dgx, DGX_FUNCTIONS[s.suite])
    if s.suite == EINSUM:
        a, b, c = t["a"], t["b"], t.get("c")
        if s.form == SUM_EXPR:
            dtype = torch.float32 if s.out_dtype == "float32" else torch.bfloat16
            d = torch.empty(s.m, s.n, device=a.device, dtype=dtype)
        else:
            z = s.dim("d") if s.form == BHR_EXPR else s.dim("r")
            d = torch.empty(s.dim("b"), s.dim("h"), z, device=a.device, dtype=torch.bfloat16)
        run = (lambda: f(s.form, a, b, d, c)) if c is not None else (lambda: f(s.form, a, b, d))
        return Prepared(run, lambda: d.float(), reset=_nan(d))
    if s.suite == FP8_EINSUM:
        xs, ys = t["xs"], t["ys"]
        z = torch.empty(s.dim("b"), s.dim("h"), s.dim("d"), device=xs[0].device, dtype=torch.bfloat16)
        return Prepared(lambda: f(BHR_EXPR, xs, ys, z), lambda: z.float(), reset=_nan(z),
                        note="the call includes its scale-layout kernel")
    if s.suite == HC_PRENORM:
        a, b, splits = t["a"], t["b"], s.dim("splits") or None
        lead = (splits,) if splits else ()
        d = torch.empty(*lead, s.m, s.n, device=a.device, dtype=torch.float32)
        sq = torch.empty(*lead, s.m, device=a.device, dtype=torch.float32)

        def reset():
            d.fill_(float("nan"))
            sq.fill_(float("nan"))

        def output():
            return (d.sum(0), sq.sum(0)) if splits else (d, sq)

        note = f"{splits} partial sums over K (added outside the timed call)" if splits else ""
        return Prepared(lambda: f(a, b, d, sq, num_splits=splits), output, reset=reset, note=note)
    # skip-head-mid
    a, b, hs = _mn_major(dgx, t["a"]), t["b"], t["head_splits"]
    d = torch.empty(s.m, s.n // (hs[0] + hs[2]) * sum(hs), device=a[0].device, dtype=torch.bfloat16)
    return Prepared(lambda: f(a, b, d, hs), lambda: d.float(), reset=_poison_padded(d, hs))


def _mn_major(dgx, pair):
    """(A, SFA) with SFA in the TMA-aligned M-major layout the kernels read as they are (converted once, untimed)."""
    return pair[0], dgx.get_mn_major_tma_aligned_tensor(pair[1])


# ---- peers -------------------------------------------------------------------------------------------------------


def prepare_torch_einsum(problem: OpProblem) -> Prepared:
    import torch

    s, t = problem.shape, problem.tensors
    if s.suite == FP8_EINSUM:
        x, y = t["x"], t["y"]
        held: list = [None]

        def run():
            held[0] = torch.einsum(BHR_EXPR, x, y)

        return Prepared(run, lambda: held[0].float(), reference=BF16_REF,
                        note="torch.einsum on the BF16 originals (cuBLAS batched), its own output")
    a, b = t["a"], t["b"]
    if s.form == SUM_EXPR:
        from ..families.einsum_torch import torch_einsum

        c = t.get("c")
        d = torch.empty(s.m, s.n, device=a.device, dtype=torch.float32 if c is not None else torch.bfloat16)
        run = (lambda: torch_einsum(SUM_EXPR, a, b, d, c)) if c is not None else (lambda: torch_einsum(SUM_EXPR, a, b, d))
        note = "S folded into K: one cuBLAS product after torch.einsum's permuting copies"
        if c is not None:
            note += "; its product is rounded to BF16 before c is added, so it is checked at the BF16 tolerance"
        return Prepared(run, lambda: d.float(), reset=_nan(d), note=note,
                        reference=BF16_PRODUCT_REF if c is not None else None)
    held2: list = [None]

    def run2():
        held2[0] = torch.einsum(s.form, a, b)

    return Prepared(run2, lambda: held2[0].float(), note="torch.einsum (cuBLAS batched over the heads), its own output")


def prepare_gemm_loop(problem: OpProblem) -> Prepared:
    import torch

    dgx = _dgx()
    _need(dgx, "fp8_gemm_nt")
    s, t = problem.shape, problem.tensors
    z = torch.empty(s.dim("b"), s.dim("h"), s.dim("d"), device=t["x"].device, dtype=torch.bfloat16)
    return Prepared(head_loop(dgx, t["xs"], t["ys"], z), lambda: z.float(), reset=_nan(z),
                    note=f"dgx.fp8_gemm_nt per head ({s.dim('h')} launches), strided views, scales converted ahead")


def prepare_hc_torch(problem: OpProblem) -> Prepared:
    t = problem.tensors
    run = hc_torch(t["a"], t["b"])
    held: list = [None]

    def call():
        held[0] = run()

    return Prepared(call, lambda: held[0], note="a.float() @ b.T (TF32 allowed) + a.float().square().sum(-1)")


def prepare_fp8_gemm(problem: OpProblem) -> Prepared:
    import torch

    dgx = _dgx()
    f = _need(dgx, "fp8_gemm_nt")
    s, t = problem.shape, problem.tensors
    a, b = _mn_major(dgx, t["a"]), t["b"]
    d = torch.empty(s.m, s.n, device=a[0].device, dtype=torch.bfloat16)
    return Prepared(lambda: f(a, b, d), lambda: d.float(), reset=_nan(d), reference=PLAIN_REF,
                    note="dgx.fp8_gemm_nt on the same shape, unpadded output")


def prepare_gemm_copy(problem: OpProblem) -> Prepared:
    import torch

    dgx = _dgx()
    _need(dgx, "fp8_gemm_nt")
    s, t = problem.shape, problem.tensors
    a, b, hs = _mn_major(dgx, t["a"]), t["b"], t["head_splits"]
    tmp = torch.empty(s.m, s.n, device=a[0].device, dtype=torch.bfloat16)
    d = torch.empty(s.m, s.n // (hs[0] + hs[2]) * sum(hs), device=a[0].device, dtype=torch.bfloat16)
    return Prepared(gemm_then_copy(dgx, a, b, d, hs, tmp), lambda: d.float(), reset=_poison_padded(d, hs),
                    note="dgx.fp8_gemm_nt, then the left and right columns copied into the padded layout")
