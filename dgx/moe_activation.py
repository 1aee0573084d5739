"""dgx.silu_mul_quant (module dgx.moe_activation): the SwiGLU activation between an MoE expert's two GEMMs, quantised for the second one.

    gate, up = x[..., :I], x[..., I:]                   (vLLM's and SGLang's order)
    gate, up = min(gate, L), clamp(up, -L, L)            (only with swiglu_limit L; in FP32)
    h        = silu(gate) * up                           (FP32, fast forms: gate * rcp(1 + 2^(-gate log2e)) * up)
    sf       = max(amax |h|, 1e-4) * RN(1 / 448) per row and 128 channels (use_ue8m0: the next power of two)
    y        = FP8 e4m3 of h * RN(1 / sf)                (nearest even)

h is within a few ulps of torch's silu(gate) * up; sf and y are DeepGEMM's ``per_token_cast_to_fp8`` of the kernel's
FP32 h bit for bit, as torch computes it on the GPU (its ``amax / 448.0`` multiplies by the rounded reciprocal). The scales come in the layout the FP8 GEMMs read A's scales in, so ``(y, sf)`` is the next
GEMM's A as it is: TMA-aligned M-major FP32, or with ``packed_ue8m0`` the packed int32 layout of
get_mn_major_tma_aligned_packed_ue8m0_tensor. One kernel reads x once and writes y and sf once.
"""

from __future__ import annotations

import math
import sys
from _thread import get_ident

from . import fastpath, runtime
from .checks import expect_dtype, expect_ndim, expect_shape, views_on_one_device
from .device import get_num_sms
from .intmath import ceil_div, round_up
from .kernels.silu_mul_quant import BLOCK, INTERFACE, MAX_GROUPS, choose_config, launcher
from .streams import resolve_stream
from .tensors import TensorView, as_view
from . import caches

__all__ = ["silu_mul_quant"]

_INT32_LIMIT = 2**31 - 1
_params: dict[tuple, runtime.ParamPack] = caches.per_process({})
# Per-call fast path for torch tensors (dgx.fastpath): hint key (:func:`_fast_key`) -> (entry, the outputs the call
# allocates: (shape, strides, dtype) of out and of out_scales, None where the caller passes it). The entry's tensors
# are (x[, masked_m], out, out_scales).
_fast: dict[tuple, tuple] = caches.per_process({})


def _fast_key(x, masked_m, swiglu_limit, use_ue8m0, packed_ue8m0, out, out_scales) -> tuple | None:
    """The hint key of a call (None: the call takes the full path). x's shape, and every option: whether masked_m,
    out and out_scales are given, the limit, the scale format; the thread."""
    if (use_ue8m0 is not True and use_ue8m0 is not False) or (packed_ue8m0 is not True and packed_ue8m0 is not False):
        return None
    limit = fastpath.number_key(swiglu_limit)
    if limit is False:
        return None
    try:
        shape = x.shape
    except AttributeError:
        return None
    return (shape, masked_m is None, limit, use_ue8m0, packed_ue8m0, out is None, out_scales is None, get_ident())


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool; got {value!r}")
    return value


def _limit(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"swiglu_limit: expected None or a positive finite number; got {value!r}")
    return float(value)


def _input(xv: TensorView, masked: bool) -> tuple[int, int, int, int, int]:
    """(groups, rows, I, row stride, group stride) of x: BF16 [M, 2I] or [G, Mmax, 2I], rows contiguous and 16-byte
    aligned (each lane reads 16 bytes)."""
    expect_dtype(xv, "x", "bfloat16")
    expect_ndim(xv, "x", 3 if masked else 2)
    groups, rows, width = xv.shape if masked else (1,) + tuple(xv.shape)
    if width == 0 or width % (2 * BLOCK):
        raise ValueError(f"x: expected a last dimension 2I with I a positive multiple of {BLOCK}; got {width}")
    strides = xv.strides if masked else (0,) + tuple(xv.strides)
    if strides[2] != 1:
        raise ValueError(f"x: expected contiguous rows (last stride 1); got strides {xv.strides}")
    for dim, size, stride in ((0, groups, strides[0]), (1, rows, strides[1])):
        if size > 1 and (stride < 0 or stride % 8):
            raise ValueError(f"x: expected non-negative strides that are multiples of 8 elements (16-byte rows); got "
                             f"strides {xv.strides}")
    if xv.ptr % 16:
        raise ValueError(f"x: expected a 16-byte aligned base address; got 0x{xv.ptr:x}")
    return groups, rows, width // 2, strides[1], strides[0]


