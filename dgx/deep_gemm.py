"""DeepGEMM 2.x's Python API on dgx's sm_90 kernels: ``import dgx.deep_gemm as deep_gemm`` is the whole switch.

Names, parameters, defaults and semantics follow DeepGEMM's current ``deep_gemm`` package, for the names that
apply to FP8 on sm_90 (H100/H800/H200):

- GEMMs: ``fp8_gemm_nt`` (and ``fp8_gemm_nn``/``tn``/``tt``), ``m_grouped_fp8_gemm_nt_contiguous`` (prefix-sum
  layout included), ``m_grouped_fp8_gemm_nn_contiguous``, ``m_grouped_fp8_gemm_nt_masked``,
  ``k_grouped_fp8_gemm_nt_contiguous``; the ``fp8_fp4_*`` names are the same functions (FP8 only on sm_90), and
  ``fp8_m_grouped_gemm_nt_masked`` is the older masked name.
- The DeepSeek-V3.2 indexer: ``fp8_mqa_logits``, ``get_paged_mqa_logits_metadata``, ``fp8_paged_mqa_logits``
  (dgx's, see dgx.mqa).
- Runtime settings: ``set_num_sms``/``get_num_sms``, ``set_tc_util``/``get_tc_util``, ``set_pdl``/``get_pdl``,
  ``set_ignore_compile_dims``, ``set_block_size_multiple_of``.
- Layouts: ``get_tma_aligned_size``, ``get_mn_major_tma_aligned_tensor``,
  ``get_mn_major_tma_aligned_packed_ue8m0_tensor``, ``transform_sf_into_required_layout``,
  ``set_mk_alignment_for_contiguous_layout``/``get_mk_alignment_for_contiguous_layout`` (and the ``m``/``k`` aliases),
  ``get_theoretical_mk_alignment_for_contiguous_layout``.
- Quantisation helpers (torch, any device): ``per_token_cast_to_fp8``, ``per_channel_cast_to_fp8``,
  ``per_block_cast_to_fp8``, ``per_custom_dims_cast_to_fp8`` (with ``use_ue8m0``: scales rounded up to powers of
  two, and ``gran_k``), ``ceil_to_ue8m0``, ``pack_ue8m0_to_int``, ``unpack_ue8m0_from_int``, ``ceil_div``,
  ``align``.

Scale factors: FP32 scales, UE8M0-valued ones included, are read as they are (a row-major SFA is copied into the
TMA-aligned MN-major layout on the GPU, as DeepGEMM does; an MN-major per-block SFB is made contiguous). Packed
UE8M0 scales (int32, four exponent bytes each, as get_mn_major_tma_aligned_packed_ue8m0_tensor or
per_token_cast_to_fp8(..., use_packed_ue8m0=True) make them) are unpacked on the GPU into FP32 by one small dgx
kernel before the GEMM (DeepGEMM itself refuses them on sm_90). The K-grouped GEMM takes FP32 scales only.

Accepted but ignored on sm_90 (documented per function): ``compiled_dims`` (dgx always compiles N and K into the
kernel and takes M at run time), ``disable_ue8m0_cast`` (there is no UE8M0 cast on sm_90: FP32 scales are used as
given), ``ensure_zero_padding`` (sm_100 only in DeepGEMM), ``set_tc_util``, ``set_ignore_compile_dims`` and
``set_block_size_multiple_of`` (dgx's heuristics have no such knobs; the values are stored and returned).

Not provided, because dgx has no such kernels: the BF16 GEMMs, ``einsum``/``fp8_einsum``, cuBLASLt wrappers,
``tf32_hc_prenorm_gemm``, the Mega MoE kernels, FP4 operands and helpers, ``fp8_gemm_nt_skip_head_mid``, the
``fp8_fp4_*mqa_logits`` variants, ``k_grouped_fp8_gemm_tn_contiguous`` and
``get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor`` (sm_100 only in DeepGEMM). Every function raises
TypeError/ValueError naming the argument, what was expected and what came.
"""

import inspect as _inspect

import torch as _torch

from . import device as _device
from . import runtime as _runtime
from .gemm import fp8_gemm_nt as _dgx_dense
from .grouped import m_grouped_fp8_gemm_nt_contiguous as _dgx_contiguous
from .grouped import m_grouped_fp8_gemm_nt_masked as _dgx_masked
from .grouped_psum import m_grouped_fp8_gemm_nt_contiguous_psum as _dgx_contiguous_psum
from .heuristics import CONTIGUOUS_ALIGNMENT as _DGX_ALIGNMENT
from .intmath import ceil_div as _ceil_div
from .layout import get_mn_major_tma_aligned_tensor, get_tma_aligned_size
from .mqa import fp8_mqa_logits, fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from .pdl import get_pdl, set_pdl
from .ue8m0 import ceil_to_ue8m0, get_mn_major_tma_aligned_packed_ue8m0_tensor, pack_ue8m0_to_int
from .ue8m0 import unpack_scales as _unpack_scales
from .ue8m0 import unpack_ue8m0_from_int
from .wgrad import k_grouped_fp8_gemm_nt_contiguous as _dgx_k_grouped

