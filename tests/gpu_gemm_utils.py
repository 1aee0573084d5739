"""Inputs and references for the GPU GEMM tests (torch)."""

from __future__ import annotations

from pathlib import Path

import torch

from dgx.torch_utils import calc_diff, dequantize, per_block_cast_to_fp8, per_token_cast_to_fp8


def make_dense(m: int, n: int, k: int, seed: int | None = None):
    """Fresh random BF16 inputs, their FP8 quantisation, and a NaN-poisoned output."""
    g = torch.Generator(device="cuda")
    if seed is not None:
        g.manual_seed(seed)
    else:
        g.seed()
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    a_fp8 = per_token_cast_to_fp8(a)
    b_fp8 = per_block_cast_to_fp8(b)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    return a, b, a_fp8, b_fp8, d


def check_dense(d, a, b, a_fp8, b_fp8, *, max_rel: float = 2e-3, max_diff: float = 1e-3):
    """Every element written; normwise error vs the float64 product of the dequantised inputs; calc_diff
    vs the BF16 product of the originals. Returns (relative error, calc_diff)."""
    assert not torch.isnan(d).any(), f"{int(torch.isnan(d).sum())} output elements were not written"
    a_deq = dequantize(*a_fp8, 1).double()
    b_deq = dequantize(*b_fp8, 128).double()
    ref = a_deq @ b_deq.T
    rel = float((d.double() - ref).norm() / ref.norm().clamp(min=1e-30))
    diff = calc_diff(d, (a.float() @ b.float().T))
    # BF16 rounding of the exact result alone gives ~1.1e-3 on large outputs but can pass 2e-3 on a
    # handful of elements (M=1, N=8): then allow 1.5x what rounding the exact result costs.
    rounding = float((ref.to(torch.bfloat16).double() - ref).norm() / ref.norm().clamp(min=1e-30))
    max_rel = max(max_rel, 1.5 * rounding)
    assert rel <= max_rel, f"normwise relative error {rel:.3e} > {max_rel:.3e}"
    # calc_diff against the unquantised BF16 product measures FP8 quantisation noise too; on a few
    # elements (M=1, N=8) that noise alone can pass 1e-3, so it is checked where it is a statistic.
    if d.numel() >= 256:
        assert diff < max_diff, f"calc_diff {diff:.3e} >= {max_diff}"
    return rel, diff


_flush: list = []


def check_group_rows(d, a, b, g: int, start: int, rows: int, *, max_rel: float = 2e-3) -> None:
    """Rows [start, start + rows) of an M-grouped GEMM's output d, group g's: every one written (d was poisoned
    with NaN) and within max_rel (normwise) of the float64 product of A's rows and B[g], both dequantised.
    a = (A, SFA) per token, b = (B, SFB) per 128 x 128 block, B and SFB stacked by group."""
    out = d[start : start + rows]
    assert not torch.isnan(out).any(), f"group {g}: rows not written"
    ref = (dequantize(a[0][start : start + rows], a[1][start : start + rows], 1).double()
           @ dequantize(b[0][g], b[1][g], 128).double().T)
    rel = float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))
    assert rel <= max_rel, f"group {g}: relative error {rel}"


def bench_cold_l2(fn, warm: int = 5, reps: int = 30) -> float:
    """docs/METHOD.md's timing for the device scripts: µs of `fn`, median of `reps` calls, each after zeroing
    a 1 GB buffer (cold L2), CUDA events around the call, `warm` calls first."""
    import statistics

    if not _flush:
        _flush.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        _flush[0].zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def round_order(count: int, round_index: int) -> list[int]:
    """The order to time `count` implementations in, one bench_cold_l2 each, in round `round_index`: forward in
    even rounds, backward in odd ones. Back-to-back measurements of a 12-20 µs kernel alternated between two
    speeds about 5% apart (cause not found, PERFLOG exp. 33), so with an even count and a fixed order each
    implementation always landed on the same one; reversing every other round gives each both."""
    order = list(range(count))
    return order if round_index % 2 == 0 else order[::-1]


