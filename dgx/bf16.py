"""dgx's BF16 GEMMs, with DeepGEMM's names and semantics: D = A . B^T (+ C) with FP32 accumulation.

- ``bf16_gemm_nt(a, b, d, c=None)``: a [M, K], b [N, K]; ``bf16_gemm_nn`` (b [K, N]), ``bf16_gemm_tn`` (a [K, M],
  b [K, N]) and ``bf16_gemm_tt`` (a [K, M], b [N, K]) take the transposed operands. Either major-ness of each operand
  runs natively (the kernel reads A K- or M-major and B K- or N-major from shared memory): no transposing copy.
- ``m_grouped_bf16_gemm_nt_contiguous`` / ``_nn_contiguous`` (MoE forward: m_indices or prefix sums),
  ``m_grouped_bf16_gemm_nt_masked`` (MoE decode under CUDA graphs), ``k_grouped_bf16_gemm_tn_contiguous`` (MoE
  weight gradients, FP32 D, one launch).

Every input is checked before anything is queued (TypeError / ValueError naming the argument). Launches go on the
caller's stream (torch's current stream by default) through dgx.launch, PDL included (dgx.set_pdl).
"""

from __future__ import annotations

from typing import Sequence

from . import env, launch, runtime
from .bf16_checks import (
    c_view,
    expect_below_limit,
    expect_bf16,
    expect_compiled_dims,
    expect_int32_vector,
    expect_n_multiple_of_8,
    expect_out,
    expect_rows_contiguous,
    expect_stacked,
    flat_rows,
    operand,
    transposed,
)
from .bf16_prepare import copy_into, zero_rows
from .checks import expect_positive_int, expect_shape, views_on_one_device
from .device import get_num_sms
from .kernels.bf16_gemm import Bf16GemmConfig, choose
from .kernels.bf16_gemm_args import Bf16Operands, pack_operands
from .kernels.bf16_gemm_heuristics import CONTIGUOUS_ALIGNMENT, KIND_LAYOUTS
from .streams import resolve_stream
from .tensors import TensorView, as_view, require_cuda
from . import caches

__all__ = [
    "bf16_gemm_nt",
    "bf16_gemm_nn",
    "bf16_gemm_tn",
    "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nn_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
]

_plans: dict[tuple, launch.GemmPlan] = caches.per_process({})
_params: dict[tuple, runtime.ParamPack] = caches.per_process({})
_PARAM_CACHE_LIMIT = 512


def _plan(kind: str, m: int, n: int, k: int, device: int, config: Bf16GemmConfig | None, *, major_a: str,
          major_b: str, out_dtype: str, with_c: bool, groups: int = 1, units_m: int | None = None,
          alignment: int = CONTIGUOUS_ALIGNMENT) -> launch.GemmPlan:
    """The plan (kernel compiled and loaded, persistent grid sized) of a `kind` problem; made once per problem.
    `m` is the heuristic's M; `units_m` the M the grid is sized for when it differs (masked: M_max)."""
    num_sms = get_num_sms(device)
    pingpong = config is None and env.bf16_pingpong()  # the heuristic's choice follows DGX_BF16_PINGPONG
    key = (kind, m, units_m, n, k, groups, major_a, major_b, out_dtype, with_c, alignment, device, num_sms, config,
           pingpong)
    found = _plans.get(key)
    if found is None:
        if config is None:
            config = choose(kind, m, n, k, groups, num_sms, major_a=major_a, major_b=major_b, out_dtype=out_dtype,
                            with_c=with_c, alignment=alignment, pingpong=pingpong)
        else:
            _expect_config_fits(config, kind, n, k, major_a, major_b, out_dtype, with_c, alignment)
        units = config.units(m if units_m is None else units_m)
        if kind in ("m_grouped_masked", "k_grouped"):
            units *= groups  # every block of every group
        found = launch.launch_plan(config, units, device, num_sms)
        _plans[key] = found
    return found


