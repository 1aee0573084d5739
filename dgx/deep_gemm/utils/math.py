"""DeepGEMM's ``deep_gemm.utils.math`` on dgx: integer helpers, UE8M0 scales and the quantisation helpers DeepGEMM's
tests and engines use, in plain torch (any device, CPU included).

FP8: ``per_token_cast_to_fp8``, ``per_channel_cast_to_fp8``, ``per_block_cast_to_fp8``,
``per_custom_dims_cast_to_fp8`` (scales amax / 448, rounded up to powers of two with ``use_ue8m0``). FP4 (e2m1, two
values a byte, the low nibble first; what sm_100 kernels read): ``per_token_cast_to_fp4``, ``transpose_packed_fp4``,
``cast_back_from_fp4``; dgx has no FP4 kernels (sm_100 only), these only make and read such tensors.
"""

from __future__ import annotations

import torch

from ...ue8m0 import ceil_to_ue8m0, pack_ue8m0_to_int
from ...ue8m0 import unpack_ue8m0_from_int as _unpack_ue8m0

__all__ = [
    "ceil_div",
    "align",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "unpack_ue8m0_from_int",
    "per_token_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp4",
    "transpose_packed_fp4",
    "cast_back_from_fp4",
]

_FP8_MAX = 448.0  # the largest finite float8_e4m3fn
_FP4_MAX = 6.0  # the largest e2m1 value
# The e2m1 magnitudes by code 0..7, and the midpoints between neighbours: a magnitude rounds to the code of the
# interval it falls in, a midpoint itself to the lower code.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def _expect_int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an int >= {low}; got {value!r}")
    return value




def ceil_div(x: int, y: int) -> int:
    """x / y rounded up."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """x rounded up to a multiple of y."""
    return ceil_div(x, y) * y


def unpack_ue8m0_from_int(packed_sf):
    """int32 [..., W] of packed exponent bytes -> float32 [..., 4W] (the inverse of pack_ue8m0_to_int)."""
    return _unpack_ue8m0(packed_sf)


def _scales_of(amax, use_ue8m0: bool):
    sf = amax / _FP8_MAX
    return ceil_to_ue8m0(sf) if use_ue8m0 else sf


def _expect_2d(x, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
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
    xp = torch.nn.functional.pad(x.float(), (0, blocks * gran_k - k)).view(m, blocks, gran_k)
    sf = _scales_of(xp.abs().amax(dim=2).clamp(min=1e-4), use_ue8m0)
    q = (xp * (1.0 / sf).unsqueeze(2)).to(torch.float8_e4m3fn).view(m, blocks * gran_k)[:, :k].contiguous()
    if use_packed_ue8m0:
        sf = pack_ue8m0_to_int(torch.nn.functional.pad(sf, (0, align(blocks, 4) - blocks)))
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
    return (xv * (1.0 / sf).unsqueeze(1)).to(torch.float8_e4m3fn).view(k, n), sf


def per_block_cast_to_fp8(x, use_ue8m0, gran_k=128):
    """x [N, K] -> (float8_e4m3fn [N, K], scales [ceil(N/gran_k), ceil(K/gran_k)] float32): one scale per
    gran_k x gran_k block."""
    _expect_2d(x)
    _expect_int(gran_k, "gran_k", 1)
    n, k = x.shape
    nb, kb = ceil_div(n, gran_k), ceil_div(k, gran_k)
    xp = torch.nn.functional.pad(x.float(), (0, kb * gran_k - k, 0, nb * gran_k - n)).view(nb, gran_k, kb, gran_k)
    sf = _scales_of(xp.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4), use_ue8m0)
    q = (xp * (1.0 / sf)).to(torch.float8_e4m3fn).view(nb * gran_k, kb * gran_k)[:n, :k].contiguous()
    return q, sf.view(nb, kb)


def per_custom_dims_cast_to_fp8(x, dims, use_ue8m0):
    """x -> (float8_e4m3fn like x, scales): one scale per index of the dimensions `dims` (the amax over all
    others), returned squeezed."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch tensor; got {type(x).__name__}")
    keep = {d % x.dim() for d in dims} if x.dim() else set()
    reduce = tuple(i for i in range(x.dim()) if i not in keep)
    amax = x.abs().float().amax(dim=reduce, keepdim=True) if reduce else x.abs().float()
    sf = _scales_of(amax.clamp(min=1e-4), use_ue8m0)
    return (x.float() * (1.0 / sf)).to(torch.float8_e4m3fn), sf.squeeze()


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """uint8 codes (sign in bit 3, magnitude code in bits 0..2) of float values already scaled into [-6, 6]."""
    midpoints = torch.tensor(_E2M1_MIDPOINTS, dtype=torch.float32, device=x.device)
    magnitude = torch.bucketize(x.abs().float().contiguous(), midpoints).to(torch.uint8)  # count of midpoints below
    negative = (x < 0) & (magnitude != 0)  # no negative zero
    return magnitude | (negative.to(torch.uint8) << 3)


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [R, C] (C even) -> int8 [R, C/2]: code 2j in the low nibble of byte j, code 2j + 1 in the high."""
    pairs = codes.view(codes.shape[0], -1, 2)
    return (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).view(torch.int8)


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """int8 [R, C/2] -> uint8 codes [R, C] (the inverse of _pack_nibbles)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int8 or packed.dim() != 2:
        got = f"{packed.dtype} {tuple(packed.shape)}" if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"packed: expected a 2-D int8 tensor of packed FP4 values; got {got}")
    raw = packed.view(torch.uint8)
    return torch.stack((raw & 0x0F, raw >> 4), dim=-1).view(raw.shape[0], raw.shape[1] * 2)


