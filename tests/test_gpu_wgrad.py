"""Weight-gradient GEMMs on the GPU: dense FP32 D = C + A.B^T (both operands per row) and K-grouped."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.torch_utils import dequantize, per_token_cast_to_fp8  # noqa: E402

MAX_REL = 5e-4  # FP32 outputs: normwise against the float64 product of the dequantised inputs


def _rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


def _rows(rows, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return per_token_cast_to_fp8(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=g))


@pytest.mark.parametrize("m, n, k", [(7168, 2112, 4096), (1536, 2048, 1024), (129, 136, 576), (64, 8, 128), (1000, 576, 7168)])
@pytest.mark.parametrize("mode", ["accumulate_in_place", "separate_c", "no_c"])
def test_dense_wgrad(m, n, k, mode):
    import dgx

    a, b = _rows(m, k, 1), _rows(n, k, 2)
    ref = dequantize(*a, 1).double() @ dequantize(*b, 1).double().T
    c = torch.randn(m, n, device="cuda", dtype=torch.float32)
    if mode == "accumulate_in_place":
        d = c.clone()
        dgx.fp8_gemm_nt(a, b, d, c=d)
        ref = ref + c.double()
    elif mode == "separate_c":
        d = torch.full((m, n), float("nan"), device="cuda")
        dgx.fp8_gemm_nt(a, b, d, c=c)
        ref = ref + c.double()
    else:
        d = torch.full((m, n), float("nan"), device="cuda")
        dgx.fp8_gemm_nt(a, b, d)
    torch.cuda.synchronize()
    assert not torch.isnan(d).any()
    assert _rel(d, ref) <= MAX_REL


def test_wgrad_legacy_alias_accumulates():
    import dgx

    a, b = _rows(256, 512, 3), _rows(384, 512, 4)
    out = torch.randn(256, 384, device="cuda")
    ref = out.double() + dequantize(*a, 1).double() @ dequantize(*b, 1).double().T
    dgx.wgrad_gemm_fp8_fp8_fp32_nt(a, b, out)
    torch.cuda.synchronize()
    assert _rel(out, ref) <= MAX_REL


def _k_grouped_inputs(m, n, ks, seed=0):
    """A and B as the groups' [M, k_g] / [N, k_g] matrices stored flat one after another; scales stacked."""
    total = sum(ks)
    g = torch.Generator(device="cuda").manual_seed(seed)
    a16 = torch.randn(m, total, device="cuda", dtype=torch.bfloat16, generator=g)
    b16 = torch.randn(n, total, device="cuda", dtype=torch.bfloat16, generator=g)
    aq, sfa = per_token_cast_to_fp8(a16)
    bq, sfb = per_token_cast_to_fp8(b16)
    a_flat = torch.empty(m * total, dtype=aq.dtype, device="cuda")
    b_flat = torch.empty(n * total, dtype=bq.dtype, device="cuda")
    refs, off = [], 0
    for kg in ks:
        a_flat[m * off : m * (off + kg)].view(m, kg).copy_(aq[:, off : off + kg])
        b_flat[n * off : n * (off + kg)].view(n, kg).copy_(bq[:, off : off + kg])
        kb0, kb1 = off // 128, (off + kg) // 128
        ra = dequantize(aq[:, off : off + kg], sfa[:, kb0:kb1], 1).double()
        rb = dequantize(bq[:, off : off + kg], sfb[:, kb0:kb1], 1).double()
        refs.append(ra @ rb.T)
        off += kg
    return (a_flat, sfa), (b_flat, sfb), refs


@pytest.mark.parametrize(
    "m, n, ks",
    [
        (7168, 4096, [4096] * 4),
        (2048, 7168, [4096, 0, 8192, 128]),  # an empty group and a one-block group
        (512, 256, [1280, 384, 0, 0, 640, 256, 128, 1024]),
        (200, 136, [256]),  # one group
    ],
)
def test_k_grouped(m, n, ks):
    import dgx

    a, b, refs = _k_grouped_inputs(m, n, ks)
    c = torch.randn(len(ks), m, n, device="cuda")
    d = c.clone()
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    dgx.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor)
    torch.cuda.synchronize()
    for g, (kg, ref) in enumerate(zip(ks, refs)):
        if kg == 0:
            assert torch.equal(d[g], c[g]), f"group {g} has no K and must be left as it was"
        else:
            assert _rel(d[g], ref + c[g].double()) <= MAX_REL, f"group {g}"
    # The legacy name, without a device copy of ks: made (and cached) by dgx.
    d2 = c.clone()
    dgx.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(a, b, d2, ks)
    torch.cuda.synchronize()
    assert torch.equal(d, d2)


