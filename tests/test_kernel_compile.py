"""NVRTC compiles of representative kernels for sm_90a, checked in the SASS (no spills, QGMMA), compile
errors and options."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from dgx import ptx
from dgx import compiler
from dgx.errors import CompileError
from dgx.kernels.fp8_gemm import LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_MASKED, SHARE_A, SHARE_B, GemmConfig
from dgx.kernels.ue8m0 import Ue8m0UnpackConfig

# --- NVRTC compiles, checked in the SASS ----------------------------------------------------------

REPRESENTATIVE = [
    GemmConfig(n=2112, k=7168, block_m=64, block_n=112, stages=8),  # one math warpgroup, unaligned N tile
    GemmConfig(n=7168, k=2112, block_m=128, block_n=144, stages=5, pair=SHARE_A),  # K % 128 != 0, shares A
    GemmConfig(n=4096, k=7168, block_m=256, block_n=80, stages=4, pair=SHARE_B),  # BLOCK_M 256, shares B
    GemmConfig(n=4096, k=7168, block_m=256, block_n=128, stages=3),  # two m64 slices per warpgroup, 192 accumulators
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5, layout=LAYOUT_CONTIGUOUS),  # compiled-in scale split
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=5, pair=SHARE_B, layout=LAYOUT_CONTIGUOUS),  # MoE, B shared
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=4, pair=SHARE_B, layout=LAYOUT_CONTIGUOUS),  # stage rounds
    GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_CONTIGUOUS),  # MoE contiguous
    GemmConfig(n=7168, k=2048, block_m=64, block_n=160, stages=7, layout=LAYOUT_MASKED),  # MoE masked
    GemmConfig(n=2112, k=4096, block_m=128, block_n=128, stages=4, wgrad=True),  # weight gradient, FP32 out
    GemmConfig(n=2112, k=4096, block_m=128, block_n=152, stages=4, pair=SHARE_B, wgrad=True),  # B multicast whole, column scales in registers
    GemmConfig(n=4096, k=0, block_m=128, block_n=128, stages=4, layout=3, wgrad=True),  # K-grouped weight gradient
    GemmConfig(n=7168, k=7000, block_m=64, block_n=56, stages=11, defer=True),  # deferred, run-time split, K tail
    GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_MASKED, defer=True),  # 192 accumulators
    GemmConfig(n=4096, k=0, block_m=128, block_n=112, stages=5, layout=3, wgrad=True, defer=True),  # run-time K, deferred
    GemmConfig(n=2112, k=7168, block_m=64, block_n=128, stages=7, split_k=7),  # split-K, a cluster of 7
    GemmConfig(n=2112, k=4096, block_m=128, block_n=128, stages=4, wgrad=True, split_k=2),  # split-K weight gradient
    GemmConfig(n=4096, k=7168, block_m=128, block_n=160, stages=4, layout=LAYOUT_CONTIGUOUS_PSUM),  # MoE, prefix sums
    GemmConfig(n=7168, k=2048, block_m=64, block_n=96, stages=8, layout=LAYOUT_CONTIGUOUS_PSUM, defer=True),  # psum, 64 rows
]


def _nvdisasm() -> str:
    from dgx import sass_tools
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
    if not config.wgrad and config.split_k == 1:  # the BF16 tile goes to shared memory with stmatrix
        assert re.search(r"\bSTSM\.", sass.stdout), "no STSM (stmatrix) in the BF16 epilogue"
    if config.split_k > 1:  # split-K sums the cluster's partial tiles from distributed shared memory
        assert re.search(r"\bLD\.E\.128\b", sass.stdout), "no 128-bit loads of the peers' partials"
    # Only two-slice (256-row) warpgroups probe the next stage's barrier without waiting (the lean k-block)
    # and suspend in their barrier waits instead of spinning.
    probe = re.search(r"\bSYNCS\.PHASECHK\.TRANS64\s+P\d", sass.stdout)
    assert bool(probe) == (config.block_m == 256), "the lean k-block is for 256-row tiles only"
    sleep = re.search(r"\bNANOSLEEP\.SYNCS\b", sass.stdout)
    assert bool(sleep) == (config.block_m == 256), "suspending barrier waits are for 256-row tiles only"
    # Deferred promotion waits for all but the last MMA group (the other accumulator set's); the plain
    # k-block waits for all of them.
    assert bool(re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1\b", sass.stdout)) == config.defer


def test_scale_layout_kernel_compiles(tmp_path):
    """The kernel that converts scales (row-major SFA) into the TMA-aligned M-major layout: no spills, coalesced
    global loads and stores of 32-bit floats through shared memory."""
    from dgx.kernels.scale_layout import CONFIG

    src = CONFIG.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    assert result.cubin[:4] == b"\x7fELF"
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([_nvdisasm(), "--print-code", str(path)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr
    assert src.name in sass.stdout
    assert re.search(r"\bLDG\.E\b", sass.stdout) and re.search(r"\bSTG\.E\b", sass.stdout)
    assert re.search(r"\bSTS\b", sass.stdout) and re.search(r"\bLDS\b", sass.stdout) and "BAR.SYNC" in sass.stdout
    assert not re.search(r"\b(LDL|STL)(\.|\s)", sass.stdout), "local-memory traffic in the SASS"


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


def test_ue8m0_unpack_kernel_compiles_without_local_memory(tmp_path):
    src = Ue8m0UnpackConfig().render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    assert result.cubin[:4] == b"\x7fELF"
    assert re.search(r"\b0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", result.log), result.log
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([_nvdisasm(), "--print-code", str(path)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr
    assert src.name in sass.stdout
    assert not re.search(r"\b(LDL|STL)(\.|\s)", sass.stdout), "local-memory traffic in the SASS"
    with pytest.raises(ValueError, match="threads"):
        Ue8m0UnpackConfig(threads=100)