__all__ = [
    # GEMMs
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
    # The DeepSeek-V3.2 indexer
    "fp8_mqa_logits",
    "get_paged_mqa_logits_metadata",
    "fp8_paged_mqa_logits",
    # Runtime settings
    "set_num_sms",
    "get_num_sms",
    "set_tc_util",
    "get_tc_util",
    "set_pdl",
    "get_pdl",
    "set_ignore_compile_dims",
    "set_block_size_multiple_of",
    # Layouts
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout",
    "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    # Quantisation helpers
    "ceil_div",
    "align",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "unpack_ue8m0_from_int",
    "per_token_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
]

_FP8_MAX = 448.0  # the largest finite float8_e4m3fn
_BF16_RECIPE = (1, 128, 128)  # A per row per 128 of K, B per 128x128 block: BF16 d
_WGRAD_RECIPE = (1, 1, 128)  # both per row per 128 of K: the FP32 weight-gradient form


# --- runtime settings -------------------------------------------------------------------------------------------

_settings = {"tc_util": 0, "ignore_compile_dims": False, "block_size_multiple_of": (1, 1), "mk_alignment": 128}


def _expect_int(value, name: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int; got {type(value).__name__} {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an int {bounds}; got {value}")
    return value


def _current_device() -> int:
    return _torch.cuda.current_device() if _torch.cuda.is_available() and _torch.cuda.is_initialized() else 0


def set_num_sms(new_num_sms: int) -> None:
    """Plan kernels for this many SMs (0: all of the device's, DeepGEMM's reset); as dgx.set_num_sms."""
    _expect_int(new_num_sms, "new_num_sms", 0)
    if new_num_sms == 0:
        new_num_sms = _runtime.device_info(_current_device()).num_sms
    _device.set_num_sms(new_num_sms)


def get_num_sms() -> int:
    """The SMs kernels are planned for (set_num_sms, else DGX_NUM_SMS, else the current device's)."""
    return _device.get_num_sms(_current_device())


def set_tc_util(new_tc_util: int) -> None:
    """DeepGEMM's expected tensor-core utilisation in percent (0 .. 100, 0 = 100) for its heuristics. Stored and
    returned by get_tc_util; ignored by dgx's heuristics on sm_90."""
    _settings["tc_util"] = _expect_int(new_tc_util, "new_tc_util", 0, 100)


def get_tc_util() -> int:
    """The value set_tc_util stored (100 when unset or 0)."""
    return _settings["tc_util"] or 100


def set_ignore_compile_dims(new_value: bool) -> None:
    """DeepGEMM's switch to compile no shape dimensions into its kernels. Ignored on sm_90: dgx always compiles N
    and K into the kernel and takes M at run time (what compiled_dims='nk' asks for)."""
    if not isinstance(new_value, bool):
        raise TypeError(f"new_value: expected a bool; got {type(new_value).__name__}")
    _settings["ignore_compile_dims"] = new_value


def set_block_size_multiple_of(new_value) -> None:
    """DeepGEMM's constraint on its heuristics' block sizes (an int, or (block M, block N) multiples). Checked and
    stored; ignored on sm_90: dgx's heuristics choose among the tiles its kernel supports."""
    values = new_value if isinstance(new_value, tuple) else (new_value, new_value)
    if len(values) != 2:
        raise TypeError(f"new_value: expected an int or a tuple of two ints; got {new_value!r}")
    for v in values:
        _expect_int(v, "new_value", 1)
    _settings["block_size_multiple_of"] = tuple(values)


def set_mk_alignment_for_contiguous_layout(new_value: int) -> None:
    """The rows each group of a contiguous M-grouped A is aligned to (default 128): with the prefix-sum layout,
    group g starts at the previous group's end rounded up to it. dgx's m_indices layout needs a multiple of 128
    and its prefix-sum layout a multiple of 64; the GEMM calls check."""
    _settings["mk_alignment"] = _expect_int(new_value, "new_value", 1)


def get_mk_alignment_for_contiguous_layout() -> int:
    """The alignment set_mk_alignment_for_contiguous_layout set (128 by default)."""
    return _settings["mk_alignment"]


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None) -> int:
    """The alignment that suits the kernels best: 128 on sm_90, whatever `expected_m` (a positive int or None)."""
    if expected_m is not None:
        _expect_int(expected_m, "expected_m", 0)
    return _DGX_ALIGNMENT


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


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, grouped_layout=_REQUIRED, recipe=None, compiled_dims="nk",
                                     disable_ue8m0_cast=False, use_psum_layout=False, expected_m_for_psum_layout=None,
                                     *, m_indices=None, recipe_a=None, recipe_b=None, ensure_zero_padding=True) -> None:
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


