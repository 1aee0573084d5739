"""Soak test: a random mix of every kernel family and shape kind dgx has, for a set time, from several threads.

What a serving process does for hours, compressed: calls of every kind of kernel dgx has (FP8 dense, M-grouped
contiguous with m_indices and with prefix sums, masked, the dense and K-grouped weight gradients, skip-head-mid,
the FP8 einsum; the BF16 GEMMs in their forms and grouped layouts; the HyperConnection pre-norm GEMM; MQA-logits
prefill and paged decode), eagerly on fresh tensors, eagerly on tensors reused from call to call, and as CUDA-graph replays (whose
counts, windows and context lengths change between replays), from --threads threads with a stream each; now and
then a bad input, which must raise one of dgx's typed errors (TypeError, ValueError, dgx.DgxError) before anything
launches. A share of the calls (--check-rate) is spot-checked against a float64 reference, their outputs poisoned
with NaN first so that an element left unwritten shows.

Every kernel is built and loaded in a warm-up (each maker's every variant, once, checked), then DGX_JIT_STRICT=1
is set: a kernel missing afterwards is an error, and the report counts the kernels compiled after the warm-up
(0 expected). It reports the calls made (per family and mode), the errors (0 expected besides the bad inputs'
typed ones), the checks and their worst error, and host RSS and GPU memory at the start, along the way and at the
end (flat expected); JSON to $OUT/soak.json when OUT is set (or to --json FILE). Exit status 0 when the run is
clean, 1 when it is not, 2 on bad arguments.

A family joins the mix with entries in MAKERS: one Maker per shape kind, which builds a Call (its tensors, the dgx
call, the check) for any of its variants and knows one bad input.

    python tests/device/soak.py [--minutes 10] [--threads 4] [--seed 0] [--check-rate 0.05] [--bad-rate 0.02]
                                [--graph-rate 0.3] [--reuse-rate 0.3] [--json FILE] [--dry-run]
    (repository root as cwd, repository on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils, mqa_utils

MODES = ("fresh", "reused", "graph", "bad")
MAX_ERROR_SAMPLES = 20
GEMM_TOL = 2e-3  # BF16 outputs, normwise against the float64 product of the dequantised inputs (see _check_bf16)
WGRAD_TOL = 5e-4  # FP32 outputs
MQA_TOL = 2e-3  # FP32 logits (BF16 logits: 1e-2)


@dataclasses.dataclass
class Call:
    """One prepared call: its tensors live in the closures. ``prep(rng)`` runs before every launch or replay,
    outside any graph (poison the outputs, draw new counts, windows or lengths into the call's own tensors);
    ``launch()`` is the dgx call itself, capturable in a CUDA graph; ``check()`` runs after the stream is
    synchronised and returns the error against the float64 reference (raising AssertionError when it is wrong)."""

    launch: Callable[[], object]
    check: Callable[[], float]
    prep: Callable[[random.Random], None] = lambda rng: None


@dataclasses.dataclass(frozen=True)
class Maker:
    """One shape kind of one family: ``build(rng, variant, weights)`` makes a Call on fresh tensors (``weights``: a
    dict the maker may keep static operands in, one per thread, as a server keeps its weights); ``variants`` are
    what the kernel choice depends on (M, a group layout, ...): the warm-up builds every one, so no kernel is
    missing later; ``bad()`` makes one call dgx must refuse."""

    family: str
    shape: str
    variants: tuple
    build: Callable[[random.Random, object, dict], Call]
    bad: Callable[[], None]
    graphable: bool = True
    weight: float = 1.0


# --- inputs -----------------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _rel(out, ref) -> float:
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


def _gen(rng: random.Random):
    torch = _torch()
    return torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 62))


def _tokens(rng, rows, k):
    """Activations: per-token FP8 (TMA-aligned M-major scales) of fresh BF16 values."""
    from dgx.torch_utils import per_token_cast_to_fp8

    torch = _torch()
    return per_token_cast_to_fp8(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=_gen(rng)))


def _block_weights(rng, groups, n, k):
    """Weights: per-128x128-block FP8, stacked by group ([G, N, K], [G, N/128, K/128]); groups 0: one 2-D matrix."""
    from dgx.torch_utils import per_block_cast_to_fp8

    torch = _torch()
    q = [per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=_gen(rng)))
         for _ in range(max(groups, 1))]
    if groups == 0:
        return q[0]
    return torch.stack([x for x, _ in q]), torch.stack([s for _, s in q])


def _nan(*shape, dtype=None):
    torch = _torch()
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype or torch.bfloat16)


def _ref(a, b, b_rows):
    from dgx.torch_utils import dequantize

    return dequantize(*a, 1).double() @ dequantize(*b, b_rows).double().T


def _check_bf16(out, ref, what: str = "output") -> float:
    """A BF16 output against its float64 reference: every element written, and the normwise error within GEMM_TOL
    or 1.5 times what rounding the exact result to BF16 costs, whichever is larger (that rounding alone comes
    near 2e-3 on small outputs; tests/gpu_gemm_utils.py's check_dense does the same)."""
    torch = _torch()
    assert not out.isnan().any(), f"{what}: elements left unwritten"
    err = _rel(out, ref)
    tol = max(GEMM_TOL, 1.5 * _rel(ref.to(torch.bfloat16), ref))
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.2e}"
    return err


# --- the families -------------------------------------------------------------------------------------------------


def dense(n: int, k: int, ms: Sequence[int]) -> Maker:
    def build(rng, m, weights):
        import dgx

        b = weights.get("b") or weights.setdefault("b", _block_weights(rng, 0, n, k))
        a = _tokens(rng, m, k)
        d = _nan(m, n)

        return Call(lambda: dgx.fp8_gemm_nt(a, b, d), lambda: _check_bf16(d, _ref(a, b, 128)),
                    lambda rng: d.fill_(float("nan")))

    def bad():
        import dgx

        torch = _torch()
        a, b = _tokens(random.Random(1), 64, 256), _block_weights(random.Random(2), 0, 256, 256)
        dgx.fp8_gemm_nt(a, b, torch.empty(64, 256, device="cuda", dtype=torch.float16))  # an FP16 output

    return Maker("dense", f"N {n} K {k}", tuple(ms), build, bad)


def _padded_layout(group_rows: Sequence[int], align: int = 128) -> tuple[list[int], int]:
    """Each group's first row (the previous group's end rounded up to ``align``) and the rows in all."""
    starts, start = [], 0
    for rows in group_rows:
        starts.append(start)
        start = -(-(start + rows) // align) * align
    return starts, max(start, align)


def _check_groups(d, a, b, starts, group_rows) -> float:
    worst = 0.0
    for g, (s, rows) in enumerate(zip(starts, group_rows)):
        if rows:
            ref = _ref((a[0][s:s + rows], a[1][s:s + rows]), (b[0][g], b[1][g]), 128)
            worst = max(worst, _check_bf16(d[s:s + rows], ref, f"group {g}"))
    return worst


def contiguous(groups: int, n: int, k: int, layouts: Sequence[tuple[int, ...]]) -> Maker:
    """M-grouped contiguous, m_indices layout (-1 on padding rows)."""

    def build(rng, group_rows, weights):
        import dgx

        torch = _torch()
        b = weights.get("b") or weights.setdefault("b", _block_weights(rng, groups, n, k))
        starts, m = _padded_layout(group_rows)
        idx = torch.full((m,), -1, dtype=torch.int32)
        for g, (s, rows) in enumerate(zip(starts, group_rows)):
            idx[s:s + rows] = g
        m_indices = idx.cuda()
        a = _tokens(rng, m, k)
        d = _nan(m, n)
        return Call(lambda: dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices),
                    lambda: _check_groups(d, a, b, starts, group_rows), lambda rng: d.fill_(float("nan")))

    def bad():
        import dgx

        torch = _torch()
        a, b = _tokens(random.Random(1), 128, 256), _block_weights(random.Random(2), 2, 256, 256)
        m_indices = torch.zeros(128, dtype=torch.int64, device="cuda")  # int64 indices
        dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, _nan(128, 256), m_indices)

    return Maker("m_grouped_contiguous", f"{groups} groups N {n} K {k}", tuple(layouts), build, bad)