def _expect_config_fits(config: Bf16GemmConfig, kind: str, n: int, k: int, major_a: str, major_b: str,
                        out_dtype: str, with_c: bool, alignment: int) -> None:
    if not isinstance(config, Bf16GemmConfig):
        raise TypeError(f"config: expected a Bf16GemmConfig; got {type(config).__name__}")
    wanted = dict(layout=KIND_LAYOUTS[kind], n=n, k=0 if kind == "k_grouped" else k, major_a=major_a,
                  major_b=major_b, out_dtype=out_dtype, with_c=with_c)
    wrong = {name: (getattr(config, name), value) for name, value in wanted.items() if getattr(config, name) != value}
    if kind in ("m_grouped_contiguous", "m_grouped_contiguous_psum", "m_grouped_masked") and alignment % config.block_m:
        wrong["block_m"] = (config.block_m, f"a divisor of the alignment {alignment}")
    if wrong:
        said = ", ".join(f"{name} {have} (needs {need})" for name, (have, need) in wrong.items())
        raise ValueError(f"config: {config.kernel_name} does not fit this {kind} GEMM: {said}")


def pack(config: Bf16GemmConfig, ops: Bf16Operands) -> runtime.ParamPack:
    """The BF16 GEMM kernel's parameters for `ops`, encoded once per distinct (config, operands) and reused (by the
    einsums too, which run the same kernel)."""
    key = (config, ops)
    packed = _params.get(key)
    if packed is None:
        packed = pack_operands(config, ops)
        if len(_params) >= _PARAM_CACHE_LIMIT:
            _params.clear()
        _params[key] = packed
    return packed


def _launch(plan: launch.GemmPlan, ops: Bf16Operands, stream: int) -> None:
    plan.launcher.launch(stream, pack(plan.config, ops))


def _a_map(a) -> tuple[tuple[int, int], tuple[int]]:
    """(dims, strides) of A's map: K-major [rows, K] as (K, rows); M-major as (M, K)."""
    rows, k = a.view.shape[-2], a.view.shape[-1]
    return ((k, rows), (a.ld,)) if a.major == "k" else ((rows, k), (a.ld,))


# --- dense ------------------------------------------------------------------------------------------------------


def _dense(av: TensorView, bv: TensorView, dv: TensorView, c, stream, config: Bf16GemmConfig | None) -> None:
    """D = A . B^T (+ C) for views already in the nt orientation: A [M, K], B [N, K], D [M, N]."""
    m, k = av.shape
    n = bv.shape[0]
    if bv.shape[1] != k:
        raise ValueError(f"b: expected K = {k} like a; got {bv.shape[1]}")
    expect_n_multiple_of_8(n)
    expect_out(dv, (m, n))
    cv = c_view(c, dv)
    for value, name, what in ((m, "a", "M"), (n, "b", "N"), (k, "a", "K")):
        expect_below_limit(value, name, what)
    if m == 0 or n == 0:
        return
    a = operand(av, "a", "M") if k else None
    b = operand(bv, "b", "N") if k else None
    device = av.device
    launch_stream = resolve_stream(stream, device)
    if cv is not None and cv.ptr != dv.ptr:
        copy_into(dv, cv, launch_stream)  # the kernel reduce-adds into D
    if k == 0:  # no products: D = C (copied above) or 0
        if cv is None:
            zero_rows(dv, 0, m, launch_stream)
        return
    plan = _plan("dense", m, n, k, device, config, major_a=a.major, major_b=b.major, out_dtype=dv.dtype,
                 with_c=cv is not None)
    a_dims, a_strides = _a_map(a)
    if b.major == "k":
        b_dims, b_strides = (k, n), (b.ld,)
    else:
        b_dims, b_strides = (n, k, 1), (b.ld, b.ld * k)
    ops = Bf16Operands(a=av.ptr, a_dims=a_dims, a_strides=a_strides, b=bv.ptr, b_dims=b_dims, b_strides=b_strides,
                       d=dv.ptr, d_dims=(n, m), d_strides=(dv.strides[0] if m > 1 else n,), m=m)
    _launch(plan, ops, launch_stream)


def _dense_views(a, b, d, compiled_dims):
    expect_compiled_dims(compiled_dims)
    av, bv, dv = views_on_one_device(((a, "a"), (b, "b"), (d, "d")))
    expect_bf16(av, "a", 2)
    expect_bf16(bv, "b", 2)
    if dv.ndim != 2:
        raise ValueError(f"d: expected a 2-D tensor [M, N]; got shape {dv.shape}")
    return av, bv, dv


