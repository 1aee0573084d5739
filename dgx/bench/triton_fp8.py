"""A blockwise FP8 GEMM in Triton, of the kind vLLM and SGLang ship (written here for the benchmark).

Per K step of 128: ``tl.dot`` on e4m3 tiles, multiplied by ``a_scale[row, k] · b_scale[n_block, k]``
(or ``b_scale[n, k]`` for 1×128-scaled B), accumulated in FP32; BF16 (or FP32, optionally ``+= d``)
store. Modes: 0 dense, 1 M-grouped contiguous (a tile's group read from ``m_indices``; tiles of
padding rows skipped), 2 M-grouped masked (grid axis 1 = group; tiles past ``masked_m[g]`` skipped).

Importing this module imports triton; the benchmark imports it lazily and reports Triton as
unavailable where that fails.
"""

from __future__ import annotations

import dataclasses

import triton
import triton.language as tl

from .prepared import Prepared
from .problems import Problem
from .suites import Shape


@triton.jit
def _fp8_blockwise_gemm(
    a_ptr,
    b_ptr,
    d_ptr,
    sa_ptr,
    sb_ptr,
    gid_ptr,
    cnt_ptr,
    M,
    N,
    K,
    s_am,
    s_ak,
    s_bn,
    s_bk,
    s_dm,
    s_dn,
    s_sam,
    s_sak,
    s_sbn,
    s_sbk,
    s_ag,
    s_bg,
    s_dg,
    s_sag,
    s_sbg,
    MODE: tl.constexpr,
    B_ROW_SCALES: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_in_group = GROUP_M * num_pid_n
    group_id = pid // num_in_group
    first_m = group_id * GROUP_M
    gsize = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % num_in_group) % gsize)
    pid_n = (pid % num_in_group) // gsize

    m_end = M
    if MODE == 1:
        g = tl.load(gid_ptr + pid_m * BLOCK_M)
        if g < 0:
            return
        b_ptr += g.to(tl.int64) * s_bg
        sb_ptr += g.to(tl.int64) * s_sbg
    if MODE == 2:
        g2 = tl.program_id(1)
        m_end = tl.minimum(tl.load(cnt_ptr + g2), M)
        if pid_m * BLOCK_M >= m_end:
            return
        a_ptr += g2.to(tl.int64) * s_ag
        sa_ptr += g2.to(tl.int64) * s_sag
        b_ptr += g2.to(tl.int64) * s_bg
        sb_ptr += g2.to(tl.int64) * s_sbg
        d_ptr += g2.to(tl.int64) * s_dg

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rm = (offs_m % M).to(tl.int64)
    rn = offs_n % N
    a_ptrs = a_ptr + rm[:, None] * s_am + offs_k[None, :] * s_ak
    b_ptrs = b_ptr + rn[None, :] * s_bn + offs_k[:, None] * s_bk
    sa_ptrs = sa_ptr + rm * s_sam
    if B_ROW_SCALES:
        sb_ptrs = sb_ptr + rn * s_sbn
    else:
        sb_ptrs = sb_ptr + (rn // 128) * s_sbn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            rem = K - kb * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < rem, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < rem, other=0.0)
        sa = tl.load(sa_ptrs + kb * s_sak)
        sb = tl.load(sb_ptrs + kb * s_sbk)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk

    d_ptrs = d_ptr + offs_m.to(tl.int64)[:, None] * s_dm + offs_n[None, :] * s_dn
    mask = (offs_m[:, None] < m_end) & (offs_n[None, :] < N)
    if ACCUMULATE:
        acc += tl.load(d_ptrs, mask=mask, other=0.0)
    tl.store(d_ptrs, acc.to(d_ptr.dtype.element_ty), mask=mask)


@dataclasses.dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    group_m: int
    num_warps: int
    num_stages: int


CONFIGS = (
    Config(16, 64, 1, 4, 4),
    Config(16, 128, 1, 4, 5),
    Config(32, 64, 8, 4, 4),
    Config(32, 128, 8, 4, 4),
    Config(64, 64, 8, 4, 3),
    Config(64, 128, 8, 4, 3),
    Config(64, 128, 8, 4, 4),
    Config(64, 256, 8, 8, 3),
    Config(128, 64, 8, 4, 3),
    Config(128, 128, 8, 4, 3),
    Config(128, 128, 8, 8, 4),
    Config(128, 256, 8, 8, 3),
)


def config_label(cfg: Config) -> str:
    return f"BM{cfg.block_m} BN{cfg.block_n} BK128 G{cfg.group_m} w{cfg.num_warps} s{cfg.num_stages}"


def _pow2_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def configs_for(shape: Shape) -> list[Config]:
    """The sweep for a shape: block M sized to the rows a tile sees (group rows for grouped)."""
    if shape.suite in ("contiguous", "masked"):
        rows = max(shape.group_ms) if shape.group_ms else shape.m
    else:
        rows = shape.m
    p = _pow2_at_least(max(rows, 16))
    hi = max(16, min(p, 128))
    lo = min(64, max(16, p // 4))
    out = [c for c in CONFIGS if lo <= c.block_m <= hi]
    if shape.suite == "contiguous":
        out = [c for c in out if 128 % c.block_m == 0]
    return out


def _launcher(mode, a, sa, b, sb, d, M, N, K, strides, cfg: Config, *, b_row, accumulate, gid=None, cnt=None, groups=1):
    grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n), groups if mode == 2 else 1)
    kernel = _fp8_blockwise_gemm[grid]
    dummy = sa
    args = (a, b, d, sa, sb, gid if gid is not None else dummy, cnt if cnt is not None else dummy, M, N, K, *strides)
    kwargs = dict(
        MODE=mode,
        B_ROW_SCALES=b_row,
        ACCUMULATE=accumulate,
        EVEN_K=(K % 128 == 0),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=128,
        GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return lambda: kernel(*args, **kwargs)


def _dense_fn(a, sa, b, sb, d, cfg, *, b_row, accumulate):
    M, K = a.shape
    N = b.shape[0]
    strides = (
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), d.stride(0), d.stride(1),
        sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1),
        0, 0, 0, 0, 0,
    )  # fmt: skip
    return _launcher(0, a, sa, b, sb, d, M, N, K, strides, cfg, b_row=b_row, accumulate=accumulate)


