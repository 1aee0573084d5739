"""The BF16 GEMM family's config, heuristic and warm-up list (pure Python, no GPU)."""

from __future__ import annotations

import re

import pytest

from dgx.enumeration import m_samples
from dgx.intmath import ceil_div
from dgx.kernels import bf16_gemm
from dgx.kernels.bf16_gemm import (
    LAYOUT_CONTIGUOUS,
    LAYOUT_CONTIGUOUS_PSUM,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    SHARE_A,
    SHARE_B,
    Bf16GemmConfig,
    choose,
    max_stages,
    smem_bytes,
    warmup_configs,
)
from dgx.kernels import bf16_gemm_heuristics as heuristics
from dgx.kernels.bf16_gemm_heuristics import candidates, estimate, pair_lockstep_cycles, restreams_b

ANCHORS = [(m, n, k) for m in (64, 128, 4096) for n, k in
           ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]


def test_a_plain_config_and_its_properties():
    c = Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=256, stages=3)
    assert (c.form, c.cluster, c.math_warpgroups, c.threads) == ("nt", 1, 2, 384)
    assert c.smem_bytes == 128 * 256 * 2 + 3 * ((128 + 256) * 128 + 16) == smem_bytes(128, 256, 3)
    assert c.d_span == 128 and c.box("a") == (64, 128) and c.box("b") == (64, 256)
    assert c.kernel_name == "dgx_bf16_gemm_nt_bf16_n4096_k7168_bm128_bn256_s3_g16_p0"
    assert c.units(4096) == 32 * 16 and c.grid(512, 132) == 128  # 4 waves of 128 CTAs, not 132
    assert dict(c.describe())["family"] == "bf16_gemm"


@pytest.mark.parametrize("major_a, major_b, form", [("k", "k", "nt"), ("k", "mn", "nn"), ("mn", "mn", "tn"),
                                                    ("mn", "k", "tt")])
def test_forms_boxes_and_swizzles(major_a, major_b, form):
    c = Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=96, stages=4, major_a=major_a, major_b=major_b)
    assert c.form == form and f"_{form}_" in c.kernel_name
    # K-major: 64 of K (one 128-byte swizzle row) by the tile's rows; MN-major: one swizzle atom by 64 of K.
    assert c.box("a") == ((64, 128) if major_a == "k" else (64, 64))
    assert c.box("b") == ((64, 96) if major_b == "k" else (32, 64, 1))  # 96 columns: 64-byte atoms of 32
    assert c.swizzle("b") == (128 if major_b == "k" else 64)


def test_k_atoms_make_longer_k_blocks():
    c = Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=32, stages=4, k_atoms=4, major_b="mn", pair=SHARE_A)
    assert c.box("a") == (64, 32) and c.box("b") == (32, 256, 1)  # K-major boxes stay 64 of K; MN-major take all
    assert c.smem_bytes == smem_bytes(64, 32, 4, k_atoms=4) == 64 * 32 * 2 + 4 * ((64 + 32) * 128 * 4 + 16)
    assert c.kernel_name.endswith("_p1_ka4") and "_ka" not in Bf16GemmConfig(n=64, k=64, block_m=64, block_n=16,
                                                                               stages=2).kernel_name
    assert "::kBlockK == 256" in c.render().source


