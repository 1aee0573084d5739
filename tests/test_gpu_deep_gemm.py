"""dgx.deep_gemm on the GPU: the prefix-sum layout bitwise against the m_indices layout (eager and under graph
replay), the UE8M0 unpack kernel against torch, packed UE8M0 scales bitwise against the same scales in FP32,
UE8M0-valued FP32 scales, the recipes and the transposed forms."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

MAX_REL = 2e-3


def _bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _ref(a_q, a_s, b_q, b_s, b_rows=128):
    from dgx.torch_utils import dequantize

    return dequantize(a_q, a_s, 1).double() @ dequantize(b_q, b_s, b_rows).double().T


def _rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


def _weights(groups, n, k, use_ue8m0=False):
    import dgx.deep_gemm as dg

    q = [dg.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), use_ue8m0)
         for _ in range(groups)]
    return torch.stack([x for x, _ in q]), torch.stack([s for _, s in q])


def _layouts(group_rows, align=128, extra=0):
    """Group g's rows start at the previous group's end rounded up to `align`: (starts, psum int32 [G], m_indices
    int32 [M] with -1 outside the groups, M). M covers the last group's aligned end, plus `extra` rows, and is a
    multiple of 128 (what the m_indices layout needs)."""
    starts, psum, start = [], [], 0
    for rows in group_rows:
        starts.append(start)
        psum.append(start + rows)
        start = -(-(start + rows) // align) * align
    m = -(-(start + extra) // 128) * 128
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    for g, (s, rows) in enumerate(zip(starts, group_rows)):
        m_indices[s : s + rows] = g
    return starts, torch.tensor(psum, dtype=torch.int32, device="cuda"), m_indices.cuda(), m


def _contiguous_problem(group_rows, n, k, align=128, extra=0):
    import dgx.deep_gemm as dg

    starts, psum, m_indices, m = _layouts(group_rows, align, extra)
    a = dg.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), False)
    b = _weights(len(group_rows), n, k)
    return starts, psum, m_indices, m, a, b


def _poisoned(m, n):
    return torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)


def _check_groups(d, a, b, starts, group_rows):
    from gpu_gemm_utils import check_group_rows

    for g, (s, rows) in enumerate(zip(starts, group_rows)):
        if rows:
            check_group_rows(d, a, b, g, s, rows, max_rel=MAX_REL)


def _equal_on_groups(d1, d2, starts, group_rows):
    for g, (s, rows) in enumerate(zip(starts, group_rows)):
        assert torch.equal(_bits(d1[s : s + rows]), _bits(d2[s : s + rows])), f"group {g} differs"


PSUM_CASES = [
    ([1000], 2112, 7168),  # one group, not a multiple of the alignment
    ([0, 300, 0, 17, 128, 129, 0], 4096, 512),  # empty groups, odd sizes
    ([random.Random(7).randint(0, 700) for _ in range(9)], 7168, 2048),
    ([256] * 32, 576, 1024),  # many aligned groups
    ([5000, 3000, 7000, 100], 4096, 7168),  # large: the heuristic's 2-CTA contiguous config, without its cluster
    ([90, 200], 256, 640),  # K not a multiple of 128
]


@pytest.mark.parametrize("group_rows, n, k", PSUM_CASES)
def test_psum_layout_matches_m_indices_bitwise(group_rows, n, k):
    import dgx.deep_gemm as dg

    import dgx
    from dgx.grouped_psum import psum_config
    from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS

    starts, psum, m_indices, m, a, b = _contiguous_problem(group_rows, n, k, extra=200)
    d_idx, d_psum, d_default = _poisoned(m, n), _poisoned(m, n), _poisoned(m, n)
    dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d_psum, psum, use_psum_layout=True)
    # The m_indices layout with the tile config the prefix-sum call planned (only the group lookup differs), and
    # with its own heuristic's (which may pick another tile or a 2-CTA cluster).
    config = replace(psum_config(m, n, k, len(group_rows), dgx.get_num_sms(), 128), layout=LAYOUT_CONTIGUOUS)
    dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d_idx, m_indices, config=config)
    dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d_default, m_indices)
    torch.cuda.synchronize()
    _check_groups(d_psum, a, b, starts, group_rows)
    _check_groups(d_default, a, b, starts, group_rows)
    _equal_on_groups(d_idx, d_psum, starts, group_rows)
    tail = -(-(psum[-1].item()) // 128) * 128
    assert torch.isnan(d_psum[tail:]).all(), "rows past the last group's tiles were written"


@pytest.mark.parametrize("group_rows, n, k", PSUM_CASES[1:3])
@pytest.mark.parametrize("block_m, block_n, defer", [(64, 96, True), (128, 160, False)])
def test_psum_layout_matches_m_indices_bitwise_per_config(group_rows, n, k, block_m, block_n, defer):
    """The same tile config on both layouts (only the group lookup differs) gives the same bits."""
    import dgx
    from dgx.grouped_psum import m_grouped_fp8_gemm_nt_contiguous_psum
    from dgx.heuristics import pipeline_stages
    from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, GemmConfig

    starts, psum, m_indices, m, a, b = _contiguous_problem(group_rows, n, k)
    config = GemmConfig(n, k, block_m, block_n, pipeline_stages(block_m, block_n), layout=LAYOUT_CONTIGUOUS, defer=defer)
    d_idx, d_psum = _poisoned(m, n), _poisoned(m, n)
    dgx.m_grouped_fp8_gemm_nt_contiguous(a, b, d_idx, m_indices, config=config)
    m_grouped_fp8_gemm_nt_contiguous_psum(a, b, d_psum, psum, config=replace(config, layout=LAYOUT_CONTIGUOUS_PSUM))
    torch.cuda.synchronize()
    _check_groups(d_psum, a, b, starts, group_rows)
    _equal_on_groups(d_idx, d_psum, starts, group_rows)


def test_psum_layout_follows_new_sums_under_graph_replay():
    import dgx
    import dgx.deep_gemm as dg
    from dgx.grouped_psum import psum_config
    from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS

    n, k = 1024, 1024
    layouts = [[100, 300, 0, 250], [250, 10, 300, 90], [0, 0, 0, 600], [640, 0, 0, 0]]
    m = max(_layouts(rows)[3] for rows in layouts)
    a = dg.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), False)
    a = (a[0], dg.get_mn_major_tma_aligned_tensor(a[1]))  # no scale conversion inside the graph
    b = _weights(4, n, k)
    psum = torch.zeros(4, dtype=torch.int32, device="cuda")
    d = _poisoned(m, n)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        psum.copy_(_layouts(layouts[0])[1])
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)  # plan and compile outside
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)
    torch.cuda.synchronize()
    config = replace(psum_config(m, n, k, 4, dgx.get_num_sms(), 128), layout=LAYOUT_CONTIGUOUS)  # the same tiles
    for rows in layouts:
        starts, new_psum, m_indices, m_rows = _layouts(rows)
        psum.copy_(new_psum)
        d.fill_(float("nan"))
        graph.replay()
        d_idx = _poisoned(m_rows, n)
        dgx.m_grouped_fp8_gemm_nt_contiguous((a[0][:m_rows], a[1][:m_rows]), b, d_idx, m_indices, config=config)
        torch.cuda.synchronize()
        _check_groups(d, a, b, starts, rows)
        _equal_on_groups(d_idx, d, starts, rows)


def test_psum_layout_with_64_row_alignment_and_expected_m():
    import dgx.deep_gemm as dg

    group_rows, n, k = [70, 0, 64, 130, 1], 512, 1024
    try:
        dg.set_mk_alignment_for_contiguous_layout(64)
        starts, psum, _, m, a, b = _contiguous_problem(group_rows, n, k, align=64)
        d = _poisoned(m, n)
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)
        torch.cuda.synchronize()
        _check_groups(d, a, b, starts, group_rows)
    finally:
        dg.set_mk_alignment_for_contiguous_layout(128)
    n = 2048
    starts, psum, _, m, a, b = _contiguous_problem([3000, 20, 900], n, 2048)
    d = _poisoned(m, n)
    dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True, expected_m_for_psum_layout=1000)
    torch.cuda.synchronize()
    _check_groups(d, a, b, starts, [3000, 20, 900])


def test_psum_values_out_of_range_are_clamped():
    """Sums past M or below the group's start (bad input) neither read nor write out of bounds."""
    import dgx.deep_gemm as dg

    n, k = 256, 512
    _, _, _, m, a, b = _contiguous_problem([200, 100, 50], n, k)
    assert m == 512
    psum = torch.tensor([200, 10, 1 << 30], dtype=torch.int32, device="cuda")  # group 1 empty, group 2 up to M
    d = _poisoned(m, n)
    dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)
    torch.cuda.synchronize()
    for g, rows in ((0, slice(0, 200)), (2, slice(256, 512))):  # group 2 starts at 200 rounded up to the tile
        out = d[rows]
        assert not torch.isnan(out).any(), f"group {g}: rows not written"
        assert _rel(out, _ref(a[0][rows], a[1][rows], b[0][g], b[1][g])) <= MAX_REL, f"group {g}"


