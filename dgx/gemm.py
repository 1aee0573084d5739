"""dgx.fp8_gemm_nt: D = A . B^T with 1x128 (A) and 128x128 (B) FP32 scales, BF16 output."""

from __future__ import annotations

from _thread import get_ident

from . import fastpath, launch
from .checks import (
    ceil_div,
    expect_contiguous,
    expect_dtype,
    expect_fp32_out_for_c,
    expect_fp8_operands,
    expect_n_multiple_of_8,
    expect_nonnegative_strides,
    expect_shape,
    expect_tma_rows,
    unpack_pair,
    views_on_one_device,
)
from .fused import GateUpWeight, fast_options, fused_output, output_tensor, wants_fused
from .kernels.fp8_gemm import GemmConfig
from .kinds import GemmKind
from .launch import Operands, scales_for_tma
from .streams import resolve_stream
from .wgrad import dense_fp32 as wgrad_dense
from . import caches

__all__ = ["fp8_gemm_nt", "gemm_fp8_fp8_bf16_nt", "wgrad_gemm_fp8_fp8_fp32_nt"]


# Per-call fast path for torch tensors (dgx.fastpath): hint key (rows of A, shape of B, whether c is None, thread)
# -> the entry an earlier call of that structure made, the tensors taken as (A, SFA, B, SFB, d). A fused call's key
# adds its options (dgx.fused.fast_options), its tensors are (A, SFA, B, SFB, d or d_fp8, d_sf[, row_weight]).
_entries: dict[tuple, fastpath.Entry] = caches.per_process({})