def contiguous_psum(groups: int, n: int, k: int, layouts: Sequence[tuple[int, ...]]) -> Maker:
    """M-grouped contiguous, DeepGEMM's prefix-sum layout (dgx.deep_gemm, use_psum_layout=True): a replay takes new
    group sizes that fit the rows of A."""

    def build(rng, group_rows, weights):
        import dgx.deep_gemm as dg

        torch = _torch()
        b = weights.get("b") or weights.setdefault("b", _block_weights(rng, groups, n, k))
        starts, m = _padded_layout(group_rows)
        state = {"starts": starts, "rows": list(group_rows)}
        psum = torch.tensor([s + r for s, r in zip(starts, group_rows)], dtype=torch.int32, device="cuda")
        a = _tokens(rng, m, k)
        d = _nan(m, n)

        def prep(rng):
            rows = [rng.randint(0, max(1, m // groups - 128)) for _ in range(groups)]
            new_starts, total = _padded_layout(rows)
            if total <= m:
                state["starts"], state["rows"] = new_starts, rows
                psum.copy_(torch.tensor([s + r for s, r in zip(new_starts, rows)], dtype=torch.int32))
            d.fill_(float("nan"))

        return Call(lambda: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True),
                    lambda: _check_groups(d, a, b, state["starts"], state["rows"]), prep)

    def bad():
        import dgx.deep_gemm as dg

        torch = _torch()
        a, b = _tokens(random.Random(1), 256, 256), _block_weights(random.Random(2), 2, 256, 256)
        psum = torch.zeros(3, dtype=torch.int32, device="cuda")  # one sum more than there are groups
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, _nan(256, 256), psum, use_psum_layout=True)

    return Maker("m_grouped_contiguous_psum", f"{groups} groups N {n} K {k}", tuple(layouts), build, bad)


def masked(groups: int, m_max: int, n: int, k: int, expected_m: int) -> Maker:
    """M-grouped masked: the kernel reads the counts, so a replay takes new ones (0, M_max and above it included)."""

    def build(rng, _variant, weights):
        import dgx

        torch = _torch()
        b = weights.get("b") or weights.setdefault("b", _block_weights(rng, groups, n, k))
        q = [_tokens(rng, m_max, k) for _ in range(groups)]
        a = (torch.stack([x for x, _ in q]), dgx.get_mn_major_tma_aligned_tensor(torch.stack([s.contiguous() for _, s in q])))
        d = _nan(groups, m_max, n)
        counts = [0] * groups
        masked_m = torch.zeros(groups, dtype=torch.int32, device="cuda")

        def prep(rng):
            counts[:] = [rng.choice([0, m_max, m_max + 5, rng.randint(1, m_max)]) for _ in range(groups)]
            masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
            d.fill_(float("nan"))

        def check():
            worst = 0.0
            for g, c in enumerate(counts):
                rows = min(c, m_max)
                if rows:
                    ref = _ref((a[0][g, :rows], a[1][g, :rows]), (b[0][g], b[1][g]), 128)
                    worst = max(worst, _check_bf16(d[g, :rows], ref, f"group {g}"))
                assert d[g, rows:].isnan().all(), f"group {g}: rows past masked_m written"
            return worst

        return Call(lambda: dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m), check, prep)

    def bad():
        import dgx

        torch = _torch()
        q = [_tokens(random.Random(g), 64, 256) for g in range(2)]
        a = (torch.stack([x for x, _ in q]), dgx.get_mn_major_tma_aligned_tensor(torch.stack([s.contiguous() for _, s in q])))
        b = _block_weights(random.Random(2), 2, 256, 256)
        masked_m = torch.zeros(2, dtype=torch.int32, device="cuda")
        dgx.m_grouped_fp8_gemm_nt_masked(a, b, _nan(2, 64, 256), masked_m, 0)  # expected_m 0

    return Maker("m_grouped_masked", f"{groups} groups M_max {m_max} N {n} K {k}", (None,), build, bad)


def wgrad(m: int, n: int, k: int) -> Maker:
    """Dense weight gradient, FP32 d = c + a·bᵀ (c separate, so a reused call gives the same result every time)."""

    def build(rng, _variant, weights):
        import dgx

        torch = _torch()
        a, b = _tokens(rng, m, k), _tokens(rng, n, k)
        c = torch.randn(m, n, device="cuda", generator=_gen(rng))
        d = _nan(m, n, dtype=torch.float32)

        def check():
            assert not d.isnan().any(), "output elements left unwritten"
            err = _rel(d, _ref(a, b, 1) + c.double())
            assert err <= WGRAD_TOL, f"relative error {err:.2e}"
            return err

        return Call(lambda: dgx.fp8_gemm_nt(a, b, d, c=c), check, lambda rng: d.fill_(float("nan")))

    def bad():
        import dgx

        torch = _torch()
        a, b = _tokens(random.Random(1), 128, 256), _tokens(random.Random(2), 64, 256)
        c = torch.zeros(128, 72, device="cuda")  # c of another shape than d
        dgx.fp8_gemm_nt(a, b, torch.empty(128, 64, device="cuda"), c=c)

    return Maker("wgrad", f"M {m} N {n} K {k}", (None,), build, bad)


