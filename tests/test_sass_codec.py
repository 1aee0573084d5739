"""sass_tools.codec: instruction split, control-field layout and opcode classes, checked against
nvdisasm on every instruction of the test kernels and on hand-made raw instructions."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import pytest
from sass_fixtures import SOURCES, cubin, disasm_instructions, disasm_raw, needs_nvdisasm, split_operands

from dgx.sass_tools import OP_CLASSES, Control, Cubin, Instruction, classify, decode, encode
from dgx.sass_tools.codec import HIGH_CONTROL_MASK, HIGH_REUSE_MASK, HIGH_YIELD_MASK, NO_BARRIER, OTHER
from dgx.sass_tools.opcodes import SM90_OPCODES

ALL = sorted(SOURCES)
_U64 = (1 << 64) - 1


def kernels_of(key):
    c = Cubin(cubin(key))
    return [(name, decode(c.text(name))) for name in c.kernels]


def with_bit(ins: Instruction, bit: int, value: int) -> tuple[int, int]:
    v = ins.value & ~(1 << bit) | (value << bit)
    return v & _U64, v >> 64


# ----------------------------------------------------------------------------- lossless round trip


@pytest.mark.parametrize("key", ALL)
def test_round_trip_every_instruction(key):
    c = Cubin(cubin(key))
    for name in c.kernels:
        code = c.text(name)
        instrs = decode(code)
        assert len(instrs) * 16 == len(code)
        assert encode(instrs) == code
        for ins in instrs:
            ctl = ins.control
            assert ins.with_control(ctl) == ins
            assert Control.from_high(ctl.apply(ins.high)) == ctl
            assert Instruction.from_int(ins.value, ins.index) == ins
            assert Instruction.from_bytes(ins.to_bytes(), ins.index) == ins
            assert ctl.apply(ins.high) == ins.high


def test_control_fields_are_independent():
    """Each field written alone lands in its own bits and reads back unchanged."""
    base = Instruction(0, 0x0000001A19197223, 0x000FE2000000001B)
    for field, values in {
        "stall": range(16),
        "yield_flag": (False, True),
        "write_barrier": range(8),
        "read_barrier": range(8),
        "wait_mask": (0, 1, 0x20, 0x3F),
        "reuse": range(16),
    }.items():
        for v in values:
            ctl = replace(base.control, **{field: v})
            out = base.with_control(ctl)
            assert out.low == base.low
            assert out.high & ~HIGH_CONTROL_MASK == base.high & ~HIGH_CONTROL_MASK
            assert getattr(out.control, field) == v
            others = {k: x for k, x in out.control.__dict__.items() if k != field}
            assert others == {k: x for k, x in base.control.__dict__.items() if k != field}


def test_control_bit_positions():
    assert Control(stall=1).bits() & 0xF == 1
    no_barriers = {"write_barrier": 0, "read_barrier": 0}
    assert Control(yield_flag=False, **no_barriers).apply(0) == HIGH_YIELD_MASK  # no yield: bit 109 set
    assert Control(yield_flag=True, **no_barriers).apply(0) == 0
    assert Control(reuse=0xF, yield_flag=True, **no_barriers).apply(0) == HIGH_REUSE_MASK
    assert Control(write_barrier=7, read_barrier=0, yield_flag=True).apply(0) == 7 << 46
    assert Control(read_barrier=7, write_barrier=0, yield_flag=True).apply(0) == 7 << 49
    assert Control(wait_mask=0x3F, yield_flag=True, **no_barriers).apply(0) == 0x3F << 52
    assert HIGH_YIELD_MASK == 1 << 45 and HIGH_REUSE_MASK == 0xF << 58
    # The padding NOP ptxas emits: stall 0, yield, no barriers.
    assert str(Control.from_high(0x000FC00000000000)) == "B------:R-:W-:Y:S00"
    assert str(Control.from_high(0x100FE2000800001B)) == "B------:R-:W-:-:S01:U4"
    with pytest.raises(ValueError, match="stall"):
        Control(stall=16)
    with pytest.raises(ValueError, match="wait_mask"):
        Control(wait_mask=64)


def test_decode_rejects_partial_instructions():
    with pytest.raises(ValueError, match="multiple of 16"):
        decode(bytes(24))
    with pytest.raises(ValueError):
        Instruction.from_int(1 << 128)


# ----------------------------------------------------------------------------- against nvdisasm


@needs_nvdisasm
@pytest.mark.parametrize("key", ALL)
def test_words_opcodes_and_classes_match_nvdisasm(key):
    """Same instruction count and words as nvdisasm -hex prints; our mnemonic (from the opcode
    table) is nvdisasm's for every instruction; our class is the mnemonic for the classes we name."""
    listing = disasm_instructions(cubin(key))
    for name, instrs in kernels_of(key):
        theirs = listing[name]
        assert len(instrs) == len(theirs)
        for ins, t in zip(instrs, theirs):
            assert (ins.offset, ins.low, ins.high) == (t.offset, t.low, t.high)
            assert ins.mnemonic == t.mnemonic, (name, hex(ins.offset), t.opcode)
            assert ins.op_class == (t.mnemonic if t.mnemonic in OP_CLASSES else OTHER)


