"""Split-K on the GPU: clusters of CTAs that divide one tile's K and sum their partial tiles through distributed
shared memory. Dense (BF16), masked and contiguous grouped, and the weight gradient (FP32, with and without C):
correct against the float64 reference, every element written (NaN poison) and none past the valid rows, within
FP32 summation-order error of the unsplit kernel on the same tile, bitwise the same run to run, and under CUDA
graph replay with new inputs."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from gpu_gemm_utils import check_dense, make_dense  # noqa: E402
from test_gpu_grouped import _check_contiguous, _check_masked, _contiguous_inputs, _masked_inputs  # noqa: E402
from test_gpu_wgrad import MAX_REL as WGRAD_MAX_REL  # noqa: E402
from test_gpu_wgrad import _rel, _rows  # noqa: E402

from dgx.heuristics import max_stages  # noqa: E402
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_MASKED, GemmConfig  # noqa: E402
from dgx.torch_utils import dequantize  # noqa: E402


def _config(n, k, block_m, block_n, split, stages=0, **kw):
    stages = stages or min(max_stages(block_m, block_n, kw.get("wgrad", False), split), 6)
    return GemmConfig(n, k, block_m, block_n, stages, split_k=split, **kw)


def _unsplit(config):
    stages = min(max_stages(config.block_m, config.block_n, wgrad=config.wgrad), 6)
    return dataclasses.replace(config, split_k=1, stages=stages)


@pytest.mark.parametrize(
    "m, n, k, block_m, block_n, split, defer, stages",
    [
        (64, 2112, 7168, 64, 128, 8, False, 0),  # the decode shape: 17 tiles x 8
        (64, 2112, 7168, 64, 128, 7, False, 0),  # a cluster of 7: shares of 2048 / 7 vectors are uneven
        (100, 4096, 2048, 128, 128, 4, False, 0),  # two math warpgroups, rows past M inside the tile
        (1, 256, 1024, 64, 64, 2, False, 0),
        (1024, 2112, 1536, 64, 96, 3, False, 0),  # many tiles per cluster (partial buffer reused), two scale blocks
        (64, 2112, 7168, 64, 64, 2, True, 0),  # deferred promotion
        (130, 7168, 2048, 64, 128, 4, False, 4),  # stage rounds: 4 k-blocks a tile on 4 stages
        (130, 7168, 2048, 64, 128, 4, False, 3),  # the ring: 4 k-blocks a tile on 3 stages
    ],
)
def test_dense_split_k(m, n, k, block_m, block_n, split, defer, stages):
    import dgx

    config = _config(n, k, block_m, block_n, split, stages, defer=defer)
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k, seed=m + n + split)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    first = d.clone()
    for _ in range(2):  # bitwise deterministic
        d.fill_(float("nan"))
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
        torch.cuda.synchronize()
        assert torch.equal(d.view(torch.int16), first.view(torch.int16))
    # Within summation-order error of the unsplit kernel on the same tile (both BF16-rounded).
    plain = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, plain, config=_unsplit(config))
    torch.cuda.synchronize()
    gap = float((d.double() - plain.double()).norm() / plain.double().norm())
    assert gap < 4e-3, f"split {split} differs from the unsplit kernel by {gap:.2e}"


def test_masked_split_k():
    import dgx

    counts, m_max, n, k = [0, 64, 17, 128, 1, 200], 200, 4096, 7168
    a, b, d = _masked_inputs(len(counts), m_max, n, k)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    config = _config(n, k, 64, 128, 4, layout=LAYOUT_MASKED)
    dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, 64, config=config)
    torch.cuda.synchronize()
    _check_masked(a, b, d, counts, m_max)
    first = d.clone()
    d.fill_(float("nan"))
    dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, 64, config=config)
    torch.cuda.synchronize()
    assert torch.equal(d.view(torch.int16), first.view(torch.int16))


def test_contiguous_split_k():
    import dgx

    rows = [100, 0, 300, 1]
    a, b, d, m_indices, segments = _contiguous_inputs(rows, 1024, 2048)
    config = _config(1024, 2048, 128, 128, 2, layout=LAYOUT_CONTIGUOUS)
    dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, config=config)
    torch.cuda.synchronize()
    _check_contiguous(a, b, d, m_indices, rows, segments, config.block_m)


@pytest.mark.parametrize("mode", ["accumulate_in_place", "separate_c", "no_c"])
@pytest.mark.parametrize("block_m, block_n, split, defer", [(128, 128, 2, False), (64, 128, 4, True)])
def test_wgrad_split_k(mode, block_m, block_n, split, defer):
    import dgx

    m, n, k = 200, 576, 4096
    a, b = _rows(m, k, 21), _rows(n, k, 22)
    ref = dequantize(*a, 1).double() @ dequantize(*b, 1).double().T
    c = torch.randn(m, n, device="cuda")
    config = _config(n, k, block_m, block_n, split, wgrad=True, defer=defer)

    def run():
        if mode == "accumulate_in_place":
            d = c.clone()
            dgx.fp8_gemm_nt(a, b, d, c=d, config=config)
        elif mode == "separate_c":
            d = torch.full((m, n), float("nan"), device="cuda")
            dgx.fp8_gemm_nt(a, b, d, c=c, config=config)
        else:
            d = torch.full((m, n), float("nan"), device="cuda")
            dgx.fp8_gemm_nt(a, b, d, config=config)
        torch.cuda.synchronize()
        return d

    d = run()
    want = ref if mode == "no_c" else ref + c.double()
    assert not torch.isnan(d).any()
    assert _rel(d, want) <= WGRAD_MAX_REL
    assert torch.equal(run(), d)


def test_split_k_graph_replay_with_new_inputs():
    import dgx

    m, n, k = 64, 2112, 7168
    config = _config(n, k, 64, 128, 8)
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k, seed=3)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)  # compile and plan outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
    for seed in (4, 5):
        a2, b2, a2_fp8, b2_fp8, _ = make_dense(m, n, k, seed=seed)
        for dst, src in zip((*a_fp8, *b_fp8), (*a2_fp8, *b2_fp8)):
            dst.copy_(src)
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_dense(d, a2, b2, a2_fp8, b2_fp8)