def test_shared_operands_load_half_boxes():
    assert Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=4, pair=SHARE_A).box("a") == (64, 64)
    assert Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=4, pair=SHARE_B).box("b") == (64, 64)
    c = Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=4, pair=SHARE_A, major_a="mn")
    assert c.box("a") == (64, 64) and c.units(4096) == 32 * 16
    assert Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=4, pair=SHARE_B).units(4096) == 16 * 32


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(block_m=96), "block_m must be 64, 128 or 256"),
        (dict(block_n=12), "block_n must be a multiple of 8"),
        (dict(block_n=264), "block_n must be a multiple of 8 in 8..256"),
        (dict(major_b="mn", block_n=48), "an N-major B needs block_n a multiple of 32"),
        (dict(block_m=256, block_n=176), "needs 176 accumulators per thread"),
        (dict(stages=1), "stages must be in 2..16"),
        (dict(block_m=256, block_n=160, stages=4), "needs 294976 bytes of shared memory"),
        (dict(n=100), "n must be a positive multiple of 8"),
        (dict(k=0), "k must be positive, or 0 for the K-grouped layout"),
        (dict(major_a="row"), "major_a and major_b must be one of"),
        (dict(out_dtype="float16"), "out_dtype must be one of"),
        (dict(pair=3), "pair must be 0 (none), 1 (share A along N) or 2 (share B along M)"),
        (dict(pair=SHARE_A, layout=LAYOUT_MASKED), "multicast pairs are for the dense and contiguous layouts only"),
        (dict(pair=SHARE_A, major_a="mn", block_m=64), "sharing an M-major A needs block_m 128 or 256"),
        (dict(pair=SHARE_B, major_b="mn"), "an N-major B is loaded through a 3-D map"),
        (dict(pair=SHARE_B, block_n=120), "sharing B needs block_n a multiple of 16"),
        (dict(layout=LAYOUT_CONTIGUOUS, major_a="mn"), "the M-grouped layouts take a K-major A"),
        (dict(layout=LAYOUT_MASKED, major_b="mn"), "the masked layout takes a K-major B"),
        (dict(layout=LAYOUT_K_GROUPED, k=0), "the K-grouped layout takes A and B MN-major"),
        (dict(layout=LAYOUT_MASKED, out_dtype="float32"), "the M-grouped layouts write a BF16 D"),
        (dict(layout=LAYOUT_CONTIGUOUS_PSUM, with_c=True), "the M-grouped layouts add no C"),
        (dict(layout=9), "layout must be one of"),
        (dict(k_atoms=3), "k_atoms must be one of (1, 2, 4)"),
        (dict(layout=LAYOUT_K_GROUPED, k=0, major_a="mn", major_b="mn", out_dtype="float32", k_atoms=4),
         "the K-grouped layout takes k_atoms 1 or 2"),
        (dict(split_k=9), "split_k must be an int in 1..8"),
        (dict(split_k=True), "split_k must be an int in 1..8"),
        (dict(split_k=2, pair=SHARE_A), "split-K clusters do not also share an operand"),
        (dict(split_k=2, layout=LAYOUT_CONTIGUOUS), "split-K is for the dense and masked layouts"),
        (dict(split_k=2, block_m=256, block_n=64, stages=3), "split-K needs one m64 slice per warpgroup"),
        (dict(split_k=8, k=7168 - 64 * 3), "split_k 8 must divide the 109 k-blocks of K = 6976"),
        (dict(split_k=4, k_atoms=2, block_m=64, k=64 * 2 * 6), "split_k 4 must divide the 6 k-blocks of K = 768 "
                                                                "(128 of K each)"),
        (dict(split_k=2, with_c=True), "split-K adds C only to an FP32 D"),
        (dict(split_k=2, block_n=256, stages=4), "needs 331856 bytes of shared memory"),  # a 128 x 264 FP32 partial
    ],
)
def test_invalid_configs_say_what_is_wrong(over, message):
    fields = dict(n=4096, k=7168, block_m=128, block_n=128, stages=4)
    fields.update(over)
    with pytest.raises(ValueError, match=re.escape(message)):
        Bf16GemmConfig(**fields)


def test_split_k_config():
    c = Bf16GemmConfig(n=2112, k=7168, block_m=64, block_n=144, stages=6, split_k=8)
    assert (c.cluster, c.threads, c.units(64), c.units(128)) == (8, 256, 15, 30)
    # The FP32 partial tile (rows padded by 8 floats, 1 KB aligned) replaces the staged output tile; two barriers more.
    partial = ceil_div(64 * 152 * 4, 1024) * 1024
    assert c.smem_bytes == partial + 6 * ((64 + 144) * 128 + 16) + 16 == smem_bytes(64, 144, 6, split_k=8)
    assert max_stages(64, 144, split_k=8) == (bf16_gemm.SMEM_LIMIT - partial - 16) // ((64 + 144) * 128 + 16)
    assert c.kernel_name == "dgx_bf16_gemm_nt_bf16_n2112_k7168_bm64_bn144_s6_g16_p0_sk8"
    assert c.traits().endswith(", 1, 8>") and "::kSmemBytes == %d" % c.smem_bytes in c.render().source
    assert c.grid(15, 132) == 120  # one wave: 15 clusters of 8 CTAs
    assert c.grid(30, 132) == 120  # two waves of 15 clusters (launch_plan caps the clusters at what fits at once)
    # An FP32 D may take C (added by the CTA that sums each element); the masked layout splits too.
    Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=144, stages=4, split_k=4, out_dtype="float32", with_c=True)
    Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=4, split_k=2, layout=LAYOUT_MASKED)
    unsplit = Bf16GemmConfig(n=2112, k=7168, block_m=64, block_n=144, stages=6)
    assert "_sk" not in unsplit.kernel_name and unsplit.traits().endswith(", false, false, 1>")


