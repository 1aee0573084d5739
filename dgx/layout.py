"""Scale-factor layouts. The kernels load the per-row A scales (SFA, [M, ceil(K/128)]) with TMA in the
TMA-aligned M-major layout of get_mn_major_tma_aligned_tensor (what dgx's per_token_cast_to_fp8 makes),
used as it is. Other layouts of torch tensors are copied into it on the GPU. The K-grouped GEMM also
takes its scales in DeepGEMM's layout, the transpose of that one (k_grouped_scales_view). The torch-based
helpers import torch lazily."""

from __future__ import annotations

from dataclasses import dataclass

from .intmath import ceil_div, round_up
from .tensors import TensorView


@dataclass(frozen=True)
class SfaTma:
    """The TMA view of M-major SFA: `kb` rows of `m` floats, rows `row_stride` bytes apart."""

    m: int
    kb: int
    row_stride: int


def sfa_tma_layout(v: TensorView) -> SfaTma | None:
    """The TMA view of SFA [M, KB] (or [G, M, KB] for masked groups: the groups' k-blocks one after
    another) float32 if it is M-major with 16-byte aligned rows, else None (the caller converts)."""
    if v.ndim == 3:
        g, m, kb = v.shape
        sg, sm, sk = v.strides
        if kb == 1:
            sk = sg if g > 1 else get_tma_aligned_size(m, 4)
        elif g > 1 and sg != kb * sk:
            return None  # the groups' rows must follow one another
        kb_rows = g * kb
    else:
        m, kb = v.shape
        sm, sk = v.strides
        if kb == 1:
            sk = get_tma_aligned_size(m, 4)
        kb_rows = kb
    if v.ptr % 16 or not (m == 1 or sm == 1) or (sk * 4) % 16 or sk < m:
        return None
    return SfaTma(m, kb_rows, sk * 4)


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """`x` rounded up so that x * element_size is a multiple of 16 bytes (what TMA wants of a row)."""
    if x < 0 or element_size not in (1, 2, 4, 8):
        raise ValueError(f"get_tma_aligned_size: expected x >= 0 and element_size in 1/2/4/8; got {x}, {element_size}")
    align = 16 // element_size
    return round_up(x, align)


def get_mn_major_tma_aligned_tensor(sf):
    """The [.., MN, K'] float32 scales `sf` copied (on its device) into an MN-major layout whose MN
    dimension is padded to 16 bytes: the result has sf's shape and strides (1, aligned MN)."""
    import torch

    if sf.dtype != torch.float32 or sf.dim() not in (2, 3):
        raise TypeError(f"sf: expected a 2-D or 3-D float32 tensor; got {sf.dim()}-D {sf.dtype}")
    batched = sf.dim() == 3
    x = sf if batched else sf.unsqueeze(0)
    g, mn, kk = x.shape
    aligned = get_tma_aligned_size(mn, 4)
    if x.stride(1) == 1 and x.stride(2) == aligned and (x.stride(0) == aligned * kk or g == 1):
        return sf
    out = torch.empty((g, kk, aligned), device=sf.device, dtype=torch.float32)
    out = out.transpose(1, 2)[:, :mn, :]
    out.copy_(x)
    return out if batched else out.squeeze(0)


def transform_sf_into_required_layout(sf, mn: int, k: int, recipe=(1, 128, 128), num_groups=None, is_sfa=None):
    """Scales in the layout dgx's kernels read best: per-row (1x128) scales MN-major and TMA-aligned;
    per-block (128x128) scales unchanged (contiguous). Accepts what DeepGEMM's function of the same name
    accepts for FP32 scales on Hopper."""
    import torch

    if sf.dtype != torch.float32:
        raise TypeError(f"sf: expected float32 scales (Hopper recipe); got {sf.dtype}")
    rows = sf.shape[-2]
    if rows == mn:  # one scale per row per 128 of K
        return get_mn_major_tma_aligned_tensor(sf)
    if rows == ceil_div(mn, 128):
        return sf.contiguous()
    raise ValueError(f"sf: expected {mn} or {ceil_div(mn, 128)} rows for mn = {mn}; got shape {tuple(sf.shape)}")


def k_grouped_scales_view(v: TensorView, rows: int, kb: int, name: str, dim: str = "M") -> tuple[TensorView, bool]:
    """The per-row scales of a K-grouped operand with `rows` rows (M for SFA, N for SFB; `dim` names it)
    over `kb` k-blocks in all (sum(ks) / 128: a group with k_g = 0 has none) as the [rows, kb] view the
    kernel reads; and whether `v` came in DeepGEMM's layout (the view is then its transpose). No copy.

    Two layouts are accepted:

    - dgx's: shape (rows, kb), one row of scales per row of the operand, the groups' k-blocks one after
      another (M-major and TMA-aligned, as get_mn_major_tma_aligned_tensor makes it, is read as it is).
    - DeepGEMM's: shape (kb, rows), row r holding the `rows` scales of k-block r, the groups' k-blocks
      stacked along the first dimension. Its transposed view is M-major: a contiguous tensor has row
      stride `rows` there, what the kernel reads as it is when rows * 4 is a multiple of 16 bytes.

    When rows == kb (> 1) the two shapes coincide and the strides decide: a first dimension of stride 1
    (M-major, the layout dgx documents and its helpers make) is dgx's layout; anything else, a contiguous
    tensor in particular (what DeepGEMM's callers pass), is DeepGEMM's. A row-major [X, X] tensor meant
    in dgx's layout is therefore misread: pass it M-major (get_mn_major_tma_aligned_tensor).

    Raises ValueError naming `name` and both accepted shapes when `v` has neither.
    """
    shape = tuple(v.shape)
    if shape == (rows, kb) and (rows != kb or rows <= 1 or v.strides[0] == 1):
        return v, False
    if shape == (kb, rows):
        return TensorView(v.ptr, (rows, kb), (v.strides[1], v.strides[0]), v.dtype, v.device, v.device_kind), True
    raise ValueError(
        f"{name}: expected shape ({rows}, {kb}) (dgx's layout: [{dim}, sum(ks) / 128]) or ({kb}, {rows}) "
        f"(DeepGEMM's: [sum(ks) / 128, {dim}], the k-blocks of all groups stacked); got {shape}"
    )
