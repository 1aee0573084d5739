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
    return torch.randn(*shape, device="cuda", dtype=BF16)  # (no FP32 copy: the large cases stay modest in memory)


def _poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def _check(out, ref, what: str, whole: float | None = None) -> None:
    """All written (no NaN), within the output's rounding normwise over the whole output and per slice of its
    first dimension (a wrong head, batch row or tile stands out in its own norm). `whole`: the FP32 bound when the
    default (2e-5, BF16 2.5e-3) is not the one; a slice may err 5x the whole."""
    _check_parts([(out, ref)], what, whole)


def _check_parts(parts, what: str, whole: float | None = None) -> None:
    """_check over an output given in parts (out, ref) along its first dimension, each reference computed apart so
    that no float64 copy of a large operand is ever whole."""
    sq_err = sq_ref = 0.0
    worst, worst_at, first = 0.0, 0, 0
    for out, ref in parts:
        assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} elements not written"
        if whole is None:
            whole = 2.5e-3 if out.dtype == BF16 else 2e-5
        line = 6e-3 if out.dtype == BF16 else 5 * whole
        err = out.double() - ref
        sq_err += float(err.square().sum())
        sq_ref += float(ref.square().sum())
        per = err.flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1).clamp(min=1e-30)
        at = int(per.argmax())
        if float(per[at]) > worst:
            worst, worst_at = float(per[at]), first + at
        first += out.shape[0]
    rel = (sq_err / max(sq_ref, 1e-60)) ** 0.5
    assert rel <= whole, f"{what}: normwise error {rel:.3e} (bound {whole:.3e})"
    if first > 1:
        assert worst <= line, f"{what}: slice {worst_at} error {worst:.3e} (bound {line:.3e})"


# --- 'bmk,bnk->mn' ---------------------------------------------------------------------------------------------

SUM_SHAPES = [(128, 384, 128), (256, 256, 256), (384, 128, 384)]


U = 2.0 ** -24  # FP32 unit roundoff
S_CHUNK = 256  # batches per float64 reference chunk


def _sum_reference(a, b):
    """The float64 'bmk,bnk->mn' of a and b, summed over S in chunks (no float64 copy of a or b whole)."""
    ref = torch.zeros(a.shape[1], b.shape[1], device="cuda", dtype=torch.float64)
    for s0 in range(0, a.shape[0], S_CHUNK):
        ref += torch.einsum("bmk,bnk->mn", a[s0:s0 + S_CHUNK].double(), b[s0:s0 + S_CHUNK].double())
    return ref


def _torch_fp32_error(a, b, ref) -> float:
    """Normwise error of torch's own FP32 path on the same inputs: per-batch bmm in FP32, then the sum over S (in
    chunks of S_CHUNK batches), for the assertion messages."""
    out = torch.zeros_like(ref, dtype=F32)
    for s0 in range(0, a.shape[0], S_CHUNK):
        out += torch.bmm(a[s0:s0 + S_CHUNK].float(), b[s0:s0 + S_CHUNK].float().transpose(1, 2)).sum(0)
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


def _sum_bound(s: int, m: int, n: int, k: int) -> float:
    """Normwise bound of the FP32 'bmk,bnk->mn' error, from how the kernels sum (BF16 products are exact in FP32):

    - within a k-block the tensor cores chain k_block / 16 wgmma steps, each truncating its FP32 sum toward zero
      (not IEEE round-to-nearest): a biased error of up to 2u of the running sum per step, so at most 2u x steps;
    - the k-blocks of one range are added by round-to-nearest FADDs (promotion), unbiased: a random walk whose
      normwise size is ~u sqrt(blocks / 2) — bounded here by 4u sqrt(blocks);
    - the reduction kernel sums the ranges in order (round-to-nearest): 4u sqrt(ranges); c and the store: 4u.

    Without the promotion, every range chained all its steps in the tensor cores and erred ~1.9e-8 per step
    (measured on an H200: 3.7e-5 at S 4096, 256^3, 1986 steps; linear in S): 5-20x over this bound at S >= 4096.
    torch's FP32 path (bmm per batch, then the sum) errs ~1e-7..1e-6 on these inputs (reported on failure)."""
    from dgx.device import get_num_sms
    from dgx.intmath import ceil_div
    from dgx.kernels.einsum import batch_sum_ranges, choose_batch_sum

    config = choose_batch_sum(m, n, k, get_num_sms(torch.cuda.current_device()))
    ranges = batch_sum_ranges(config, m, s, get_num_sms(torch.cuda.current_device()))
    k_block = 64 * config.k_atoms
    blocks = ceil_div(s * ceil_div(k, k_block), ranges)
    return U * (2 * k_block / 16 + 4 * blocks ** 0.5 + 4 * ranges ** 0.5 + 4)


@pytest.mark.parametrize("s", [1, 129, 4096, 8192])
@pytest.mark.parametrize("m,n,k", SUM_SHAPES + [(72, 40, 200), (200, 136, 64)])
@pytest.mark.parametrize("mode", ["f32", "f32_c_is_d", "f32_other_c", "bf16"])
def test_bmk_bnk_mn(s, m, n, k, mode):
    if s == 8192 and (m, n, k) not in SUM_SHAPES[:1]:
        pytest.skip("one 8192 case is enough for the odd modes' time")
    a, b = _randn(s, m, k), _randn(s, n, k)
    ref = _sum_reference(a, b)
    if mode == "bf16":
        d = _poisoned(m, n, dtype=BF16)
        dgx.einsum("bmk,bnk->mn", a, b, d)
    elif mode == "f32":
        d = _poisoned(m, n, dtype=F32)
        dgx.einsum("bmk,bnk->mn", a, b, d)
    else:
        c = torch.randn(m, n, device="cuda", dtype=F32) * 10
        if mode == "f32_c_is_d":
            d = c.clone()
            dgx.einsum("bmk,bnk->mn", a, b, d, c=d)
        else:
            d = _poisoned(m, n, dtype=F32)
            dgx.einsum("bmk,bnk->mn", a, b, d, c=c)
    torch.cuda.synchronize()
    what = f"bmk,bnk->mn S={s} {m}x{n}x{k} {mode}"
    if mode == "bf16":
        _check(d, ref, what)
        return
    bound = _sum_bound(s, m, n, k)
    product_err = float((d.double() - (ref if mode == "f32" else ref + c.double())).norm() / ref.norm())
    assert product_err <= bound, (f"{what}: error {product_err:.3e} of the product's norm, bound {bound:.3e}; "
                                  f"torch's FP32 path errs {_torch_fp32_error(a, b, ref):.3e}")
    _check(d, ref if mode == "f32" else ref + c.double(), what, whole=bound)


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
    _check_parts(_per_head_parts(expr, x, y, z), f"{expr} b={b} h={h} r={r} d={d}")  # per head


def _per_head_parts(expr, x, y, z, heads_per_part: int = 8):
    """(z, reference) per group of heads, head first: the float64 reference of a few heads at a time (b 8192 x h
    128 x r 512 is 4 GiB in float64 whole)."""
    for h0 in range(0, x.shape[1], heads_per_part):
        h1 = h0 + heads_per_part
        ref = torch.einsum(expr, x[:, h0:h1].double(), y[h0:h1].double())
        yield z[:, h0:h1].transpose(0, 1), ref.transpose(0, 1)


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
