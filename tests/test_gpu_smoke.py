"""The smoke kernel end to end on the GPU: render, NVRTC, cache, load, tensor map, cluster launch."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


def _expected(src):
    # dst = 2 * src + rank of the CTA in its 2-CTA cluster; CTAs tile 32 columns, clusters run along x.
    cols = torch.arange(src.shape[1], device=src.device)
    rank = ((cols // 32) % 2).float()
    return 2 * src + rank


def test_smoke_end_to_end(tmp_cache):
    from dgx import jit
    from dgx.kernels.smoke import smoke

    src = torch.randn(100, 200, device="cuda")
    dst = torch.full_like(src, float("nan"))
    jit.reset_jit_stats()
    smoke(src, dst)
    torch.cuda.synchronize()
    assert torch.equal(dst, _expected(src))
    assert jit.jit_stats()["compiles"] == 1


def test_smoke_cuda_graph(tmp_cache):
    from dgx.kernels.smoke import smoke

    src = torch.randn(64, 96, device="cuda")
    dst = torch.full_like(src, float("nan"))
    smoke(src, dst)  # compile and load outside the capture
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    dst.fill_(float("nan"))
    with torch.cuda.graph(graph, stream=stream):
        smoke(src, dst)
    torch.cuda.synchronize()
    assert torch.isnan(dst).all(), "capturing must not run the kernel"
    for _ in range(3):
        src.copy_(torch.randn_like(src))
        dst.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(dst, _expected(src))