def m_grouped_fp8_gemm_nn_contiguous(a, b, d, grouped_layout=_REQUIRED, recipe=None, compiled_dims="nk",
                                     disable_ue8m0_cast=False, use_psum_layout=False, *, m_indices=None,
                                     recipe_a=None, recipe_b=None, ensure_zero_padding=True) -> None:
    """m_grouped_fp8_gemm_nt_contiguous with b = (B [G, K, N], SFB [G, ceil(K/128), ceil(N/128)]) given transposed.
    Runs when that B is stored so that its transpose is K-major; otherwise raises ValueError naming b (sm_90 reads
    B K-major only)."""
    _contiguous("m_grouped_fp8_gemm_nn_contiguous", a, b, d, grouped_layout, recipe, compiled_dims, disable_ue8m0_cast,
                use_psum_layout, None, m_indices, recipe_a, recipe_b, ensure_zero_padding, True)


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, compiled_dims="nk",
                                 disable_ue8m0_cast=False, *, recipe_a=None, recipe_b=None) -> None:
    """MoE decode GEMM: d[g, :masked_m[g]] = A[g, :masked_m[g]] . B[g]^T (dgx.m_grouped_fp8_gemm_nt_masked).

    a = (A [G, M_max, K], SFA [G, M_max, ceil(K/128)]), b = (B [G, N, K], SFB [G, ceil(N/128), ceil(K/128)]),
    d bfloat16 [G, M_max, N]; masked_m int32 [G] on the GPU (read by the kernel); expected_m guides the config.
    recipe (or recipe_a/recipe_b): None or (1, 128, 128) only. compiled_dims, disable_ue8m0_cast: ignored on sm_90."""
    _check_ignored(compiled_dims, disable_ue8m0_cast)
    _recipe_form(recipe, recipe_a, recipe_b, weight_gradient_allowed=False)
    a, b = _pair(a, "a"), _pair(b, "b")
    _expect_k_major("m_grouped_fp8_gemm_nt_masked", "a", a[0])
    _expect_k_major("m_grouped_fp8_gemm_nt_masked", "b", b[0])
    _expect_int(expected_m, "expected_m", 1)
    a, b = _grouped_scales(a, b, "M_max")
    _dgx_masked(tuple(a), tuple(b), d, masked_m, expected_m)


# --- K-grouped GEMM -----------------------------------------------------------------------------------------------


def k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks=_REQUIRED, ks_tensor=_REQUIRED, c=None, recipe=(1, 1, 128),
                                     compiled_dims="mn", *, use_psum_layout=False, ks_cpu=None,
                                     grouped_layout=None) -> None:
    """MoE weight gradient, one launch: d[g] = c[g] + A_g . B_g^T for every group g (dgx.k_grouped_fp8_gemm_nt_contiguous).

    a = (A, SFA): A float8_e4m3fn, 1-D, the groups' A_g [M, k_g] (row-major) one after another; SFA float32 in
    DeepGEMM's layout [sum(ks)/128, M] (or dgx's [M, sum(ks)/128]); b likewise with N. d float32 [G, M, N].
    ks: the groups' K as host ints (multiples of 128; 0 for an empty group); ks_tensor: the same as int32 [G] on the
    GPU (newer DeepGEMM names: ks_cpu, grouped_layout, accepted as keywords). c: float32 [G, M, N], may be d itself
    (accumulate in place), or None: d = A . B^T (DeepGEMM requires c). recipe: (1, 1, 128) only, anything else raises
    ValueError naming it. use_psum_layout=True (sm_100 only in DeepGEMM) raises ValueError. compiled_dims is ignored
    on sm_90. Packed UE8M0 scales are not accepted here."""
    fn = "k_grouped_fp8_gemm_nt_contiguous"
    if ks is _REQUIRED:
        ks = ks_cpu
    elif ks_cpu is not None:
        raise TypeError(f"{fn}(): got both ks and ks_cpu (the newer name of ks)")
    if ks_tensor is _REQUIRED:
        ks_tensor = grouped_layout
    elif grouped_layout is not None:
        raise TypeError(f"{fn}(): got both ks_tensor and grouped_layout (the newer name of ks_tensor)")
    if ks is None or ks_tensor is None:
        missing = "ks (or ks_cpu)" if ks is None else "ks_tensor (or grouped_layout)"
        raise TypeError(f"{fn}() missing the argument {missing}")
    _check_ignored(compiled_dims, False)
    if _as_tuple(recipe, "recipe", 3) != _WGRAD_RECIPE:
        raise ValueError(f"recipe: the K-grouped GEMM takes (1, 1, 128) only (A and B scaled per row per 128 of K); "
                         f"got {recipe!r}")
    if use_psum_layout:
        raise ValueError("use_psum_layout: the K-grouped prefix-sum layout is sm_100 only (DeepGEMM too); on sm_90 pass "
                         "the groups' K as ks and ks_tensor")
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
_show_required(k_grouped_fp8_gemm_nt_contiguous, "ks", "ks_tensor")

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


