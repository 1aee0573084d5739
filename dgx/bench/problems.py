"""Inputs and references for one benchmark case (torch, GPU).

A :class:`Problem` holds the tensors in the layout dgx takes (``tensors``), a decomposition into
plain dense GEMMs (``parts``: one per group, valid rows only) that looped peers use, the FP32
reference computed from the dequantised FP8 inputs, and ``c`` (the FP32 accumulator) for the
weight-gradient suites.

The quantizers here are the benchmark's own (independent of ``dgx.torch_utils``): 1×128 per token
and 128×128 per block, e4m3, scale = amax / 448, FP32 scales.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .suites import MK_ALIGNMENT, Shape, align

FP8_MAX = 448.0
BLOCK = 128


def _torch():
    import torch

    return torch


# --------------------------------------------------------------------------------------------------
# quantizers


def per_token_cast(x):
    """``x [M, K]`` → ``(fp8 [M, K], scales fp32 [M, ceil(K/128)])``, one scale per row per 128 of K."""
    torch = _torch()
    m, k = x.shape
    kb = math.ceil(k / BLOCK)
    xp = torch.zeros(m, kb * BLOCK, dtype=torch.float32, device=x.device)
    xp[:, :k] = x.float()
    xv = xp.view(m, kb, BLOCK)
    amax = xv.abs().amax(dim=2).clamp(min=1e-4)
    scale = amax / FP8_MAX
    q = (xv / scale.unsqueeze(2)).to(torch.float8_e4m3fn).view(m, kb * BLOCK)[:, :k].contiguous()
    return q, scale.contiguous()


def per_block_cast(x):
    """``x [N, K]`` → ``(fp8 [N, K], scales fp32 [ceil(N/128), ceil(K/128)])``, one per 128×128 block."""
    torch = _torch()
    n, k = x.shape
    nb, kb = math.ceil(n / BLOCK), math.ceil(k / BLOCK)
    xp = torch.zeros(nb * BLOCK, kb * BLOCK, dtype=torch.float32, device=x.device)
    xp[:n, :k] = x.float()
    xv = xp.view(nb, BLOCK, kb, BLOCK)
    amax = xv.abs().amax(dim=(1, 3)).clamp(min=1e-4)
    scale = amax / FP8_MAX
    q = (xv / scale[:, None, :, None]).to(torch.float8_e4m3fn).view(nb * BLOCK, kb * BLOCK)[:n, :k].contiguous()
    return q, scale.contiguous()


def per_tensor_cast(x):
    """``x`` → ``(fp8, scalar fp32 scale tensor)``: the less precise per-tensor recipe."""
    torch = _torch()
    amax = x.float().abs().amax().clamp(min=1e-4)
    scale = (amax / FP8_MAX).to(torch.float32)
    q = (x.float() / scale).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.reshape(())


def per_row_cast(x):
    """``x [R, K]`` → ``(fp8, scales fp32 [R, 1])``: one scale per row over the whole K."""
    torch = _torch()
    amax = x.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-4)
    scale = (amax / FP8_MAX).to(torch.float32)
    q = (x.float() / scale).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def dequant_token(q, s):
    """Inverse of :func:`per_token_cast` (float32)."""
    k = q.shape[1]
    return q.float() * s.repeat_interleave(BLOCK, dim=1)[:, :k]


def dequant_block(q, s):
    """Inverse of :func:`per_block_cast` (float32)."""
    n, k = q.shape
    return q.float() * s.repeat_interleave(BLOCK, dim=0)[:n].repeat_interleave(BLOCK, dim=1)[:, :k]


def calc_diff(x, y) -> float:
    """``1 − 2Σxy / Σ(x² + y²)`` in float64 (docs/METHOD.md): 0 for equal tensors."""
    x = x.double()
    y = y.double()
    denom = (x * x + y * y).sum()
    if float(denom) == 0.0:
        return 0.0
    return float(1.0 - 2.0 * (x * y).sum() / denom)


def matmul_fp32(a, b_t):
    """``a @ b_t.T`` in true FP32 (TF32 off), for references."""
    torch = _torch()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.float() @ b_t.float().t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


# --------------------------------------------------------------------------------------------------
# problems


@dataclasses.dataclass
class Part:
    """One plain dense GEMM ``a·bᵀ`` (a group's valid rows)."""

    a: Any  # fp8 [m, K] (may be a strided view)
    sfa: Any  # fp32 [m, ceil(K/128)]
    b: Any  # fp8 [N, K]
    sfb: Any  # fp32 [ceil(N/128), ceil(K/128)] (block) or [N, ceil(K/128)] (row)
    b_scale: str  # "block" | "row"
    a16: Any  # bf16 originals [m, K]
    b16: Any  # bf16 originals [N, K]
    out_dtype: Any  # torch.bfloat16 or torch.float32


@dataclasses.dataclass
class Problem:
    shape: Shape
    tensors: dict[str, Any]  # what dgx takes (layout per suite, see build_problem)
    parts: list[Part]
    ref: Any  # fp32 [rows, N]: a·bᵀ from the dequantised inputs, valid rows of all groups stacked
    c: Any = None  # fp32 accumulator in the output's layout (wgrad, k_grouped)
    c_rows: Any = None  # c's valid rows stacked like ref

    @property
    def out_dtype(self):
        return self.parts[0].out_dtype

    def valid_rows(self, out):
        """Rows of an output in dgx's layout that carry results, stacked like ``ref`` (float32)."""
        torch = _torch()
        s = self.shape
        if s.suite == "contiguous":
            rows, start = [], 0
            for mg in s.group_ms:
                rows.append(out[start : start + mg])
                start += align(mg, MK_ALIGNMENT)
            return torch.cat(rows).float()
        if s.suite == "masked":
            return torch.cat([out[g, : s.group_ms[g]] for g in range(s.groups)]).float()
        if s.suite == "k_grouped":
            return out.reshape(s.groups * s.m, s.n).float()
        return out.float()

    def free(self) -> None:
        self.tensors.clear()
        self.parts.clear()
        self.ref = self.c = self.c_rows = None


def _randn(torch, rows: int, cols: int, gen, device):
    return torch.randn(rows, cols, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)


def build_problem(shape: Shape, seed: int = 0, device: str = "cuda") -> Problem:
    """Random inputs for ``shape`` (seeded), quantised, with the FP32 reference.

    Layouts given to dgx (``tensors``):

    * dense:      A [M,K], SFA [M,kb], B [N,K], SFB [nb,kb], D bf16 [M,N]
    * wgrad:      A [M,K], SFA [M,kb], B [N,K], SFB [N,kb] (1×128), D fp32 [M,N] (starts as c)
    * contiguous: A [M_pad,K], SFA [M_pad,kb], B [G,N,K], SFB [G,nb,kb], m_indices int32 [M_pad]
                  (group per row, -1 on padding rows), D bf16 [M_pad,N]
    * masked:     A [G,M_max,K], SFA [G,M_max,kb], B [G,N,K], SFB [G,nb,kb], masked_m int32 [G],
                  D bf16 [G,M_max,N]
    * k_grouped:  A flat fp8 [M·Σk] (group g's [M,k_g] K-contiguous, one after another),
                  SFA [M, Σk/128] (scales stacked along K), B flat [N·Σk], SFB [N, Σk/128],
                  D fp32 [G,M,N] (starts as c), ks list[int], ks_tensor int32 [G]
    """
    torch = _torch()
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 7919 + 17)
    s = shape
    K, N = s.k, s.n
    bf16, fp32 = torch.bfloat16, torch.float32

    if s.suite in ("dense", "wgrad"):
        a16 = _randn(torch, s.m, K, gen, device)
        b16 = _randn(torch, N, K, gen, device)
        a, sfa = per_token_cast(a16)
        if s.suite == "dense":
            b, sfb = per_block_cast(b16)
            bdq = dequant_block(b, sfb)
            part = Part(a, sfa, b, sfb, "block", a16, b16, bf16)
            ref = matmul_fp32(dequant_token(a, sfa), bdq)
            d = torch.empty(s.m, N, dtype=bf16, device=device)
            return Problem(s, {"A": a, "SFA": sfa, "B": b, "SFB": sfb, "D": d}, [part], ref)
        b, sfb = per_token_cast(b16)
        part = Part(a, sfa, b, sfb, "row", a16, b16, fp32)
        ref = matmul_fp32(dequant_token(a, sfa), dequant_token(b, sfb))
        c = torch.randn(s.m, N, generator=gen, device=device, dtype=fp32)
        d = c.clone()
        return Problem(s, {"A": a, "SFA": sfa, "B": b, "SFB": sfb, "D": d}, [part], ref, c, c)

    if s.suite in ("contiguous", "masked"):
        G = s.groups
        b16 = torch.stack([_randn(torch, N, K, gen, device) for _ in range(G)])
        bq = [per_block_cast(b16[g]) for g in range(G)]
        B = torch.stack([q for q, _ in bq])
        SFB = torch.stack([sc for _, sc in bq])
        bdq = [dequant_block(q, sc) for q, sc in bq]
        parts, refs = [], []
        if s.suite == "contiguous":
            m_pad = s.padded_m
            a16 = _randn(torch, m_pad, K, gen, device)
            A, SFA = per_token_cast(a16)
            m_indices = torch.full((m_pad,), -1, dtype=torch.int32, device=device)
            start = 0
            for g, mg in enumerate(s.group_ms):
                m_indices[start : start + mg] = g
                sl = slice(start, start + mg)
                parts.append(Part(A[sl], SFA[sl], B[g], SFB[g], "block", a16[sl], b16[g], bf16))
                refs.append(matmul_fp32(dequant_token(A[sl], SFA[sl]), bdq[g]))
                start += align(mg, MK_ALIGNMENT)
            d = torch.empty(m_pad, N, dtype=bf16, device=device)
            tensors = {"A": A, "SFA": SFA, "B": B, "SFB": SFB, "D": d, "m_indices": m_indices}
        else:
            mm = s.max_m
            a16 = torch.stack([_randn(torch, mm, K, gen, device) for _ in range(G)])
            aq = [per_token_cast(a16[g]) for g in range(G)]
            A = torch.stack([q for q, _ in aq])
            SFA = torch.stack([sc for _, sc in aq])
            for g, mg in enumerate(s.group_ms):
                parts.append(Part(A[g, :mg], SFA[g, :mg], B[g], SFB[g], "block", a16[g, :mg], b16[g], bf16))
                refs.append(matmul_fp32(dequant_token(A[g, :mg], SFA[g, :mg]), bdq[g]))
            masked_m = torch.tensor(list(s.group_ms), dtype=torch.int32, device=device)
            d = torch.empty(G, mm, N, dtype=bf16, device=device)
            tensors = {"A": A, "SFA": SFA, "B": B, "SFB": SFB, "D": d, "masked_m": masked_m}
        return Problem(s, tensors, parts, torch.cat(refs))

    if s.suite == "k_grouped":
        G, M = s.groups, s.m
        ks = list(s.group_ks)
        total = sum(ks)
        a16 = _randn(torch, M, total, gen, device)
        b16 = _randn(torch, N, total, gen, device)
        Aq, SFA = per_token_cast(a16)  # [M, Σk], [M, Σk/128]
        Bq, SFB = per_token_cast(b16)
        a_flat = torch.empty(M * total, dtype=Aq.dtype, device=device)
        b_flat = torch.empty(N * total, dtype=Bq.dtype, device=device)
        parts, refs = [], []
        off_k = 0
        for kg in ks:
            a_g = a_flat[M * off_k : M * (off_k + kg)].view(M, kg)
            b_g = b_flat[N * off_k : N * (off_k + kg)].view(N, kg)
            a_g.copy_(Aq[:, off_k : off_k + kg])
            b_g.copy_(Bq[:, off_k : off_k + kg])
            kb0, kb1 = off_k // BLOCK, (off_k + kg) // BLOCK
            sfa_g, sfb_g = SFA[:, kb0:kb1], SFB[:, kb0:kb1]
            parts.append(Part(a_g, sfa_g, b_g, sfb_g, "row", a16[:, off_k : off_k + kg], b16[:, off_k : off_k + kg], fp32))
            refs.append(matmul_fp32(dequant_token(a_g, sfa_g), dequant_token(b_g, sfb_g)))
            off_k += kg
        c = torch.randn(G, M, N, generator=gen, device=device, dtype=fp32)
        d = c.clone()
        ks_tensor = torch.tensor(ks, dtype=torch.int32, device=device)
        tensors = {"A": a_flat, "SFA": SFA, "B": b_flat, "SFB": SFB, "D": d, "ks": ks, "ks_tensor": ks_tensor}
        return Problem(s, tensors, parts, torch.cat(refs), c, c.reshape(G * M, N))

    raise ValueError(f"unknown suite {s.suite!r}")
