"""Inputs and float64 references of the BF16 GEMM suites' cases (torch; the GPU in the benchmark, the CPU in tests).

The operands are in dgx's layouts, seeded as tests/device/bf16_bench.py seeds them:

* dense: ``a`` [M, K], ``b`` [N, K] (with the form's major-ness), reference ``a · bᵀ``;
* masked: ``a`` [G, M_max, K], ``b`` [G, N, K], ``masked_m``; the valid rows packed (``a_rows``) and their group ends
  (``offs``) for the grouped peer; reference: every group's valid rows, stacked;
* contiguous: ``a`` [padded M, K] in 128-row segments, ``m_indices`` (-1 on the padding), ``a_rows``, ``offs``;
* K-grouped: ``a`` [Σk, M], ``b`` [Σk, N], ``c`` [G, M, N] FP32, ``ks``; reference ``c[g] + a_gᵀ b_g``.
"""

from __future__ import annotations

from .bf16_suites import BF16, BF16_CONTIGUOUS, BF16_K_GROUPED, BF16_MASKED, FORM_MAJORS, SEGMENT_ALIGN, align
from .op_problems import MAIN, OpProblem, default_tolerance
from .op_shape import OpShape


def _generator(device: str, seed: int):
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def _randn(gen, *shape, device):
    import torch

    return torch.randn(*shape, device=device, generator=gen).to(torch.bfloat16)


def segment_starts(group_ms) -> list[int]:
    """The first row of each group's 128-row-aligned segment (contiguous layout)."""
    starts, at = [], 0
    for m in group_ms:
        starts.append(at)
        at += align(m, SEGMENT_ALIGN)
    return starts


def _dense(shape: OpShape, seed: int, device: str) -> dict:
    m, n, k = shape.m, shape.n, shape.k
    gen = _generator(device, seed * 1000003 + m * 31 + n * 7 + k)
    a, b = _randn(gen, m, k, device=device), _randn(gen, n, k, device=device)
    major_a, major_b = FORM_MAJORS[shape.form]
    if major_a == "mn":
        a = a.T.contiguous().T
    if major_b == "mn":
        b = b.T.contiguous().T
    return {"a": a, "b": b}, a.double() @ b.double().T


def _packed(a_groups, device: str):
    """The valid rows of every group packed, and their int32 group ends (torch._grouped_mm's ``offs``)."""
    import torch

    rows = torch.cat(a_groups)
    ends, at = [], 0
    for x in a_groups:
        at += x.shape[0]
        ends.append(at)
    return rows, torch.tensor(ends, device=device, dtype=torch.int32)


def _masked(shape: OpShape, seed: int, device: str) -> dict:
    import torch

    g, n, k, mmax, counts = shape.groups, shape.n, shape.k, shape.max_m, shape.group_ms
    gen = _generator(device, seed * 1000003 + 1000 + g * 7 + n + k)
    a, b = _randn(gen, g, mmax, k, device=device), _randn(gen, g, n, k, device=device)
    groups = [a[j, :counts[j]] for j in range(g)]
    a_rows, offs = _packed(groups, device)
    t = {"a": a, "b": b, "masked_m": torch.tensor(counts, device=device, dtype=torch.int32), "a_rows": a_rows,
         "offs": offs, "groups": [(x, j) for j, x in enumerate(groups)]}
    return t, torch.cat([x.double() @ b[j].double().T for j, x in enumerate(groups)])


def _contiguous(shape: OpShape, seed: int, device: str) -> dict:
    import torch

    g, n, k, counts = shape.groups, shape.n, shape.k, shape.group_ms
    starts = segment_starts(counts)
    rows = starts[-1] + align(counts[-1], SEGMENT_ALIGN)
    gen = _generator(device, seed * 1000003 + 2000 + g * 7 + n + k)
    a, b = _randn(gen, rows, k, device=device), _randn(gen, g, n, k, device=device)
    m_indices = torch.full((rows,), -1, device=device, dtype=torch.int32)
    for j in range(g):
        m_indices[starts[j]:starts[j] + counts[j]] = j
    groups = [a[starts[j]:starts[j] + counts[j]] for j in range(g)]
    a_rows, offs = _packed(groups, device)
    t = {"a": a, "b": b, "m_indices": m_indices, "starts": starts, "a_rows": a_rows, "offs": offs,
         "groups": [(x, j) for j, x in enumerate(groups)]}
    return t, torch.cat([x.double() @ b[j].double().T for j, x in enumerate(groups)])


def _k_grouped(shape: OpShape, seed: int, device: str) -> dict:
    import torch

    g, m, n, ks = shape.groups, shape.m, shape.n, list(shape.group_ks)
    total = sum(ks)
    gen = _generator(device, seed * 1000003 + 3000 + g * 7 + m + n)
    a, b = _randn(gen, total, m, device=device), _randn(gen, total, n, device=device)
    c = torch.randn(g, m, n, device=device, generator=gen)
    starts = [sum(ks[:j]) for j in range(g)]
    ref = torch.stack([c[j].double() + a[s:s + kj].double().T @ b[s:s + kj].double()
                       for j, (s, kj) in enumerate(zip(starts, ks))])
    t = {"a": a, "b": b, "c": c, "ks": ks, "ks_tensor": torch.tensor(ks, device=device, dtype=torch.int32),
         "starts": starts}
    return t, ref


_BUILDERS = {BF16: _dense, BF16_MASKED: _masked, BF16_CONTIGUOUS: _contiguous, BF16_K_GROUPED: _k_grouped}


def build_bf16_problem(shape: OpShape, seed: int = 0, device: str = "cuda") -> OpProblem:
    """The operands and the float64 reference of one BF16 GEMM case."""
    if shape.suite not in _BUILDERS:
        raise ValueError(f"not a BF16 GEMM case: suite {shape.suite!r}")
    tensors, ref = _BUILDERS[shape.suite](shape, seed, device)
    return OpProblem(shape, tensors, {MAIN: ref}, default_tolerance(shape))