def _assert_dense_alike(first, second, m: int, seed: int):
    """The dense weight gradient D = C + A.B^T (M = m, N and K of `first`) under two configs: the second within
    MAX_REL of the float64 reference, and bitwise the first's output."""
    import dgx

    n, k = first.n, first.k
    a, b = _rows(m, k, seed), _rows(n, k, seed + 1)
    c = torch.randn(m, n, device="cuda")
    outs = []
    for config in (first, second):
        d = c.clone()
        dgx.fp8_gemm_nt(a, b, d, c=d, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    ref = c.double() + dequantize(*a, 1).double() @ dequantize(*b, 1).double().T
    assert _rel(outs[1], ref) <= MAX_REL
    assert torch.equal(outs[0], outs[1])


def _assert_bitwise_alike(first, second, m: int, seed: int):
    """The weight gradient under two configs of one BLOCK_N: dense (K = first.k) and K-grouped (groups of 10,
    0, 1, 5 and 16 k-blocks, run-time K): the second within MAX_REL of the float64 reference, a group without K
    left as it was, and bitwise the first's output."""
    import dataclasses

    import dgx
    from dgx.kernels.fp8_gemm import LAYOUT_K_GROUPED

    _assert_dense_alike(first, second, m, seed)
    n = first.n

    ks = [1280, 0, 128, 640, 2048]
    ka, kb, refs = _k_grouped_inputs(m, n, ks, seed=seed + 2)
    outs = []
    for config in (first, second):
        d = torch.zeros(len(ks), m, n, device="cuda")
        grouped = dataclasses.replace(config, k=0, layout=LAYOUT_K_GROUPED)
        dgx.k_grouped_fp8_gemm_nt_contiguous(ka, kb, d, ks, config=grouped)
        outs.append(d)
    torch.cuda.synchronize()
    for g, ref in enumerate(refs):
        if ks[g]:
            assert _rel(outs[1][g], ref) <= MAX_REL, f"group {g}"
        else:
            assert not outs[1][g].any(), "a group without K adds nothing"
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("block_m, block_n", [(128, 112), (128, 64), (64, 128)])
def test_deferred_promotion_matches_plain(block_m, block_n):
    """The weight gradient with deferred promotion gives bitwise the plain kernel's output on the same tile:
    dense (K = 1664: a chunk of 8 k-blocks and a tail of 5) and K-grouped (run-time K, the tails as
    one-k-block chunks)."""
    import dataclasses

    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import GemmConfig

    plain = GemmConfig(576, 1664, block_m, block_n, min(max_stages(block_m, block_n, wgrad=True), 4), wgrad=True)
    _assert_bitwise_alike(plain, dataclasses.replace(plain, defer=True), 300, seed=7)


def test_two_slice_stage_rounds_match_one_slice():
    """256-row tiles with a long enough compile-time K run their k-loop in stage rounds from stage 0, the
    producer completing the stages a tile's last round leaves unused with no data; with a run-time K they keep
    the ring. The weight gradient on 256x128 (its FP32 tile leaves room for one stage) against 128x128: dense
    with K = 4480 (rounds of one stage) and K-grouped. Each element's sum runs the same k-blocks in the same
    order through the same MMA width, so the outputs agree bitwise. (The dense GPU tests and the sanitizer
    runs cover rounds with unused stages.)"""
    import dataclasses

    from dgx.kernels.fp8_gemm import GemmConfig

    one = GemmConfig(576, 4480, 128, 128, 4, wgrad=True)
    _assert_bitwise_alike(one, dataclasses.replace(one, block_m=256, stages=1), 300, seed=11)


def test_k_grouped_graph_capture():
    import dgx

    m, n, ks = 256, 512, [512, 256, 384]
    a, b, refs = _k_grouped_inputs(m, n, ks, seed=5)
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    d = torch.zeros(len(ks), m, n, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dgx.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor)  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            dgx.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor)
    for _ in range(2):
        d.zero_()
        graph.replay()
        torch.cuda.synchronize()
        for g, ref in enumerate(refs):
            assert _rel(d[g], ref) <= MAX_REL


def test_k_grouped_repeated_calls_kept_maps_and_fast_path():
    """The groups' maps kept per A/B address and stream (dgx.k_grouped_maps) and the fast path: fresh outputs,
    new A and B buffers (fresh data at fresh or reused addresses), another stream, each call checked against
    its own float64 reference, with d poisoned before each call."""
    import dgx

    m, n, ks = 256, 384, [512, 0, 256, 384]
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    for step in range(6):
        a, b, refs = _k_grouped_inputs(m, n, ks, seed=40 + step)  # later steps: freed addresses reused, new data
        for stream in (None, side, None):
            c = torch.randn(len(ks), m, n, device="cuda")
            d = c.clone()
            if stream is None:
                dgx.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor if step % 2 else None)
            else:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    dgx.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor)
                torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            for g, (kg, ref) in enumerate(zip(ks, refs)):
                if kg == 0:
                    assert torch.equal(d[g], c[g]), (step, g)
                else:
                    assert _rel(d[g], ref + c[g].double()) <= MAX_REL, (step, g, stream)
        del a, b


