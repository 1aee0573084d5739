"""dgx.kernels.interface: one description of a kernel's parameters renders the C++ side and packs the launch
arguments by name; NVRTC checks the layout Python computed."""

from __future__ import annotations

import ast
import ctypes
import struct
from pathlib import Path

import pytest

from dgx import compiler
from dgx.errors import CompileError
from dgx.kernels.fp8_gemm import INTERFACE, GemmConfig
from dgx.kernels.interface import TENSOR_MAP, KernelInterface, Param

SMALL = KernelInterface(
    "ProbeParams",
    (
        Param("flag", "int"),
        Param("map", TENSOR_MAP),
        Param("scale", "float"),
        Param("ptr", "const float*"),
        Param("count", "int"),
        Param("stride", "long long"),
    ),
)


class FakeTensorMap:
    """What pack reads of a CUtensorMap: the address of its 128 bytes."""

    def __init__(self, fill: int):
        self.raw = (ctypes.c_ubyte * 128)(*([fill] * 128))

    def getPtr(self) -> int:
        return ctypes.addressof(self.raw)


def test_offsets_follow_the_c_layout_rules():
    # Each member at a multiple of its alignment (tensor maps: 64), the size a multiple of the largest.
    assert SMALL.offsets == (0, 64, 192, 200, 208, 216)
    assert SMALL.size == 256


def test_the_gemm_interface_keeps_the_members_and_offsets_of_the_kernel_parameters():
    names = [p.name for p in INTERFACE.params]
    assert names == ["tmap_a", "tmap_b", "tmap_d", "tmap_sfa", "tmap_sfb", "sfb", "sfa", "sfa_rows", "sfa_stride",
                     "m", "grouped_layout", "num_groups", "d_ptr", "ld_d", "accumulate", "group_maps"]
    assert INTERFACE.offsets == (0, 128, 256, 384, 512, 640, 648, 656, 660, 664, 672, 680, 688, 696, 704, 712)


def _member(pack, index: int, size: int) -> bytes:
    return ctypes.string_at(pack._pointers[index], size)


def test_pack_fills_every_member_by_name_and_points_at_each():
    values = dict(flag=7, map=FakeTensorMap(0xAB), scale=0.5, ptr=0x7F00_0000_1000, count=-3, stride=1 << 40)
    pack = SMALL.pack(**dict(reversed(list(values.items()))))  # order of the keywords is free
    assert len(pack._pointers) == len(SMALL.params)
    assert struct.unpack("<i", _member(pack, 0, 4)) == (7,)
    assert _member(pack, 1, 128) == bytes([0xAB] * 128)
    assert pack._pointers[1] % 64 == 0  # tensor maps 64-byte aligned
    assert struct.unpack("<f", _member(pack, 2, 4)) == (0.5,)
    assert struct.unpack("<Q", _member(pack, 3, 8)) == (0x7F00_0000_1000,)
    assert struct.unpack("<i", _member(pack, 4, 4)) == (-3,)
    assert struct.unpack("<q", _member(pack, 5, 8)) == (1 << 40,)
    # The pointers are the members of one image, at the struct's offsets.
    base = pack._pointers[0]
    assert [pack._pointers[i] - base for i in range(len(SMALL.params))] == list(SMALL.offsets)


def test_pack_names_missing_and_unknown_members():
    full = dict(flag=1, map=FakeTensorMap(0), scale=1.0, ptr=0, count=0, stride=0)
    missing = dict(full)
    del missing["count"]
    with pytest.raises(ValueError, match=r"missing values for \['count'\]"):
        SMALL.pack(**missing)
    with pytest.raises(ValueError, match=r"unknown names \['cuont'\]"):
        SMALL.pack(**full, cuont=1)


def test_descriptions_are_checked():
    with pytest.raises(ValueError, match="C\\+\\+ identifier"):
        Param("not a name", "int")
    with pytest.raises(ValueError, match="expected a type"):
        Param("x", "double")
    with pytest.raises(ValueError, match="repeat"):
        KernelInterface("Twice", (Param("x", "int"), Param("x", "int")))


PROBE_BODY = """#include "common.cuh"
template <typename Params>
__device__ __forceinline__ void probe_body(const Params& params) {
    if (params.flag) const_cast<float*>(params.ptr)[params.count] = params.scale * params.stride;
}
"""


def test_nvrtc_compiles_the_rendered_entry_and_checks_the_layout():
    source = PROBE_BODY + SMALL.render_entry("dgx_interface_probe", 128, "probe_body")
    assert "static_assert(sizeof(float) == 4 && alignof(float) == 4" in source
    assert "static_assert(sizeof(ProbeParams) == " in source
    assert "const __grid_constant__ dgx::TensorMap map" in source
    compiler.compile_cubin(source, "dgx_interface_probe", compiler.compile_options("sm_90a"))
    # A member type whose size Python gets wrong does not compile: the static_assert names the type.
    class WrongSize(Param):
        @property
        def size(self) -> int:
            return 8 if self.ctype == "float" else super().size

    wrong = KernelInterface(SMALL.struct_name, tuple(WrongSize(p.name, p.ctype) for p in SMALL.params))
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(PROBE_BODY + wrong.render_entry("dgx_interface_probe", 128, "probe_body"),
                               "dgx_interface_probe", compiler.compile_options("sm_90a"))
    assert "lays out float differently" in info.value.log


def test_the_gemm_kernel_is_rendered_from_its_interface():
    source = GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5).render().source
    assert INTERFACE.render_entry("X", 1, "Y").split('extern "C"')[0] in source
    assert "Fp8GemmParamsView{tmap_a, tmap_b, tmap_d, tmap_sfa, tmap_sfb, sfb, sfa," in source


def test_no_call_site_builds_operands_by_position():
    """Operands has 19 fields, several of one type: every construction names them."""
    root = Path(__file__).resolve().parents[1] / "dgx"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Operands":
                if node.args:
                    offenders.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert not offenders, offenders
