"""sass_tools.inspect: the numbers `dgx inspect` shows, and the nvdisasm wrapper."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from sass_fixtures import SOURCES, compiled, cubin, disasm_instructions, needs_nvdisasm, ptxas_resources

from dgx.sass_tools import inspect as inspect_mod
from dgx.sass_tools import (
    NvdisasmNotFoundError,
    analyze_cubin,
    disassemble,
    interleave_ffma,
    nvdisasm_path,
)
from dgx.sass_tools.interleave import DEFAULT_MIN_RUN

ALL = sorted(SOURCES)
REQUIRED_KEYS = {
    "kernel",
    "registers",
    "shared_bytes",
    "local_bytes",
    "spill_instructions",
    "histogram",
    "qgmma",
    "ffma_runs",
    "ffma_yield_set",
}


def reports(key):
    return {r.kernel: r for r in analyze_cubin(cubin(key))}


@pytest.mark.parametrize("key", ALL)
def test_resources_match_ptxas(key):
    comp = compiled(key)
    got = reports(key)
    for name, want in ptxas_resources(comp.log).items():
        r = got[name]
        assert (r.registers, r.local_bytes, r.shared_bytes) == (want.registers, want.stack_frame, want.smem)


@needs_nvdisasm
@pytest.mark.parametrize("key", ALL)
def test_counts_match_nvdisasm(key):
    """Histogram, spill (LDL+STL), QGMMA/HGMMA and FFMA counts equal counts over nvdisasm's listing;
    the FFMA runs are nvdisasm's runs of consecutive FFMA lines."""
    listing = disasm_instructions(cubin(key))
    for name, r in reports(key).items():
        mnemonics = [t.mnemonic for t in listing[name]]
        counts = Counter(mnemonics)
        assert r.histogram == dict(counts)
        assert r.instructions == len(mnemonics)
        assert r.spill_instructions == counts["LDL"] + counts["STL"]
        assert (r.ldl, r.stl, r.qgmma, r.hgmma, r.ffma) == (
            counts["LDL"], counts["STL"], counts["QGMMA"], counts["HGMMA"], counts["FFMA"],
        )  # fmt: skip
        runs, i = [], 0
        while i < len(mnemonics):
            j = i
            while j < len(mnemonics) and mnemonics[j] == "FFMA":
                j += 1
            if j - i >= DEFAULT_MIN_RUN:
                runs.append((listing[name][i].offset, j - i))
            i = max(j, i + 1)
        assert [(run.offset, run.length) for run in r.ffma_runs] == runs


def test_golden_fixture_reports():
    ffma = reports("ffma")["ffma_chain"]
    assert ffma.ffma >= 64 and max(r.length for r in ffma.ffma_runs) >= 64
    assert ffma.spill_instructions == 0 and ffma.qgmma == 0

    fp8 = reports("wgmma_fp8")["wgmma_fp8"]
    assert fp8.qgmma >= 1 and fp8.hgmma == 0
    assert [r.length for r in fp8.ffma_runs] == [32]  # the promotion of 32 accumulators
    assert fp8.ffma_interleaved_runs == 0  # NVRTC 13 does not interleave it by itself

    assert reports("wgmma_f16")["wgmma_f16"].hgmma >= 1

    local = reports("local")["local_array"]
    assert local.local_bytes == 1024 and local.ldl > 0 and local.stl > 0
    assert local.spill_instructions == local.ldl + local.stl

    smem = reports("smem")["smem_static"]
    assert smem.shared_bytes == 8192 and smem.histogram.get("BAR") == 1


def test_json_report():
    for r in analyze_cubin(cubin("multi")) + analyze_cubin(cubin("wgmma_fp8")):
        data = r.to_json()
        assert REQUIRED_KEYS <= set(data)
        assert json.loads(json.dumps(data)) == data
        assert data["spill_instructions"] == data["ldl"] + data["stl"]
        for run in data["ffma_runs"]:
            assert set(run) == {"start", "length", "yield_set", "interleaved"}
            assert run["start"] % 16 == 0


def test_inspect_sees_the_pass():
    before = reports("wgmma_fp8")["wgmma_fp8"]
    out, _ = interleave_ffma(cubin("wgmma_fp8"))
    (after,) = analyze_cubin(out)
    assert after.ffma_yield_set == before.ffma_yield_set + 16
    assert after.ffma_interleaved_runs == 1
    assert after.histogram == before.histogram


def test_nvdisasm_path():
    path = nvdisasm_path()
    if path is not None:
        assert os.path.isfile(path) and os.access(path, os.X_OK)


@needs_nvdisasm
def test_disassemble():
    blob = cubin("multi")
    text = disassemble(blob)
    for name in ("ffma_chain", "local_array", "smem_static"):
        assert f".text.{name}" in text
    assert "FFMA" in text and "STL" in text
    one = disassemble(blob, kernel="smem_static")
    assert ".text.smem_static" in one and ".text.ffma_chain" not in one
    assert "/* 0x" in disassemble(blob, kernel="smem_static", hex=True)


def test_disassemble_without_nvdisasm(monkeypatch):
    monkeypatch.setattr(inspect_mod, "nvdisasm_path", lambda: None)
    with pytest.raises(NvdisasmNotFoundError, match="pip install nvidia-cuda-nvdisasm"):
        disassemble(cubin("smem"))
