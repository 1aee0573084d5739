"""Config choice on the CPU: every heuristic pick is a valid config, and the rules measured on the device."""

from __future__ import annotations

import math

import pytest

from dgx.heuristics import candidates, choose_dense, choose_grouped
from dgx.kernels.fp8_gemm import (
    LAYOUT_CONTIGUOUS,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    SHARE_A,
    SHARE_B,
    SHARE_NONE,
    SMEM_LIMIT,
    GemmConfig,
    validate_blocks,
)

ANCHOR_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
ODD_NK = ((576, 7168), (7168, 576), (256, 256), (24584, 1536), (8, 128))


# --- heuristics -----------------------------------------------------------------------------------


def _shapes():
    for m in (1, 7, 64, 65, 128, 1000, 4096, 8191):
        for n, k in ANCHOR_NK + ODD_NK:
            yield m, n, k


@pytest.mark.parametrize("num_sms", [132, 78, 1])
def test_every_choice_is_a_valid_config(num_sms):
    for m, n, k in _shapes():
        choice = choose_dense(m, n, k, num_sms)
        c = choice.config
        where = f"M={m} N={n} K={k} SMs={num_sms}: {c}"
        assert isinstance(c, GemmConfig), where
        assert (c.n, c.k) == (n, k), where
        assert validate_blocks(c.block_m, c.block_n, c.pair) == "", where
        assert c.smem_bytes <= SMEM_LIMIT and c.stages >= 2, where
        assert num_sms >= 2 or c.pair == SHARE_NONE, where  # a 2-CTA cluster needs 2 SMs
        assert choice.num_tiles == c.units(m), where
        slots = num_sms // c.cluster
        assert choice.waves == math.ceil(choice.num_tiles / slots), where
        grid = c.grid(choice.num_tiles, num_sms)
        assert 0 < grid <= num_sms and grid % c.cluster == 0, where
        # As few CTAs as keep the wave count: every cluster gets `waves` units or one fewer.
        clusters = grid // c.cluster
        assert math.ceil(choice.num_tiles / clusters) == choice.waves, where
        assert clusters == 1 or math.ceil(choice.num_tiles / (clusters - 1)) > choice.waves, where
        if m <= 64:
            assert c.block_m == 64, f"{where}: decode shapes must not pad M to a larger tile"
        if choice.waves > 1:
            # Minimal-ish waves: a multi-wave choice keeps at least 3/4 of the SM slots of its waves busy.
            assert choice.num_tiles / (choice.waves * slots) >= 0.75, where


def test_choice_is_deterministic_and_cached():
    assert choose_dense(4096, 7168, 2048, 132) is choose_dense(4096, 7168, 2048, 132)
    assert choose_dense(4096, 7168, 2048, 132).config == choose_dense.__wrapped__(4096, 7168, 2048, 132).config


def test_candidates_are_all_valid():
    for m, n in ((1, 2112), (4096, 7168), (300, 576)):
        cands = candidates(m, n)
        assert cands
        for bm, bn, pair in cands:
            assert validate_blocks(bm, bn, pair) == ""


@pytest.mark.parametrize("args", [(0, 2112, 7168, 132), (64, 0, 7168, 132), (64, 2112, -1, 132), (64, 2112, 7168, 0)])
def test_choose_dense_rejects_nonpositive(args):
    with pytest.raises(ValueError, match="positive"):
        choose_dense(*args)


def test_choose_dense_takes_256_row_tiles_for_large_m():
    from dgx.heuristics import choose_dense

    # Measured (PERFLOG, kernel v3): 256x128 beats 128x128 by 10-22% on every M=4096 anchor shape but N=2112.
    for n, k in ((4096, 7168), (7168, 16384), (24576, 1536), (32768, 512), (7168, 2048)):
        c = choose_dense(4096, n, k, 132).config
        assert (c.block_m, c.block_n) == (256, 128), (n, k, c)
    # Small M never pads a tile to 256 rows.
    assert choose_dense(128, 7168, 2048, 132).config.block_m <= 128


