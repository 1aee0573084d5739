"""DeepGEMM's FP8 GEMMs on dgx's sm_90 kernels, with DeepGEMM's names, parameters and defaults.

- ``fp8_gemm_nt`` (and ``nn``/``tn``/``tt``), ``m_grouped_fp8_gemm_nt_contiguous`` (prefix-sum layout included),
  ``m_grouped_fp8_gemm_nn_contiguous``, ``m_grouped_fp8_gemm_nt_masked``, ``k_grouped_fp8_gemm_nt_contiguous``; the
  ``fp8_fp4_*`` names are the same functions (FP8 operands only: FP4 operands are sm_100 only and raise
  Sm100OnlyError), and ``fp8_m_grouped_gemm_nt_masked`` is the older masked name.
- ``transform_sf_into_required_layout``: scales in the layout the sm_90 kernels read.

Scale factors: FP32 scales, UE8M0-valued ones included, are read as they are (a row-major SFA is copied into the
TMA-aligned MN-major layout on the GPU, as DeepGEMM does; an MN-major per-block SFB is made contiguous). Packed
UE8M0 scales (int32, four exponent bytes each, as get_mn_major_tma_aligned_packed_ue8m0_tensor or
per_token_cast_to_fp8(..., use_packed_ue8m0=True) make them) are unpacked on the GPU into FP32 by one small dgx
kernel before the GEMM (DeepGEMM itself refuses them on sm_90). The K-grouped GEMM takes FP32 scales only.

Accepted but ignored on sm_90 (documented per function): ``compiled_dims`` (dgx always compiles N and K into the
kernel and takes M at run time), ``disable_ue8m0_cast`` (there is no UE8M0 cast on sm_90: FP32 scales are used as
given), ``ensure_zero_padding`` (sm_100 only in DeepGEMM). Every function raises TypeError/ValueError naming the
argument, what was expected and what came, before anything is launched.
"""

from __future__ import annotations

import inspect as _inspect

import torch as _torch

from ..errors import Sm100OnlyError
from ..gemm import fp8_gemm_nt as _dgx_dense
from ..grouped import m_grouped_fp8_gemm_nt_contiguous as _dgx_contiguous
from ..grouped import m_grouped_fp8_gemm_nt_masked as _dgx_masked
from ..grouped_psum import m_grouped_fp8_gemm_nt_contiguous_psum as _dgx_contiguous_psum
from ..heuristics import CONTIGUOUS_ALIGNMENT as _DGX_ALIGNMENT
from ..intmath import ceil_div as _ceil_div
from ..layout import get_mn_major_tma_aligned_tensor
from ..ue8m0 import unpack_scales as _unpack_scales
from ..wgrad import k_grouped_fp8_gemm_nt_contiguous as _dgx_k_grouped
from .settings import _settings
from .settings import expect_int as _expect_int

__all__ = [
    "fp8_gemm_nt",
    "fp8_gemm_nn",
    "fp8_gemm_tn",
    "fp8_gemm_tt",
    "fp8_fp4_gemm_nt",
    "fp8_fp4_gemm_nn",
    "fp8_fp4_gemm_tn",
    "fp8_fp4_gemm_tt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nn_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "transform_sf_into_required_layout",
]

_BF16_RECIPE = (1, 128, 128)  # A per row per 128 of K, B per 128x128 block: BF16 d
_WGRAD_RECIPE = (1, 1, 128)  # both per row per 128 of K: the FP32 weight-gradient form


# --- argument checks shared by the GEMMs ------------------------------------------------------------------------


def _check_ignored(compiled_dims, disable_ue8m0_cast) -> None:
    if not isinstance(compiled_dims, str):
        raise TypeError(f"compiled_dims: expected a str such as 'nk'; got {type(compiled_dims).__name__}")
    if not isinstance(disable_ue8m0_cast, (bool, int)):
        raise TypeError(f"disable_ue8m0_cast: expected a bool; got {type(disable_ue8m0_cast).__name__}")


def _as_tuple(value, name: str, size: int) -> tuple:
    if not isinstance(value, (tuple, list)) or len(value) != size or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    ):
        raise TypeError(f"{name}: expected a tuple of {size} ints; got {value!r}")
    return tuple(value)


