"""DGX_JIT_DUMP_DIR and DGX_JIT_DEBUG do what dgx/env.py says: the dump holds each compiled kernel's source,
PTX, cubin and (with nvdisasm installed) SASS; debug prints each compile's options and time and each miss."""

from __future__ import annotations

import re

import pytest

from dgx import sass_tools
from dgx import jit

SRC = jit.KernelSource(
    name="dgx_dump_probe",
    source='extern "C" __global__ void dgx_dump_probe(float* out, float x) { out[threadIdx.x] = x * 2.0f; }\n',
)


def test_dump_dir_gets_source_ptx_cubin_and_sass(monkeypatch, tmp_path):
    dump = tmp_path / "dump"
    monkeypatch.setenv("DGX_JIT_DUMP_DIR", str(dump))
    cubin, _ = jit.build_cubin(SRC, "sm_90a")
    assert (dump / "dgx_dump_probe.cu").read_text() == SRC.source
    assert (dump / "dgx_dump_probe.cubin").read_bytes() == cubin
    ptx_text = (dump / "dgx_dump_probe.ptx").read_text()
    assert ".target sm_90a" in ptx_text and ".entry dgx_dump_probe" in ptx_text
    sass = dump / "dgx_dump_probe.sass"
    if sass_tools.nvdisasm_path() is None:
        assert not sass.exists()
    else:
        text = sass.read_text()
        assert "dgx_dump_probe" in text and ("FMUL" in text or "FADD" in text)


def test_no_dump_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("DGX_JIT_DUMP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    jit.build_cubin(SRC, "sm_90a")
    assert list(tmp_path.iterdir()) == []


def test_debug_prints_each_miss_and_compile_with_options_and_time(monkeypatch, tmp_cache, capsys):
    monkeypatch.setattr(jit, "_caches", {})
    monkeypatch.setenv("DGX_JIT_DEBUG", "1")
    jit.get_cubin(SRC, "sm_90a")
    err = capsys.readouterr().err
    assert re.search(r"dgx: cache miss for dgx_dump_probe \(key [0-9a-f]{16}…\)", err)
    line = next(line for line in err.splitlines() if line.startswith("dgx: compiled dgx_dump_probe"))
    assert re.search(r"for sm_90a in \d+\.\d\d s", line)
    assert "--gpu-architecture=sm_90a" in line and "-std=c++17" in line and "SASS pass off" in line
    jit.get_cubin(SRC, "sm_90a")  # a hit: nothing to say
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", ["0", ""])
def test_quiet_without_debug(monkeypatch, tmp_cache, capsys, value):
    monkeypatch.setattr(jit, "_caches", {})
    monkeypatch.setenv("DGX_JIT_DEBUG", value)
    jit.get_cubin(SRC, "sm_90a")
    assert capsys.readouterr().err == ""


def test_jit_stats_count_the_caches_hits(monkeypatch, tmp_cache):
    monkeypatch.setattr(jit, "_caches", {})
    jit.reset_jit_stats()
    jit.get_cubin(SRC, "sm_90a")
    jit.get_cubin(SRC, "sm_90a")
    stats = jit.jit_stats()
    assert (stats["compiles"], stats["memory_hits"], stats["disk_hits"]) == (1, 1, 0)
    monkeypatch.setattr(jit, "_caches", {})  # a new cache object on the same root: the next hit is from disk
    jit.get_cubin(SRC, "sm_90a")
    assert jit.jit_stats()["disk_hits"] == 1
    jit.reset_jit_stats()
    assert (jit.jit_stats()["memory_hits"], jit.jit_stats()["disk_hits"]) == (0, 0)
