"""The BF16 einsums on the GPU against float64 references: 'bmk,bnk->mn' (FP32 D with and without C, C = D and
another tensor; BF16 D) over DeepGEMM's shapes and odd ones (S = 1, 129; M, N not multiples of the tile), the per-head
'bhr,hdr->bhd' / 'bhd,hdr->bhr' over DeepGEMM's shapes with y a strided slice and odd b (1, 17); bitwise determinism
(two runs, same bits); CUDA-graph capture and replay (the partials' workspace owned by the graph); DeepGEMM's name
with use_cublaslt. Fresh random inputs; outputs poisoned with NaN before each run, so an element the kernels should
write and do not is caught."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import dgx  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32


def _randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=F32).to(BF16)


def _poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def _check(out, ref, what: str) -> None:
    """All written (no NaN), within the output's rounding normwise over the whole output and per slice of its
    first dimension (a wrong head, batch row or tile stands out in its own norm)."""
    assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} elements not written"
    err = out.double() - ref
    whole, line = (2.5e-3, 6e-3) if out.dtype == BF16 else (2e-5, 1e-4)
    rel = float(err.norm() / ref.norm().clamp(min=1e-30))
    assert rel <= whole, f"{what}: normwise error {rel:.3e}"
    if ref.shape[0] > 1:
        per = err.flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1).clamp(min=1e-30)
        worst = int(per.argmax())
        assert float(per[worst]) <= line, f"{what}: slice {worst} error {float(per[worst]):.3e}"


# --- 'bmk,bnk->mn' ---------------------------------------------------------------------------------------------

SUM_SHAPES = [(128, 384, 128), (256, 256, 256), (384, 128, 384)]


@pytest.mark.parametrize("s", [1, 129, 4096, 8192])
@pytest.mark.parametrize("m,n,k", SUM_SHAPES + [(72, 40, 200), (200, 136, 64)])
@pytest.mark.parametrize("mode", ["f32", "f32_c_is_d", "f32_other_c", "bf16"])
def test_bmk_bnk_mn(s, m, n, k, mode):
    if s == 8192 and (m, n, k) not in SUM_SHAPES[:1]:
        pytest.skip("one 8192 case is enough for the odd modes' time")
    a, b = _randn(s, m, k), _randn(s, n, k)
    ref = torch.einsum("bmk,bnk->mn", a.double(), b.double())
    if mode == "bf16":
        d = _poisoned(m, n, dtype=BF16)
        dgx.einsum("bmk,bnk->mn", a, b, d)
    elif mode == "f32":
        d = _poisoned(m, n, dtype=F32)
        dgx.einsum("bmk,bnk->mn", a, b, d)
    else:
        c = torch.randn(m, n, device="cuda", dtype=F32) * 10
        ref = ref + c.double()
        if mode == "f32_c_is_d":
            d = c
            dgx.einsum("bmk,bnk->mn", a, b, d, c=d)
        else:
            d = _poisoned(m, n, dtype=F32)
            dgx.einsum("bmk,bnk->mn", a, b, d, c=c.clone())
    torch.cuda.synchronize()
    _check(d, ref, f"bmk,bnk->mn S={s} {m}x{n}x{k} {mode}")


def test_bmk_bnk_mn_strided_batches_and_no_batches():
    s, m, n, k = 129, 128, 128, 128
    a = _randn(s, m, k + 64)[:, :, :k]  # rows 16-byte multiples apart, not contiguous
    b = _randn(n, s, k).transpose(0, 1)  # the batch is the middle dimension in memory
    d = _poisoned(m, n, dtype=F32)
    dgx.einsum("bmk,bnk->mn", a, b, d)
    _check(d, torch.einsum("bmk,bnk->mn", a.double(), b.double()), "strided a and b")
    c = torch.randn(m, n, device="cuda")
    d = _poisoned(m, n, dtype=F32)
    dgx.einsum("bmk,bnk->mn", a[:0], b[:0], d, c=c)
    torch.cuda.synchronize()
    assert torch.equal(d, c)


@pytest.mark.parametrize("out", [F32, BF16])
def test_bmk_bnk_mn_is_bitwise_deterministic(out):
    s, m, n, k = 4096, 256, 256, 256
    a, b = _randn(s, m, k), _randn(s, n, k)
    d1, d2 = _poisoned(m, n, dtype=out), _poisoned(m, n, dtype=out)
    dgx.einsum("bmk,bnk->mn", a, b, d1)
    torch.cuda._sleep(1000000)  # another timing of the ranges' CTAs
    dgx.einsum("bmk,bnk->mn", a, b, d2)
    torch.cuda.synchronize()
    assert torch.equal(d1.view(torch.int32 if out == F32 else torch.int16),
                       d2.view(torch.int32 if out == F32 else torch.int16))


# --- 'bhr,hdr->bhd' and 'bhd,hdr->bhr' ----------------------------------------------------------------------------

HEAD_SHAPES = [(128, 512, 128), (8, 4096, 1024)]


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
@pytest.mark.parametrize("h,r,d", HEAD_SHAPES + [(3, 192, 72)])
@pytest.mark.parametrize("b", [1, 4, 17, 32, 128, 4096, 8192])
def test_per_head_einsums(expr, h, r, d, b):
    if b == 8192 and (h, r, d) == (8, 4096, 1024):
        pytest.skip("b 4096 covers the large per-head GEMMs")
    fy = _randn(h, d, r + 128)
    y = fy[:, :, :r]  # DeepGEMM's test: a strided slice of a wider tensor
    if expr == "bhr,hdr->bhd":
        x, z = _randn(b, h, r), _poisoned(b, h, d, dtype=BF16)
    else:
        x, z = _randn(b, h, d), _poisoned(b, h, r, dtype=BF16)
    dgx.einsum(expr, x, y, z)
    torch.cuda.synchronize()
    ref = torch.einsum(expr, x.double(), y.double())
    _check(z.transpose(0, 1), ref.transpose(0, 1), f"{expr} b={b} h={h} r={r} d={d}")  # per head


def test_per_head_output_view_leaves_the_rest_alone():
    b, h, r, d = 17, 4, 256, 64
    x, y = _randn(b, h, r), _randn(h, d, r)
    wide = _poisoned(b, h, d + 32, dtype=BF16)
    z = wide[:, :, :d]
    dgx.einsum("bhr,hdr->bhd", x, y, z)
    torch.cuda.synchronize()
    _check(z.transpose(0, 1), torch.einsum("bhr,hdr->bhd", x.double(), y.double()).transpose(0, 1), "z a view")
    assert torch.isnan(wide[:, :, d:]).all(), "columns past the view were written"


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
def test_per_head_is_bitwise_deterministic(expr):
    x, y = _randn(128, 128, 512 if expr == "bhr,hdr->bhd" else 128), _randn(128, 128, 512)
    n = 128 if expr == "bhr,hdr->bhd" else 512
    z1, z2 = _poisoned(128, 128, n, dtype=BF16), _poisoned(128, 128, n, dtype=BF16)
    dgx.einsum(expr, x, y, z1)
    dgx.einsum(expr, x, y, z2)
    torch.cuda.synchronize()
    assert torch.equal(z1.view(torch.int16), z2.view(torch.int16))


# --- CUDA graphs, DeepGEMM's name ---------------------------------------------------------------------------------


def test_graph_capture_and_replay_follow_new_inputs():
    s, m, n, k = 129, 256, 256, 256
    a, b = _randn(s, m, k), _randn(s, n, k)
    d = torch.zeros(m, n, device="cuda")
    x, y = _randn(32, 8, 1024), _randn(8, 1024, 4096)
    z = _poisoned(32, 8, 4096, dtype=BF16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        dgx.einsum("bmk,bnk->mn", a, b, d, c=d)  # warm: compile and load outside the capture
        dgx.einsum("bhd,hdr->bhr", x, y, z)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            dgx.einsum("bmk,bnk->mn", a, b, d, c=d)
            dgx.einsum("bhd,hdr->bhr", x, y, z)
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):
        a.copy_(_randn(s, m, k))
        x.copy_(_randn(32, 8, 1024))
        d.zero_()
        z.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(d, torch.einsum("bmk,bnk->mn", a.double(), b.double()), "graph replay bmk,bnk->mn")
        _check(z.transpose(0, 1), torch.einsum("bhd,hdr->bhr", x.double(), y.double()).transpose(0, 1),
               "graph replay bhd,hdr->bhr")


def test_deep_gemm_einsum_and_its_cublaslt_path():
    import dgx.deep_gemm as deep_gemm

    x, y = _randn(64, 8, 512), _randn(8, 128, 640)[:, :, :512]
    z, zc = _poisoned(64, 8, 128, dtype=BF16), _poisoned(64, 8, 128, dtype=BF16)
    deep_gemm.einsum("bhr,hdr->bhd", x, y, z)
    deep_gemm.einsum("bhr,hdr->bhd", x, y, zc, use_cublaslt=True)
    torch.cuda.synchronize()
    ref = torch.einsum("bhr,hdr->bhd", x.double(), y.double())
    _check(z.transpose(0, 1), ref.transpose(0, 1), "deep_gemm.einsum")
    _check(zc.transpose(0, 1), ref.transpose(0, 1), "deep_gemm.einsum use_cublaslt")
    # DeepGEMM's own tolerance against torch's BF16 result
    assert float(deep_gemm.testing.calc_diff(z, zc)) < 1e-5


def test_torch_operator_runs_the_kernels():
    a, b = _randn(129, 128, 128), _randn(129, 384, 128)
    d = _poisoned(128, 384, dtype=F32)
    dgx.torch_ops.einsum("bmk,bnk->mn", a, b, d)
    torch.cuda.synchronize()
    _check(d, torch.einsum("bmk,bnk->mn", a.double(), b.double()), "torch.ops.dgx.einsum")