def per_token_cast_to_fp4(x, use_ue8m0, gran_k=128, use_packed_ue8m0=False):
    """x [M, K] (K even) -> (int8 [M, K/2] packed e2m1 values, scales): one scale per row per gran_k columns,
    amax / 6 (rounded up to a power of two with use_ue8m0), float32 [M, ceil(K/gran_k)]; with use_packed_ue8m0
    (needs use_ue8m0) packed four to an int32, the count padded to a multiple of 4 with 1.0."""
    _expect_2d(x)
    _expect_int(gran_k, "gran_k", 1)
    m, k = x.shape
    if k % 2:
        raise ValueError(f"x: expected an even number of columns (two FP4 values a byte); got shape {tuple(x.shape)}")
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError("use_packed_ue8m0: packing needs UE8M0 scales (use_ue8m0=True)")
    blocks = ceil_div(k, gran_k)
    xp = torch.nn.functional.pad(x.float(), (0, blocks * gran_k - k)).view(m, blocks, gran_k)
    sf = xp.abs().amax(dim=2).clamp(min=1e-4) / _FP4_MAX
    sf = ceil_to_ue8m0(sf) if use_ue8m0 else sf
    codes = _e2m1_codes(xp * (1.0 / sf).unsqueeze(2)).view(m, blocks * gran_k)[:, :k]
    packed = _pack_nibbles(codes.contiguous())
    if use_packed_ue8m0:
        sf = pack_ue8m0_to_int(torch.nn.functional.pad(sf, (0, align(blocks, 4) - blocks), value=1.0))
    return packed, sf


def transpose_packed_fp4(a):
    """int8 [M, N/2] packed FP4 values (M even) -> int8 [N, M/2]: the same values transposed, packed again."""
    codes = _unpack_nibbles(a)
    if codes.shape[0] % 2:
        raise ValueError(f"a: expected an even number of rows (they become packed pairs); got shape {tuple(a.shape)}")
    return _pack_nibbles(codes.t().contiguous())


def cast_back_from_fp4(packed, sf, gran_k=128, use_packed_ue8m0=False):
    """The float32 values [M, K] of packed FP4 values int8 [M, K/2] with their per-row scales (float32
    [M, ceil(K/gran_k)], or packed UE8M0 int32 with use_packed_ue8m0)."""
    _expect_int(gran_k, "gran_k", 1)
    codes = _unpack_nibbles(packed)
    if use_packed_ue8m0:
        sf = _unpack_ue8m0(sf)
    values = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=codes.device)[(codes & 0x07).long()]
    values = torch.where((codes & 0x08) != 0, -values, values)
    columns = torch.arange(codes.shape[1], device=codes.device) // gran_k
    return values * sf[:, columns].float()
