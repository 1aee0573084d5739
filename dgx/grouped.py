"""MoE GEMMs grouped along M: contiguous segments (prefill, training forward) and masked slices (decode
under CUDA graphs). Same kernel, scheduler and heuristics as fp8_gemm_nt; groups share N and K."""

from __future__ import annotations

from _thread import get_ident

from . import fastpath, launch
from .checks import (
    ceil_div,
    expect_contiguous,
    expect_dtype,
    expect_n_multiple_of_8,
    expect_ndim,
    expect_positive_int,
    expect_nonnegative_strides,
    expect_shape,
    expect_tma_rows,
    unpack_pair,
    views_on_one_device,
)
from .fused import GateUpWeight, fast_options, fused_output, output_tensor, wants_fused
from .heuristics import CONTIGUOUS_ALIGNMENT
from .kernels.fp8_gemm import GemmConfig
from .kinds import GemmKind
from .launch import Operands, scales_for_tma
from .streams import resolve_stream
from .tensors import TensorView
from . import caches


# Per-call fast path for torch tensors (dgx.fastpath), per entry point: hint key -> the entry an earlier call of
# that structure made. The tensors are taken as (A, SFA, B, SFB, d, m_indices or masked_m); a fused call's key adds
# its options (dgx.fused.fast_options), its tensors are (A, SFA, B, SFB, m_indices or masked_m, d or d_fp8, d_sf
# [, row_weight]).
_contiguous: dict[tuple, fastpath.Entry] = caches.per_process({})
_masked: dict[tuple, fastpath.Entry] = caches.per_process({})


def _fused_lookup(cache: dict, a, b, d, last, extra, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0, stream):
    """The fast path of a fused grouped call: (True, None) where an entry launched it; else (False, (key, outs)) to
    register the full path's launch under, or (False, None) where the call cannot have an entry. `last` is
    m_indices or masked_m, `extra` what else the key holds (masked: expected_m)."""
    if not (type(a) is tuple and (type(b) is tuple or type(b) is GateUpWeight)):
        return False, None
    found = fast_options(d, b, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0)
    if not found:
        return False, None
    options, outs = found
    try:
        A, SFA = a
        B, SFB = b
        key = (A.shape[0], B.shape, extra, options, get_ident())
    except (TypeError, ValueError, AttributeError, IndexError):  # not pairs of tensors: the full path says so
        return False, None
    entry = cache.get(key)
    if entry is not None and entry.check(A, SFA, B, SFB, last, *outs) and entry.run(
            (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(), last.data_ptr(), *[t.data_ptr() for t in outs]),
            stream):
        return True, None
    return False, (key, outs)


def get_mk_alignment_for_contiguous_layout() -> int:
    """Rows each group's segment of A must be padded to in the contiguous layout."""
    return CONTIGUOUS_ALIGNMENT


def _expect_stacked(v: TensorView, name: str, rows: int) -> None:
    """A 3-D [G, rows, cols] tensor whose groups follow one another (so it reads as [G * rows, cols])."""
    if v.shape[0] > 1 and rows > 0 and v.strides[0] != rows * v.strides[1]:
        raise ValueError(
            f"{name}: expected the groups stored one after another (stride along dim 0 = {rows} x the row "
            f"stride {v.strides[1]}); got strides {v.strides}"
        )


def check_contiguous_operands(av: TensorView, sfav: TensorView, bv: TensorView, sfbv: TensorView, dv: TensorView,
                              lv: TensorView, layout_name: str) -> tuple[int, int, int, int]:
    """(M, K, groups, N) of a contiguous grouped GEMM's operands, after the checks both of its group layouts share
    (`lv`: the int32 group layout, m_indices or the prefix sums, named `layout_name`); its shape is the caller's.
    `dv` None: a fused call, whose output fused_output checks."""
    expect_ndim(av, "A", 2)
    if dv is not None:
        expect_ndim(dv, "d", 2)
    expect_ndim(sfav, "SFA", 2)
    expect_ndim(lv, layout_name, 1)
    expect_dtype(av, "A", "float8_e4m3fn")
    expect_dtype(sfav, "SFA", "float32")
    if dv is not None:
        expect_dtype(dv, "d", "bfloat16")
    expect_dtype(lv, layout_name, "int32")
    m, k = av.shape
    if k == 0:
        raise ValueError("A: K must be positive; got K = 0")
    groups, n = _check_b(bv, sfbv, k)
    if dv is not None:
        expect_shape(dv, "d", (m, n))
        expect_tma_rows(dv, "d")
    expect_shape(sfav, "SFA", (m, ceil_div(k, 128)))
    expect_tma_rows(av, "A")
    expect_nonnegative_strides(sfav, "SFA")
    expect_contiguous(lv, layout_name)
    return m, k, groups, n