def test_resident_clusters_and_split_candidates():
    from dgx.kernels.bf16_gemm_heuristics import resident_clusters, split_candidates

    assert [resident_clusters(s, 132) for s in (1, 2, 4, 8)] == [132, 66, 30, 15]
    # 64x144 tiles of 64x2112x7168: 15 tiles, one wave of clusters of 2, 4 or 8.
    splits = [c.split_k for c in split_candidates(0, 64, 2112, 7168, 1, 132, 64, 144, 1, "k", "k", "bfloat16", False)]
    assert splits == [2, 4, 8]
    # 33 tiles of 64 columns: clusters of 4 would take two waves (30 fit), so only pairs of CTAs split.
    splits = [c.split_k for c in split_candidates(0, 64, 2112, 7168, 1, 132, 64, 64, 1, "k", "k", "bfloat16", False)]
    assert splits == [2]
    # Every tile a wave of its own already, BF16 D with C, 256-row tiles, contiguous: no split.
    assert not split_candidates(0, 4096, 4096, 7168, 1, 132, 128, 256, 1, "k", "k", "bfloat16", False)
    assert not split_candidates(0, 64, 2112, 7168, 1, 132, 64, 144, 1, "k", "k", "bfloat16", True)
    assert not split_candidates(0, 64, 2112, 7168, 1, 132, 256, 144, 1, "k", "k", "bfloat16", False)
    assert not split_candidates(LAYOUT_CONTIGUOUS, 128, 2112, 7168, 1, 132, 64, 144, 1, "k", "k", "bfloat16", False)


def test_decode_choices_after_the_h200_calibration():
    """What the H200 dense suite taught the model: at M = 128 the 64-row tiles that read every B tile twice and all
    of A per tile (13-14% behind cuBLAS) give way (128-row tiles, or 64-row pairs sharing B); an N-major B never
    takes 64-byte-swizzled 128x224 tiles on the large shapes (14% behind); the large K-major choices and the M = 64
    shapes that were level with cuBLAS mostly stay."""
    for n, k in ((2112, 7168), (4096, 7168), (7168, 16384), (7168, 2048)):
        c = choose("dense", 128, n, k)
        assert c.block_m == 128 or c.pair == SHARE_B, c.kernel_name
        old = Bf16GemmConfig(n=n, k=k, block_m=64, block_n={2112: 32, 4096: 64}.get(n, 112), stages=7)
        assert estimate(c, 128, k, 1, 132).cycles < estimate(old, 128, k, 1, 132).cycles
    for n, k in ((24576, 1536), (32768, 512)):
        c = choose("dense", 4096, n, k, major_b="mn")
        assert c.block_n % 64 == 0, c.kernel_name  # 128-byte swizzle atoms of B
    assert choose("dense", 4096, 4096, 7168) == Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=256, stages=3)
    for n, k in ((24576, 1536), (32768, 512), (7168, 16384), (7168, 2048)):
        assert choose("dense", 64, n, k).split_k == 1


def _decode_terms_off(monkeypatch):
    """The model without its decode terms (the model before the decode recalibration); undo with _decode_terms_on."""
    monkeypatch.setattr(heuristics, "RESTREAMED_B_HBM_SHARE", 0.0)
    monkeypatch.setattr(heuristics, "PAIR_FIXED_CLK", 0)
    heuristics._choose.cache_clear()