def _allocate(like, shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: str, device: int, name: str):
    """A new torch tensor on x's device (`like`: x itself when it is a torch tensor)."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise ValueError(f"{name}: pass an output tensor (torch is not loaded, so dgx cannot allocate one)")
    where = like.device if isinstance(like, torch.Tensor) else f"cuda:{device}"
    if strides is None:
        return torch.empty(shape, dtype=getattr(torch, dtype), device=where)
    return torch.empty_strided(shape, strides, dtype=getattr(torch, dtype), device=where)


def scale_layout(groups: int | None, rows: int, blocks: int, packed: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of the scales silu_mul_quant allocates: [G?, rows, K'] with K' = blocks (FP32) or
    ceil(blocks / 4) (packed int32), M-major with the rows padded to 4 (16 bytes) and the groups one after another:
    what get_mn_major_tma_aligned_tensor / get_mn_major_tma_aligned_packed_ue8m0_tensor make."""
    cols = ceil_div(blocks, 4) if packed else blocks
    ld = round_up(rows, 4)
    if groups is None:
        return (rows, cols), (1, ld)
    return (groups, rows, cols), (cols * ld, 1, ld)


def _scales(sv: TensorView, shape: tuple[int, ...], packed: bool, masked: bool) -> tuple[int, int]:
    """(ld, group stride) in 4-byte words of out_scales, which must be in a layout the FP8 GEMM reads as A's scales:
    M-major (rows stride 1), each k-block column 16-byte aligned, the groups' columns one after another."""
    expect_dtype(sv, "out_scales", "int32" if packed else "float32")
    expect_shape(sv, "out_scales", shape)
    strides = sv.strides if masked else (0,) + tuple(sv.strides)
    groups, rows, cols = shape if masked else (1,) + shape
    ld = strides[2] if cols > 1 else round_up(rows, 4)
    what = "packed UE8M0 (get_mn_major_tma_aligned_packed_ue8m0_tensor)" if packed else \
        "M-major TMA-aligned FP32 (get_mn_major_tma_aligned_tensor)"
    if ((rows > 1 and strides[1] != 1) or ld < rows or ld % 4 or sv.ptr % 16
            or (groups > 1 and strides[0] != cols * ld)):
        raise ValueError(f"out_scales: expected the {what} layout the FP8 GEMM reads A's scales in (row stride 1, "
                         f"k-block stride a multiple of 4 and at least the rows, groups one after another); got "
                         f"shape {sv.shape}, strides {sv.strides}, address 0x{sv.ptr:x}")
    return ld, (strides[0] if groups > 1 else cols * ld)


def _on_device(v: TensorView, name: str, device: int) -> None:
    if v.device_kind != "cuda" or v.device != device:
        raise ValueError(f"{name}: expected a tensor on cuda:{device} like x; got {v.device_kind}:{v.device}")


def _output(yv: TensorView, device: int, shape: tuple[int, ...], masked: bool) -> TensorView:
    """out checked: FP8 of `shape`, contiguous rows, row and group strides multiples of 8 (8-byte stores)."""
    _on_device(yv, "out", device)
    expect_dtype(yv, "out", "float8_e4m3fn")
    expect_shape(yv, "out", shape)
    strides = yv.strides if masked else (0,) + tuple(yv.strides)
    groups, rows, inter = shape if masked else (1,) + shape
    if strides[2] != 1 or any(n > 1 and (s < inter or s % 8) for n, s in ((groups, strides[0]), (rows, strides[1]))) \
            or yv.ptr % 8:
        raise ValueError(f"out: expected contiguous rows of I = {inter} bytes, row and group strides multiples of 8, "
                         f"an 8-byte aligned address; got strides {yv.strides}, address 0x{yv.ptr:x}")
    return yv


def _overlaps(a: TensorView, b: TensorView) -> bool:
    def extent(v: TensorView) -> tuple[int, int]:
        last = sum((n - 1) * s for n, s in zip(v.shape, v.strides) if n > 0)
        return v.ptr, v.ptr + (last + 1) * v.itemsize

    if any(n == 0 for n in a.shape) or any(n == 0 for n in b.shape):
        return False
    (a0, a1), (b0, b1) = extent(a), extent(b)
    return a0 < b1 and b0 < a1


