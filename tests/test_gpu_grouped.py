"""MoE grouped GEMMs on the GPU: contiguous and masked layouts, edge cases, padding, graph replay."""

import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.torch_utils import dequantize, per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from gpu_gemm_utils import check_group_rows  # noqa: E402

MAX_REL = 2e-3


def _weights(groups, n, k):
    b16 = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16)
    q = [per_block_cast_to_fp8(b16[g]) for g in range(groups)]
    return torch.stack([x for x, _ in q]), torch.stack([s for _, s in q])


def _ref(a_q, a_s, b_q, b_s):
    return dequantize(a_q, a_s, 1).double() @ dequantize(b_q, b_s, 128).double().T


def _rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


def _contiguous_inputs(group_rows, n, k, bad=None):
    """A with each group's rows padded to the alignment; m_indices -1 on padding (or `bad` there)."""
    import dgx

    align = dgx.get_mk_alignment_for_contiguous_layout()
    groups = len(group_rows)
    segments = [(-(-r // align) * align) for r in group_rows]
    m_sum = max(sum(segments), align)
    a16 = torch.randn(m_sum, k, device="cuda", dtype=torch.bfloat16)
    m_indices = torch.full((m_sum,), -1 if bad is None else bad, device="cuda", dtype=torch.int32)
    start = 0
    for g, (rows, seg) in enumerate(zip(group_rows, segments)):
        m_indices[start : start + rows] = g
        start += seg
    a_q, a_s = per_token_cast_to_fp8(a16)
    b_q, b_s = _weights(groups, n, k)
    d = torch.full((m_sum, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    return (a_q, a_s), (b_q, b_s), d, m_indices, segments


def _check_contiguous(a, b, d, m_indices, group_rows, segments, block_m):
    start = 0
    for g, (rows, seg) in enumerate(zip(group_rows, segments)):
        if rows:
            check_group_rows(d, a, b, g, start, rows, max_rel=MAX_REL)
        start += seg
    # Blocks whose first row is padding or a bad index are skipped: their rows keep the poison.
    first = m_indices[::block_m].tolist()
    groups = b[0].shape[0]
    for blk, idx in enumerate(first):
        if not 0 <= idx < groups:
            assert torch.isnan(d[blk * block_m : (blk + 1) * block_m]).all(), f"skipped block {blk} was written"


@pytest.mark.parametrize(
    "group_rows, n, k",
    [
        ([256] * 32, 576, 1024),  # 32 groups of 256 rows
        ([1000], 2112, 7168),  # one group, not a multiple of the alignment
        ([0, 300, 0, 17, 128, 129, 0], 4096, 512),  # empty groups, odd sizes
        ([random.Random(7).randint(0, 700) for _ in range(9)], 7168, 2048),
    ],
)
def test_contiguous(group_rows, n, k):
    import dgx
    from dgx import grouped, launch
    from dgx.kinds import GemmKind

    a, b, d, m_indices, segments = _contiguous_inputs(group_rows, n, k)
    dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
    torch.cuda.synchronize()
    # The heuristic's plan for this call (key: kind, m, units_m, n, k, groups, device, SMs, config): other tests of
    # the session may have planned the same M and N with another K or an explicit config.
    plan = next(p for key, p in launch._plans.items() if key[0] == GemmKind.M_GROUPED_CONTIGUOUS
                and key[1] == d.shape[0] and key[3:6] == (n, k, len(group_rows)) and key[8] is None)
    _check_contiguous(a, b, d, m_indices, group_rows, segments, plan.config.block_m)


@pytest.mark.parametrize("bad", [7, 1 << 30, -2, -(1 << 31)])
def test_contiguous_bad_indices_are_skipped(bad):
    """An index >= G or < -1 marks its block as skipped: no out-of-bounds access, rows left as they were."""
    import dgx
    from dgx import grouped, launch
    from dgx.kinds import GemmKind

    group_rows = [100, 0, 250]
    a, b, d, m_indices, segments = _contiguous_inputs(group_rows, 512, 768, bad=bad)
    dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
    torch.cuda.synchronize()
    plan = next(p for key, p in launch._plans.items() if key[0] == GemmKind.M_GROUPED_CONTIGUOUS
                and key[1] == d.shape[0] and key[3:6] == (512, 768, len(group_rows)) and key[8] is None)
    _check_contiguous(a, b, d, m_indices, group_rows, segments, plan.config.block_m)
    # A whole bad segment: every row of an aligned chunk carries the bad index.
    m_indices[128:256] = bad
    d.fill_(float("nan"))
    dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
    torch.cuda.synchronize()
    assert torch.isnan(d[128:256]).all()


# 128-row chunks of A as (group, valid rows): pairs of blocks along M of one group, of two groups, of a
# group and padding, of a group and a bad index, both skipped, and (13 chunks) a last pair past M_sum.
PAIR_CHUNKS = [(0, 128), (0, 128), (0, 44), (2, 17), (3, 128), (-1, 0), (-1, 0), (-1, 0), (99, 0), (4, 128),
               (4, 1), (6, 128), (6, 72)]


@pytest.mark.parametrize(
    "block_m, block_n, pair, defer",
    [(128, 160, 2, False), (128, 96, 2, False), (64, 64, 2, False), (128, 128, 1, False), (128, 144, 1, False),
     (64, 64, 2, True), (128, 128, 0, True), (128, 120, 1, True)],
)
def test_contiguous_pairs(block_m, block_n, pair, defer):
    """2-CTA clusters on the contiguous layout. Sharing B along M: a pair multicasts B only when both blocks
    belong to one group; a skipped block next to a valid one still runs (for its peer) but stores nothing.
    Also deferred promotion, with and without clusters."""
    import dgx
    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, GemmConfig

    groups, n, k = 7, 576, 640
    rows = 128 * len(PAIR_CHUNKS)
    idx = []
    for g, valid in PAIR_CHUNKS:
        idx += [g] * valid + [-1 if g != 99 else 99] * (128 - valid)
    m_indices = torch.tensor(idx, device="cuda", dtype=torch.int32)
    a_q, a_s = per_token_cast_to_fp8(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16))
    b_q, b_s = _weights(groups, n, k)
    d = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    config = GemmConfig(n, k, block_m, block_n, min(max_stages(block_m, block_n), 4), pair=pair, layout=LAYOUT_CONTIGUOUS,
                        defer=defer)
    dgx.m_grouped_fp8_gemm_nt_contiguous((a_q, a_s), (b_q, b_s), d, m_indices, config=config)
    torch.cuda.synchronize()
    for start in range(0, rows, block_m):
        first = idx[start]
        block = d[start : start + block_m]
        if not 0 <= first < groups:
            assert torch.isnan(block).all(), f"skipped block at row {start} was written"
            continue
        mine = [r for r in range(start, start + block_m) if idx[r] == first]
        out = d[mine]
        assert not torch.isnan(out).any(), f"block at row {start}: rows not written"
        rel = _rel(out, _ref(a_q[mine], a_s[mine], b_q[first], b_s[first]))
        assert rel <= MAX_REL, f"block at row {start} (group {first}): relative error {rel}"


def _masked_inputs(groups, m_max, n, k):
    a16 = torch.randn(groups, m_max, k, device="cuda", dtype=torch.bfloat16)
    q = [per_token_cast_to_fp8(a16[g]) for g in range(groups)]
    a_q = torch.stack([x for x, _ in q])
    import dgx

    a_s = dgx.get_mn_major_tma_aligned_tensor(torch.stack([s.contiguous() for _, s in q]))
    b_q, b_s = _weights(groups, n, k)
    d = torch.full((groups, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    return (a_q, a_s), (b_q, b_s), d


def _check_masked(a, b, d, counts, m_max):
    for g, c in enumerate(counts):
        rows = min(max(c, 0), m_max)
        if rows:
            out = d[g, :rows]
            assert not torch.isnan(out).any(), f"group {g}: rows not written"
            rel = _rel(out, _ref(a[0][g, :rows], a[1][g, :rows], b[0][g], b[1][g]))
            assert rel <= MAX_REL, f"group {g}: relative error {rel}"
        assert torch.isnan(d[g, rows:]).all(), f"group {g}: rows past masked_m were written"


@pytest.mark.parametrize(
    "counts, m_max, n, k",
    [
        ([0, 4096 // 8, 77, 4096], 4096 // 8 * 2, 4096, 7168),  # 0, M_max, above M_max, odd
        ([1, 64, 65, 130], 256, 7168, 2048),
        ([-5, 200], 200, 576, 512),  # negative counts as 0; exactly M_max
        ([37], 40, 2112, 7168),
    ],
)
def test_masked(counts, m_max, n, k):
    import dgx

    groups = len(counts)
    a, b, d = _masked_inputs(groups, m_max, n, k)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m=max(1, sum(max(c, 0) for c in counts) // groups))
    torch.cuda.synchronize()
    _check_masked(a, b, d, counts, m_max)


@pytest.mark.parametrize("block_m, block_n", [(64, 56), (128, 128)])
def test_masked_deferred_promotion(block_m, block_n):
    """Masked groups through the deferred promotion: partial last blocks stored from the registers, rows past
    the counts untouched; K = 2112 gives a chunk of 8 k-blocks and a tail of 9 (the last one partial)."""
    import dgx
    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import LAYOUT_MASKED, GemmConfig

    counts, m_max, n, k = [0, 1, 200, 77], 200, 1000, 2112
    a, b, d = _masked_inputs(len(counts), m_max, n, k)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    config = GemmConfig(n, k, block_m, block_n, min(max_stages(block_m, block_n), 4), layout=LAYOUT_MASKED, defer=True)
    dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, 64, config=config)
    torch.cuda.synchronize()
    _check_masked(a, b, d, counts, m_max)


def _bits(t):
    return t.view(torch.int16)  # BF16 bit patterns: NaN poison compares equal to itself


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_stage_rounds_match_the_ring(layout):
    """One-slice BF16 tiles take their B scales with the stage. With a k-block count that is a multiple of the
    stage count they run rounds of compile-time stages (every tile from stage 0), otherwise the ring: the same
    tile gives bitwise the same output both ways, and the right one. Contiguous: 128x160 sharing B over pairs
    of one group, of two groups, with padding and a bad index (8 k-blocks: 4 stages run rounds, 5 the ring);
    masked: 128x128 (6 k-blocks: 3 stages run rounds, 5 the ring), with counts of 0, partial and M_max."""
    import dgx
    from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_MASKED, GemmConfig

    outs = []
    if layout == "contiguous":
        groups, n, k, rows = 7, 576, 1024, 128 * len(PAIR_CHUNKS)
        idx = []
        for g, valid in PAIR_CHUNKS:
            idx += [g] * valid + [-1 if g != 99 else 99] * (128 - valid)
        m_indices = torch.tensor(idx, device="cuda", dtype=torch.int32)
        a = per_token_cast_to_fp8(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16))
        b = _weights(groups, n, k)
        for stages in (4, 5):
            d = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            config = GemmConfig(n, k, 128, 160, stages, pair=2, layout=LAYOUT_CONTIGUOUS)
            dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, config=config)
            torch.cuda.synchronize()
            for start in range(0, rows, 128):
                first = idx[start]
                if not 0 <= first < groups:
                    assert torch.isnan(d[start : start + 128]).all(), f"{stages} stages: skipped block {start} written"
                    continue
                mine = [r for r in range(start, start + 128) if idx[r] == first]
                rel = _rel(d[mine], _ref(a[0][mine], a[1][mine], b[0][first], b[1][first]))
                assert rel <= MAX_REL, f"{stages} stages, block at row {start}: relative error {rel}"
            outs.append(d)
    else:
        counts, m_max, n, k = [0, 37, 300, 384], 384, 1024, 768
        a, b, d0 = _masked_inputs(len(counts), m_max, n, k)
        masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
        for stages in (3, 5):
            d = d0.clone()
            config = GemmConfig(n, k, 128, 128, stages, layout=LAYOUT_MASKED)
            dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, 180, config=config)
            torch.cuda.synchronize()
            _check_masked(a, b, d, counts, m_max)
            outs.append(d)
    assert torch.equal(_bits(outs[0]), _bits(outs[1])), "stage rounds and the ring disagree"


def test_masked_graph_replay_follows_new_counts():
    import dgx

    groups, m_max, n, k = 4, 256, 2048, 1024
    a, b, d = _masked_inputs(groups, m_max, n, k)
    masked_m = torch.tensor([10, 256, 0, 100], device="cuda", dtype=torch.int32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, 96)  # compile and plan outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, 96)
    for counts in ([10, 256, 0, 100], [0, 1, 255, 300], [128, 0, 0, 64]):
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(a, b, d, counts, m_max)


def test_grouped_input_checks_on_gpu_tensors():
    import dgx

    a, b, d, m_indices, _ = _contiguous_inputs([100, 200], 256, 512)
    with pytest.raises(ValueError, match="m_indices: expected shape"):
        dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices[:-1])
    with pytest.raises(TypeError, match="m_indices: expected .*int32.*got torch.int64"):
        dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices.long())
    with pytest.raises(ValueError, match="M_sum must be a multiple"):
        dgx.m_grouped_fp8_gemm_nt_contiguous((a[0][:-1], a[1][:-1]), b, d[:-1], m_indices[:-1])
    am, bm, dm = _masked_inputs(2, 64, 256, 512)
    with pytest.raises(ValueError, match="expected_m"):
        dgx.m_grouped_fp8_gemm_nt_masked(am, bm, dm, torch.zeros(2, dtype=torch.int32, device="cuda"), 0)
    with pytest.raises(ValueError, match="masked_m: expected shape"):
        dgx.m_grouped_fp8_gemm_nt_masked(am, bm, dm, torch.zeros(3, dtype=torch.int32, device="cuda"), 8)
