"""Torch helpers for tests, benchmarks and callers: quantise BF16/FP32 tensors to FP8 with the
DeepSeek-V3 scales. Imports torch (an optional dependency)."""

from __future__ import annotations

import torch

FP8_MAX = 448.0  # largest finite float8_e4m3fn


def per_token_cast_to_fp8(x: torch.Tensor, mn_major: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (float8_e4m3fn [M, K], float32 scales [M, ceil(K/128)]), one scale per row per 128.

    The scales come in the TMA-aligned M-major layout the kernels read as they are (strides (1, M
    rounded up to 4)); `mn_major=False` gives them row-major (contiguous) instead."""
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D tensor; got shape {tuple(x.shape)}")
    m, k = x.shape
    pad = (-k) % 128
    xp = torch.nn.functional.pad(x.float(), (0, pad)).view(m, -1, 128)
    amax = xp.abs().amax(dim=2).clamp(min=1e-4)
    q = (xp * (FP8_MAX / amax).unsqueeze(2)).to(torch.float8_e4m3fn)
    scales = amax / FP8_MAX
    if mn_major:
        from .layout import get_mn_major_tma_aligned_tensor

        scales = get_mn_major_tma_aligned_tensor(scales)
    return q.view(m, -1)[:, :k].contiguous(), scales


def per_block_cast_to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [N, K] -> (float8_e4m3fn [N, K], float32 scales [ceil(N/128), ceil(K/128)]), per 128x128 block."""
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D tensor; got shape {tuple(x.shape)}")
    n, k = x.shape
    xp = torch.nn.functional.pad(x.float(), (0, (-k) % 128, 0, (-n) % 128))
    nb, kb = xp.shape[0] // 128, xp.shape[1] // 128
    blocks = xp.view(nb, 128, kb, 128)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4)
    q = (blocks * (FP8_MAX / amax)).to(torch.float8_e4m3fn).view(nb * 128, kb * 128)
    return q[:n, :k].contiguous(), (amax / FP8_MAX).view(nb, kb)


def dequantize(q: torch.Tensor, scales: torch.Tensor, block_rows: int) -> torch.Tensor:
    """The float32 tensor that (q, scales) stand for; block_rows 1 (per-token) or 128 (per-block)."""
    n, k = q.shape
    s = scales.float().repeat_interleave(block_rows, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    return q.float() * s


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2 sum(xy) / sum(x^2 + y^2): 0 for identical tensors (DeepGEMM's similarity measure)."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denom) if denom > 0 else 0.0
