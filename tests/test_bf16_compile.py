"""NVRTC compiles of representative BF16 GEMM kernels for sm_90a (no GPU), checked in ptxas' report and the SASS:
HGMMA with the transpose flags of the form, no spills or local memory, and the TMA traffic each variant needs."""

from __future__ import annotations

import re
import subprocess

import pytest

from dgx import compiler
from dgx.kernels.bf16_gemm import (
    LAYOUT_CONTIGUOUS,
    LAYOUT_CONTIGUOUS_PSUM,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    SHARE_A,
    SHARE_B,
    Bf16GemmConfig,
)

C = Bf16GemmConfig
REPRESENTATIVE = [
    C(n=4096, k=7168, block_m=128, block_n=256, stages=3),  # nt, the large-shape tile: 128 accumulators a thread
    C(n=4096, k=7168, block_m=256, block_n=144, stages=3, pair=SHARE_A),  # two m64 slices per warpgroup, A shared
    C(n=7168, k=7000, block_m=128, block_n=176, stages=4, pair=SHARE_B),  # B shared along M, a K tail
    C(n=2112, k=7168, block_m=64, block_n=16, stages=16, pair=SHARE_A),  # decode: one math warpgroup, A shared
    C(n=4096, k=7168, block_m=128, block_n=192, stages=4, major_b="mn"),  # nn: N-major B through a 3-D map
    C(n=4096, k=7168, block_m=128, block_n=96, stages=6, major_b="mn", pair=SHARE_A),  # nn, 64-byte atoms of B
    C(n=4096, k=7168, block_m=256, block_n=128, stages=3, major_a="mn", major_b="mn"),  # tn
    C(n=4096, k=7168, block_m=128, block_n=128, stages=4, major_a="mn", pair=SHARE_A),  # tt, M-major A shared
    C(n=256, k=7168, block_m=128, block_n=128, stages=4, out_dtype="float32"),  # FP32 D
    C(n=576, k=7168, block_m=64, block_n=64, stages=10, out_dtype="float32", with_c=True),  # FP32 D += tile
    C(n=2112, k=7168, block_m=128, block_n=176, stages=4, with_c=True),  # BF16 D += tile
    C(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_MASKED),  # masked
    C(n=4096, k=7168, block_m=128, block_n=160, stages=4, layout=LAYOUT_CONTIGUOUS, pair=SHARE_B),  # contiguous
    C(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_CONTIGUOUS, major_b="mn"),  # contiguous nn
    C(n=4096, k=7168, block_m=64, block_n=128, stages=8, layout=LAYOUT_CONTIGUOUS_PSUM),  # prefix sums
    C(n=7168, k=0, block_m=128, block_n=128, stages=4, layout=LAYOUT_K_GROUPED, major_a="mn", major_b="mn",
      out_dtype="float32", with_c=True),  # K-grouped weight gradient
    C(n=2112, k=7168, block_m=64, block_n=16, stages=8, pair=SHARE_A, k_atoms=2),  # decode, 128 of K per k-block
    C(n=4096, k=7000, block_m=64, block_n=96, stages=2, major_a="mn", major_b="mn", k_atoms=4),  # tn, 256 of K
    C(n=4096, k=0, block_m=64, block_n=128, stages=4, layout=LAYOUT_K_GROUPED, major_a="mn", major_b="mn",
      out_dtype="float32", with_c=True, k_atoms=2),  # K-grouped, one k-block per 128 of a group's K
]


def _nvdisasm() -> str:
    from dgx import sass_tools

    path = sass_tools.nvdisasm_path()
    if path is None:
        pytest.fail("nvdisasm not found: the [test] extra installs nvidia-cuda-nvdisasm")
    return path