def _recipe_form(recipe, recipe_a, recipe_b, weight_gradient_allowed: bool = True) -> str | None:
    """'bf16' for DeepGEMM's (1, 128, 128) recipe, 'wgrad' for (1, 1, 128), None when no recipe is given."""
    wanted = "(1, 128, 128) (BF16 d; A scaled per row, B per 128x128 block, per 128 of K)"
    if weight_gradient_allowed:
        wanted += " or (1, 1, 128) (the FP32 weight-gradient form: A and B scaled per row, per 128 of K)"
    if recipe_a is not None or recipe_b is not None:
        if recipe is not None:
            raise ValueError(f"recipe: give either recipe or recipe_a with recipe_b, not both; got recipe={recipe!r}, "
                             f"recipe_a={recipe_a!r}, recipe_b={recipe_b!r}")
        if recipe_a is None or recipe_b is None:
            raise ValueError(f"recipe_a, recipe_b: expected both or neither; got recipe_a={recipe_a!r}, "
                             f"recipe_b={recipe_b!r}")
        if _as_tuple(recipe_a, "recipe_a", 2) != (1, 128):
            raise ValueError(f"recipe_a: expected (1, 128) on sm_90 (A scaled per row per 128 of K); got {recipe_a!r}")
        rb = _as_tuple(recipe_b, "recipe_b", 2)
        if rb == (128, 128):
            return "bf16"
        if rb == (1, 128) and weight_gradient_allowed:
            return "wgrad"
        also = " or (1, 128) (the FP32 weight-gradient form)" if weight_gradient_allowed else ""
        raise ValueError(f"recipe_b: expected (128, 128) (B per 128x128 block){also} on sm_90; got {recipe_b!r}")
    if recipe is None:
        return None
    r = _as_tuple(recipe, "recipe", 3)
    if r == _BF16_RECIPE:
        return "bf16"
    if r == _WGRAD_RECIPE and weight_gradient_allowed:
        return "wgrad"
    raise ValueError(f"recipe: expected {wanted} on sm_90; got {recipe!r}")


_FP4_DTYPES = tuple(getattr(_torch, n) for n in ("int8", "uint8", "float4_e2m1fn_x2") if hasattr(_torch, n))


def _refuse_fp4(fn: str, a, b, recipe, recipe_a, recipe_b) -> None:
    """FP4 operands (two e2m1 values a byte, as per_token_cast_to_fp4 packs them, scaled per 32 of K) are sm_100
    only: an operand stored as int8/uint8/float4, or a recipe with 32 along K, raises Sm100OnlyError naming it."""
    for name, pair in (("a", a), ("b", b)):
        t = pair[0] if isinstance(pair, (tuple, list)) and pair else None
        if isinstance(t, _torch.Tensor) and t.dtype in _FP4_DTYPES:
            raise Sm100OnlyError(f"{fn}: {name} is {t.dtype}, packed FP4 operands; FP4 operands are sm_100 only "
                                 f"(DeepGEMM too), dgx runs FP8 (float8_e4m3fn) operands on sm_90")
    for name, r in (("recipe", recipe), ("recipe_a", recipe_a), ("recipe_b", recipe_b)):
        if isinstance(r, (tuple, list)) and r and r[-1] == 32:
            raise Sm100OnlyError(f"{fn}: {name}={tuple(r)!r} scales per 32 of K (the FP4 recipes); those are sm_100 "
                                 f"only (DeepGEMM too), sm_90 scales per 128 of K")


def _pair(x, name: str):
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise TypeError(f"{name}: expected a (tensor, scales) pair; got {type(x).__name__}")
    return x


def _transposed(pair, dims: tuple[int, int]):
    """The pair with its tensor and scales transposed along `dims` (views; DeepGEMM's nn/tn/tt forms)."""
    t, sf = pair
    return (t.transpose(*dims), sf.transpose(*dims) if isinstance(sf, _torch.Tensor) else sf)