# --- UE8M0 --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7, 5), (2, 130, 13), (4096, 56), (3, 1, 4), (1000, 3), (33, 129)])
@pytest.mark.parametrize("row_major", [False, True])
def test_unpack_kernel_matches_torch(shape, row_major):
    import dgx.deep_gemm as dg
    from dgx.layout import get_tma_aligned_size
    from dgx.ue8m0 import unpack_scales

    *g, rows, kb = shape
    exponents = torch.randint(0, 256, shape, dtype=torch.int32, device="cuda")
    exponents.view(-1)[:2] = torch.tensor([0, 255], dtype=torch.int32, device="cuda")  # 0.0 and the largest
    sf = (exponents << 23).view(torch.float32)
    words = -(-kb // 4)
    padded = torch.nn.functional.pad(sf, (0, words * 4 - kb))
    for packed in (dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf),  # MN-major, TMA-aligned
                   dg.pack_ue8m0_to_int(padded),  # row-major
                   dg.pack_ue8m0_to_int(padded).transpose(-1, -2).contiguous().transpose(-1, -2)):  # MN-major, tight
        out = unpack_scales(packed, kb, row_major=row_major)
        torch.cuda.synchronize()
        assert out.shape == tuple(shape) and out.dtype == torch.float32
        assert torch.equal(out.view(torch.int32), sf.view(torch.int32))
        if row_major:
            assert out.is_contiguous()
        else:
            aligned = get_tma_aligned_size(rows, 4)
            assert out.stride()[-2:] == (1, aligned) and (not g or out.stride(0) == kb * aligned)


