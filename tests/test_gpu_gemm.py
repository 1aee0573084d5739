"""fp8_gemm_nt on the GPU: correctness on the dense suite's shapes (docs/PEERS.md) and odd shapes, determinism, graphs."""

import itertools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from gpu_gemm_utils import check_dense, make_dense  # noqa: E402

ANCHOR_SHAPES = [
    (m, n, k)
    for m in (64, 128, 4096)
    for (n, k) in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
]
ODD_SHAPES = list(itertools.product((1, 7, 63, 65, 129, 1000, 4097), (8, 136, 576, 2112, 7168), (128, 576, 7168)))


@pytest.mark.parametrize("m,n,k", ANCHOR_SHAPES)
def test_anchor_shapes(m, n, k):
    import dgx

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)


@pytest.mark.parametrize("m,n,k", ODD_SHAPES)
def test_odd_shapes(m, n, k):
    import dgx

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)


# Tiles the heuristic takes on some shapes, forced on odd ones: 256 rows as two m64 slices per warpgroup
# (one accumulator set), and BLOCK_N whose B-scale split is compiled in (96, 160) or selected at run time
# (144). N=480 / 1000 put tiles at every offset inside a 128-column scale block the width allows. An odd
# number of 8-column groups (88, 56, 24) ends the stmatrix epilogue with a two-matrix store.
FORCED_TILES = [(256, 128), (256, 96), (256, 88), (256, 64), (128, 160), (128, 96), (128, 144), (128, 24), (64, 160), (64, 56)]


@pytest.mark.parametrize("bm,bn", FORCED_TILES)
@pytest.mark.parametrize("m,n,k", [(257, 480, 576), (1000, 1000, 7168), (65, 2112, 1664)])
def test_forced_tiles(bm, bn, m, n, k):
    import dgx
    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import GemmConfig

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    config = GemmConfig(n, k, bm, bn, min(max_stages(bm, bn), 4))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=config)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)


# 256x128 tiles in lean stage rounds take A scales already multiplied by the B scale, written into the stage by
# a warp of the producer warpgroup with plain loads. The product is the one every other BF16 tile forms
# (a_scale * b_scale, then one FMA per element), so the output equals 128x128's bitwise. M = 259 ends the
# scale rows inside one 16-byte load; K = 4480 (35 k-blocks) and 16384 leave a stage unused per tile; the pairs
# share A (the two CTAs' B scales differ) or B.
@pytest.mark.parametrize("pair", [0, 1, 2])
@pytest.mark.parametrize("m,n,k", [(259, 384, 4480), (1000, 1000, 7168), (520, 256, 16384)])
def test_lean_rounds_scale_products_match_128_rows(pair, m, n, k):
    import dgx
    from dgx.kernels.fp8_gemm import GemmConfig

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=GemmConfig(n, k, 256, 128, 3, pair=pair))
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    expected = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, expected, config=GemmConfig(n, k, 128, 128, 4))
    torch.cuda.synchronize()
    assert torch.equal(d, expected)


# Deferred promotion (a second accumulator set) against the plain k-block on the same tile: the same MMAs and
# the same promotion order, so bitwise the same output. K = 128 (one k-block), 1664 (a chunk of 8 k-blocks and
# a tail of 5), 2112 (17, the last partial), 7168 (7 whole chunks); tiles with one B-scale block (16, 64, 128),
# a split selected at run time (56, 120) or compiled in (96); clusters sharing A (1) or B (2).
DEFERRED_TILES = [(64, 16, 0), (64, 56, 1), (64, 96, 0), (64, 128, 0), (128, 16, 0), (128, 64, 2), (128, 120, 0), (128, 128, 1)]


@pytest.mark.parametrize("bm,bn,pair", DEFERRED_TILES)
@pytest.mark.parametrize("m,n,k", [(65, 1000, 128), (200, 2112, 1664), (129, 480, 2112), (64, 576, 7168)])
def test_deferred_promotion_matches_plain(bm, bn, pair, m, n, k):
    import dataclasses

    import dgx
    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import GemmConfig

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    plain = GemmConfig(n, k, bm, bn, min(max_stages(bm, bn), 4), pair=pair)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=plain)
    expected = d.clone()
    d.fill_(float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=dataclasses.replace(plain, defer=True))
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    assert torch.equal(d, expected)


