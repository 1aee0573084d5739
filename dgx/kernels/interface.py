"""One description of a kernel's launch contract, from which the C++ side and the launch arguments are both made.

A kernel takes a single ``__grid_constant__`` parameter: a struct whose members are listed once, here, by a
:class:`KernelInterface`. That one list renders the struct (with ``static_assert`` s that pin every member's
offset, so the compiler checks Python's layout), the ``extern "C"`` entry point that forwards the struct to
the kernel body in ``ptx/``, and the byte image that ``cuLaunchKernelEx`` receives, filled by member name.
Adding a parameter is one line in the family's interface plus its use; a value left out or misspelled at the
call site is an error that names it.

Struct members follow C++ layout rules (each at a multiple of its alignment, in order), the same rules the
CUDA ABI uses for separate kernel parameters, so a kernel that moves from separate parameters to the struct
keeps its constant-bank offsets and its SASS.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field

from .. import runtime

TENSOR_MAP = "dgx::TensorMap"

# C++ type -> (struct format, size and alignment in bytes). Pointers of any type travel as 64-bit addresses.
_SCALARS: dict[str, str] = {
    "int": "i",
    "unsigned": "I",
    "float": "f",
    "long long": "q",
    "unsigned long long": "Q",
}


@dataclass(frozen=True)
class Param:
    """One member of a kernel's parameter struct: its name and C++ type (a scalar of ``_SCALARS``, a
    pointer, or ``dgx::TensorMap``: a 128-byte CUtensorMap, 64-byte aligned)."""

    name: str
    ctype: str

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"kernel parameter name: expected a C++ identifier; got {self.name!r}")
        if not (self.ctype == TENSOR_MAP or self.ctype in _SCALARS or self.ctype.endswith("*")):
            raise ValueError(
                f"kernel parameter {self.name}: expected a type among {TENSOR_MAP}, a pointer or "
                f"{', '.join(_SCALARS)}; got {self.ctype!r}"
            )

    @property
    def size(self) -> int:
        if self.ctype == TENSOR_MAP:
            return 128
        return 8 if self.ctype.endswith("*") else struct.calcsize(_SCALARS[self.ctype])

    @property
    def align(self) -> int:
        return 64 if self.ctype == TENSOR_MAP else self.size


@dataclass(frozen=True)
class KernelInterface:
    """The parameter struct of one kernel family (``struct_name``, members in order)."""

    struct_name: str
    params: tuple[Param, ...]
    offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.struct_name}: parameter names repeat: {names}")
        offsets, offset = [], 0
        for p in self.params:
            offset = -(-offset // p.align) * p.align
            offsets.append(offset)
            offset += p.size
        align = max((p.align for p in self.params), default=1)
        object.__setattr__(self, "offsets", tuple(offsets))
        object.__setattr__(self, "size", -(-offset // align) * align)

    def render_struct(self) -> str:
        """The struct's C++ definition. Members of a standard-layout struct sit in order, each at the next multiple
        of its alignment, so checking every member type's size and alignment (and the total) at compile time pins
        the offsets :attr:`offsets` computed. (NVRTC 13.0 has no usable offsetof to check them one by one.)"""
        members = "".join(f"    {p.ctype} {p.name};\n" for p in self.params)
        types = {p.ctype: p for p in self.params}
        checks = "".join(
            f"static_assert(sizeof({t}) == {p.size} && alignof({t}) == {p.align}, "
            f'"{self.struct_name}: dgx.kernels.interface lays out {t} differently");\n'
            for t, p in types.items()
        )
        return (
            f"struct {self.struct_name} {{\n{members}}};\n{checks}"
            f'static_assert(sizeof({self.struct_name}) == {self.size}, "{self.struct_name}: size differs from Python\'s");\n'
        )

    def render_entry(self, kernel_name: str, threads: int, body: str) -> str:
        """The struct and an ``extern "C"`` kernel `kernel_name` that hands it to `body` (a device function
        taking ``const Struct&``, e.g. a template instantiation)."""
        return (
            self.render_struct()
            + f'extern "C" __global__ void __launch_bounds__({threads}, 1) {kernel_name}(\n'
            f"    const __grid_constant__ {self.struct_name} params) {{\n"
            f"  {body}(params);\n"
            "}\n"
        )

    def pack(self, **values: object) -> runtime.ParamPack:
        """The launch argument: every member's value by name (tensor maps as CUtensorMap objects, pointers
        as integer addresses). Raises ValueError naming a missing or unknown member."""
        missing = [p.name for p in self.params if p.name not in values]
        unknown = sorted(set(values) - {p.name for p in self.params})
        if missing or unknown:
            raise ValueError(f"{self.struct_name}: missing values for {missing}, unknown names {unknown}")
        buf = bytearray(self.size)
        for p, off in zip(self.params, self.offsets):
            v = values[p.name]
            if p.ctype == TENSOR_MAP:
                ctypes.memmove((ctypes.c_char * 128).from_buffer(buf, off), v.getPtr(), 128)
            else:
                fmt = "Q" if p.ctype.endswith("*") else _SCALARS[p.ctype]
                struct.pack_into("<" + fmt, buf, off, int(v) if fmt != "f" else float(v))
        return runtime.ParamPack.of_struct(bytes(buf))