def _ue8m0_dense(m, n, k, per_row_b=False):
    import dgx.deep_gemm as dg

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a = dg.per_token_cast_to_fp8(x, True)
    b = dg.per_token_cast_to_fp8(y, True) if per_row_b else dg.per_block_cast_to_fp8(y, True)
    return x, y, a, b


@pytest.mark.parametrize("m, n, k", [(1, 2112, 7168), (128, 576, 7168), (4096, 7168, 2048), (300, 4096, 640)])
def test_ue8m0_fp32_scales_and_packed_scales(m, n, k):
    """UE8M0-valued FP32 scales run as they are; the same scales packed (MN-major or row-major) give the same bits."""
    import dgx.deep_gemm as dg
    from dgx.torch_utils import calc_diff

    x, y, a, b = _ue8m0_dense(m, n, k)
    d_fp32 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt(a, b, d_fp32)
    torch.cuda.synchronize()
    assert _rel(d_fp32, _ref(*a, *b)) <= MAX_REL
    if m * n >= 256:
        assert calc_diff(d_fp32, x.float() @ y.float().T) < 1e-3
    sfa_packed = dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(a[1])
    sfb_packed = dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(b[1])
    _, sfa_row_major = dg.per_token_cast_to_fp8(x, True, use_packed_ue8m0=True)
    for sfa, sfb in ((sfa_packed, sfb_packed), (sfa_row_major, sfb_packed.contiguous())):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        dg.fp8_gemm_nt((a[0], sfa), (b[0], sfb), d)
        torch.cuda.synchronize()
        assert torch.equal(_bits(d), _bits(d_fp32))