def silu_mul_quant(x, *, masked_m=None, swiglu_limit: float | None = None, use_ue8m0: bool = False,
                   packed_ue8m0: bool = False, out=None, out_scales=None, stream=None):
    """SwiGLU of x's gate and up halves, quantised to FP8 per row and 128 channels: returns ``(y, sf)``, the next FP8
    GEMM's A operand as it reads it.

    Args:
        x: bfloat16 [M, 2I] (contiguous rows), or [G, Mmax, 2I] with `masked_m`; I a multiple of 128; gate is
            x[..., :I], up x[..., I:]. Rows 16-byte aligned.
        masked_m: int32 [G] on x's device: group g's rows 0 .. masked_m[g] - 1 are computed; the rest of its rows
            are neither read nor written. Read on the GPU (a CUDA graph replays with new counts); a count above
            Mmax is taken as Mmax, a negative one as 0.
        swiglu_limit: None, or L > 0: gate = min(gate, L), up = clamp(up, -L, L) before the product (in FP32).
        use_ue8m0: scales rounded up to powers of two (FP32 values 2^e).
        packed_ue8m0: the UE8M0 scales packed four k-blocks to an int32 (needs use_ue8m0).
        out: float8_e4m3fn [M, I] / [G, Mmax, I], contiguous rows 8-byte aligned; allocated when None.
        out_scales: float32 [.., M, I/128] in the TMA-aligned M-major layout (strides (1, align(M, 4)); per group
            (I/128 * align(Mmax, 4), 1, align(Mmax, 4))), or int32 [.., M, ceil(I/512)] in that layout with
            packed_ue8m0; allocated when None.
        stream: the stream to launch on (default: torch's current stream).

    Raises TypeError/ValueError naming the argument before anything is launched. M = 0 (or G = 0) launches nothing.
    """
    key = _fast_key(x, masked_m, swiglu_limit, use_ue8m0, packed_ue8m0, out, out_scales)
    if key is not None:
        found = _fast.get(key)
        if found is not None:
            entry, y_alloc, sf_alloc = found
            try:
                y = out if y_alloc is None else x.new_empty(y_alloc[0], dtype=y_alloc[2])
                sf = out_scales if sf_alloc is None else x.new_empty_strided(sf_alloc[0], sf_alloc[1],
                                                                             dtype=sf_alloc[2])
            except (AttributeError, TypeError):  # not a torch tensor: the full path says what x should be
                pass
            else:
                if masked_m is None:
                    if entry.check(x, y, sf) and entry.run((x.data_ptr(), y.data_ptr(), sf.data_ptr()), stream):
                        return y, sf
                elif entry.check(x, masked_m, y, sf) and entry.run(
                        (x.data_ptr(), masked_m.data_ptr(), y.data_ptr(), sf.data_ptr()), stream):
                    return y, sf
    return _silu_mul_quant(x, masked_m, swiglu_limit, use_ue8m0, packed_ue8m0, out, out_scales, stream, None, key)


def _register(key: tuple, x, masked_m, out, out_scales, allocated: tuple[bool, bool], launcher, params) -> None:
    """Remembers the launch the full path just made (dgx.fastpath), with what it allocated."""
    tensors = (x, out, out_scales) if masked_m is None else (x, masked_m, out, out_scales)
    if not fastpath.torch_tensors(*tensors):
        return
    y_alloc = (tuple(out.shape), tuple(out.stride()), out.dtype) if allocated[0] else None
    sf_alloc = (tuple(out_scales.shape), tuple(out_scales.stride()), out_scales.dtype) if allocated[1] else None
    y_index = len(tensors) - 2
    # Outputs the caller passes must not overlap x or each other (checked by the full path): re-checked on new
    # addresses. Those the call allocates are fresh memory.
    disjoint = [(0, y_index)] if y_alloc is None else []
    if sf_alloc is None:
        disjoint.append((0, y_index + 1))
        if y_alloc is None:
            disjoint.append((y_index, y_index + 1))
    entries: dict = {}
    fastpath.register(entries, key, tensors, _Launch(launcher), params, interface=INTERFACE, disjoint=disjoint)
    entry = entries.get(key)
    if entry is not None:
        if len(_fast) >= fastpath.CACHE_LIMIT:
            _fast.clear()
        _fast[key] = (entry, y_alloc, sf_alloc)


class _Launch:
    """What dgx.fastpath.register takes as a plan: the kernel's launcher."""

    __slots__ = ("launcher",)

    def __init__(self, launcher: runtime.Launcher):
        self.launcher = launcher