def k_grouped(m: int, n: int, ks_variants: Sequence[tuple[int, ...]]) -> Maker:
    """K-grouped weight gradient, d[g] += A_g·B_gᵀ: d is reset from c before every launch (outside the graph)."""

    def build(rng, ks, weights):
        import dgx

        torch = _torch()
        total = sum(ks)
        aq, sfa = _tokens(rng, m, total)
        bq, sfb = _tokens(rng, n, total)
        a_flat = torch.empty(m * total, dtype=aq.dtype, device="cuda")
        b_flat = torch.empty(n * total, dtype=bq.dtype, device="cuda")
        off = 0
        for kg in ks:
            a_flat[m * off:m * (off + kg)].view(m, kg).copy_(aq[:, off:off + kg])
            b_flat[n * off:n * (off + kg)].view(n, kg).copy_(bq[:, off:off + kg])
            off += kg
        c = torch.randn(len(ks), m, n, device="cuda", generator=_gen(rng))
        d = c.clone()
        ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")

        def check():
            from dgx.torch_utils import dequantize

            worst, off = 0.0, 0
            for g, kg in enumerate(ks):
                if kg == 0:
                    assert torch.equal(d[g], c[g]), f"group {g} (k = 0) was changed"
                    continue
                kb = slice(off // 128, (off + kg) // 128)
                ref = (dequantize(aq[:, off:off + kg], sfa[:, kb], 1).double()
                       @ dequantize(bq[:, off:off + kg], sfb[:, kb], 1).double().T) + c[g].double()
                err = _rel(d[g], ref)
                assert err <= WGRAD_TOL, f"group {g}: relative error {err:.2e}"
                worst, off = max(worst, err), off + kg
            return worst

        return Call(lambda: dgx.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, list(ks), ks_tensor),
                    check, lambda rng: d.copy_(c))

    def bad():
        import dgx

        torch = _torch()
        a, b = _tokens(random.Random(1), 128, 256), _tokens(random.Random(2), 64, 256)
        d = torch.zeros(2, 128, 64, device="cuda")
        dgx.k_grouped_fp8_gemm_nt_contiguous((a[0].view(-1), a[1]), (b[0].view(-1), b[1]), d, [100, 156])  # k not x128

    return Maker("k_grouped", f"M {m} N {n}", tuple(ks_variants), build, bad)


def mqa_prefill(heads: int, dim: int, logits_dtype: str, max_s: int, max_s_kv: int) -> Maker:
    """MQA logits, prefill: sizes drawn per call (the kernel does not depend on them); a replay takes new windows."""

    def build(rng, _variant, weights):
        import dgx
        from mqa_utils import compare, make_prefill, ref_prefill, windows

        torch = _torch()
        s = rng.randint(1, max_s)
        s_kv = rng.randint(s, max_s_kv)
        q, kv, scales, w = make_prefill(s, s_kv, heads, dim, seed=rng.randrange(1 << 30))
        ks, ke = windows("causal", s, s_kv)
        dtype = getattr(torch, logits_dtype)
        out = _nan(s, s_kv, dtype=dtype)

        def prep(rng):
            new_ks, new_ke = windows(rng.choice(["causal", "random", "full", "empty"]), s, s_kv, seed=rng.randrange(1 << 30))
            ks.copy_(new_ks)
            ke.copy_(new_ke)
            out.fill_(float("nan"))

        def check():
            compare(out, ref_prefill(q, kv, scales, w, ks, ke), tol=MQA_TOL if logits_dtype == "float32" else 1e-2)
            return 0.0

        return Call(lambda: dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke, clean_logits=True, logits_dtype=dtype,
                                               out=out), check, prep)

    def bad():
        import dgx
        from mqa_utils import make_prefill, windows

        q, kv, scales, w = make_prefill(16, 64, 48 if heads != 48 else 40, dim)  # a head count no kernel has
        ks, ke = windows("causal", 16, 64)
        dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke)

    return Maker("mqa_logits", f"H {heads} D {dim} {logits_dtype}", (None,), build, bad)


def mqa_paged(heads: int, dim: int, next_n: int, logits_dtype: str, max_batch: int, max_len: int) -> Maker:
    """MQA logits, paged decode: the schedule is computed on the GPU in the same graph, so a replay takes new context
    lengths and a new block table."""

    def build(rng, _variant, weights):
        import dgx
        from mqa_utils import compare, make_paged, ref_paged

        torch = _torch()
        batch = rng.randint(1, max_batch)
        lens = [rng.randint(next_n, max_len) for _ in range(batch)]
        q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, heads, dim,
                                                             seed=rng.randrange(1 << 30), spare_blocks=8)
        width = max(lens) + 3
        dtype = getattr(torch, logits_dtype)
        out = _nan(batch * next_n, width, dtype=dtype)
        sched = torch.empty(dgx.get_num_sms() + 1, 2, dtype=torch.int32, device="cuda")

        def prep(rng):
            capacity = table.shape[1] * 64
            ctx.copy_(torch.tensor([rng.randint(next_n, min(capacity, width)) for _ in range(batch)],
                                   dtype=torch.int32))
            table.copy_(torch.randint(0, cache.shape[0], table.shape, dtype=torch.int32, device="cuda"))
            out.fill_(float("nan"))

        def launch():
            dgx.get_paged_mqa_logits_metadata(ctx, 64, dgx.get_num_sms(), out=sched)
            dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, width, clean_logits=True, logits_dtype=dtype,
                                     out=out)

        def check():
            compare(out, ref_paged(q, values, scales, w, ctx, table, width, True),
                    tol=MQA_TOL if logits_dtype == "float32" else 1e-2)
            return 0.0

        return Call(launch, check, prep)

    def bad():
        import dgx
        from mqa_utils import make_paged

        q, cache, w, ctx, table, *_ = make_paged(2, next_n, [100, 200], heads, dim)
        sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, dgx.get_num_sms())
        dgx.fp8_paged_mqa_logits(q, cache, w[:1], ctx, table, sched, 256)  # weights of one row too few: ValueError

    return Maker("paged_mqa_logits", f"H {heads} D {dim} next_n {next_n} {logits_dtype}", (None,), build, bad)


BF16_TOL, BF16_F32_TOL = 2.5e-3, 2e-5  # BF16 GEMMs: BF16 out (its rounding dominates), FP32 out
FORM_MAJORS = {"nt": ("k", "k"), "nn": ("k", "mn"), "tn": ("mn", "mn"), "tt": ("mn", "k")}


def _bf16(rng, *shape):
    torch = _torch()
    return torch.randn(*shape, device="cuda", generator=_gen(rng)).to(torch.bfloat16)


