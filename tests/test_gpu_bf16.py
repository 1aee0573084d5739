"""BF16 GEMMs on the GPU against float64 references: every dense form x BF16/FP32 D x with/without C over odd and
even M, masked under CUDA-graph replay with new counts, contiguous (m_indices and prefix sums, empty groups), K-grouped
(empty groups, with and without C), bitwise determinism. Fresh random inputs; outputs poisoned with NaN before each
run, so an element the kernel should write and does not is caught, and one it must not write keeps the poison."""

import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BF16, F32 = torch.bfloat16, torch.float32


def _randn(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda", dtype=F32) * scale).to(BF16)


def _poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def _check(out, ref, what: str, out_dtype=None) -> None:
    """`out` against the float64 `ref`: all written (no NaN), and within the output's rounding normwise over the
    whole output, every row and every column (a wrong row, column or tile stands out in its own norm)."""
    out_dtype = out_dtype or out.dtype
    assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} elements not written"
    err = out.double() - ref
    if out_dtype == BF16:  # rounding to BF16 (2^-9 relative) dominates; FP32 accumulation adds ~1e-6
        whole, line = 2.5e-3, 6e-3
    else:
        whole, line = 2e-5, 1e-4
    ref_norm = ref.norm().clamp(min=1e-30)
    assert float(err.norm() / ref_norm) <= whole, f"{what}: normwise error {float(err.norm() / ref_norm):.3e}"
    if ref.dim() == 2 and ref.numel():
        for dim, name in ((1, "row"), (0, "column")):
            if ref.shape[dim] < 16:  # a line of a few elements has no stable norm of its own (one M=1 column: one
                continue             # element, which may cancel to nearly 0); the other lines and the whole cover it
            rel = err.norm(dim=dim) / ref.norm(dim=dim).clamp(min=1e-30)
            worst = int(rel.argmax())
            assert float(rel[worst]) <= line, f"{what}: {name} {worst} error {float(rel[worst]):.3e}"


