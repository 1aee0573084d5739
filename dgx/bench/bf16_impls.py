"""The implementations the BF16 GEMM suites time, each checked against the float64 reference before it is timed.

* ``dgx``            dgx's BF16 GEMM of the layout (``bf16_gemm_nt``, ``m_grouped_bf16_gemm_nt_masked``,
                     ``m_grouped_bf16_gemm_nt_contiguous``, ``k_grouped_bf16_gemm_tn_contiguous`` accumulating into d).
* ``deepgemm``       DeepGEMM's BF16 GEMMs (same names and arguments), where a real DeepGEMM imports
                     (:func:`dgx.bench.deepgemm.find_deep_gemm`, never dgx's own alias).
* ``bf16``           cuBLAS through ``torch.mm`` (the dense suite).
* ``torch_grouped``  ``torch._grouped_mm`` over the valid rows packed (masked and contiguous), or a loop of
                     ``torch.mm`` per group where this torch lacks it or refuses the problem (the note says which).
* ``cublas_loop``    a loop of cuBLAS ``torch.addmm`` per group into FP32 d (the K-grouped suite).

:func:`grouped_peer` and :func:`k_grouped_loop` are the peers' calls, shared with tests/device/bf16_bench.py.
"""

from __future__ import annotations

from typing import Any, Callable

from .bf16_suites import BF16, BF16_CONTIGUOUS, BF16_K_GROUPED, BF16_MASKED
from .op_problems import OpProblem
from .prepared import Prepared, Unavailable

DGX_FUNCTIONS = {
    BF16: "bf16_gemm_nt",
    BF16_MASKED: "m_grouped_bf16_gemm_nt_masked",
    BF16_CONTIGUOUS: "m_grouped_bf16_gemm_nt_contiguous",
    BF16_K_GROUPED: "k_grouped_bf16_gemm_tn_contiguous",
}
"""Suite -> the function dgx (and DeepGEMM) are called through."""


def grouped_peer(a_rows, b, offs, groups: list, out) -> tuple[Callable[[], Any], Callable[[Any], Any], str]:
    """(run, output of run's value, note) of the M-grouped peer over the valid rows: ``torch._grouped_mm(a_rows,
    b.transpose(1, 2), offs=offs)`` where this torch has it and takes the problem (tried once here), else a loop of
    ``torch.mm`` per group (``groups``: (rows of group j, j)) into ``out`` [valid rows, N]."""
    import torch

    fn = getattr(torch, "_grouped_mm", None)
    b_kn = b.transpose(1, 2)
    why = "torch._grouped_mm is missing"
    if fn is not None:
        try:
            fn(a_rows, b_kn, offs=offs)
            return (lambda: fn(a_rows, b_kn, offs=offs)), (lambda value: value), "torch._grouped_mm, one launch"
        except Exception as e:  # noqa: BLE001 - refused (e.g. a CPU tensor, an older torch): the loop instead
            why = f"torch._grouped_mm refused ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
    parts, start = [], 0
    for rows, j in groups:
        parts.append((rows, b[j].T, out[start:start + rows.shape[0]]))
        start += rows.shape[0]

    def loop():
        for x, y, z in parts:
            torch.mm(x, y, out=z)

    return loop, (lambda _: out), f"{why}: a loop of torch.mm ({len(parts)} launches)"


def k_grouped_loop(a, b, d, ks) -> Callable[[], None]:
    """A loop of cuBLAS calls accumulating ``d[g] += a_gᵀ b_g`` in FP32 (``torch.addmm`` with an FP32 out where
    this torch takes ``out_dtype``, else the product added)."""
    import torch

    parts, start = [], 0
    for j, kj in enumerate(ks):
        parts.append((a[start:start + kj].T, b[start:start + kj], d[j]))
        start += kj

    def run():
        for x, y, out in parts:
            try:
                torch.addmm(out, x, y, out_dtype=torch.float32, out=out)
            except (TypeError, NotImplementedError):  # a torch (or a device) without addmm's out_dtype: in FP32
                out.addmm_(x.float(), y.float())

    return run


