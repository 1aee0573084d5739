"""The call patterns of serving and training engines, for measuring host (CPU) cost per call.

A serving engine in eager mode calls a GEMM with tensors it has just made: a fresh output from the caching
allocator, the activations as a fresh slice of a token buffer, and a row count that changes from one step to
the next. Each :class:`Pattern` here is one such way of calling: ``step(i)`` makes call ``i`` (building its
tensors first, where the pattern makes fresh ones) and ``prep(i)`` builds the same tensors without the call,
so that ``cost(step) - cost(prep)`` is the call's own cost.
dgx.bench.timing.pattern_cost measures it so, for ``dgx bench`` and tests/device/host_cost.py alike (the latter
also times each call alone, its arguments built outside the timed span: the subtraction charges the call with
part of building and freeing fresh tensors next to it).

The tensors live on ``device`` (``"cuda"``, or ``"cpu"`` for a profile of the Python path with the driver
calls stood in for: tests/device/host_profile.py). Their values are zeros: host cost does not depend on them.
``dgx`` is the module whose functions are called (dgx itself, or a stand-in with the same signatures).

Used by ``dgx bench`` (its host section), tests/device/host_cost.py and tests/device/host_profile.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

DENSE_SHAPE = (64, 2112, 7168)  # the dense suite's first decode shape (M, N, K); docs/PEERS.md section 2
M_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128)  # 13 decode batch sizes
"""The row counts the changing-M patterns cycle through."""
OFFSET_STEP = 7  # fresh slices start this many row blocks further on each call (pointers change every call)
ROW_BLOCK = 64
SLICE_SLOTS = 61  # distinct slice offsets (prime, so offset and M repeat together only every 13 x 61 calls)
ENGINE_ROWS = ROW_BLOCK * SLICE_SLOTS + max(M_SIZES)  # a token buffer holding every slice an engine's calls take

CONTIGUOUS = dict(groups=8, n=4096, k=7168, rows=128)  # rows per expert, a multiple of the 128 alignment
MASKED = dict(groups=8, m_max=256, n=4096, k=7168, expected_m=32)
WGRAD = dict(m=2112, n=7168, k=2048)
K_GROUPED = dict(groups=4, m=2048, n=7168, k=512)  # k per group
EINSUM_HEADS = dict(b=64, h=128, r=512, d=128)  # the MLA projections' per-head shape, a decode batch
EINSUM_SUM = dict(s=4096, m=256, n=256, k=256)  # 'bmk,bnk->mn': one of DeepGEMM's test shapes
MOE = dict(groups=8, m_max=256, n=4096, k=7168, expected_m=32, rows=128)  # gate-up: N = 2I, I = 2048
SILU = dict(m=128, inter=2048, groups=8, m_max=256)  # x [M, 2I] (masked: [G, Mmax, 2I])
POOL = 3  # buffers a "fresh" grouped tensor cycles through (what a caching allocator hands out)

GOALS_US = {
    "dense/same": 8.0, "dense/fresh_out": 8.0, "dense/m_changes": 8.0, "dense/engine": 10.0,
    "dense/sfa_row_major": 20.0, "contiguous/same": 8.0, "contiguous/engine": 10.0, "masked/same": 8.0,
    "masked/engine": 10.0, "wgrad/same": 8.0, "wgrad/fresh_in": 10.0, "k_grouped/same": 15.0,
    "einsum/bhr_same": 8.0, "einsum/bhd_same": 8.0, "einsum/bhr_engine": 10.0, "einsum/bmk_same": 10.0,
    "einsum/bmk_fresh_out": 12.0, "fused/dense_fp8": 8.0, "fused/dense_alpha": 8.0, "fused/dense_engine": 10.0,
    "fused/contiguous_swiglu": 8.0, "fused/masked_swiglu": 8.0, "fused/masked_engine": 10.0, "silu/same": 8.0,
    "silu/alloc": 12.0, "silu/masked_alloc": 12.0,
}
"""CPU µs per call dgx aims for on the device, per pattern."""
PEER_PATTERNS = ("dense/same", "dense/m_changes")
"""The patterns the benchmark's peers are timed in too (each prepared once per problem: they take no fresh
tensors; they allocate their outputs on every call anyway)."""


@dataclasses.dataclass
class Pattern:
    """One way of calling: ``args(i)`` gives the arguments of call i (building fresh tensors where the pattern
    does: ``fresh``), ``call(args)`` makes the call; ``step(i)`` is both."""

    kind: str  # dense, contiguous, masked, wgrad, k_grouped, einsum, fused, silu
    name: str  # same, fresh_out, m_changes, engine, sfa_row_major, fresh_in
    label: str  # what it does, for tables
    call: Callable[[tuple], Any]
    args: Callable[[int], tuple]
    fresh: bool = False  # args(i) builds tensors (timed separately, and subtracted)

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"

    def step(self, i: int) -> Any:
        return self.call(self.args(i))

    @property
    def prep(self) -> Callable[[int], tuple] | None:
        """What a call builds before dgx is called, or None where it builds nothing."""
        return self.args if self.fresh else None


def _kb(k: int) -> int:
    return -(-k // 128)


def _grouped_weights(torch, groups: int, n: int, k: int, device: str):
    """(B, SFB) of a grouped GEMM: FP8 zeros [groups, N, K] and unit scales per 128x128 block."""
    return (torch.zeros(groups, n, k, dtype=torch.float8_e4m3fn, device=device),
            torch.ones(groups, _kb(n), _kb(k), dtype=torch.float32, device=device))


def _m_major(torch, rows: int, cols: int, device: str, groups: int | None = None):
    """Float32 zeros [rows, cols] (or [groups, rows, cols]) in the TMA-aligned M-major layout."""
    aligned = -(-rows // 4) * 4
    if groups is None:
        return torch.zeros(cols, aligned, dtype=torch.float32, device=device).t()[:rows]
    return torch.zeros(groups, cols, aligned, dtype=torch.float32, device=device).transpose(1, 2)[:, :rows]


def _same(*args) -> Callable[[int], tuple]:
    return lambda i: args


def _engine_rows(i: int) -> tuple[int, int]:
    """(first row, rows) of the token buffer an engine's call `i` takes: M changes every call, and the slice starts
    at a moving offset (new pointers every call)."""
    return ROW_BLOCK * (i * OFFSET_STEP % SLICE_SLOTS), M_SIZES[i % len(M_SIZES)]


def dense_patterns(dgx, device: str = "cuda", shape: tuple[int, int, int] = DENSE_SHAPE) -> list[Pattern]:
    """fp8_gemm_nt on (M, N, K): the same tensors; a fresh output each call; M changing every call (tensors
    made once per M); M changing with fresh A/SFA slices and fresh outputs (the engine); a row-major SFA."""
    import torch

    m, n, k = shape
    kb = _kb(k)
    fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16
    f = dgx.fp8_gemm_nt

    def call(args):
        f(*args)

    B = torch.zeros(n, k, dtype=fp8, device=device)
    SFB = torch.ones(_kb(n), kb, dtype=torch.float32, device=device)
    b = (B, SFB)
    A = torch.zeros(m, k, dtype=fp8, device=device)
    a = (A, _m_major(torch, m, kb, device))
    d = torch.zeros(m, n, dtype=bf16, device=device)
    out = [Pattern("dense", "same", f"same tensors every call, SFA M-major ({m}x{n}x{k})", call, _same(a, b, d))]
    out.append(Pattern("dense", "fresh_out", "a fresh output tensor each call", call,
                       lambda i: (a, b, torch.empty(m, n, dtype=bf16, device=device)), fresh=True))
    per_m = [((torch.zeros(s, k, dtype=fp8, device=device), _m_major(torch, s, kb, device)), b,
              torch.zeros(s, n, dtype=bf16, device=device)) for s in M_SIZES]
    count = len(per_m)
    out.append(Pattern("dense", "m_changes", f"M changes every call ({count} sizes, tensors reused)", call,
                       lambda i: per_m[i % count]))
    A_buf = torch.zeros(ENGINE_ROWS, k, dtype=fp8, device=device)
    SFA_buf = _m_major(torch, ENGINE_ROWS, kb, device)

    def engine(i):
        off, rows = _engine_rows(i)
        return (A_buf[off:off + rows], SFA_buf[off:off + rows]), b, torch.empty(rows, n, dtype=bf16, device=device)

    out.append(Pattern("dense", "engine", "M changes, fresh A/SFA slices and a fresh output each call (an engine)",
                       call, engine, fresh=True))
    a_row = (A, torch.ones(m, kb, dtype=torch.float32, device=device))
    out.append(Pattern("dense", "sfa_row_major", "same tensors, SFA row-major (converted every call)", call,
                       _same(a_row, b, d)))
    return out


def contiguous_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """m_grouped_fp8_gemm_nt_contiguous: the same tensors; and the engine (M_sum changing every call, fresh A,
    SFA and m_indices slices, a fresh output)."""
    import torch

    g, n, k, rows = (CONTIGUOUS[x] for x in ("groups", "n", "k", "rows"))
    kb = _kb(k)
    f = dgx.m_grouped_fp8_gemm_nt_contiguous

    def call(args):
        f(*args)

    b = _grouped_weights(torch, g, n, k, device)
    m_sum = g * rows
    sums = [128 * (j + 1) for j in range(len(M_SIZES))]  # 13 values of M_sum, 128 .. 1664
    cap = max(sums) + 128 * SLICE_SLOTS
    A_buf = torch.zeros(cap, k, dtype=torch.float8_e4m3fn, device=device)
    SFA_buf = _m_major(torch, cap, kb, device)
    idx_buf = (torch.arange(cap, dtype=torch.int32, device=device) // rows % g).to(torch.int32)
    same = ((A_buf[:m_sum], SFA_buf[:m_sum]), b, torch.zeros(m_sum, n, dtype=torch.bfloat16, device=device),
            idx_buf[:m_sum])
    out = [Pattern("contiguous", "same", f"same tensors every call ({g} groups x {rows} rows, N {n}, K {k})", call,
                   _same(*same))]

    def engine(i):
        s = sums[i % len(sums)]
        off = 128 * (i * OFFSET_STEP % SLICE_SLOTS)
        return ((A_buf[off:off + s], SFA_buf[off:off + s]), b, torch.empty(s, n, dtype=torch.bfloat16, device=device),
                idx_buf[off:off + s])

    out.append(Pattern("contiguous", "engine", "M_sum changes, fresh A/SFA/m_indices slices and output each call",
                       call, engine, fresh=True))
    return out


def masked_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """m_grouped_fp8_gemm_nt_masked: the same tensors; and fresh A, SFA, masked_m and output tensors each call
    (each from a small pool of buffers, as a caching allocator hands them out)."""
    import torch

    g, m_max, n, k, expected = (MASKED[x] for x in ("groups", "m_max", "n", "k", "expected_m"))
    kb = _kb(k)
    f = dgx.m_grouped_fp8_gemm_nt_masked

    def call(args):
        f(*args)

    b = _grouped_weights(torch, g, n, k, device)
    As = [torch.zeros(g, m_max, k, dtype=torch.float8_e4m3fn, device=device) for _ in range(POOL)]
    SFAs = [_m_major(torch, m_max, kb, device, g) for _ in range(POOL)]
    ds = [torch.zeros(g, m_max, n, dtype=torch.bfloat16, device=device) for _ in range(POOL)]
    mms = [torch.full((g,), expected, dtype=torch.int32, device=device) for _ in range(POOL)]
    out = [Pattern("masked", "same", f"same tensors every call ({g} groups x {m_max} rows, N {n}, K {k})", call,
                   _same((As[0], SFAs[0]), b, ds[0], mms[0], expected))]

    def fresh(i):
        j = i % POOL
        # New tensor objects over the pool's memory (views, as the allocator would hand back a block).
        return (As[j][:], SFAs[j][:]), b, ds[(i + 1) % POOL][:], mms[(i + 2) % POOL][:], expected

    out.append(Pattern("masked", "engine", "fresh A/SFA/output/masked_m tensors each call (pointers cycling)", call,
                       fresh, fresh=True))
    return out


def wgrad_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """The weight gradient, fp8_gemm_nt with a float32 d and c = d: the same tensors; and fresh A/B (and their
    scales) each call, as every training step brings new activations and gradients."""
    import torch

    m, n, k = (WGRAD[x] for x in ("m", "n", "k"))
    kb = _kb(k)
    f = dgx.fp8_gemm_nt

    def call(args):
        a, b, d = args
        f(a, b, d, c=d)

    fp8 = torch.float8_e4m3fn
    As = [(torch.zeros(m, k, dtype=fp8, device=device), _m_major(torch, m, kb, device)) for _ in range(POOL)]
    Bs = [(torch.zeros(n, k, dtype=fp8, device=device), _m_major(torch, n, kb, device)) for _ in range(POOL)]
    d = torch.zeros(m, n, dtype=torch.float32, device=device)
    out = [Pattern("wgrad", "same", f"same tensors every call, d += a.b^T ({m}x{n}x{k}, FP32)", call,
                   _same(As[0], Bs[0], d))]

    def fresh(i):
        (A, SFA), (B, SFB) = As[i % POOL], Bs[(i + 1) % POOL]
        return (A[:], SFA[:]), (B[:], SFB[:]), d

    out.append(Pattern("wgrad", "fresh_in", "fresh A/B tensors each call (pointers cycling)", call, fresh,
                       fresh=True))
    return out


def k_grouped_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """k_grouped_fp8_gemm_nt_contiguous with the same tensors every call (the fast path: the groups' tensor maps
    kept in device memory per A/B address and stream, dgx.k_grouped_maps)."""
    import torch

    g, m, n, k = (K_GROUPED[x] for x in ("groups", "m", "n", "k"))
    ks = [k] * g
    total = k * g
    A = torch.zeros(m * total, dtype=torch.float8_e4m3fn, device=device)
    B = torch.zeros(n * total, dtype=torch.float8_e4m3fn, device=device)
    SFA = _m_major(torch, m, total // 128, device)
    SFB = _m_major(torch, n, total // 128, device)
    d = torch.zeros(g, m, n, dtype=torch.float32, device=device)
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device=device)
    f = dgx.k_grouped_fp8_gemm_nt_contiguous

    def call(args):
        f(*args)

    return [Pattern("k_grouped", "same", f"same tensors every call ({g} groups, M {m}, N {n}, K {k} each)", call,
                    _same((A, SFA), (B, SFB), d, ks, ks_tensor))]


def einsum_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """dgx.einsum: the per-head forms with the same tensors; 'bhr,hdr->bhd' as an engine calls it (b changing, a
    fresh slice of x and a fresh z each call); 'bmk,bnk->mn' accumulating into the same FP32 d, and with a fresh
    BF16 d each call (two launches: the GEMM into the partials, the in-order reduction)."""
    import torch

    b, h, r, dd = (EINSUM_HEADS[x] for x in ("b", "h", "r", "d"))
    bf16 = torch.bfloat16
    f = dgx.einsum

    def call(args):
        f(*args)

    y = torch.zeros(h, dd, r, dtype=bf16, device=device)
    out = [Pattern("einsum", "bhr_same", f"'bhr,hdr->bhd', same tensors (b {b}, h {h}, r {r}, d {dd})", call,
                   _same("bhr,hdr->bhd", torch.zeros(b, h, r, dtype=bf16, device=device), y,
                         torch.zeros(b, h, dd, dtype=bf16, device=device))),
           Pattern("einsum", "bhd_same", f"'bhd,hdr->bhr', same tensors (b {b}, h {h}, d {dd}, r {r})", call,
                   _same("bhd,hdr->bhr", torch.zeros(b, h, dd, dtype=bf16, device=device), y,
                         torch.zeros(b, h, r, dtype=bf16, device=device)))]
    x_buf = torch.zeros(ENGINE_ROWS, h, r, dtype=bf16, device=device)

    def engine(i):
        off, rows = _engine_rows(i)
        return "bhr,hdr->bhd", x_buf[off:off + rows], y, torch.empty(rows, h, dd, dtype=bf16, device=device)

    out.append(Pattern("einsum", "bhr_engine", "'bhr,hdr->bhd', b changes, a fresh x slice and z each call", call,
                       engine, fresh=True))
    s, m, n, k = (EINSUM_SUM[x] for x in ("s", "m", "n", "k"))
    a_s = torch.zeros(s, m, k, dtype=bf16, device=device)
    b_s = torch.zeros(s, n, k, dtype=bf16, device=device)
    d32 = torch.zeros(m, n, dtype=torch.float32, device=device)
    out.append(Pattern("einsum", "bmk_same", f"'bmk,bnk->mn', d += sum over S (FP32, S {s}, {m}x{n}x{k})", call,
                       _same("bmk,bnk->mn", a_s, b_s, d32, d32)))
    out.append(Pattern("einsum", "bmk_fresh_out", "'bmk,bnk->mn', a fresh BF16 d each call", call,
                       lambda i: ("bmk,bnk->mn", a_s, b_s, torch.empty(m, n, dtype=bf16, device=device)), fresh=True))
    return out


def _fp8_out(torch, rows: int, n: int, device: str, groups: int | None = None):
    """(d_fp8, d_sf) of a fused FP8 output of n channels: FP8 [.., rows, n] and M-major FP32 scales."""
    lead = () if groups is None else (groups,)
    return (torch.empty(lead + (rows, n), dtype=torch.float8_e4m3fn, device=device),
            _m_major(torch, rows, n // 128, device, groups))


def fused_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """The fused epilogues of the FP8 GEMMs: dense with an FP8 output (same tensors; the engine: M changing, fresh A
    slices and fresh outputs each call), dense BF16 with alpha; the MoE gate-up with SwiGLU and an FP8 output
    (contiguous; masked with the same tensors and with fresh ones from a pool)."""
    import torch

    fp8 = torch.float8_e4m3fn
    m, n, k = DENSE_SHAPE
    kb = _kb(k)
    gemm = dgx.fp8_gemm_nt
    B = torch.zeros(n, k, dtype=fp8, device=device)
    b = (B, torch.ones(_kb(n), kb, dtype=torch.float32, device=device))
    a = (torch.zeros(m, k, dtype=fp8, device=device), _m_major(torch, m, kb, device))
    n_fp8 = n // 128 * 128  # the FP8 output quantises whole groups of 128 channels
    b_fp8 = (B[:n_fp8], b[1][:n_fp8 // 128])
    d_fp8 = _fp8_out(torch, m, n_fp8, device)

    def dense(args):
        gemm(*args)

    def dense_alpha(args):
        gemm(*args, alpha=0.5)

    out = [Pattern("fused", "dense_fp8", f"fp8_gemm_nt, d=(d_fp8, d_sf), same tensors ({m}x{n_fp8}x{k})", dense,
                   _same(a, b_fp8, d_fp8)),
           Pattern("fused", "dense_alpha", "fp8_gemm_nt, BF16 d, alpha=0.5, same tensors", dense_alpha,
                   _same(a, b, torch.zeros(m, n, dtype=torch.bfloat16, device=device)))]
    A_buf = torch.zeros(ENGINE_ROWS, k, dtype=fp8, device=device)
    SFA_buf = _m_major(torch, ENGINE_ROWS, kb, device)

    def engine(i):
        off, rows = _engine_rows(i)
        return (A_buf[off:off + rows], SFA_buf[off:off + rows]), b_fp8, _fp8_out(torch, rows, n_fp8, device)

    out.append(Pattern("fused", "dense_engine", "d=(d_fp8, d_sf), M changes, fresh A slices and outputs each call",
                       dense, engine, fresh=True))
    g, m_max, n2, k2, expected, rows = (MOE[x] for x in ("groups", "m_max", "n", "k", "expected_m", "rows"))
    kb2 = _kb(k2)
    gate_up = dgx.prepare_gate_up(*_grouped_weights(torch, g, n2, k2, device))
    contiguous = dgx.m_grouped_fp8_gemm_nt_contiguous
    masked = dgx.m_grouped_fp8_gemm_nt_masked

    def call_contiguous(args):
        contiguous(*args, swiglu=True)

    def call_masked(args):
        masked(*args, swiglu=True)

    m_sum = g * rows
    a_c = (torch.zeros(m_sum, k2, dtype=fp8, device=device), _m_major(torch, m_sum, kb2, device))
    idx = (torch.arange(m_sum, dtype=torch.int32, device=device) // rows).to(torch.int32)
    out.append(Pattern("fused", "contiguous_swiglu", f"contiguous, swiglu=True, FP8 out, same tensors ({g} groups x "
                       f"{rows} rows, N {n2}, K {k2})", call_contiguous,
                       _same(a_c, gate_up, _fp8_out(torch, m_sum, n2 // 2, device), idx)))
    As = [(torch.zeros(g, m_max, k2, dtype=fp8, device=device), _m_major(torch, m_max, kb2, device, g))
          for _ in range(POOL)]
    ds = [_fp8_out(torch, m_max, n2 // 2, device, g) for _ in range(POOL)]
    mms = [torch.full((g,), expected, dtype=torch.int32, device=device) for _ in range(POOL)]
    out.append(Pattern("fused", "masked_swiglu", f"masked, swiglu=True, FP8 out, same tensors ({g} groups x {m_max} "
                       f"rows)", call_masked, _same(As[0], gate_up, ds[0], mms[0], expected)))

    def fresh(i):
        (A, SFA), (dq, dsf) = As[i % POOL], ds[(i + 1) % POOL]
        return (A[:], SFA[:]), gate_up, (dq[:], dsf[:]), mms[(i + 2) % POOL][:], expected

    out.append(Pattern("fused", "masked_engine", "masked, swiglu=True, fresh A/output/masked_m tensors each call",
                       call_masked, fresh, fresh=True))
    return out


def silu_patterns(dgx, device: str = "cuda") -> list[Pattern]:
    """dgx.silu_mul_quant: with its outputs given (the same every call); allocating them (as the MoE block calls
    it), plain and masked."""
    import torch

    m, inter, g, m_max = (SILU[x] for x in ("m", "inter", "groups", "m_max"))
    f = dgx.silu_mul_quant
    x = torch.zeros(m, 2 * inter, dtype=torch.bfloat16, device=device)
    out = torch.empty(m, inter, dtype=torch.float8_e4m3fn, device=device)
    sf = _m_major(torch, m, inter // 128, device)

    def given(args):
        f(args[0], out=args[1], out_scales=args[2])

    xm = torch.zeros(g, m_max, 2 * inter, dtype=torch.bfloat16, device=device)
    mm = torch.full((g,), 32, dtype=torch.int32, device=device)
    return [Pattern("silu", "same", f"outputs given, same tensors (M {m}, I {inter})", given, _same(x, out, sf)),
            Pattern("silu", "alloc", "outputs allocated by the call (their allocation included)",
                    lambda args: f(args[0]), _same(x)),
            Pattern("silu", "masked_alloc", f"masked_m, outputs allocated ({g} groups x {m_max} rows)",
                    lambda args: f(args[0], masked_m=args[1]), _same(xm, mm))]


BUILDERS = {
    "dense": dense_patterns,
    "contiguous": contiguous_patterns,
    "masked": masked_patterns,
    "wgrad": wgrad_patterns,
    "k_grouped": k_grouped_patterns,
    "einsum": einsum_patterns,
    "fused": fused_patterns,
    "silu": silu_patterns,
}


def all_patterns(dgx, device: str = "cuda", kinds=tuple(BUILDERS)) -> list[Pattern]:
    return [p for kind in kinds for p in BUILDERS[kind](dgx, device)]