def _expect_k_major(fn: str, operand: str, t, given_as: str | None = None) -> None:
    """The operand (after the transposition `fn` applies) must have stride 1 along K: dgx's sm_90 kernels, like
    DeepGEMM's, read FP8 operands K-major only."""
    if not isinstance(t, _torch.Tensor) or t.dim() < 2:
        return  # dgx's own checks name what is wrong
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        if given_as:
            given = t.transpose(-1, -2)
            raise ValueError(
                f"{operand}: {fn} takes {operand} as {given_as} and reads its transpose, which sm_90 needs K-major "
                f"(stride 1 along K): {given_as} stored column-major; this one is row-major (shape "
                f"{tuple(given.shape)}, strides {tuple(given.stride())}), so its transpose is MN-major. Pass the "
                f"transposed pair ({operand}[0].mT.contiguous(), {operand}[1].mT) to the _nt form instead"
            )
        raise ValueError(
            f"{operand}: {fn} needs {operand} K-major on sm_90 (stride 1 along K, the last dimension); got shape "
            f"{tuple(t.shape)} with strides {tuple(t.stride())}, which is MN-major. Pass ({operand}[0].contiguous(), "
            f"{operand}[1]) instead"
        )


def _fp32_scales(sf, name: str, rows: int, kblocks: int, per_block: bool, rows_hint: str):
    """Scales the dgx kernels read: FP32 as given (a per-block SFB made contiguous); packed UE8M0 (int32) unpacked
    on the GPU (per-row scales into the TMA-aligned MN-major layout, per-block ones row-major)."""
    if not isinstance(sf, _torch.Tensor):
        return sf
    if sf.dtype == _torch.int32:
        words = _ceil_div(kblocks, 4)
        if sf.dim() < 2 or sf.shape[-2] != rows or sf.shape[-1] != words:
            raise ValueError(
                f"{name}: packed UE8M0 scales (int32, four per int) expected [..., {rows_hint} = {rows}, ceil(K/512) = "
                f"{words}]; got shape {tuple(sf.shape)}"
            )
        return _unpack_scales(sf, kblocks, row_major=per_block, name=name)
    if per_block and sf.dtype == _torch.float32 and not sf.is_contiguous():
        return sf.contiguous()  # DeepGEMM also takes an MN-major SFB; dgx reads a row-major one
    return sf


def _k_of(t) -> int | None:
    return int(t.shape[-1]) if isinstance(t, _torch.Tensor) and t.dim() >= 1 else None


# --- dense GEMMs --------------------------------------------------------------------------------------------------


def _dense(fn: str, a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
           transpose_a: bool, transpose_b: bool) -> None:
    _check_ignored(compiled_dims, disable_ue8m0_cast)
    _refuse_fp4(fn, a, b, recipe, recipe_a, recipe_b)
    form = _recipe_form(recipe, recipe_a, recipe_b)
    a, b = _pair(a, "a"), _pair(b, "b")
    if transpose_a:
        a = _transposed(a, (0, 1))
    if transpose_b:
        b = _transposed(b, (0, 1))
    _expect_k_major(fn, "a", a[0], "[K, M]" if transpose_a else None)
    _expect_k_major(fn, "b", b[0], "[K, N]" if transpose_b else None)
    d_dtype = getattr(d, "dtype", None)
    if form == "bf16":
        if d_dtype == _torch.float32:
            raise ValueError("d: recipe (1, 128, 128) writes a bfloat16 d; got a float32 d (the FP32 weight-gradient "
                             "form is recipe (1, 1, 128))")
        if c is not None:
            raise ValueError("c: recipe (1, 128, 128) computes d = a.b^T into a bfloat16 d, without c on sm_90 "
                             "(accumulation is the FP32 weight-gradient form, recipe (1, 1, 128))")
    elif form == "wgrad" and d_dtype is not None and d_dtype != _torch.float32:
        raise ValueError(f"d: recipe (1, 1, 128), the weight-gradient form, writes a float32 d; got {d_dtype}")
    k = _k_of(a[0])
    if k == 0 and isinstance(d, _torch.Tensor):  # DeepGEMM: nothing to multiply, d = c (or 0)
        if c is None:
            d.zero_()
        elif c.data_ptr() != d.data_ptr():
            d.copy_(c)
        return
    per_row_b = form == "wgrad" or (form is None and d_dtype == _torch.float32)
    if k is not None and isinstance(a[0], _torch.Tensor) and isinstance(b[0], _torch.Tensor):
        kb = _ceil_div(k, 128)
        m, n = int(a[0].shape[0]), int(b[0].shape[0])
        sfa = _fp32_scales(a[1], "SFA", m, kb, False, "M")
        sfb = (_fp32_scales(b[1], "SFB", n, kb, False, "N") if per_row_b
               else _fp32_scales(b[1], "SFB", _ceil_div(n, 128), kb, True, "ceil(N/128)"))
        if sfa is not a[1]:
            a = (a[0], sfa)
        if sfb is not b[1]:
            b = (b[0], sfb)
    _dgx_dense(a if type(a) is tuple else tuple(a), b if type(b) is tuple else tuple(b), d, c)