def test_one_warpgroup_tiles_cap_their_ring():
    from dgx.heuristics import ONE_WG_RING_BYTES, max_stages, pipeline_stages
    from dgx.kernels.fp8_gemm import smem_bytes

    # Measured (PERFLOG exp. 14): the fastest stage counts of the M=64 anchors' tiles.
    assert [pipeline_stages(64, bn) for bn in (16, 32, 128, 192)] == [16, 13, 6, 5]
    for bn in range(16, 257, 8):
        stages, most = pipeline_stages(64, bn), max_stages(64, bn)
        per_stage = smem_bytes(64, bn, 1) - smem_bytes(64, bn, 0)
        assert 3 <= stages <= most
        assert stages == most or (stages * per_stage <= ONE_WG_RING_BYTES < (stages + 1) * per_stage), bn
        for bm in (128, 256):
            assert pipeline_stages(bm, bn) == max_stages(bm, bn)  # two warpgroups: as many as fit
    for n, k in ANCHOR_NK:
        c = choose_dense(64, n, k, 132).config
        assert c.stages == pipeline_stages(c.block_m, c.block_n), (n, k, c)


def test_deferred_promotion_where_measured_to_pay():
    from dgx.heuristics import tile_cycles, with_deferred_promotion

    # Decode anchors: every 64-row tile, and 128-row tiles in one wave, promote deferred; M=4096 tiles
    # (two slices or many waves) and the masked anchors' 128-row tiles (two or more waves) do not.
    for n, k in ANCHOR_NK:
        c = choose_dense(64, n, k, 132).config
        assert c.defer == (c.block_n <= 128), c
        c = choose_dense(128, n, k, 132)
        assert c.config.defer == (c.config.block_m == 64 or c.waves == 1 and c.config.block_n <= 128), c
        assert not choose_dense(4096, n, k, 132).config.defer
        for groups, expected in ((1, 1024), (2, 512), (4, 256)):
            assert not choose_grouped(LAYOUT_MASKED, expected, n, k, groups, 132).config.defer
    # Deferred one-warpgroup tiles pay for a run-time B-scale split (64x56 ran slower than 64x64 on the
    # M=64, N=7168 anchors): the heuristic takes 64x64 there.
    assert tile_cycles(64, 56, 2048, defer=True) > tile_cycles(64, 56, 2048)
    assert tile_cycles(64, 64, 2048, defer=True) == tile_cycles(64, 64, 2048)
    for k in (2048, 16384):
        assert choose_dense(64, 7168, k, 132).config.block_n == 64
    one_wave = GemmConfig(n=4096, k=7168, block_m=128, block_n=64, stages=8)
    assert with_deferred_promotion(one_wave, 132, 132).defer
    assert not with_deferred_promotion(one_wave, 133, 132).defer  # a second wave
    assert with_deferred_promotion(GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=8), 500, 132).defer
    # The weight gradient defers in any number of waves, where its registers allow.
    wgrad = GemmConfig(n=4096, k=7168, block_m=128, block_n=112, stages=4, wgrad=True)
    assert with_deferred_promotion(wgrad, 1000, 132).defer
    # Never where it does not fit: 64x192 and weight-gradient 128x120 registers; nor with a compiled-in split (96).
    for config in (
        GemmConfig(n=4096, k=7168, block_m=64, block_n=192, stages=5),
        GemmConfig(n=4096, k=7168, block_m=128, block_n=120, stages=4, wgrad=True),
        GemmConfig(n=4096, k=7168, block_m=64, block_n=96, stages=8),
    ):
        assert not with_deferred_promotion(config, 1, 132).defer, config


def test_contiguous_tiles_take_a_stage_count_that_divides_their_k_blocks():
    from dgx.heuristics import max_stages, with_stage_rounds

    # The contiguous anchors: 128x192 sharing B (the measured swap for the model's 128x160), 4 stages.
    for groups, m, n, k in ((4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048)):
        c = choose_grouped(LAYOUT_CONTIGUOUS, groups * m, n, k, groups, 132).config
        assert (c.block_m, c.block_n, c.pair, c.stages) == (128, 192, SHARE_B, 4), c
        assert max_stages(128, 160) == 5
    base = GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5, pair=SHARE_B, layout=LAYOUT_CONTIGUOUS)
    assert with_stage_rounds(base).stages == 4
    assert with_stage_rounds(GemmConfig(n=4096, k=640, block_m=128, block_n=160, stages=5, layout=LAYOUT_CONTIGUOUS)).stages == 5
    # No divisor among the two largest counts (7 k-blocks): as many stages as fit.
    assert with_stage_rounds(GemmConfig(n=4096, k=896, block_m=128, block_n=160, stages=5, layout=LAYOUT_CONTIGUOUS)).stages == 5
    # Only measured to pay on the contiguous layout's plain one-slice tiles.
    for config in (
        GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_MASKED),
        GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5),
        GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_CONTIGUOUS, defer=True),
    ):
        assert with_stage_rounds(config) == config, config