def bf16_gemm_nt(a, b, d, c=None, compiled_dims: str = "nk", *, stream=None,
                 config: Bf16GemmConfig | None = None) -> None:
    """d = a . b^T (+ c), FP32 accumulation.

    Args:
        a: bfloat16 [M, K], K-contiguous (strides (S, 1)) or M-contiguous (strides (1, S)); lines 16-byte aligned.
        b: bfloat16 [N, K], K- or N-contiguous likewise.
        d: bfloat16 or float32 [M, N], rows contiguous and 16-byte aligned, N a multiple of 8; written.
        c: None, or d's dtype and shape: d = c + a . b^T (c may be d itself, to accumulate; another tensor is first
           copied into d on the stream).
        compiled_dims: DeepGEMM's; accepted, unused (N and K are compiled in, M is a run-time value).
        stream: the stream to launch on (default: torch's current stream).
        config: a Bf16GemmConfig to run instead of the heuristic's choice.

    M = 0 or N = 0 does nothing; K = 0 sets d to c (or zeros).
    """
    av, bv, dv = _dense_views(a, b, d, compiled_dims)
    _dense(av, bv, dv, c, stream, config)


def bf16_gemm_nn(a, b, d, c=None, compiled_dims: str = "nk", *, stream=None,
                 config: Bf16GemmConfig | None = None) -> None:
    """d = a . b (+ c): a [M, K], b [K, N] (bf16_gemm_nt with b transposed; either major-ness of each)."""
    av, bv, dv = _dense_views(a, b, d, compiled_dims)
    _dense(av, transposed(bv), dv, c, stream, config)


def bf16_gemm_tn(a, b, d, c=None, compiled_dims: str = "mn", *, stream=None,
                 config: Bf16GemmConfig | None = None) -> None:
    """d = a^T . b (+ c): a [K, M], b [K, N] (bf16_gemm_nt with both transposed)."""
    av, bv, dv = _dense_views(a, b, d, compiled_dims)
    _dense(transposed(av), transposed(bv), dv, c, stream, config)


def bf16_gemm_tt(a, b, d, c=None, compiled_dims: str = "mn", *, stream=None,
                 config: Bf16GemmConfig | None = None) -> None:
    """d = a^T . b^T (+ c): a [K, M], b [N, K] (bf16_gemm_nt with a transposed)."""
    av, bv, dv = _dense_views(a, b, d, compiled_dims)
    _dense(transposed(av), bv, dv, c, stream, config)


# --- M-grouped: contiguous (m_indices or prefix sums) and masked ---------------------------------------------------


def _grouped_b(bv: TensorView, k: int) -> tuple[int, int, str, tuple[int, ...], tuple[int, ...]]:
    """(groups, N, major, map dims, map strides) of a grouped B [G, N, K] (K- or N-contiguous)."""
    expect_bf16(bv, "b", 3)
    groups, n, kb = bv.shape
    if kb != k:
        raise ValueError(f"b: expected K = {k} like a; got shape {bv.shape}")
    if groups <= 0:
        raise ValueError(f"b: expected at least one group; got shape {bv.shape}")
    if operand(bv, "b", "N").major == "k":
        expect_stacked(bv, "b")  # read as one [G x N, K] map
        return groups, n, "k", (k, groups * n), (operand(flat_rows(bv), "b", "N").ld,)
    b = operand(bv, "b", "N")
    group_stride = bv.strides[0] if groups > 1 else b.ld * k
    if group_stride < 0 or (group_stride * 2) % 16:
        raise ValueError(f"b: TMA needs a group stride that is a multiple of 16 bytes; got {bv.strides[0]} elements")
    return groups, n, "mn", (n, k, groups), (b.ld, group_stride)


def _contiguous_views(a, b, d, grouped_layout, compiled_dims):
    expect_compiled_dims(compiled_dims)
    av, bv, dv, lv = views_on_one_device(((a, "a"), (b, "b"), (d, "d"), (grouped_layout, "grouped_layout")))
    expect_bf16(av, "a", 2)
    return av, bv, dv, lv