def _decode_terms_on(monkeypatch):
    monkeypatch.undo()
    heuristics._choose.cache_clear()


def test_decode_terms():
    """A 64-row tile re-streams B only at 64 < M <= 128 without B multicast (dense and masked); a pair pays its
    lockstep only at M <= 128."""
    plain = Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=160, stages=6)
    assert [restreams_b(plain, m) for m in (64, 65, 128, 129)] == [False, True, True, False]
    assert restreams_b(Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=128, stages=7, pair=SHARE_A), 128)
    assert not restreams_b(Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=128, stages=7, pair=SHARE_B), 128)
    assert not restreams_b(Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=80, stages=7), 128)
    assert restreams_b(Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=128, stages=7, layout=LAYOUT_MASKED), 100)
    assert not restreams_b(Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=128, stages=7,
                                          layout=LAYOUT_CONTIGUOUS), 128)
    paired = Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=64, stages=8, pair=SHARE_A)
    assert [pair_lockstep_cycles(paired, m) for m in (1, 128, 129)] == [heuristics.PAIR_FIXED_CLK] * 2 + [0.0]
    assert pair_lockstep_cycles(Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=64, stages=8), 64) == 0.0
    # The re-streamed B is a share of B's HBM time on the HBM floor (128 x 7168 x 2048 sits on it).
    c = Bf16GemmConfig(n=7168, k=2048, block_m=64, block_n=144, stages=6)
    assert estimate(c, 128, 2048, 1, 132).cycles == pytest.approx(
        (128 * 2048 * 2 + 7168 * 2048 * 2 * (1 + heuristics.RESTREAMED_B_HBM_SHARE) + 128 * 7168 * 2)
        / heuristics.HBM_BYTES_PER_CLK)


def test_decode_recalibration_picks(monkeypatch):
    """The H200 decode sweep (nt, 8 configs of distinct kinds per shape): at M = 128 the picks that were 64-row tiles
    re-reading B (5-9% behind) are its fastest configs now; 128 x 7168 x 16384 keeps its B-sharing pair (1.8% behind
    the fastest, a split-K 128x112, which the model does not resolve); at M = 64, 64 x 4096 x 7168 leaves its pair
    for the sweep's fastest. Without the decode terms the model picks what it picked before."""
    new = {
        (128, 2112, 7168): dict(block_m=128, block_n=80, stages=7, split_k=4),
        (128, 4096, 7168): dict(block_m=128, block_n=80, stages=7, split_k=2),
        (128, 7168, 2048): dict(block_m=128, block_n=80, stages=7),
        (128, 7168, 16384): dict(block_m=64, block_n=112, stages=7, pair=SHARE_B),
        (128, 24576, 1536): dict(block_m=128, block_n=192, stages=4),
        (128, 32768, 512): dict(block_m=128, block_n=256, stages=3),
        (64, 4096, 7168): dict(block_m=64, block_n=48, stages=12),
    }
    old = {
        (128, 2112, 7168): dict(block_m=64, block_n=144, stages=6, split_k=4),
        (128, 4096, 7168): dict(block_m=64, block_n=160, stages=6, split_k=2),
        (128, 7168, 2048): dict(block_m=64, block_n=112, stages=7, pair=SHARE_A),
        (64, 4096, 7168): dict(block_m=64, block_n=32, stages=14, pair=SHARE_A),
    }
    for (m, n, k), fields in new.items():
        assert choose("dense", m, n, k) == Bf16GemmConfig(n=n, k=k, **fields), (m, n, k)
    _decode_terms_off(monkeypatch)
    try:
        for (m, n, k), fields in old.items():
            assert choose("dense", m, n, k) == Bf16GemmConfig(n=n, k=k, **fields), (m, n, k)
    finally:
        _decode_terms_on(monkeypatch)


