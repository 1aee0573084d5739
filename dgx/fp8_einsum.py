"""dgx.fp8_einsum: DeepGEMM's FP8 einsum on sm_90, ``'bhr,hdr->bhd'`` (the MLA projection per head).

    z[:, hh, :] = dequant(x[:, hh, :]) . dequant(y[hh])^T    for every head hh,

x [b, h, r] FP8 scaled per token per 128 of r (sfx [b, h, ceil(r/128)]), y [h, d, r] FP8 scaled per 128x128 block
(sfy [h, ceil(d/128), ceil(r/128)]), z [b, h, d] BF16, with DeepSeek-V3's fine-grained scaling and FP32
accumulation (promoted every 128 of r).

It is the FP8 GEMM kernel (ptx/fp8_gemm.cuh) on its batched layout: h GEMMs of b x d x r, one tile scheduler
over all of them. x and z are read and written where they lie, through 3-D tensor maps [b, h, r] / [b, h, d]
whose group coordinate is the head (no copy; a tile past b is zero-filled on load and clipped on store); y is
the M-grouped layouts' B [h * d, r]. The per-token scales come K-major ([b, h, r/128] row-major, as
per_token_cast_to_fp8 of x.view(-1, r) makes them): the scale-layout kernel copies them into the M-major layout
the kernel loads with TMA (one small kernel on the same stream, into memory dgx owns); scales already M-major
per head (``sfx.permute(1, 2, 0)`` contiguous with b padded to 4, see :func:`sfx_for_kernel`) are read as they are.

The other expressions DeepGEMM knows ('bhd,hdr->bhr', 'bhd,bhr->hdr') are sm_100 kernels in DeepGEMM too: they
raise dgx.errors.Sm100OnlyError.
"""

from __future__ import annotations

import sys
from _thread import get_ident

from . import fastpath, launch
from . import scales as scales_module
from .checks import (
    ceil_div,
    expect_contiguous,
    expect_dtype,
    expect_ndim,
    expect_nonnegative_strides,
    expect_scaled_fp8_dtypes,
    expect_shape,
    expect_tma_rows,
    unpack_pair,
    views_on_one_device,
)
from .device import get_num_sms
from .errors import Sm100OnlyError
from .heuristics import choose_batched
from .intmath import round_up
from .kernels import scale_layout
from .kernels.fp8_gemm import LAYOUT_BATCHED, GemmConfig
from .launch import Operands
from .layout import sfa_tma_layout
from .streams import resolve_stream
from .tensors import TensorView
from . import caches

__all__ = ["fp8_einsum", "sfx_for_kernel"]

EXPR = "bhr,hdr->bhd"
#: DeepGEMM's FP8 einsum expressions that only its sm_100 kernels run.
SM100_EXPRS = {"bhd,hdr->bhr": "the FP8 einsum 'bhd,hdr->bhr' is",
               "bhd,bhr->hdr": "the FP8 einsum 'bhd,bhr->hdr' (weight gradient) is"}
MAX_HEADS = scale_layout.MAX_GROUPS  # the scale-layout kernel's grid z: one head each

_plans: dict[tuple, launch.GemmPlan] = caches.per_process({})
# Per-call fast path for torch tensors (dgx.fastpath): hint key -> entry; tensors taken as (x, sfx, y, sfy, z).
_fast: dict[tuple, fastpath.Entry] = caches.per_process({})


def normalize_expr(expr: object) -> str:
    """`expr` without blanks, checked: 'bhr,hdr->bhd' (Sm100OnlyError for DeepGEMM's sm_100 expressions,
    ValueError for any other)."""
    if not isinstance(expr, str):
        raise TypeError(f"expr: expected a string such as {EXPR!r}; got {type(expr).__name__}")
    compact = "".join(expr.split())
    if compact == EXPR:
        return compact
    if compact in SM100_EXPRS:
        raise Sm100OnlyError(f"fp8_einsum: {SM100_EXPRS[compact]} sm_100 (Blackwell) only, in DeepGEMM too; dgx's "
                             f"kernels are sm_90 (Hopper), where fp8_einsum runs {EXPR!r}")
    raise ValueError(f"expr: expected {EXPR!r} (the FP8 einsum sm_90 runs); got {expr!r}")