def _operand(rows: int, k: int, major: str):
    """A [rows, K] BF16 operand stored K-major, or rows-major with 16-byte aligned lines (rows padded to 8)."""
    if major == "k":
        return _randn(rows, k)
    pad = -(-rows // 8) * 8
    return _randn(k, pad)[:, :rows].T


FORM_MAJORS = {"nt": ("k", "k"), "nn": ("k", "mn"), "tn": ("mn", "mn"), "tt": ("mn", "k")}


def _call_form(form, a_nt, b_nt, d, c):
    """Runs bf16_gemm_<form> on the operands of the nt view a [M, K], b [N, K] passed as that form takes them."""
    from dgx import bf16

    a = a_nt if form[0] == "n" else a_nt.T
    b = b_nt if form[1] == "t" else b_nt.T
    getattr(bf16, f"bf16_gemm_{form}")(a, b, d, c=c)


@pytest.mark.parametrize("m", [1, 17, 64, 128, 4096, 4097])
@pytest.mark.parametrize("n, k", [(2112, 7168), (584, 1000)])
@pytest.mark.parametrize("form", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("out_dtype", [BF16, F32])
@pytest.mark.parametrize("with_c", [False, True])
def test_dense(m, n, k, form, out_dtype, with_c):
    major_a, major_b = FORM_MAJORS[form]
    a, b = _operand(m, k, major_a), _operand(n, k, major_b)
    ref = a.double() @ b.double().T
    if with_c:
        d = (torch.randn(m, n, device="cuda", dtype=F32) * 32).to(out_dtype)  # accumulated in place
        ref = ref + d.double()
        _call_form(form, a, b, d, d)
    else:
        d = _poisoned(m, n, dtype=out_dtype)
        _call_form(form, a, b, d, None)
    torch.cuda.synchronize()
    _check(d, ref, f"{form} M={m} N={n} K={k} {out_dtype} c={with_c}")


def test_dense_c_another_tensor_and_k_zero():
    from dgx import bf16

    m, n, k = 300, 264, 520
    a, b = _randn(m, k), _randn(n, k)
    c = torch.randn(m, n, device="cuda", dtype=F32)
    d = _poisoned(m, n, dtype=F32)
    bf16.bf16_gemm_nt(a, b, d, c=c)
    torch.cuda.synchronize()
    _check(d, c.double() + a.double() @ b.double().T, "c another tensor")
    d = _poisoned(m, n, dtype=F32)
    bf16.bf16_gemm_nt(a[:, :0], b[:, :0], d, c=c)
    torch.cuda.synchronize()
    assert torch.equal(d, c)
    bf16.bf16_gemm_nt(a[:, :0], b[:, :0], d)
    torch.cuda.synchronize()
    assert (d == 0).all()


@pytest.mark.parametrize("config_fields", [
    dict(block_m=64, block_n=16, stages=16, pair=1),  # decode tile, A shared
    dict(block_m=128, block_n=176, stages=4, pair=2),  # B shared along M
    dict(block_m=256, block_n=144, stages=3, pair=1),  # two slices per warpgroup
    dict(block_m=128, block_n=256, stages=3),
    dict(block_m=64, block_n=16, stages=8, pair=1, k_atoms=2),  # 128 of K per k-block
    dict(block_m=64, block_n=32, stages=4, pair=1, k_atoms=4),  # 256 of K per k-block, a K tail of 136
])
def test_dense_tiles_and_clusters(config_fields):
    """Tiles the heuristic may not pick for these shapes, with and without 2-CTA multicast, on odd M and K."""
    from dgx import bf16
    from dgx.kernels.bf16_gemm import Bf16GemmConfig

    m, n, k = 1000, 2112, 2184
    a, b = _randn(m, k), _randn(n, k)
    d = _poisoned(m, n, dtype=BF16)
    bf16.bf16_gemm_nt(a, b, d, config=Bf16GemmConfig(n=n, k=k, **config_fields))
    torch.cuda.synchronize()
    _check(d, a.double() @ b.double().T, str(config_fields))


@pytest.mark.parametrize("form, pair, block_m, k_atoms", [("nn", 1, 128, 1), ("tt", 1, 128, 1), ("tn", 0, 128, 1),
                                                          ("tn", 0, 64, 2), ("nn", 1, 64, 4)])
def test_mn_major_tiles(form, pair, block_m, k_atoms):
    """MN-major operands with 64-byte atoms (block_n 96), a shared M-major A, k-blocks of 128 and 256 of K (MN-major
    boxes 128 and 256 rows of K high; K 1088 leaves a tail in the last one)."""
    from dgx import bf16
    from dgx.kernels.bf16_gemm import Bf16GemmConfig

    major_a, major_b = FORM_MAJORS[form]
    m, n, k = 520, 1000, 1088
    a, b = _operand(m, k, major_a), _operand(n, k, major_b)
    d = _poisoned(m, n, dtype=BF16)
    config = Bf16GemmConfig(n=n, k=k, block_m=block_m, block_n=96, stages=6 if k_atoms == 1 else 8 // k_atoms,
                            major_a=major_a, major_b=major_b, pair=pair, k_atoms=k_atoms)
    bf16.bf16_gemm_nt(a, b, d, config=config)
    torch.cuda.synchronize()
    _check(d, a.double() @ b.double().T, f"{form} 128x96")


def test_dense_is_deterministic():
    from dgx import bf16

    a, b = _randn(4096, 7168), _randn(2112, 7168)
    outs = []
    for _ in range(2):
        d = _poisoned(4096, 2112, dtype=F32)
        c = torch.ones_like(d)
        bf16.bf16_gemm_nt(a, b, d, c=c)
        outs.append(d)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))


# --- split-K ------------------------------------------------------------------------------------------------------