def test_packed_scales_in_every_gemm():
    import dgx.deep_gemm as dg

    # Weight-gradient form: B packed per row.
    m, n, k = 512, 384, 1024
    _, _, a, b = _ue8m0_dense(m, n, k, per_row_b=True)
    c = torch.randn(m, n, device="cuda")
    d1, d2 = c.clone(), c.clone()
    dg.fp8_gemm_nt(a, b, d1, c=d1, recipe=(1, 1, 128))
    pack = dg.get_mn_major_tma_aligned_packed_ue8m0_tensor
    dg.fp8_gemm_nt((a[0], pack(a[1])), (b[0], pack(b[1])), d2, c=d2, recipe=(1, 1, 128))
    torch.cuda.synchronize()
    assert torch.equal(_bits(d1), _bits(d2))
    # Masked: 3-D packed scales.
    groups, m_max, n, k = 3, 256, 512, 1024
    a16 = torch.randn(groups, m_max, k, device="cuda", dtype=torch.bfloat16)
    qa = [dg.per_token_cast_to_fp8(a16[g], True) for g in range(groups)]
    a = (torch.stack([q for q, _ in qa]), torch.stack([s for _, s in qa]))
    b = _weights(groups, n, k, use_ue8m0=True)
    masked_m = torch.tensor([100, 0, 256], dtype=torch.int32, device="cuda")
    d1 = torch.zeros(groups, m_max, n, device="cuda", dtype=torch.bfloat16)
    d2 = d1.clone()
    dg.m_grouped_fp8_gemm_nt_masked(a, b, d1, masked_m, 128)
    dg.fp8_m_grouped_gemm_nt_masked((a[0], pack(a[1])), (b[0], pack(b[1])), d2, masked_m, 128)
    torch.cuda.synchronize()
    assert torch.equal(_bits(d1), _bits(d2))
    # Contiguous, both layouts.
    group_rows, n, k = [200, 0, 300], 512, 1024
    starts, psum, m_indices, m, _, _ = _contiguous_problem(group_rows, n, k)
    a = dg.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), True)
    b = _weights(3, n, k, use_ue8m0=True)
    packed = ((a[0], pack(a[1])), (b[0], pack(b[1])))
    for layout, psum_layout in ((m_indices, False), (psum, True)):
        d1, d2 = _poisoned(m, n), _poisoned(m, n)
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d1, layout, use_psum_layout=psum_layout)
        dg.m_grouped_fp8_gemm_nt_contiguous(*packed, d2, layout, use_psum_layout=psum_layout)
        torch.cuda.synchronize()
        _check_groups(d1, a, b, starts, group_rows)
        _equal_on_groups(d1, d2, starts, group_rows)


# --- recipes and forms --------------------------------------------------------------------------------------------