def _dims(xv: TensorView, yv: TensorView, zv: TensorView, sfxv: TensorView, sfyv: TensorView) -> tuple[int, int, int, int]:
    """(b, h, d, r) after every check of the operands' ranks, dtypes, shapes and strides."""
    for v, name in ((xv, "x"), (yv, "y"), (zv, "z"), (sfxv, "sfx"), (sfyv, "sfy")):
        expect_ndim(v, name, 3)
    expect_scaled_fp8_dtypes(xv, yv, sfxv, sfyv, ("x", "y", "sfx", "sfy"))
    if zv.dtype == "float32":
        raise TypeError("z: expected dtype bfloat16 (fp8_einsum 'bhr,hdr->bhd' writes BF16 on sm_90); got float32")
    expect_dtype(zv, "z", "bfloat16")
    b, h, r = xv.shape
    if r == 0:
        raise ValueError(f"x: r (the contracted dimension) must be positive; got shape {xv.shape}")
    if yv.shape[0] != h or yv.shape[2] != r:
        raise ValueError(f"y: expected shape ({h}, d, {r}) for x of shape {xv.shape} ([h, d, r]); got {yv.shape}")
    d = yv.shape[1]
    expect_shape(zv, "z", (b, h, d))
    expect_shape(sfxv, "sfx", (b, h, ceil_div(r, 128)))
    expect_shape(sfyv, "sfy", (h, ceil_div(d, 128), ceil_div(r, 128)))
    if d % 8:
        raise ValueError(f"y: d must be a multiple of 8 (16-byte rows of the BF16 z for TMA); got d = {d}")
    expect_tma_rows(xv, "x")
    expect_tma_rows(yv, "y")
    expect_tma_rows(zv, "z")
    if h > 1 and d > 0 and yv.strides[0] != d * yv.strides[1]:
        raise ValueError(f"y: expected the heads stored one after another (stride along dim 0 = {d} x the row stride "
                         f"{yv.strides[1]}); got strides {yv.strides}")
    expect_nonnegative_strides(sfxv, "sfx")
    expect_contiguous(sfyv, "sfy")
    if h > MAX_HEADS:
        raise ValueError(f"x: at most {MAX_HEADS} heads; got h = {h}")
    if b >= 2**31 or h * max(d, 1) >= 2**31:
        raise ValueError(f"x, y: b and h x d must be below 2**31; got b = {b}, h x d = {h} x {d}")
    return b, h, d, r


def sfx_for_kernel(sfx):
    """sfx [b, h, ceil(r/128)] (float32, torch) copied once into the layout fp8_einsum reads without a conversion:
    per head, a row of b scales (padded to 4) per k-block; the result has sfx's shape. Scales used by several calls
    can be converted once here."""
    import torch

    if not isinstance(sfx, torch.Tensor) or sfx.dim() != 3 or sfx.dtype != torch.float32:
        raise TypeError(f"sfx: expected a 3-D float32 torch tensor; got {getattr(sfx, 'shape', type(sfx).__name__)} "
                        f"{getattr(sfx, 'dtype', '')}")
    b, h, kb = sfx.shape
    out = torch.empty((h, kb, round_up(b, 4)), device=sfx.device, dtype=torch.float32)
    view = out.permute(2, 0, 1)[:b]
    view.copy_(sfx)
    return view


def _head_major(v: TensorView) -> TensorView:
    """sfx [b, h, kb] as [h, b, kb] (the heads as the scale layout's groups), no copy."""
    (b, h, kb), (sb, sh, sk) = v.shape, v.strides
    return TensorView(v.ptr, (h, b, kb), (sh, sb, sk), v.dtype, v.device, v.device_kind)


def _stride(v: TensorView, dim: int, otherwise: int) -> int:
    """v's stride along `dim`, or `otherwise` where that dimension has one element (any stride is valid for
    it, but a tensor map wants a multiple of 16 bytes)."""
    return v.strides[dim] if v.shape[dim] > 1 else otherwise


def _plan(b: int, d: int, r: int, h: int, device: int, config: GemmConfig | None) -> launch.GemmPlan:
    num_sms = get_num_sms(device)
    key = (b, d, r, h, device, num_sms, config)
    found = _plans.get(key)
    if found is None:
        if config is None:
            config = choose_batched(b, d, r, h, num_sms).config
        found = launch.launch_plan(config, config.units(b) * h, device, num_sms)
        if len(_plans) >= 1024:
            _plans.clear()
        _plans[key] = found
    return found


def _expect_config(config: GemmConfig, d: int, r: int) -> None:
    if not isinstance(config, GemmConfig):
        raise TypeError(f"config: expected a GemmConfig; got {type(config).__name__}")
    if config.layout != LAYOUT_BATCHED or config.n != d or config.k != r:
        raise ValueError(f"config: expected a batched-layout (layout {LAYOUT_BATCHED}) GemmConfig with n = d = {d} "
                         f"and k = r = {r}; got layout {config.layout}, n {config.n}, k {config.k}")