def test_decode_terms_move_no_choice_above_128_rows(monkeypatch):
    """On the dense anchors' and the presets' BF16 (N, K), at both ends of every 64-row range up to 256 and at 512 to
    8192 rows (the choice is constant between them): with and without the decode terms the choices are the same
    above M = 128, and at M <= 64 but on 4096 x 7168 (its pair gives way: the sweep's fastest)."""
    from dgx.bench.bf16_suites import PRESET_BF16_NK

    nks = sorted({(n, k) for _, n, k in ANCHORS} | {(n, k) for n, k, _ in PRESET_BF16_NK})
    ms = (1, 2, 63, 64, 129, 130, 191, 192, 193, 255, 256, 512, 1024, 4096, 8192)
    on = {(m, n, k): choose("dense", m, n, k) for n, k in nks for m in ms}
    _decode_terms_off(monkeypatch)
    try:
        off = {key: choose("dense", *key) for key in on}
    finally:
        _decode_terms_on(monkeypatch)
    moved = sorted(key for key in on if on[key] != off[key])
    assert moved == [(m, 4096, 7168) for m in (1, 2, 63, 64)]


def test_max_stages_fill_shared_memory_and_no_more():
    for bm in (64, 128, 256):
        for bn in range(16, 257, 16):
            for out in ("bfloat16", "float32"):
                s = max_stages(bm, bn, out)
                assert s == 0 or smem_bytes(bm, bn, s, out) <= bf16_gemm.SMEM_LIMIT
                if s < bf16_gemm.MAX_STAGES:
                    assert smem_bytes(bm, bn, s + 1, out) > bf16_gemm.SMEM_LIMIT


def test_render_holds_the_entry_the_wgmma_and_the_checks():
    c = Bf16GemmConfig(n=2112, k=7168, block_m=64, block_n=96, stages=8, major_a="mn", major_b="mn")
    src = c.render()
    assert src.name == c.kernel_name and src.dynamic_smem == c.smem_bytes
    assert f'extern "C" __global__ void __launch_bounds__(256, 1) {c.kernel_name}(' in src.source
    assert "template <> struct WgmmaBF16<96, true, true>" in src.source
    assert "m64n96k16.f32.bf16.bf16" in src.source and ", 1, 1, 1, 1;" in src.source
    assert f"::kSmemBytes == {c.smem_bytes}" in src.source and "::kDSpan == 64" in src.source
    assert '"kind": "dense"' in src.warmup_hint