def _valid_rows(problem: OpProblem, d):
    """The valid rows of a masked [G, M_max, N] or contiguous [padded M, N] output, stacked, float32."""
    import torch

    s, t = problem.shape, problem.tensors
    if s.suite == BF16_MASKED:
        return torch.cat([d[j, :m] for j, m in enumerate(s.group_ms)]).float()
    return torch.cat([d[st:st + m] for st, m in zip(t["starts"], s.group_ms)]).float()


def prepare_module(module: Any, problem: OpProblem, label: str) -> Prepared:
    """``module``'s (dgx's or DeepGEMM's) BF16 GEMM of the case's layout, into an output allocated here (NaN before
    the check; K-grouped: c copied in, then accumulated)."""
    import torch

    s, t = problem.shape, problem.tensors
    name = DGX_FUNCTIONS[s.suite]
    f = getattr(module, name, None)
    if not callable(f):
        raise Unavailable(f"{label} has no {name}")
    a, b = t["a"], t["b"]
    if s.suite == BF16:
        d = torch.empty(s.m, s.n, device=a.device, dtype=torch.bfloat16)
        return Prepared(lambda: f(a, b, d), lambda: d.float(), reset=lambda: d.fill_(float("nan")))
    if s.suite == BF16_K_GROUPED:
        d = torch.empty_like(t["c"])
        ks, kst = t["ks"], t["ks_tensor"]
        return Prepared(lambda: f(a, b, d, ks, kst, d), lambda: d, reset=lambda: d.copy_(t["c"]),
                        note="d[g] += a_gᵀ b_g in place (c = d)")
    if s.suite == BF16_CONTIGUOUS:
        align = getattr(module, "get_mk_alignment_for_contiguous_layout", None)
        if align is not None and int(align()) != 128:
            raise Unavailable(f"{label}'s contiguous layout aligns groups to {align()} rows; the suite's to 128")
        d = torch.empty(a.shape[0], s.n, device=a.device, dtype=torch.bfloat16)
        mi = t["m_indices"]
        return Prepared(lambda: f(a, b, d, mi), lambda: _valid_rows(problem, d), reset=lambda: d.fill_(float("nan")))
    d = torch.empty(s.groups, s.max_m, s.n, device=a.device, dtype=torch.bfloat16)
    mm, expected = t["masked_m"], s.m
    return Prepared(lambda: f(a, b, d, mm, expected), lambda: _valid_rows(problem, d),
                    reset=lambda: d.fill_(float("nan")))


def prepare_dgx(problem: OpProblem) -> Prepared:
    try:
        import dgx
    except Exception as e:  # noqa: BLE001
        raise Unavailable(f"import dgx failed: {type(e).__name__}: {e}") from None
    return prepare_module(dgx, problem, "dgx")


def prepare_cublas(problem: OpProblem) -> Prepared:
    """cuBLAS through ``torch.mm`` into a preallocated output (the dense suite)."""
    import torch

    s, t = problem.shape, problem.tensors
    a, b = t["a"], t["b"]
    d = torch.empty(s.m, s.n, device=a.device, dtype=torch.bfloat16)
    bt = b.T
    return Prepared(lambda: torch.mm(a, bt, out=d), lambda: d.float(), reset=lambda: d.fill_(float("nan")),
                    note="torch.mm (cuBLAS), BF16 out")


def prepare_grouped(problem: OpProblem) -> Prepared:
    """The M-grouped peer (:func:`grouped_peer`) over the valid rows."""
    import torch

    s, t = problem.shape, problem.tensors
    out = torch.empty(sum(s.group_ms), s.n, device=t["a"].device, dtype=torch.bfloat16)
    run, result, note = grouped_peer(t["a_rows"], t["b"], t["offs"], t["groups"], out)
    held: list = [None]

    def call():
        held[0] = run()

    return Prepared(call, lambda: result(held[0]).float(), reset=lambda: out.fill_(float("nan")), note=note)


def prepare_k_grouped_loop(problem: OpProblem) -> Prepared:
    import torch

    s, t = problem.shape, problem.tensors
    d = torch.empty_like(t["c"])
    run = k_grouped_loop(t["a"], t["b"], d, t["ks"])
    return Prepared(run, lambda: d, reset=lambda: d.copy_(t["c"]),
                    note=f"a loop of torch.addmm per group ({s.groups} launches), FP32 d accumulated in place")