SPLIT_CASES = [
    ("nt", 64, 2112, 7168, dict(block_m=64, block_n=144, stages=6, split_k=8), BF16, False),  # one wave of clusters
    ("nt", 1000, 2112, 7168, dict(block_m=64, block_n=144, stages=6, split_k=8), BF16, False),  # 16 tiles a cluster
    ("nn", 128, 4096, 7000, dict(block_m=128, block_n=96, stages=6, split_k=2), BF16, False),  # K tail, 64-byte atoms
    ("tn", 17, 584, 1000, dict(block_m=64, block_n=64, stages=6, split_k=4, k_atoms=2), F32, False),  # N and K tails
    ("tt", 300, 2112, 2048, dict(block_m=128, block_n=144, stages=4, split_k=4), F32, True),  # D = C + sum
    ("nt", 40, 264, 512, dict(block_m=64, block_n=16, stages=8, split_k=8), F32, True),  # one k-block per CTA
]


@pytest.mark.parametrize("form, m, n, k, fields, out_dtype, with_c", SPLIT_CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-sk{c[4]['split_k']}" for c in SPLIT_CASES])
def test_split_k(form, m, n, k, fields, out_dtype, with_c):
    """Clusters of 2, 4 and 8 CTAs summing one tile's K ranges through distributed shared memory: every form, K and
    N tails, more tiles than clusters (the tile barriers' parities over many tiles), FP32 D accumulating C; each
    element written once (poisoned D), bitwise the same on a second run."""
    from dgx import bf16
    from dgx.kernels.bf16_gemm import Bf16GemmConfig

    major_a, major_b = FORM_MAJORS[form]
    a, b = _operand(m, k, major_a), _operand(n, k, major_b)
    config = Bf16GemmConfig(n=n, k=k, major_a=major_a, major_b=major_b, out_dtype="float32" if out_dtype == F32
                            else "bfloat16", with_c=with_c, **fields)
    c = (torch.randn(m, n, device="cuda", dtype=F32) * 32).to(out_dtype) if with_c else None
    outs = []
    for _ in range(2):
        d = c.clone() if with_c else _poisoned(m, n, dtype=out_dtype)
        bf16.bf16_gemm_nt(a, b, d, c=d if with_c else None, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T + (c.double() if with_c else 0)
    _check(outs[0], ref, f"{form} {m}x{n}x{k} {fields}")
    bits = torch.int32 if out_dtype == F32 else torch.int16
    assert torch.equal(outs[0].view(bits), outs[1].view(bits)), "split-K sums differ between two runs"


def test_split_k_masked_leaves_rows_past_the_counts():
    from dgx import bf16
    from dgx.kernels.bf16_gemm import LAYOUT_MASKED, Bf16GemmConfig

    groups, m_max, n, k = 4, 256, 2048, 1024
    a, b, d = _masked_inputs(groups, m_max, n, k)
    counts = [0, 100, 256, 63]
    config = Bf16GemmConfig(n=n, k=k, block_m=64, block_n=128, stages=7, layout=LAYOUT_MASKED, split_k=4)
    bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(counts, device="cuda", dtype=torch.int32), 64,
                                       config=config)
    torch.cuda.synchronize()
    _check_masked(a, b, d, counts, "masked split-K")


# --- M-grouped ----------------------------------------------------------------------------------------------------


def _masked_inputs(groups, m_max, n, k):
    return _randn(groups, m_max, k), _randn(groups, n, k), _poisoned(groups, m_max, n, dtype=BF16)


def _check_masked(a, b, d, counts, what):
    m_max = a.shape[1]
    for g, count in enumerate(counts):
        rows = min(max(count, 0), m_max)
        if rows:
            _check(d[g, :rows], a[g, :rows].double() @ b[g].double().T, f"{what} group {g}")
        assert torch.isnan(d[g, rows:]).all(), f"{what}: group {g} rows past {rows} were written"


@pytest.mark.parametrize("groups, m_max, n, k, expected", [(4, 256, 7168, 2048, 96), (6, 1024, 4096, 7168, 512),
                                                           (3, 100, 584, 1000, 17)])
def test_masked(groups, m_max, n, k, expected):
    from dgx import bf16

    a, b, d = _masked_inputs(groups, m_max, n, k)
    counts = [random.Random(groups).randint(0, m_max) for _ in range(groups)]
    counts[0] = 0
    bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(counts, device="cuda", dtype=torch.int32), expected)
    torch.cuda.synchronize()
    _check_masked(a, b, d, counts, "masked")


