"""DeepGEMM's ``deep_gemm.utils.layout`` on dgx: scale-factor layouts (TMA-aligned MN-major FP32, packed UE8M0) and
the contiguous layout's alignment."""

from __future__ import annotations

import torch

from ...intmath import ceil_div
from ...layout import get_mn_major_tma_aligned_tensor, get_tma_aligned_size
from ...ue8m0 import get_mn_major_tma_aligned_packed_ue8m0_tensor
from ..settings import (
    get_k_alignment_for_contiguous_layout,
    get_m_alignment_for_contiguous_layout,
    get_mk_alignment_for_contiguous_layout,
    get_theoretical_mk_alignment_for_contiguous_layout,
    set_mk_alignment_for_contiguous_layout,
)

__all__ = [
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
    "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
]

_FN = "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor"


def _k_sizes(grouped_layout: torch.Tensor, ks_cpu, k_alignment: int, use_psum_layout: bool) -> list[int]:
    """Every group's K: ks_cpu, or with use_psum_layout the prefix sums read back from grouped_layout (group g spans
    [align(end[g - 1], k_alignment), end[g]))."""
    if not use_psum_layout:
        return list(ks_cpu)
    ends = [int(e) for e in grouped_layout.tolist()]  # a sync for a GPU tensor: this helper runs in plain torch
    ks, previous_end = [], 0
    for g, end in enumerate(ends):
        start = ceil_div(previous_end, k_alignment) * k_alignment
        if end < start:
            raise ValueError(f"grouped_layout: prefix sums must not decrease past each group's aligned start; group {g} "
                             f"ends at {end} before it starts at {start}")
        ks.append(end - start)
        previous_end = end
    return ks


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, ks_cpu, gran_k, k_alignment,
                                                          use_psum_layout=False):
    """The K-grouped weight gradient's scales packed as UE8M0, four exponent bytes to an int32 along K, per group.

    sf: float32 UE8M0-valued scales [sum_g ceil(k_g / gran_k), MN] (the groups' rows one after another, as
    per_channel_cast_to_fp8 makes them per group); grouped_layout: int32 [G] (the groups' K, or their prefix-sum ends
    with use_psum_layout); ks_cpu: the groups' K as host ints (with use_psum_layout they only size the result, and
    may be None or empty: then it has DeepGEMM's upper bound of (rows + 3 G) / 4 rows); gran_k 32 or 128; k_alignment a
    multiple of 32 (where each group starts, with use_psum_layout).

    Returns int32 [sum_g ceil(k_g / (4 gran_k)), MN]: group g's word w, column c holds the exponents of its scale rows
    4w .. 4w + 3 in column c, the first in the lowest byte (0 past the group's rows). In plain torch (DeepGEMM runs a
    kernel); with use_psum_layout, grouped_layout is read back to the host."""
    if not isinstance(sf, torch.Tensor) or sf.dtype != torch.float32 or sf.dim() != 2:
        got = f"{sf.dtype} {tuple(sf.shape)}" if isinstance(sf, torch.Tensor) else type(sf).__name__
        raise TypeError(f"{_FN}: sf: expected float32 scales [sum of the groups' K / gran_k, MN]; got {got}")
    if not isinstance(grouped_layout, torch.Tensor) or grouped_layout.dtype != torch.int32 or grouped_layout.dim() != 1:
        raise TypeError(f"{_FN}: grouped_layout: expected a 1-D int32 tensor (one int per group)")
    if gran_k not in (32, 128):
        raise ValueError(f"{_FN}: gran_k: expected 32 or 128; got {gran_k!r}")
    if isinstance(k_alignment, bool) or not isinstance(k_alignment, int) or k_alignment <= 0 or k_alignment % 32:
        raise ValueError(f"{_FN}: k_alignment: expected a positive multiple of 32; got {k_alignment!r}")
    groups = grouped_layout.numel()
    synced = ks_cpu is not None and len(ks_cpu) > 0
    if synced and (len(ks_cpu) != groups or not all(isinstance(k, int) and k >= 0 for k in ks_cpu)):
        raise ValueError(f"{_FN}: ks_cpu: expected {groups} non-negative ints (one per group); got {ks_cpu!r}")
    if not synced and not use_psum_layout:
        raise ValueError(f"{_FN}: ks_cpu: expected the groups' K ({groups} ints); None or [] only with use_psum_layout")
    sf_rows, mn = sf.shape
    ks = _k_sizes(grouped_layout, ks_cpu, k_alignment, use_psum_layout)
    rows = [ceil_div(k, gran_k) for k in ks]
    if not use_psum_layout and sum(rows) != sf_rows:
        raise ValueError(f"{_FN}: sf: expected sum of ceil(k / {gran_k}) = {sum(rows)} rows for ks_cpu {list(ks_cpu)}; "
                         f"got {sf_rows}")
    if use_psum_layout and sum(rows) > sf_rows:
        raise ValueError(f"{_FN}: sf: the prefix sums need {sum(rows)} scale rows; got {sf_rows}")
    words = [ceil_div(r, 4) for r in rows]
    out_rows = sum(ceil_div(k, 4 * gran_k) for k in ks_cpu) if synced else (sf_rows + 3 * groups) // 4
    if sum(words) > out_rows:
        raise ValueError(f"{_FN}: ks_cpu: {list(ks_cpu)} leave {out_rows} packed rows; the prefix sums need {sum(words)}")
    out = torch.zeros((out_rows, mn), dtype=torch.int32, device=sf.device)
    exponents = ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    row = word = 0
    for n_rows, n_words in zip(rows, words):
        if n_words == 0:  # an empty group has no scale rows
            continue
        block = torch.zeros((n_words * 4, mn), dtype=torch.uint8, device=sf.device)
        block[:n_rows] = exponents[row:row + n_rows]
        # the bytes of word w in column c: rows 4w .. 4w + 3 of that column, the first one lowest (little-endian)
        out[word:word + n_words] = block.view(n_words, 4, mn).transpose(1, 2).contiguous().view(torch.int32).squeeze(-1)
        row, word = row + n_rows, word + n_words
    return out