def _contiguous(av: TensorView, bv: TensorView, dv: TensorView, lv: TensorView, use_psum_layout: bool,
                expected_m: int | None, alignment: int | None, stream, config: Bf16GemmConfig | None) -> None:
    m, k = av.shape
    a = operand(av, "a", "M")
    if a.major != "k" and m > 1:
        raise ValueError(f"a: the M-grouped GEMMs take a K-major a (strides (S, 1)); got strides {av.strides}")
    groups, n, major_b, b_dims, b_strides = _grouped_b(bv, k)
    expect_out(dv, (m, n), ("bfloat16",))
    expect_n_multiple_of_8(n)
    alignment = CONTIGUOUS_ALIGNMENT if alignment is None else alignment
    expect_positive_int(alignment, "alignment")
    if not isinstance(use_psum_layout, bool):
        raise TypeError(f"use_psum_layout: expected a bool; got {type(use_psum_layout).__name__}")
    if use_psum_layout:
        expect_int32_vector(lv, "grouped_layout", groups)
        if alignment % 64:
            raise ValueError(f"alignment: the prefix-sum layout needs groups aligned to a multiple of 64 rows; got "
                             f"{alignment}")
        if expected_m is not None and (isinstance(expected_m, bool) or not isinstance(expected_m, int)
                                       or expected_m <= 0):
            raise ValueError(f"expected_m_for_psum_layout: expected None or a positive int; got {expected_m!r}")
    else:
        if expected_m is not None:
            raise ValueError("expected_m_for_psum_layout: only for use_psum_layout=True")
        expect_int32_vector(lv, "grouped_layout", m)
        if m % CONTIGUOUS_ALIGNMENT:
            raise ValueError(f"a: M_sum must be a multiple of the contiguous-layout alignment {CONTIGUOUS_ALIGNMENT} "
                             f"(every group's segment padded to it); got M_sum = {m}")
    for value, name, what in ((m, "a", "M"), (groups * n, "b", "groups x N"), (k, "a", "K")):
        expect_below_limit(value, name, what)
    if k == 0:
        raise ValueError("a: K must be positive for the M-grouped GEMMs; got K = 0")
    if m == 0 or n == 0:
        return
    device = av.device
    launch_stream = resolve_stream(stream, device)
    if use_psum_layout:
        heuristic_m = m if expected_m is None else max(1, min(m, expected_m * groups))
        plan = _plan("m_grouped_contiguous_psum", heuristic_m, n, k, device, config, major_a="k", major_b=major_b,
                     out_dtype="bfloat16", with_c=False, groups=groups, units_m=m, alignment=alignment)
    else:
        plan = _plan("m_grouped_contiguous", m, n, k, device, config, major_a="k", major_b=major_b,
                     out_dtype="bfloat16", with_c=False, groups=groups)
    ops = Bf16Operands(a=av.ptr, a_dims=(k, m), a_strides=(a.ld,), b=bv.ptr, b_dims=b_dims, b_strides=b_strides,
                       d=dv.ptr, d_dims=(n, m), d_strides=(dv.strides[0] if m > 1 else n,), m=m,
                       grouped_layout=lv.ptr, groups=groups)
    _launch(plan, ops, launch_stream)


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None, *, alignment: int | None = None,
                                      stream=None, config: Bf16GemmConfig | None = None) -> None:
    """d[r] = a[r] . b[g(r)]^T for every row r (MoE forward / prefill), one launch for every group.

    Args:
        a: bfloat16 [M_sum, K], K-contiguous: each group's rows one segment after another.
        b: bfloat16 [G, N, K], K-contiguous or N-contiguous (then lines along K are 16-byte aligned).
        d: bfloat16 [M_sum, N], written.
        grouped_layout: int32 on the GPU, read by the kernel. Without use_psum_layout: m_indices [M_sum], each row's
            group, -1 for padding; every segment padded to get_mk_alignment_for_contiguous_layout() (128) rows, so
            M_sum is a multiple of it. A block whose first index is -1 or outside [0, G) is skipped: nothing loaded,
            its rows of d untouched. With use_psum_layout: [G], the end (exclusive) of each group's rows; group g
            starts at the previous end rounded up to `alignment` (default 128, a multiple of 64); rows in the gaps
            are not inputs and their rows of d unspecified.
        compiled_dims, ensure_zero_padding: DeepGEMM's; accepted, unused on sm_90.
        expected_m_for_psum_layout: rows per group, if known (prefix sums only): guides the config choice.
        alignment: the prefix-sum layout's group alignment (DeepGEMM's get_mk_alignment_for_contiguous_layout()).
    """
    del ensure_zero_padding
    av, bv, dv, lv = _contiguous_views(a, b, d, grouped_layout, compiled_dims)
    _contiguous(av, bv, dv, lv, use_psum_layout, expected_m_for_psum_layout, alignment, stream, config)


