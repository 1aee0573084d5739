"""Read CUDA cubins (ELF64, little-endian) and write patched copies of them.

What is read, and where it comes from:

- Section headers and names (``.shstrtab``), the symbol table (``.symtab`` + its ``.strtab``).
- Kernels: every ``.text.<name>`` section; its bytes are the kernel's SASS, 16 bytes an instruction.
  ``entry`` is true when the function symbol carries ``STO_CUDA_ENTRY`` (``st_other`` bit 0x10).
- Per-kernel attributes from the ``.nv.info`` sections. Each is a list of EIATTR records, 4-byte
  aligned: ``u8 format, u8 attribute``, then by format
  ``0x01`` EIFMT_NVAL (no value, 2 bytes of padding), ``0x02`` EIFMT_BVAL (one byte + 1 pad),
  ``0x03`` EIFMT_HVAL (u16), ``0x04`` EIFMT_SVAL (u16 size, then ``size`` bytes of payload).
  Global ``.nv.info`` records name their kernel by symbol index (first u32 of the payload);
  ``.nv.info.<name>`` records belong to that kernel.

  The attribute codes used here (``EIATTR`` below) were confirmed against nvdisasm 13.5, which prints
  each record's name next to its bytes (``//----- nvinfo : EIATTR_REGCOUNT`` over ``.byte 0x04, 0x2f``);
  tests/test_sass_elf.py checks every record of every test cubin against that listing, and the
  register / stack-frame values against ptxas' ``-v`` report.

- Shared memory: the size of the ``.nv.shared.<name>`` section (NOBITS). On sm_90 with CUDA 13 the
  section starts with the 1 KiB the driver reserves per CTA for system use (``.nv.shared.dyn_only`` of
  a kernel with only dynamic shared memory is exactly 1024 bytes; ``__shared__ float s[100]`` gives
  1424), so ``shared_bytes`` is the section size less that reservation, which is what ptxas reports
  as "bytes smem". Dynamic shared memory is a launch parameter and is not in the cubin.
- Local memory: ``EIATTR_FRAME_SIZE`` (ptxas' "bytes stack frame"), plus ``EIATTR_MIN_STACK_SIZE`` /
  ``EIATTR_MAX_STACK_SIZE`` where present.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import CubinError

INSTRUCTION_BYTES = 16

# ELF constants
_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
EM_CUDA = 190
SHT_SYMTAB = 2
SHT_NOBITS = 8
SHT_CUDA_INFO = 0x70000000
STO_CUDA_ENTRY = 0x10

# EIATTR record formats
EIFMT_NVAL = 0x01
EIFMT_BVAL = 0x02
EIFMT_HVAL = 0x03
EIFMT_SVAL = 0x04

# EIATTR attribute codes this module interprets (all checked against nvdisasm's names, see above).
EIATTR = MappingProxyType(
    {
        0x04: "EIATTR_CTAIDZ_USED",
        0x05: "EIATTR_MAX_THREADS",
        0x0A: "EIATTR_PARAM_CBANK",
        0x10: "EIATTR_REQNTID",
        0x11: "EIATTR_FRAME_SIZE",
        0x12: "EIATTR_MIN_STACK_SIZE",
        0x17: "EIATTR_KPARAM_INFO",
        0x19: "EIATTR_CBANK_PARAM_SIZE",
        0x1B: "EIATTR_MAXREG_COUNT",
        0x1C: "EIATTR_EXIT_INSTR_OFFSETS",
        0x1E: "EIATTR_CRS_STACK_SIZE",
        0x23: "EIATTR_MAX_STACK_SIZE",
        0x2F: "EIATTR_REGCOUNT",
        0x37: "EIATTR_CUDA_API_VERSION",
        0x4C: "EIATTR_NUM_BARRIERS",
    }
)
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIATTR_NUM_BARRIERS = 0x4C

# Bytes at the start of .nv.shared.<kernel> that the driver reserves per CTA (sm_80 and later).
RESERVED_SHARED_BYTES = 1024


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int
    header_offset: int

    def data(self, blob: bytes) -> bytes:
        if self.type == SHT_NOBITS:
            return b""
        return blob[self.offset : self.offset + self.size]


@dataclass(frozen=True)
class Symbol:
    index: int
    name: str
    info: int
    other: int
    shndx: int
    value: int
    size: int

    @property
    def type(self) -> int:
        return self.info & 0xF


@dataclass(frozen=True)
class InfoRecord:
    """One EIATTR record of a ``.nv.info`` section."""

    section: str
    offset: int  # within the section
    format: int
    attribute: int
    value: int | None  # BVAL / HVAL value
    payload: bytes  # SVAL payload

    @property
    def name(self) -> str:
        return EIATTR.get(self.attribute, f"EIATTR_0x{self.attribute:02x}")

    def words(self) -> tuple[int, ...]:
        n = len(self.payload) // 4
        return struct.unpack_from(f"<{n}I", self.payload)


@dataclass(frozen=True)
class Kernel:
    """A ``.text.<name>`` section and the attributes the cubin records for it."""

    name: str
    section: Section
    symbol: Symbol | None
    registers: int | None
    frame_bytes: int | None  # EIATTR_FRAME_SIZE: local memory (stack frame) per thread
    min_stack_bytes: int | None
    max_stack_bytes: int | None
    max_registers: int | None  # EIATTR_MAXREG_COUNT (the cap the kernel was compiled under)
    num_barriers: int | None
    shared_section_bytes: int  # size of .nv.shared.<name>, 0 if absent
    shared_bytes: int  # static shared memory as ptxas reports it (reservation removed)
    attributes: tuple[InfoRecord, ...] = field(repr=False, default=())

    @property
    def entry(self) -> bool:
        return self.symbol is not None and bool(self.symbol.other & STO_CUDA_ENTRY)

    @property
    def text_offset(self) -> int:
        """File offset of the kernel's first instruction."""
        return self.section.offset

    @property
    def text_size(self) -> int:
        return self.section.size

    @property
    def instruction_count(self) -> int:
        return self.section.size // INSTRUCTION_BYTES

    @property
    def local_bytes(self) -> int:
        return self.frame_bytes or 0


