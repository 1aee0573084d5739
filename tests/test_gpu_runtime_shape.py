"""FP8 GEMM kernels that take N, or N and K, at run time (GemmConfig.runtime_n / runtime_k, DGX_GEMM_RUNTIME_N / _K):
the same output, bit for bit, as the kernel with both compiled in (same tile, same order of every sum), on dense,
masked and contiguous layouts, N not a multiple of the tile, K of one k-block, of a deferred tile's chunks and a
tail, and of a ring that does not fill whole stages included; and the outputs against the float64 reference."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from dgx.kernels.fp8_gemm import GemmConfig  # noqa: E402
from gpu_gemm_utils import check_dense, make_dense  # noqa: E402

NUM_SMS = 132


def _both(config):
    """The config as compiled today, with N at run time, and with N and K at run time where its k-loop allows."""
    from dgx.kernels.fp8_gemm import runtime_k_allowed

    variants = [config, dataclasses.replace(config, runtime_n=True)]
    if runtime_k_allowed(config):
        variants.append(dataclasses.replace(config, runtime_n=True, runtime_k=True))
    return variants


@pytest.mark.parametrize("m, n, k", [(1, 2112, 7168), (64, 576, 7168), (128, 1536, 7168), (300, 4096, 512),
                                     (4096, 7168, 2048), (77, 24576, 1536), (256, 136, 1024), (2000, 1000, 384)])
def test_dense_runtime_n_matches_compiled_n(m, n, k):
    import dgx
    from dgx.heuristics import choose_dense

    a, b, a_fp8, b_fp8, _ = make_dense(m, n, k, seed=m + n + k)
    variants = _both(choose_dense(m, n, k, NUM_SMS).config)
    outs = []
    for config in variants:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    check_dense(outs[-1], a, b, a_fp8, b_fp8)
    for config, out in zip(variants[1:], outs[1:]):
        assert torch.equal(outs[0], out), f"{config.kernel_name} differs from {variants[0].kernel_name}"


@pytest.mark.parametrize("m, n, k, config", [
    (300, 4096, 128, GemmConfig(4096, 128, 128, 128, 5)),  # one k-block
    (1000, 2112, 640, GemmConfig(2112, 640, 128, 96, 6)),  # 5 k-blocks on a 6-stage ring, a two-block scale split
    (517, 7168, 7168, GemmConfig(7168, 7168, 128, 128, 5)),  # 56 k-blocks on 5 stages
    (2048, 4096, 7168, GemmConfig(4096, 7168, 256, 112, 3)),  # two slices, the lean ring
    (64, 4096, 1152, GemmConfig(4096, 1152, 64, 64, 8, defer=True)),  # deferred: a chunk of 8 and a tail of 1
    (128, 4096, 16384, GemmConfig(4096, 16384, 64, 64, 8, defer=True)),  # 16 chunks of 8
    (129, 1000, 2944, GemmConfig(1000, 2944, 128, 64, 8, stream_b=True)),  # 23 k-blocks, N past the tile
    (640, 4096, 2048, GemmConfig(4096, 2048, 128, 160, 4)),  # stage rounds over a run-time K: 4 rounds of 4
    (200, 2112, 1536, GemmConfig(2112, 1536, 64, 144, 6)),  # 2 rounds of 6, a run-time scale split
])
def test_dense_runtime_k_matches_compiled_k(m, n, k, config):
    import dgx

    a, b, a_fp8, b_fp8, _ = make_dense(m, n, k, seed=m + n + k)
    variants = [config, dataclasses.replace(config, runtime_k=True),
                dataclasses.replace(config, runtime_n=True, runtime_k=True)]
    outs = []
    for c in variants:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=c)
        outs.append(d)
    torch.cuda.synchronize()
    check_dense(outs[2], a, b, a_fp8, b_fp8)
    for c, out in zip(variants[1:], outs[1:]):
        assert torch.equal(outs[0], out), f"{c.kernel_name} differs from {config.kernel_name}"


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
    for out in outs[1:]:
        for g, c in enumerate(counts):
            rows = min(c, m_max)
            assert not torch.isnan(out[g, :rows]).any()
            assert torch.equal(outs[0][g, :rows], out[g, :rows]), f"group {g} differs"
            assert torch.isnan(out[g, rows:]).all(), f"group {g}: rows past its count written"


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
    for out in outs[1:]:
        assert not torch.isnan(out[:valid]).any()
        assert torch.equal(outs[0][:valid], out[:valid])
        assert torch.isnan(out[valid:]).all()


@pytest.mark.parametrize("m, n, k", [(7168, 2112, 4096), (1536, 2048, 8192), (129, 136, 576), (1000, 576, 7168),
                                     (4096, 32768, 4096)])
def test_wgrad_runtime_n_matches_compiled_n(m, n, k):
    """The dense weight gradient (FP32 D = C + A.B^T, N past the tile included): N at run time, bit for bit."""
    import dgx
    from dgx.heuristics import choose_wgrad
    from dgx.torch_utils import dequantize

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g))
    b = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g))
    c = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g)
    variants = _both(choose_wgrad(m, n, k, NUM_SMS).config)
    assert len(variants) == 2  # (no K at run time for the weight gradient)
    outs = []
    for config in variants:
        d = torch.full((m, n), float("nan"), device="cuda")
        dgx.fp8_gemm_nt(a, b, d, c=c, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    ref = dequantize(*a, 1).double() @ dequantize(*b, 1).double().T + c.double()
    assert not torch.isnan(outs[1]).any()
    assert float((outs[1].double() - ref).norm() / ref.norm()) <= 5e-4
    assert torch.equal(outs[0], outs[1]), f"{variants[1].kernel_name} differs from {variants[0].kernel_name}"


@pytest.mark.parametrize("m, n, k", [(1, 2112, 7168), (64, 4096, 7168), (128, 7168, 2048), (32, 24576, 1536)])
def test_dense_runtime_stream_b_matches_compiled_policy(m, n, k):
    """B's L2 policy at run time (GemmConfig.runtime_stream_b), evict-first and normal, against the kernel with the
    heuristic's policy compiled in: the same output, bit for bit."""
    import dgx
    from dgx.heuristics import choose_dense

    a, b, a_fp8, b_fp8, _ = make_dense(m, n, k, seed=m + n + k)
    config = choose_dense(m, n, k, NUM_SMS).config
    variants = [config] + [dataclasses.replace(config, stream_b=sb, runtime_n=True, runtime_stream_b=True)
                           for sb in (True, False)]
    outs = []
    for c in variants:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=c)
        outs.append(d)
    torch.cuda.synchronize()
    check_dense(outs[1], a, b, a_fp8, b_fp8)
    for c, out in zip(variants[1:], outs[1:]):
        assert torch.equal(outs[0], out), f"{c.kernel_name} (stream_b {c.stream_b}) differs from {config.kernel_name}"
