"""The standalone SwiGLU + FP8 quantisation family (ptx/silu_mul_quant.cuh, dgx/kernels/silu_mul_quant.py, entry
point dgx/silu_mul_quant.py): for warm-up (kind ``silu_mul_quant``: optional ``scales`` and ``clamp``; the kernels
are shape-independent), ``dgx inspect``, the SASS manifest and torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import jit
from ..kernels import silu_mul_quant as kernels_module
from ..problems import ProblemError
from .base import Family, Inspected, Kind, Label, sources_of

KIND = "silu_mul_quant"


@dataclass(frozen=True)
class SmqSpec:
    """A warm-up entry: the scale layouts and clamp settings whose kernels to build (every one when absent)."""

    kind: str
    scales: tuple[str, ...]
    clamp: tuple[bool, ...]
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} scales={'/'.join(self.scales)} clamp={'/'.join(map(str, self.clamp))}"


def _parse(entry: Mapping[str, Any], label: Label) -> SmqSpec:
    scales = entry.get("scales")
    if scales is None:
        modes = kernels_module.SCALE_MODES
    elif scales in kernels_module.SCALE_MODES:
        modes = (scales,)
    else:
        raise ProblemError(label("scales"), f"expected one of {', '.join(kernels_module.SCALE_MODES)} (or no field: "
                                            f"all), got {scales!r}")
    clamp = entry.get("clamp")
    if clamp is not None and not isinstance(clamp, bool):
        raise ProblemError(label("clamp"), f"expected true or false (a swiglu_limit or none; no field: both), got "
                                           f"{clamp!r}")
    return SmqSpec(KIND, tuple(modes), (False, True) if clamp is None else (clamp,), entry.get("note", ""))


def _pieces(spec: SmqSpec, default_max_m: int) -> list[tuple[Any, int]]:
    return [(None, 1)]


def _kernels(spec: SmqSpec, piece: Any, num_sms: int) -> list[jit.KernelSource]:
    return sources_of(kernels_module.warmup_configs(spec.clamp, spec.scales))


def _inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
    config = kernels_module.SiluMulQuantConfig()
    src = config.render()
    return Inspected(src, f"{KIND} (FP32 scales, no clamp, {config.unroll} units a half-warp; other variants: --key "
                          f"after a warm-up) ({arch}): {src.name}; key {jit.kernel_key(src, arch)[:16]}")


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    config = kernels_module.SiluMulQuantConfig
    return [
        ("fp32 scales, 4 units", config(False, "fp32", 4)),
        ("fp32 scales, 1 unit", config(False, "fp32", 1)),
        ("fp32 scales, 2 units", config(False, "fp32", 2)),
        ("ue8m0 scales, clamp", config(True, "ue8m0", 4)),
        ("packed ue8m0, clamp", config(True, "packed_ue8m0", 4)),
    ]


FAMILY = Family(
    "silu_mul_quant",
    (Kind(KIND, "silu_mul_quant", ("scales", "clamp"), _parse, _pieces, _kernels, (), _inspect),),
    representatives, torch_ops="dgx.families.silu_mul_quant_torch", api="dgx.moe_activation",
)
