"""FP8 GEMM kernels that take N at run time (GemmConfig.runtime_n, DGX_GEMM_RUNTIME_N): the same output, bit for
bit, as the kernel with N compiled in (same tile, same K, same order of every sum), on dense, masked and contiguous
layouts, N not a multiple of the tile included; and the dense output against the float64 reference."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from gpu_gemm_utils import check_dense, make_dense  # noqa: E402

NUM_SMS = 132


def _both(config):
    return config, dataclasses.replace(config, runtime_n=True)


@pytest.mark.parametrize("m, n, k", [(1, 2112, 7168), (64, 576, 7168), (128, 1536, 7168), (300, 4096, 512),
                                     (4096, 7168, 2048), (77, 24576, 1536), (256, 136, 1024), (2000, 1000, 384)])
def test_dense_runtime_n_matches_compiled_n(m, n, k):
    import dgx
    from dgx.heuristics import choose_dense

    a, b, a_fp8, b_fp8, _ = make_dense(m, n, k, seed=m + n + k)
    fixed, runtime = _both(choose_dense(m, n, k, NUM_SMS).config)
    outs = []
    for config in (fixed, runtime):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    check_dense(outs[1], a, b, a_fp8, b_fp8)
    assert torch.equal(outs[0], outs[1]), f"run-time N differs from N compiled in ({runtime.kernel_name})"


def _weights(groups, n, k):
    b16 = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16)
    q = [per_block_cast_to_fp8(b16[g]) for g in range(groups)]
    return torch.stack([x for x, _ in q]), torch.stack([s for _, s in q])


@pytest.mark.parametrize("counts, m_max, n, k", [([0, 512, 77, 4096], 1024, 4096, 7168), ([1, 64, 65, 130], 256, 7168, 2048),
                                                 ([37], 40, 2112, 7168)])
def test_masked_runtime_n_matches_compiled_n(counts, m_max, n, k):
    import dgx
    from dgx.heuristics import choose_grouped
    from dgx.kinds import Layout

    groups = len(counts)
    a16 = torch.randn(groups, m_max, k, device="cuda", dtype=torch.bfloat16)
    q = [per_token_cast_to_fp8(a16[g]) for g in range(groups)]
    a = (torch.stack([x for x, _ in q]), torch.stack([s for _, s in q]))
    b = _weights(groups, n, k)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    expected = max(1, sum(counts) // groups)
    outs = []
    for config in _both(choose_grouped(Layout.MASKED, expected, n, k, groups, NUM_SMS).config):
        d = torch.full((groups, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m=expected, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    for g, c in enumerate(counts):
        rows = min(c, m_max)
        assert not torch.isnan(outs[1][g, :rows]).any()
        assert torch.equal(outs[0][g, :rows], outs[1][g, :rows]), f"group {g} differs"
        assert torch.isnan(outs[1][g, rows:]).all(), f"group {g}: rows past its count written"


@pytest.mark.parametrize("groups, rows_per_group, n, k", [(4, 256, 4096, 7168), (8, 128, 7168, 2048), (3, 384, 576, 512)])
def test_contiguous_runtime_n_matches_compiled_n(groups, rows_per_group, n, k):
    import dgx
    from dgx.heuristics import choose_grouped
    from dgx.kinds import Layout

    rows = groups * rows_per_group
    idx = [g for g in range(groups) for _ in range(rows_per_group)]
    idx[-128:] = [-1] * 128  # a padding block: nothing stored there
    m_indices = torch.tensor(idx, device="cuda", dtype=torch.int32)
    a = per_token_cast_to_fp8(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16))
    b = _weights(groups, n, k)
    outs = []
    for config in _both(choose_grouped(Layout.CONTIGUOUS, rows, n, k, groups, NUM_SMS).config):
        d = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    valid = rows - 128
    assert not torch.isnan(outs[1][:valid]).any()
    assert torch.equal(outs[0][:valid], outs[1][:valid])
    assert torch.isnan(outs[1][valid:]).all()