# --- quantisation helpers (torch, any device) ---------------------------------------------------------------------


def ceil_div(x: int, y: int) -> int:
    """x / y rounded up."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """x rounded up to a multiple of y."""
    return ceil_div(x, y) * y


def _scales_of(amax, use_ue8m0: bool):
    sf = amax / _FP8_MAX
    return ceil_to_ue8m0(sf) if use_ue8m0 else sf


def _expect_2d(x, name: str = "x") -> None:
    if not isinstance(x, _torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D torch tensor; got {getattr(x, 'shape', type(x).__name__)}")


def per_token_cast_to_fp8(x, use_ue8m0, gran_k=128, use_packed_ue8m0=False):
    """x [M, K] -> (float8_e4m3fn [M, K], scales [M, ceil(K/gran_k)] float32, row-major): one scale per row per
    gran_k columns, amax / 448 (rounded up to a power of two with use_ue8m0). use_packed_ue8m0 (needs use_ue8m0)
    returns the scales packed four to an int32, [M, ceil(K/(4 gran_k))]."""
    _expect_2d(x)
    _expect_int(gran_k, "gran_k", 1)
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0: packing needs UE8M0 scales (use_ue8m0=True)")
    m, k = x.shape
    blocks = ceil_div(k, gran_k)
    xp = _torch.nn.functional.pad(x.float(), (0, blocks * gran_k - k)).view(m, blocks, gran_k)
    sf = _scales_of(xp.abs().amax(dim=2).clamp(min=1e-4), use_ue8m0)
    q = (xp * (1.0 / sf).unsqueeze(2)).to(_torch.float8_e4m3fn).view(m, blocks * gran_k)[:, :k].contiguous()
    if use_packed_ue8m0:
        sf = pack_ue8m0_to_int(_torch.nn.functional.pad(sf, (0, align(blocks, 4) - blocks)))
    return q, sf


def per_channel_cast_to_fp8(x, use_ue8m0, gran_k=128):
    """x [K, N] (K a multiple of gran_k) -> (float8_e4m3fn [K, N], scales [K/gran_k, N] float32): one scale per
    column per gran_k rows (the K-grouped GEMM's operands along K)."""
    _expect_2d(x)
    _expect_int(gran_k, "gran_k", 1)
    k, n = x.shape
    if k % gran_k:
        raise ValueError(f"x: expected rows a multiple of gran_k = {gran_k}; got shape {tuple(x.shape)}")
    xv = x.float().view(k // gran_k, gran_k, n)
    sf = _scales_of(xv.abs().amax(dim=1).clamp(min=1e-4), use_ue8m0)
    return (xv * (1.0 / sf).unsqueeze(1)).to(_torch.float8_e4m3fn).view(k, n), sf


def per_block_cast_to_fp8(x, use_ue8m0, gran_k=128):
    """x [N, K] -> (float8_e4m3fn [N, K], scales [ceil(N/gran_k), ceil(K/gran_k)] float32): one scale per
    gran_k x gran_k block."""
    _expect_2d(x)
    _expect_int(gran_k, "gran_k", 1)
    n, k = x.shape
    nb, kb = ceil_div(n, gran_k), ceil_div(k, gran_k)
    xp = _torch.nn.functional.pad(x.float(), (0, kb * gran_k - k, 0, nb * gran_k - n)).view(nb, gran_k, kb, gran_k)
    sf = _scales_of(xp.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4), use_ue8m0)
    q = (xp * (1.0 / sf)).to(_torch.float8_e4m3fn).view(nb * gran_k, kb * gran_k)[:n, :k].contiguous()
    return q, sf.view(nb, kb)


def per_custom_dims_cast_to_fp8(x, dims, use_ue8m0):
    """x -> (float8_e4m3fn like x, scales): one scale per index of the dimensions `dims` (the amax over all
    others), returned squeezed."""
    if not isinstance(x, _torch.Tensor):
        raise TypeError(f"x: expected a torch tensor; got {type(x).__name__}")
    keep = {d % x.dim() for d in dims} if x.dim() else set()
    reduce = tuple(i for i in range(x.dim()) if i not in keep)
    amax = x.abs().float().amax(dim=reduce, keepdim=True) if reduce else x.abs().float()
    sf = _scales_of(amax.clamp(min=1e-4), use_ue8m0)
    return (x.float() * (1.0 / sf)).to(_torch.float8_e4m3fn), sf.squeeze()