def fp8_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
                disable_ue8m0_cast=False) -> None:
    """d = a . b^T (+ c) for FP8 a = (A [M, K], SFA) and b = (B [N, K], SFB), both K-major.

    Recipes (sm_90): (1, 128, 128) (or recipe_a=(1, 128), recipe_b=(128, 128)): SFA per row per 128 of K
    ([M, ceil(K/128)]), SFB per 128x128 block ([ceil(N/128), ceil(K/128)]), bfloat16 d, no c. (1, 1, 128) (or
    recipe_a=(1, 128), recipe_b=(1, 128)): the weight-gradient form, SFB per row ([N, ceil(K/128)]), float32 d =
    c + a . b^T (c may be d itself, or None: then d = a . b^T, which DeepGEMM does not allow). No recipe: decided by
    d's dtype (bfloat16: the first, float32: the second). Any other recipe raises ValueError naming it.

    Scales: FP32 (UE8M0-valued ones included) or packed UE8M0 int32 (unpacked on the GPU first), see the module.
    K = 0 sets d = c (or 0), as DeepGEMM. `compiled_dims` and `disable_ue8m0_cast` are accepted and ignored on
    sm_90 (see the module)."""
    _dense("fp8_gemm_nt", a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, False, False)


def fp8_gemm_nn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
                disable_ue8m0_cast=False) -> None:
    """fp8_gemm_nt with b = (B [K, N], SFB [ceil(K/128), ...]) given transposed. Runs when that B is stored
    column-major (its transpose K-major); otherwise raises ValueError naming b (sm_90 reads B K-major only)."""
    _dense("fp8_gemm_nn", a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, False, True)


def fp8_gemm_tn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="mn",
                disable_ue8m0_cast=False) -> None:
    """fp8_gemm_nt with both a = (A [K, M], SFA [ceil(K/128), M]) and b = (B [K, N], ...) given transposed. Runs
    when both are stored column-major (their transposes K-major); otherwise raises ValueError naming the operand."""
    _dense("fp8_gemm_tn", a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, True, True)


def fp8_gemm_tt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="mn",
                disable_ue8m0_cast=False) -> None:
    """fp8_gemm_nt with a = (A [K, M], SFA [ceil(K/128), M]) given transposed. Runs when that A is stored
    column-major (its transpose K-major); otherwise raises ValueError naming a."""
    _dense("fp8_gemm_tt", a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, True, False)


# --- M-grouped GEMMs ----------------------------------------------------------------------------------------------


def _grouped_scales(a, b, name_rows_a: str):
    """(a, b) with packed scales unpacked and an MN-major per-block SFB made contiguous (3-D B [G, N, K])."""
    if not (isinstance(a[0], _torch.Tensor) and isinstance(b[0], _torch.Tensor)) or b[0].dim() != 3:
        return a, b
    k = int(a[0].shape[-1])
    kb = _ceil_div(k, 128)
    m, n = int(a[0].shape[-2]), int(b[0].shape[-2])
    sfa = _fp32_scales(a[1], "SFA", m, kb, False, name_rows_a)
    sfb = _fp32_scales(b[1], "SFB", _ceil_div(n, 128), kb, True, "ceil(N/128)")
    return (a if sfa is a[1] else (a[0], sfa)), (b if sfb is b[1] else (b[0], sfb))


