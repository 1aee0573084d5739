"""dgx.fp8_einsum('bhr,hdr->bhd') on the GPU: against the float64 einsum of the dequantised inputs (and calc_diff
against the BF16 einsum of the originals, as DeepGEMM's test checks), outputs poisoned with NaN before each call,
FP32 and UE8M0-valued scales, DeepSeek's two MLA shapes over b 1 .. 8192 (odd b too) and odd shapes (d not a
multiple of 128, r not a multiple of 128, strided x and z), the converted and the pre-laid-out scales, the fast
path, determinism, CUDA-graph replay, the torch operator and DeepGEMM's name."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from fp8_einsum_utils import BS, SHAPES, check, make  # noqa: E402

SENTINEL = -7.25  # what z's padding columns hold before a call, and must hold after it


CASES = [(b, h, d, r) for h, d, r in SHAPES for b in BS]


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32-scales", "ue8m0-scales"])
@pytest.mark.parametrize("b,h,d,r", CASES, ids=[f"b{c[0]}-h{c[1]}-d{c[2]}-r{c[3]}" for c in CASES])
def test_matches_float64_reference(b, h, d, r, ue8m0):
    import dgx

    x, y, xs, ys, z = make(b, h, d, r, ue8m0, seed=b + h + d)
    dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)
    torch.cuda.synchronize()
    check(z, x, y, xs, ys)


ODD = [(33, 3, 136, 320), (1, 1, 8, 16), (300, 5, 264, 1040), (129, 16, 512, 7168)]


@pytest.mark.parametrize("b,h,d,r", ODD, ids=[f"b{c[0]}-h{c[1]}-d{c[2]}-r{c[3]}" for c in ODD])
def test_odd_shapes_with_strided_x_and_z(b, h, d, r):
    """d and r not multiples of 128 (partial tiles, K tail), x a slice of wider rows, z a slice whose padding
    columns must stay untouched."""
    import dgx

    x, y, (xq, sfx), ys, _ = make(b, h, d, r, seed=7 * b + d)
    wide = torch.zeros((b, h, r + 48), device="cuda", dtype=torch.float8_e4m3fn)
    wide[..., :r] = xq
    zbuf = torch.full((b, h, d + 24), SENTINEL, device="cuda", dtype=torch.bfloat16)
    z = zbuf[..., :d]
    z.fill_(float("nan"))
    dgx.fp8_einsum("bhr,hdr->bhd", (wide[..., :r], sfx), ys, z)
    torch.cuda.synchronize()
    check(z, x, y, (xq, sfx), ys)
    assert (zbuf[..., d:] == SENTINEL).all(), "z's padding columns were written"


def test_pre_laid_out_scales_give_the_same_bits():
    import dgx
    from dgx.fp8_einsum import sfx_for_kernel

    x, y, (xq, sfx), ys, z = make(4097, 8, 1024, 4096, seed=11)
    dgx.fp8_einsum("bhr,hdr->bhd", (xq, sfx), ys, z)
    z2 = torch.full_like(z, float("nan"))
    dgx.fp8_einsum("bhr,hdr->bhd", (xq, sfx_for_kernel(sfx)), ys, z2)
    torch.cuda.synchronize()
    assert torch.equal(z, z2)


def test_deterministic_and_fast_path_calls_agree():
    import dgx

    x, y, xs, ys, z = make(4096, 8, 1024, 4096, seed=3)
    dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)
    torch.cuda.synchronize()
    check(z, x, y, xs, ys)
    first = z.clone()
    for _ in range(3):  # the fast path, fresh outputs (relocated addresses) and the same one
        fresh = torch.full_like(z, float("nan"))
        dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, fresh)
        dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)
        torch.cuda.synchronize()
        assert torch.equal(fresh, first) and torch.equal(z, first)


@pytest.mark.parametrize("b,h,d,r", [(32, 8, 1024, 4096), (4096, 128, 128, 512)])
def test_cuda_graph_replay_follows_new_inputs(b, h, d, r):
    import dgx

    x, y, xs, ys, z = make(b, h, d, r, seed=5)
    dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)  # compiled and planned before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)
    for seed in (6, 7):
        x2, y2, xs2, ys2, _ = make(b, h, d, r, seed=seed)
        for dst, src in zip(xs + ys, xs2 + ys2):
            dst.copy_(src)
        z.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(z, x2, y2, xs, ys)


def test_torch_operator_and_deep_gemm_name_match():
    import dgx
    import dgx.deep_gemm as deep_gemm
    import dgx.torch_ops as T

    x, y, xs, ys, z = make(128, 8, 1024, 4096, ue8m0=True, seed=9)
    dgx.fp8_einsum("bhr,hdr->bhd", xs, ys, z)
    z_op = torch.full_like(z, float("nan"))
    T.fp8_einsum("bhr,hdr->bhd", xs, ys, z_op)
    z_dg = torch.full_like(z, float("nan"))
    deep_gemm.fp8_einsum("bhr,hdr->bhd", xs, ys, z_dg)
    torch.cuda.synchronize()
    check(z, x, y, xs, ys)
    assert torch.equal(z, z_op) and torch.equal(z, z_dg)


def test_torch_compile_fullgraph_runs_the_operator():
    import dgx.torch_ops as T

    x, y, xs, ys, _ = make(64, 8, 256, 512, seed=13)

    def f(xq, sfx, yq, sfy):
        z = torch.empty(xq.shape[0], xq.shape[1], yq.shape[1], device=xq.device, dtype=torch.bfloat16)
        T.fp8_einsum("bhr,hdr->bhd", (xq, sfx), (yq, sfy), z)
        return z

    z = torch.compile(f, fullgraph=True)(*xs, *ys)
    torch.cuda.synchronize()
    check(z, x, y, xs, ys)


def test_bad_input_raises_before_launch_on_the_device():
    import dgx

    _, _, (xq, sfx), (yq, sfy), z = make(32, 8, 256, 512, seed=1)
    with pytest.raises(ValueError, match="sfy: expected shape"):
        dgx.fp8_einsum("bhr,hdr->bhd", (xq, sfx), (yq, sfy[:, :1]), z)
    with pytest.raises(NotImplementedError, match="sm_100"):
        dgx.fp8_einsum("bhd,hdr->bhr", (xq, sfx), (yq, sfy), z)
    assert torch.isnan(z).all()