def fp8_gemm_nt(a, b, d, c=None, *, alpha: float | None = None, row_weight=None, swiglu: bool = False,
                swiglu_limit: float | None = None, use_ue8m0: bool = False, stream=None,
                config: GemmConfig | None = None) -> None:
    """D = A . B^T for FP8 A [M, K] and B [N, K] with DeepSeek-V3 fine-grained scales; BF16 D [M, N]
    (or, for a float32 D, the weight gradient D = C + A . B^T with both operands scaled per row).

    Args:
        a: (A, SFA): A float8_e4m3fn [M, K], K-contiguous; SFA float32 [M, ceil(K/128)], one scale per
           row per 128 of K. The TMA-aligned M-major layout (get_mn_major_tma_aligned_tensor, made by
           dgx.per_token_cast_to_fp8) is read as it is; a torch SFA in any other layout (e.g. row-major)
           is first copied into it on the GPU by dgx's scale-layout kernel, on the launch stream (one
           extra kernel per call; dgx.LayoutConversionWarning, once, says so); other tensor types raise
           ValueError.
        b: (B, SFB): B float8_e4m3fn [N, K], K-contiguous; SFB float32 [ceil(N/128), ceil(K/128)], one
           scale per 128x128 block, contiguous.
        d: bfloat16 [M, N], rows contiguous and 16-byte aligned; written in place.
        c: with a float32 d only: d = c + a.b^T (c may be d itself, to accumulate). A float32 d selects
           the weight-gradient variant (dgx.wgrad): B scaled per row too, SFB float32 [N, ceil(K/128)].
        alpha, row_weight, swiglu, swiglu_limit, use_ue8m0: the fused epilogues (dgx.fused): d may be a pair
           (d_fp8 float8_e4m3fn [M, N] (swiglu: [M, N/2]), d_sf [M, N/128] float32 M-major TMA-aligned, or int32
           packed UE8M0 [M, ceil(N/512)]): FP8 output quantised per row per 128 channels; swiglu=True with b from
           dgx.prepare_gate_up; row_weight float32 [M] times each output row; alpha times any output.
        stream: the stream to launch on (default: torch's current stream).
        config: a GemmConfig to use instead of the heuristic's choice (tuning and tests).

    Raises TypeError/ValueError naming the violated constraint before anything is launched. A call with torch
    tensors whose structure an earlier call had (dgx.fastpath) skips the checks and the packing: only new
    addresses are written into that call's parameters.
    """
    fused_call = wants_fused(d, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0)
    if fused_call:
        fused_fast = (config is None and c is None and type(a) is tuple and (type(b) is tuple or type(b) is GateUpWeight)
                      and fast_options(d, b, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0))
        if fused_fast:
            options, outs = fused_fast
            try:
                A, SFA = a
                B, SFB = b
                key = (A.shape[0], B.shape, options, get_ident())
            except (TypeError, ValueError, AttributeError, IndexError):  # not pairs of tensors: the full path says so
                fused_fast = None
            else:
                entry = _entries.get(key)
                if entry is not None and entry.check(A, SFA, B, SFB, *outs) and entry.run(
                        (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(), *[t.data_ptr() for t in outs]),
                        stream):
                    return
    fast = not fused_call and config is None and type(a) is tuple and type(b) is tuple and (c is None or c is d)
    if fast:
        try:
            A, SFA = a
            B, SFB = b
            key = (A.shape[0], B.shape, c is None, get_ident())
        except (TypeError, ValueError, AttributeError, IndexError):  # not a pair of tensors: the full path says so
            fast = False
        else:
            entry = _entries.get(key)
            if entry is not None and entry.check(A, SFA, B, SFB, d) and entry.run(
                    (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(), d.data_ptr()), stream):
                return
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    d_main = output_tensor(d) if fused_call else d
    av, sfav, bv, sfbv, dv = views_on_one_device(((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (d_main, "d")))
    fused = None
    if fused_call:
        if c is not None or dv.dtype == "float32":
            raise ValueError("fp8_gemm_nt: the fused epilogues (FP8 output, swiglu, row_weight, alpha, use_ue8m0) "
                             "are not for the weight gradient (float32 d = c + a.b^T)")
        m, n, k = expect_fp8_operands(av, sfav, bv, sfbv, dv)
        fused = fused_output(d, b, rows=(m,), n=n, device=av.device, masked=False, alpha=alpha,
                             row_weight=row_weight, swiglu=swiglu, swiglu_limit=swiglu_limit, use_ue8m0=use_ue8m0)
        dv = fused.d
    elif dv.dtype == "float32":
        made = wgrad_dense(SFA, SFB, c, (av, sfav, bv, sfbv, dv), stream=stream, config=config)
        if made is not None and fast and fastpath.torch_tensors(A, SFA, B, SFB, d):
            fastpath.register(_entries, key, (A, SFA, B, SFB, d), *made)
        return None
    else:
        if c is not None:
            expect_fp32_out_for_c(dv)
        m, n, k = expect_fp8_operands(av, sfav, bv, sfbv, dv)
        expect_dtype(dv, "d", "bfloat16")
        expect_shape(dv, "d", (m, n))
    expect_shape(sfav, "SFA", (m, ceil_div(k, 128)))
    expect_shape(sfbv, "SFB", (ceil_div(n, 128), ceil_div(k, 128)))
    expect_n_multiple_of_8(n)
    if n == 0:
        return
    expect_tma_rows(av, "A")
    expect_tma_rows(bv, "B")
    expect_tma_rows(dv, "d")
    expect_nonnegative_strides(sfav, "SFA")
    expect_contiguous(sfbv, "SFB")
    if m == 0:
        return
    if m >= 2**31:
        raise ValueError(f"A: M must be below 2**31; got {m}")
    device = av.device
    sfav, sfa_layout, conversion, launch_stream = scales_for_tma(SFA, sfav, stream, device)
    try:
        plan = launch.plan(GemmKind.DENSE, m, n, k, device, config, epilogue=fused.epilogue if fused else None)
        if launch_stream is None:
            launch_stream = resolve_stream(stream, device)
        ops = Operands(a=av.ptr, a_rows=m, lda=av.strides[0], b=bv.ptr, b_rows=n, ldb=bv.strides[0], d=dv.ptr,
                       d_rows=m, ldd=dv.strides[0], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr, m=m,
                       **(fused.operands() if fused else {}))
        pack = launch.pack(plan.config, ops)
        plan.launcher.launch(launch_stream, pack)
    finally:
        launch.release(conversion)  # converted scales in capture-owned memory: freed after the kernel
    if fast:
        fastpath.register_converted(_entries, key, (A, SFA, B, SFB, d), plan, pack, conversion)
    elif fused_call and fused_fast:
        fastpath.register_converted(_entries, key, (A, SFA, B, SFB, *outs), plan, pack, conversion)


def gemm_fp8_fp8_bf16_nt(lhs, rhs, out) -> None:
    """Legacy name of fp8_gemm_nt(lhs, rhs, out)."""
    fp8_gemm_nt(lhs, rhs, out)


def wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out) -> None:
    """Legacy name: out += lhs . rhs^T (fp8_gemm_nt(lhs, rhs, out, c=out) with a float32 out), on the dense entry
    point's path (its per-call fast path included)."""
    fp8_gemm_nt(lhs, rhs, out, c=out)