def test_weight_gradients_take_plain_128x128_tiles_and_small_ones_defer():
    from dgx.heuristics import choose_wgrad

    # Dense weight gradients with M and N of 256 or more run plain 128x128 tiles at every K: in stage rounds where
    # the k-blocks fill whole rounds of the 4 stages, inside the ring otherwise (both measured faster than the
    # deferred tiles). Smaller outputs keep the model's choice, which defers.
    for m, n in ((7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)):
        for k in (4096, 8192):
            c = choose_wgrad(m, n, k, 132).config
            assert not c.defer and (c.block_m, c.block_n) == (128, 128) and c.wgrad and c.stage_rounds, (m, n, k, c)
        for k_blocks in (31, 33, 49):
            c = choose_wgrad(m, n, k_blocks * 128, 132).config
            assert not c.defer and (c.block_m, c.block_n) == (128, 128) and not c.stage_rounds, (m, n, k_blocks, c)
    assert choose_wgrad(128, 7168, 8192, 132).config.defer
    # Small outputs keep the model's choice (a 128x128 tile would leave SMs idle).
    assert choose_wgrad(128, 7168, 4096, 132).config.block_n < 128
    # K-grouped: plain 128x128 at any K (deferred tiles run a group's last k-blocks one at a time).
    for groups in (4, 8):
        for m, n, k in ((7168, 4096, 4096), (7168, 4096, 8192), (2048, 7168, 4096), (2048, 7168, 8192)):
            c = choose_wgrad(m, n, k, 132, LAYOUT_K_GROUPED, groups).config
            assert not c.defer and (c.block_m, c.block_n) == (128, 128) and c.layout == LAYOUT_K_GROUPED, c
    assert choose_wgrad(128, 7168, 4096, 132, LAYOUT_K_GROUPED, 4).config.block_n < 128  # small M: the model
    # Without room for the second set the weight gradient runs plain.
    assert not validate_blocks(128, 112, defer=True, wgrad=True)
    assert validate_blocks(128, 120, defer=True, wgrad=True)

# --- grouped GEMMs: heuristics and input checks (no GPU) -------------------------------------------


def test_choose_grouped_respects_alignment_and_layout():
    from dgx.heuristics import CONTIGUOUS_ALIGNMENT

    for layout in (LAYOUT_CONTIGUOUS, LAYOUT_MASKED):
        for m in (1, 64, 200, 4096, 32768):
            c = choose_grouped(layout, m, 4096, 7168, 8, 132).config
            assert c.layout == layout and CONTIGUOUS_ALIGNMENT % c.block_m == 0
            # Only large contiguous problems (many tiles per SM) share B along M, with 128-row tiles.
            shares = layout == LAYOUT_CONTIGUOUS and m >= 4096
            assert c.pair == (SHARE_B if shares else SHARE_NONE) and (not shares or c.block_m == 128), (layout, m, c)
    # The contiguous anchors: 128-row tiles sharing B (measured: 1-7% faster than unshared), 192 wide (3-7% faster
    # than the 160 the model picks).
    for m, n, k in ((32768, 4096, 7168), (32768, 7168, 2048)):
        c = choose_grouped(LAYOUT_CONTIGUOUS, m, n, k, 4, 132).config
        assert (c.block_m, c.block_n, c.pair) == (128, 192, SHARE_B)
    # Masked decode with few rows per group takes 64-row blocks; many tiles fill the SMs with 128.
    assert choose_grouped(LAYOUT_MASKED, 16, 4096, 7168, 4, 132).config.block_m == 64
    with pytest.raises(ValueError, match="layout must be contiguous"):
        choose_grouped(0, 64, 256, 256, 1, 132)
    with pytest.raises(ValueError, match="positive"):
        choose_grouped(LAYOUT_MASKED, 64, 256, 256, 0, 132)