class Cubin:
    """A parsed cubin. Immutable: patching returns new bytes."""

    def __init__(self, data: bytes | bytearray | memoryview):
        self.data = bytes(data)
        self._parse_header()
        self.sections = self._parse_sections()
        self._by_name = {s.name: s for s in self.sections}
        self.symbols = self._parse_symbols()
        self.info_records = self._parse_info_records()
        self.kernels: Mapping[str, Kernel] = MappingProxyType(self._parse_kernels())

    # ------------------------------------------------------------------ parsing

    def _parse_header(self) -> None:
        d = self.data
        if len(d) < 64 or d[:4] != _ELF_MAGIC:
            raise CubinError("not an ELF file (no \\x7fELF magic)")
        if d[4] != _ELFCLASS64:
            raise CubinError(f"not a 64-bit ELF (EI_CLASS={d[4]}); cubins are ELF64")
        if d[5] != _ELFDATA2LSB:
            raise CubinError(f"not a little-endian ELF (EI_DATA={d[5]})")
        self.abi_version = d[8]
        (
            self.machine,
            self.e_flags,
            self._shoff,
            self._shentsize,
            self._shnum,
            self._shstrndx,
        ) = (
            struct.unpack_from("<H", d, 0x12)[0],
            struct.unpack_from("<I", d, 0x30)[0],
            struct.unpack_from("<Q", d, 0x28)[0],
            *struct.unpack_from("<HHH", d, 0x3A),
        )
        if self.machine != EM_CUDA:
            raise CubinError(f"ELF machine is {self.machine}, not EM_CUDA ({EM_CUDA})")
        if self._shentsize != 64:
            raise CubinError(f"unexpected section header size {self._shentsize}")
        if self._shoff + self._shnum * 64 > len(d):
            raise CubinError("section header table runs past the end of the file (truncated cubin?)")

    @property
    def arch(self) -> int:
        """The SM version the code is for (90 for sm_90 / sm_90a), from the ELF header flags.

        From ELF ABI version 8 (CUDA 13) the SM sits in bits 8..15 of e_flags; before, in bits 0..7.
        """
        return (self.e_flags >> 8) & 0xFF if self.abi_version >= 8 else self.e_flags & 0xFF

    def _parse_sections(self) -> tuple[Section, ...]:
        d = self.data
        raw = []
        for i in range(self._shnum):
            off = self._shoff + i * 64
            name, typ, flags, _addr, offset, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", d, off
            )
            if typ != SHT_NOBITS and offset + size > len(d):
                raise CubinError(f"section {i} runs past the end of the file (truncated cubin?)")
            raw.append((name, typ, flags, offset, size, link, info, entsize, off))
        if not 0 <= self._shstrndx < len(raw):
            raise CubinError("bad section-name string table index")
        str_off, str_size = raw[self._shstrndx][3], raw[self._shstrndx][4]
        names = d[str_off : str_off + str_size]
        out = []
        for i, (name, typ, flags, offset, size, link, info, entsize, hoff) in enumerate(raw):
            out.append(Section(i, _cstr(names, name), typ, flags, offset, size, link, info, entsize, hoff))
        return tuple(out)

    def _parse_symbols(self) -> tuple[Symbol, ...]:
        symtab = next((s for s in self.sections if s.type == SHT_SYMTAB), None)
        if symtab is None:
            return ()
        strtab = self.sections[symtab.link].data(self.data)
        blob = symtab.data(self.data)
        out = []
        for i in range(len(blob) // 24):
            name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", blob, i * 24)
            out.append(Symbol(i, _cstr(strtab, name), info, other, shndx, value, size))
        return tuple(out)

    def _parse_info_records(self) -> dict[str, tuple[InfoRecord, ...]]:
        out = {}
        for s in self.sections:
            if s.type == SHT_CUDA_INFO and (s.name == ".nv.info" or s.name.startswith(".nv.info.")):
                out[s.name] = tuple(parse_info(s.data(self.data), s.name))
        return out

    def _parse_kernels(self) -> dict[str, Kernel]:
        # Global .nv.info: records whose payload starts with the kernel's symbol index.
        per_symbol: dict[int, dict[int, int]] = {}
        for rec in self.info_records.get(".nv.info", ()):
            if rec.format == EIFMT_SVAL and len(rec.payload) >= 8:
                sym, val = struct.unpack_from("<II", rec.payload)
                per_symbol.setdefault(sym, {})[rec.attribute] = val
        kernels = {}
        for s in self.sections:
            if not s.name.startswith(".text."):
                continue
            name = s.name[len(".text.") :]
            sym = next(
                (y for y in self.symbols if y.name == name and y.shndx == s.index and y.type == 2), None
            )
            glob = per_symbol.get(sym.index, {}) if sym is not None else {}
            local = self.info_records.get(f".nv.info.{name}", ())
            loc_vals = {r.attribute: r.value for r in local if r.value is not None}
            shared = self._by_name.get(f".nv.shared.{name}")
            shared_size = shared.size if shared is not None else 0
            reserved = RESERVED_SHARED_BYTES if self.arch >= 80 and shared_size >= RESERVED_SHARED_BYTES else 0
            kernels[name] = Kernel(
                name=name,
                section=s,
                symbol=sym,
                registers=glob.get(EIATTR_REGCOUNT),
                frame_bytes=glob.get(EIATTR_FRAME_SIZE),
                min_stack_bytes=glob.get(EIATTR_MIN_STACK_SIZE),
                max_stack_bytes=glob.get(EIATTR_MAX_STACK_SIZE),
                max_registers=loc_vals.get(EIATTR_MAXREG_COUNT),
                num_barriers=loc_vals.get(EIATTR_NUM_BARRIERS),
                shared_section_bytes=shared_size,
                shared_bytes=shared_size - reserved,
                attributes=local,
            )
        return kernels

    # ------------------------------------------------------------------ access

    def section(self, name: str) -> Section:
        try:
            return self._by_name[name]
        except KeyError:
            raise CubinError(f"cubin has no section {name!r}") from None

    def kernel(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            have = ", ".join(sorted(self.kernels)) or "none"
            raise CubinError(f"cubin has no kernel {name!r} (kernels: {have})") from None

    def text(self, kernel: str) -> bytes:
        """The kernel's code: its ``.text.<name>`` section bytes."""
        k = self.kernel(kernel)
        return self.data[k.text_offset : k.text_offset + k.text_size]

    def patched(self, changes: Mapping[str, Mapping[int, bytes]]) -> bytes:
        """A copy of the cubin with instructions replaced: ``{kernel: {index: 16 bytes}}``.

        Only the bytes of the named instructions are written; every other byte of the file is
        copied unchanged (no section moves, no header rewrite).
        """
        out = bytearray(self.data)
        for name, instrs in changes.items():
            k = self.kernel(name)
            n = k.instruction_count
            for index, word in instrs.items():
                if not 0 <= index < n:
                    raise CubinError(f"instruction {index} is outside kernel {name!r} ({n} instructions)")
                if len(word) != INSTRUCTION_BYTES:
                    raise CubinError(f"an instruction is {INSTRUCTION_BYTES} bytes, got {len(word)}")
                off = k.text_offset + index * INSTRUCTION_BYTES
                out[off : off + INSTRUCTION_BYTES] = word
        return bytes(out)


def parse_info(blob: bytes, section: str = "") -> list[InfoRecord]:
    """Split a ``.nv.info`` section into EIATTR records."""
    out = []
    pos = 0
    while pos + 4 <= len(blob):
        fmt, attr = blob[pos], blob[pos + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", blob, pos + 2)
            if pos + 4 + size > len(blob):
                raise CubinError(f"{section}: EIATTR record at {pos:#x} runs past the section")
            out.append(InfoRecord(section, pos, fmt, attr, None, blob[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            if fmt == EIFMT_HVAL:
                value = struct.unpack_from("<H", blob, pos + 2)[0]
            elif fmt == EIFMT_BVAL:
                value = blob[pos + 2]
            else:
                value = None
            out.append(InfoRecord(section, pos, fmt, attr, value, b""))
            pos += 4
        else:
            raise CubinError(f"{section}: unknown EIATTR format {fmt:#x} at offset {pos:#x}")
    return out


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\x00", offset)
    if end < 0:
        end = len(table)
    return table[offset:end].decode("utf-8", errors="replace")
