"""dgx.skip_head_mid.fp8_gemm_nt_skip_head_mid: the FP8 GEMM whose output columns are attention heads, written
into the padded layout the next kernel reads (DeepGEMM's name and semantics).

B's N rows are heads of left + right rows each. D [M, heads * (left + mid + right)] holds each head as its left
columns, then `mid` columns this call does not touch, then its right columns:

    d.view(M, heads, left + mid + right)[:, :, :left]    = (a . b^T).view(M, heads, left + right)[:, :, :left]
    d.view(M, heads, left + mid + right)[:, :, -right:]  = (a . b^T).view(M, heads, left + right)[:, :, left:]

It is dgx.fp8_gemm_nt's kernel with one difference: each TMA store span of the output tile goes to D's column of
its first computed column (Fp8GemmTraits::d_col), so the heuristic's tile for the plain GEMM of the same shape runs
whenever its store spans divide left and right (always for multiples of 64).
"""

from __future__ import annotations

from dataclasses import replace

from . import launch
from .checks import (
    ceil_div,
    expect_contiguous,
    expect_dtype,
    expect_fp8_operands,
    expect_n_multiple_of_8,
    expect_nonnegative_strides,
    expect_shape,
    expect_tma_rows,
    unpack_pair,
    views_on_one_device,
)
from .device import get_num_sms
from .heuristics import choose_skip_head_mid as choose_config
from .kernels.fp8_gemm import GemmConfig, validate_head_splits
from .kinds import GemmKind
from .launch import Operands, scales_for_tma
from .streams import resolve_stream

__all__ = ["fp8_gemm_nt_skip_head_mid"]


def _head_splits(head_splits) -> tuple[int, int, int]:
    if not isinstance(head_splits, (tuple, list)) or len(head_splits) != 3:
        raise TypeError(f"head_splits: expected (left, mid, right); got {head_splits!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in head_splits):
        raise TypeError(f"head_splits: expected three ints; got {head_splits!r}")
    left, mid, right = head_splits
    if left <= 0 or right <= 0 or mid < 0:
        raise ValueError(f"head_splits: expected left > 0, mid >= 0 and right > 0; got {tuple(head_splits)}")
    if left % 8 or right % 8:
        raise ValueError(f"head_splits: left and right must be multiples of 8 (the narrowest TMA store span); got "
                         f"{tuple(head_splits)}")
    return left, mid, right


def fp8_gemm_nt_skip_head_mid(a, b, d, head_splits, *, stream=None, config: GemmConfig | None = None) -> None:
    """D's left and right parts of every head = A . B^T (FP8 with DeepSeek-V3 fine-grained scales, BF16 out).

    Args:
        a: (A, SFA) as for dgx.fp8_gemm_nt: A float8_e4m3fn [M, K], SFA float32 [M, ceil(K/128)] (the TMA-aligned
           M-major layout is read as it is; a torch SFA in another layout is converted on the GPU first).
        b: (B, SFB): B float8_e4m3fn [N, K] with N = heads * (left + right), SFB float32 [ceil(N/128), ceil(K/128)].
        d: bfloat16 [M, heads * (left + mid + right)], rows contiguous and 16-byte aligned. Each head's mid
           columns are not written.
        head_splits: (left, mid, right): left and right positive multiples of 8, mid >= 0.
        stream: the stream to launch on (default: torch's current stream).
        config: a GemmConfig to use instead of the heuristic's choice (tuning and tests); its head_splits must be
            these.

    Raises TypeError/ValueError naming the violated constraint before anything is launched. M = 0 is a no-op.
    """
    head_splits = _head_splits(head_splits)
    left, mid, right = head_splits
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    av, sfav, bv, sfbv, dv = views_on_one_device(((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (d, "d")))
    m, n, k = expect_fp8_operands(av, sfav, bv, sfbv, dv)
    if dv.dtype == "float32":
        raise TypeError("d: expected dtype bfloat16 (the skip-head-mid GEMM writes BF16 on sm_90); got float32")
    expect_dtype(dv, "d", "bfloat16")
    if n % (left + right):
        raise ValueError(f"B: N = {n} must be a whole number of heads of left + right = {left + right} rows "
                         f"(head_splits {head_splits})")
    cols = n + n // (left + right) * mid
    expect_shape(dv, "d", (m, cols))
    expect_shape(sfav, "SFA", (m, ceil_div(k, 128)))
    expect_shape(sfbv, "SFB", (ceil_div(n, 128), ceil_div(k, 128)))
    expect_n_multiple_of_8(n, "B")
    expect_tma_rows(av, "A")
    expect_tma_rows(bv, "B")
    expect_tma_rows(dv, "d")
    expect_nonnegative_strides(sfav, "SFA")
    expect_contiguous(sfbv, "SFB")
    if config is not None:
        if not isinstance(config, GemmConfig):
            raise TypeError(f"config: expected a GemmConfig; got {type(config).__name__}")
        if config.head_splits != head_splits:
            raise ValueError(f"config: its head_splits {config.head_splits} are not this call's {head_splits}")
    if m == 0:
        return
    if m >= 2**31:
        raise ValueError(f"A: M must be below 2**31; got {m}")
    device = av.device
    if config is None:
        config = choose_config(m, n, k, head_splits, get_num_sms(device))
    sfav, sfa_layout, conversion, launch_stream = scales_for_tma(SFA, sfav, stream, device)
    try:
        plan = launch.plan(GemmKind.DENSE, m, n, k, device, config)
        if launch_stream is None:
            launch_stream = resolve_stream(stream, device)
        ops = Operands(a=av.ptr, a_rows=m, lda=av.strides[0], b=bv.ptr, b_rows=n, ldb=bv.strides[0], d=dv.ptr,
                       d_rows=m, ldd=dv.strides[0], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr, m=m)
        plan.launcher.launch(launch_stream, launch.pack(plan.config, ops))
    finally:
        launch.release(conversion)
