"""Inputs and float64 references for one MoE expert-block case (torch; the GPU in the benchmark, the CPU in tests).

The inputs, in dgx's layouts (the benchmark's own builders):

* ``x``: BF16 rows, [E, Mmax, H] (masked) or [padded M, H] (contiguous segments, zeros on the padding), and its
  per-token FP8 cast ``a`` = (FP8, FP32 scales in the GEMM's M-major TMA-aligned layout, per group when masked);
* ``w1``: per expert BF16 [2I, H] (gate rows, then up rows) and its per-128x128-block FP8 cast; ``w2`` likewise
  [H, I];
* ``masked_m`` int32 [E] or ``m_indices`` int32 [padded M] (-1 on the padding).

The reference is float64 on a few rows of every expert (:func:`check_rows`): ``silu(x W1g^T) * (x W1u^T) W2^T``
from an implementation's own operands (the FP8 values dequantised, or the BF16 originals). An implementation's
output rows are compared with calc_diff (docs/METHOD.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .moe_suites import SEGMENT_ALIGN, MoeShape
from .problems import calc_diff

CHECK_ROWS_PER_EXPERT = 4
"""Rows of each expert checked against the float64 reference (first, last, two between)."""
CHECK_EXPERTS = 8
"""Experts checked (evenly spaced over the case's)."""


def _torch():
    import torch

    return torch


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def check_rows(shape: MoeShape) -> list[tuple[int, int]]:
    """(expert, row within the expert) of the checked rows."""
    e, n = shape.experts, min(shape.experts, CHECK_EXPERTS)
    experts = sorted({round(i * (e - 1) / max(1, n - 1)) for i in range(n)})
    out = []
    for g in experts:
        m = shape.group_ms[g]
        picks = sorted({0, m - 1, m // 3, 2 * m // 3}) if m > 0 else []
        out += [(g, r) for r in picks[:CHECK_ROWS_PER_EXPERT]]
    return out


def segment_starts(shape: MoeShape) -> list[int]:
    """The first row of each expert's segment in the contiguous layout."""
    starts, at = [], 0
    for m in shape.group_ms:
        starts.append(at)
        at += _align(m, SEGMENT_ALIGN)
    return starts


@dataclasses.dataclass
class MoeProblem:
    """One expert-block case: the operands (``tensors``), the checked rows and their float64 references."""

    shape: MoeShape
    tensors: dict[str, Any]
    rows: list[tuple[int, int]]
    ref_fp8: Any  # float64 [len(rows), H] from the FP8 operands
    ref_bf16: Any  # float64 [len(rows), H] from the BF16 originals

    def flat_rows(self) -> list[int]:
        """The checked rows as row indices of the input's flattened rows ([E * Mmax] or [padded M])."""
        if self.shape.layout == "masked":
            return [g * (self.shape.max_m or 0) + r for g, r in self.rows]
        starts = segment_starts(self.shape)
        return [starts[g] + r for g, r in self.rows]

    def pick(self, out) -> Any:
        """The checked rows of an output [E, Mmax, H] or [padded M, H], as float32 [rows, H]."""
        torch = _torch()
        flat = out.reshape(-1, out.shape[-1])
        return flat.index_select(0, torch.tensor(self.flat_rows(), device=flat.device)).float()

    def check(self, rows, bf16: bool = False) -> float:
        """calc_diff of the checked rows against the float64 reference of the FP8 (or BF16) operands; inf where a
        row holds NaN or inf."""
        torch = _torch()
        ref = self.ref_bf16 if bf16 else self.ref_fp8
        if tuple(rows.shape) != tuple(ref.shape):
            raise ValueError(f"checked rows have shape {tuple(rows.shape)}, the reference {tuple(ref.shape)}")
        if not bool(torch.isfinite(rows).all()):
            return float("inf")
        return calc_diff(rows.double(), ref)

    def free(self) -> None:
        self.tensors.clear()


def _dequant_block(q, sf):
    """An FP8 [N, K] weight with per-128x128 scales [N/128, K/128] (N, K multiples of 128), float64."""
    return (q.double().unflatten(0, (-1, 128)).unflatten(-1, (-1, 128)) * sf.double()[:, None, :, None]) \
        .flatten(2, 3).flatten(0, 1)


def reference_rows(x_rows, w1, w2):
    """float64 [rows, H]: silu(gate) * up, then the second GEMM, for the rows of one expert."""
    torch = _torch()
    gate_up = x_rows @ w1.T
    inter = w2.shape[1]
    h = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    return h @ w2.T


def build_moe_problem(shape: MoeShape, seed: int = 0, device: str = "cuda") -> MoeProblem:
    """The operands of one case and the references of its checked rows."""
    torch = _torch()
    from ..layout import get_mn_major_tma_aligned_tensor
    from ..torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    gen = torch.Generator(device=device).manual_seed(seed * 7919 + shape.experts * 131 + shape.tokens)
    e, h, i = shape.experts, shape.hidden, shape.inter
    w1, w2, w1q, w1s, w2q, w2s = [], [], [], [], [], []
    for _ in range(e):
        a = (torch.randn(2 * i, h, device=device, generator=gen) / h ** 0.5).to(torch.bfloat16)
        b = (torch.randn(h, i, device=device, generator=gen) / i ** 0.5).to(torch.bfloat16)
        qa, qb = per_block_cast_to_fp8(a), per_block_cast_to_fp8(b)
        w1.append(a), w2.append(b), w1q.append(qa[0]), w1s.append(qa[1]), w2q.append(qb[0]), w2s.append(qb[1])
    t: dict[str, Any] = {
        "w1": torch.stack(w1), "w2": torch.stack(w2),
        "w1_fp8": (torch.stack(w1q), torch.stack(w1s)), "w2_fp8": (torch.stack(w2q), torch.stack(w2s)),
    }
    del w1, w2, w1q, w1s, w2q, w2s
    if shape.layout == "masked":
        mmax = shape.max_m
        x = torch.zeros(e, mmax, h, device=device, dtype=torch.bfloat16)
        for g, m in enumerate(shape.group_ms):
            x[g, :m] = torch.randn(m, h, device=device, generator=gen).to(torch.bfloat16)
        q, sf = per_token_cast_to_fp8(x.view(e * mmax, h), mn_major=False)
        t["a"] = (q.view(e, mmax, h), get_mn_major_tma_aligned_tensor(sf.view(e, mmax, -1)))
        t["masked_m"] = torch.tensor(shape.group_ms, dtype=torch.int32, device=device)
    else:
        rows = shape.padded_m
        x = torch.zeros(rows, h, device=device, dtype=torch.bfloat16)
        m_indices = torch.full((rows,), -1, dtype=torch.int32, device=device)
        for g, (start, m) in enumerate(zip(segment_starts(shape), shape.group_ms)):
            x[start:start + m] = torch.randn(m, h, device=device, generator=gen).to(torch.bfloat16)
            m_indices[start:start + m] = g
        t["a"] = per_token_cast_to_fp8(x)
        t["m_indices"] = m_indices
        t["offsets"] = torch.tensor([s + _align(m, SEGMENT_ALIGN) for s, m in zip(segment_starts(shape),
                                                                              shape.group_ms)],
                                    dtype=torch.int32, device=device)
    t["x"] = x
    problem = MoeProblem(shape, t, check_rows(shape), None, None)
    flat_x = x.view(-1, h)
    idx = torch.tensor(problem.flat_rows(), device=device)
    qa, sa = t["a"]
    qa = qa.reshape(-1, h).index_select(0, idx).double()
    # the scales of the checked rows, read through their strides (M-major, per group when masked)
    sa_rows = sa.reshape(-1, sa.shape[-1])
    a_fp8 = (qa.unflatten(-1, (-1, 128)) * sa_rows.index_select(0, idx).double().unsqueeze(-1)).flatten(-2)
    a_bf16 = flat_x.index_select(0, idx).double()
    ref8, ref16 = [], []
    for g in sorted({g for g, _ in problem.rows}):
        sel = [n for n, (gg, _) in enumerate(problem.rows) if gg == g]
        w1_8 = _dequant_block(t["w1_fp8"][0][g], t["w1_fp8"][1][g])
        w2_8 = _dequant_block(t["w2_fp8"][0][g], t["w2_fp8"][1][g])
        ref8.append(reference_rows(a_fp8[sel], w1_8, w2_8))
        ref16.append(reference_rows(a_bf16[sel], t["w1"][g].double(), t["w2"][g].double()))
    problem.ref_fp8, problem.ref_bf16 = torch.cat(ref8), torch.cat(ref16)
    return problem
