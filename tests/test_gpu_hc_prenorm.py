"""tf32_hc_prenorm_gemm on the GPU: every split's partials against float64 references of its K range (b rounded to
TF32, nearest even), the summed result against torch's TF32 product as DeepGEMM's own test asks (calc_diff < 1e-8),
outputs poisoned first, odd shapes and strides, every kernel variant, determinism, CUDA-graph replay."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.torch_utils import calc_diff  # noqa: E402

BLOCK_K = 64


def _tf32(b: torch.Tensor) -> torch.Tensor:
    """b rounded to TF32, to nearest even at bit 13 (finite values; the tests' b are)."""
    bits = b.contiguous().view(torch.int32)
    bits = bits + 0xFFF + ((bits >> 13) & 1)
    return (bits & ~0x1FFF).view(torch.float32)


def _ranges(k: int, splits: int) -> list[tuple[int, int]]:
    """The K range of each split: k-blocks of 64 [floor(s * KB / S), floor((s + 1) * KB / S)), clamped to K."""
    kb = -(-k // BLOCK_K)
    return [(min(s * kb // splits * BLOCK_K, k), min((s + 1) * kb // splits * BLOCK_K, k)) for s in range(splits)]


def _reference(a, b, lo, hi, tf32=False):
    """float64 (d, s) over K columns [lo, hi): b exact, or rounded to TF32."""
    bb = _tf32(b) if tf32 else b
    a64 = a[:, lo:hi].double()
    d = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float64, device="cuda")
    s = torch.zeros(a.shape[0], dtype=torch.float64, device="cuda")
    for r in range(0, a.shape[0], 2048):  # bounded float64 temporaries
        d[r:r + 2048] = a64[r:r + 2048] @ bb[:, lo:hi].double().T
        s[r:r + 2048] = a64[r:r + 2048].square().sum(-1)
    return d, s


def _inputs(m, n, k, seed, lda=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    store = torch.randn(m, lda or k, device="cuda", generator=g).to(torch.bfloat16)
    a = store[:, :k]
    b = torch.randn(n, k, device="cuda", generator=g)
    return a, b


def _check(a, b, d, s, splits):
    """Every entry written; each split's partials match the float64 reference of its K range: within TF32's error
    of the exact product (normwise 2e-3) and within FP32 accumulation of the product with b rounded to TF32 to nearest
    even (calc_diff 1e-10 and normwise 1e-5: b truncated instead would be ~1e-7 and ~4e-4 off); the splits' sum
    within calc_diff 1e-8 of torch's TF32 product, DeepGEMM's own test (tests/test_hyperconnection.py)."""
    assert not torch.isnan(d).any() and not torch.isnan(s).any(), "entries were not written"
    k = a.shape[1]
    parts = [(d, s)] if splits is None else list(zip(d, s))
    for (lo, hi), (dp, sp) in zip(_ranges(k, splits or 1), parts):
        ref_d, ref_s = _reference(a, b, lo, hi)
        if hi == lo:
            assert (dp == 0).all() and (sp == 0).all(), "an empty range holds zeros"
            continue
        rel = float((dp.double() - ref_d).norm() / ref_d.norm().clamp(min=1e-30))
        assert rel < 2e-3, f"K [{lo}, {hi}): relative error {rel:.3e} of d"
        rel_s = float((sp.double() - ref_s).norm() / ref_s.norm().clamp(min=1e-30))
        assert rel_s < 1e-4, f"K [{lo}, {hi}): relative error {rel_s:.3e} of s"
        tf32_d = _reference(a, b, lo, hi, tf32=True)[0]
        rel_tf32 = float((dp.double() - tf32_d).norm() / tf32_d.norm().clamp(min=1e-30))
        # FP32 accumulation's error grows with the range's length (measured 3.3e-5 at K 28672 on the H200)
        bound = 2e-5 * max(1.0, ((hi - lo) / 4096) ** 0.5)
        assert rel_tf32 < bound, f"K [{lo}, {hi}): relative error {rel_tf32:.3e} against the TF32-rounded product"
        if dp.numel() >= 256:
            diff = calc_diff(dp, tf32_d)
            assert diff < max(1e-10, bound ** 2), f"K [{lo}, {hi}): calc_diff {diff:.3e} against the TF32-rounded product"
    if d.numel() >= 256:
        _check_against_torch(a, b, d if splits is None else d.sum(0), s if splits is None else s.sum(0))


def _check_against_torch(a, b, final_d, final_s):
    """DeepGEMM's test of tf32_hc_prenorm_gemm: calc_diff < 1e-8 against ``a.float() @ b.T`` with TF32 allowed and
    ``a.float().square().sum(-1)``."""
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        ref_d = a.float() @ b.T
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    diff = max(calc_diff(final_d, ref_d), calc_diff(final_s, a.float().square().sum(-1)))
    assert diff < 1e-8, f"calc_diff {diff:.3e} against torch's TF32 product (DeepGEMM's test asks < 1e-8)"


def _outputs(m, n, splits):
    lead = () if splits is None else (splits,)
    nan = float("nan")
    return (torch.full(lead + (m, n), nan, device="cuda"), torch.full(lead + (m,), nan, device="cuda"))


# DeepGEMM's test shapes (M 13 .. 8192, N 24, K 7168 .. 28672, no splits or 16) and odd ones.
CASES = [(m, 24, k, splits) for m in (13, 137, 4096, 8192) for k in (28672, 7680, 7168) for splits in (None, 16)]
CASES += [(1, 24, 7168, None), (63, 20, 7176, 3), (65, 1, 200, None), (300, 64, 4096, 7), (129, 8, 8, 2),
          (2000, 24, 7168, 200), (77, 24, 512, 16)]


@pytest.mark.parametrize("m,n,k,splits", CASES, ids=[f"m{c[0]}-n{c[1]}-k{c[2]}-s{c[3]}" for c in CASES])
def test_matches_float64(m, n, k, splits):
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    a, b = _inputs(m, n, k, seed=m + n + k)
    d, s = _outputs(m, n, splits)
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
    torch.cuda.synchronize()
    _check(a, b, d, s, splits)


@pytest.mark.parametrize("block_m", [64, 128])
@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("per_sm", [1, 2])
def test_every_kernel_variant(block_m, cluster, per_sm):
    """Every tile, cluster (16: non-portable) and ring size (one or two CTAs an SM; 128-row tiles take one)."""
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm
    from dgx.kernels.hc_prenorm import HcPrenormConfig, cluster_fits, stages_for

    if block_m == 128 and per_sm == 2:
        pytest.skip("128-row CTAs take one SM each")
    m, n, k, splits = 333, 24, 7168, 2
    config = HcPrenormConfig(n, k, block_m, splits, cluster, stages_for(n, block_m, cluster, per_sm))
    if not cluster_fits(config, torch.cuda.current_device()):
        pytest.skip(f"no cluster of {cluster} fits on this GPU's GPCs")
    a, b = _inputs(m, n, k, seed=block_m + cluster)
    d, s = _outputs(m, n, splits)
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits, config=config)
    torch.cuda.synchronize()
    _check(a, b, d, s, splits)


def test_strided_operands_and_outputs():
    """a's rows padded (row stride 7200), d's rows padded, the splits' slices apart."""
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    m, n, k, splits = 500, 24, 7168, 4
    a, b = _inputs(m, n, k, seed=3, lda=7200)
    d_store = torch.full((splits, m + 3, 32), float("nan"), device="cuda")
    s_store = torch.full((splits, m + 5), float("nan"), device="cuda")
    d, s = d_store[:, :m, :n], s_store[:, :m]
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
    torch.cuda.synchronize()
    _check(a, b, d, s, splits)
    assert torch.isnan(d_store[:, m:]).all() and torch.isnan(d_store[:, :, n:]).all() and torch.isnan(s_store[:, m:]).all()


def test_rounding_ties_and_edges():
    """b values on the TF32 rounding boundary (ties to even both ways, just above and below a tie, negative ties)
    and an identity a: d reads each b value back as the tensor cores saw it, rounded to nearest even."""
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    n, k = 8, 512
    base = torch.tensor([0x3F800000, 0x3F801000, 0x3F803000, 0x3F801001, 0x3F800FFF, 0xBF801000, 0xBF803000,
                         0x42281000], dtype=torch.int64)
    bits = (base.view(-1, 1) + 0x2000 * torch.arange(k).view(1, -1)).to(torch.int32)
    b = bits.view(torch.float32).cuda()
    a = torch.zeros(k, k, device="cuda", dtype=torch.bfloat16)
    a.fill_diagonal_(1.0)  # d[m, j] = b[j, m]
    d, s = _outputs(k, n, None)
    tf32_hc_prenorm_gemm(a, b, d, s)
    torch.cuda.synchronize()
    assert torch.equal(d.T.contiguous().view(torch.int32), _tf32(b).view(torch.int32)), "b rounded to nearest even"
    assert torch.equal(s, torch.ones(k, device="cuda"))


@pytest.mark.parametrize("m,splits", [(4096, None), (137, 16), (13, None)])
def test_deterministic(m, splits):
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    a, b = _inputs(m, 24, 28672, seed=11)
    d, s = _outputs(m, 24, splits)
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
    first = (d.clone(), s.clone())
    for _ in range(5):
        d.fill_(float("nan"))
        s.fill_(float("nan"))
        tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
        torch.cuda.synchronize()
        assert torch.equal(d, first[0]) and torch.equal(s, first[1])


def test_cuda_graph_replay():
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    m, n, k, splits = 137, 24, 7168, 16
    a, b = _inputs(m, n, k, seed=5)
    d, s = _outputs(m, n, splits)
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)  # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
    a2, b2 = _inputs(m, n, k, seed=6)
    a.copy_(a2)
    b.copy_(b2)
    d.fill_(float("nan"))
    s.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(a, b, d, s, splits)


def test_zero_m_is_a_noop():
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    a = torch.empty(0, 7168, device="cuda", dtype=torch.bfloat16)
    tf32_hc_prenorm_gemm(a, torch.randn(24, 7168, device="cuda"), torch.empty(0, 24, device="cuda"),
                         torch.empty(0, device="cuda"))
    torch.cuda.synchronize()
