"""Weight-gradient GEMMs: FP32 D = C + A . B^T with both operands scaled per row (1 x 128), dense or
K-grouped (MoE: one output per expert, each over its own tokens along K), on the shared kernel."""

from __future__ import annotations

import sys
from threading import get_ident
from typing import Sequence

from . import fastpath, k_grouped_maps, launch, runtime
from .checks import (
    ceil_div,
    expect_dtype,
    expect_fp8_operands,
    expect_n_multiple_of_8,
    expect_ndim,
    expect_nonnegative_strides,
    expect_scaled_fp8_dtypes,
    expect_shape,
    expect_tma_rows,
    unpack_pair,
    views_on_one_device,
)
from .kernels.fp8_gemm import GemmConfig
from .kinds import GemmKind
from .launch import Operands, scales_for_tma
from .layout import k_grouped_scales_view
from .streams import resolve_stream
from .tensors import TensorView, as_view, require_cuda
from . import caches

_ks_tensors: dict[tuple, object] = {}
_KS_CACHE_LIMIT = 64

# Per-call fast path of the K-grouped GEMM for torch tensors (dgx.fastpath): hint key (the groups' sizes, d's shape,
# whether ks_tensor is given, thread) -> (the entry an earlier call made, its A and B addresses, its launch stream,
# the ks tensor dgx made for it). An entry serves calls with its own A and B addresses on its own stream only: the
# groups' maps it launches with (dgx.k_grouped_maps) hold those addresses and were copied on that stream. The other
# addresses (scales, d, ks_tensor) are relocated as in the other entry points.
_k_entries: dict[tuple, tuple] = caches.per_process({})


def _expect_fp32_out(v: TensorView, name: str, shape: tuple[int, ...]) -> None:
    expect_dtype(v, name, "float32")
    expect_shape(v, name, shape)
    expect_tma_rows(v, name)  # 16-byte aligned rows: the kernel moves two floats at a time


def _c_view(c, dv: TensorView) -> TensorView | None:
    if c is None:
        return None
    cv = as_view(c, "c")
    require_cuda(cv, "c", dv.device)
    _expect_fp32_out(cv, "c", tuple(dv.shape))
    return cv


def dense_fp32(SFA, SFB, c, views, *, stream=None, config: GemmConfig | None = None):
    """fp8_gemm_nt with a float32 d (see there): D = C + A . B^T, SFA [M, KB] and SFB [N, KB] per row.

    Returns what the per-call fast path needs to repeat the launch (dgx.fastpath.register's plan, parameters and
    conversions, the tensors taken as (A, SFA, B, SFB, d)), or None where it must not (nothing launched, or C
    copied into D first)."""
    av, sfav, bv, sfbv, dv = views
    m, n, k = expect_fp8_operands(av, sfav, bv, sfbv, dv)
    _expect_fp32_out(dv, "d", (m, n))
    cv = _c_view(c, dv)
    expect_shape(sfav, "SFA", (m, ceil_div(k, 128)))
    if tuple(sfbv.shape) != (n, ceil_div(k, 128)):
        raise ValueError(
            f"SFB: a float32 d selects the weight-gradient variant, which scales B per row: expected shape "
            f"({n}, {ceil_div(k, 128)}); got {tuple(sfbv.shape)}"
        )
    expect_n_multiple_of_8(n, "B")
    expect_tma_rows(av, "A")
    expect_tma_rows(bv, "B")
    expect_nonnegative_strides(sfav, "SFA")
    expect_nonnegative_strides(sfbv, "SFB")
    if m == 0 or n == 0:
        return None
    if m >= 2**31:
        raise ValueError(f"A: M must be below 2**31; got {m}")
    device = av.device
    sfav, sfa_layout, conv_a, s1 = scales_for_tma(SFA, sfav, stream, device)
    try:
        sfbv, sfb_layout, conv_b, s2 = scales_for_tma(SFB, sfbv, stream, device, "SFB")
    except BaseException:
        launch.release(conv_a)
        raise
    try:
        plan = launch.plan(GemmKind.WGRAD, m, n, k, device, config)
        launch_stream = s1 or s2 or resolve_stream(stream, device)
        copied = cv is not None and (cv.ptr, cv.strides) != (dv.ptr, dv.strides)
        if copied:
            runtime.copy_rows(dv.ptr, dv.strides[0] * 4, cv.ptr, cv.strides[0] * 4, n * 4, m, launch_stream)  # D = C
        # The kernel adds to D (which now holds C) by TMA reductions, or stores into it when there is no C.
        ops = Operands(a=av.ptr, a_rows=m, lda=av.strides[0], b=bv.ptr, b_rows=n, ldb=bv.strides[0], d=dv.ptr,
                       d_rows=m, ldd=dv.strides[0], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr, m=m,
                       sfb_layout=sfb_layout, accumulate=cv is not None)
        pack = launch.pack(plan.config, ops)
        plan.launcher.launch(launch_stream, pack)
    finally:
        launch.release(conv_a, conv_b)  # converted scales in capture-owned memory: freed after the kernel
    if copied:
        return None
    return plan, pack, [(index, conv) for index, conv in ((1, conv_a), (3, conv_b)) if conv is not None]