def _check_b(bv: TensorView, sfbv: TensorView, k: int) -> tuple[int, int]:
    expect_ndim(bv, "B", 3)
    expect_ndim(sfbv, "SFB", 3)
    expect_dtype(bv, "B", "float8_e4m3fn")
    expect_dtype(sfbv, "SFB", "float32")
    groups, n, kb = bv.shape
    if kb != k:
        raise ValueError(f"B: expected K = {k} columns like A; got shape {bv.shape}")
    if groups <= 0:
        raise ValueError(f"B: expected at least one group; got shape {bv.shape}")
    expect_shape(sfbv, "SFB", (groups, ceil_div(n, 128), ceil_div(k, 128)))
    expect_n_multiple_of_8(n)
    expect_tma_rows(bv, "B")
    _expect_stacked(bv, "B", n)
    expect_contiguous(sfbv, "SFB")
    if groups * n >= 2**31:
        raise ValueError(f"B: groups x N must be below 2**31; got {groups} x {n}")
    return groups, n


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, *, alpha: float | None = None, row_weight=None,
                                     swiglu: bool = False, swiglu_limit: float | None = None, use_ue8m0: bool = False,
                                     stream=None, config: GemmConfig | None = None) -> None:
    """d[r] = A[r] . B[g(r)]^T for every row r of A, where g(r) = m_indices[r] (MoE prefill / forward).

    Args:
        a: (A, SFA): A float8_e4m3fn [M_sum, K] holding each group's rows one segment after another, every
           segment padded to get_mk_alignment_for_contiguous_layout() rows; SFA float32 [M_sum,
           ceil(K/128)] (layouts as in fp8_gemm_nt).
        b: (B, SFB): B float8_e4m3fn [G, N, K]; SFB float32 [G, ceil(N/128), ceil(K/128)], contiguous.
        d: bfloat16 [M_sum, N], written in place.
        m_indices: int32 [M_sum] on the GPU: each row's group, -1 for a padding row.
        alpha, row_weight, swiglu, swiglu_limit, use_ue8m0: the fused epilogues, as in fp8_gemm_nt (d may be a
           (d_fp8, d_sf) pair; swiglu=True with b from dgx.prepare_gate_up; row_weight float32 [M_sum]).

    Rows are processed in blocks of 64 or 128 (which divide the alignment), each block with the group of
    its first row. A block whose first index is -1, or outside [0, G) (a bad index), is skipped: its rows
    of d are left as they were, and nothing is loaded or computed for it unless it shares a 2-CTA cluster
    with a valid block (it then loads its A rows and half of that block's B tile for the pair, and stores
    nothing) - so a bad index never reads or writes out of bounds. A padding row inside a block that
    starts with a valid row gets the product of its (padding) A row with that block's group: unspecified
    values, as padding rows carry no data.
    M_sum must be a multiple of the alignment; the segments' alignment itself is the caller's contract
    (it cannot be checked without reading m_indices back from the GPU).
    """
    fused_call = wants_fused(d, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0)
    fused_fast = None
    if fused_call and config is None:
        done, fused_fast = _fused_lookup(_contiguous, a, b, d, m_indices, None, alpha, row_weight, swiglu,
                                         swiglu_limit, use_ue8m0, stream)
        if done:
            return
    fast = not fused_call and config is None and type(a) is tuple and type(b) is tuple
    if fast:
        try:
            A, SFA = a
            B, SFB = b
            key = (A.shape[0], B.shape, get_ident())
        except (TypeError, ValueError, AttributeError, IndexError):  # not a pair of tensors: the full path says so
            fast = False
        else:
            entry = _contiguous.get(key)
            if entry is not None and entry.check(A, SFA, B, SFB, d, m_indices) and entry.run(
                    (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(), d.data_ptr(), m_indices.data_ptr()),
                    stream):
                return
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    av, sfav, bv, sfbv, iv = views_on_one_device(
        ((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (m_indices, "m_indices"))
    )
    dv = None if fused_call else views_on_one_device(((A, "A"), (d, "d")))[1]
    m, k, groups, n = check_contiguous_operands(av, sfav, bv, sfbv, dv, iv, "m_indices")
    fused = None
    if fused_call:
        fused = fused_output(d, b, rows=(m,), n=n, device=av.device, masked=False, alpha=alpha, row_weight=row_weight,
                             swiglu=swiglu, swiglu_limit=swiglu_limit, use_ue8m0=use_ue8m0)
        dv = fused.d
    expect_shape(iv, "m_indices", (m,))
    if m % CONTIGUOUS_ALIGNMENT:
        raise ValueError(
            f"A: M_sum must be a multiple of the contiguous-layout alignment {CONTIGUOUS_ALIGNMENT} (every "
            f"group's segment padded to it); got M_sum = {m}"
        )
    if n == 0 or m == 0:
        return
    if m >= 2**31:
        raise ValueError(f"A: M_sum must be below 2**31; got {m}")
    device = av.device
    sfav, sfa_layout, conversion, launch_stream = scales_for_tma(SFA, sfav, stream, device)
    try:
        plan = launch.plan(GemmKind.M_GROUPED_CONTIGUOUS, m, n, k, device, config, groups=groups,
                           epilogue=fused.epilogue if fused else None)
        if launch_stream is None:
            launch_stream = resolve_stream(stream, device)
        ops = Operands(a=av.ptr, a_rows=m, lda=av.strides[0], b=bv.ptr, b_rows=groups * n, ldb=bv.strides[1],
                       d=dv.ptr, d_rows=m, ldd=dv.strides[0], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr, m=m,
                       grouped_layout=iv.ptr, num_groups=groups, **(fused.operands() if fused else {}))
        pack = launch.pack(plan.config, ops)
        plan.launcher.launch(launch_stream, pack)
    finally:
        launch.release(conversion)  # converted scales in capture-owned memory: freed after the kernel
    if fast:
        fastpath.register_converted(_contiguous, key, (A, SFA, B, SFB, d, m_indices), plan, pack, conversion)
    elif fused_fast:
        fastpath.register_converted(_contiguous, fused_fast[0], (A, SFA, B, SFB, m_indices, *fused_fast[1]), plan, pack,
                                    conversion)


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m: int, *, alpha: float | None = None,
                                 row_weight=None, swiglu: bool = False, swiglu_limit: float | None = None,
                                 use_ue8m0: bool = False, stream=None, config: GemmConfig | None = None) -> None:
    """d[g, :masked_m[g]] = A[g, :masked_m[g]] . B[g]^T for every group g (MoE decode, CUDA-graph friendly).

    Args:
        a: (A, SFA): A float8_e4m3fn [G, M_max, K]; SFA float32 [G, M_max, ceil(K/128)], M-major per group
           as get_mn_major_tma_aligned_tensor makes it (other layouts of torch tensors are converted).
        b: (B, SFB): B float8_e4m3fn [G, N, K]; SFB float32 [G, ceil(N/128), ceil(K/128)], contiguous.
        d: bfloat16 [G, M_max, N], written in place.
        masked_m: int32 [G] on the GPU, read by the kernel at run time (so a captured graph follows new
           counts): the valid rows of each group. Values above M_max count as M_max, negative ones as 0.
        expected_m: a host int, the typical rows per group: it only guides the choice of config.
        alpha, row_weight, swiglu, swiglu_limit, use_ue8m0: the fused epilogues, as in fp8_gemm_nt: d may be a
           (d_fp8 [G, M_max, N or N/2], d_sf [G, M_max, cols]) pair, d_sf M-major per group (the layout this
           function reads as SFA); row_weight float32 [G, M_max].

    Rows at or past masked_m[g] are neither used as results nor written: d keeps what it held there.
    """
    # expected_m is part of the key (it picks the config), and only as an int: True and 1.0 hash as 1 does
    fused_call = wants_fused(d, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0)
    fused_fast = None
    if fused_call and config is None and type(expected_m) is int:
        done, fused_fast = _fused_lookup(_masked, a, b, d, masked_m, expected_m, alpha, row_weight, swiglu,
                                         swiglu_limit, use_ue8m0, stream)
        if done:
            return
    fast = not fused_call and config is None and type(a) is tuple and type(b) is tuple and type(expected_m) is int
    if fast:
        try:
            A, SFA = a
            B, SFB = b
            key = (A.shape[0], B.shape, expected_m, get_ident())
        except (TypeError, ValueError, AttributeError, IndexError):  # not a pair of tensors: the full path says so
            fast = False
        else:
            entry = _masked.get(key)
            if entry is not None and entry.check(A, SFA, B, SFB, d, masked_m) and entry.run(
                    (A.data_ptr(), SFA.data_ptr(), B.data_ptr(), SFB.data_ptr(), d.data_ptr(), masked_m.data_ptr()),
                    stream):
                return
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    d_main = output_tensor(d) if fused_call else d
    av, sfav, bv, sfbv, dv, mv = views_on_one_device(
        ((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (d_main, "d"), (masked_m, "masked_m"))
    )
    expect_positive_int(expected_m, "expected_m")
    for v, name in ((av, "A"), (dv, "d"), (sfav, "SFA")):
        expect_ndim(v, name, 3)
    expect_ndim(mv, "masked_m", 1)
    expect_dtype(av, "A", "float8_e4m3fn")
    expect_dtype(sfav, "SFA", "float32")
    if not fused_call:
        expect_dtype(dv, "d", "bfloat16")
    expect_dtype(mv, "masked_m", "int32")
    groups_a, m_max, k = av.shape
    if k == 0:
        raise ValueError("A: K must be positive; got K = 0")
    groups, n = _check_b(bv, sfbv, k)
    if groups_a != groups:
        raise ValueError(f"A: expected {groups} groups like B; got shape {av.shape}")
    fused = None
    if fused_call:
        fused = fused_output(d, b, rows=(groups, m_max), n=n, device=av.device, masked=True, alpha=alpha,
                             row_weight=row_weight, swiglu=swiglu, swiglu_limit=swiglu_limit, use_ue8m0=use_ue8m0)
        dv = fused.d
    else:
        expect_shape(dv, "d", (groups, m_max, n))
    expect_shape(sfav, "SFA", (groups, m_max, ceil_div(k, 128)))
    expect_shape(mv, "masked_m", (groups,))
    expect_tma_rows(av, "A")
    expect_tma_rows(dv, "d")
    _expect_stacked(av, "A", m_max)
    _expect_stacked(dv, "d", m_max)
    expect_nonnegative_strides(sfav, "SFA")
    expect_contiguous(mv, "masked_m")
    if n == 0 or m_max == 0:
        return
    if groups * m_max >= 2**31:
        raise ValueError(f"A: groups x M_max must be below 2**31; got {groups} x {m_max}")
    device = av.device
    sfav, sfa_layout, conversion, launch_stream = scales_for_tma(SFA, sfav, stream, device)
    try:
        plan = launch.plan(GemmKind.M_GROUPED_MASKED, min(expected_m, m_max), n, k, device, config, groups=groups,
                           units_m=m_max, epilogue=fused.epilogue if fused else None)
        if launch_stream is None:
            launch_stream = resolve_stream(stream, device)
        rows = groups * m_max
        ops = Operands(a=av.ptr, a_rows=rows, lda=av.strides[1], b=bv.ptr, b_rows=groups * n, ldb=bv.strides[1],
                       d=dv.ptr, d_rows=rows, ldd=dv.strides[1], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr,
                       m=m_max, grouped_layout=mv.ptr, num_groups=groups, **(fused.operands() if fused else {}))
        pack = launch.pack(plan.config, ops)
        plan.launcher.launch(launch_stream, pack)
    finally:
        launch.release(conversion)
    if fast:
        fastpath.register_converted(_masked, key, (A, SFA, B, SFB, d, masked_m), plan, pack, conversion)
    elif fused_fast:
        fastpath.register_converted(_masked, fused_fast[0], (A, SFA, B, SFB, masked_m, *fused_fast[1]), plan, pack,
                                    conversion)


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices) -> None:
    """Legacy name of m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)."""
    m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked_m, expected_m: int) -> None:
    """Legacy name of m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)."""
    m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)