@pytest.mark.parametrize("m, n, k", ANCHORS)
def test_dense_choices_are_valid_and_fill_the_gpu(m, n, k):
    c = choose("dense", m, n, k, 1, 132)
    assert c.smem_bytes <= bf16_gemm.SMEM_LIMIT and c.layout == 0 and c.stages >= 3
    units = c.units(m)
    waves = ceil_div(units, 132 // c.cluster)
    busy = units * c.cluster / waves  # CTAs per wave
    assert busy >= 64, f"{c.kernel_name}: {busy} CTAs per wave"
    if m >= 4096:  # compute-bound: two math warpgroups, at least 128 x 128 of output per tile
        assert c.block_m >= 128 and c.block_m * c.block_n >= 128 * 128


def test_choice_is_a_minimum_of_the_model():
    m, n, k = 4096, 7168, 2048
    chosen = estimate(choose("dense", m, n, k), m, k, 1, 132).cycles
    assert all(estimate(c, m, k, 1, 132).cycles >= chosen * 0.99 for c in candidates(
        "dense", m, n, k, 1, 132, "k", "k", "bfloat16", False))


@pytest.mark.parametrize("major_a, major_b, out, with_c", [("k", "mn", "bfloat16", False), ("mn", "mn", "float32", True),
                                                           ("mn", "k", "float32", False)])
def test_choices_follow_the_operands(major_a, major_b, out, with_c):
    for m, n, k in ANCHORS[::5]:
        c = choose("dense", m, n, k, major_a=major_a, major_b=major_b, out_dtype=out, with_c=with_c)
        assert (c.major_a, c.major_b, c.out_dtype, c.with_c) == (major_a, major_b, out, with_c)
        if major_b == "mn":
            assert c.block_n % 32 == 0 and c.pair != SHARE_B


def test_grouped_choices():
    c = choose("m_grouped_contiguous", 4 * 8192, 4096, 7168, 4)
    assert c.layout == LAYOUT_CONTIGUOUS and 128 % c.block_m == 0 and c.pair != SHARE_A
    c = choose("m_grouped_contiguous_psum", 4 * 8192, 4096, 7168, 4, alignment=64)
    assert c.layout == LAYOUT_CONTIGUOUS_PSUM and c.block_m == 64 and c.pair == 0
    assert choose("m_grouped_contiguous_psum", 4 * 8192, 4096, 7168, 4).block_m == 128
    c = choose("m_grouped_masked", 256, 7168, 2048, 4)
    assert c.layout == LAYOUT_MASKED and c.block_m in (64, 128) and c.pair == 0
    c = choose("k_grouped", 4096, 7168, 4096, 4, major_a="mn", major_b="mn", out_dtype="float32", with_c=True)
    assert c.layout == LAYOUT_K_GROUPED and c.k == 0 and (c.major_a, c.major_b) == ("mn", "mn")


@pytest.mark.parametrize("args, error, message", [
    (("sparse", 64, 64, 64), ValueError, "kind: expected one of dense"),
    (("dense", 0, 64, 64), ValueError, "choose: m must be a positive int; got 0"),
    (("dense", 64, 64, 64, 1, 0), ValueError, "choose: num_sms must be a positive int"),
    (("dense", 64, 60, 64), ValueError, "no kernel config fits"),
])
def test_choose_refuses_bad_problems(args, error, message):
    with pytest.raises(error, match=re.escape(message)):
        choose(*args)


def test_choice_depends_on_m_only_through_block_counts():
    """What lets warm-up enumerate m_samples instead of every M: between consecutive multiples of 64 the choice is
    constant."""
    for n, k in ((2112, 7168), (7168, 2048)):
        for lo in (512, 1024, 4032):
            picks = {choose("dense", m, n, k) for m in range(lo + 1, lo + 65)}
            assert len(picks) == 1, (n, k, lo, picks)


def test_warmup_configs_cover_every_m():
    n, k, top = 2112, 7168, 1100
    listed = warmup_configs("dense", n, k, max_m=top)
    assert set(listed) == {choose("dense", m, n, k) for m in range(1, top + 1)}
    assert len(listed) == len(set(listed))
    assert set(listed) == {choose("dense", m, n, k) for m in m_samples(top)}


def test_warmup_configs_of_the_grouped_kinds():
    masked = warmup_configs("m_grouped_masked", 4096, 7168, groups=4, max_m=300)
    assert masked and all(c.layout == LAYOUT_MASKED for c in masked)
    contiguous = warmup_configs("m_grouped_contiguous", 4096, 7168, groups=2, max_m=1024)
    assert {choose("m_grouped_contiguous", m, 4096, 7168, 2) for m in range(128, 2049, 128)} == set(contiguous)
    kg = warmup_configs("k_grouped", 7168, 4096, groups=4, max_m=300)
    assert kg and all(c.layout == LAYOUT_K_GROUPED and c.out_dtype == "float32" and c.with_c for c in kg)
    nn = warmup_configs("dense", 2112, 7168, max_m=200, major_b="mn")
    assert nn and all(c.form == "nn" for c in nn)


def test_pingpong_config():
    """Ping-pong: two math warpgroups whatever the tile height, each computing all of a tile's rows (D's TMA box),
    one staged output tile each; named and rendered only where asked for, so a cooperative kernel renders as
    before."""
    c = Bf16GemmConfig(n=4096, k=7168, block_m=64, block_n=256, stages=4, schedule="pingpong")
    assert (c.math_warpgroups, c.threads, c.wg_rows, c.cluster) == (2, 384, 64, 1)
    assert c.smem_bytes == 2 * 64 * 256 * 2 + 4 * ((64 + 256) * 128 + 16) == smem_bytes(64, 256, 4, schedule="pingpong")
    assert max_stages(64, 256, schedule="pingpong") == 4 and max_stages(64, 128, "float32", schedule="pingpong") == 6
    assert c.kernel_name == "dgx_bf16_gemm_nt_bf16_n4096_k7168_bm64_bn256_s4_g16_p0_pp"
    assert c.traits().endswith(", false, false, 1, 1, 1>")
    src = c.render().source
    assert "::kWGRows == 64" in src and "__launch_bounds__(384, 1)" in src
    assert c.units(4096) == 64 * 16 and dict(c.describe())["schedule"] == "pingpong"
    two = Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=4, pair=SHARE_B, schedule="pingpong")
    assert two.wg_rows == 128 and two.box("b") == (64, 80)
    plain = Bf16GemmConfig(n=4096, k=7168, block_m=128, block_n=256, stages=3)
    assert plain.schedule == "cooperative" and plain.wg_rows == 64 and "_pp" not in plain.kernel_name
    assert plain.traits().endswith(", false, false, 1>") and "::kWGRows == 64" in plain.render().source