def _silu_mul_quant(x, masked_m, swiglu_limit, use_ue8m0, packed_ue8m0, out, out_scales, stream, config,
                    fast_key: tuple | None = None):
    """silu_mul_quant with the kernel's config given (`config`, for device A/B runs: it must match the clamp and the
    scales asked for) or chosen by the heuristic (None). `fast_key`: the call's fast-path key, under which its launch
    is remembered (None: not remembered)."""
    limit = _limit(swiglu_limit)
    ue8m0 = _flag(use_ue8m0, "use_ue8m0")
    packed = _flag(packed_ue8m0, "packed_ue8m0")
    if packed and not ue8m0:
        raise ValueError("packed_ue8m0: packing needs UE8M0 scales (use_ue8m0=True)")
    masked = masked_m is not None
    named = [(x, "x")] + ([(masked_m, "masked_m")] if masked else [])
    views = views_on_one_device(named)
    xv = views[0]
    groups, rows, inter, x_row, x_group = _input(xv, masked)
    blocks = inter // BLOCK
    if masked:
        mv = views[1]
        expect_dtype(mv, "masked_m", "int32")
        expect_shape(mv, "masked_m", (groups,))
        if groups > 1 and mv.strides[0] != 1:
            raise ValueError(f"masked_m: expected a contiguous [G] tensor; got strides {mv.strides}")
        if groups > MAX_GROUPS:
            raise ValueError(f"x: at most {MAX_GROUPS} groups; got {groups}")
    if rows * blocks > _INT32_LIMIT:
        raise ValueError(f"x: rows x I / 128 must stay below 2**31; got {rows} rows of I = {inter}")
    device = xv.device
    lead = (groups,) if masked else ()
    y_shape = lead + (rows, inter)
    sf_shape, sf_strides = scale_layout(groups if masked else None, rows, blocks, packed)
    mode = "packed_ue8m0" if packed else ("ue8m0" if ue8m0 else "fp32")
    # The outputs the caller gave are checked before dgx allocates the others.
    if out is not None:
        yv = _output(as_view(out, "out"), device, y_shape, masked)
    if out_scales is not None:
        sv = as_view(out_scales, "out_scales")
        _on_device(sv, "out_scales", device)
        sf_ld, sf_group = _scales(sv, sf_shape, packed, masked)
    allocated = (out is None, out_scales is None)
    if out is None:
        out = _allocate(x, y_shape, None, "float8_e4m3fn", device, "out")
        yv = _output(as_view(out, "out"), device, y_shape, masked)
    if out_scales is None:
        out_scales = _allocate(x, sf_shape, sf_strides, "int32" if packed else "float32", device, "out_scales")
        sv = as_view(out_scales, "out_scales")
        sf_ld, sf_group = _scales(sv, sf_shape, packed, masked)
    y_strides = yv.strides if masked else (0,) + tuple(yv.strides)
    for v, name in ((yv, "out"), (sv, "out_scales")):
        if _overlaps(v, xv):
            raise ValueError(f"{name}: must not overlap x (the kernel reads x while it writes {name})")
    if _overlaps(yv, sv):
        raise ValueError("out_scales: must not overlap out")
    if rows == 0 or groups == 0:
        return out, out_scales
    if config is None:
        config = choose_config(rows, blocks, groups, get_num_sms(device), limit is not None, mode)
    elif config.clamp != (limit is not None) or config.scale_mode != mode:
        raise ValueError(f"config: expected clamp={limit is not None} and scale_mode={mode!r} for these arguments; "
                         f"got {config}")
    grid = config.grid(rows, blocks, groups)
    mptr = views[1].ptr if masked else 0
    key = (config, device, xv.ptr, yv.ptr, sv.ptr, mptr, x_row, x_group, y_strides[1], y_strides[0], sf_ld, sf_group,
           rows, blocks, limit)
    params = _params.get(key)
    if params is None:
        params = INTERFACE.pack(x=xv.ptr, y=yv.ptr, sf=sv.ptr, masked_m=mptr, x_row=x_row, x_group=x_group,
                                y_row=y_strides[1], y_group=y_strides[0], sf_ld=sf_ld, sf_group=sf_group, rows=rows,
                                blocks=blocks, limit=limit or 0.0)
        if len(_params) >= 512:
            _params.clear()
        _params[key] = params
    launching = launcher(config, device, grid)
    launching.launch(resolve_stream(stream, device), params)
    if fast_key is not None:
        _register(fast_key, x, masked_m, out, out_scales, allocated, launching, params)
    return out, out_scales