def test_masked_graph_replay_follows_new_counts():
    from dgx import bf16

    groups, m_max, n, k = 4, 256, 2048, 1024
    a, b, d = _masked_inputs(groups, m_max, n, k)
    masked_m = torch.tensor([10, 256, 0, 100], device="cuda", dtype=torch.int32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 96)  # compile and plan outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 96)
    for counts in ([10, 256, 0, 100], [0, 1, 256, 300], [128, 0, 0, 64], [0, 0, 0, 0], [-5, 255, 1, 257]):
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(a, b, d, counts, f"replay {counts}")


def _contiguous_inputs(group_rows, n, k, nn: bool, align=128):
    groups = len(group_rows)
    segments = [-(-r // align) * align for r in group_rows]
    m_sum = max(sum(segments), align)
    a = _randn(m_sum, k)
    b = _randn(groups, n, k)
    m_indices = torch.full((m_sum,), -1, device="cuda", dtype=torch.int32)
    psum, start = [], 0
    for g, (rows, seg) in enumerate(zip(group_rows, segments)):
        m_indices[start:start + rows] = g
        psum.append(start + rows)
        start += seg
    b_arg = b.transpose(1, 2).contiguous() if nn else b  # nn takes b [G, K, N]
    return a, b, b_arg, m_indices, torch.tensor(psum, device="cuda", dtype=torch.int32), segments


@pytest.mark.parametrize("psum", [False, True])
@pytest.mark.parametrize("nn", [False, True])
@pytest.mark.parametrize("group_rows, n, k", [
    ([0, 300, 0, 17, 128, 129, 0], 4096, 512),  # empty groups, odd sizes
    ([random.Random(3).randint(0, 1500) for _ in range(8)], 7168, 2048),
    ([8192, 0], 584, 1000),
])
def test_contiguous(group_rows, n, k, nn, psum):
    from dgx import bf16

    a, b, b_arg, m_indices, psums, segments = _contiguous_inputs(group_rows, n, k, nn)
    d = _poisoned(a.shape[0], n, dtype=BF16)
    call = bf16.m_grouped_bf16_gemm_nn_contiguous if nn else bf16.m_grouped_bf16_gemm_nt_contiguous
    call(a, b_arg, d, psums if psum else m_indices, use_psum_layout=psum)
    torch.cuda.synchronize()
    start = 0
    for g, (rows, seg) in enumerate(zip(group_rows, segments)):
        if rows:
            _check(d[start:start + rows], a[start:start + rows].double() @ b[g].double().T, f"group {g}")
        if not psum:  # blocks whose first index is -1 are skipped: their rows keep the poison (tiles: 64 or 128 rows)
            first_free = -(-rows // 128) * 128
            assert torch.isnan(d[start + first_free:start + seg]).all(), f"group {g}: padding blocks written"
        start += seg


def test_contiguous_bad_indices_never_reach_memory():
    from dgx import bf16

    a, b, _, m_indices, _, _ = _contiguous_inputs([256, 256], 512, 256, nn=False)
    m_indices[:128] = 7  # out of range: skipped
    m_indices[256:384] = -3
    d = _poisoned(a.shape[0], 512, dtype=BF16)
    bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    torch.cuda.synchronize()
    assert torch.isnan(d[:128]).all() and torch.isnan(d[256:384]).all()
    _check(d[128:256], a[128:256].double() @ b[0].double().T, "valid block")
    _check(d[384:512], a[384:512].double() @ b[1].double().T, "valid block")


# --- K-grouped ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_c", ["none", "d", "other"])
@pytest.mark.parametrize("ks, m, n", [([1024, 0, 768, 2048], 4096, 7168), ([128, 0, 0, 256, 384], 520, 584),
                                      ([0, 0, 4096], 7168, 2048)])
def test_k_grouped(ks, m, n, with_c):
    from dgx import bf16

    groups, total = len(ks), sum(ks)
    a, b = _randn(total, m), _randn(total, n)
    c = torch.randn(groups, m, n, device="cuda", dtype=F32) * 32
    d = c.clone() if with_c == "d" else _poisoned(groups, m, n, dtype=F32)
    ks_tensor = torch.tensor(ks, device="cuda", dtype=torch.int32)
    bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_tensor, {"none": None, "d": d, "other": c}[with_c])
    torch.cuda.synchronize()
    start = 0
    for g, kg in enumerate(ks):
        ref = a[start:start + kg].double().T @ b[start:start + kg].double()
        if with_c != "none":
            ref = ref + c[g].double()
        if kg == 0 and with_c == "none":
            assert (d[g] == 0).all(), f"group {g} (no K) not zeroed"
        else:
            _check(d[g], ref, f"K-grouped group {g} (k {kg}, c {with_c})")
        start += kg


def test_k_grouped_is_deterministic():
    from dgx import bf16

    ks = [512, 1024, 0, 384]
    a, b = _randn(sum(ks), 2048), _randn(sum(ks), 7168)
    outs = []
    for _ in range(2):
        d = torch.ones(len(ks), 2048, 7168, device="cuda", dtype=F32)
        bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, device="cuda", dtype=torch.int32), d)
        outs.append(d)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))