def test_wgrad_input_checks():
    import dgx

    a, b = _rows(256, 512, 3), _rows(384, 512, 4)
    d = torch.zeros(256, 384, device="cuda")
    with pytest.raises(ValueError, match="scales B per row"):
        dgx.fp8_gemm_nt(a, (b[0], torch.ones(3, 4, device="cuda")), d)
    with pytest.raises(ValueError, match="c: expected shape"):
        dgx.fp8_gemm_nt(a, b, d, c=torch.zeros(256, 383, device="cuda"))
    with pytest.raises(ValueError, match="needs a float32 d"):
        dgx.fp8_gemm_nt(a, b, torch.zeros(256, 384, device="cuda", dtype=torch.bfloat16), c=d)
    ka, kb, _ = _k_grouped_inputs(128, 256, [256, 128])
    dk = torch.zeros(2, 128, 256, device="cuda")
    with pytest.raises(ValueError, match=r"ks\[1\]: expected a non-negative multiple of 128"):
        dgx.k_grouped_fp8_gemm_nt_contiguous(ka, kb, dk, [256, 100])
    with pytest.raises(ValueError, match="A: expected shape"):
        dgx.k_grouped_fp8_gemm_nt_contiguous(ka, kb, dk, [256, 256])
    with pytest.raises(ValueError, match="ks_tensor: expected shape"):
        dgx.k_grouped_fp8_gemm_nt_contiguous(ka, kb, dk, [256, 128], torch.zeros(3, dtype=torch.int32, device="cuda"))


def test_per_call_scale_conversion_under_allocator_churn():
    """Row-major scales are copied into the MN-major layout on every call; with other allocations and
    kernels in between, every result must still be right (the copy must not be reused too early)."""
    import dgx

    m, n, k = 512, 4096, 4096
    a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), mn_major=False)
    b = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), mn_major=False)
    ref = dequantize(*a, 1).double() @ dequantize(*b, 1).double().T
    for i in range(20):
        d = torch.zeros(m, n, device="cuda")
        dgx.fp8_gemm_nt(a, b, d, c=d)
        junk = [torch.randn(1 << 20, device="cuda") for _ in range(4)]  # reuse freed blocks right away
        junk = [j.mul_(3) for j in junk]
        torch.cuda.synchronize()
        assert _rel(d, ref) <= MAX_REL, f"call {i}"


def _deepgemm_scales(sf):
    """dgx's K-grouped scales [rows, sum(ks)/128] in DeepGEMM's layout: (sum(ks)/128, rows), contiguous."""
    return sf.t().contiguous()