@needs_nvdisasm
def test_fixtures_cover_every_class():
    seen = Counter(ins.op_class for key in ALL for _, instrs in kernels_of(key) for ins in instrs)
    assert OP_CLASSES <= set(seen)


@needs_nvdisasm
@pytest.mark.parametrize("key", ALL)
def test_reuse_flags_match_nvdisasm(key):
    """nvdisasm prints '.reuse' on as many operands as we find reuse bits, in the same order; for
    FFMA (one destination), reuse bit i is exactly source operand i (A, B, C)."""
    listing = disasm_instructions(cubin(key))
    checked = 0
    for name, instrs in kernels_of(key):
        for ins, t in zip(instrs, listing[name]):
            bits = [i for i in range(4) if ins.control.reuse >> i & 1]
            marked = t.reuse_operands
            assert len(bits) == len(marked), (name, t.opcode, t.operands)
            if t.mnemonic == "FFMA":
                assert [m - 1 for m in marked] == bits
                checked += bool(bits)
    if key in ("ffma", "wgmma_fp8"):
        assert checked > 0


@needs_nvdisasm
def test_reuse_bits_by_raw_probe():
    """Set bit 122, 123 or 124 alone on FFMA R25, R25, R26, R27: nvdisasm marks source A, B or C.
    Bits 125..127 and 110..121 change nothing it prints."""
    ffma = Instruction(0, 0x0000001A19197223, 0x000FE2000000001B)
    probes = [with_bit(ffma, b, 1) for b in (122, 123, 124)]
    quiet = [with_bit(ffma, b, 1 - (ffma.value >> b & 1)) for b in (125, 126, 127, *range(110, 122))]
    plain, *texts = disasm_raw([(ffma.low, ffma.high), *probes, *quiet])
    assert plain == "FFMA R25, R25, R26, R27"
    assert texts[:3] == [
        "FFMA R25, R25.reuse, R26, R27",
        "FFMA R25, R25, R26.reuse, R27",
        "FFMA R25, R25, R26, R27.reuse",
    ]
    assert texts[3:] == [plain] * len(quiet)


