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

CONTIGUOUS = dict(groups=8, n=4096, k=7168, rows=128)  # rows per expert, a multiple of the 128 alignment
MASKED = dict(groups=8, m_max=256, n=4096, k=7168, expected_m=32)
WGRAD = dict(m=2112, n=7168, k=2048)
K_GROUPED = dict(groups=4, m=2048, n=7168, k=512)  # k per group
POOL = 3  # buffers a "fresh" grouped tensor cycles through (what a caching allocator hands out)

GOALS_US = {
    "dense/same": 8.0, "dense/fresh_out": 8.0, "dense/m_changes": 8.0, "dense/engine": 10.0,
    "dense/sfa_row_major": 20.0, "contiguous/same": 8.0, "contiguous/engine": 10.0, "masked/same": 8.0,
    "masked/engine": 10.0, "wgrad/same": 8.0, "wgrad/fresh_in": 10.0, "k_grouped/same": 15.0,
}
"""CPU µs per call dgx aims for on the device, per pattern."""
PEER_PATTERNS = ("dense/same", "dense/m_changes")
"""The patterns the benchmark's peers are timed in too (each prepared once per problem: they take no fresh
tensors; they allocate their outputs on every call anyway)."""


@dataclasses.dataclass
class Pattern:
    """One way of calling: ``args(i)`` gives the arguments of call i (building fresh tensors where the pattern
    does: ``fresh``), ``call(args)`` makes the call; ``step(i)`` is both."""

    kind: str  # dense, contiguous, masked, wgrad, k_grouped
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
    cap = ROW_BLOCK * SLICE_SLOTS + max(M_SIZES)
    A_buf = torch.zeros(cap, k, dtype=fp8, device=device)
    SFA_buf = _m_major(torch, cap, kb, device)

    def engine(i):
        rows = M_SIZES[i % count]
        off = ROW_BLOCK * (i * OFFSET_STEP % SLICE_SLOTS)
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


BUILDERS = {
    "dense": dense_patterns,
    "contiguous": contiguous_patterns,
    "masked": masked_patterns,
    "wgrad": wgrad_patterns,
    "k_grouped": k_grouped_patterns,
}


def all_patterns(dgx, device: str = "cuda", kinds=tuple(BUILDERS)) -> list[Pattern]:
    return [p for kind in kinds for p in BUILDERS[kind](dgx, device)]