def test_grouped_config_pairs_only_for_contiguous_and_masked():
    with pytest.raises(ValueError, match="multicast pairs are for the dense, contiguous and masked layouts only"):
        GemmConfig(n=512, k=0, block_m=128, block_n=128, stages=4, pair=SHARE_B, layout=LAYOUT_K_GROUPED, wgrad=True)
    # Masked pairs (issue 44's candidates; the heuristic does not pick them): along N only for an even n-block count.
    with pytest.raises(ValueError, match="even number of n-blocks"):
        GemmConfig(n=384, k=512, block_m=128, block_n=128, stages=4, pair=SHARE_A, layout=LAYOUT_MASKED)
    for pair in (SHARE_A, SHARE_B):
        c = GemmConfig(n=512, k=512, block_m=128, block_n=128, stages=4, pair=pair, layout=LAYOUT_MASKED)
        assert c.cluster == 2 and c.kernel_name.endswith(f"_p{pair}")
        assert c.units(300) == (3 * 2 if pair == SHARE_A else 2 * 4)
    for pair in (SHARE_A, SHARE_B):
        c = GemmConfig(n=512, k=512, block_m=128, block_n=128, stages=4, pair=pair, layout=LAYOUT_CONTIGUOUS)
        assert c.cluster == 2 and c.kernel_name.endswith(f"_p{pair}")


def test_decode_tiles_stream_b_where_each_b_tile_is_read_once():
    """B evict-first (GemmConfig.stream_b) on one row of M tiles with K >= 2048, for 16-column tiles only over at
    least STREAM_B_NARROW_MIN_BYTES of B; not on short K, several rows of M tiles, nor the grouped and
    weight-gradient kernels."""
    from dgx.heuristics import STREAM_B_MIN_K, STREAM_B_NARROW_MIN_BYTES, choose_wgrad

    for m in (1, 64, 128):
        for n, k in ((7168, 16384), (4096, 7168), (7168, 2048), (2112, 7168)):
            c = choose_dense(m, n, k, 132).config
            assert c.stream_b and c.block_m >= m, (m, n, k)
    for n in (576, 1536):  # 16-column tiles over 4 and 11 MB of B
        c = choose_dense(64, n, 7168, 132).config
        assert c.block_n == 16 and n * 7168 < STREAM_B_NARROW_MIN_BYTES and not c.stream_b, n
    assert choose_dense(64, 2112, 7168, 132).config.block_n == 16  # streamed above: 15.1 MB of B
    assert not choose_dense(64, 24576, 1536, 132).config.stream_b  # K < STREAM_B_MIN_K
    assert STREAM_B_MIN_K == 2048
    for m in (256, 4096):
        assert not choose_dense(m, 7168, 16384, 132).config.stream_b
    assert not choose_wgrad(64, 7168, 16384, 132).config.stream_b
    assert not choose_grouped(LAYOUT_MASKED, 64, 7168, 2048, 16, 132).config.stream_b


def test_weight_gradients_walk_n_in_one_band_rather_than_leave_a_ragged_one():
    """A grid of 17 (or 21) n-blocks in bands of 16 leaves a last band of 1 (or 5) columns that re-reads all of A:
    such grids take one band of all n-blocks (with_one_raster_band); wider grids keep bands of 16."""
    from dgx.heuristics import choose_wgrad, with_one_raster_band

    assert choose_wgrad(7168, 2112, 4096, 132).config.group_n == 17  # 128x128: 17 n-blocks
    assert choose_wgrad(7168, 2112, 8192, 132).config.group_n == 17  # 128x128 in stage rounds: 17 n-blocks
    for m, n, k in ((2048, 7168, 4096), (7168, 4096, 4096), (7168, 4096, 8192), (1536, 24576, 4096)):
        assert choose_wgrad(m, n, k, 132).config.group_n == 16, (m, n, k)
    assert choose_wgrad(7168, 2112, 4096, 132, LAYOUT_K_GROUPED, 4).config.group_n == 16
    config = GemmConfig(2112, 4096, 128, 128, 4, wgrad=True)
    assert with_one_raster_band(config).group_n == 17
    assert with_one_raster_band(GemmConfig(2048, 4096, 128, 128, 4, wgrad=True)).group_n == 16  # 16 blocks: one band
    assert with_one_raster_band(GemmConfig(4096, 4096, 128, 128, 4, wgrad=True)).group_n == 16  # 32: two even bands