def test_input_checks_on_gpu_tensors():
    from dgx import bf16

    a, b = _randn(64, 256), _randn(128, 256)
    with pytest.raises(TypeError, match="d: expected a tensor of dtype bfloat16/float32"):
        bf16.bf16_gemm_nt(a, b, torch.empty(64, 128, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="b: expected a tensor in CUDA device memory"):
        bf16.bf16_gemm_nt(a, b.cpu(), torch.empty(64, 128, device="cuda", dtype=BF16))
    with pytest.raises(ValueError, match="a: expected K contiguous"):
        bf16.bf16_gemm_nt(_randn(64, 512)[:, ::2], b, torch.empty(64, 128, device="cuda", dtype=BF16))


# --- ping-pong schedule ---------------------------------------------------------------------------------------------
# Each math warpgroup owns alternate tiles of its CTA and the two take turns at the tensor cores. What can go wrong:
# a warpgroup reading the other's stages (the ring's count stepped wrong), a turn handed over too early (both issue
# at once: still correct) or never (a hang), a tile stored at the wrong rows (the warpgroup's rows are the whole
# tile), and CTAs with 0, 1, odd or even tile counts (the last pending turn). M 1 and 17: one m-block, one tile a
# CTA (warpgroup 1 idle); 1000 and 4097: several tiles a CTA, odd and even.

PINGPONG_TILES = [
    dict(block_m=64, block_n=256, stages=4),  # 128 accumulators, one m64 slice
    dict(block_m=128, block_n=128, stages=5, pair=2),  # two slices per warpgroup, B shared along M
    dict(block_m=128, block_n=160, stages=4, pair=1),  # A shared along N, a 64-byte-swizzled N-major B (nn, tn)
    dict(block_m=64, block_n=96, stages=8),  # 64-byte swizzle atoms of an N-major B, an N tail
]


@pytest.mark.parametrize("m", [1, 17, 1000, 4097])
@pytest.mark.parametrize("form", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("tile", PINGPONG_TILES, ids=lambda t: f"{t['block_m']}x{t['block_n']}p{t.get('pair', 0)}")
@pytest.mark.parametrize("out_dtype, with_c", [(BF16, False), (F32, True)])
def test_pingpong_dense(m, form, tile, out_dtype, with_c):
    from dgx import bf16
    from dgx.kernels.bf16_gemm import Bf16GemmConfig, max_stages

    n, k = 2112, 2184  # 2184: a K tail of 8 past 34 k-blocks
    major_a, major_b = FORM_MAJORS[form]
    if tile.get("pair") == 2 and major_b == "mn":
        pytest.skip("an N-major B (3-D map) is not shared")
    out = "float32" if out_dtype == F32 else "bfloat16"
    stages = min(tile["stages"], max_stages(tile["block_m"], tile["block_n"], out, schedule="pingpong"))
    if stages < 2:
        pytest.skip("two staged FP32 tiles of this size leave no room for two stages")
    config = Bf16GemmConfig(n=n, k=k, major_a=major_a, major_b=major_b, out_dtype=out, with_c=with_c,
                            schedule="pingpong", **dict(tile, stages=stages))
    a, b = _operand(m, k, major_a), _operand(n, k, major_b)
    ref = a.double() @ b.double().T
    if with_c:
        d = (torch.randn(m, n, device="cuda", dtype=F32) * 32).to(out_dtype)
        ref = ref + d.double()
    else:
        d = _poisoned(m, n, dtype=out_dtype)
    a_arg = a if form[0] == "n" else a.T
    b_arg = b if form[1] == "t" else b.T
    getattr(bf16, f"bf16_gemm_{form}")(a_arg, b_arg, d, c=d if with_c else None, config=config)
    torch.cuda.synchronize()
    _check(d, ref, f"ping-pong {form} {config.kernel_name} M={m}")


def test_pingpong_matches_the_cooperative_tile_bitwise_and_repeats():
    """A ping-pong 64 x 256 tile runs each row's MMAs exactly as a cooperative 128 x 256 tile's warpgroup does (the
    same m64n256k16 sequence over the same k-blocks), so the outputs are bitwise equal, run after run."""
    from dgx import bf16
    from dgx.kernels.bf16_gemm import Bf16GemmConfig

    m, n, k = 4097, 7168, 4096
    a, b = _randn(m, k), _randn(n, k)
    c = torch.randn(m, n, device="cuda", dtype=F32)
    outs = []
    for config in (Bf16GemmConfig(n=n, k=k, block_m=64, block_n=256, stages=2, out_dtype="float32", with_c=True,
                                  schedule="pingpong"),) * 2 + (
                   Bf16GemmConfig(n=n, k=k, block_m=128, block_n=256, stages=2, out_dtype="float32", with_c=True),):
        d = _poisoned(m, n, dtype=F32)
        bf16.bf16_gemm_nt(a, b, d, c=c, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    _check(outs[0], c.double() + a.double() @ b.double().T, "ping-pong 64x256")
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32)), "ping-pong differs between two runs"
    assert torch.equal(outs[0].view(torch.int32), outs[2].view(torch.int32)), "ping-pong differs from cooperative"


def test_pingpong_masked_under_graph_replay():
    from dgx import bf16
    from dgx.kernels.bf16_gemm import LAYOUT_MASKED, Bf16GemmConfig

    groups, m_max, n, k = 4, 256, 2048, 1024
    a, b, d = _masked_inputs(groups, m_max, n, k)
    masked_m = torch.tensor([10, 256, 0, 100], device="cuda", dtype=torch.int32)
    config = Bf16GemmConfig(n=n, k=k, block_m=64, block_n=128, stages=8, layout=LAYOUT_MASKED, schedule="pingpong")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 96, config=config)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 96, config=config)
    for counts in ([10, 256, 0, 100], [0, 1, 256, 300], [0, 0, 0, 0], [-5, 255, 1, 257], [63, 65, 127, 129]):
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(a, b, d, counts, f"ping-pong replay {counts}")


