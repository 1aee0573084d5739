"""The BF16 GEMM family's launch arguments: what a call hands the kernel (:class:`Bf16Operands`), turned into
tensor maps and packed by member name into the kernel's parameters (:data:`dgx.kernels.bf16_gemm.INTERFACE`)."""

from __future__ import annotations

from typing import NamedTuple

from .. import runtime
from ..runtime import Swizzle
from .bf16_gemm_config import BATCHED_LAYOUTS, INTERFACE, Bf16GemmConfig


class Bf16Operands(NamedTuple):
    """Addresses, extents (innermost first) and strides (in elements, of every dimension but the innermost) of the
    regions the tensor maps cover. A tuple, so that building one and looking it up per call stays cheap.

    - A: K-major [rows, K] as (K, rows); MN-major (M-major) [K, M] as (M, K); batched layouts (K, rows, groups).
    - B: K-major [groups x N, K] as (K, groups x N), batched layouts (K, N, groups); MN-major (N-major) as
      (N, K, groups).
    - D: [rows, N] as (N, rows); K-grouped and batched [groups, M, N] as (N, M, groups).
    """

    a: int
    a_dims: tuple[int, ...]
    a_strides: tuple[int, ...]
    b: int
    b_dims: tuple[int, ...]
    b_strides: tuple[int, ...]
    d: int
    d_dims: tuple[int, ...]
    d_strides: tuple[int, ...]
    m: int  # the kernel's m: rows (masked: per group; K-grouped: M of each group's output)
    grouped_layout: int = 0  # address of m_indices, the prefix sums, masked_m or the K-grouped groups' K
    groups: int = 1


def _map(dtype: str, address: int, dims: tuple[int, ...], strides: tuple[int, ...], itemsize: int,
         box: tuple[int, ...], swizzle: int):
    return runtime.encode_tensor_map(dtype, address, dims, tuple(s * itemsize for s in strides), box,
                                     Swizzle(swizzle if swizzle > 16 else 0))


def pack_operands(config: Bf16GemmConfig, ops: Bf16Operands) -> runtime.ParamPack:
    """The kernel's parameters for `ops`: tensor maps encoded, every member packed by name."""
    b_rank = 3 if config.major_b == "mn" or config.layout in BATCHED_LAYOUTS else 2
    if len(ops.b_dims) != b_rank:
        raise ValueError(f"operands: B's map has {len(ops.b_dims)} dimensions; a {config.major_b}-major B of "
                         f"{config.kernel_name} takes {b_rank}")
    tmap_a = _map("bfloat16", ops.a, ops.a_dims, ops.a_strides, 2, config.box("a"), config.swizzle("a"))
    tmap_b = _map("bfloat16", ops.b, ops.b_dims, ops.b_strides, 2, config.box("b"), config.swizzle("b"))
    box_d = (config.d_span // config.out_bytes, config.wg_rows) + ((1,) if len(ops.d_dims) == 3 else ())
    tmap_d = _map(config.out_dtype, ops.d, ops.d_dims, ops.d_strides, config.out_bytes, box_d, config.d_span)
    return INTERFACE.pack(
        tmap_a=tmap_a,
        tmap_b=tmap_b,
        tmap_d=tmap_d,
        m=ops.m,
        grouped_layout=ops.grouped_layout,
        num_groups=ops.groups,
        d_ptr=ops.d,
        ld_d=ops.d_strides[0],
    )