def fp8_einsum(expr: str, a, b, d, *, stream=None, config: GemmConfig | None = None) -> None:
    """z = einsum('bhr,hdr->bhd', x, y) on FP8 operands with DeepSeek-V3 fine-grained scales, BF16 out.

    Args:
        expr: 'bhr,hdr->bhd' (blanks ignored). DeepGEMM's 'bhd,hdr->bhr' and 'bhd,bhr->hdr' run on sm_100 only
            and raise Sm100OnlyError.
        a: (x, sfx): x float8_e4m3fn [b, h, r], rows contiguous and 16-byte aligned (any row and head strides
           that are multiples of 16 bytes); sfx float32 [b, h, ceil(r/128)], one scale per token per 128 of r,
           any non-negative strides (the row-major [b, h, r/128] of per_token_cast_to_fp8(x.view(-1, r)) is
           converted on the GPU on every call, on the launch stream; sfx_for_kernel's layout is read as it is).
           FP32 scales; UE8M0-valued ones (powers of two) are FP32 values like any other.
        b: (y, sfy): y float8_e4m3fn [h, d, r], the heads stored one after another, rows contiguous and 16-byte
           aligned; sfy float32 [h, ceil(d/128), ceil(r/128)], contiguous, one scale per 128x128 block.
        d: z bfloat16 [b, h, d], rows contiguous and 16-byte aligned; written in place. d a multiple of 8.
        stream: the stream to launch on (default: torch's current stream).
        config: a batched-layout GemmConfig to use instead of the heuristic's choice (tuning and tests).

    Raises TypeError/ValueError (Sm100OnlyError for the sm_100 expressions) naming the violated constraint
    before anything is launched. b, h or d = 0 is a no-op.
    """
    fast = config is None and expr == EXPR and type(a) is tuple and type(b) is tuple
    if fast:
        try:
            X, SFX = a
            Y, SFY = b
            key = (X.shape[0], Y.shape, get_ident())
        except (TypeError, ValueError, AttributeError, IndexError):  # not a pair of tensors: the full path says so
            fast = False
        else:
            entry = _fast.get(key)
            if entry is not None and entry.check(X, SFX, Y, SFY, d) and entry.run(
                    (X.data_ptr(), SFX.data_ptr(), Y.data_ptr(), SFY.data_ptr(), d.data_ptr()), stream):
                return
    normalize_expr(expr)
    X, SFX = unpack_pair(a, "a")
    Y, SFY = unpack_pair(b, "b")
    xv, sfxv, yv, sfyv, zv = views_on_one_device(((X, "x"), (SFX, "sfx"), (Y, "y"), (SFY, "sfy"), (d, "z")))
    nb, h, nd, r = _dims(xv, yv, zv, sfxv, sfyv)
    if config is not None:
        _expect_config(config, nd, r)
    if nb == 0 or h == 0 or nd == 0:
        return
    device = xv.device
    sfx_heads = _head_major(sfxv)
    sfa_layout, conversion, launch_stream = sfa_tma_layout(sfx_heads), None, None
    if sfa_layout is None:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(SFX, torch.Tensor):
            raise ValueError(
                "sfx: expected float32 scales of a torch tensor (converted on the GPU), or already in the layout "
                f"sfx_for_kernel makes; got a {type(SFX).__name__} in another layout (strides {sfxv.strides})")
        launch_stream = resolve_stream(stream, device)
        sfx_heads, conversion = scales_module.convert(sfx_heads, launch_stream, "sfx", "sfx", warn=False)
        sfa_layout = sfa_tma_layout(sfx_heads)
    try:
        plan = _plan(nb, nd, r, h, device, config)
        if launch_stream is None:
            launch_stream = resolve_stream(stream, device)
        x_head = _stride(xv, 1, round_up(r, 16))
        z_head = _stride(zv, 1, round_up(nd, 8))
        ops = Operands(a=xv.ptr, a_rows=nb, lda=_stride(xv, 0, x_head * h), a_group_stride=x_head,
                       b=yv.ptr, b_rows=h * nd, ldb=yv.strides[1],
                       d=zv.ptr, d_rows=nb, ldd=_stride(zv, 0, z_head * h), d_group_stride=z_head,
                       sfa=sfx_heads.ptr, sfa_layout=sfa_layout, sfb=sfyv.ptr, m=nb, num_groups=h)
        pack = launch.pack(plan.config, ops)
        plan.launcher.launch(launch_stream, pack)
    finally:
        launch.release(conversion)  # converted scales in capture-owned memory: freed after the kernel
    if fast:
        fastpath.register_converted(_fast, key, (X, SFX, Y, SFY, d), plan, pack, conversion)
