"""One description of a kernel's launch contract, from which the C++ side and the launch arguments are both made.

A :class:`KernelInterface` lists a kernel's parameters once (name and C++ type, in order). That list renders
  - a struct of the members by value, with ``static_assert`` s that pin every member's offset and the size,
    so the compiler checks Python's layout (kernel parameters are laid out by the same rules);
  - a view struct the kernel body reads the members from by name (tensor maps by reference to their
    ``__grid_constant__`` parameters, never copied; the rest by value);
  - the ``extern "C"`` entry point, which takes the members as parameters in order and hands the view to the
    kernel body in ``ptx/``;
  - the launch argument: one image of the struct, filled by member name (:meth:`KernelInterface.pack`), and
    a pointer per parameter into it.
Adding a parameter is one line in the family's interface plus its use in the body; a value left out or
misspelled at the call site is an error that names it.

The entry takes separate parameters rather than one struct parameter: the bytes and their constant-bank
offsets are the same either way, but one struct parameter changes how the PTX loads them, and with that
ptxas' schedule of some kernels.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field

from .. import runtime
from ..intmath import round_up

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
    pointer, or ``dgx::TensorMap``: a 128-byte CUtensorMap, 64-byte aligned), and the value a call that does not
    give it passes (None: every call must give it)."""

    name: str
    ctype: str
    default: int | float | None = None

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
    # pack's plan: every scalar member through one struct (zeros between them), then the tensor maps' bytes
    _scalars: struct.Struct = field(init=False, repr=False, compare=False)
    _scalar_names: tuple[tuple[str, bool], ...] = field(init=False, repr=False, compare=False)  # (name, is float)
    _maps: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)  # (name, offset)

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.struct_name}: parameter names repeat: {names}")
        offsets, offset = [], 0
        for p in self.params:
            offset = round_up(offset, p.align)
            offsets.append(offset)
            offset += p.size
        align = max((p.align for p in self.params), default=1)
        object.__setattr__(self, "offsets", tuple(offsets))
        object.__setattr__(self, "size", round_up(offset, align))
        fmt, pos, scalars, maps = "<", 0, [], []
        for p, off in zip(self.params, offsets):
            if p.ctype == TENSOR_MAP:
                maps.append((p.name, off))
                continue
            code = "Q" if p.ctype.endswith("*") else _SCALARS[p.ctype]
            fmt += (f"{off - pos}x" if off > pos else "") + code
            pos = off + p.size
            scalars.append((p.name, code == "f"))
        object.__setattr__(self, "_scalars", struct.Struct(fmt))
        object.__setattr__(self, "_scalar_names", tuple(scalars))
        object.__setattr__(self, "_maps", tuple(maps))

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

    @property
    def view_name(self) -> str:
        """The C++ struct the kernel body reads: tensor maps by reference, the other members by value."""
        return self.struct_name + "View"

    def render_view(self) -> str:
        """The struct handed to the kernel body: each tensor map a reference to its ``__grid_constant__``
        parameter (never copied), each other member its value."""
        members = "".join(
            f"    const {p.ctype}& {p.name};\n" if p.ctype == TENSOR_MAP else f"    {p.ctype} {p.name};\n"
            for p in self.params
        )
        return f"struct {self.view_name} {{\n{members}}};\n"

    def render_entry(self, kernel_name: str, threads: int, body: str, min_blocks: int = 1) -> str:
        """The structs and an ``extern "C"`` kernel `kernel_name` that hands the view of its parameters to
        `body` (a device function taking ``const View&``, e.g. a template instantiation).

        The kernel takes the members as separate parameters, in order: the same bytes at the same offsets as
        one struct parameter (:meth:`pack` fills them from one image), and the same PTX entry as a kernel
        written with separate parameters (one struct parameter changes the PTX's parameter loads, and with
        them ptxas' schedule of some kernels). `min_blocks`: the CTAs an SM should hold at once (``__launch_bounds__``'
        second argument: ptxas keeps the registers per thread within the register file's share)."""
        params = ",\n".join(
            f"    const __grid_constant__ {p.ctype} {p.name}" if p.ctype == TENSOR_MAP else f"    {p.ctype} {p.name}"
            for p in self.params
        )
        names = ", ".join(p.name for p in self.params)
        return (
            self.render_struct()
            + self.render_view()
            + f'extern "C" __global__ void __launch_bounds__({threads}, {min_blocks}) {kernel_name}(\n{params}) {{\n'
            f"  {body}({self.view_name}{{{names}}});\n"
            "}\n"
        )

    def pack(self, **values: object) -> runtime.ParamPack:
        """The launch arguments: every member's value by name (tensor maps as CUtensorMap objects, pointers
        as integer addresses), packed once into the struct's image. Raises ValueError naming a missing or
        unknown member."""
        if len(values) != len(self.params) or any(p.name not in values for p in self.params):
            missing = [p.name for p in self.params if p.name not in values]
            unknown = sorted(set(values) - {p.name for p in self.params})
            raise ValueError(f"{self.struct_name}: missing values for {missing}, unknown names {unknown}")
        buf = ctypes.create_string_buffer(self.size)
        base = ctypes.addressof(buf)
        # One struct for every scalar (it writes zeros over the maps' places), then each map's 128 bytes.
        self._scalars.pack_into(buf, 0, *[float(values[name]) if is_float else int(values[name])
                                          for name, is_float in self._scalar_names])
        for name, off in self._maps:
            ctypes.memmove(base + off, values[name].getPtr(), 128)
        return runtime.ParamPack.of_members(buf.raw, self.offsets)
