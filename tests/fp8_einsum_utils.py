"""Inputs and references for dgx.fp8_einsum on the GPU (torch): the GPU tests and tests/device/fp8_einsum_bench.py."""

from __future__ import annotations

import torch

SHAPES = [(8, 1024, 4096), (128, 128, 512)]  # (h, d, r): DeepSeek's MLA projections
BS = (1, 4, 17, 32, 128, 4096, 4097, 8192)


def quantise(x: torch.Tensor, y: torch.Tensor, ue8m0: bool):
    """x [b, h, r] per token per 128 (scales [b, h, r/128] row-major, as DeepGEMM's test makes them), y [h, d, r]
    per 128x128 block: ((xq, sfx), (yq, sfy)) (the `dgx bench --suite fp8_einsum` operands)."""
    from dgx.bench.v32_problems import fp8_einsum_operands

    return fp8_einsum_operands(x, y, ue8m0)


def reference(xs, ys) -> torch.Tensor:
    """The float64 einsum of the dequantised operands."""
    from dgx.bench.v32_problems import fp8_einsum_reference

    return fp8_einsum_reference(xs, ys)


def make(b, h, d, r, ue8m0=False, seed=0):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    x = torch.randn((b, h, r), device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randn((h, d, r), device="cuda", dtype=torch.bfloat16, generator=g)
    xs, ys = quantise(x, y, ue8m0)
    z = torch.full((b, h, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    return x, y, xs, ys, z


def check(z, x, y, xs, ys, max_rel: float = 2e-3) -> None:
    """Every element written; normwise error against the float64 reference (at most 1.5x what rounding the exact
    result to BF16 costs where that is more); calc_diff against the BF16 einsum of the originals < 1e-3."""
    from dgx.torch_utils import calc_diff

    assert not torch.isnan(z).any(), f"{int(torch.isnan(z).sum())} output elements were not written"
    ref = reference(xs, ys)
    rel = float((z.double() - ref).norm() / ref.norm().clamp(min=1e-30))
    rounding = float((ref.to(torch.bfloat16).double() - ref).norm() / ref.norm().clamp(min=1e-30))
    assert rel <= max(max_rel, 1.5 * rounding), f"normwise relative error {rel:.3e}"
    if z.numel() >= 256:
        diff = calc_diff(z, torch.einsum("bhr,hdr->bhd", x.float(), y.float()))
        assert diff < 1e-3, f"calc_diff {diff:.3e}"
