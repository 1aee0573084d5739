"""UE8M0 scale factors: scales that are powers of two, stored as their 8-bit biased exponent (the float32 bits
``e << 23``, value 2^(e - 127)), and DeepGEMM's packed form of them, four exponent bytes to an int32.

Engines quantise with such scales on Hopper since DeepSeek-V3.1 (``use_ue8m0``). dgx's kernels read FP32 scales:
UE8M0-valued FP32 scales are read as they are; packed int32 scales are unpacked on the GPU by one small kernel
(ptx/ue8m0.cuh) into the FP32 layout the GEMMs read (:func:`unpack_scales`). The torch helpers here work on any
device (CPU too). Imports torch.
"""

from __future__ import annotations

import torch

from .intmath import ceil_div
from .layout import get_tma_aligned_size

__all__ = [
    "ceil_to_ue8m0",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "pack_ue8m0_to_int",
    "unpack_scales",
    "unpack_ue8m0_from_int",
]

_EXP_MIN, _EXP_MAX = 1, 254  # the normal float32 exponents: 2^-126 .. 2^127


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """The smallest power of two at or above |x|, elementwise, as float32, within the normal float32 range
    [2^-126, 2^127] (0 and values below 2^-126 give 2^-126)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch tensor; got {type(x).__name__}")
    bits = x.abs().float().contiguous().view(torch.int32)
    exponent = bits >> 23  # the sign bit is clear
    inexact = (bits & 0x7FFFFF) != 0  # not a power of two yet: round the exponent up
    exponent = torch.where(inexact, exponent + 1, exponent).clamp(_EXP_MIN, _EXP_MAX)
    return (exponent << 23).view(torch.float32).view(x.shape)


def _exponent_bytes(sf: torch.Tensor, name: str) -> torch.Tensor:
    """The biased exponents of float32 UE8M0-valued scales, as int32 (mantissa and sign bits dropped)."""
    if not isinstance(sf, torch.Tensor) or sf.dtype != torch.float32:
        got = sf.dtype if isinstance(sf, torch.Tensor) else type(sf).__name__
        raise TypeError(f"{name}: expected float32 scales; got {got}")
    return (sf.contiguous().view(torch.int32) >> 23) & 0xFF


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """float32 UE8M0-valued scales [..., K'] (K' a multiple of 4) -> int32 [..., K'/4]: element [..., p] holds the
    exponent bytes of scales 4p .. 4p + 3, the first in the lowest byte. Every value must be a non-negative power
    of two (or 0): checked, which reads the tensor back (a GPU sync for a CUDA tensor)."""
    exponents = _exponent_bytes(x, "x")
    if x.dim() == 0 or x.shape[-1] % 4:
        raise ValueError(f"x: expected a last dimension that is a multiple of 4; got shape {tuple(x.shape)}")
    bits = x.contiguous().view(torch.int32)
    if bool(((bits < 0) | ((bits & 0x7FFFFF) != 0)).any()):
        raise ValueError("x: expected non-negative powers of two (UE8M0 values, e.g. from ceil_to_ue8m0); some are not")
    # Four bytes in a row, read as one little-endian word: the first scale in the lowest byte.
    as_bytes = exponents.to(torch.uint8)
    as_bytes = as_bytes.as_strided((as_bytes.numel(),), (1,))
    return as_bytes.view(torch.int32).view(*x.shape[:-1], x.shape[-1] // 4)


def unpack_ue8m0_from_int(packed: torch.Tensor) -> torch.Tensor:
    """int32 [..., W] of packed exponent bytes -> float32 [..., 4W] (the inverse of pack_ue8m0_to_int; byte e
    becomes the float with bits e << 23, so 0 becomes 0.0)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
        got = packed.dtype if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"packed: expected an int32 tensor; got {got}")
    flat = packed.contiguous()
    flat = flat.as_strided((flat.numel(),), (1,))  # stride 1 even where a dimension of size 1 had another
    exponents = flat.view(torch.uint8).to(torch.int32).view(*packed.shape[:-1], 4 * packed.shape[-1])
    return (exponents << 23).view(torch.float32)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    """float32 UE8M0-valued scales [G?, MN, K'] -> packed int32 [G?, MN, ceil(K'/4)] in the MN-major TMA-aligned
    layout: strides (ceil(K'/4) x MN', 1, MN') with MN' = MN rounded up to 4 (16 bytes). Word [g, r, p] holds the
    exponent bytes of scales 4p .. 4p + 3 of row r (the first in the lowest byte; past K' the bytes are 0).
    Only the exponents are kept: pass scales that are powers of two (ceil_to_ue8m0).

    `psum_layout` (int32 [G'] prefix sums of a contiguous grouped A, DeepGEMM's argument) is accepted and checked;
    rows in the gaps between the groups are packed like the others (the GEMM does not use them)."""
    exponents = _exponent_bytes(sf, "sf")
    if sf.dim() not in (2, 3):
        raise ValueError(f"sf: expected a 2-D [MN, K'] or 3-D [G, MN, K'] tensor; got shape {tuple(sf.shape)}")
    if psum_layout is not None:
        if not isinstance(psum_layout, torch.Tensor) or psum_layout.dtype != torch.int32 or psum_layout.dim() != 1:
            raise TypeError("psum_layout: expected a 1-D int32 tensor of prefix sums (or None)")
        if sf.dim() != 2:
            raise ValueError(f"sf: with psum_layout, expected the 2-D scales of a contiguous A; got shape {tuple(sf.shape)}")
    batched = exponents if sf.dim() == 3 else exponents.unsqueeze(0)
    groups, mn, kk = batched.shape
    words = ceil_div(kk, 4)
    padded = torch.zeros((groups, mn, words * 4), dtype=torch.uint8, device=sf.device)
    padded[:, :, :kk] = batched.to(torch.uint8)
    row_major = padded.view(torch.int32)  # [G, MN, words]
    aligned = get_tma_aligned_size(mn, 4)
    out = torch.empty_strided((groups, mn, words), (words * aligned, 1, aligned), dtype=torch.int32, device=sf.device)
    out.copy_(row_major)
    return out if sf.dim() == 3 else out.squeeze(0)


