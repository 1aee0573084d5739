"""fp8_gemm_nt_skip_head_mid (dgx/skip_head_mid.py): the FP8 GEMM kernel with its output columns mapped into a
(left, mid, right) head layout. Warm-up kind ``dense_skip_head_mid`` (n, k, head_splits [left, mid, right], max_m),
its representative kernel, torch operator and DeepGEMM's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import enumeration, heuristics, jit
from ..kernels.fp8_gemm import validate_head_splits
from ..problems import ProblemError, check_problem
from .base import Family, Inspected, Kind, Label, positive_field, sources_of

KIND = "dense_skip_head_mid"


@dataclass(frozen=True)
class SkipSpec:
    kind: str
    n: int
    k: int
    head_splits: tuple[int, int, int]
    max_m: int | None
    m: int | None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} n={self.n} k={self.k} head_splits={list(self.head_splits)}" + (
            f" max_m={self.max_m}" if self.max_m else (f" m={self.m}" if self.m else ""))


def _parse(entry: Mapping[str, Any], label: Label) -> SkipSpec:
    n = positive_field(entry, "n", label)
    k = positive_field(entry, "k", label)
    splits = entry.get("head_splits")
    if (not isinstance(splits, (list, tuple)) or len(splits) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in splits)):
        raise ProblemError(label("head_splits"), f"expected [left, mid, right] non-negative integers, got {splits!r}")
    max_m = positive_field(entry, "max_m", label, required=False)
    m = positive_field(entry, "m", label, required=False)
    check_problem("dense", n=n, k=k, m=max_m, m_field="max_m", label=label)
    problem = validate_head_splits(tuple(splits), n, 8)
    if problem:
        raise ProblemError(label("head_splits"), problem)
    return SkipSpec(KIND, n, k, tuple(splits), max_m, m, entry.get("note", ""))


def _pieces(spec: SkipSpec, default_max_m: int) -> list[tuple[Any, int]]:
    limit = spec.max_m or spec.m or default_max_m
    return [((limit, lo, hi), count) for lo, hi, count in enumeration.windows(enumeration.ROWS, None, limit)]


def _kernels(spec: SkipSpec, piece: tuple[int, int, int], num_sms: int) -> list[jit.KernelSource]:
    limit, lo, hi = piece
    ms = enumeration.m_values(enumeration.ROWS, None, limit, lo, hi)
    return sources_of(list(dict.fromkeys(heuristics.choose_skip_head_mid(m, spec.n, spec.k, spec.head_splits, num_sms)
                                         for m in ms)))


def _inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
    raise ValueError(f"--kind {KIND}: dgx inspect has no option for the head splits; inspect the kernel with "
                     "--key (dgx cache list shows it after a warm-up)")


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    return [("V3.2 q_b 128x(192+64) M4096", heuristics.choose_skip_head_mid(4096, 128 * 192, 1536, (128, 64, 64),
                                                                         num_sms))]


FAMILY = Family(
    "skip_head_mid",
    (Kind(KIND, "skip_head_mid", ("n", "k", "head_splits", "max_m", "m"), _parse, _pieces, _kernels, (), _inspect),),
    representatives, torch_ops="dgx.families.skip_head_mid_torch", api="dgx.skip_head_mid",
    deep_gemm="dgx.families.skip_head_mid_torch",
)
