"""One case of the single-operation suites of this round's families (BF16 GEMMs, einsums, the HC pre-norm GEMM,
skip-head-mid): what it computes, its sizes, FLOPs and bytes, and which measured ceiling bounds its compute.

Pure Python (no torch): CPU-testable. The suites' modules (:mod:`dgx.bench.bf16_suites`,
:mod:`dgx.bench.v32_suites`) build the cases and count their FLOPs and bytes once, so a recorded case says exactly
what was measured and the reports need no knowledge of the operation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

BF16_CEILING = "bf16_tflops"
FP8_CEILING = "fp8_tflops"
CEILINGS = (BF16_CEILING, FP8_CEILING)


@dataclasses.dataclass(frozen=True)
class OpShape:
    """One case: ``suite``, the operation's ``form`` (a GEMM layout, an einsum expression), its named sizes
    ``dims`` ((name, value) pairs), the group sizes where it has groups, its FLOPs and its bytes moved at least.

    ``compute_ceiling`` names the ceiling (``bf16_tflops`` or ``fp8_tflops``, measured each run) its compute is
    measured against; the copy bandwidth bounds its bytes."""

    suite: str
    form: str
    dims: tuple[tuple[str, int], ...]
    flops: int
    bytes_moved: int
    compute_ceiling: str = BF16_CEILING
    group_ms: tuple[int, ...] = ()
    group_ks: tuple[int, ...] = ()
    max_m: int | None = None
    out_dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.compute_ceiling not in CEILINGS:
            raise ValueError(f"OpShape: compute_ceiling: expected one of {CEILINGS}, got {self.compute_ceiling!r}")
        if self.flops <= 0 or self.bytes_moved <= 0:
            raise ValueError(f"OpShape: expected positive flops and bytes, got {self.flops}, {self.bytes_moved}")

    def dim(self, name: str, default: int | None = None) -> int | None:
        return dict(self.dims).get(name, default)

    # the GEMM suites' names for the sizes (reports read them)
    @property
    def m(self) -> int:
        return self.dim("m", 0) or 0

    @property
    def n(self) -> int:
        return self.dim("n", 0) or 0

    @property
    def k(self) -> int:
        return self.dim("k", 0) or 0

    @property
    def groups(self) -> int:
        return self.dim("groups", 1) or 1

    @property
    def valid_m(self) -> int:
        return sum(self.group_ms) if self.group_ms else self.m

    @property
    def label(self) -> str:
        sizes = " ".join(f"{name}={value}" for name, value in self.dims if name != "groups")
        grouped = f"{self.groups}g " if self.dim("groups") else ""
        out = " FP32" if self.out_dtype == "float32" else ""
        return f"{self.form} {grouped}{sizes}{out}".strip()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["dims"] = [list(x) for x in self.dims]
        d["group_ms"] = list(self.group_ms)
        d["group_ks"] = list(self.group_ks)
        d.update(label=self.label, m=self.m, n=self.n, k=self.k, groups=self.groups, valid_m=self.valid_m,
                 bytes=self.bytes_moved)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OpShape":
        return cls(suite=d["suite"], form=d["form"], dims=tuple((str(n), int(v)) for n, v in d["dims"]),
                   flops=int(d["flops"]), bytes_moved=int(d["bytes_moved"]),
                   compute_ceiling=d.get("compute_ceiling", BF16_CEILING),
                   group_ms=tuple(int(x) for x in d.get("group_ms", ())),
                   group_ks=tuple(int(x) for x in d.get("group_ks", ())), max_m=d.get("max_m"),
                   out_dtype=d.get("out_dtype", "bfloat16"))


def is_op(shape: object) -> bool:
    """Whether a case belongs to one of the single-operation suites."""
    return isinstance(shape, OpShape)
