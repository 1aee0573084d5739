"""The host path on the GPU: scales converted by dgx's scale-layout kernel give bitwise the output of scales
converted ahead (dense, masked groups, the weight gradient's SFB, under CUDA-graph capture), and the per-call
fast path (new addresses written into cached parameters) gives bitwise the output of the full path."""

import warnings

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::dgx.errors.LayoutConversionWarning")]

from gpu_gemm_utils import check_dense, make_dense  # noqa: E402


def _row_major(sfa):
    return sfa.contiguous()


@pytest.mark.parametrize("m,n,k", [(64, 2112, 7168), (1, 576, 128), (200, 576, 576), (4097, 2112, 7168)])
def test_row_major_sfa_converted_by_our_kernel_is_bitwise_the_pre_converted_result(m, n, k):
    import dgx

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    A, sfa = a_fp8
    ref = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, ref)
    for _ in range(3):  # the first call (full path) and the fast path's
        d.fill_(float("nan"))
        dgx.fp8_gemm_nt((A, _row_major(sfa)), b_fp8, d)
        torch.cuda.synchronize()
        assert torch.equal(d, ref)
    check_dense(d, a, b, a_fp8, b_fp8)


def test_row_major_conversion_warns_once_naming_the_helper(monkeypatch):
    import dgx
    from dgx import scales

    monkeypatch.setattr(scales, "_warned", False)
    _, _, (A, sfa), b_fp8, d = make_dense(64, 576, 1024)
    with pytest.warns(dgx.LayoutConversionWarning, match="get_mn_major_tma_aligned_tensor"):
        dgx.fp8_gemm_nt((A, sfa.contiguous()), b_fp8, d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dgx.fp8_gemm_nt((A, sfa.contiguous()), b_fp8, d)
        dgx.fp8_gemm_nt((A[:32], sfa.contiguous()[:32]), b_fp8, d[:32])


def test_masked_row_major_scales_per_group():
    import dgx
    from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    g, m_max, n, k = 4, 96, 512, 1024
    q, s = per_token_cast_to_fp8(torch.randn(g * m_max, k, device="cuda", dtype=torch.bfloat16), mn_major=False)
    A = q.view(g, m_max, k)
    sf_rows = s.view(g, m_max, k // 128)  # [G, M_max, KB] row-major
    sf_mn = dgx.get_mn_major_tma_aligned_tensor(sf_rows)
    bq, bs = per_block_cast_to_fp8(torch.randn(g * n, k, device="cuda", dtype=torch.bfloat16))
    b = (bq.view(g, n, k), bs.view(g, n // 128, k // 128))  # N a multiple of 128: blocks stay within groups
    counts = torch.tensor([96, 0, 17, 64], dtype=torch.int32, device="cuda")
    ref = torch.zeros(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    dgx.m_grouped_fp8_gemm_nt_masked((A, sf_mn), b, ref, counts, 64)
    for _ in range(2):
        d = torch.zeros_like(ref)
        dgx.m_grouped_fp8_gemm_nt_masked((A, sf_rows), b, d, counts, 64)
        torch.cuda.synchronize()
        assert torch.equal(d, ref)


def test_weight_gradient_row_major_scales_of_both_operands():
    import dgx
    from dgx.torch_utils import per_token_cast_to_fp8

    m, n, k = 256, 2112, 1024
    a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), mn_major=False)
    b = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), mn_major=False)
    a_mn = (a[0], dgx.get_mn_major_tma_aligned_tensor(a[1]))
    b_mn = (b[0], dgx.get_mn_major_tma_aligned_tensor(b[1]))
    ref = torch.zeros(m, n, device="cuda")
    dgx.fp8_gemm_nt(a_mn, b_mn, ref, c=ref)
    for _ in range(2):
        d = torch.zeros(m, n, device="cuda")
        dgx.fp8_gemm_nt(a, b, d, c=d)
        torch.cuda.synchronize()
        assert torch.equal(d, ref)


def test_converted_scales_under_graph_capture_follow_new_values_on_replay():
    import dgx

    m, n, k = 128, 2112, 7168
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    A, sfa = a_fp8
    sfa_rows = sfa.contiguous()
    dgx.fp8_gemm_nt((A, sfa_rows), b_fp8, d)  # kernels compiled and loaded outside the capture
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        dgx.fp8_gemm_nt((A, sfa_rows), b_fp8, d)
    a2, _, a2_fp8, _, _ = make_dense(m, n, k)
    A.copy_(a2_fp8[0])
    sfa_rows.copy_(a2_fp8[1])
    ref = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a2_fp8, b_fp8, ref)  # eager, pre-converted, meanwhile on the default stream
    for _ in range(2):
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(d, ref)
    check_dense(d, a2, b, a2_fp8, b_fp8)
    del graph


def test_fast_path_with_fresh_slices_and_outputs_is_bitwise_the_full_path():
    """The engine pattern: M changing, A/SFA as fresh slices of a buffer at moving offsets, fresh outputs. Each
    result equals the same call made with the config given (which always takes the full path)."""
    import dgx
    from dgx import launch
    from dgx.kinds import GemmKind
    from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    n, k = 2112, 7168
    A_buf, SFA_buf = per_token_cast_to_fp8(torch.randn(4096, k, device="cuda", dtype=torch.bfloat16))
    b_fp8 = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    num_sms = dgx.get_num_sms()
    for i in range(40):
        m = (1, 7, 64, 100, 128, 256)[i % 6]
        off = 64 * (i * 7 % 50)
        a = (A_buf[off:off + m], SFA_buf[off:off + m])
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        dgx.fp8_gemm_nt(a, b_fp8, d)
        config = launch.plan(GemmKind.DENSE, m, n, k, 0).config
        ref = torch.empty_like(d)
        dgx.fp8_gemm_nt(a, b_fp8, ref, config=config)
        torch.cuda.synchronize()
        assert torch.equal(d, ref), (i, m, off, num_sms)


def test_fast_path_on_a_side_stream():
    import dgx

    a, b, a_fp8, b_fp8, d = make_dense(64, 2112, 7168)
    ref = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, ref)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    outs = [torch.full_like(d, float("nan")) for _ in range(4)]
    with torch.cuda.stream(stream):
        for out in outs:
            dgx.fp8_gemm_nt(a_fp8, b_fp8, out)
    for out in outs[:2]:
        dgx.fp8_gemm_nt(a_fp8, b_fp8, out, stream=stream)
    torch.cuda.synchronize()
    for out in outs:
        assert torch.equal(out, ref)
