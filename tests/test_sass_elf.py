"""sass_tools.elf: cubin reader checked against ptxas' -v report, nvdisasm and readelf."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from sass_fixtures import KERNELS, SOURCES, compiled, cubin, disasm_info_records, needs_nvdisasm, ptxas_resources

from dgx.sass_tools import Cubin, CubinError
from dgx.sass_tools.elf import EIATTR, INSTRUCTION_BYTES, SHT_NOBITS

ALL = sorted(SOURCES)


@pytest.mark.parametrize("key", ALL)
def test_kernels_found(key):
    c = Cubin(cubin(key))
    assert sorted(c.kernels) == sorted(KERNELS[key])
    assert c.arch == 90
    for k in c.kernels.values():
        assert k.entry
        assert k.section.name == f".text.{k.name}"
        assert k.text_size > 0 and k.text_size % INSTRUCTION_BYTES == 0
        assert len(c.text(k.name)) == k.text_size


@pytest.mark.parametrize("key", ALL)
def test_resources_match_ptxas_report(key):
    """Registers (EIATTR_REGCOUNT), stack frame (EIATTR_FRAME_SIZE) and static shared memory agree
    with what ptxas -v printed for the same compile."""
    comp = compiled(key)
    report = ptxas_resources(comp.log)
    c = Cubin(comp.cubin)
    assert sorted(report) == sorted(c.kernels)
    for name, want in report.items():
        k = c.kernel(name)
        assert k.registers == want.registers, name
        assert k.local_bytes == want.stack_frame, name
        assert k.shared_bytes == want.smem, name


def test_fixture_resources_are_what_the_kernels_force():
    """The fixtures do what they are for: local memory, static shared memory, a barrier."""
    c = Cubin(cubin("multi"))
    assert c.kernel("local_array").local_bytes == 1024  # float arr[256] indexed at run time
    assert c.kernel("smem_static").shared_bytes == 2048 * 4
    assert c.kernel("smem_static").shared_section_bytes == 2048 * 4 + 1024  # driver's reserved 1 KiB
    assert c.kernel("smem_static").num_barriers == 1
    assert c.kernel("ffma_chain").local_bytes == 0
    assert c.kernel("ffma_chain").shared_bytes == 0


@needs_nvdisasm
@pytest.mark.parametrize("key", ALL)
def test_info_records_match_nvdisasm(key):
    """Every EIATTR record we split out is one nvdisasm lists, at the same offset, with the same
    format and code, and every code we name has nvdisasm's name."""
    blob = cubin(key)
    ours = [r for recs in Cubin(blob).info_records.values() for r in recs]
    theirs = disasm_info_records(blob)
    assert sorted((r.section, r.offset, r.format, r.attribute) for r in ours) == sorted(
        (r.section, r.offset, r.format, r.attribute) for r in theirs
    )
    for r in theirs:
        if r.attribute in EIATTR:
            assert EIATTR[r.attribute] == r.name


@needs_nvdisasm
def test_every_named_eiattr_code_is_seen():
    """The codes the reader interprets all occur in the fixtures (so the name check above covers
    them), except the two stack sizes and thread limits ptxas emits only for some kernels."""
    seen = {r.attribute for key in ALL for r in disasm_info_records(cubin(key))}
    rarely_emitted = {0x04, 0x05, 0x10, 0x23}  # CTAIDZ_USED, MAX_THREADS, REQNTID, MAX_STACK_SIZE
    assert set(EIATTR) - rarely_emitted <= seen


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")
@pytest.mark.parametrize("key", ["multi", "zoo"])
def test_sections_match_readelf(key, tmp_path):
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin(key))
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("[") and "]" in line and not line.startswith("[Nr]"):
            idx, rest = line[1:].split("]", 1)
            parts = rest.split()
            if len(parts) >= 6 and parts[0] not in ("NULL",):
                rows[int(idx)] = (parts[0], int(parts[3], 16), int(parts[4], 16))
    c = Cubin(cubin(key))
    assert rows
    for idx, (name, off, size) in rows.items():
        s = c.sections[idx]
        assert (s.name, s.offset, s.size) == (name, off, size)


def test_symbols():
    c = Cubin(cubin("multi"))
    funcs = {s.name for s in c.symbols if s.type == 2}
    assert {"ffma_chain", "local_array", "smem_static"} <= funcs
    for k in c.kernels.values():
        assert k.symbol.shndx == k.section.index


def test_patched_changes_only_the_given_instruction_bytes():
    blob = cubin("multi")
    c = Cubin(blob)
    k = c.kernel("ffma_chain")
    new = bytes(range(16))
    out = c.patched({"ffma_chain": {3: new}})
    assert len(out) == len(blob)
    start = k.text_offset + 3 * 16
    diff = [i for i in range(len(blob)) if blob[i] != out[i]]
    assert diff and all(start <= i < start + 16 for i in diff)
    assert out[start : start + 16] == new
    assert Cubin(out).text("local_array") == c.text("local_array")


def test_patched_rejects_bad_requests():
    c = Cubin(cubin("ffma"))
    n = c.kernel("ffma_chain").instruction_count
    with pytest.raises(CubinError, match="outside"):
        c.patched({"ffma_chain": {n: bytes(16)}})
    with pytest.raises(CubinError, match="16 bytes"):
        c.patched({"ffma_chain": {0: bytes(8)}})
    with pytest.raises(CubinError, match="no kernel 'nope'"):
        c.patched({"nope": {0: bytes(16)}})
    assert c.patched({}) == c.data


def test_rejects_what_is_not_a_cubin():
    good = cubin("smem")
    with pytest.raises(CubinError, match="not an ELF"):
        Cubin(b"hello world" * 10)
    with pytest.raises(CubinError, match="64-bit"):
        Cubin(good[:4] + b"\x01" + good[5:])
    with pytest.raises(CubinError, match="little-endian"):
        Cubin(good[:5] + b"\x02" + good[6:])
    with pytest.raises(CubinError, match="EM_CUDA"):
        Cubin(good[:0x12] + struct.pack("<H", 62) + good[0x14:])
    with pytest.raises(CubinError, match="truncated"):
        Cubin(good[: len(good) // 2])
    assert issubclass(CubinError, ValueError)


def test_nobits_sections_have_no_data():
    c = Cubin(cubin("smem"))
    s = c.section(".nv.shared.smem_static")
    assert s.type == SHT_NOBITS and s.size > 0 and s.data(c.data) == b""


def test_sass_tools_is_a_leaf():
    """sass_tools imports only the standard library (numpy would be allowed), never dgx, cache or
    ptx, and nothing from the test helpers."""
    import ast
    import sys
    from pathlib import Path

    from dgx import sass_tools
    allowed = set(sys.stdlib_module_names) | {"numpy"}
    for path in Path(sass_tools.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [node.module.split(".")[0]]
            else:
                continue
            assert set(tops) <= allowed, f"{path.name} imports {tops}"
