"""The HyperConnection pre-norm GEMM family (ptx/hc_prenorm.cuh, dgx/kernels/hc_prenorm.py, entry point in
dgx/hc_prenorm.py): d = a . b^T in TF32 with the rows' sums of squares, for warm-up (kind ``hc_prenorm``: n, k,
num_splits, max_m), ``dgx inspect``, the SASS manifest, torch and DeepGEMM's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import jit
from ..kernels import hc_prenorm as kernels_module
from ..problems import ProblemError
from .base import Family, Inspected, Kind, Label, bound_label, positive_field, sources_of

KIND = "hc_prenorm"
MAX_N = 64


@dataclass(frozen=True)
class HcSpec:
    kind: str
    n: int
    k: int
    num_splits: int
    max_m: int | None
    m: int | None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} n={self.n} k={self.k} splits={self.num_splits}" + bound_label("m", self.max_m, self.m)


def _parse(entry: Mapping[str, Any], label: Label) -> HcSpec:
    n = positive_field(entry, "n", label)
    k = positive_field(entry, "k", label)
    if n > MAX_N:
        raise ProblemError(label("n"), f"expected at most {MAX_N} (b's rows: the HyperConnection streams), got {n}")
    if k % 8:
        raise ProblemError(label("k"), f"expected a multiple of 8 (16-byte BF16 rows of a for TMA), got {k}")
    splits = positive_field(entry, "num_splits", label, required=False) or 1
    return HcSpec(KIND, n, k, splits, positive_field(entry, "max_m", label, required=False),
                  positive_field(entry, "m", label, required=False), entry.get("note", ""))


def _pieces(spec: HcSpec, default_max_m: int) -> list[tuple[Any, int]]:
    return [(spec.max_m or spec.m or default_max_m, 1)]


def _kernels(spec: HcSpec, max_m: int, num_sms: int) -> list[jit.KernelSource]:
    return sources_of(kernels_module.warmup_configs(spec.n, spec.k, spec.num_splits, max_m, num_sms))


def _inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
    m, n, k = options["gemm"]
    flags = {"n": "--gemm N", "k": "--gemm K"}
    _parse({"n": n, "k": k}, lambda f: flags.get(f, f))
    c = kernels_module.choose_config(m, n, k, 1, num_sms)
    src = c.render()
    return Inspected(src, f"{KIND} M={m} N={n} K={k} on {num_sms} SMs ({arch}): {src.name}, {src.dynamic_smem} "
                          f"bytes of dynamic shared memory; key {jit.kernel_key(src, arch)[:16]}")


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    choose = kernels_module.choose_config
    return [
        ("N24 K28672 M8192", choose(8192, 24, 28672, 1, num_sms)),
        ("N24 K7168 M4096", choose(4096, 24, 7168, 1, num_sms)),
        ("N24 K7168 M64 16 splits", choose(64, 24, 7168, 16, num_sms)),
        ("N64 K7168 M16", choose(16, 64, 7168, 1, num_sms)),
    ]


FAMILY = Family(
    "hc_prenorm",
    (Kind(KIND, "hc_prenorm", ("n", "k", "num_splits", "max_m", "m"), _parse, _pieces, _kernels,
          ("gemm", "num_sms"), _inspect),),
    representatives, torch_ops="dgx.families.hc_prenorm_torch", api="dgx.hc_prenorm",
    deep_gemm="dgx.families.hc_prenorm_torch",
)