def prepare(problem: Problem, cfg: Config) -> Prepared:
    """The Triton kernel on ``problem`` with ``cfg``; its own output tensors."""
    import torch

    s = problem.shape
    t = problem.tensors
    label = "Triton blockwise FP8 (tl.dot per 128 of K, scales applied per step)"

    if s.suite == "dense":
        d = torch.empty(s.m, s.n, dtype=torch.bfloat16, device=t["A"].device)
        run = _dense_fn(t["A"], t["SFA"], t["B"], t["SFB"], d, cfg, b_row=False, accumulate=False)
        return Prepared(run, lambda: d.float(), note=label)

    if s.suite == "wgrad":
        c = problem.c
        d = c.clone()
        run = _dense_fn(t["A"], t["SFA"], t["B"], t["SFB"], d, cfg, b_row=True, accumulate=True)
        return Prepared(run, lambda: d.clone(), reset=lambda: d.copy_(c), includes_c=True, note=label + ", d += a·bᵀ")

    if s.suite == "contiguous":
        A, SFA, B, SFB, mi = t["A"], t["SFA"], t["B"], t["SFB"], t["m_indices"]
        M, K = A.shape
        N = B.shape[1]
        d = torch.empty(M, N, dtype=torch.bfloat16, device=A.device)
        strides = (
            A.stride(0), A.stride(1), B.stride(1), B.stride(2), d.stride(0), d.stride(1),
            SFA.stride(0), SFA.stride(1), SFB.stride(1), SFB.stride(2),
            0, B.stride(0), 0, 0, SFB.stride(0),
        )  # fmt: skip
        run = _launcher(1, A, SFA, B, SFB, d, M, N, K, strides, cfg, b_row=False, accumulate=False, gid=mi)
        return Prepared(run, lambda: problem.valid_rows(d), note=label + ", grouped by m_indices")

    if s.suite == "masked":
        A, SFA, B, SFB, cnt = t["A"], t["SFA"], t["B"], t["SFB"], t["masked_m"]
        G, M, K = A.shape
        N = B.shape[1]
        d = torch.empty(G, M, N, dtype=torch.bfloat16, device=A.device)
        strides = (
            A.stride(1), A.stride(2), B.stride(1), B.stride(2), d.stride(1), d.stride(2),
            SFA.stride(1), SFA.stride(2), SFB.stride(1), SFB.stride(2),
            A.stride(0), B.stride(0), d.stride(0), SFA.stride(0), SFB.stride(0),
        )  # fmt: skip
        run = _launcher(2, A, SFA, B, SFB, d, M, N, K, strides, cfg, b_row=False, accumulate=False, cnt=cnt, groups=G)
        return Prepared(run, lambda: problem.valid_rows(d), note=label + ", masked (grid over groups)")

    if s.suite == "k_grouped":
        c = problem.c
        d = c.clone()
        fns = [
            _dense_fn(p.a, p.sfa, p.b, p.sfb, d[g], cfg, b_row=True, accumulate=True)
            for g, p in enumerate(problem.parts)
        ]

        def run():
            for f in fns:
                f()

        return Prepared(
            run,
            lambda: problem.valid_rows(d),
            reset=lambda: d.copy_(c),
            includes_c=True,
            note=label + f", d[g] += A_g·B_gᵀ, per-group loop ({len(fns)} launches)",
        )

    raise ValueError(f"no Triton mode for suite {s.suite!r}")