@pytest.mark.parametrize("config", REPRESENTATIVE, ids=lambda c: c.kernel_name)
def test_bf16_kernel_compiles_without_spills(config, tmp_path):
    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    assert result.cubin[:4] == b"\x7fELF"
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert re.search(r"\b0 bytes stack frame", result.log), result.log
    assert "C7514" not in result.log, result.log  # ptxas did not serialise the wgmma
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([_nvdisasm(), "--print-code", str(path)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr
    text = sass.stdout
    assert src.name in text
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text), "local-memory traffic in the SASS"
    # Every MMA is a BF16 HGMMA of the tile's width, with the transpose flags of the operands' major-ness.
    mmas = re.findall(rf"HGMMA\.64x{config.block_n}x16\.F32\.BF16 [^;]*", text)
    assert mmas, "no BF16 HGMMA of the tile's width in the SASS"
    slices = 2 if config.block_m == 256 else 1
    assert len(mmas) == 4 * config.k_atoms * slices, f"{len(mmas)} HGMMA in the k-loop (expected 4 per K atom and slice)"
    for mma in mmas:
        assert (".tnspA" in mma) == (config.major_a == "mn") and (".tnspB" in mma) == (config.major_b == "mn"), mma
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in text, "the k-loop keeps one MMA group in flight"
    # Loads: N-major B through a 3-D map, a shared operand multicast.
    assert ("UTMALDG.3D" in text) == (config.major_b == "mn")
    assert ("UTMALDG.2D.MULTICAST" in text) == (config.pair != 0)
    # Stores: BF16 through stmatrix, FP32 with 64-bit shared stores; C added by a TMA reduce-add; the K-grouped D
    # through a 3-D map (clipped at each group's rows).
    if config.out_dtype == "bfloat16":
        assert re.search(r"\bSTSM\.", text), "no STSM (stmatrix) in the BF16 epilogue"
    else:
        assert re.search(r"\bSTS\.64\b", text)
    dims = "3D" if config.layout == LAYOUT_K_GROUPED else "2D"
    if config.with_c:
        assert f"UTMAREDG.{dims}.ADD" in text and "UTMASTG" not in text
    else:
        assert f"UTMASTG.{dims}" in text and "UTMAREDG" not in text
    if config.layout == LAYOUT_MASKED:  # partial blocks stored row by row from the registers
        assert re.search(r"\bSTG\.E\b", text)
    # Register reallocation where two math warpgroups share the SM with the producer.
    assert ("USETMAXREG" in text) == (config.block_m > 64)


SPLIT = [
    C(n=2112, k=7168, block_m=64, block_n=144, stages=6, split_k=8),  # decode: clusters of 8 over K
    C(n=7168, k=16384, block_m=128, block_n=112, stages=5, split_k=2),  # two math warpgroups
    C(n=4096, k=7168, block_m=128, block_n=144, stages=4, split_k=4, out_dtype="float32", with_c=True),  # D = C + sum
    C(n=4096, k=7100, block_m=64, block_n=64, stages=6, split_k=4, major_a="mn", major_b="mn", k_atoms=2),  # tn, tail
    C(n=4096, k=7168, block_m=128, block_n=128, stages=4, split_k=2, layout=LAYOUT_MASKED),  # masked
]


@pytest.mark.parametrize("config", SPLIT, ids=lambda c: c.kernel_name)
def test_split_k_kernel_compiles_and_sums_through_the_cluster(config, tmp_path):
    """Split-K kernels: the k-loop as unsplit, then no staged tile and no TMA store: each CTA reads its share of every
    peer's partial over distributed shared memory (one 16-byte load per peer), publishes twice per tile (a relaxed
    arrival on each peer's barrier), and stores its sums straight to D (C read first when accumulating)."""
    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert re.search(r"\b0 bytes stack frame", result.log), result.log
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([_nvdisasm(), "--print-code", str(path)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr
    text = sass.stdout
    mmas = re.findall(rf"HGMMA\.64x{config.block_n}x16\.F32\.BF16 [^;]*", text)
    assert len(mmas) == 4 * config.k_atoms, f"{len(mmas)} HGMMA in the k-loop"
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text)
    assert not re.search(r"\b(STSM|UTMASTG|UTMAREDG)\b", text), "a split-K tile is summed, not staged and stored"
    assert len(re.findall(r"\bLD\.E\.128\b", text)) == config.split_k, "one DSMEM load per peer in the sum loop"
    assert len(re.findall(r"SYNCS\.ARRIVE\.TRANS64\.RED\.A1T0", text)) == 2 * config.split_k
    store = "STG.E.128" if config.out_dtype == "float32" else "STG.E.64"
    assert re.search(rf"\b{re.escape(store)}\b", text)
    assert bool(re.search(r"\bLDG\.E\.128\b", text)) == config.with_c
    assert ("USETMAXREG" in text) == (config.block_m > 64)


PINGPONG = [
    C(n=4096, k=7168, block_m=64, block_n=256, stages=4, schedule="pingpong"),  # 128 accumulators, one m64 slice
    C(n=32768, k=512, block_m=128, block_n=160, stages=4, pair=SHARE_B, schedule="pingpong"),  # two slices, B shared
    C(n=4096, k=7168, block_m=64, block_n=128, stages=6, major_a="mn", major_b="mn", out_dtype="float32",
      with_c=True, schedule="pingpong"),  # tn, FP32 D += tile
    C(n=4096, k=7168, block_m=64, block_n=128, stages=8, layout=LAYOUT_MASKED, schedule="pingpong"),  # masked
    C(n=7168, k=0, block_m=64, block_n=128, stages=6, layout=LAYOUT_K_GROUPED, major_a="mn", major_b="mn",
      out_dtype="float32", with_c=True, schedule="pingpong"),  # K-grouped: a run-time k-block count per tile
]


@pytest.mark.parametrize("config", PINGPONG, ids=lambda c: c.kernel_name)
def test_pingpong_kernel_compiles_with_its_turns(config, tmp_path):
    """Ping-pong kernels: the cooperative k-loop (4 HGMMA per K atom and m64 slice, one group in flight) in each
    warpgroup's turn, the turns handed over by bar.arrive / bar.sync of both math warpgroups (256 threads) - warpgroup
    1's up-front arrival, each turn's hand-over, each turn's wait and the last pending arrival's - and the epilogue's
    per-warpgroup barriers (128 threads); register reallocation, no spills."""
    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert re.search(r"\b0 bytes stack frame", result.log), result.log
    assert "C7514" not in result.log, result.log
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([_nvdisasm(), "--print-code", str(path)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr
    text = sass.stdout
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text), "local-memory traffic in the SASS"
    mmas = re.findall(rf"HGMMA\.64x{config.block_n}x16\.F32\.BF16 [^;]*", text)
    assert len(mmas) == 4 * config.k_atoms * (config.block_m // 64), f"{len(mmas)} HGMMA in the k-loop"
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in text, "the k-loop keeps one MMA group in flight"
    assert len(re.findall(r"\bBAR\.ARV [^;]*, 0x100\b", text)) == 2, "the up-front arrival and the hand-over"
    assert len(re.findall(r"\bBAR\.SYNC\.DEFER_BLOCKING [^;]*, 0x100\b", text)) == 2, "each turn's and the last wait"
    assert len(re.findall(r"\bBAR\.SYNC\.DEFER_BLOCKING [^;]*, 0x80\b", text)) >= 2, "the epilogue's barriers"
    assert "USETMAXREG" in text
    assert ("UTMAREDG" in text) == config.with_c and ("UTMASTG" in text) != config.with_c