def l2_flushes(clean: bool = True) -> dict:
    """The flushes the device experiments time after: "dirty", docs/METHOD.md's (1 GB zeroed, which leaves L2 full of
    dirty lines), and with `clean` also "clean" (that, then 256 MB read, so the dirty lines are written back first
    and L2 ends full of clean ones; PERFLOG, L2 policy)."""
    from dgx.bench.timing import L2Flusher

    dirty = L2Flusher()
    if not clean:
        return {"dirty": dirty}
    reread = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def clean_flush() -> None:
        dirty()
        reread.max()

    return {"dirty": dirty, "clean": clean_flush}


def kernel_rounds(fns: dict, flushes: dict, rounds: int, prepare=None) -> dict:
    """Kernel-only µs (dgx bench's kernel timer, median of its calls) of every function of `fns` after every flush
    of `flushes`, in `rounds` alternating rounds (round_order): {(name, flush): [µs per round]}. `prepare(name)`,
    if given, runs before each measurement (a header variant to switch to)."""
    from dgx.bench.kernel_timer import time_kernels

    keys = [(name, f) for name in fns for f in flushes]
    samples = {key: [] for key in keys}
    for r in range(rounds):
        for i in round_order(len(keys), r):
            name, f = keys[i]
            if prepare is not None:
                prepare(name)
            samples[(name, f)].append(time_kernels(fns[name], flushes[f]).median_us)
    return samples


def parse_blocks(text: str) -> tuple[int, int, int, int, int]:
    """A tile spec of the device experiment scripts, BMxBN[sS][pP][gG] -> (block_m, block_n, stages or 0,
    pair, group_n): S stages, P 1 shares A along N and 2 shares B along M, G the raster band width."""
    group_n, pair, stages = 16, 0, 0
    if "g" in text:
        text, g = text.split("g")
        group_n = int(g)
    if "p" in text:
        text, p = text.split("p")
        pair = int(p)
    if "s" in text:
        text, st = text.split("s")
        stages = int(st)
    bm, bn = (int(x) for x in text.split("x"))
    return bm, bn, stages, pair, group_n


def parse_run(text: str, flags: str = "d"):
    """A run spec of the device experiment scripts, [VARIANT:]BMxBN[sS][pP][gG][FLAGS] -> (variant, the
    parse_blocks tuple, the flag letters given): VARIANT defaults to `current`; FLAGS are letters of `flags`
    (d: deferred promotion)."""
    variant, _, blk = text.rpartition(":")
    spec = blk.rstrip(flags)
    return variant or "current", parse_blocks(spec), blk[len(spec):]


DEV = Path(__file__).resolve().parent.parent / ".dev"


def variant_headers(variant: str) -> dict:
    """The headers of a device-experiment variant: `current` (the working tree's), or parts joined by '+',
    each replacing fp8_gemm.cuh (../.dev/fp8_gemm_<part>.cuh) and/or overlaying the headers in
    ../.dev/hdr_<part>/."""
    headers = dict(_base_headers())
    for part in variant.split("+"):
        if part == "current":
            continue
        kernel = DEV / f"fp8_gemm_{part}.cuh"
        overlay = DEV / f"hdr_{part}"
        if not kernel.exists() and not overlay.is_dir():
            raise SystemExit(f"variant part {part!r}: neither {kernel} nor {overlay}/ exists")
        if kernel.exists():
            headers["fp8_gemm.cuh"] = kernel.read_bytes()
        if overlay.is_dir():
            headers.update({f.name: f.read_bytes() for f in overlay.glob("*.cuh")})
    return headers


_BASE: list = []


def _base_headers() -> dict:
    """The working tree's headers, read once (before any variant replaces `ptx.headers`)."""
    if not _BASE:
        from dgx import ptx
        _BASE.append(ptx.headers())
    return _BASE[0]


def use_headers(headers: dict) -> None:
    """Make dgx compile with `headers` from now on, dropping the launch plans made with others."""
    from dgx import ptx
    from dgx import gemm, grouped, launch

    _base_headers()
    ptx.headers = lambda: headers
    for cache in (launch._plans, launch._params, gemm._entries, grouped._contiguous, grouped._masked):
        cache.clear()