def _bf16_operand(rng, rows: int, k: int, major: str):
    """A [rows, K] BF16 operand stored K-major, or rows-major with 16-byte aligned lines (rows padded to 8)."""
    if major == "k":
        return _bf16(rng, rows, k)
    return _bf16(rng, k, -(-rows // 8) * 8)[:, :rows].T


def _check_close(out, ref, tol: float, what: str = "output") -> float:
    assert not out.isnan().any(), f"{what}: elements left unwritten"
    err = _rel(out, ref)
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"
    return err


def bf16_gemm(form: str, n: int, k: int, ms: Sequence[int], out_dtype: str, with_c: bool) -> Maker:
    """BF16 GEMM in one of the four forms (operands stored as the form takes them), BF16 or FP32 out, c separate."""

    def build(rng, m, weights):
        from dgx import bf16

        torch = _torch()
        major_a, major_b = FORM_MAJORS[form]
        a_nt, b_nt = _bf16_operand(rng, m, k, major_a), _bf16_operand(rng, n, k, major_b)
        a = a_nt if form[0] == "n" else a_nt.T
        b = b_nt if form[1] == "t" else b_nt.T
        dtype = getattr(torch, out_dtype)
        c = torch.randn(m, n, device="cuda", generator=_gen(rng)).to(dtype) if with_c else None
        d = _nan(m, n, dtype=dtype)
        tol = BF16_TOL if out_dtype == "bfloat16" else BF16_F32_TOL

        def check():
            ref = a_nt.double() @ b_nt.double().T
            return _check_close(d, ref + c.double() if with_c else ref, tol)

        fn = getattr(bf16, f"bf16_gemm_{form}")
        return Call(lambda: fn(a, b, d, c=c), check, lambda rng: d.fill_(float("nan")))

    def bad():
        from dgx import bf16

        torch = _torch()
        a = torch.zeros(64, 256, device="cuda")  # float32 where BF16 is expected
        bf16.bf16_gemm_nt(a, _bf16(random.Random(1), 64, 256), _nan(64, 64))

    return Maker("bf16_gemm", f"{form} N {n} K {k} {out_dtype}{' with c' if with_c else ''}", tuple(ms), build, bad)


def bf16_contiguous(groups: int, n: int, k: int, layouts: Sequence[tuple[int, ...]], psum: bool) -> Maker:
    """BF16 M-grouped contiguous, m_indices or prefix sums (a replay takes new group sizes that fit)."""

    def build(rng, group_rows, weights):
        from dgx import bf16

        torch = _torch()
        b = weights.get("b")
        if b is None:
            b = weights.setdefault("b", _bf16(rng, groups, n, k))
        starts, m = _padded_layout(group_rows)
        state = {"starts": starts, "rows": list(group_rows)}
        a = _bf16(rng, m, k)
        d = _nan(m, n)
        if psum:
            layout = torch.tensor([s + r for s, r in zip(starts, group_rows)], dtype=torch.int32, device="cuda")
        else:
            idx = torch.full((m,), -1, dtype=torch.int32)
            for g, (s0, rows) in enumerate(zip(starts, group_rows)):
                idx[s0:s0 + rows] = g
            layout = idx.cuda()

        def prep(rng):
            if psum:
                rows = [rng.randint(0, max(1, m // groups - 128)) for _ in range(groups)]
                new_starts, total = _padded_layout(rows)
                if total <= m:
                    state["starts"], state["rows"] = new_starts, rows
                    layout.copy_(torch.tensor([s0 + r for s0, r in zip(new_starts, rows)], dtype=torch.int32))
            d.fill_(float("nan"))

        def check():
            worst = 0.0
            for g, (s0, rows) in enumerate(zip(state["starts"], state["rows"])):
                if rows:
                    ref = a[s0:s0 + rows].double() @ b[g].double().T
                    worst = max(worst, _check_close(d[s0:s0 + rows], ref, BF16_TOL, f"group {g}"))
            return worst

        return Call(lambda: bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=psum), check, prep)

    def bad():
        from dgx import bf16

        torch = _torch()
        a, b = _bf16(random.Random(1), 128, 256), _bf16(random.Random(2), 2, 256, 256)
        layout = torch.zeros(128, dtype=torch.int64, device="cuda")  # int64 indices
        bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, _nan(128, 256), layout)

    family = "bf16_m_grouped_contiguous_psum" if psum else "bf16_m_grouped_contiguous"
    return Maker(family, f"{groups} groups N {n} K {k}", tuple(layouts), build, bad)


def bf16_masked(groups: int, m_max: int, n: int, k: int, expected_m: int) -> Maker:
    def build(rng, _variant, weights):
        from dgx import bf16

        torch = _torch()
        b = weights.get("b")
        if b is None:
            b = weights.setdefault("b", _bf16(rng, groups, n, k))
        a = _bf16(rng, groups, m_max, k)
        d = _nan(groups, m_max, n)
        counts = [0] * groups
        masked_m = torch.zeros(groups, dtype=torch.int32, device="cuda")

        def prep(rng):
            counts[:] = [rng.choice([0, m_max, m_max + 3, rng.randint(1, m_max)]) for _ in range(groups)]
            masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
            d.fill_(float("nan"))

        def check():
            worst = 0.0
            for g, c in enumerate(counts):
                rows = min(c, m_max)
                if rows:
                    ref = a[g, :rows].double() @ b[g].double().T
                    worst = max(worst, _check_close(d[g, :rows], ref, BF16_TOL, f"group {g}"))
                assert d[g, rows:].isnan().all(), f"group {g}: rows past masked_m written"
            return worst

        return Call(lambda: bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m), check, prep)

    def bad():
        from dgx import bf16

        torch = _torch()
        a, b = _bf16(random.Random(1), 2, 64, 256), _bf16(random.Random(2), 2, 256, 256)
        bf16.m_grouped_bf16_gemm_nt_masked(a, b, _nan(2, 64, 256), torch.zeros(2, dtype=torch.int32, device="cuda"), 0)

    return Maker("bf16_m_grouped_masked", f"{groups} groups M_max {m_max} N {n} K {k}", (None,), build, bad)


def bf16_k_grouped(m: int, n: int, ks_variants: Sequence[tuple[int, ...]]) -> Maker:
    """BF16 K-grouped weight gradient, d[g] = c[g] + a_gᵀ·b_g, FP32, c separate."""

    def build(rng, ks, weights):
        from dgx import bf16

        torch = _torch()
        a, b = _bf16(rng, sum(ks), m), _bf16(rng, sum(ks), n)
        c = torch.randn(len(ks), m, n, device="cuda", generator=_gen(rng))
        d = _nan(len(ks), m, n, dtype=torch.float32)
        ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")

        def check():
            worst, off = 0.0, 0
            for g, kg in enumerate(ks):
                ref = a[off:off + kg].double().T @ b[off:off + kg].double() + c[g].double()
                worst, off = max(worst, _check_close(d[g], ref, BF16_F32_TOL, f"group {g}")), off + kg
            return worst

        return Call(lambda: bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, list(ks), ks_tensor, c=c), check,
                    lambda rng: d.fill_(float("nan")))

    def bad():
        from dgx import bf16

        torch = _torch()
        a, b = _bf16(random.Random(1), 256, 64), _bf16(random.Random(2), 256, 64)
        bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, torch.zeros(2, 64, 64, device="cuda"), [100, 156])  # k not x128

    return Maker("bf16_k_grouped", f"M {m} N {n}", tuple(ks_variants), build, bad)


