"""fp8_gemm_nt_skip_head_mid on the GPU: every head's left and right columns bitwise equal to fp8_gemm_nt of the same
tile (itself checked against float64), the mid columns untouched, DeepGEMM's shapes and odd ones, determinism,
CUDA-graph replay."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from gpu_gemm_utils import check_dense, make_dense  # noqa: E402

SENTINEL = -3.5  # what the mid columns hold before the call, and must hold after it


def _layout(d: torch.Tensor, head_splits, heads: int):
    """(left, mid, right) views of a skip-head-mid output [M, heads * (left + mid + right)]."""
    left, mid, right = head_splits
    v = d.view(d.shape[0], heads, left + mid + right)
    return v[:, :, :left], v[:, :, left:left + mid], v[:, :, left + mid:]


def _run_and_check(m, n, k, head_splits, seed):
    import dgx
    from dgx.device import get_num_sms
    from dgx.skip_head_mid import choose_config, fp8_gemm_nt_skip_head_mid

    left, mid, right = head_splits
    heads = n // (left + right)
    a, b, a_fp8, b_fp8, plain = make_dense(m, n, k, seed=seed)
    config = choose_config(m, n, k, head_splits, get_num_sms())
    dgx.fp8_gemm_nt(a_fp8, b_fp8, plain, config=replace(config, head_splits=None))  # the same tile, plain output
    torch.cuda.synchronize()
    check_dense(plain, a, b, a_fp8, b_fp8)
    d = torch.full((m, heads * (left + mid + right)), SENTINEL, device="cuda", dtype=torch.bfloat16)
    dl, dm, dr = _layout(d, head_splits, heads)
    dl.fill_(float("nan"))
    dr.fill_(float("nan"))
    fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, head_splits)
    torch.cuda.synchronize()
    pv = plain.view(m, heads, left + right)
    assert torch.equal(dl, pv[:, :, :left]), "left columns differ from fp8_gemm_nt's"
    assert torch.equal(dr, pv[:, :, left:]), "right columns differ from fp8_gemm_nt's"
    assert (dm == SENTINEL).all(), "mid columns were written"
    return a_fp8, b_fp8, d


CASES = [(m, n, 512, (128, 64, 128)) for m in (128, 4096) for n in (32768, 8192)]  # DeepGEMM's test shapes
CASES += [(1, 8192, 512, (128, 64, 128)), (77, 4096, 7168, (128, 64, 128)), (300, 2048, 1536, (64, 0, 64)),
          (257, 144 * 16, 2048, (72, 8, 72)), (64, 192 * 8, 640, (128, 32, 64)), (2000, 16384, 7168, (128, 64, 128))]


@pytest.mark.parametrize("m,n,k,head_splits", CASES, ids=[f"m{c[0]}-n{c[1]}-k{c[2]}-hs{c[3]}" for c in CASES])
def test_left_and_right_are_the_gemm_and_mid_is_untouched(m, n, k, head_splits):
    _run_and_check(m, n, k, head_splits, seed=m + n + k)


def test_deterministic():
    from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid

    a_fp8, b_fp8, d = _run_and_check(4096, 8192, 512, (128, 64, 128), seed=1)
    first = d.clone()
    for _ in range(3):
        fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, (128, 64, 128))
        torch.cuda.synchronize()
        assert torch.equal(d, first)


def test_cuda_graph_replay():
    from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid

    hs, m, n, k = (128, 64, 128), 128, 8192, 512
    a_fp8, b_fp8, d = _run_and_check(m, n, k, hs, seed=2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, hs)
    _, _, a2_fp8, _, plain = make_dense(m, n, k, seed=3)
    a_fp8[0].copy_(a2_fp8[0])
    a_fp8[1].copy_(a2_fp8[1])
    import dgx

    dgx.fp8_gemm_nt(a_fp8, b_fp8, plain)
    heads = n // 256
    dl, dm, dr = _layout(d, hs, heads)
    dl.fill_(float("nan"))
    dr.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    pv = plain.view(m, heads, 256)
    assert torch.equal(dl, pv[:, :, :128]) and torch.equal(dr, pv[:, :, 128:]) and (dm == SENTINEL).all()