@needs_nvdisasm
@pytest.mark.parametrize(
    "low, high",
    [
        (0x0000001A19197223, 0x000FE2000000001B),  # FFMA R25, R25, R26, R27
        (0x0000000822197981, 0x000168000C1E1900),  # LDG.E R25, desc[UR8][R34.64]
        (0x0000000000007918, 0x000FC00000000000),  # NOP
    ],
)
def test_stall_and_yield_legality_by_raw_probe(low, high):
    """nvdisasm checks bits 105..109 as one value: with bit 109 set (no yield) a stall of 0 or of
    12..15 is illegal; with bit 109 clear (yield) every stall is legal. That is the yield sense:
    long stalls must let the warp yield."""
    ins = Instruction(0, low, high)
    words = [
        ins.with_control(replace(ins.control, stall=stall, yield_flag=yield_flag))
        for stall in range(16)
        for yield_flag in (False, True)
    ]
    legal = disasm_raw([(w.low, w.high) for w in words])
    illegal = {(w.control.stall, w.control.yield_flag) for w, text in zip(words, legal) if text is None}
    assert illegal == {(s, False) for s in (0, 12, 13, 14, 15)}


_REG = re.compile(r"\b(U?R\d+)\b")
_VARIABLE_LATENCY = {"LDG", "LDS", "LDL", "LDC", "S2R", "S2UR", "LDSM"}
_FIXED_LATENCY = {"FFMA", "FADD", "FMUL", "IMAD", "IADD3", "MOV", "LOP3", "ISETP", "FSETP", "SHF", "LEA", "SEL"}


@needs_nvdisasm
def test_barrier_fields_match_ptxas_usage():
    """What ptxas does with the barrier fields, read with our layout: variable-latency loads set a
    write barrier 0..5 and the first later instruction that reads the loaded register (before any
    branch) has waited on that scoreboard; fixed-latency math sets no barrier. (The stack-pointer
    load LDC R1 at entry is the one load without a barrier: R1 is not read right after.)"""
    pairs = fixed = 0
    for key in ALL:
        listing = disasm_instructions(cubin(key))
        for name, instrs in kernels_of(key):
            text = listing[name]
            for i, (ins, t) in enumerate(zip(instrs, text)):
                ctl = ins.control
                if t.mnemonic in _FIXED_LATENCY:
                    assert (ctl.write_barrier, ctl.read_barrier) == (NO_BARRIER, NO_BARRIER), t
                    fixed += 1
                if t.mnemonic not in _VARIABLE_LATENCY:
                    continue
                dest = _REG.match(split_operands(t.operands)[0]).group(1)
                if dest == "R1":
                    continue
                assert 0 <= ctl.write_barrier <= 5, t
                waited = False
                for j in range(i + 1, len(instrs)):
                    waited |= bool(instrs[j].control.wait_mask >> ctl.write_barrier & 1)
                    if any(dest in _REG.findall(op) for op in split_operands(text[j].operands)):
                        assert waited, (name, t, text[j])
                        pairs += 1
                        break
                    if text[j].mnemonic in ("BRA", "EXIT", "BSYNC", "CALL", "RET"):
                        break
    assert pairs > 100 and fixed > 100


# ----------------------------------------------------------------------------- opcode table


def test_classify():
    assert classify(0x223) == "FFMA" and classify(0xC23) == "FFMA"
    assert classify(0x9F3) == "QGMMA" and classify(0x9F0) == "HGMMA"
    assert classify(0x983) == "LDL" and classify(0x387) == "STL"
    assert classify(0xB1D) == "BAR" and classify(0x94D) == "EXIT"
    assert classify(0x947) == "BRA" and classify(0x918) == "NOP"
    assert classify(0x981) == OTHER  # LDG: known mnemonic, not a class of its own
    assert classify(0x000) == OTHER and Instruction(0, 0x000, 0).mnemonic is None


@needs_nvdisasm
def test_opcode_table_matches_nvdisasm_sweep():
    """Every 12-bit opcode value with all other fields zero: where nvdisasm decodes it, the table
    has the same mnemonic (the table was generated from this sweep plus operand-form probes)."""
    words = [(op | 0x7000, 0x000FC00000000000) for op in range(4096)]
    decoded = {op: text.split()[0].split(".")[0] for op, text in enumerate(disasm_raw(words)) if text}
    assert len(decoded) > 300
    assert {op: SM90_OPCODES.get(op) for op in decoded} == decoded