def test_wide_128_row_tiles_valid_but_not_offered():
    # 128x192 (DeepGEMM 2.6.1's contiguous tile) is a config the kernel takes; the heuristic does not offer 128-row
    # tiles wider than 160 until a device run times them (issue 44), so its choices stay as they were.
    assert validate_blocks(128, 192, SHARE_B) == "" and validate_blocks(128, 192) == ""
    assert validate_blocks(128, 256)  # 256 accumulator registers per thread
    assert validate_blocks(128, 192, wgrad=True)  # the weight gradient keeps its limit
    assert not any(bm == 128 and bn > 160 for bm, bn, _ in candidates(32768, 7168))


def test_contiguous_takes_the_wide_shared_b_tile_only_where_the_model_picks_128x160_shared():
    from dgx.heuristics import CONTIGUOUS_WIDE_BLOCK_N, MAX_BLOCK_N_128

    assert CONTIGUOUS_WIDE_BLOCK_N > MAX_BLOCK_N_128  # the swap is the only way a 192-wide 128-row tile is chosen
    # few waves: no shared B, so no swap
    small = choose_grouped(LAYOUT_CONTIGUOUS, 1024, 4096, 7168, 2, 132).config
    assert small.block_n != CONTIGUOUS_WIDE_BLOCK_N and small.pair != SHARE_B
    # masked never swaps
    for m in (64, 256, 1024):
        assert choose_grouped(LAYOUT_MASKED, m, 7168, 2048, 4, 132).config.block_n != CONTIGUOUS_WIDE_BLOCK_N


# ---- the masked decode rule behind dgx.heuristics.MASKED_DECODE_RULE (issue 44) ----------------------------------

def _masked_decode(monkeypatch, rule, m, n=4096, k=7168, groups=16):
    import dgx.heuristics as h
    from dgx.kinds import Layout

    monkeypatch.setattr(h, "MASKED_DECODE_RULE", rule)
    h.choose_grouped.cache_clear()
    try:
        return h.choose_grouped(Layout.MASKED, m, n, k, groups, 132).config
    finally:
        h.choose_grouped.cache_clear()


def test_masked_decode_rule_is_tall_above_16_rows():
    import dgx.heuristics as h

    assert h.MASKED_DECODE_RULE == "tall" and (h.MASKED_DECODE_MIN_M, h.MASKED_DECODE_MAX_M) == (17, 128)
    for m in (17, 64, 128):  # measured: 1.16x the model's pick over the decode shapes
        c = choose_grouped(LAYOUT_MASKED, m, 4096, 7168, 16, 132).config
        assert (c.block_m, c.block_n, c.pair) == (128, 128, 0), (m, c)
    assert choose_grouped(LAYOUT_MASKED, 16, 4096, 7168, 32, 132).config.block_m == 64  # level there: the model


def test_masked_decode_rule_tall(monkeypatch):
    for m, n, k in ((17, 4096, 7168), (64, 4096, 7168), (64, 7168, 2048), (128, 7168, 2048)):
        c = _masked_decode(monkeypatch, "tall", m, n, k)
        assert (c.block_m, c.block_n, c.pair) == (128, 128, 0), (m, n, k, c)


def test_masked_decode_rule_pair_m(monkeypatch):
    c = _masked_decode(monkeypatch, "pair_m", 64)
    assert (c.block_m, c.block_n, c.pair, c.stages) == (64, 128, 2, 8)


def test_masked_decode_rule_leaves_larger_m(monkeypatch):
    assert _masked_decode(monkeypatch, "tall", 256) == _masked_decode(monkeypatch, None, 256)
    assert _masked_decode(monkeypatch, "pair_m", 512) == _masked_decode(monkeypatch, None, 512)


def test_masked_decode_rule_rejects_unknown(monkeypatch):
    with pytest.raises(ValueError, match="MASKED_DECODE_RULE must be None or one of"):
        _masked_decode(monkeypatch, "wide", 64)
