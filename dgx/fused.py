"""The fused epilogues of the FP8 GEMMs, as the entry points take them (ptx/fp8_gemm_fused.cuh does the work):

- ``d=(d_fp8, d_sf)``: FP8 e4m3 output quantised per row per 128 output channels, with its scales written in the
  layout the next FP8 GEMM reads as its A scales (TMA-aligned M-major FP32, UE8M0-valued with ``use_ue8m0=True``,
  or UE8M0 packed four to an int32 when d_sf is int32);
- ``swiglu=True``: silu(gate) * up from a gate-up weight converted once by :func:`prepare_gate_up`, output
  [M, N/2]; ``swiglu_limit=L`` clamps gate <= L and -L <= up <= L first;
- ``row_weight`` (FP32, one per output row) multiplies the FP8 outputs' rows before quantisation; ``alpha`` (a
  float) scales any output, BF16 too.

:func:`fused_output` checks these arguments (before anything launches) and says what the kernel needs.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

from .checks import expect_dtype, expect_shape, expect_tma_rows
from .fastpath import number_key
from .intmath import ceil_div
from .kernels.fp8_epilogue import GROUP, Epilogue
from .layout import sfa_tma_layout
from .tensors import TensorView, as_view, require_cuda

__all__ = ["GateUpWeight", "prepare_gate_up"]


class GateUpWeight(tuple):
    """(B, SFB) of a gate-up weight in the SwiGLU epilogue's row order, as :func:`prepare_gate_up` returns it: pass it
    as the GEMM's ``b`` with ``swiglu=True``."""

    __slots__ = ()


# id(B) -> weak reference to B for every B prepare_gate_up made, so that the pair repacked by the caller (b2, sfb2)
# is known too. A B that is not the very tensor returned (a view, a copy) is not: the caller passes the result as is.
_prepared: dict[int, weakref.ref] = {}


def _remember(b) -> None:
    key = id(b)
    try:
        _prepared[key] = weakref.ref(b, lambda _ref, key=key: _prepared.pop(key, None))
    except TypeError:  # an object without weak references: only the GateUpWeight pair marks it
        pass


def is_prepared(b_pair) -> bool:
    """Whether `b_pair` is a gate-up weight from prepare_gate_up (the pair itself, or one holding its B)."""
    if isinstance(b_pair, GateUpWeight):
        return True
    try:
        b = b_pair[0]
    except (TypeError, IndexError, KeyError):
        return False
    ref = _prepared.get(id(b))
    return ref is not None and ref() is b