def _contiguous(fn: str, a, b, d, grouped_layout, recipe, compiled_dims, disable_ue8m0_cast, use_psum_layout,
                expected_m_for_psum_layout, m_indices, recipe_a, recipe_b, ensure_zero_padding, transpose_b: bool):
    if grouped_layout is _REQUIRED:
        if m_indices is None:
            raise TypeError(f"{fn}() missing the argument grouped_layout (or the older keyword m_indices)")
        grouped_layout = m_indices
    elif m_indices is not None:
        raise TypeError(f"{fn}(): got both grouped_layout and m_indices (the older name of grouped_layout)")
    _check_ignored(compiled_dims, disable_ue8m0_cast)
    if not isinstance(use_psum_layout, (bool, int)):
        raise TypeError(f"use_psum_layout: expected a bool; got {type(use_psum_layout).__name__}")
    if not isinstance(ensure_zero_padding, (bool, int)):
        raise TypeError(f"ensure_zero_padding: expected a bool; got {type(ensure_zero_padding).__name__}")
    if expected_m_for_psum_layout is not None:
        if not use_psum_layout:
            raise ValueError(f"expected_m_for_psum_layout: only with use_psum_layout=True; got "
                             f"{expected_m_for_psum_layout!r} with use_psum_layout=False")
        _expect_int(expected_m_for_psum_layout, "expected_m_for_psum_layout", 1)
    _refuse_fp4(fn, a, b, recipe, recipe_a, recipe_b)
    _recipe_form(recipe, recipe_a, recipe_b, weight_gradient_allowed=False)
    a, b = _pair(a, "a"), _pair(b, "b")
    if transpose_b:
        b = _transposed(b, (1, 2))
    _expect_k_major(fn, "a", a[0])
    _expect_k_major(fn, "b", b[0], "[G, K, N]" if transpose_b else None)
    alignment = _settings["mk_alignment"]
    if isinstance(grouped_layout, _torch.Tensor) and grouped_layout.dim() == 1 and isinstance(b[0], _torch.Tensor):
        groups, rows = int(b[0].shape[0]), int(grouped_layout.shape[0])
        if use_psum_layout and isinstance(a[0], _torch.Tensor) and rows == a[0].shape[0] and rows != groups:
            raise ValueError(f"grouped_layout: use_psum_layout=True takes one prefix sum per group, shape ({groups},); "
                             f"got one value per row, shape ({rows},) (that is the m_indices layout)")
        if not use_psum_layout and rows == groups and isinstance(a[0], _torch.Tensor) and rows != a[0].shape[0]:
            raise ValueError(f"grouped_layout: the m_indices layout (use_psum_layout=False) takes one group index per "
                             f"row of A, shape ({int(a[0].shape[0])},); got shape ({rows},) (one per group: pass "
                             f"use_psum_layout=True for prefix sums)")
    if not use_psum_layout and alignment % _DGX_ALIGNMENT:
        raise ValueError(
            f"{fn}: dgx's m_indices layout needs every group's rows padded to a multiple of {_DGX_ALIGNMENT}; "
            f"get_mk_alignment_for_contiguous_layout() is {alignment} (use_psum_layout=True takes multiples of 64)"
        )
    if use_psum_layout and alignment % 64:
        raise ValueError(
            f"{fn}: the prefix-sum layout needs the groups aligned to a multiple of 64 rows; "
            f"get_mk_alignment_for_contiguous_layout() is {alignment}"
        )
    a, b = _grouped_scales(a, b, "M")
    a, b = tuple(a), tuple(b)
    if use_psum_layout:
        _dgx_contiguous_psum(a, b, d, grouped_layout, alignment=alignment, expected_m=expected_m_for_psum_layout)
    else:
        _dgx_contiguous(a, b, d, grouped_layout)


