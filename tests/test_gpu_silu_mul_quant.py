"""dgx.silu_mul_quant on the GPU: FP8 values and scales against float64 references and, where the FP32 h is exact,
bit for bit against per_token_cast_to_fp8 on the same FP32 values; outputs poisoned first; contiguous and masked
shapes (counts 0, 1 and Mmax, rows past the counts untouched, CUDA-graph replay with new counts); the clamp; UE8M0
and packed UE8M0 scales; the GEMM reading the result as its A; determinism; PDL."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import dgx  # noqa: E402
from dgx.deep_gemm.utils import per_token_cast_to_fp8  # noqa: E402
from dgx.torch_utils import calc_diff  # noqa: E402
from dgx.ue8m0 import get_mn_major_tma_aligned_packed_ue8m0_tensor  # noqa: E402

FP8_NAN = 0x7F  # e4m3fn NaN byte: what the outputs are poisoned with
SF_POISON = float("nan")
PACKED_POISON = -1  # 0xffffffff: every byte set, so unwritten padding bytes show


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _random_x(shape, seed: int) -> torch.Tensor:
    """BF16 gate/up halves of varied magnitude per row (and some all-zero 128-channel blocks: the 1e-4 clamp)."""
    g = _gen(seed)
    x = torch.randn(shape, device="cuda", generator=g) * torch.exp2(torch.randint(-8, 6, (*shape[:-1], 1), device="cuda",
                                                                                     generator=g).float())
    x = x.to(torch.bfloat16)
    inter = shape[-1] // 2
    flat = x.view(-1, shape[-1])
    if flat.shape[0] > 2:
        flat[1, inter:inter + 128] = 0  # up zero: h zero on that block
        flat[2] = 0
    return x


def _exact_x(shape, seed: int) -> torch.Tensor:
    """x whose FP32 h is exact in any correct implementation: gate in [17, 57] (exp(-gate) < 2^-24, so 1 + exp(-gate)
    rounds to 1 and silu(gate) = gate), and gate * up, a product of two BF16 values, is exact in FP32."""
    g = _gen(seed)
    inter = shape[-1] // 2
    gate = 17 + 40 * torch.rand((*shape[:-1], inter), device="cuda", generator=g)
    up = torch.randn((*shape[:-1], inter), device="cuda", generator=g)
    up = up * torch.exp2(torch.randint(-20, 4, (*shape[:-1], 1), device="cuda", generator=g).float())
    x = torch.cat([gate, up], -1).to(torch.bfloat16)
    flat = x.view(-1, shape[-1])
    if flat.shape[0] > 1:
        flat[0, inter:] = 0
    return x


def _h(x: torch.Tensor, limit: float | None, dtype=torch.float32) -> torch.Tensor:
    """silu(gate) * up with the clamp, in `dtype` (float32: torch's own rounding; float64: the reference)."""
    inter = x.shape[-1] // 2
    gate, up = x[..., :inter].to(dtype), x[..., inter:].to(dtype)
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return torch.nn.functional.silu(gate) * up


def _dequant(y: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """y [.., M, I] FP8 times its scales [.., M, I/128] (any strides), float64."""
    return (y.double().unflatten(-1, (-1, 128)) * sf.double().unsqueeze(-1)).flatten(-2)


def _gate(x: torch.Tensor, limit: float | None) -> torch.Tensor:
    gate = x[..., :x.shape[-1] // 2].double()
    return gate.clamp(max=limit) if limit is not None else gate


def _kernel_h_error(x: torch.Tensor, limit: float | None, h: torch.Tensor) -> torch.Tensor:
    """A bound on |the kernel's FP32 h - the float64 h| per element, from its fast forms: e = ex2.approx(-g log2e)
    is within 2 + 1.173 |g| ulps of exp(-g) (CUDA's bound for __expf, which is this sequence), and reaches silu
    damped by 1 - sigmoid(g); then RN(1 + e), rcp.approx (1 ulp), RN(g * r), RN(* u): 2.5 ulps. One ulp <= 2^-23
    relative; 1.2 |g| and 3 instead of 1.173 |g| and 2.5 cover the second-order terms. Flushed subnormals (FTZ) add
    at most 2^-126 |g u|."""
    g = _gate(x, limit)
    up = x[..., x.shape[-1] // 2:].double()
    if limit is not None:
        up = up.clamp(-limit, limit)
    ulps = (1 - torch.sigmoid(g)) * (2 + 1.2 * g.abs()) + 3
    return h.abs() * ulps * 2**-23 + (g * up).abs() * 2**-126


def _torch_h_error(x: torch.Tensor, limit: float | None, h: torch.Tensor) -> torch.Tensor:
    """The same bound for torch's FP32 silu(gate) * up: expf within 2 ulps (damped by 1 - sigmoid), IEEE division
    and the product 0.5 ulp each, the sum 1 + e 0.5 ulp: 2 ulps with margin."""
    g = _gate(x, limit)
    return h.abs() * ((1 - torch.sigmoid(g)) * 2 + 2) * 2**-23


def _block_max(t: torch.Tensor) -> torch.Tensor:
    return t.unflatten(-1, (-1, 128)).amax(-1)


def _check_against_float64(x, y, sf, limit, ue8m0=False):
    """Every value within FP8 rounding of the float64 h plus the kernel's error in h (_kernel_h_error), the scales
    within that error and two FP32 roundings of amax * RN(1 / 448) (UE8M0: the power of two at or above it), and
    calc_diff < 1e-3."""
    h = _h(x, limit, torch.float64)
    herr = _kernel_h_error(x, limit, h)
    amax = _block_max(h.abs()).clamp(min=1e-4)
    want = amax / 448
    slack = _block_max(herr) / 448  # max(., 1e-4) and the max over a block move by at most the largest error
    if ue8m0:
        low, high = want - slack, 2 * (want + slack)
        assert bool((sf.double() >= low * (1 - 2**-22)).all()) and bool((sf.double() < high * (1 + 2**-22)).all())
        bits = sf.contiguous().view(torch.int32)
        assert bool(((bits & 0x7FFFFF) == 0).all()), "UE8M0 scales are powers of two"
    else:
        # RN(1 / 448) and the product round once each (2^-24 relative); 2^-22 covers both and the second order.
        assert bool(((sf.double() - want).abs() <= slack + want * 2**-22).all()), "sf = amax * RN(1 / 448) in FP32"
    back = _dequant(y, sf)
    step = sf.double().repeat_interleave(128, -1)
    # FP8 e4m3 rounding of h_kernel * RN(1 / sf): half a step, 2^-4 relative (normals) or sf * 2^-10 (subnormals,
    # doubled here), RN(1 / sf) and the product 2^-21 together; plus how far h_kernel is from h.
    bound = h.abs() * (2**-4 + 2**-21) + step * 2**-9 + herr * (1 + 2**-4)
    assert bool(((back - h).abs() <= bound).all()), float(((back - h).abs() - bound).max())
    if h.abs().sum() > 0:
        assert calc_diff(back, h) < 1e-3


def _dequant_block(q: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """A weight [N, K] FP8 with per-128x128 scales [N/128, K/128], float64 (N and K multiples of 128 here)."""
    return (q.double().unflatten(0, (-1, 128)).unflatten(-1, (-1, 128)) * sf.double()[:, None, :, None]).flatten(2, 3) \
        .flatten(0, 1)


def _poisoned(shape_y, sf_like, packed=False):
    y = torch.full(shape_y, FP8_NAN, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    sf = torch.empty_strided(sf_like.shape, sf_like.stride(), dtype=sf_like.dtype, device="cuda")
    sf.fill_(PACKED_POISON if packed else SF_POISON)
    return y, sf


@pytest.mark.parametrize("m,inter", [(1, 128), (3, 2048), (1000, 2048), (4096, 1536), (257, 640)])
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_exact_h_is_bitwise_per_token_cast_to_fp8(m, inter, use_ue8m0):
    """Where every implementation's FP32 h is the same (see _exact_x), y and sf are bit for bit DeepGEMM's
    per_token_cast_to_fp8 of h (dgx.deep_gemm.utils: amax / 448, UE8M0 rounding up, h * (1 / sf), nearest even)."""
    x = _exact_x((m, 2 * inter), seed=m + inter)
    h = _h(x, None)
    want_y, want_sf = per_token_cast_to_fp8(h, use_ue8m0=use_ue8m0)
    y, sf = dgx.silu_mul_quant(x, use_ue8m0=use_ue8m0)
    torch.cuda.synchronize()
    assert sf.stride() == (1, (m + 3) // 4 * 4), "the GEMM's M-major TMA-aligned layout"
    assert torch.equal(sf, want_sf), "scales bitwise equal to per_token_cast_to_fp8 on the same FP32 h"
    assert torch.equal(y.view(torch.uint8), want_y.view(torch.uint8))


def test_random_inputs_against_float64_and_torch():
    """General inputs: within FP8 rounding of the float64 reference; the scales also against per_token_cast_to_fp8 of
    torch's FP32 h: equal where the two FP32 h agree (test_exact_h_is_bitwise_per_token_cast_to_fp8), otherwise
    apart by at most the two h's errors (the kernel's fast forms, torch's expf) over 448."""
    x = _random_x((2000, 4096), seed=1)
    y, sf = dgx.silu_mul_quant(x)
    torch.cuda.synchronize()
    _check_against_float64(x, y, sf, None)
    _, want_sf = per_token_cast_to_fp8(_h(x, None), use_ue8m0=False)
    h = _h(x, None, torch.float64)
    apart = _block_max(_kernel_h_error(x, None, h) + _torch_h_error(x, None, h)) / 448
    assert bool(((sf.double() - want_sf.double()).abs() <= apart + want_sf.double() * 2**-22).all())


def test_torch_divides_by_448_as_a_product_with_its_reciprocal():
    """Why the kernel's sf is amax * RN(1 / 448), not RN(amax / 448): torch's CUDA division by a Python scalar
    multiplies by the scalar's rounded reciprocal, and per_token_cast_to_fp8 writes amax / 448.0. The two differ in
    the last bit for some amax; the kernel follows torch (the bitwise test above)."""
    amax = torch.rand(1 << 16, device="cuda", generator=_gen(13)) * 100 + 1e-4
    inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(448.0, dtype=torch.float32)
    assert torch.equal(amax / 448.0, amax * inv.item())
    assert not torch.equal(amax / 448.0, (amax.double() / 448).float()), "the two roundings differ somewhere"


@pytest.mark.parametrize("limit", [7.0, 0.75, 1e4])
def test_swiglu_limit_clamps_gate_above_and_up_both_ways(limit):
    x = (_random_x((300, 1024), seed=2).float() * 64).to(torch.bfloat16)  # many values past the limit
    y, sf = dgx.silu_mul_quant(x, swiglu_limit=limit)
    torch.cuda.synchronize()
    _check_against_float64(x, y, sf, limit)
    if limit < 100:
        unclamped, _ = dgx.silu_mul_quant(x)
        assert not torch.equal(unclamped.view(torch.uint8), y.view(torch.uint8))
    exact = _exact_x((300, 1024), seed=3)
    y, sf = dgx.silu_mul_quant(exact, swiglu_limit=30.0)  # gate stays >= 17: h still exact in FP32
    want_y, want_sf = per_token_cast_to_fp8(_h(exact, 30.0), use_ue8m0=False)
    assert torch.equal(sf, want_sf) and torch.equal(y.view(torch.uint8), want_y.view(torch.uint8))


@pytest.mark.parametrize("inter", [512, 640, 2048])
def test_packed_ue8m0_is_the_packed_layout_with_zero_padding(inter):
    m = 77
    x = _random_x((m, 2 * inter), seed=inter)
    _, ue8m0 = dgx.silu_mul_quant(x, use_ue8m0=True)
    y_like, sf_like = dgx.silu_mul_quant(x, use_ue8m0=True, packed_ue8m0=True)
    y, packed = _poisoned(y_like.shape, sf_like, packed=True)
    dgx.silu_mul_quant(x, use_ue8m0=True, packed_ue8m0=True, out=y, out_scales=packed)
    torch.cuda.synchronize()
    want = get_mn_major_tma_aligned_packed_ue8m0_tensor(ue8m0)
    assert packed.shape == want.shape and packed.stride() == want.stride()
    assert torch.equal(packed, want), "exponent bytes in order, zeros past I / 128 in the last word"
    assert torch.equal(y.view(torch.uint8), y_like.view(torch.uint8))
    _check_against_float64(x, y, ue8m0, None, ue8m0=True)


def _masked_case(groups, mmax, inter, counts, seed, **kwargs):
    x = _random_x((groups, mmax, 2 * inter), seed)
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    y_like, sf_like = dgx.silu_mul_quant(x, masked_m=masked_m, **kwargs)
    y, sf = _poisoned(y_like.shape, sf_like, packed=kwargs.get("packed_ue8m0", False))
    return x, masked_m, y, sf


def _check_masked(x, counts, y, sf, limit=None, packed=False):
    inter = y.shape[-1]
    for g, count in enumerate(counts):
        if count:
            if packed:
                _, ue8m0 = dgx.silu_mul_quant(x[g, :count].contiguous(), swiglu_limit=limit, use_ue8m0=True)
                torch.cuda.synchronize()
                assert torch.equal(sf[g, :count], get_mn_major_tma_aligned_packed_ue8m0_tensor(ue8m0))
                _check_against_float64(x[g, :count], y[g, :count], ue8m0, limit, ue8m0=True)
            else:
                _check_against_float64(x[g, :count], y[g, :count], sf[g, :count], limit)
        assert bool((y[g, count:].view(torch.uint8) == FP8_NAN).all()), f"group {g}: rows past {count} written"
        rest = sf[g, count:]
        assert bool((rest == PACKED_POISON).all()) if packed else bool(rest.isnan().all()), f"group {g}: scales past {count}"
    assert y.shape[-1] == inter


@pytest.mark.parametrize("packed", [False, True])
def test_masked_counts_zero_one_and_max(packed):
    groups, mmax, inter = 6, 256, 2048
    counts = [0, 1, mmax, 37, 128, 255]
    kwargs = dict(use_ue8m0=True, packed_ue8m0=True) if packed else {}
    x, masked_m, y, sf = _masked_case(groups, mmax, inter, counts, seed=4, **kwargs)
    assert sf.stride() == ((inter // 128 + 3) // 4 * 256 if packed else inter // 128 * 256, 1, 256)
    dgx.silu_mul_quant(x, masked_m=masked_m, out=y, out_scales=sf, **kwargs)
    torch.cuda.synchronize()
    _check_masked(x, counts, y, sf, packed=packed)


def test_masked_graph_replay_follows_new_counts():
    groups, mmax, inter = 8, 64, 1024
    x, masked_m, y, sf = _masked_case(groups, mmax, inter, [0] * groups, seed=5, swiglu_limit=5.0)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dgx.silu_mul_quant(x, masked_m=masked_m, swiglu_limit=5.0, out=y, out_scales=sf)  # load outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            dgx.silu_mul_quant(x, masked_m=masked_m, swiglu_limit=5.0, out=y, out_scales=sf)
    torch.cuda.synchronize()
    for counts in ([0, 1, 64, 3, 0, 17, 63, 2], [64] * 8, [5, 0, 0, 0, 0, 0, 0, 1]):
        y.view(torch.uint8).fill_(FP8_NAN)
        sf.fill_(SF_POISON)
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(x, counts, y, sf, limit=5.0)


def test_counts_past_mmax_are_taken_as_mmax():
    x, masked_m, y, sf = _masked_case(2, 32, 256, [0, 0], seed=6)
    masked_m.copy_(torch.tensor([1000, -5], dtype=torch.int32))
    dgx.silu_mul_quant(x, masked_m=masked_m, out=y, out_scales=sf)
    torch.cuda.synchronize()
    _check_masked(x, [32, 0], y, sf)


def test_the_fp8_gemm_reads_the_result_as_its_a():
    """(y, sf) passed to fp8_gemm_nt and the masked GEMM as they come: the product of the dequantised values."""
    from dgx.torch_utils import per_block_cast_to_fp8

    m, inter, n = 300, 2048, 512
    x = _random_x((m, 2 * inter), seed=7)
    y, sf = dgx.silu_mul_quant(x)
    w = torch.randn(n, inter, device="cuda", generator=_gen(8))
    b = per_block_cast_to_fp8(w)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dgx.fp8_gemm_nt((y, sf), b, d)
    ref = _dequant(y, sf) @ _dequant_block(*b).T
    assert calc_diff(d.double(), ref) < 1e-4
    groups, mmax = 3, 128
    xm, masked_m, ym, sfm = _masked_case(groups, mmax, inter, [5, 128, 0], seed=9)
    dgx.silu_mul_quant(xm, masked_m=masked_m, out=ym, out_scales=sfm)
    bm = [per_block_cast_to_fp8(torch.randn(n, inter, device="cuda", generator=_gen(10 + g))) for g in range(groups)]
    dm = torch.zeros(groups, mmax, n, device="cuda", dtype=torch.bfloat16)
    dgx.m_grouped_fp8_gemm_nt_masked((ym, sfm), (torch.stack([t[0] for t in bm]), torch.stack([t[1] for t in bm])), dm,
                                     masked_m, 128)
    for g, count in enumerate([5, 128, 0]):
        if count:
            ref = _dequant(ym[g, :count], sfm[g, :count]) @ _dequant_block(*bm[g]).T
            assert calc_diff(dm[g, :count].double(), ref) < 1e-4


def test_deterministic_and_the_same_under_pdl():
    x = _random_x((3000, 4096), seed=11)
    first = dgx.silu_mul_quant(x, use_ue8m0=True)
    again = dgx.silu_mul_quant(x, use_ue8m0=True)
    previous = dgx.get_pdl()
    dgx.set_pdl(True)
    try:
        pdl = dgx.silu_mul_quant(x, use_ue8m0=True)
    finally:
        dgx.set_pdl(previous)
    torch.cuda.synchronize()
    for other in (again, pdl):
        assert torch.equal(first[0].view(torch.uint8), other[0].view(torch.uint8)) and torch.equal(first[1], other[1])


def test_torch_operator_and_compile():
    import dgx.torch_ops as ops

    x = _random_x((64, 512), seed=12)
    y, sf = ops.silu_mul_quant(x, swiglu_limit=3.0)
    want_y, want_sf = dgx.silu_mul_quant(x, swiglu_limit=3.0)
    assert torch.equal(y.view(torch.uint8), want_y.view(torch.uint8)) and torch.equal(sf, want_sf)
    compiled = torch.compile(lambda t: ops.silu_mul_quant(t, use_ue8m0=True), fullgraph=True)
    cy, csf = compiled(x)
    want_y, want_sf = dgx.silu_mul_quant(x, use_ue8m0=True)
    assert torch.equal(cy.view(torch.uint8), want_y.view(torch.uint8)) and torch.equal(csf, want_sf)
    assert csf.stride() == want_sf.stride()