def unpack_scales(packed: torch.Tensor, kblocks: int, *, row_major: bool = False, name: str = "sf") -> torch.Tensor:
    """Packed UE8M0 scales int32 [G?, R, ceil(kblocks/4)] (any strides) -> float32 [G?, R, kblocks], on the GPU with
    dgx's unpack kernel, on torch's current stream of the tensor's device. The result is in the TMA-aligned
    MN-major layout the GEMMs read per-row scales in (strides (kblocks x R', 1, R'), R' = R rounded up to 4), or
    row-major (contiguous) with `row_major` (the per-block B scales' layout). Bytes past `kblocks` in the last
    word are ignored. `name` names the tensor in errors."""
    from .kernels.ue8m0 import launch_unpack
    from .streams import resolve_stream

    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
        got = packed.dtype if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"{name}: expected packed UE8M0 scales as an int32 tensor; got {got}")
    if packed.dim() not in (2, 3):
        raise ValueError(f"{name}: expected 2-D [R, W] or 3-D [G, R, W] packed scales; got shape {tuple(packed.shape)}")
    if isinstance(kblocks, bool) or not isinstance(kblocks, int) or kblocks < 0:
        raise ValueError(f"kblocks: expected a non-negative int; got {kblocks!r}")
    if packed.shape[-1] != ceil_div(kblocks, 4):
        raise ValueError(
            f"{name}: expected {ceil_div(kblocks, 4)} packed words per row (four UE8M0 scales each, for {kblocks} "
            f"k-blocks); got shape {tuple(packed.shape)}"
        )
    if packed.device.type != "cuda":
        raise ValueError(f"{name}: expected a tensor in CUDA device memory; got one on {packed.device.type}")
    if any(s < 0 for s in packed.stride()):
        raise ValueError(f"{name}: negative strides are not supported; got {packed.stride()}")
    batched = packed if packed.dim() == 3 else packed.unsqueeze(0)
    groups, rows, _ = batched.shape
    if row_major:
        out = torch.empty((groups, rows, kblocks), dtype=torch.float32, device=packed.device)
    else:
        aligned = get_tma_aligned_size(rows, 4)
        out = torch.empty_strided((groups, rows, kblocks), (kblocks * aligned, 1, aligned), dtype=torch.float32,
                                  device=packed.device)
    if groups >= 65536:
        raise ValueError(f"{name}: at most 65535 groups; got {groups}")
    device = packed.device.index if packed.device.index is not None else torch.cuda.current_device()
    launch_unpack(batched.data_ptr(), tuple(batched.stride()), out.data_ptr(), tuple(out.stride()), groups, rows,
                  kblocks, device, resolve_stream(None, device))
    return out if packed.dim() == 3 else out.squeeze(0)
