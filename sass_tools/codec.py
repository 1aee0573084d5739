"""Hopper (Volta-family) SASS instruction words and their scheduling-control field.

An instruction is 128 bits, stored as two little-endian u64 words: ``low`` (bits 0..63) at the lower
address, then ``high`` (bits 64..127). nvdisasm ``-hex`` prints ``low`` on the instruction's line and
``high`` on the next. Bits used here, numbered over the 128-bit instruction:

=========  =====  ==============================================================================
bits       width  field
=========  =====  ==============================================================================
0..11      12     opcode (see opcodes.py; bits 9..11 pick the operand form)
105..108   4      stall: cycles to wait before issuing the next instruction (bit 105 = LSB)
109        1      yield bit, **inverted**: 0 = the warp may yield here ("Y" in CuAssembler's
                  notation), 1 = no yield. ``Control.yield_flag`` is the un-inverted meaning.
110..112   3      write barrier (scoreboard 0..5 set when the result is written; 7 = none)
113..115   3      read barrier (scoreboard set when the sources have been read; 7 = none)
116..121   6      wait mask: bit i = wait for scoreboard i before issuing
122..125   4      reuse flags: bit 0 = first source operand (A), 1 = B, 2 = C, 3 = a fourth slot
126..127   2      not part of the control field; left as they are
=========  =====  ==============================================================================

How this was pinned down (nvdisasm 13.5 on sm_90a cubins from NVRTC 13.5; the tests repeat it):

- Reuse: setting bit 122 / 123 / 124 alone on ``FFMA R25, R25, R26, R27`` makes nvdisasm print
  ``R25.reuse`` / ``R26.reuse`` / ``R27.reuse`` (the 1st / 2nd / 3rd source); bits 125..127 print
  nothing on FFMA. On every instruction of the test kernels, nvdisasm marks as many operands
  ``.reuse`` as there are reuse bits, in the same order (exactly source i for bit i on FFMA).
- Stall and yield: nvdisasm validates bits 105..109 as one 5-bit value (its "opex" table): for FFMA,
  LDG and NOP alike it rejects exactly 0x10 and 0x1c..0x1f, i.e. bit 109 set with a stall of 0 or of
  12..15. A long stall (12..15) is legal only with bit 109 = 0: a warp stalled that long must be
  allowed to yield, so 0 = yield. This agrees with the
  maxas / CuAssembler notation (yield shown as "Y" when the bit is 0; the padding NOP, high word
  0x000fc00000000000, decodes to stall 0 with yield), with DeepGEMM's interleave script, which lets
  a promotion FFMA yield by XOR-ing 0x0000200000000000 (bit 109) out of a high word that has it set,
  and with ptxas itself: where it interleaves a promotion run it clears bit 109 on every other FFMA and
  puts operand reuse only on the FFMA that keep it set. Flipping bit 105 of a stall-1 FFMA gives the
  value 0x10 in nvdisasm's error: bit 105 is the stall LSB.
- Barriers and wait mask: nvdisasm ignores bits 110..121 (flipping any of them leaves the text
  unchanged), so they were checked against what ptxas emits: variable-latency loads (LDG, LDS, LDL,
  LDC, S2R, ...) set a write barrier 0..5 and the first later instruction that reads the loaded
  register waits on that scoreboard (hundreds of load/use pairs in the test kernels; the exception is the
  stack-pointer load ``LDC R1`` at entry, with no barrier); fixed-latency math (FFMA, FADD, IMAD, ...)
  never sets a barrier. tests/test_sass_codec.py checks all of this on the test kernels.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from .opcodes import mnemonic as _mnemonic

INSTRUCTION_BYTES = 16
_U64 = (1 << 64) - 1

# Bit positions over the 128-bit instruction.
OPCODE_MASK = 0xFFF
CONTROL_SHIFT = 105
STALL_BIT = 105
YIELD_BIT = 109
WRITE_BARRIER_BIT = 110
READ_BARRIER_BIT = 113
WAIT_MASK_BIT = 116
REUSE_BIT = 122
CONTROL_BITS = 21  # 105..125
NO_BARRIER = 7

# The same fields as masks of the high word (bit 64 of the instruction = bit 0 of ``high``).
HIGH_YIELD_MASK = 1 << (YIELD_BIT - 64)
HIGH_REUSE_MASK = 0xF << (REUSE_BIT - 64)
HIGH_CONTROL_MASK = ((1 << CONTROL_BITS) - 1) << (CONTROL_SHIFT - 64)

# Opcode classes the passes and the inspection need; every other opcode is OTHER.
FFMA, QGMMA, HGMMA, LDL, STL, BAR, EXIT, BRA, NOP, OTHER = (
    "FFMA", "QGMMA", "HGMMA", "LDL", "STL", "BAR", "EXIT", "BRA", "NOP", "OTHER",
)  # fmt: skip
OP_CLASSES = frozenset({FFMA, QGMMA, HGMMA, LDL, STL, BAR, EXIT, BRA, NOP})


def classify(opcode: int) -> str:
    """The class of a 12-bit opcode: one of OP_CLASSES, else OTHER."""
    name = _mnemonic(opcode)
    return name if name in OP_CLASSES else OTHER


@dataclass(frozen=True)
class Control:
    """The scheduling-control field of one instruction (bits 105..125)."""

    stall: int = 0
    yield_flag: bool = False  # True: the warp may yield after this instruction (encoded bit = 0)
    write_barrier: int = NO_BARRIER
    read_barrier: int = NO_BARRIER
    wait_mask: int = 0
    reuse: int = 0

    def __post_init__(self) -> None:
        for name, value, top in (
            ("stall", self.stall, 15),
            ("write_barrier", self.write_barrier, 7),
            ("read_barrier", self.read_barrier, 7),
            ("wait_mask", self.wait_mask, 0x3F),
            ("reuse", self.reuse, 0xF),
        ):
            if not 0 <= value <= top:
                raise ValueError(f"{name} must be in 0..{top}, got {value}")

    @classmethod
    def from_high(cls, high: int) -> Control:
        def get(bit: int, width: int) -> int:
            return (high >> (bit - 64)) & ((1 << width) - 1)

        return cls(
            stall=get(STALL_BIT, 4),
            yield_flag=not get(YIELD_BIT, 1),
            write_barrier=get(WRITE_BARRIER_BIT, 3),
            read_barrier=get(READ_BARRIER_BIT, 3),
            wait_mask=get(WAIT_MASK_BIT, 6),
            reuse=get(REUSE_BIT, 4),
        )

    def bits(self) -> int:
        """The 21-bit field value (bit 0 = instruction bit 105)."""
        return (
            self.stall << (STALL_BIT - CONTROL_SHIFT)
            | (0 if self.yield_flag else 1) << (YIELD_BIT - CONTROL_SHIFT)
            | self.write_barrier << (WRITE_BARRIER_BIT - CONTROL_SHIFT)
            | self.read_barrier << (READ_BARRIER_BIT - CONTROL_SHIFT)
            | self.wait_mask << (WAIT_MASK_BIT - CONTROL_SHIFT)
            | self.reuse << (REUSE_BIT - CONTROL_SHIFT)
        )

    def apply(self, high: int) -> int:
        """``high`` with bits 105..125 replaced by this control field; all other bits kept."""
        return (high & ~HIGH_CONTROL_MASK & _U64) | (self.bits() << (CONTROL_SHIFT - 64))

    def __str__(self) -> str:
        """CuAssembler-style text, e.g. ``B0-----:R-:W1:Y:S04`` plus ``:U4`` when reuse is set."""
        wait = "".join(str(i) if self.wait_mask >> i & 1 else "-" for i in range(6))
        rb = "-" if self.read_barrier == NO_BARRIER else str(self.read_barrier)
        wb = "-" if self.write_barrier == NO_BARRIER else str(self.write_barrier)
        text = f"B{wait}:R{rb}:W{wb}:{'Y' if self.yield_flag else '-'}:S{self.stall:02d}"
        return text + (f":U{self.reuse:x}" if self.reuse else "")


@dataclass(frozen=True)
class Instruction:
    """One 128-bit instruction at ``index`` (byte offset ``16 * index``) of a kernel's code."""

    index: int
    low: int
    high: int

    @classmethod
    def from_int(cls, value: int, index: int = 0) -> Instruction:
        if not 0 <= value < 1 << 128:
            raise ValueError("an instruction is a 128-bit unsigned value")
        return cls(index, value & _U64, value >> 64)

    @classmethod
    def from_bytes(cls, data: bytes, index: int = 0) -> Instruction:
        low, high = struct.unpack("<QQ", data)
        return cls(index, low, high)

    @property
    def value(self) -> int:
        return self.high << 64 | self.low

    @property
    def offset(self) -> int:
        return self.index * INSTRUCTION_BYTES

    @property
    def opcode(self) -> int:
        return self.low & OPCODE_MASK

    @property
    def mnemonic(self) -> str | None:
        return _mnemonic(self.opcode)

    @property
    def op_class(self) -> str:
        return classify(self.opcode)

    @property
    def control(self) -> Control:
        return Control.from_high(self.high)

    def with_control(self, control: Control) -> Instruction:
        return replace(self, high=control.apply(self.high))

    def to_bytes(self) -> bytes:
        return struct.pack("<QQ", self.low, self.high)


def decode(code: bytes) -> list[Instruction]:
    """Split a kernel's code (a ``.text`` section) into instructions."""
    if len(code) % INSTRUCTION_BYTES:
        raise ValueError(f"code size {len(code)} is not a multiple of {INSTRUCTION_BYTES} bytes")
    return [Instruction(i, lo, hi) for i, (lo, hi) in enumerate(struct.iter_unpack("<QQ", code))]


def encode(instructions: list[Instruction]) -> bytes:
    """The inverse of decode: instructions back to bytes, in list order."""
    return b"".join(ins.to_bytes() for ins in instructions)