@pytest.mark.parametrize("over, message", [
    (dict(schedule="ping"), "schedule must be one of ('cooperative', 'pingpong')"),
    (dict(schedule="pingpong", block_m=256, block_n=64), "a ping-pong tile is one warpgroup's (block_m 64 or 128"),
    (dict(schedule="pingpong", split_k=2), "no ping-pong schedule (got split_k 2)"),
    (dict(schedule="pingpong", block_n=176), "block_m 128 x block_n 176 needs 176 accumulators per thread"),
    (dict(schedule="pingpong", block_m=64, block_n=256, stages=5), "needs 270416 bytes of shared memory"),
])
def test_invalid_pingpong_configs_say_what_is_wrong(over, message):
    fields = dict(n=4096, k=7168, block_m=128, block_n=128, stages=4)
    fields.update(over)
    with pytest.raises(ValueError, match=re.escape(message)):
        Bf16GemmConfig(**fields)


def test_pingpong_is_weighed_only_behind_the_flag(monkeypatch):
    from dgx.kernels.bf16_gemm_heuristics import PINGPONG_MARGIN, pingpong_candidates, pingpong_tail_cycles, tile_cycles

    monkeypatch.delenv("DGX_BF16_PINGPONG", raising=False)
    for m, n, k in ANCHORS:
        assert choose("dense", m, n, k).schedule == "cooperative"
    # 4096 x 32768 x 512: 8 k-blocks a tile, where a cooperative tile's epilogue is most of a k-block's worth.
    c = choose("dense", 4096, 32768, 512, pingpong=True)
    assert c.schedule == "pingpong" and c.block_m in (64, 128)
    coop = choose("dense", 4096, 32768, 512, pingpong=False)
    assert estimate(c, 4096, 512, 1, 132).cycles < estimate(coop, 4096, 512, 1, 132).cycles * (1 - PINGPONG_MARGIN)
    monkeypatch.setenv("DGX_BF16_PINGPONG", "1")
    assert choose("dense", 4096, 32768, 512) == c
    assert c in warmup_configs("dense", 32768, 512, max_m=4096)
    monkeypatch.setenv("DGX_BF16_PINGPONG", "0")
    assert choose("dense", 4096, 32768, 512) == coop and c not in warmup_configs("dense", 32768, 512, max_m=4096)
    # The model: every tile's k-blocks, the epilogue once per CTA (under the other warpgroup's turn otherwise).
    e = estimate(c, 4096, 512, 1, 132)
    assert e.cycles >= e.waves * tile_cycles(c, 512) + pingpong_tail_cycles(c) - 1e-6
    assert pingpong_tail_cycles(coop) == 0 and tile_cycles(c, 512) < tile_cycles(
        Bf16GemmConfig(n=32768, k=512, block_m=c.block_m, block_n=c.block_n, stages=c.stages, pair=c.pair), 512)
    # No ping-pong where the tiles do not outnumber the SMs (the second warpgroup would have nothing to alternate).
    assert not pingpong_candidates(0, 64, 2112, 7168, 132, (64, 128), "k", "k", "bfloat16", False)
    # Decode shapes keep their choices with the flag on; every ping-pong candidate is a valid kernel.
    for m, n, k in ANCHORS[:12]:
        assert choose("dense", m, n, k, pingpong=True) == choose("dense", m, n, k, pingpong=False)
    for layout_kind in ("m_grouped_contiguous", "m_grouped_masked"):
        assert any(x.schedule == "pingpong" for x in candidates(layout_kind, 8192, 4096, 7168, 4, 132, "k", "k",
                                                                 "bfloat16", False, pingpong=True))