def hc_prenorm(n: int, k: int, splits: int | None, ms: Sequence[int]) -> Maker:
    """The HyperConnection pre-norm GEMM: d = a·bᵀ (b read as TF32) and s = the rows' sums of squares, whole or as
    partial sums over `splits` K ranges (checked summed)."""

    def build(rng, m, weights):
        from dgx.hc_prenorm import tf32_hc_prenorm_gemm

        torch = _torch()
        a = _bf16(rng, m, k)
        b = torch.randn(n, k, device="cuda", generator=_gen(rng))
        lead = () if splits is None else (splits,)
        d, s = _nan(*lead, m, n, dtype=torch.float32), _nan(*lead, m, dtype=torch.float32)

        def check():
            whole_d, whole_s = (d, s) if splits is None else (d.sum(0), s.sum(0))
            err = _check_close(whole_d, a.double() @ b.double().T, 2e-3, "d")  # TF32's error of the exact product
            _check_close(whole_s, a.double().square().sum(-1), 1e-4, "s")
            return err

        def prep(rng):
            d.fill_(float("nan"))
            s.fill_(float("nan"))

        return Call(lambda: tf32_hc_prenorm_gemm(a, b, d, s, splits), check, prep)

    def bad():
        from dgx.hc_prenorm import tf32_hc_prenorm_gemm

        torch = _torch()
        a, b = _bf16(random.Random(1), 16, 256), torch.zeros(65, 256, device="cuda")  # N 65: above the 64 it takes
        tf32_hc_prenorm_gemm(a, b, _nan(16, 65, dtype=torch.float32), _nan(16, dtype=torch.float32))

    return Maker("hc_prenorm", f"N {n} K {k} splits {splits}", tuple(ms), build, bad)


def skip_head_mid(n: int, k: int, head_splits: tuple[int, int, int], ms: Sequence[int]) -> Maker:
    """The dense FP8 GEMM writing each head's left and right columns of a wider output, its mid columns untouched."""
    left, mid, right = head_splits
    heads = n // (left + right)
    sentinel = -3.5

    def build(rng, m, weights):
        from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid

        torch = _torch()
        b = weights.get("b") or weights.setdefault("b", _block_weights(rng, 0, n, k))
        a = _tokens(rng, m, k)
        d = torch.full((m, heads * (left + mid + right)), sentinel, device="cuda", dtype=torch.bfloat16)
        v = d.view(m, heads, left + mid + right)

        def prep(rng):
            v[:, :, :left].fill_(float("nan"))
            v[:, :, left + mid:].fill_(float("nan"))

        def check():
            ref = _ref(a, b, 128).view(m, heads, left + right)
            err = _check_bf16(v[:, :, :left], ref[:, :, :left], "left columns")
            err = max(err, _check_bf16(v[:, :, left + mid:], ref[:, :, left:], "right columns"))
            assert (v[:, :, left:left + mid] == sentinel).all(), "mid columns were written"
            return err

        return Call(lambda: fp8_gemm_nt_skip_head_mid(a, b, d, head_splits), check, prep)

    def bad():
        from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid

        a, b = _tokens(random.Random(1), 64, 256), _block_weights(random.Random(2), 0, 256, 256)
        fp8_gemm_nt_skip_head_mid(a, b, _nan(64, 256), (60, 0, 68))  # left not a multiple of 8

    return Maker("dense_skip_head_mid", f"N {n} K {k} heads {heads} x {head_splits}", tuple(ms), build, bad)