def m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True, *,
                                      alignment: int | None = None, stream=None,
                                      config: Bf16GemmConfig | None = None) -> None:
    """d[r] = a[r] . b[g(r)] for every row r: b [G, K, N] (m_grouped_bf16_gemm_nt_contiguous with b's last two
    dimensions transposed; either major-ness)."""
    del ensure_zero_padding
    av, bv, dv, lv = _contiguous_views(a, b, d, grouped_layout, compiled_dims)
    expect_bf16(bv, "b", 3)
    _contiguous(av, transposed(bv, (1, 2)), dv, lv, use_psum_layout, None, alignment, stream, config)


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m: int, compiled_dims: str = "nk", *, stream=None,
                                  config: Bf16GemmConfig | None = None) -> None:
    """d[g, :masked_m[g]] = a[g, :masked_m[g]] . b[g]^T for every group g (MoE decode, CUDA-graph friendly).

    Args:
        a: bfloat16 [G, M_max, K], K-contiguous, groups one after another.
        b: bfloat16 [G, N, K], K-contiguous, groups one after another.
        d: bfloat16 [G, M_max, N], groups one after another; written.
        masked_m: int32 [G] on the GPU, read by the kernel at run time (a captured graph follows new counts): the
            valid rows of each group, clamped to [0, M_max]. Rows at or past it are neither used nor written.
        expected_m: a host int, the typical rows per group: it only guides the config choice.
    """
    expect_compiled_dims(compiled_dims)
    av, bv, dv, mv = views_on_one_device(((a, "a"), (b, "b"), (d, "d"), (masked_m, "masked_m")))
    expect_positive_int(expected_m, "expected_m")
    expect_bf16(av, "a", 3)
    groups, m_max, k = av.shape
    if operand(av, "a", "M").major != "k":
        raise ValueError(f"a: the masked GEMM takes a K-major a (strides (.., S, 1)); got strides {av.strides}")
    groups_b, n, major_b, b_dims, b_strides = _grouped_b(bv, k)
    if major_b != "k":
        raise ValueError(f"b: the masked GEMM takes a K-major b (strides (.., S, 1)); got strides {bv.strides}")
    if groups_b != groups:
        raise ValueError(f"b: expected {groups} groups like a; got shape {bv.shape}")
    expect_stacked(av, "a")
    a = operand(flat_rows(av), "a", "M")  # read as one [G x M_max, K] map
    expect_out(dv, (groups, m_max, n), ("bfloat16",))
    expect_stacked(dv, "d")
    d_rows = flat_rows(dv)  # written as one [G x M_max, N] map
    expect_n_multiple_of_8(n)
    expect_int32_vector(mv, "masked_m", groups)
    for value, name, what in ((groups * m_max, "a", "groups x M_max"), (groups * n, "b", "groups x N"),
                              (k, "a", "K")):
        expect_below_limit(value, name, what)
    if k == 0:
        raise ValueError("a: K must be positive for the masked GEMM; got K = 0")
    if m_max == 0 or n == 0:
        return
    device = av.device
    launch_stream = resolve_stream(stream, device)
    plan = _plan("m_grouped_masked", min(expected_m, m_max), n, k, device, config, major_a="k", major_b="k",
                 out_dtype="bfloat16", with_c=False, groups=groups, units_m=m_max)
    rows = groups * m_max
    ops = Bf16Operands(a=av.ptr, a_dims=(k, rows), a_strides=(a.ld,), b=bv.ptr, b_dims=b_dims, b_strides=b_strides,
                       d=dv.ptr, d_dims=(n, rows), d_strides=(d_rows.strides[0],), m=m_max,
                       grouped_layout=mv.ptr, groups=groups)
    _launch(plan, ops, launch_stream)


# --- K-grouped ---------------------------------------------------------------------------------------------------


