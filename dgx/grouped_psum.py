"""The contiguous MoE GEMM with its groups given by prefix sums (DeepGEMM's ``use_psum_layout=True``): one int
per group instead of one per row. Same kernel as dgx.grouped's m_indices layout, with the scheduler's prefix-sum
layout (ptx/scheduler.cuh kLayoutContiguousPsum), which finds each tile's group from the sums on the GPU."""

from __future__ import annotations

from . import launch
from .checks import expect_positive_int, unpack_pair, views_on_one_device
from .device import get_num_sms
from .grouped import check_contiguous_operands
from .fused import fused_output, wants_fused
from .heuristics import choose_fused, expect_psum_alignment, psum_config
from .kernels.fp8_gemm import GemmConfig
from .kinds import Layout
from .launch import GemmPlan, Operands, scales_for_tma
from .streams import resolve_stream
from . import caches

__all__ = ["m_grouped_fp8_gemm_nt_contiguous_psum", "psum_config"]

_plans: dict[tuple, GemmPlan] = caches.per_process({})


def _plan(m: int, n: int, k: int, groups: int, device: int, heuristic_m: int, alignment: int,
          config: GemmConfig | None, epilogue=None) -> GemmPlan:
    num_sms = get_num_sms(device)
    key = (m, n, k, groups, device, num_sms, heuristic_m, alignment, config, epilogue)
    found = _plans.get(key)
    if found is None:
        if config is None and epilogue is not None:
            config = choose_fused("m_grouped_contiguous_psum", heuristic_m, n, k, groups, num_sms, epilogue,
                                  alignment).config
        elif config is None:
            config = psum_config(heuristic_m, n, k, groups, num_sms, alignment)
        elif config.epilogue != epilogue:
            raise ValueError(f"config: its epilogue {config.epilogue} is not the call's {epilogue}")
        elif config.layout != Layout.CONTIGUOUS_PSUM or config.n != n or config.k != k or config.wgrad:
            raise ValueError(
                f"config is for a {config.kind} GEMM (layout {config.layout}) with N={config.n}, K={config.k}; it "
                f"does not fit a prefix-sum contiguous GEMM (layout {int(Layout.CONTIGUOUS_PSUM)}) with N={n}, K={k}"
            )
        elif alignment % config.block_m:
            raise ValueError(f"config: block_m {config.block_m} does not divide the groups' alignment {alignment}")
        # Tiles of different groups never share a block (each group starts at a multiple of the tile height),
        # so the tiles of all groups together are at most those of M rows: a grid that covers any prefix sums.
        found = launch.launch_plan(config, config.units(m), device, num_sms)
        _plans[key] = found
    return found


def m_grouped_fp8_gemm_nt_contiguous_psum(a, b, d, psum_m, *, alignment: int = 128, expected_m: int | None = None,
                                          alpha: float | None = None, row_weight=None, swiglu: bool = False,
                                          swiglu_limit: float | None = None, use_ue8m0: bool = False,
                                          stream=None, config: GemmConfig | None = None) -> None:
    """d[r] = A[r] . B[g]^T for the rows r of every group g, the groups' row ranges given by prefix sums.

    Args:
        a: (A, SFA): A float8_e4m3fn [M, K]; SFA float32 [M, ceil(K/128)] (layouts as in fp8_gemm_nt).
        b: (B, SFB): B float8_e4m3fn [G, N, K]; SFB float32 [G, ceil(N/128), ceil(K/128)], contiguous.
        d: bfloat16 [M, N], written in place.
        psum_m: int32 [G] on the GPU, read by the kernel (a captured graph follows new values): psum_m[g] is the
            end (exclusive) of group g's rows. Group g's rows are [start_g, psum_m[g]) with start_0 = 0 and
            start_g = psum_m[g - 1] rounded up to `alignment`. Values are clamped to [start_g, M]; a group
            whose end does not pass its start is empty.
        alignment: the rows the groups' starts are aligned to (DeepGEMM's get_mk_alignment_for_contiguous_layout()),
            a multiple of 64.
        expected_m: the typical rows of a group, if known: the config is chosen for G x expected_m rows instead
            of M (DeepGEMM's expected_m_for_psum_layout). It guides the choice only.
        alpha, row_weight, swiglu, swiglu_limit, use_ue8m0: the fused epilogues, as in fp8_gemm_nt (row_weight
            float32 [M]). Rows in the gaps get FP8 values but no scales.

    Rows in the gaps between groups (and past the last group's end) are not inputs; the gap after a group may be
    overwritten with unspecified values (the last tile of a group stores whole rows of 64), as DeepGEMM's sm_90
    kernel does. Rows of no tile are left as they were.
    """
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    fused_call = wants_fused(d, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0)
    av, sfav, bv, sfbv, pv = views_on_one_device(
        ((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (psum_m, "grouped_layout"))
    )
    dv = None if fused_call else views_on_one_device(((A, "A"), (d, "d")))[1]
    expect_positive_int(alignment, "alignment")
    if expected_m is not None and (isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m <= 0):
        raise ValueError(f"expected_m_for_psum_layout: expected None or a positive int; got {expected_m!r}")
    m, k, groups, n = check_contiguous_operands(av, sfav, bv, sfbv, dv, pv, "grouped_layout")
    fused = None
    if fused_call:
        fused = fused_output(d, b, rows=(m,), n=n, device=av.device, masked=False, alpha=alpha, row_weight=row_weight,
                             swiglu=swiglu, swiglu_limit=swiglu_limit, use_ue8m0=use_ue8m0)
        dv = fused.d
    if tuple(pv.shape) != (groups,):
        raise ValueError(
            f"grouped_layout: with use_psum_layout=True, expected one prefix sum per group, shape ({groups},); got "
            f"{tuple(pv.shape)}"
        )
    expect_psum_alignment(alignment)
    if n == 0 or m == 0:
        return
    if m >= 2**31:
        raise ValueError(f"A: M must be below 2**31; got {m}")
    device = av.device
    sfav, sfa_layout, conversion, launch_stream = scales_for_tma(SFA, sfav, stream, device)
    try:
        heuristic_m = m if expected_m is None else max(1, min(m, expected_m * groups))
        plan = _plan(m, n, k, groups, device, heuristic_m, alignment, config,
                     epilogue=fused.epilogue if fused else None)
        if launch_stream is None:
            launch_stream = resolve_stream(stream, device)
        ops = Operands(a=av.ptr, a_rows=m, lda=av.strides[0], b=bv.ptr, b_rows=groups * n, ldb=bv.strides[1],
                       d=dv.ptr, d_rows=m, ldd=dv.strides[0], sfa=sfav.ptr, sfa_layout=sfa_layout, sfb=sfbv.ptr,
                       m=m, grouped_layout=pv.ptr, num_groups=groups, **(fused.operands() if fused else {}))
        plan.launcher.launch(launch_stream, launch.pack(plan.config, ops))
    finally:
        launch.release(conversion)  # converted scales in capture-owned memory: freed after the kernel