@pytest.mark.parametrize("m,n,k", [(4096, 7168, 2048), (64, 2112, 7168), (1000, 576, 7168)])
def test_bitwise_deterministic(m, n, k):
    import dgx

    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
    first = d.clone()
    for _ in range(3):
        d.fill_(float("nan"))
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
        torch.cuda.synchronize()
        assert torch.equal(d, first)


def test_cuda_graph_replay():
    import dgx

    a, b, a_fp8, b_fp8, d = make_dense(128, 7168, 2048)
    dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
    a2, b2, a2_fp8, b2_fp8, _ = make_dense(128, 7168, 2048)
    a_fp8[0].copy_(a2_fp8[0])
    a_fp8[1].copy_(a2_fp8[1])
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_dense(d, a2, b, a2_fp8, b_fp8)


def test_zero_m_is_noop():
    import dgx

    a = torch.empty(0, 256, device="cuda", dtype=torch.float8_e4m3fn)
    sfa = torch.empty(0, 2, device="cuda", dtype=torch.float32)
    b = torch.randn(256, 256, device="cuda").to(torch.float8_e4m3fn)
    sfb = torch.ones(2, 2, device="cuda")
    d = torch.empty(0, 256, device="cuda", dtype=torch.bfloat16)
    dgx.fp8_gemm_nt((a, sfa), (b, sfb), d)  # nothing to do, nothing launched
    torch.cuda.synchronize()


@pytest.mark.parametrize("layout", ["row_major", "row_k576", "sliced", "unaligned_base"])
def test_sfa_layouts_converted(layout):
    """SFA layouts TMA cannot read as they are are copied on the GPU first, with the same result."""
    import dgx

    k = 576 if layout == "row_k576" else 1024
    a, b, a_fp8, b_fp8, d = make_dense(200, 576, k)
    A, sfa = a_fp8
    assert sfa.stride() == (1, dgx.get_tma_aligned_size(200, 4))  # what per_token_cast_to_fp8 makes
    ref = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, ref)
    if layout in ("row_major", "row_k576"):
        sfa = sfa.contiguous()
    elif layout == "sliced":  # every other column of a wider tensor: stride 2 along K
        wide = torch.zeros(sfa.shape[0], sfa.shape[1] * 2, device="cuda")
        wide[:, ::2] = sfa
        sfa = wide[:, ::2]
    elif layout == "unaligned_base":  # M-major, but starting 4 bytes into its buffer
        buf = torch.zeros(sfa.shape[1] * 204 + 1, device="cuda")
        view = buf[1:].as_strided(sfa.shape, (1, 204))
        view.copy_(sfa)
        sfa = view
    dgx.fp8_gemm_nt((A, sfa), b_fp8, d)
    torch.cuda.synchronize()
    check_dense(d, a, b, a_fp8, b_fp8)
    assert torch.equal(d, ref)


# One-slice BF16 tiles load the 16-byte aligned TMA box holding each B scale into the stage and pick the scale
# out by its place in the box. SFB starting 4, 8 or 12 bytes into its buffer moves every scale's place: same output.
# K = 576 (5 k-blocks: the two scale rows' places differ) and 1024 (8: they agree); tiles spanning two B-scale
# blocks (160) or one (128, 64).
@pytest.mark.parametrize("bm,bn", [(128, 160), (128, 128), (64, 64)])
@pytest.mark.parametrize("k", [576, 1024])
def test_sfb_at_any_place_in_its_chunk(bm, bn, k):
    import dgx
    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import GemmConfig

    m, n = 200, 1000
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    B, sfb = b_fp8
    config = GemmConfig(n, k, bm, bn, min(max_stages(bm, bn), 4))
    ref = torch.full_like(d, float("nan"))
    dgx.fp8_gemm_nt(a_fp8, b_fp8, ref, config=config)
    torch.cuda.synchronize()
    check_dense(ref, a, b, a_fp8, b_fp8)
    for shift in (1, 2, 3):
        buf = torch.full((sfb.numel() + 4,), float("nan"), device="cuda")
        moved = buf[shift : shift + sfb.numel()].view(sfb.shape)
        moved.copy_(sfb)
        d.fill_(float("nan"))
        dgx.fp8_gemm_nt(a_fp8, (B, moved), d, config=config)
        torch.cuda.synchronize()
        assert torch.equal(d, ref), shift
