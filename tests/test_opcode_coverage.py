"""The opcode table names every opcode NVRTC 13.0 and 13.5 emit for dgx's kernels, and reports show an
opcode the table lacks as unknown."""

from __future__ import annotations

from dgx.sass_tools import analyze_cubin
from dgx.sass_tools.inspect import unknown_label
from dgx.sass_tools.opcodes import SM90_OPCODES, mnemonic

# Every opcode in the kernels of the deepseek-v3 and qwen3-235b-a22b presets, compiled by NVRTC 13.0.88
# and 13.5.37 for sm_90a (the caches of `dgx warmup --preset ...` under each NVRTC, every cubin decoded).
PRESET_OPCODES = frozenset(
    int(x, 16)
    for x in """
0x202 0x207 0x208 0x20c 0x210 0x211 0x212 0x213 0x220 0x223 0x224 0x227 0x23e 0x248 0x287 0x28c 0x290 0x291
0x292 0x2a4 0x2a5 0x2ca 0x305 0x306 0x308 0x387 0x388 0x3b4 0x3b5 0x3b6 0x3c6 0x424 0x4a4 0x51d 0x589 0x5a7
0x5ab 0x5b2 0x5b4 0x802 0x803 0x805 0x807 0x80c 0x810 0x811 0x812 0x816 0x819 0x81c 0x824 0x825 0x82f 0x836
0x844 0x848 0x882 0x883 0x886 0x887 0x88c 0x890 0x891 0x892 0x897 0x899 0x89c 0x8a4 0x8a5 0x918 0x919 0x91a
0x941 0x942 0x945 0x946 0x947 0x948 0x94d 0x95d 0x981 0x983 0x984 0x986 0x988 0x98f 0x992 0x9a7 0x9ab 0x9b7
0x9b9 0x9c3 0x9c5 0x9c7 0x9c8 0x9f3 0xab9 0xb1d 0xb82 0xc02 0xc0c 0xc10 0xc11 0xc12 0xc13 0xc20 0xc24 0xc25
0xc36 0xc48 0xc82 0xd06 0xdc7 0xe24
""".split()
)


def test_every_preset_opcode_is_named():
    assert sorted(hex(op) for op in PRESET_OPCODES - set(SM90_OPCODES)) == []


def test_opcodes_nvdisasm_names_that_the_sweep_missed():
    # nvdisasm 13.5 on instructions of the preset kernels (UIADD3.64, STS with a uniform offset, ...).
    assert mnemonic(0x897) == "UIADD3" and mnemonic(0x988) == "STS" and mnemonic(0x892) == "ULOP3"
    assert mnemonic(0x8A4) == "UIMAD" and mnemonic(0x3B6) == "UTMAREDG" and mnemonic(0xD06) == "I2F"


def test_unknown_opcodes_show_as_unknown_in_reports(monkeypatch):
    from sass_fixtures import cubin

    from dgx.sass_tools import codec
    from dgx.sass_tools import inspect as inspect_mod

    blob = cubin("ffma")
    known = analyze_cubin(blob)[0].histogram
    assert not any(name.startswith("unknown") for name in known)
    table = dict(SM90_OPCODES)
    ffma_ops = [op for op, name in table.items() if name == "FFMA"]
    for op in ffma_ops:
        table.pop(op)
    monkeypatch.setattr(codec, "_mnemonic", table.get)
    hist = inspect_mod.analyze_cubin(blob)[0].histogram
    assert "FFMA" not in hist and any(k == unknown_label(op) for k in hist for op in ffma_ops)