@pytest.mark.parametrize("psum", [False, True])
@pytest.mark.parametrize("nn", [False, True])
def test_pingpong_contiguous(nn, psum):
    from dgx import bf16
    from dgx.kernels.bf16_gemm import LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, Bf16GemmConfig

    group_rows, n, k = [0, 300, 0, 17, 1280, 129, 0, 700], 4096, 512
    a, b, b_arg, m_indices, psums, segments = _contiguous_inputs(group_rows, n, k, nn)
    d = _poisoned(a.shape[0], n, dtype=BF16)
    config = Bf16GemmConfig(n=n, k=k, block_m=128, block_n=128, stages=5, major_b="mn" if nn else "k",
                            layout=LAYOUT_CONTIGUOUS_PSUM if psum else LAYOUT_CONTIGUOUS,
                            pair=0 if nn or psum else 2, schedule="pingpong")
    call = bf16.m_grouped_bf16_gemm_nn_contiguous if nn else bf16.m_grouped_bf16_gemm_nt_contiguous
    call(a, b_arg, d, psums if psum else m_indices, use_psum_layout=psum, config=config)
    torch.cuda.synchronize()
    start = 0
    for g, (rows, seg) in enumerate(zip(group_rows, segments)):
        if rows:
            _check(d[start:start + rows], a[start:start + rows].double() @ b[g].double().T, f"ping-pong group {g}")
        if not psum:
            assert torch.isnan(d[start + -(-rows // 128) * 128:start + seg]).all(), f"group {g}: padding written"
        start += seg


@pytest.mark.parametrize("ks", [[1024, 0, 768, 2048, 128], [0, 0, 384]])
def test_pingpong_k_grouped(ks):
    """Tiles of different k-block counts alternate between the warpgroups (each steps the ring past the other's)."""
    from dgx import bf16
    from dgx.kernels.bf16_gemm import LAYOUT_K_GROUPED, Bf16GemmConfig

    m, n = 1000, 2112
    groups, total = len(ks), sum(ks)
    a, b = _randn(total, m), _randn(total, n)
    c = torch.randn(groups, m, n, device="cuda", dtype=F32) * 32
    config = Bf16GemmConfig(n=n, k=0, block_m=64, block_n=128, stages=6, layout=LAYOUT_K_GROUPED, major_a="mn",
                            major_b="mn", out_dtype="float32", with_c=True, schedule="pingpong")
    outs = []
    for _ in range(2):
        d = c.clone()
        bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, device="cuda", dtype=torch.int32), d,
                                               config=config)
        outs.append(d)
    torch.cuda.synchronize()
    start = 0
    for g, kg in enumerate(ks):
        _check(outs[0][g], c[g].double() + a[start:start + kg].double().T @ b[start:start + kg].double(),
               f"ping-pong K-grouped group {g} (k {kg})")
        start += kg
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))


def test_pingpong_through_the_flag(monkeypatch):
    """DGX_BF16_PINGPONG=1: the heuristic's ping-pong choice for 4096 x 32768 x 512 runs through the plain call."""
    from dgx import bf16
    from dgx.kernels.bf16_gemm import choose

    monkeypatch.setenv("DGX_BF16_PINGPONG", "1")
    m, n, k = 4096, 32768, 512
    assert choose("dense", m, n, k, 1, torch.cuda.get_device_properties(0).multi_processor_count).schedule == "pingpong"
    a, b = _randn(m, k), _randn(n, k)
    d = _poisoned(m, n, dtype=BF16)
    bf16.bf16_gemm_nt(a, b, d)
    torch.cuda.synchronize()
    _check(d, a.double() @ b.double().T, "ping-pong by the flag")