@pytest.mark.parametrize(
    "m, n, ks",
    [
        (7168, 4096, [4096, 0, 2048, 128]),  # read as it is (M * 4 a multiple of 16 bytes)
        (130, 256, [512, 0, 0, 384, 128]),  # 520-byte rows of SFA: copied on the GPU
        (64, 64, [4096, 0, 4096]),  # M == N == sum(ks) / 128: the contiguous square scales are DeepGEMM's
        (200, 136, [0, 256]),  # the first group empty
    ],
)
def test_k_grouped_deepgemm_scale_layout(m, n, ks, monkeypatch):
    """The legacy call with DeepGEMM's (sum(ks)/128, M) / (sum(ks)/128, N) scales: within MAX_REL of the
    float64 reference, groups without K left as they were, bitwise the same call with dgx's layout, and no
    copy of the scales unless their rows are not 16-byte multiples."""
    import dgx
    from dgx import scales

    a, b, refs = _k_grouped_inputs(m, n, ks, seed=21)
    a_dg, b_dg = (a[0], _deepgemm_scales(a[1])), (b[0], _deepgemm_scales(b[1]))
    assert a_dg[1].shape == (sum(ks) // 128, m) and b_dg[1].shape == (sum(ks) // 128, n)
    c = torch.randn(len(ks), m, n, device="cuda")
    d = c.clone()
    dgx.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(a, b, d, ks)  # dgx's layout (compiles outside the count)

    copies = []
    real = scales.convert  # (view, stream, slot, name): the scale-layout kernel's copy on the GPU

    def counted(*args, **kwargs):
        copies.append(args[3] if len(args) > 3 else kwargs.get("name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(scales, "convert", counted)
    d_dg = c.clone()
    dgx.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(a_dg, b_dg, d_dg, ks)
    torch.cuda.synchronize()
    assert copies == (["SFA"] if (m * 4) % 16 else [])
    for g, (kg, ref) in enumerate(zip(ks, refs)):
        if kg == 0:
            assert torch.equal(d_dg[g], c[g]), f"group {g} has no K and must be left as it was"
        else:
            assert _rel(d_dg[g], ref + c[g].double()) <= MAX_REL, f"group {g}"
    assert torch.equal(d_dg, d)
    # The non-legacy name accepts it too, with a ks_tensor, and mixed layouts.
    d_mixed = c.clone()
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    dgx.k_grouped_fp8_gemm_nt_contiguous(a_dg, b, d_mixed, ks, ks_tensor)
    torch.cuda.synchronize()
    assert torch.equal(d_mixed, d)


def test_k_grouped_legacy_call_as_deepgemm_builds_it():
    """The inputs built as DeepGEMM's own test of k_grouped_wgrad_gemm_fp8_fp8_fp32_nt builds them: each
    group's bf16 chunk stored flat and cast on its own, its row-major scales' transpose copied into rows of
    one (sum(ks)/128, M) tensor; out zeros, accumulated."""
    import dgx

    m, n, ks = 4096, 7168, [2048, 1920, 0, 2176]
    g = torch.Generator(device="cuda").manual_seed(31)
    total, kb = sum(ks), sum(ks) // 128
    x_fp8 = torch.empty(m * total, device="cuda", dtype=torch.float8_e4m3fn)
    y_fp8 = torch.empty(n * total, device="cuda", dtype=torch.float8_e4m3fn)
    x_scales = torch.empty(kb, m, device="cuda")
    y_scales = torch.empty(kb, n, device="cuda")
    refs, off, sf_off = [], 0, 0
    for kg in ks:
        if kg == 0:  # no data, no scale rows
            refs.append(None)
            continue
        x = torch.randn(m, kg, device="cuda", dtype=torch.bfloat16, generator=g)
        y = torch.randn(n, kg, device="cuda", dtype=torch.bfloat16, generator=g)
        xq, xs = per_token_cast_to_fp8(x, mn_major=False)
        yq, ys = per_token_cast_to_fp8(y, mn_major=False)
        x_fp8[m * off : m * (off + kg)].copy_(xq.flatten())
        y_fp8[n * off : n * (off + kg)].copy_(yq.flatten())
        x_scales[sf_off : sf_off + kg // 128].copy_(xs.T)
        y_scales[sf_off : sf_off + kg // 128].copy_(ys.T)
        refs.append(dequantize(xq, xs, 1).double() @ dequantize(yq, ys, 1).double().T)
        off, sf_off = off + kg, sf_off + kg // 128
    out = torch.zeros(len(ks), m, n, device="cuda")
    dgx.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((x_fp8, x_scales), (y_fp8, y_scales), out, ks)
    torch.cuda.synchronize()
    for i, ref in enumerate(refs):
        if ref is None:
            assert not out[i].any(), "a group without K adds nothing"
        else:
            assert _rel(out[i], ref) <= MAX_REL, f"group {i}"


def test_k_grouped_deepgemm_layout_errors():
    import dgx

    m, n, ks = 128, 256, [256, 0, 128]
    a, b, _ = _k_grouped_inputs(m, n, ks)
    d = torch.zeros(len(ks), m, n, device="cuda")
    bad = torch.zeros(4, m, device="cuda")  # one k-block too many
    with pytest.raises(ValueError, match=r"SFA: expected shape \(128, 3\) .* or \(3, 128\) .*; got \(4, 128\)"):
        dgx.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a[0], bad), b, d, ks)
    with pytest.raises(ValueError, match=r"SFB: expected shape \(256, 3\) .* or \(3, 256\) .*; got \(256, 2\)"):
        dgx.k_grouped_fp8_gemm_nt_contiguous(a, (b[0], b[1][:, :2]), d, ks)


@pytest.mark.parametrize("block_n, stages, defer", [(152, 4, False), (128, 4, False), (104, 5, True)])
def test_shared_b_matches_unshared(block_n, stages, defer):
    """The dense weight gradient with B shared by 2-CTA clusters (pair 2: halves multicast, or for BLOCK_N 152 and
    104 the whole tile from rank 0) gives bitwise the unshared kernel's output: 3 m-blocks (the last pair's
    second tile lies past M) and a partial last n-block."""
    import dataclasses

    from dgx.kernels.fp8_gemm import SHARE_B, GemmConfig

    m, n, k = 300, 600, 1664
    plain = GemmConfig(n, k, 128, block_n, stages, wgrad=True, defer=defer)
    _assert_dense_alike(plain, dataclasses.replace(plain, pair=SHARE_B), m, 21)