def k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks: Sequence[int], ks_tensor=None, c=None, compiled_dims: str = "mn",
                                      use_psum_layout: bool = False, *, stream=None,
                                      config: Bf16GemmConfig | None = None) -> None:
    """d[g] = c[g] + a_g^T . b_g for every group g, one launch (MoE weight gradients).

    Args:
        a: bfloat16 [sum(ks), M], rows contiguous: group g's a_g [k_g, M] are rows [k_0 + ... + k_{g-1}, ...).
        b: bfloat16 [sum(ks), N], likewise.
        d: float32 [G, M, N], groups one after another, rows contiguous; written.
        ks: the K of each group (host ints, each a multiple of 128; 0 for an empty group, whose d[g] becomes c[g],
            or zeros without c).
        ks_tensor: the same values as int32 [G] on the GPU (the kernel reads them); made from `ks` (needs torch,
            kept for reuse) when None.
        c: None, or float32 [G, M, N] (may be d itself, to accumulate; another tensor is first copied into d).
        compiled_dims: DeepGEMM's; accepted, unused. use_psum_layout: must be False (sm_90 takes the groups' K).
    """
    expect_compiled_dims(compiled_dims)
    if use_psum_layout is not False:
        raise ValueError("use_psum_layout: the K-grouped GEMM takes the groups' K (ks) on sm_90; got "
                         f"{use_psum_layout!r}")
    av, bv, dv = views_on_one_device(((a, "a"), (b, "b"), (d, "d")))
    if isinstance(ks, (str, bytes)):
        raise TypeError(f"ks: expected a sequence of ints; got {type(ks).__name__}")
    try:
        ks = tuple(int(x) for x in ks)
    except (TypeError, ValueError):
        raise TypeError(f"ks: expected a sequence of ints; got {type(ks).__name__}") from None
    groups = len(ks)
    if groups == 0:
        raise ValueError("ks: expected at least one group")
    for g, kg in enumerate(ks):
        if kg < 0 or kg % 128:
            raise ValueError(f"ks[{g}]: expected a non-negative multiple of 128; got {kg}")
    expect_bf16(av, "a", 2)
    expect_bf16(bv, "b", 2)
    if dv.ndim != 3:
        raise ValueError(f"d: expected a 3-D tensor [G, M, N]; got shape {dv.shape}")
    if dv.shape[0] != groups:
        raise ValueError(f"d: expected {groups} groups like ks; got shape {dv.shape}")
    _, m, n = dv.shape
    k_total = sum(ks)
    expect_shape(av, "a", (k_total, m))
    expect_shape(bv, "b", (k_total, n))
    expect_rows_contiguous(av, "a")
    expect_rows_contiguous(bv, "b")
    expect_out(dv, (groups, m, n), ("float32",))
    expect_stacked(dv, "d")
    expect_n_multiple_of_8(n)
    cv = c_view(c, dv)
    if cv is not None:
        expect_stacked(cv, "c")
    for value, name, what in ((m, "a", "M"), (n, "b", "N"), (k_total, "a", "the sum of K"), (groups * m, "d",
                                                                                               "groups x M")):
        expect_below_limit(value, name, what)
    device = av.device
    ks_view = None
    if ks_tensor is not None:
        ks_view = as_view(ks_tensor, "ks_tensor")
        require_cuda(ks_view, "ks_tensor", device)
        expect_int32_vector(ks_view, "ks_tensor", groups)
    if m == 0 or n == 0:
        return
    launch_stream = resolve_stream(stream, device)
    if cv is not None and cv.ptr != dv.ptr:
        copy_into(dv, cv, launch_stream)
    if cv is None:  # groups with no K get no tile: their d[g] is zero
        for g, kg in enumerate(ks):
            if kg == 0:
                zero_rows(dv, g * m, m, launch_stream)
    if k_total == 0:
        return
    if ks_view is None:
        from .wgrad import _ks_on_device

        ks_view = as_view(_ks_on_device(ks, device), "ks_tensor")
    row_stride = flat_rows(dv).strides[0]  # stacked groups: one pitch between all rows of all groups
    busy = [kg for kg in ks if kg]
    typical_k = -(-(k_total // len(busy)) // 128) * 128
    plan = _plan("k_grouped", m, n, typical_k, device, config, major_a="mn", major_b="mn", out_dtype="float32",
                 with_c=cv is not None, groups=groups)
    ops = Bf16Operands(a=av.ptr, a_dims=(m, k_total), a_strides=(av.strides[0] if k_total > 1 else m,), b=bv.ptr,
                       b_dims=(n, k_total, 1), b_strides=(bv.strides[0] if k_total > 1 else n, k_total * n),
                       d=dv.ptr, d_dims=(n, m, groups), d_strides=(row_stride, row_stride * m), m=m,
                       grouped_layout=ks_view.ptr, groups=groups)
    _launch(plan, ops, launch_stream)

