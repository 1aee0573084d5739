"""Core library on the CPU: heuristics, configs, NVRTC compiles with SASS checks, errors, keys, tensors,
and every input check of fp8_gemm_nt (fed TensorViews with fake device pointers: no GPU is touched)."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest

import ptx
from dgx import compiler, gemm, jit
from dgx.errors import CompileError
from dgx.heuristics import candidates, choose_dense, choose_grouped
from dgx.kernels.fp8_gemm import (
    LAYOUT_CONTIGUOUS,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    PAIR_M,
    PAIR_N,
    PAIR_NONE,
    SMEM_LIMIT,
    GemmConfig,
    validate_blocks,
)
from dgx.tensors import TensorView, as_view, require_cuda
from dgx.layout import SfaTma, sfa_tma_layout

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
        assert num_sms >= 2 or c.pair == PAIR_NONE, where  # a 2-CTA cluster needs 2 SMs
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


# --- GemmConfig validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(block_m=96, block_n=128, stages=4), "block_m must be 64, 128 or 256; got 96"),
        (dict(block_m=128, block_n=12, stages=4), "block_n must be a multiple of 8"),
        (dict(block_m=128, block_n=264, stages=4), "block_n must be a multiple of 8 in 8..256"),
        (dict(block_m=256, block_n=256, stages=2), "accumulator registers"),
        (dict(block_m=256, block_n=136, stages=2), "needs 204 accumulator registers per thread (max 192)"),
        (dict(block_m=128, block_n=192, stages=3), "needs 192 accumulator registers per thread (max 160)"),
        (dict(block_m=128, block_n=128, stages=12), "shared memory"),
        (dict(block_m=128, block_n=128, stages=4, pair=3), "pair must be"),
        (dict(block_m=128, block_n=120, stages=4, pair=PAIR_M), "sharing B needs block_n a multiple of 16"),
        (dict(block_m=256, block_n=64, stages=4, defer=True), "deferred promotion needs one m64 slice"),
        (dict(block_m=128, block_n=136, stages=4, defer=True), "with deferred promotion needs 204 accumulator registers per thread (max 192)"),
        (dict(block_m=64, block_n=144, stages=4, defer=True), "with deferred promotion needs 216 accumulator registers per thread (max 208)"),
        (dict(block_m=128, block_n=128, stages=4, wgrad=True, defer=True), "needs 192 accumulator registers per thread (max 168)"),
        (dict(block_m=64, block_n=136, stages=4, wgrad=True, defer=True), "needs 204 accumulator registers per thread (max 192)"),
    ],
)
def test_gemm_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GemmConfig(n=4096, k=7168, **kwargs)


def test_scale_split_compiled_in():
    from dgx.kernels.fp8_gemm import scale_split_compiled_in

    # One B-scale block per tile, or at most four places a tile's columns can switch blocks.
    assert all(scale_split_compiled_in(bn) for bn in (16, 32, 64, 128, 96, 160, 192, 224))
    # 128x144 / 256x80 / 256x88 select the scale per column group at run time.
    assert not any(scale_split_compiled_in(bn) for bn in (144, 80, 88, 112, 136, 56))


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

    # The contiguous anchors: 128x160 sharing B, 4 stages (not the 5 that fit) for 56 and 16 k-blocks.
    for groups, m, n, k in ((4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048)):
        c = choose_grouped(LAYOUT_CONTIGUOUS, groups * m, n, k, groups, 132).config
        assert (c.block_m, c.block_n, c.pair, c.stages) == (128, 160, PAIR_M, 4), c
        assert max_stages(128, 160) == 5
    base = GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5, pair=PAIR_M, layout=LAYOUT_CONTIGUOUS)
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


def test_rendered_kernel_checks_the_shared_memory_size(monkeypatch):
    """The rendered source asserts that the Python size and the kernel's layout agree: a Python size off by
    8 bytes fails to compile."""
    from dgx.kernels import fp8_gemm as family

    config = GemmConfig(n=4096, k=512, block_m=128, block_n=128, stages=4, layout=LAYOUT_CONTIGUOUS)
    src = config.render()
    assert f"::kSmemBytes == {config.smem_bytes}," in src.source
    # One-slice BF16 tiles have a B-scale slot per stage; deferred, 256-row and weight-gradient tiles do not.
    assert config.smem_bytes == 128 * 128 * 2 + 4 * (128 * 128 * 2 + 128 * 4 + 16 + 128)
    deferred = GemmConfig(n=4096, k=7168, block_m=64, block_n=96, stages=8, defer=True)
    assert deferred.smem_bytes == 64 * 96 * 2 + 8 * (64 * 128 + 96 * 128 + 64 * 4 + 16)
    assert f"::kSmemBytes == {deferred.smem_bytes}," in deferred.render().source
    assert family.smem_bytes(256, 128, 3) == 256 * 128 * 2 + 3 * (256 * 128 + 128 * 128 + 256 * 4 + 16)
    real = family.smem_bytes
    monkeypatch.setattr(family, "smem_bytes", lambda *a, **k: real(*a, **k) - 8)
    bad = config.render()
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(bad.source, bad.name, compiler.compile_options("sm_90a"))
    assert "disagrees with the kernel" in info.value.log


def test_rendered_kernel_checks_where_the_b_scales_come_from(monkeypatch):
    """Python encodes the B-scale map only for tiles whose kernel loads the B scales into the stage; the
    rendered source asserts the two agree, so a Python answer that differs fails to compile."""
    from dgx.kernels import fp8_gemm as family

    plain = GemmConfig(n=4096, k=576, block_m=128, block_n=160, stages=4)
    assert plain.b_scales_in_stage
    for config in (
        GemmConfig(n=4096, k=576, block_m=256, block_n=128, stages=3),  # two m64 slices per warpgroup
        GemmConfig(n=4096, k=576, block_m=128, block_n=128, stages=4, defer=True),
        GemmConfig(n=4096, k=576, block_m=128, block_n=64, stages=4, wgrad=True),
    ):
        assert not config.b_scales_in_stage, config
    assert "::kSfbInStage == true," in plain.render().source
    monkeypatch.setattr(family.GemmConfig, "b_scales_in_stage", property(lambda self: False))
    bad = plain.render()
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(bad.source, bad.name, compiler.compile_options("sm_90a"))
    assert "b_scales_in_stage" in info.value.log


def test_weight_gradient_defers_where_the_registers_allow():
    from dgx.heuristics import choose_wgrad

    # The benchmark's weight-gradient shapes: every choice promotes deferred, in 128-row tiles of at most
    # 112 columns (128x120 and wider spill with the second accumulator set and the per-column scales).
    for k in (4096, 8192):
        for m, n in ((7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)):
            c = choose_wgrad(m, n, k, 132).config
            assert c.defer and c.block_m == 128 and c.block_n <= 112, (m, n, k, c)
    for groups in (4, 8):
        c = choose_wgrad(7168, 4096, 4096, 132, LAYOUT_K_GROUPED, groups).config
        assert c.defer and c.layout == LAYOUT_K_GROUPED, c
    # Without room for the second set the weight gradient runs plain.
    assert not validate_blocks(128, 112, defer=True, wgrad=True)
    assert validate_blocks(128, 120, defer=True, wgrad=True)


# --- NVRTC compiles, checked in the SASS ----------------------------------------------------------

REPRESENTATIVE = [
    GemmConfig(n=2112, k=7168, block_m=64, block_n=112, stages=8),  # one math warpgroup, unaligned N tile
    GemmConfig(n=7168, k=2112, block_m=128, block_n=144, stages=5, pair=PAIR_N),  # K % 128 != 0, shares A
    GemmConfig(n=4096, k=7168, block_m=256, block_n=80, stages=4, pair=PAIR_M),  # BLOCK_M 256, shares B
    GemmConfig(n=4096, k=7168, block_m=256, block_n=128, stages=3),  # two m64 slices per warpgroup, 192 accumulators
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5, layout=LAYOUT_CONTIGUOUS),  # compiled-in scale split
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5, pair=PAIR_M, layout=LAYOUT_CONTIGUOUS),  # MoE, B shared
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=4, pair=PAIR_M, layout=LAYOUT_CONTIGUOUS),  # stage rounds
    GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_CONTIGUOUS),  # MoE contiguous
    GemmConfig(n=7168, k=2048, block_m=64, block_n=160, stages=7, layout=LAYOUT_MASKED),  # MoE masked
    GemmConfig(n=2112, k=4096, block_m=128, block_n=128, stages=4, wgrad=True),  # weight gradient, FP32 out
    GemmConfig(n=4096, k=0, block_m=128, block_n=128, stages=4, layout=3, wgrad=True),  # K-grouped weight gradient
    GemmConfig(n=7168, k=7000, block_m=64, block_n=56, stages=11, defer=True),  # deferred, run-time split, K tail
    GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_MASKED, defer=True),  # 192 accumulators
    GemmConfig(n=4096, k=0, block_m=128, block_n=112, stages=5, layout=3, wgrad=True, defer=True),  # run-time K, deferred
]


def _nvdisasm() -> str:
    import sass_tools

    path = sass_tools.nvdisasm_path()
    if path is None:
        pytest.fail("nvdisasm not found: the [test] extra installs nvidia-cuda-nvdisasm")
    return path


@pytest.mark.parametrize("config", REPRESENTATIVE, ids=lambda c: c.kernel_name)
def test_dense_kernel_compiles_without_spills(config, tmp_path):
    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    assert result.cubin[:4] == b"\x7fELF"
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills, f"no ptxas -v report in the log:\n{result.log}"
    assert all(s == ("0", "0") for s in spills), result.log
    assert re.search(r"\b0 bytes stack frame", result.log), result.log
    # ptxas serialises every wgmma (C7514) when it cannot prove an accumulator read waits for its MMA.
    assert "C7514" not in result.log, result.log
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([_nvdisasm(), "--print-code", str(path)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr
    assert src.name in sass.stdout
    assert re.search(r"\bQGMMA\.", sass.stdout), "no QGMMA (FP8 wgmma) in the SASS"
    assert not re.search(r"\b(LDL|STL)(\.|\s)", sass.stdout), "local-memory traffic in the SASS"
    if not config.wgrad:  # the BF16 tile goes to shared memory with stmatrix (FP32 has no stmatrix form)
        assert re.search(r"\bSTSM\.", sass.stdout), "no STSM (stmatrix) in the BF16 epilogue"
    # Only two-slice (256-row) warpgroups probe the next stage's barrier without waiting (the lean k-block)
    # and suspend in their barrier waits instead of spinning.
    probe = re.search(r"\bSYNCS\.PHASECHK\.TRANS64\s+P\d", sass.stdout)
    assert bool(probe) == (config.block_m == 256), "the lean k-block is for 256-row tiles only"
    sleep = re.search(r"\bNANOSLEEP\.SYNCS\b", sass.stdout)
    assert bool(sleep) == (config.block_m == 256), "suspending barrier waits are for 256-row tiles only"
    # Deferred promotion waits for all but the last MMA group (the other accumulator set's); the plain
    # k-block waits for all of them.
    assert bool(re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1\b", sass.stdout)) == config.defer


def test_lean_stage_rounds_where_measured_faster():
    """256x128 tiles run in stage rounds where that was measured faster: no stage of a tile's last round
    unused, or one per >= 32 k-blocks (K = 1536, 7168, 16384); not with two unused per 16 or 4 k-blocks (K =
    2048, 512), a run-time K, or other 256-row widths (slower in rounds), nor one-slice tiles (their own rule)."""
    cases = [  # (n, k, block_m, block_n, stages, d span) -> kLeanRounds
        ((4096, 7168, 256, 128, 3, 128), True),
        ((7168, 16384, 256, 128, 3, 128), True),
        ((24576, 1536, 256, 128, 3, 128), True),
        ((7168, 2048, 256, 128, 3, 128), False),
        ((32768, 512, 256, 128, 3, 128), False),
        ((4096, 0, 256, 128, 3, 128), False),
        ((2112, 7168, 256, 64, 4, 128), False),
        ((2112, 7168, 256, 96, 3, 64), False),
        ((4096, 7168, 128, 128, 3, 128), False),
    ]
    lines = ['#include "fp8_gemm.cuh"']
    for (n, k, bm, bn, stages, span), expected in cases:
        traits = f"dgx::Fp8GemmTraits<{n}, {k}, {bm}, {bn}, {stages}, 16, {span}, 0, false, false>"
        lines.append(f'static_assert({traits}::kLeanRounds == {str(expected).lower()}, "{n}x{k} {bm}x{bn}s{stages}");')
        # BF16 tiles in lean rounds over >= 32 k-blocks take their A scales multiplied by the B scale from the
        # producer warpgroup (24576x1536: 12 k-blocks, slower that way).
        sfa_times_sfb = expected and k >= 32 * 128
        assert GemmConfig(n, k, bm, bn, stages).sfa_times_sfb == sfa_times_sfb, (n, k, bm, bn, stages)
        lines.append(f"static_assert({traits}::kSfaTimesSfb == {str(sfa_times_sfb).lower()});")
    compiler.compile_cubin("\n".join(lines) + "\n", "dgx_lean_rounds_probe", compiler.compile_options("sm_90a"))
    # The weight gradient's 256x128 tiles run lean rounds too, but scale B per column in the math warps.
    from dgx.kernels.fp8_gemm import sfa_times_sfb

    assert not sfa_times_sfb(256, 128, 7168, 2, wgrad=True)


def test_rendered_kernel_checks_who_multiplies_the_scales(monkeypatch):
    """The rendered source asserts that Python and the kernel agree on which tiles take their A scales already
    multiplied by the B scale (their stage bytes and full-barrier arrivals differ), so a differing Python answer
    fails to compile."""
    from dgx.kernels import fp8_gemm as family

    lean = GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3)
    assert lean.sfa_times_sfb and "::kSfaTimesSfb == true," in lean.render().source
    monkeypatch.setattr(family.GemmConfig, "sfa_times_sfb", property(lambda self: False))
    bad = lean.render()
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(bad.source, bad.name, compiler.compile_options("sm_90a"))
    assert "sfa_times_sfb" in info.value.log


def test_compile_error_carries_log_and_source(monkeypatch, tmp_path):
    monkeypatch.setenv("DGX_JIT_DUMP_DIR", str(tmp_path / "dump"))
    source = 'extern "C" __global__ void dgx_broken() { int x = undefined_name; }\n'
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(source, "dgx_broken", compiler.compile_options("sm_90a"))
    err = info.value
    assert err.kernel == "dgx_broken"
    assert "undefined_name" in err.log and "error" in err.log.lower()
    saved = Path(err.source_path)
    assert saved.is_file() and saved.read_text() == source
    assert saved.parent == tmp_path / "dump"
    assert str(saved) in str(err)
    for name in ptx.headers():  # the headers are saved beside it, so the repro is complete
        assert (saved.parent / name).is_file()


def test_compile_options():
    opts = compiler.compile_options("sm_90a", ("--ptxas-options=-v",))
    assert opts[0] == "--gpu-architecture=sm_90a" and opts[-1] == "--ptxas-options=-v"
    with pytest.raises(ValueError, match="sm_90a"):
        compiler.compile_options("hopper")


# --- cache keys -----------------------------------------------------------------------------------


def test_key_stability(monkeypatch):
    src = REPRESENTATIVE[0].render()
    key = jit.kernel_key(src, "sm_90a")
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert jit.kernel_key(REPRESENTATIVE[0].render(), "sm_90a") == key
    assert jit.kernel_key(src, "sm_90") != key
    assert jit.kernel_key(REPRESENTATIVE[1].render(), "sm_90a") != key

    original = ptx.headers()
    name = sorted(original)[0]
    changed = dict(original)
    content = bytearray(changed[name])
    content[len(content) // 2] ^= 0x01  # one bit of one byte of one header
    changed[name] = bytes(content)
    monkeypatch.setattr(ptx, "headers", lambda: dict(changed))
    assert jit.kernel_key(src, "sm_90a") != key
    monkeypatch.setattr(ptx, "headers", lambda: dict(original))
    assert jit.kernel_key(src, "sm_90a") == key

    monkeypatch.setenv("DGX_JIT_LINEINFO", "1")  # a compile option is part of the key
    assert jit.kernel_key(src, "sm_90a") != key


def test_key_inputs_hold_nothing_machine_specific():
    inputs = jit.key_inputs(REPRESENTATIVE[0].render(), "sm_90a")
    here = str(Path(__file__).resolve().parents[1])

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield str(k)
                yield from strings(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from strings(v)

    for s in strings(inputs):
        assert here not in s and str(Path.home()) not in s, s
    assert all(not Path(name).is_absolute() for name in inputs["headers"])


# --- tensors --------------------------------------------------------------------------------------


def test_torch_cpu_views():
    torch = pytest.importorskip("torch")
    cases = [
        (torch.float8_e4m3fn, "float8_e4m3fn"),
        (torch.bfloat16, "bfloat16"),
        (torch.float32, "float32"),
        (torch.int32, "int32"),
    ]
    for tdtype, name in cases:
        t = torch.zeros(6, 8, dtype=torch.float32).to(tdtype)
        v = as_view(t, "t")
        assert (v.ptr, v.shape, v.strides, v.dtype) == (t.data_ptr(), (6, 8), (8, 1), name)
        assert (v.device, v.device_kind) == (-1, "cpu")
    t = torch.zeros(16, 32, dtype=torch.float32).t()[2:]  # a strided, offset view
    v = as_view(t, "t")
    assert v.shape == (30, 16) and v.strides == (1, 32) and v.ptr == t.data_ptr()
    with pytest.raises(TypeError, match="t: expected a tensor of dtype .* got torch.float16"):
        as_view(torch.zeros(2, dtype=torch.float16), "t")
    with pytest.raises(TypeError, match="x: expected a tensor .* got list"):
        as_view([1, 2], "x")


def test_dlpack_path_matches_torch_fast_path():
    torch = pytest.importorskip("torch")

    class OnlyDlpack:  # not a torch tensor: goes through __dlpack__ and the DLPack structs
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, *args, **kwargs):
            return self.t.__dlpack__(*args, **kwargs)

    for t in (torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, 1:], torch.zeros(3, 5, dtype=torch.bfloat16)):
        fast, generic = as_view(t, "t"), as_view(OnlyDlpack(t), "t")
        assert (generic.ptr, generic.shape, generic.strides, generic.dtype) == (
            fast.ptr,
            fast.shape,
            fast.strides,
            fast.dtype,
        )
        assert generic.device_kind == "cpu"


def test_cpu_tensor_refused_by_require_cuda():
    torch = pytest.importorskip("torch")
    view = as_view(torch.zeros(4, 4), "A")
    with pytest.raises(ValueError, match="A: expected a tensor in CUDA device memory; got one on cpu"):
        require_cuda(view, "A")
    gpu_view = TensorView(0x1000, (4, 4), (4, 1), "float32", 1)
    with pytest.raises(ValueError, match=r"A: expected a tensor on cuda:0 like the others; got cuda:1"):
        require_cuda(gpu_view, "A", 0)


# --- fp8_gemm_nt input checks (no GPU) ------------------------------------------------------------

M, N, K = 256, 512, 1024
BASE = 0x7F0000000000


def _view(shape, dtype, strides=None, ptr=BASE, device=0):
    if strides is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    return TensorView(ptr, tuple(shape), tuple(strides), dtype, device)


def _inputs(**over):
    views = {
        "A": _view((M, K), "float8_e4m3fn", ptr=BASE),
        "SFA": _view((M, K // 128), "float32", strides=(1, M), ptr=BASE + 0x100000),
        "B": _view((N, K), "float8_e4m3fn", ptr=BASE + 0x200000),
        "SFB": _view((N // 128, K // 128), "float32", ptr=BASE + 0x300000),
        "d": _view((M, N), "bfloat16", ptr=BASE + 0x400000),
    }
    views.update(over)
    return (views["A"], views["SFA"]), (views["B"], views["SFB"]), views["d"]


class Launched(Exception):
    pass


@pytest.fixture
def no_launch(monkeypatch):
    """Anything past the checks (planning, launching) raises Launched: valid inputs reach it, bad ones not."""

    def plan(*args, **kwargs):
        raise Launched()

    monkeypatch.setattr(gemm, "_plan", plan)
    monkeypatch.setattr(gemm, "get_num_sms", lambda device=0: 132)


def test_valid_inputs_pass_every_check(no_launch):
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(*_inputs())
    # A wider M-major row stride (a slice of a larger buffer) is read as is too.
    sfa_mn_major = _view((M, K // 128), "float32", strides=(1, M + 4), ptr=BASE + 0x100000)
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(*_inputs(SFA=sfa_mn_major))


@pytest.mark.parametrize(
    "over, error, message",
    [
        (dict(A=_view((M, K), "bfloat16")), TypeError, "A: expected dtype float8_e4m3fn; got bfloat16"),
        (dict(B=_view((N, K), "float32", ptr=BASE + 0x200000)), TypeError, "B: expected dtype float8_e4m3fn"),
        (dict(SFA=_view((M, K // 128), "bfloat16", ptr=BASE + 0x100000)), TypeError, "SFA: expected dtype float32"),
        (dict(d=_view((M, N), "int32", ptr=BASE + 0x400000)), TypeError, "d: expected dtype bfloat16"),
        (dict(A=_view((1, M, K), "float8_e4m3fn")), ValueError, "A: expected a 2-D tensor"),
        (dict(B=_view((N, K + 128), "float8_e4m3fn", ptr=BASE + 0x200000)), ValueError, f"B: expected K = {K}"),
        (dict(d=_view((M, N + 8), "bfloat16", ptr=BASE + 0x400000)), ValueError, f"d: expected shape ({M}, {N})"),
        (dict(SFA=_view((M, K // 64), "float32", ptr=BASE + 0x100000)), ValueError, "SFA: expected shape"),
        (dict(SFB=_view((N // 128, K // 64), "float32", ptr=BASE + 0x300000)), ValueError, "SFB: expected shape"),
        (dict(A=_view((M, K), "float8_e4m3fn", strides=(K + 8, 1))), ValueError, "A: TMA needs row strides that are a multiple of 16 bytes"),
        (dict(A=_view((M, K), "float8_e4m3fn", strides=(1, M))), ValueError, "A: expected contiguous rows"),
        (dict(A=_view((M, K), "float8_e4m3fn", ptr=BASE + 8)), ValueError, "A: TMA needs a 16-byte aligned base address"),
        (dict(d=_view((M, N), "bfloat16", ptr=BASE + 0x400004)), ValueError, "d: TMA needs a 16-byte aligned base address"),
        (dict(SFA=_view((M, K // 128), "float32", ptr=BASE + 0x100002)), ValueError, "SFA: expected an address aligned to 4 bytes"),
        (dict(SFB=_view((N // 128, K // 128), "float32", strides=(1, N // 128), ptr=BASE + 0x300000)), ValueError, "SFB: expected a contiguous row-major tensor"),
        (dict(B=_view((N, K), "float8_e4m3fn", ptr=BASE + 0x200000, device=1)), ValueError, "B: expected a tensor on cuda:0 like the others; got cuda:1"),
    ],
)
def test_input_check(no_launch, over, error, message):
    with pytest.raises(error, match=re.escape(message)):
        gemm.fp8_gemm_nt(*_inputs(**over))


def test_n_must_be_a_multiple_of_8(no_launch):
    n = 500
    a, _, _ = _inputs()
    b = (_view((n, K), "float8_e4m3fn", ptr=BASE + 0x200000), _view((4, K // 128), "float32", ptr=BASE + 0x300000))
    d = _view((M, n), "bfloat16", ptr=BASE + 0x400000)
    with pytest.raises(ValueError, match=r"N must be a multiple of 8.*got N = 500"):
        gemm.fp8_gemm_nt(a, b, d)


def test_pairs_and_c(no_launch):
    (A, SFA), b, d = _inputs()
    with pytest.raises(TypeError, match="a: expected a \\(tensor, scales\\) pair; got TensorView"):
        gemm.fp8_gemm_nt(A, b, d)
    with pytest.raises(ValueError, match="c"):
        gemm.fp8_gemm_nt((A, SFA), b, d, c=d)


def test_cpu_tensor_is_refused(no_launch):
    torch = pytest.importorskip("torch")
    a_cpu = torch.zeros(M, K, dtype=torch.float32).to(torch.float8_e4m3fn)
    (_, SFA), b, d = _inputs()
    with pytest.raises(ValueError, match="A: expected a tensor in CUDA device memory; got one on cpu"):
        gemm.fp8_gemm_nt((a_cpu, SFA), b, d)
    (A, _), b, d = _inputs()
    with pytest.raises(ValueError, match="d: expected a tensor in CUDA device memory; got one on cpu"):
        gemm.fp8_gemm_nt((A, SFA), b, torch.zeros(M, N, dtype=torch.bfloat16))


def test_m_zero_returns_without_touching_the_gpu(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("M = 0 must not plan, compile or launch anything")

    monkeypatch.setattr(gemm, "_plan", forbidden)
    monkeypatch.setattr(gemm, "get_num_sms", forbidden)
    monkeypatch.setattr(jit, "get_kernel", forbidden)
    a = (_view((0, K), "float8_e4m3fn"), _view((0, K // 128), "float32", ptr=BASE + 0x100000))
    _, b, _ = _inputs()
    d = _view((0, N), "bfloat16", ptr=BASE + 0x400000)
    assert gemm.fp8_gemm_nt(a, b, d) is None


# --- SFA layouts read by TMA -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, strides, ptr, expect",
    [
        # TMA-aligned M-major (DeepGEMM's layout): a row of M floats per k-block, rows 16-byte aligned.
        ((250, 56), (1, 252), BASE, SfaTma(250, 56, 1008)),
        # One k-block (K <= 128): any [M, 1] with unit M stride; the row stride is never used.
        ((300, 1), (1, 1), BASE, SfaTma(300, 1, 1200)),
        # One row, M-major: any 16-byte multiple along K works.
        ((1, 5), (7, 4), BASE, SfaTma(1, 5, 16)),
        # Row-major: converted.
        ((256, 56), (56, 1), BASE, None),
        # M-major with an unaligned row stride: converted.
        ((250, 56), (1, 250), BASE, None),
        # Rows that overlap (stride below M): converted.
        ((250, 56), (1, 248), BASE, None),
        # Base address not 16-byte aligned: converted.
        ((256, 56), (1, 256), BASE + 4, None),
    ],
)
def test_sfa_tma_layout(shape, strides, ptr, expect):
    assert sfa_tma_layout(TensorView(ptr, shape, strides, "float32", 0)) == expect


def test_unreadable_sfa_layout_of_non_torch_tensor_raises_before_planning(no_launch):
    odd = _view((M, K // 128), "float32", strides=(1, M + 1), ptr=BASE + 0x100000)
    with pytest.raises(ValueError, match="SFA: expected the TMA-aligned MN-major layout"):
        gemm.fp8_gemm_nt(*_inputs(SFA=odd))


# --- per-call fast path for torch tensors ---------------------------------------------------------


def test_torch_fast_path_reuses_only_identical_calls(monkeypatch):
    """A repeated call with the same tensors (pointer, shape, strides, dtype, device) skips checks and
    planning; any difference goes through the full path again."""
    torch = pytest.importorskip("torch")
    from dgx import checks, device, runtime, tensors

    monkeypatch.setattr(checks, "require_cuda", lambda *a, **k: None)
    monkeypatch.setattr(tensors, "require_cuda", lambda *a, **k: None)
    launches, plans = [], []

    class FakeLauncher:
        def launch(self, stream, pack):
            launches.append(pack)

    class FakePlan:
        def __init__(self, config):
            self.config, self.launcher = config, FakeLauncher()

    def fake_plan(m, n, k, dev, sms, config=None):
        plans.append((m, n, k))
        return FakePlan(choose_dense(m, n, k, 132).config)

    monkeypatch.setattr(gemm, "_plan", fake_plan)
    monkeypatch.setattr(gemm, "get_num_sms", lambda d=0: 132)
    monkeypatch.setattr(gemm, "resolve_stream", lambda s, d: 0)
    monkeypatch.setattr(runtime, "encode_tensor_map_2d", lambda *a, **k: object())
    monkeypatch.setattr(runtime, "ParamPack", lambda items: object())
    monkeypatch.setattr(gemm, "_fast", {})
    monkeypatch.setattr(gemm, "_params", {})

    m, n, k = 64, 256, 512
    A = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    sfa = torch.empty(k // 128, m).t()
    B = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    sfb = torch.empty(n // 128, k // 128)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    assert len(plans) == 1 and len(launches) == 2 and launches[0] is launches[1]
    # Another output buffer: full path, new parameters.
    d2 = torch.empty(m, n, dtype=torch.bfloat16)
    gemm.fp8_gemm_nt((A, sfa), (B, sfb), d2)
    assert len(plans) == 2 and launches[2] is not launches[0]
    # Same storage, another dtype: the checks run again and reject it.
    with pytest.raises(TypeError, match="d: expected .*bfloat16.*got torch.float16"):
        gemm.fp8_gemm_nt((A, sfa), (B, sfb), d.view(torch.float16))
    # Same pointer, another shape (a narrower view of A's rows): checked again, and rejected.
    with pytest.raises(ValueError, match="B: expected K"):
        gemm.fp8_gemm_nt((A[:, :256], sfa[:, :2]), (B, sfb), d)
    # A new SM count drops the cached launches.
    monkeypatch.setattr(device, "generation", device.generation + 1)
    gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    assert len(plans) == 3


# --- grouped GEMMs: heuristics and input checks (no GPU) -------------------------------------------


def test_choose_grouped_respects_alignment_and_layout():
    from dgx.heuristics import CONTIGUOUS_ALIGNMENT

    for layout in (LAYOUT_CONTIGUOUS, LAYOUT_MASKED):
        for m in (1, 64, 200, 4096, 32768):
            c = choose_grouped(layout, m, 4096, 7168, 8, 132).config
            assert c.layout == layout and CONTIGUOUS_ALIGNMENT % c.block_m == 0
            # Only large contiguous problems (many tiles per SM) share B along M, with 128-row tiles.
            shares = layout == LAYOUT_CONTIGUOUS and m >= 4096
            assert c.pair == (PAIR_M if shares else PAIR_NONE) and (not shares or c.block_m == 128), (layout, m, c)
    # The contiguous anchors: 128x160 tiles sharing B (measured: 1-7% faster than unshared).
    for m, n, k in ((32768, 4096, 7168), (32768, 7168, 2048)):
        c = choose_grouped(LAYOUT_CONTIGUOUS, m, n, k, 4, 132).config
        assert (c.block_m, c.block_n, c.pair) == (128, 160, PAIR_M)
    # Masked decode with few rows per group takes 64-row blocks; many tiles fill the SMs with 128.
    assert choose_grouped(LAYOUT_MASKED, 16, 4096, 7168, 4, 132).config.block_m == 64
    with pytest.raises(ValueError, match="layout must be contiguous"):
        choose_grouped(0, 64, 256, 256, 1, 132)
    with pytest.raises(ValueError, match="positive"):
        choose_grouped(LAYOUT_MASKED, 64, 256, 256, 0, 132)


def test_grouped_config_pairs_only_for_contiguous():
    with pytest.raises(ValueError, match="multicast pairs are for the dense and contiguous layouts only"):
        GemmConfig(n=512, k=512, block_m=128, block_n=128, stages=4, pair=PAIR_N, layout=LAYOUT_MASKED)
    for pair in (PAIR_N, PAIR_M):
        c = GemmConfig(n=512, k=512, block_m=128, block_n=128, stages=4, pair=pair, layout=LAYOUT_CONTIGUOUS)
        assert c.cluster == 2 and c.kernel_name.endswith(f"_p{pair}")


G, GN = 4, 256


def _grouped_inputs(kind, **over):
    if kind == "contiguous":
        views = {
            "A": _view((M, K), "float8_e4m3fn", ptr=BASE),
            "SFA": _view((M, K // 128), "float32", strides=(1, M), ptr=BASE + 0x100000),
            "B": _view((G, GN, K), "float8_e4m3fn", ptr=BASE + 0x200000),
            "SFB": _view((G, GN // 128, K // 128), "float32", ptr=BASE + 0x300000),
            "d": _view((M, GN), "bfloat16", ptr=BASE + 0x400000),
            "idx": _view((M,), "int32", ptr=BASE + 0x500000),
        }
    else:
        views = {
            "A": _view((G, M, K), "float8_e4m3fn", ptr=BASE),
            "SFA": _view((G, M, K // 128), "float32", strides=(M * K // 128, 1, M), ptr=BASE + 0x100000),
            "B": _view((G, GN, K), "float8_e4m3fn", ptr=BASE + 0x200000),
            "SFB": _view((G, GN // 128, K // 128), "float32", ptr=BASE + 0x300000),
            "d": _view((G, M, GN), "bfloat16", ptr=BASE + 0x400000),
            "idx": _view((G,), "int32", ptr=BASE + 0x500000),
        }
    views.update(over)
    return (views["A"], views["SFA"]), (views["B"], views["SFB"]), views["d"], views["idx"]


@pytest.fixture
def no_grouped_launch(monkeypatch):
    from dgx import grouped

    def plan(*args, **kwargs):
        raise Launched()

    monkeypatch.setattr(grouped, "_grouped_plan", plan)


def _call(kind, args):
    from dgx import grouped

    if kind == "contiguous":
        grouped.m_grouped_fp8_gemm_nt_contiguous(*args)
    else:
        grouped.m_grouped_fp8_gemm_nt_masked(*args, 64)


@pytest.mark.parametrize("kind", ["contiguous", "masked"])
def test_grouped_valid_inputs_pass_every_check(no_grouped_launch, kind):
    with pytest.raises(Launched):
        _call(kind, _grouped_inputs(kind))


@pytest.mark.parametrize(
    "kind, over, error, message",
    [
        ("contiguous", dict(idx=_view((M,), "float32", ptr=BASE + 0x500000)), TypeError, "m_indices: expected dtype int32"),
        ("contiguous", dict(idx=_view((M - 1,), "int32", ptr=BASE + 0x500000)), ValueError, "m_indices: expected shape"),
        ("contiguous", dict(B=_view((GN, K), "float8_e4m3fn", ptr=BASE + 0x200000)), ValueError, "B: expected a 3-D tensor"),
        ("contiguous", dict(B=_view((0, GN, K), "float8_e4m3fn", ptr=BASE + 0x200000)), ValueError, "B: expected at least one group"),
        ("contiguous", dict(SFB=_view((G, GN // 128, K // 64), "float32", ptr=BASE + 0x300000)), ValueError, "SFB: expected shape"),
        ("contiguous", dict(B=_view((G, GN, K), "float8_e4m3fn", strides=(GN * K * 2, K, 1), ptr=BASE + 0x200000)),
         ValueError, "B: expected the groups stored one after another"),
        ("contiguous", dict(A=_view((M - 64, K), "float8_e4m3fn"), SFA=_view((M - 64, K // 128), "float32", strides=(1, M), ptr=BASE + 0x100000),
                            d=_view((M - 64, GN), "bfloat16", ptr=BASE + 0x400000), idx=_view((M - 64,), "int32", ptr=BASE + 0x500000)),
         ValueError, "M_sum must be a multiple of the contiguous-layout alignment 128"),
        ("contiguous", dict(d=_view((M, GN + 8), "bfloat16", ptr=BASE + 0x400000)), ValueError, "d: expected shape"),
        ("masked", dict(idx=_view((G + 1,), "int32", ptr=BASE + 0x500000)), ValueError, "masked_m: expected shape"),
        ("masked", dict(A=_view((G + 1, M, K), "float8_e4m3fn")), ValueError, "A: expected 4 groups like B"),
        ("masked", dict(d=_view((G, M, GN), "bfloat16", strides=(M * GN + 8, GN, 1), ptr=BASE + 0x400000)),
         ValueError, "d: expected the groups stored one after another"),
        ("masked", dict(A=_view((M, K), "float8_e4m3fn")), ValueError, "A: expected a 3-D tensor"),
        ("masked", dict(idx=_view((G,), "int32", ptr=BASE + 0x500000, device=1)), ValueError, "masked_m: expected a tensor on cuda:0"),
    ],
)
def test_grouped_input_check(no_grouped_launch, kind, over, error, message):
    with pytest.raises(error, match=re.escape(message)):
        _call(kind, _grouped_inputs(kind, **over))


def test_masked_expected_m_must_be_positive(no_grouped_launch):
    from dgx import grouped

    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="expected_m: expected a positive int"):
            grouped.m_grouped_fp8_gemm_nt_masked(*_grouped_inputs("masked"), bad)