def fp8_einsum(h: int, d: int, r: int, bs: Sequence[int]) -> Maker:
    """dgx.fp8_einsum('bhr,hdr->bhd'): x [b, h, r] per-token scaled (scales K-major, converted per call), y [h, d, r]
    per block, z [b, h, d]; y kept as a weight."""

    def build(rng, b, weights):
        from dgx.deep_gemm.utils.math import per_block_cast_to_fp8, per_token_cast_to_fp8
        from dgx.fp8_einsum import fp8_einsum as einsum

        torch = _torch()
        ys = weights.get("y")
        if ys is None:
            y = torch.randn((h, d, r), device="cuda", dtype=torch.bfloat16, generator=_gen(rng))
            yq = torch.empty_like(y, dtype=torch.float8_e4m3fn)
            sfy = torch.empty((h, -(-d // 128), -(-r // 128)), device="cuda")
            for i in range(h):
                yq[i], sfy[i] = per_block_cast_to_fp8(y[i], use_ue8m0=False)
            ys = weights.setdefault("y", (yq, sfy))
        x = torch.randn((b, h, r), device="cuda", dtype=torch.bfloat16, generator=_gen(rng))
        xq, sfx = per_token_cast_to_fp8(x.view(-1, r), use_ue8m0=rng.random() < 0.5)
        xs = (xq.view(b, h, r), sfx.view(b, h, -(-r // 128)))
        z = _nan(b, h, d)

        def prep(rng):
            z.fill_(float("nan"))

        def check():
            from dgx.torch_utils import dequantize

            worst = 0.0
            for i in range(h):
                ref = (dequantize(xs[0][:, i], xs[1][:, i], 1).double()
                       @ dequantize(ys[0][i], ys[1][i], 128).double().T)
                worst = max(worst, _check_bf16(z[:, i], ref, f"head {i}"))
            return worst

        return Call(lambda: einsum("bhr,hdr->bhd", xs, ys, z), check, prep)

    def bad():
        from dgx.fp8_einsum import fp8_einsum as einsum

        torch = _torch()
        x = (torch.zeros((4, h, r), device="cuda", dtype=torch.float8_e4m3fn),
             torch.ones((4, h, -(-r // 128)), device="cuda"))
        y = (torch.zeros((h, d, r), device="cuda", dtype=torch.float8_e4m3fn), torch.ones((h, 1, 1), device="cuda"))
        einsum("bhr,hdr->bhd", x, y, _nan(4, h, d))  # sfy of the wrong shape

    return Maker("fp8_einsum_bhr_hdr_bhd", f"h {h} d {d} r {r}", tuple(bs), build, bad)


def bf16_einsum(expr: str, dims: tuple[int, int, int], variants: Sequence[int]) -> Maker:
    """dgx.einsum: 'bmk,bnk->mn' (dims m, n, k; variants: the summed batch S; FP32 d accumulated onto c) or the
    per-head 'bhr,hdr->bhd' / 'bhd,hdr->bhr' (dims h, d, r; variants: b; y kept as a weight, a strided view)."""
    family = "einsum_" + expr.replace(",", "_").replace("->", "_")

    def build(rng, v, weights):
        import dgx

        torch = _torch()
        if expr == "bmk,bnk->mn":
            m, n, k = dims
            a, b = _bf16(rng, v, m, k), _bf16(rng, v, n, k)
            c = torch.randn(m, n, device="cuda", generator=_gen(rng))
            d = torch.full((m, n), float("nan"), device="cuda")

            def check():
                ref = c.double() + torch.einsum("smk,snk->mn", a.double(), b.double())
                return _check_close(d, ref, BF16_F32_TOL, "d")

            return Call(lambda: dgx.einsum(expr, a, b, d, c=c), check, lambda rng: d.fill_(float("nan")))
        h, dd, r = dims
        y = weights.get("y")
        if y is None:
            y = weights.setdefault("y", _bf16(rng, h, dd, r + 64)[:, :, :r])  # a strided view, as engines slice
        x = _bf16(rng, v, h, r if expr == "bhr,hdr->bhd" else dd)
        z = _nan(v, h, dd if expr == "bhr,hdr->bhd" else r)

        def check():
            return _check_bf16(z, torch.einsum(expr, x.double(), y.double()), "z")

        return Call(lambda: dgx.einsum(expr, x, y, z), check, lambda rng: z.fill_(float("nan")))

    def bad():
        import dgx

        torch = _torch()
        a = torch.zeros(2, 64, 64, device="cuda", dtype=torch.bfloat16)
        dgx.einsum("bmk,bnk->mn", a, a, torch.zeros(64, 64, device="cuda", dtype=torch.float16))  # an FP16 d

    return Maker(family, f"{expr} {'x'.join(map(str, dims))}", tuple(variants), build, bad)


# The mix: every family, each shape kind a Maker (variants: what the kernel choice depends on, all warmed).

def silu_mul_quant(inter: int, groups: int | None, mmax: int | None, ms: Sequence[int]) -> Maker:
    """The SwiGLU + FP8 quantisation between an expert's GEMMs: contiguous [M, 2I] (variants: M), or masked
    [G, Mmax, 2I] with fresh counts per launch (variants: the scale layouts); checked against float64 (values within
    FP8 rounding), rows past the counts untouched."""

    def build(rng, variant, weights):
        import dgx

        torch = _torch()
        masked = groups is not None
        rows = mmax if masked else variant
        kwargs = dict(use_ue8m0=variant == "ue8m0", swiglu_limit=7.0 if masked else None)
        x = _bf16(rng, *((groups,) if masked else ()), rows, 2 * inter)
        counts = torch.zeros(groups, dtype=torch.int32, device="cuda") if masked else None
        y, sf = dgx.silu_mul_quant(x, masked_m=counts, **kwargs)
        host = [rows] * (groups or 1)

        def prep(rng):
            y.view(torch.uint8).fill_(0x7F)  # FP8 NaN
            sf.fill_(float("nan"))
            if masked:
                host[:] = [rng.randint(0, rows) for _ in range(groups)]
                counts.copy_(torch.tensor(host, dtype=torch.int32))

        def check():
            err = 0.0
            for g, count in enumerate(host):
                xg, yg, sg = (x[g], y[g], sf[g]) if masked else (x, y, sf)
                assert bool((yg[count:].view(torch.uint8) == 0x7F).all()), f"group {g}: rows past {count} written"
                if not count:
                    continue
                gate, up = xg[:count, :inter].double(), xg[:count, inter:].double()
                if kwargs["swiglu_limit"] is not None:
                    gate, up = gate.clamp(max=7.0), up.clamp(-7.0, 7.0)
                h = torch.nn.functional.silu(gate) * up
                back = (yg[:count].double().unflatten(-1, (-1, 128)) * sg[:count].double().unsqueeze(-1)).flatten(-2)
                err = max(err, _check_close(back, h, 0.05, f"group {g}"))
            return err

        return Call(lambda: dgx.silu_mul_quant(x, masked_m=counts, out=y, out_scales=sf, **kwargs), check, prep)

    def bad():
        import dgx

        torch = _torch()
        dgx.silu_mul_quant(torch.zeros(4, 384, device="cuda", dtype=torch.bfloat16))  # I = 192: not a multiple of 128

    return Maker("silu_mul_quant", f"I {inter} " + (f"masked {groups}x{mmax}" if groups else "contiguous"),
                 tuple(ms), build, bad)


MAKERS: list[Maker] = [
    dense(2112, 7168, (1, 13, 64, 128, 384, 1024, 4096)),
    dense(7168, 2048, (1, 64, 128, 777, 4096)),
    dense(576, 640, (1, 100, 1000)),  # K not a multiple of 128
    contiguous(4, 4096, 7168, ((128, 0, 300, 17), (1000, 200, 0, 640), (512, 512, 512, 512))),
    contiguous(8, 2048, 1024, ((256,) * 8, (1, 0, 0, 700, 90, 0, 33, 128))),
    contiguous_psum(4, 4096, 7168, ((600, 100, 0, 900), (2048, 2048, 2048, 2048))),
    masked(4, 256, 4096, 7168, 64),
    masked(2, 1024, 7168, 2048, 512),
    wgrad(2048, 7168, 1024),
    wgrad(576, 1536, 4096),
    k_grouped(512, 1024, ((512, 0, 1024, 128), (256, 256, 256, 256))),
    k_grouped(2048, 576, ((4096,), (1024, 2048))),
    mqa_prefill(64, 128, "float32", 1024, 4096),
    mqa_prefill(32, 64, "bfloat16", 512, 2048),
    mqa_paged(64, 128, 1, "float32", 64, 4096),
    mqa_paged(64, 128, 2, "bfloat16", 32, 8192),
    mqa_paged(16, 128, 4, "float32", 16, 4096),  # V4's 16 heads, four query tokens per sequence
    bf16_gemm("nt", 2112, 7168, (1, 64, 128, 4096), "bfloat16", False),
    bf16_gemm("tn", 584, 1000, (17, 256, 1000), "float32", True),  # MN-major operands, FP32 out, c
    bf16_contiguous(4, 2048, 1024, ((128, 0, 300, 17), (512,) * 4), psum=False),
    bf16_contiguous(4, 2048, 1024, ((600, 100, 0, 900),), psum=True),
    bf16_masked(4, 256, 2048, 1024, 96),
    bf16_k_grouped(512, 1024, ((512, 0, 1024, 128),)),
    hc_prenorm(24, 7168, None, (13, 137, 4096)),
    hc_prenorm(24, 7680, 16, (13, 2000)),
    skip_head_mid(8192, 512, (128, 64, 128), (1, 128, 4096)),
    fp8_einsum(8, 1024, 4096, (4, 128, 4097)),
    fp8_einsum(128, 128, 512, (17, 4096)),
    bf16_einsum("bmk,bnk->mn", (256, 256, 256), (1, 129, 4096)),
    bf16_einsum("bhr,hdr->bhd", (128, 128, 512), (4, 17, 4096)),
    bf16_einsum("bhd,hdr->bhr", (8, 1024, 4096), (4, 128)),
    silu_mul_quant(2048, None, None, (1, 100, 4096)),
    silu_mul_quant(1024, 8, 64, ("fp32", "ue8m0")),
]


# --- the run ------------------------------------------------------------------------------------------------------


def host_rss_mib() -> float:
    """Resident set size of this process (Linux /proc), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory_snapshot(t0: float) -> dict:
    torch = _torch()
    free, total = torch.cuda.mem_get_info()
    return {
        "seconds": round(time.monotonic() - t0, 1),
        "host_rss_mib": round(host_rss_mib(), 1),
        "gpu_allocated_mib": round(torch.cuda.memory_allocated() / 2**20, 1),
        "gpu_reserved_mib": round(torch.cuda.memory_reserved() / 2**20, 1),
        "gpu_used_mib": round((total - free) / 2**20, 1),
    }


@dataclasses.dataclass
class Tally:
    """What the threads did; one lock guards it."""

    calls: Counter = dataclasses.field(default_factory=Counter)  # (family, mode) -> calls
    checks: Counter = dataclasses.field(default_factory=Counter)  # family -> checks done
    worst: dict = dataclasses.field(default_factory=dict)  # family -> worst checked error
    expected_errors: Counter = dataclasses.field(default_factory=Counter)  # family -> bad inputs refused as expected
    errors: list = dataclasses.field(default_factory=list)  # anything else: (family, mode, message)
    check_failures: list = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def add(self, family: str, mode: str) -> None:
        with self.lock:
            self.calls[(family, mode)] += 1

    def error(self, family: str, mode: str, exc: BaseException, where: list) -> None:
        text = f"{family} {mode}: {type(exc).__name__}: {exc}"
        with self.lock:
            where.append(text if len(where) < MAX_ERROR_SAMPLES else None)


def typed_errors():
    from dgx.errors import DgxError

    return (TypeError, ValueError, DgxError)


def run_one(maker: Maker, mode: str, call: Call | None, graph, rng: random.Random, tally: Tally, check: bool) -> None:
    """One call of ``maker`` in ``mode`` on the current stream; errors go to ``tally``."""
    torch = _torch()
    try:
        if mode == "bad":
            try:
                maker.bad()
            except typed_errors():
                with tally.lock:
                    tally.expected_errors[maker.family] += 1
                tally.add(maker.family, mode)
                return
            raise AssertionError("a bad input was accepted (no TypeError, ValueError or DgxError)")
        call.prep(rng)
        if mode == "graph":
            graph.replay()
        else:
            call.launch()
        tally.add(maker.family, mode)
        if check:
            torch.cuda.current_stream().synchronize()
            try:
                err = call.check()
            except AssertionError as exc:
                tally.error(maker.family, mode, exc, tally.check_failures)
                return
            with tally.lock:
                tally.checks[maker.family] += 1
                tally.worst[maker.family] = max(tally.worst.get(maker.family, 0.0), err)
    except Exception as exc:  # noqa: BLE001 - the report lists it; the run goes on
        tally.error(maker.family, mode, exc, tally.errors)


def warm_up(makers: Sequence[Maker], threads: int, seed: int) -> tuple[list, list, list, dict]:
    """Every variant of every maker built, launched and checked once (compiling and loading its kernels); then per
    thread a stream, one reused Call and one captured graph per maker, all on that stream (the captures happen here,
    one at a time: a capture must not see another thread's allocations). Returns (streams, reused calls, graphs)
    per thread, and a summary."""
    import dgx

    torch = _torch()
    t0 = time.monotonic()
    rng = random.Random(seed)
    weights: dict = defaultdict(dict)
    checked = 0
    for maker in makers:
        for variant in maker.variants:
            call = maker.build(rng, variant, weights[(maker.family, maker.shape)])
            call.prep(rng)
            call.launch()
            torch.cuda.synchronize()
            call.check()
            checked += 1
    streams, reused, graphs = [], [], []
    for t in range(threads):
        trng = random.Random(seed * 1000 + t + 1)
        stream = torch.cuda.Stream()
        mine, captured = {}, {}
        with torch.cuda.stream(stream):
            for maker in makers:
                w: dict = {}
                mine[maker] = (maker.build(trng, trng.choice(maker.variants), w), w)
                if not maker.graphable:
                    continue
                call = maker.build(trng, trng.choice(maker.variants), w)
                call.prep(trng)
                call.launch()  # outside the capture first: plan and load
                stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    call.launch()
                captured[maker] = (call, graph)
        streams.append(stream)
        reused.append(mine)
        graphs.append(captured)
    torch.cuda.synchronize()
    stats = dgx.jit_stats()
    return streams, reused, graphs, {"seconds": round(time.monotonic() - t0, 1), "variants_checked": checked,
                                     "kernels_compiled": stats["compiles"], "kernels_loaded": stats["loads"]}


def worker(index: int, makers: Sequence[Maker], stream, reused: dict, graphs: dict, args, deadline: float,
           tally: Tally) -> None:
    """Random calls on ``stream`` until ``deadline``: a bad input, a graph replay, a reused call or a fresh one."""
    torch = _torch()
    rng = random.Random(args.seed * 7919 + index)
    weights = [m.weight for m in makers]
    with torch.cuda.stream(stream):
        while time.monotonic() < deadline:
            maker = rng.choices(makers, weights)[0]
            r = rng.random()
            check = rng.random() < args.check_rate
            if r < args.bad_rate:
                run_one(maker, "bad", None, None, rng, tally, False)
            elif r < args.bad_rate + args.graph_rate and maker in graphs:
                call, graph = graphs[maker]
                run_one(maker, "graph", call, graph, rng, tally, check)
            elif r < args.bad_rate + args.graph_rate + args.reuse_rate:
                run_one(maker, "reused", reused[maker][0], None, rng, tally, check)
            else:
                try:
                    call = maker.build(rng, rng.choice(maker.variants), reused[maker][1])
                except Exception as exc:  # noqa: BLE001
                    tally.error(maker.family, "fresh", exc, tally.errors)
                    continue
                run_one(maker, "fresh", call, None, rng, tally, check)
        stream.synchronize()


def flat(samples: list[dict], key: str, slack_mib: float, slack_share: float = 0.05) -> bool:
    """Whether ``key`` ended where it stood once the run had settled (the sample at a quarter of the run): within
    ``slack_mib`` or ``slack_share`` of it, whichever is larger."""
    if len(samples) < 2:
        return True
    settled = samples[max(1, len(samples) // 4)] if len(samples) > 2 else samples[0]
    return samples[-1][key] <= settled[key] + max(slack_mib, slack_share * settled[key])


def report(tally: Tally, warm: dict, samples: list[dict], compiled_after: int, args, seconds: float) -> dict:
    """The run's figures as one JSON-able dict; ``ok`` when nothing went wrong."""
    by_family: dict = defaultdict(lambda: dict.fromkeys(MODES, 0))
    for (family, mode), n in tally.calls.items():
        by_family[family][mode] = n
    for family, data in by_family.items():
        data["checked"] = tally.checks.get(family, 0)
        data["worst_error"] = tally.worst.get(family)
    errors = [e for e in tally.errors if e is not None]
    failures = [e for e in tally.check_failures if e is not None]
    memory_flat = {"host_rss": flat(samples, "host_rss_mib", 64.0), "gpu_allocated": flat(samples, "gpu_allocated_mib", 64.0),
                   "gpu_reserved": flat(samples, "gpu_reserved_mib", 256.0)}
    out = {
        "minutes": args.minutes,
        "seconds": round(seconds, 1),
        "threads": args.threads,
        "seed": args.seed,
        "strict": True,
        "warmup": warm,
        "calls": sum(tally.calls.values()),
        "by_family": dict(by_family),
        "expected_errors": sum(tally.expected_errors.values()),
        "errors": len(tally.errors),
        "error_samples": errors,
        "checks": sum(tally.checks.values()),
        "check_failures": len(tally.check_failures),
        "check_failure_samples": failures,
        "compiled_after_warmup": compiled_after,
        "memory": {"start": samples[0] if samples else None, "end": samples[-1] if samples else None,
                   "samples": samples, "flat": memory_flat},
    }
    out["ok"] = (not tally.errors and not tally.check_failures and compiled_after == 0 and all(memory_flat.values())
                 and all(by_family[m.family]["fresh"] + by_family[m.family]["reused"] > 0 for m in MAKERS))
    return out


def output_path(args: argparse.Namespace) -> str | None:
    """--json FILE, else $OUT/soak.json where OUT is set, else nowhere."""
    if args.json_path:
        return args.json_path
    return os.path.join(os.environ["OUT"], "soak.json") if os.environ.get("OUT") else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long the mix runs after the warm-up")
    p.add_argument("--threads", type=int, default=4, help="threads calling dgx, a stream each")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-rate", type=float, default=0.05, help="share of calls checked against float64")
    p.add_argument("--bad-rate", type=float, default=0.02, help="share of calls with a bad input")
    p.add_argument("--graph-rate", type=float, default=0.3, help="share of calls that replay a CUDA graph")
    p.add_argument("--reuse-rate", type=float, default=0.3, help="share of eager calls on reused tensors")
    p.add_argument("--sample-seconds", type=float, default=30.0, help="memory sampled this often")
    p.add_argument("--json", dest="json_path", help="write the report here (default: $OUT/soak.json when OUT is set)")
    p.add_argument("--dry-run", action="store_true", help="list the mix and exit (no GPU needed)")
    args = p.parse_args(argv)
    rates = (args.check_rate, args.bad_rate, args.graph_rate, args.reuse_rate)
    if args.minutes <= 0 or args.threads < 1 or args.sample_seconds <= 0:
        p.error("--minutes and --sample-seconds must be positive, --threads at least 1")
    if any(not 0 <= r <= 1 for r in rates) or args.bad_rate + args.graph_rate + args.reuse_rate > 1:
        p.error("the rates are shares between 0 and 1, and --bad-rate + --graph-rate + --reuse-rate at most 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        for m in MAKERS:
            print(f"{m.family:26} {m.shape:36} variants {len(m.variants):2}  graph {'yes' if m.graphable else 'no'}")
        print(f"{len(MAKERS)} makers, {sum(len(m.variants) for m in MAKERS)} variants, families: "
              f"{', '.join(dict.fromkeys(m.family for m in MAKERS))}")
        return 0
    import dgx

    torch = _torch()
    if not torch.cuda.is_available():
        print("soak: needs a CUDA GPU", file=sys.stderr)
        return 2
    os.environ.pop("DGX_JIT_STRICT", None)
    streams, reused, graphs, warm = warm_up(MAKERS, args.threads, args.seed)
    os.environ["DGX_JIT_STRICT"] = "1"  # from here on a kernel missing from the cache is an error
    compiles_at_start = dgx.jit_stats()["compiles"]
    print(f"soak: warm-up {warm['seconds']} s, {warm['kernels_compiled']} kernels compiled, "
          f"{warm['variants_checked']} variants checked; running {args.minutes} min on {args.threads} threads",
          flush=True)
    gc.collect()
    t0 = time.monotonic()
    samples = [memory_snapshot(t0)]
    tally = Tally()
    deadline = t0 + args.minutes * 60
    threads = [threading.Thread(target=worker, args=(i, MAKERS, streams[i], reused[i], graphs[i], args, deadline, tally),
                                daemon=True) for i in range(args.threads)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))  # (joining each thread in turn waited too long)
        if time.monotonic() - t0 >= samples[-1]["seconds"] + args.sample_seconds and time.monotonic() < deadline:
            samples.append(memory_snapshot(t0))
            print(f"soak: {samples[-1]['seconds']:.0f} s, {sum(tally.calls.values())} calls, "
                  f"{len(tally.errors)} errors, RSS {samples[-1]['host_rss_mib']} MiB, "
                  f"GPU {samples[-1]['gpu_allocated_mib']} MiB allocated", flush=True)
    torch.cuda.synchronize()
    gc.collect()
    samples.append(memory_snapshot(t0))
    result = report(tally, warm, samples, dgx.jit_stats()["compiles"] - compiles_at_start, args,
                    time.monotonic() - t0)
    result["device"] = torch.cuda.get_device_name()
    result["dgx"] = dgx.__version__
    path = output_path(args)
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2, default=str)
    print(json.dumps({k: result[k] for k in ("calls", "expected_errors", "errors", "checks", "check_failures",
                                             "compiled_after_warmup", "ok")}))
    print(f"soak: host RSS {samples[0]['host_rss_mib']} -> {samples[-1]['host_rss_mib']} MiB, GPU allocated "
          f"{samples[0]['gpu_allocated_mib']} -> {samples[-1]['gpu_allocated_mib']} MiB, reserved "
          f"{samples[0]['gpu_reserved_mib']} -> {samples[-1]['gpu_reserved_mib']} MiB; flat: {result['memory']['flat']}")
    for line in result["error_samples"] + result["check_failure_samples"]:
        print(f"soak: {line}")
    if path:
        print(f"soak: wrote {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