def test_recipes_and_transposed_forms_match_dgx_bitwise():
    import dgx
    import dgx.deep_gemm as dg

    m, n, k = 256, 512, 1024
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a, b = dg.per_token_cast_to_fp8(x, False), dg.per_block_cast_to_fp8(y, False)
    ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dgx.fp8_gemm_nt(a, b, ref)
    # [K, N] stored column-major (so its transpose is K-major), scales likewise: the nn/tn/tt forms run.
    b_t = (b[0].T, b[1].T)
    a_t = (a[0].T, a[1].T)
    outs = {}
    for name, args in (("nt", (a, b)), ("nn", (a, b_t)), ("tn", (a_t, b_t)), ("tt", (a_t, b))):
        outs[name] = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        getattr(dg, f"fp8_gemm_{name}")(*args, outs[name], recipe=(1, 128, 128))
    outs["pair"] = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt(a, b, outs["pair"], recipe_a=(1, 128), recipe_b=(128, 128))
    torch.cuda.synchronize()
    for name, out in outs.items():
        assert torch.equal(_bits(out), _bits(ref)), name
    # The weight-gradient form: with c = d, with another c, and without c.
    b_row = dg.per_token_cast_to_fp8(y, False)
    c = torch.randn(m, n, device="cuda")
    ref = c.clone()
    dgx.fp8_gemm_nt(a, b_row, ref, c=ref)
    d_same, d_other, d_none = c.clone(), torch.full_like(c, float("nan")), torch.full_like(c, float("nan"))
    dg.fp8_gemm_nt(a, b_row, d_same, c=d_same, recipe=(1, 1, 128))
    dg.fp8_gemm_nt(a, b_row, d_other, c=c, recipe=(1, 1, 128))
    dg.fp8_gemm_nt(a, b_row, d_none, recipe=(1, 1, 128))
    torch.cuda.synchronize()
    assert torch.equal(_bits(d_same), _bits(ref)) and torch.equal(_bits(d_other), _bits(ref))
    assert _rel(d_none, _ref(*a, *b_row, b_rows=1)) <= MAX_REL


def test_k_grouped_c_forms():
    import dgx.deep_gemm as dg

    groups, m, n, ks = 3, 256, 384, [256, 0, 384]
    kt = sum(ks)
    xs = [torch.randn(kk, m, device="cuda", dtype=torch.bfloat16) for kk in ks]
    ys = [torch.randn(kk, n, device="cuda", dtype=torch.bfloat16) for kk in ks]
    qa = [dg.per_channel_cast_to_fp8(x, False) for x in xs if x.shape[0]]
    qb = [dg.per_channel_cast_to_fp8(y, False) for y in ys if y.shape[0]]
    def flat(quantised, rows):  # the groups' [rows, k_g] operands (K-contiguous) one after another, 1-D
        out = torch.empty(rows * kt, dtype=torch.float8_e4m3fn, device="cuda")
        offset = 0
        for q, _ in quantised:
            out[offset : offset + q.numel()].copy_(q.T.contiguous().view(-1))
            offset += q.numel()
        return out

    a = (flat(qa, m), torch.cat([s for _, s in qa]))  # scales in DeepGEMM's layout [sum(ks)/128, M]
    b = (flat(qb, n), torch.cat([s for _, s in qb]))
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    c = torch.randn(groups, m, n, device="cuda")
    d_same, d_other, d_none = c.clone(), torch.full_like(c, float("nan")), torch.full_like(c, float("nan"))
    dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d_same, ks, ks_tensor, d_same)
    dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d_other, ks, ks_tensor, c)
    dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d_none, ks_cpu=ks, grouped_layout=ks_tensor)
    torch.cuda.synchronize()
    assert torch.equal(_bits(d_same), _bits(d_other))
    assert torch.equal(d_none[1], torch.zeros(m, n, device="cuda"))  # an empty group: d = c = 0
    j = 0
    for g, kk in enumerate(ks):
        if not kk:
            assert torch.equal(d_same[g], c[g])
            continue
        (qx, sx), (qy, sy) = qa[j], qb[j]
        ref = ((qx.float().double() * sx.double().repeat_interleave(128, 0)).T
               @ (qy.float().double() * sy.double().repeat_interleave(128, 0)))
        assert _rel(d_none[g], ref) <= MAX_REL and _rel(d_same[g] - c[g], ref) <= 5 * MAX_REL
        j += 1