def _ks_on_device(ks: tuple[int, ...], device: int):
    """The group sizes as an int32 tensor on `device` (made once per distinct ks; needs torch)."""
    key = (device, ks)
    t = _ks_tensors.get(key)
    if t is None:
        torch = sys.modules.get("torch")
        if torch is None:
            raise ValueError("ks_tensor: expected the group sizes as an int32 tensor on the GPU (torch is not "
                             "loaded, so dgx cannot make one)")
        t = torch.tensor(ks, dtype=torch.int32, device=f"cuda:{device}")
        if len(_ks_tensors) >= _KS_CACHE_LIMIT:
            _ks_tensors.clear()
        _ks_tensors[key] = t
    return t


def k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks: Sequence[int], ks_tensor=None, *, stream=None,
                                     config: GemmConfig | None = None) -> None:
    """d[g] += A_g . B_g^T for every group g, in one launch (MoE weight gradients).

    Args:
        a: (A, SFA): A float8_e4m3fn, 1-D of M x sum(ks) elements: the groups' A_g [M, k_g] (row-major,
           K-contiguous) stored one after another; SFA float32, one scale per row per 128 of K, either
           [M, sum(ks) / 128] with the groups' scales one after another along K (dgx's layout; layouts as
           in fp8_gemm_nt) or [sum(ks) / 128, M] with the groups' k-blocks stacked along the first
           dimension (DeepGEMM's layout; a contiguous one is read as it is when M * 4 is a multiple of 16
           bytes, else copied on the GPU). A group with k_g = 0 has no scales. When M == sum(ks) / 128
           a tensor whose first dimension has stride 1 is dgx's layout, any other DeepGEMM's (see
           dgx.layout.k_grouped_scales_view).
        b: (B, SFB): B float8_e4m3fn, 1-D of N x sum(ks): the groups' B_g [N, k_g] likewise; SFB float32
           [N, sum(ks) / 128] or [sum(ks) / 128, N], as SFA.
        d: float32 [G, M, N], accumulated in place.
        ks: the K of each group (host ints, each a multiple of 128; 0 for an empty group, whose d[g] is
            left as it is).
        ks_tensor: the same values as int32 [G] on the GPU (the kernel reads them); made from `ks` (and
            kept for reuse) when not given.

    The groups' tensor maps are encoded and copied to the device once per A and B address, M, N, ks and launch
    stream (dgx.k_grouped_maps), and a call with torch tensors whose structure, A and B addresses and stream an
    earlier call had (dgx.fastpath) skips the checks and the packing.
    """
    fast = config is None and type(a) is tuple and type(b) is tuple and type(ks) in (list, tuple)
    if fast:
        try:
            A, SFA = a
            B, SFB = b
            tensors = (A, SFA, B, SFB, d) if ks_tensor is None else (A, SFA, B, SFB, d, ks_tensor)
            key = (tuple(ks), d.shape, ks_tensor is None, get_ident())
        except (TypeError, ValueError, AttributeError):  # not pairs of tensors: the full path says so
            fast = False
        else:
            hit = _k_entries.get(key)
            if hit is not None and _run_k_entry(hit, tensors, stream):
                return
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    av, sfav, bv, sfbv, dv = views_on_one_device(((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (d, "d")))
    try:
        ks = tuple(int(x) for x in ks)
    except (TypeError, ValueError):
        raise TypeError(f"ks: expected a sequence of ints; got {type(ks).__name__}") from None
    for g, kg in enumerate(ks):
        if kg < 0 or kg % 128:
            raise ValueError(f"ks[{g}]: expected a non-negative multiple of 128 (the scales are per 128 of K); got {kg}")
    for v, name in ((av, "A"), (bv, "B")):
        expect_ndim(v, name, 1)
    for v, name in ((sfav, "SFA"), (sfbv, "SFB")):
        expect_ndim(v, name, 2)
    expect_ndim(dv, "d", 3)
    expect_scaled_fp8_dtypes(av, bv, sfav, sfbv)
    groups = len(ks)
    if groups == 0:
        raise ValueError("ks: expected at least one group")
    if dv.ndim != 3 or dv.shape[0] != groups:
        raise ValueError(f"d: expected [G = {groups}, M, N]; got shape {dv.shape}")
    _, m, n = dv.shape
    k_total = sum(ks)
    expect_shape(av, "A", (m * k_total,))
    expect_shape(bv, "B", (n * k_total,))
    for v, name in ((av, "A"), (bv, "B")):
        if v.shape[0] > 1 and v.strides[0] != 1:
            raise ValueError(f"{name}: expected a contiguous 1-D tensor; got strides {v.strides}")
        if v.ptr % 16:
            raise ValueError(f"{name}: TMA needs a 16-byte aligned base address; got 0x{v.ptr:x}")
    _expect_fp32_out(dv, "d", (groups, m, n))
    if groups > 1 and m * n and dv.strides[0] != m * dv.strides[1]:
        raise ValueError(f"d: expected the groups stored one after another; got strides {dv.strides}")
    # dgx's [M, KB] or DeepGEMM's [KB, M] (and likewise for N), as the [M, KB] view the kernel reads.
    sfav, sfa_transposed = k_grouped_scales_view(sfav, m, k_total // 128, "SFA", "M")
    sfbv, sfb_transposed = k_grouped_scales_view(sfbv, n, k_total // 128, "SFB", "N")
    expect_n_multiple_of_8(n, "B")
    expect_nonnegative_strides(sfav, "SFA")
    expect_nonnegative_strides(sfbv, "SFB")
    device = av.device
    if ks_tensor is None:
        ks_view = None
    else:
        ks_view = as_view(ks_tensor, "ks_tensor")
        require_cuda(ks_view, "ks_tensor", device)
        expect_dtype(ks_view, "ks_tensor", "int32")
        expect_shape(ks_view, "ks_tensor", (groups,))
        if groups > 1 and ks_view.strides[0] != 1:
            raise ValueError(f"ks_tensor: expected a contiguous tensor; got strides {ks_view.strides}")
    if m == 0 or n == 0 or k_total == 0:
        return
    if groups * m >= 2**31:
        raise ValueError(f"d: groups x M must be below 2**31; got {groups} x {m}")
    if ks_view is None:
        ks_view = as_view(_ks_on_device(ks, device), "ks_tensor")
    sfav, sfa_layout, conv_a, s1 = scales_for_tma(SFA, sfav, stream, device, "SFA", sfa_transposed)
    try:
        sfbv, sfb_layout, conv_b, s2 = scales_for_tma(SFB, sfbv, stream, device, "SFB", sfb_transposed)
    except BaseException:
        launch.release(conv_a)
        raise
    try:
        made = _k_grouped_launch(av, bv, dv, ks, ks_view, sfav, sfa_layout, sfbv, sfb_layout, m, n, k_total, groups,
                                 device, config, stream, s1 or s2)
    finally:
        launch.release(conv_a, conv_b)  # converted scales in capture-owned memory: freed after the kernel
    if made is not None and fast and fastpath.torch_tensors(*tensors):
        plan, pack, launch_stream = made
        conversions = [(index, conv) for index, conv in ((1, conv_a), (3, conv_b)) if conv is not None]
        _register_k_entry(key, tensors, plan, pack, conversions, launch_stream,
                          None if ks_tensor is not None else _ks_tensors.get((device, ks)))


def _run_k_entry(hit: tuple, tensors: tuple, stream) -> bool:
    """Launches a K-grouped entry for `tensors` if it can serve them (same A and B addresses, same stream, the
    entry's check passes); False, having launched nothing, otherwise."""
    entry, a_ptr, b_ptr, entry_stream, _ = hit
    ptrs = tuple(t.data_ptr() for t in tensors)
    if ptrs[0] != a_ptr or ptrs[2] != b_ptr or not entry.check(*tensors):
        return False
    s = entry.current_stream(entry.device) if stream is None else resolve_stream(stream, entry.device)
    return s == entry_stream and entry.run(ptrs, s)


def _register_k_entry(key: tuple, tensors: tuple, plan, pack, conversions, launch_stream: int, keep) -> None:
    made: dict[tuple, fastpath.Entry] = {}
    fastpath.register(made, key, tensors, plan, pack, conversions)
    entry = made.get(key)
    if entry is None:
        _k_entries.pop(key, None)
        return
    if len(_k_entries) >= fastpath.CACHE_LIMIT:
        _k_entries.clear()
    _k_entries[key] = (entry, tensors[0].data_ptr(), tensors[2].data_ptr(), launch_stream, keep)


def _k_grouped_launch(av, bv, dv, ks, ks_view, sfav, sfa_layout, sfbv, sfb_layout, m, n, k_total, groups, device,
                      config, stream, launch_stream):
    """Launches the K-grouped kernel; returns (plan, pack, launch stream) where the launch may be repeated by the
    per-call fast path (its groups' maps are kept: dgx.k_grouped_maps), else None."""
    typical_k = max(128, k_total // max(1, sum(1 for kg in ks if kg)))
    plan = launch.plan(GemmKind.K_GROUPED, m, n, typical_k, device, config, groups=groups)
    launch_stream = launch_stream or resolve_stream(stream, device)
    # One map of A_g and one of B_g per group (their row strides differ), in device memory for the kernel.
    cfg = plan.config
    group_maps, kept = k_grouped_maps.group_maps(av.ptr, bv.ptr, m, n, ks, cfg.box_rows_a, cfg.box_rows_b, device,
                                                 launch_stream)
    # The kernel reads the groups' maps, not tmap_a / tmap_b; those still need valid maps: the first group's.
    first = next(kg for kg in ks if kg)
    ops = Operands(a=av.ptr, a_rows=m, lda=first, b=bv.ptr, b_rows=n, ldb=first, d=dv.ptr, d_rows=groups * m,
                   ldd=dv.strides[1], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr, m=m,
                   grouped_layout=ks_view.ptr, num_groups=groups, sfb_layout=sfb_layout, k=first,
                   group_maps=group_maps.address, accumulate=True)
    try:
        pack = launch.pack(plan.config, ops)
        plan.launcher.launch(launch_stream, pack)
    finally:
        if not kept:
            group_maps.release()  # stream-ordered: after the kernel
    return (plan, pack, launch_stream) if kept else None


def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out, batch_sizes) -> None:
    """Legacy name of k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes): DeepGEMM's call, which
    passes the scales as [sum(batch_sizes) / 128, M] and [sum(batch_sizes) / 128, N] (accepted, as is dgx's
    [M, ...] / [N, ...] layout)."""
    k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes)