def prepare_gate_up(b, sfb) -> GateUpWeight:
    """A standard gate-up weight in the order the SwiGLU epilogue reads it; once, at load time.

    Args:
        b: float8_e4m3fn [2I, K] (or [G, 2I, K] for the M-grouped GEMMs): rows 0..I-1 the gate projection, I..2I-1
           the up projection; I a multiple of 128.
        sfb: float32 [2I/128, ceil(K/128)] (or [G, ...]): its 128x128 block scales.

    Returns (b2, sfb2) as a :class:`GateUpWeight`: the same rows and scales, in units of 256 rows (the gate rows of
    128 channels, then the up rows of the same channels), so that one CTA computes both halves of its 128 output
    channels. Nothing is requantised: b2 and sfb2 are a permutation of b's 128-row blocks and their scales. Needs
    torch tensors (any device).
    """
    import torch

    for t, name in ((b, "b"), (sfb, "sfb")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"prepare_gate_up: {name}: expected a torch tensor; got {type(t).__name__}")
    if b.dtype != torch.float8_e4m3fn:
        raise TypeError(f"prepare_gate_up: b: expected dtype float8_e4m3fn; got {b.dtype}")
    if sfb.dtype != torch.float32:
        raise TypeError(f"prepare_gate_up: sfb: expected dtype float32 (128x128 block scales); got {sfb.dtype}")
    if b.dim() not in (2, 3) or sfb.dim() != b.dim():
        raise ValueError(f"prepare_gate_up: expected b [2I, K] or [G, 2I, K] and sfb of the same rank; got shapes "
                         f"{tuple(b.shape)} and {tuple(sfb.shape)}")
    rows, k = b.shape[-2], b.shape[-1]
    if rows % (2 * GROUP) or rows == 0:
        raise ValueError(f"prepare_gate_up: b: expected 2I rows with I a multiple of {GROUP} (gate, then up); got "
                         f"{rows} rows")
    lead = tuple(b.shape[:-2])
    units = rows // (2 * GROUP)
    kb = ceil_div(k, 128)
    if tuple(sfb.shape) != lead + (rows // GROUP, kb):
        raise ValueError(f"prepare_gate_up: sfb: expected shape {lead + (rows // GROUP, kb)} (one scale per 128x128 "
                         f"block of b); got {tuple(sfb.shape)}")
    raw = b.contiguous().view(torch.uint8).reshape(lead + (2, units, GROUP, k))
    b2 = raw.transpose(-4, -3).contiguous().reshape(lead + (rows, k)).view(torch.float8_e4m3fn)
    sfb2 = sfb.contiguous().reshape(lead + (2, units, kb)).transpose(-3, -2).contiguous().reshape(
        lead + (rows // GROUP, kb))
    _remember(b2)
    return GateUpWeight((b2, sfb2))


@dataclass(frozen=True)
class FusedOut:
    """What a fused call hands the kernel: its epilogue, the output (FP8 or BF16) and the epilogue's parameters."""

    epilogue: Epilogue
    d: TensorView  # the output the kernel's D map covers
    sf_out: int = 0
    ld_sf: int = 0
    sf_group_stride: int = 0
    row_weight: int = 0
    alpha: float = 1.0
    swiglu_limit: float = 0.0

    def operands(self) -> dict:
        """The epilogue's members of dgx.launch.Operands."""
        return dict(sf_out=self.sf_out, ld_sf=self.ld_sf, sf_group_stride=self.sf_group_stride,
                    row_weight=self.row_weight, alpha=self.alpha, swiglu_limit=self.swiglu_limit)


def wants_fused(d, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0) -> bool:
    """Whether a call asks for a fused epilogue (else the plain path runs, unchanged)."""
    return (isinstance(d, (tuple, list)) or alpha is not None or row_weight is not None or swiglu is not False
            or swiglu_limit is not None or use_ue8m0 is not False)


def fast_options(d, b, alpha, row_weight, swiglu, swiglu_limit, use_ue8m0):
    """For the per-call fast path (dgx.fastpath) of a fused call: (the options as a hint key, the output tensors in
    an entry's order: d or d_fp8, d_sf, then row_weight if given), or None where the call takes the full path (an
    option of another type, a list for d, swiglu=True with a b prepare_gate_up did not make)."""
    if (swiglu is not True and swiglu is not False) or (use_ue8m0 is not True and use_ue8m0 is not False):
        return None
    if swiglu and not is_prepared(b):
        return None
    alpha_key, limit_key = number_key(alpha), number_key(swiglu_limit)
    if alpha_key is False or limit_key is False:
        return None
    if type(d) is tuple:
        if len(d) != 2:
            return None
        outs = d if row_weight is None else (d[0], d[1], row_weight)
    else:
        outs = (d,) if row_weight is None else (d, row_weight)
    return (type(d) is tuple, alpha_key, row_weight is None, swiglu, limit_key, use_ue8m0), outs


def output_tensor(d):
    """The tensor of `d` whose view the entry point takes first: d itself, or d_fp8 of a (d_fp8, d_sf) pair."""
    if not isinstance(d, (tuple, list)):
        return d
    if len(d) != 2:
        raise TypeError(f"d: expected a tensor, or a (d_fp8, d_sf) pair for the FP8 output; got {len(d)} items")
    return d[0]


def _float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float; got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite float; got {value}")
    return value


def fused_output(d, b_pair, *, rows: tuple[int, ...], n: int, device: int, masked: bool, alpha=None,
                 row_weight=None, swiglu=False, swiglu_limit=None, use_ue8m0=False) -> FusedOut:
    """Checks a fused call's output and epilogue arguments; raises TypeError/ValueError naming what is wrong.

    `rows`: the output's leading shape ((M,), or (G, M_max) for masked groups); `n`: B's rows (N); `b_pair`: the
    call's `b`, which SwiGLU needs from prepare_gate_up."""
    if not isinstance(swiglu, bool):
        raise TypeError(f"swiglu: expected a bool; got {type(swiglu).__name__}")
    if not isinstance(use_ue8m0, bool):
        raise TypeError(f"use_ue8m0: expected a bool; got {type(use_ue8m0).__name__}")
    fp8 = isinstance(d, (tuple, list))
    if not fp8:
        for value, name in ((swiglu or None, "swiglu=True"), (row_weight, "row_weight"), (swiglu_limit, "swiglu_limit"),
                            (use_ue8m0 or None, "use_ue8m0=True")):
            if value is not None:
                raise ValueError(f"{name} needs the FP8 output: d as a (d_fp8, d_sf) pair; got a single tensor d")
    alpha_value = 1.0 if alpha is None else _float(alpha, "alpha")
    limit = 0.0
    if swiglu_limit is not None:
        if not swiglu:
            raise ValueError("swiglu_limit: clamps SwiGLU's gate and up; pass swiglu=True with it")
        limit = _float(swiglu_limit, "swiglu_limit")
        if limit <= 0:
            raise ValueError(f"swiglu_limit: expected a positive float; got {limit}")
    if swiglu and not is_prepared(b_pair):
        raise ValueError(
            "b: swiglu=True reads the gate-up weight in its own row order: pass b as dgx.prepare_gate_up(B, SFB) "
            "returned it (made once at load time from the standard [2I, K] weight, gate rows then up rows)")
    if not fp8:
        dv = as_view(d, "d")
        require_cuda(dv, "d", device)
        expect_dtype(dv, "d", "bfloat16")
        expect_shape(dv, "d", rows + (n,))
        expect_tma_rows(dv, "d")
        return FusedOut(Epilogue(fp8=False, alpha=True), dv, alpha=alpha_value)

    if len(d) != 2:
        raise TypeError(f"d: expected a tensor, or a (d_fp8, d_sf) pair for the FP8 output; got {len(d)} items")
    dv, sfv = as_view(d[0], "d_fp8"), as_view(d[1], "d_sf")
    require_cuda(dv, "d_fp8", device)
    require_cuda(sfv, "d_sf", device)
    multiple = 2 * GROUP if swiglu else GROUP
    if n % multiple:
        what = "whole units of 128 gate + 128 up rows" if swiglu else "whole 128-channel groups of the FP8 output"
        raise ValueError(f"B: N must be a multiple of {multiple} ({what}); got N = {n}")
    n_out = n // 2 if swiglu else n
    expect_dtype(dv, "d_fp8", "float8_e4m3fn")
    expect_shape(dv, "d_fp8", rows + (n_out,))
    expect_tma_rows(dv, "d_fp8")
    if sfv.dtype == "int32":
        fmt, cols = "packed", ceil_div(n_out // GROUP, 4)
    elif sfv.dtype == "float32":
        fmt, cols = ("ue8m0" if use_ue8m0 else "fp32"), n_out // GROUP
    else:
        raise TypeError(f"d_sf: expected dtype float32 (or int32 for UE8M0 packed four to a word); got {sfv.dtype}")
    expect_shape(sfv, "d_sf", rows + (cols,))
    layout = sfa_tma_layout(sfv)
    if layout is None:
        raise ValueError(
            f"d_sf: expected the layout the next FP8 GEMM reads as its A scales: M-major with TMA-aligned columns "
            f"(strides (1, S) with S >= rows and S a multiple of 4{'; masked: [G, M_max, cols] with the groups one after another' if masked else ''}, "
            f"base 16-byte aligned; e.g. get_mn_major_tma_aligned_tensor's); got strides {sfv.strides}")
    ld_sf = sfv.strides[-1] if cols > 1 else 0
    group_stride = sfv.strides[0] if masked else 0
    rw = 0
    if row_weight is not None:
        wv = as_view(row_weight, "row_weight")
        require_cuda(wv, "row_weight", device)
        expect_dtype(wv, "row_weight", "float32")
        expect_shape(wv, "row_weight", rows)
        if wv.strides != _contiguous(rows):
            raise ValueError(f"row_weight: expected a contiguous tensor of shape {rows}; got strides {wv.strides}")
        if wv.ptr % 4:
            raise ValueError(f"row_weight: expected a 4-byte aligned address; got 0x{wv.ptr:x}")
        rw = wv.ptr
    epilogue = Epilogue(fp8=True, swiglu=swiglu, clamp=swiglu_limit is not None, row_weight=row_weight is not None,
                        alpha=alpha is not None, scale_format=fmt)
    return FusedOut(epilogue, dv, sfv.ptr, ld_sf, group_stride, rw, alpha_value, limit)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= size
    return tuple(reversed(strides))