class _Required:
    """The default of a parameter that is required but has an older keyword name (shown as required)."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED = _Required()


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, grouped_layout=_REQUIRED, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                     ensure_zero_padding=True, expected_m_for_psum_layout=None, *,
                                     m_indices=None) -> None:
    """MoE GEMM over groups of rows stored one after another: d[r] = A[r] . B[g(r)]^T.

    a = (A [M, K], SFA [M, ceil(K/128)]), b = (B [G, N, K], SFB [G, ceil(N/128), ceil(K/128)]), d bfloat16 [M, N].
    grouped_layout (older keyword: m_indices), int32 on the GPU:
    - use_psum_layout=False: one group index per row, shape [M], -1 for padding rows; every group's rows padded
      to a multiple of 128 (dgx.m_grouped_fp8_gemm_nt_contiguous).
    - use_psum_layout=True (DeepGEMM's prefix-sum layout): one int per group, shape [G]: grouped_layout[g] is the
      end (exclusive) of group g's rows, which start at grouped_layout[g - 1] rounded up to
      get_mk_alignment_for_contiguous_layout() (0 for g = 0). The kernel's scheduler finds each tile's group from
      the sums on the GPU (CUDA-graph friendly). Rows in the gaps are not inputs and their d rows are unspecified.
      expected_m_for_psum_layout (rows per group, if known) guides the config choice only.
    recipe (or recipe_a/recipe_b): None or (1, 128, 128) only; anything else raises ValueError naming it.
    Accepted and ignored on sm_90: compiled_dims, disable_ue8m0_cast, ensure_zero_padding (DeepGEMM zeroes the gap
    rows of d on sm_100 only)."""
    _contiguous("m_grouped_fp8_gemm_nt_contiguous", a, b, d, grouped_layout, recipe, compiled_dims, disable_ue8m0_cast,
                use_psum_layout, expected_m_for_psum_layout, m_indices, recipe_a, recipe_b, ensure_zero_padding, False)


def m_grouped_fp8_gemm_nn_contiguous(a, b, d, grouped_layout=_REQUIRED, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                     ensure_zero_padding=True, *, m_indices=None) -> None:
    """m_grouped_fp8_gemm_nt_contiguous with b = (B [G, K, N], SFB [G, ceil(K/128), ceil(N/128)]) given transposed.
    Runs when that B is stored so that its transpose is K-major; otherwise raises ValueError naming b (sm_90 reads
    B K-major only)."""
    _contiguous("m_grouped_fp8_gemm_nn_contiguous", a, b, d, grouped_layout, recipe, compiled_dims, disable_ue8m0_cast,
                use_psum_layout, None, m_indices, recipe_a, recipe_b, ensure_zero_padding, True)


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                 compiled_dims="nk", disable_ue8m0_cast=False) -> None:
    """MoE decode GEMM: d[g, :masked_m[g]] = A[g, :masked_m[g]] . B[g]^T (dgx.m_grouped_fp8_gemm_nt_masked).

    a = (A [G, M_max, K], SFA [G, M_max, ceil(K/128)]), b = (B [G, N, K], SFB [G, ceil(N/128), ceil(K/128)]),
    d bfloat16 [G, M_max, N]; masked_m int32 [G] on the GPU (read by the kernel); expected_m guides the config.
    recipe (or recipe_a/recipe_b): None or (1, 128, 128) only. compiled_dims, disable_ue8m0_cast: ignored on sm_90."""
    fn = "m_grouped_fp8_gemm_nt_masked"
    _check_ignored(compiled_dims, disable_ue8m0_cast)
    _refuse_fp4(fn, a, b, recipe, recipe_a, recipe_b)
    _recipe_form(recipe, recipe_a, recipe_b, weight_gradient_allowed=False)
    a, b = _pair(a, "a"), _pair(b, "b")
    _expect_k_major(fn, "a", a[0])
    _expect_k_major(fn, "b", b[0])
    _expect_int(expected_m, "expected_m", 1)
    a, b = _grouped_scales(a, b, "M_max")
    _dgx_masked(tuple(a), tuple(b), d, masked_m, expected_m)


# --- K-grouped GEMM -----------------------------------------------------------------------------------------------


def k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks_cpu=_REQUIRED, grouped_layout=_REQUIRED, c=None,
                                     recipe=(1, 1, 128), compiled_dims="mn", use_psum_layout=False, *, ks=None,
                                     ks_tensor=None) -> None:
    """MoE weight gradient, one launch: d[g] = c[g] + A_g . B_g^T for every group g (dgx.k_grouped_fp8_gemm_nt_contiguous).

    a = (A, SFA): A float8_e4m3fn, 1-D, the groups' A_g [M, k_g] (row-major) one after another; SFA float32 in
    DeepGEMM's layout [sum(ks)/128, M] (or dgx's [M, sum(ks)/128]); b likewise with N. d float32 [G, M, N].
    ks_cpu: the groups' K as host ints (multiples of 128; 0 for an empty group); grouped_layout: the same as int32
    [G] on the GPU (the older names ks and ks_tensor are accepted as keywords). c: float32 [G, M, N], may be d itself
    (accumulate in place), or None: d = A . B^T (DeepGEMM requires c). recipe: (1, 1, 128) only, anything else raises
    ValueError naming it. use_psum_layout=True (sm_100 only in DeepGEMM) raises ValueError. compiled_dims is ignored
    on sm_90. Packed UE8M0 scales are not accepted here."""
    fn = "k_grouped_fp8_gemm_nt_contiguous"
    if ks_cpu is _REQUIRED:
        ks_cpu = ks
    elif ks is not None:
        raise TypeError(f"{fn}(): got both ks_cpu and ks (the older name of ks_cpu)")
    if grouped_layout is _REQUIRED:
        grouped_layout = ks_tensor
    elif ks_tensor is not None:
        raise TypeError(f"{fn}(): got both grouped_layout and ks_tensor (the older name of grouped_layout)")
    if ks_cpu is None or grouped_layout is None:
        missing = "ks_cpu (or ks)" if ks_cpu is None else "grouped_layout (or ks_tensor)"
        raise TypeError(f"{fn}() missing the argument {missing}")
    ks, ks_tensor = ks_cpu, grouped_layout
    _check_ignored(compiled_dims, False)
    if _as_tuple(recipe, "recipe", 3) != _WGRAD_RECIPE:
        raise ValueError(f"recipe: the K-grouped GEMM takes (1, 1, 128) only (A and B scaled per row per 128 of K); "
                         f"got {recipe!r}")
    if use_psum_layout:
        raise ValueError("use_psum_layout: the K-grouped prefix-sum layout is sm_100 only (DeepGEMM too); on sm_90 pass "
                         "the groups' K as ks_cpu and grouped_layout")
    a, b = _pair(a, "a"), _pair(b, "b")
    for name, sf in (("SFA", a[1]), ("SFB", b[1])):
        if isinstance(sf, _torch.Tensor) and sf.dtype == _torch.int32:
            raise ValueError(f"{name}: the K-grouped GEMM takes float32 scales (UE8M0-valued ones included); got packed "
                             f"int32 scales")
    if isinstance(d, _torch.Tensor):
        # d is written before dgx's checks run (d = c, or 0): check first what would make the call fail.
        groups = len(ks) if isinstance(ks, (list, tuple)) else None
        if d.dtype != _torch.float32 or d.dim() != 3 or (groups is not None and d.shape[0] != groups):
            raise ValueError(f"d: expected float32 [G = {groups}, M, N]; got {d.dtype} {tuple(d.shape)}")
        for name, t, rows in (("A", a[0], d.shape[1]), ("B", b[0], d.shape[2])):
            if isinstance(t, _torch.Tensor) and isinstance(ks, (list, tuple)) and all(isinstance(x, int) for x in ks):
                if t.numel() != rows * sum(ks):
                    raise ValueError(f"{name}: expected {rows} x sum(ks) = {rows * sum(ks)} elements; got {t.numel()}")
        if c is None:
            d.zero_()
        elif not (isinstance(c, _torch.Tensor) and c.data_ptr() == d.data_ptr() and c.stride() == d.stride()):
            if not isinstance(c, _torch.Tensor) or c.shape != d.shape or c.dtype != d.dtype:
                raise ValueError(f"c: expected a tensor of d's shape {tuple(d.shape)} and dtype {d.dtype}; got "
                                 f"{tuple(getattr(c, 'shape', ()))} {getattr(c, 'dtype', type(c).__name__)}")
            d.copy_(c)
    _dgx_k_grouped(tuple(a), tuple(b), d, ks, ks_tensor)


def _show_required(fn, *names: str) -> None:
    """Shows `names` as required parameters in fn's signature (their default only stands for "not given", so that
    an older keyword name may be used instead)."""
    sig = _inspect.signature(fn)
    params = [p.replace(default=_inspect.Parameter.empty) if p.name in names else p for p in sig.parameters.values()]
    fn.__signature__ = sig.replace(parameters=params)


_show_required(m_grouped_fp8_gemm_nt_contiguous, "grouped_layout")
_show_required(m_grouped_fp8_gemm_nn_contiguous, "grouped_layout")
_show_required(k_grouped_fp8_gemm_nt_contiguous, "ks_cpu", "grouped_layout")

# DeepGEMM's current names for the same functions (FP4 operands are sm_100 only) and the older masked name.
fp8_fp4_gemm_nt = fp8_gemm_nt
fp8_fp4_gemm_nn = fp8_gemm_nn
fp8_fp4_gemm_tn = fp8_gemm_tn
fp8_fp4_gemm_tt = fp8_gemm_tt
m_grouped_fp8_fp4_gemm_nt_contiguous = m_grouped_fp8_gemm_nt_contiguous
m_grouped_fp8_fp4_gemm_nn_contiguous = m_grouped_fp8_gemm_nn_contiguous
m_grouped_fp8_fp4_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked


# --- layouts ------------------------------------------------------------------------------------------------------


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
                                      psum_layout=None):
    """Scales in the layout the sm_90 kernels read: per-row (gran_mn 1) scales in the TMA-aligned MN-major layout,
    per-block (gran_mn 128) ones contiguous. recipe: a (gran_a, gran_b, gran_k) triple with is_sfa saying which
    operand `sf` scales, or a (gran_mn, gran_k) pair with is_sfa None; gran_k must be 128 and gran_mn 1 or 128.
    sf: float32 [num_groups?, ceil(mn/gran_mn), ceil(k/128)], or packed UE8M0 int32 with ceil(k/512) columns
    (unpacked on the GPU). disable_ue8m0_cast and psum_layout are accepted and ignored on sm_90."""
    _expect_int(mn, "mn", 0)
    _expect_int(k, "k", 0)
    if isinstance(recipe, (tuple, list)) and len(recipe) == 3:
        r = _as_tuple(recipe, "recipe", 3)
        if is_sfa is None:
            raise ValueError("is_sfa: a recipe of three granularities needs is_sfa (True for SFA, False for SFB)")
        gran_mn, gran_k = (r[0] if is_sfa else r[1]), r[2]
    else:
        gran_mn, gran_k = _as_tuple(recipe, "recipe", 2)
        if is_sfa is not None:
            raise ValueError(f"is_sfa: only with a recipe of three granularities; got is_sfa={is_sfa!r} with {recipe!r}")
    if gran_k == 32:
        raise Sm100OnlyError(f"transform_sf_into_required_layout: recipe {tuple(recipe)!r} scales per 32 of K (the FP4 "
                             f"recipes), sm_100 only (DeepGEMM too); sm_90 scales per 128 of K")
    if gran_k != 128 or gran_mn not in (1, 128):
        raise ValueError(f"recipe: expected granularities 1 or 128 along MN and 128 along K on sm_90; got {recipe!r}")
    if not isinstance(sf, _torch.Tensor):
        raise TypeError(f"sf: expected a torch tensor; got {type(sf).__name__}")
    if num_groups is not None:
        _expect_int(num_groups, "num_groups", 1)
    rows, kb = _ceil_div(mn, gran_mn), _ceil_div(k, 128)
    packed = sf.dtype == _torch.int32
    cols = _ceil_div(kb, 4) if packed else kb
    shape = ((num_groups,) if num_groups is not None else ()) + (rows, cols)
    if tuple(sf.shape) != shape:
        raise ValueError(f"sf: expected shape {shape} for mn={mn}, k={k}, recipe {recipe!r}"
                         f"{', packed four per int' if packed else ''}; got {tuple(sf.shape)}")
    if packed:
        return _unpack_scales(sf, kb, row_major=gran_mn == 128, name="sf")
    if sf.dtype != _torch.float32:
        raise TypeError(f"sf: expected float32 or packed int32 scales; got {sf.dtype}")
    return get_mn_major_tma_aligned_tensor(sf) if gran_mn == 1 else sf.contiguous()
