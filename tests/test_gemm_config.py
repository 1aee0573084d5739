"""GemmConfig: validation, shared-memory size and scale placement, and the rendered checks that hold Python
and the kernel to the same answers."""

from __future__ import annotations

import re

import pytest

from dgx import compiler
from dgx.errors import CompileError
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, SHARE_B, GemmConfig

# --- GemmConfig validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(block_m=96, block_n=128, stages=4), "block_m must be 64, 128 or 256; got 96"),
        (dict(block_m=128, block_n=12, stages=4), "block_n must be a multiple of 8"),
        (dict(block_m=128, block_n=264, stages=4), "block_n must be a multiple of 8 in 8..256"),
        (dict(block_m=256, block_n=256, stages=2), "accumulator registers"),
        (dict(block_m=256, block_n=136, stages=2), "needs 204 accumulator registers per thread (max 192)"),
        (dict(block_m=128, block_n=256, stages=3), "needs 256 accumulator registers per thread (max 192)"),
        (dict(block_m=128, block_n=192, stages=3, wgrad=True), "needs 192 accumulator registers per thread (max 160)"),
        (dict(block_m=128, block_n=128, stages=12), "shared memory"),
        (dict(block_m=128, block_n=128, stages=4, pair=3), "pair must be"),
        (dict(block_m=128, block_n=120, stages=4, pair=SHARE_B), "sharing B needs block_n a multiple of 16"),
        (dict(block_m=256, block_n=64, stages=4, defer=True), "deferred promotion needs one m64 slice"),
        (dict(block_m=128, block_n=136, stages=4, defer=True), "with deferred promotion needs 204 accumulator registers per thread (max 192)"),
        (dict(block_m=64, block_n=144, stages=4, defer=True), "with deferred promotion needs 216 accumulator registers per thread (max 208)"),
        (dict(block_m=128, block_n=128, stages=4, wgrad=True, defer=True), "needs 192 accumulator registers per thread (max 168)"),
        (dict(block_m=64, block_n=136, stages=4, wgrad=True, defer=True), "needs 204 accumulator registers per thread (max 192)"),
        (dict(block_m=64, block_n=128, stages=4, split_k=9), "split_k must be an int in 1..8"),
        (dict(block_m=64, block_n=128, stages=4, split_k=0), "split_k must be an int in 1..8"),
        (dict(block_m=64, block_n=128, stages=4, split_k=3), "split_k 3 must divide the 56 k-blocks of K = 7168"),
        (dict(block_m=256, block_n=128, stages=2, split_k=2), "split-K needs one m64 slice per warpgroup"),
        (dict(block_m=128, block_n=128, stages=3, split_k=2, pair=SHARE_B), "split-K clusters do not also share"),
    ],
)
def test_gemm_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GemmConfig(n=4096, k=7168, **kwargs)


def test_split_k_config():
    """Split-K: a cluster of split_k CTAs per tile, named and sized apart from the unsplit kernel (an FP32
    partial tile with padded rows instead of the BF16 output tile, two more barriers); not on the K-grouped
    layout (each group has its own K) and not with a run-time K."""
    from dgx.kernels.fp8_gemm import LAYOUT_K_GROUPED, smem_bytes

    plain = GemmConfig(n=2112, k=7168, block_m=64, block_n=128, stages=6)
    split = GemmConfig(n=2112, k=7168, block_m=64, block_n=128, stages=6, split_k=8)
    assert (plain.cluster, split.cluster) == (1, 8)
    assert split.kernel_name == plain.kernel_name + "_sk8"
    assert split.smem_bytes - plain.smem_bytes == 64 * 136 * 4 - 64 * 128 * 2 + 16
    assert smem_bytes(128, 96, 4, split_k=2) == 128 * 104 * 4 + 4 * (128 * 128 + 96 * 128 + 128 * 4 + 16 + 256) + 16
    assert split.units(64) == plain.units(64) == 17  # one unit per cluster
    assert split.grid(15, 132) == 15 * 8
    assert split.grid(17, 132) == 9 * 8  # 16 clusters fit 132 SMs: two waves of 9
    with pytest.raises(ValueError, match="split-K is not for the K-grouped layout"):
        GemmConfig(n=4096, k=0, block_m=128, block_n=128, stages=4, layout=LAYOUT_K_GROUPED, wgrad=True, split_k=2)


def test_scale_split_compiled_in():
    from dgx.kernels.fp8_gemm import scale_split_compiled_in

    # One B-scale block per tile, or at most four places a tile's columns can switch blocks.
    assert all(scale_split_compiled_in(bn) for bn in (16, 32, 64, 128, 96, 160, 192, 224))
    # 128x144 / 256x80 / 256x88 select the scale per column group at run time.
    assert not any(scale_split_compiled_in(bn) for bn in (144, 80, 88, 112, 136, 56))


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


def test_stream_b_marks_only_b_loads_evict_first(tmp_cache):
    """GemmConfig.stream_b: B's TMA loads (and only those) carry an L2 cache policy; the name says so."""
    import dataclasses

    import pytest

    sass_tools = pytest.importorskip("sass_tools")
    from dgx import jit

    base = GemmConfig(7168, 16384, 64, 64, 10, defer=True)
    streamed = dataclasses.replace(base, stream_b=True)
    assert streamed.kernel_name != base.kernel_name and "_sb" in streamed.kernel_name

    def tma_loads(config):
        listing = sass_tools.disassemble(jit.get_cubin(config.render(), "sm_90a"))
        lines = [line for line in listing.splitlines() if "UTMALDG" in line]
        return sum("desc[" in line for line in lines), len(lines)

    assert tma_loads(base)[0] == 0
    hinted, total = tma_loads(streamed)
    assert hinted == 1 and total == tma_loads(base)[1]  # one B load per stage fill: A and the scales stay plain
    # With B shared by a 2-CTA cluster the hint rides on the multicast load.
    paired = GemmConfig(7168, 2048, 128, 128, 5, pair=2, stream_b=True)
    listing = sass_tools.disassemble(jit.get_cubin(paired.render(), "sm_90a"))
    multicast = [line for line in listing.splitlines() if "UTMALDG" in line and "MULTICAST" in line]
    assert multicast and all("desc[" in line for line in multicast)
