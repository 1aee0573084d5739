"""Benchmark results: what was measured (recorded), and what is derived from it (metrics).

Pure Python, no torch: reports can be rendered from a recorded JSON on any machine, and the CPU
tests build synthetic results here.

Recorded: per repeat, the ceilings and for each case and implementation the median / min / max µs
of the timed calls, the correctness figure (``calc_diff``) and a status with its reason.
Derived (:func:`summarize`): per case the median over repeats, TFLOPS, GB/s, which ceiling bounds
the shape and the fraction of it reached, for memory-bound GEMM cases the share of the device's HBM peak
(:mod:`dgx.bench.hbm`; none for a device it does not know), speedups of dgx over each peer, the ratio to
DeepGEMM's anchor (on the run's clock); per suite the geometric means, and their spread over repeats.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Iterable

from .hbm import hbm_peak_gbps
from .mqa_suites import MQA_SUITES, PAGED_MQA, MqaShape
from .suites import SUITES, Shape, anchor_for

SCHEMA = "dgx-bench/1"

DGX = "dgx"
CUBLASLT = "cublaslt"
TRITON = "triton"
BF16 = "bf16"
FP8_TENSOR = "fp8_tensor"
TORCH_MQA = "torch"
DEEPGEMM = "deepgemm"
DGX_UNFUSED = "dgx_unfused"
DEEPGEMM_UNFUSED = "deepgemm_unfused"
TORCH_BF16 = "torch_bf16"
TORCH_GROUPED = "torch_grouped"
CUBLAS_LOOP = "cublas_loop"
TORCH_EINSUM = "torch_einsum"
GEMM_LOOP = "gemm_loop"
TORCH_FP32 = "torch_fp32"
FP8_GEMM_NT = "fp8_gemm_nt"
FP8_GEMM_COPY = "fp8_gemm_copy"

IMPLS = (DGX, DEEPGEMM, CUBLASLT, TRITON, BF16, FP8_TENSOR, TORCH_MQA, DGX_UNFUSED, DEEPGEMM_UNFUSED, TORCH_BF16,
         TORCH_GROUPED, CUBLAS_LOOP, TORCH_EINSUM, GEMM_LOOP, TORCH_FP32, FP8_GEMM_NT, FP8_GEMM_COPY)

IMPL_LABELS = {
    DGX: "dgx",
    CUBLASLT: "cuBLASLt blockwise",
    TRITON: "Triton blockwise",
    BF16: "BF16 cuBLAS",
    FP8_TENSOR: "FP8 per-tensor cuBLASLt",
    TORCH_MQA: "torch reference (BF16 matmul per chunk)",
    DEEPGEMM: "DeepGEMM (this run)",
    DGX_UNFUSED: "dgx unfused (GEMM, silu_mul_quant, GEMM)",
    DEEPGEMM_UNFUSED: "DeepGEMM GEMMs + dgx silu_mul_quant",
    TORCH_BF16: "torch BF16 layer",
    TORCH_GROUPED: "torch._grouped_mm (else a loop of cuBLAS calls)",
    CUBLAS_LOOP: "a loop of cuBLAS calls per group",
    TORCH_EINSUM: "torch.einsum / bmm (BF16, cuBLAS)",
    GEMM_LOOP: "dgx.fp8_gemm_nt once per head",
    TORCH_FP32: "a.float() @ b.T + squared sum (torch)",
    FP8_GEMM_NT: "dgx.fp8_gemm_nt, same shape",
    FP8_GEMM_COPY: "dgx.fp8_gemm_nt + copy into the padded layout",
}
IMPL_SHORT = {
    DGX: "dgx",
    CUBLASLT: "cuBLASLt",
    TRITON: "Triton",
    BF16: "BF16",
    FP8_TENSOR: "FP8-tensor",
    TORCH_MQA: "torch",
    DEEPGEMM: "DeepGEMM",
    DGX_UNFUSED: "dgx-unfused",
    DEEPGEMM_UNFUSED: "DeepGEMM-unfused",
    TORCH_BF16: "torch-BF16",
    TORCH_GROUPED: "grouped_mm",
    CUBLAS_LOOP: "cuBLAS-loop",
    TORCH_EINSUM: "torch-einsum",
    GEMM_LOOP: "GEMM-loop",
    TORCH_FP32: "torch-FP32",
    FP8_GEMM_NT: "fp8_gemm_nt",
    FP8_GEMM_COPY: "GEMM+copy",
}

OK = "ok"
FAILED = "failed"
UNAVAILABLE = "unavailable"
NOT_RUN = "not run"



# --------------------------------------------------------------------------------------------------
# recorded


@dataclasses.dataclass
class ImplResult:
    """One implementation on one case in one repeat."""

    name: str
    status: str = NOT_RUN
    reason: str = ""
    us: float | None = None
    us_min: float | None = None
    us_max: float | None = None
    diff: float | None = None
    tolerance: float | None = None
    note: str = ""
    config: str = ""
    samples_us: list[float] = dataclasses.field(default_factory=list)  # every timed call
    tried: list[str] = dataclasses.field(default_factory=list)  # variants refused before the one timed

    @property
    def ok(self) -> bool:
        return self.status == OK and self.us is not None and self.us > 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ImplResult":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


@dataclasses.dataclass
class CaseResult:
    shape: Shape | MqaShape
    impls: dict[str, ImplResult] = dataclasses.field(default_factory=dict)
    read_floor_us: float | None = None  # memory-bound GEMM cases: a read-only kernel over the case's bytes (read_floor)
    order: list[str] = dataclasses.field(default_factory=list)  # the implementations in the order they ran

    def to_dict(self) -> dict[str, Any]:
        d = {"shape": self.shape.to_dict(), "impls": {k: v.to_dict() for k, v in self.impls.items()}}
        if self.read_floor_us is not None:
            d["read_floor_us"] = self.read_floor_us
        if self.order:
            d["order"] = list(self.order)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseResult":
        return cls(Shape.from_dict(d["shape"]), {k: ImplResult.from_dict(v) for k, v in d["impls"].items()},
                   d.get("read_floor_us"), list(d.get("order", [])))


@dataclasses.dataclass
class HostCost:
    """CPU µs per call over many calls of a cached kernel, for one implementation in one call pattern
    (dgx.bench.host_patterns: the same tensors every call, fresh outputs, changing M, ...)."""

    name: str
    status: str = NOT_RUN
    reason: str = ""
    cpu_us: float | None = None  # GPU held busy (torch.cuda._sleep) so the host never waits on it
    plain_us: float | None = None  # plain back-to-back loop: CPU time per call
    wall_us: float | None = None  # plain loop up to the synchronisation after it
    calls: int = 0
    shape: str = ""
    held: bool = False  # cpu_us measured with the GPU held busy
    saturated: bool = False  # the launch queue may have filled: cpu_us includes waiting on the GPU
    pattern: str = "dense/same"  # KIND/NAME of dgx.bench.host_patterns (records before patterns: the same tensors)
    label: str = ""  # what the pattern does
    prep_us: float | None = None  # the pattern's own tensor building per call, already taken off the figures
    goal_us: float | None = None  # what dgx aims for in this pattern

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HostCost":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


@dataclasses.dataclass
class RepeatResult:
    ceilings: dict[str, float] = dataclasses.field(default_factory=dict)
    ceiling_notes: dict[str, str] = dataclasses.field(default_factory=dict)
    cases: list[CaseResult] = dataclasses.field(default_factory=list)
    host: list[HostCost] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ceilings": dict(self.ceilings),
            "ceiling_notes": dict(self.ceiling_notes),
            "cases": [c.to_dict() for c in self.cases],
            "host": [h.to_dict() for h in self.host],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RepeatResult":
        return cls(
            dict(d.get("ceilings", {})),
            dict(d.get("ceiling_notes", {})),
            [CaseResult.from_dict(c) for c in d.get("cases", [])],
            [HostCost.from_dict(h) for h in d.get("host", [])],
        )


@dataclasses.dataclass
class BenchResults:
    """Everything one ``dgx bench`` run measured, plus its environment and settings."""

    env: dict[str, Any] = dataclasses.field(default_factory=dict)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    repeats: list[RepeatResult] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self, with_summary: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "env": dict(self.env),
            "settings": dict(self.settings),
            "notes": list(self.notes),
            "repeats": [r.to_dict() for r in self.repeats],
        }
        if with_summary:
            d["summary"] = summarize(self).to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchResults":
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} results file (schema={d.get('schema')!r})")
        return cls(
            dict(d.get("env", {})),
            dict(d.get("settings", {})),
            [RepeatResult.from_dict(r) for r in d.get("repeats", [])],
            list(d.get("notes", [])),
        )


# --------------------------------------------------------------------------------------------------
# derived


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def tflops(flops: int, us: float) -> float:
    return flops / (us * 1e-6) / 1e12


def gbps(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


def floors_us(shape: Shape | MqaShape, ceilings: dict[str, float]) -> tuple[float | None, float | None]:
    """(compute floor, memory floor) in µs from the TFLOPS ceiling of the shape's compute (FP8; the BF16 suites'
    ``compute_ceiling``: BF16) and the copy GB/s ceiling."""
    fp8 = ceilings.get(getattr(shape, "compute_ceiling", "fp8_tflops"))
    bw = ceilings.get("copy_gbps")
    t_c = shape.flops / (fp8 * 1e12) * 1e6 if fp8 else None
    t_m = shape.bytes_moved / (bw * 1e9) * 1e6 if bw else None
    return t_c, t_m


def bound_of(shape: Shape | MqaShape, ceilings: dict[str, float]) -> tuple[str, float | None]:
    """Which ceiling bounds the shape (``'compute'`` or ``'memory'``) and that floor in µs.

    The MQA suites are measured against fixed references instead (:meth:`MqaShape.floor`): the prefill's
    goal in TFLOPS, the decode's HBM peak."""
    if isinstance(shape, MqaShape):
        return shape.floor()
    t_c, t_m = floors_us(shape, ceilings)
    if t_c is None and t_m is None:
        return "?", None
    if t_m is None or (t_c is not None and t_c >= t_m):
        return "compute", t_c
    return "memory", t_m


def roofline_tflops(shape: Shape | MqaShape, ceilings: dict[str, float]) -> float | None:
    """The best TFLOPS the ceilings allow on this shape (the larger floor turned into TFLOPS)."""
    _, floor = bound_of(shape, ceilings)
    return tflops(shape.flops, floor) if floor else None


@dataclasses.dataclass
class ImplSummary:
    name: str
    status: str
    reason: str = ""
    us: float | None = None
    us_spread: tuple[float, float] | None = None  # min, max of the per-repeat medians
    us_best: float | None = None  # min over every timed call of every repeat
    us_worst: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    fraction: float | None = None
    diff: float | None = None
    note: str = ""
    config: str = ""
    hbm_share: float | None = None  # memory-bound GEMM cases: GB/s over the device's HBM peak (if known)
    floor_share: float | None = None  # memory-bound GEMM cases: the read floor's time over this time

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["us_spread"] = list(self.us_spread) if self.us_spread else None
        return d


@dataclasses.dataclass
class CaseSummary:
    shape: Shape | MqaShape
    bound: str
    floor_us: float | None
    roofline_tflops: float | None
    impls: dict[str, ImplSummary]
    speedups: dict[str, float | None]  # peer -> peer_us / dgx_us
    anchor: dict[str, float] | None
    vs_anchor: float | None  # dgx TFLOPS / DeepGEMM anchor TFLOPS
    balanced: dict[str, Any] | None = None  # ragged decode cases: the balanced case and dgx's time ratio to it
    read_floor_us: float | None = None  # median over repeats of CaseResult.read_floor_us

    @property
    def vs_deepgemm(self) -> float | None:
        """DeepGEMM's time over dgx's, both measured in this run (None where either did not run)."""
        return self.speedups.get(DEEPGEMM)

    def to_dict(self) -> dict[str, Any]:
        d = self._to_dict()
        if self.balanced is not None:
            d["vs_balanced"] = dict(self.balanced)
        return d

    def _to_dict(self) -> dict[str, Any]:
        return {
            "label": self.shape.label,
            "shape": self.shape.to_dict(),
            "bound": self.bound,
            "floor_us": self.floor_us,
            "roofline_tflops": self.roofline_tflops,
            "impls": {k: v.to_dict() for k, v in self.impls.items()},
            "speedup_over": dict(self.speedups),
            "vs_deepgemm": self.vs_deepgemm,
            "anchor_deepgemm_h100": self.anchor,
            "vs_deepgemm_anchor": self.vs_anchor,
            "read_floor_us": self.read_floor_us,
        }


@dataclasses.dataclass
class Spread:
    min: float | None
    median: float | None
    max: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, values: Iterable[float | None]) -> "Spread":
        vals = sorted(v for v in values if v is not None)
        if not vals:
            return cls(None, None, None)
        return cls(vals[0], statistics.median(vals), vals[-1])


@dataclasses.dataclass
class SuiteSummary:
    suite: str
    cases: list[CaseSummary]
    geomean_tflops: dict[str, float | None]  # impl -> geomean TFLOPS over cases where it ran
    geomean_fraction: float | None  # dgx
    geomean_vs_anchor: float | None
    geomean_speedup: dict[str, float | None]  # peer -> geomean of peer_us/dgx_us
    spread_speedup: dict[str, Spread]  # over repeats
    spread_vs_anchor: Spread
    spread_tflops: Spread  # dgx geomean TFLOPS over repeats
    geomean_gbps: dict[str, float | None] = dataclasses.field(default_factory=dict)  # MQA suites: impl -> GB/s
    spread_gbps: Spread = dataclasses.field(default_factory=lambda: Spread(None, None, None))  # dgx, over repeats

    @property
    def geomean_vs_deepgemm(self) -> float | None:
        """Geometric mean over the suite's cases of DeepGEMM's time over dgx's, both measured in this run."""
        return self.geomean_speedup.get(DEEPGEMM)

    def to_dict(self) -> dict[str, Any]:
        d = self._to_dict()
        if self.suite in MQA_SUITES:
            d["geomean_gbps"] = dict(self.geomean_gbps)
            d["spread_over_repeats"]["dgx_geomean_gbps"] = self.spread_gbps.to_dict()
        return d

    def _to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "cases": [c.to_dict() for c in self.cases],
            "geomean_tflops": dict(self.geomean_tflops),
            "geomean_fraction_of_ceiling": self.geomean_fraction,
            "geomean_vs_deepgemm": self.geomean_vs_deepgemm,
            "geomean_vs_deepgemm_anchor": self.geomean_vs_anchor,
            "geomean_speedup_over": dict(self.geomean_speedup),
            "spread_over_repeats": {
                "speedup_over": {k: v.to_dict() for k, v in self.spread_speedup.items()},
                "vs_deepgemm": self.spread_speedup.get(DEEPGEMM, Spread(None, None, None)).to_dict(),
                "vs_deepgemm_anchor": self.spread_vs_anchor.to_dict(),
                "dgx_geomean_tflops": self.spread_tflops.to_dict(),
            },
        }


@dataclasses.dataclass
class Summary:
    ceilings: dict[str, float]
    ceilings_spread: dict[str, Spread]
    suites: list[SuiteSummary]
    host: list[dict[str, Any]]
    repeats: int
    timer: str = "events"  # the run's GPU timer (dgx.bench.timers.TIMERS); runs recorded before it: events
    device: str | None = None
    hbm_peak_gbps: float | None = None  # the device's datasheet HBM bandwidth, None where unknown

    def to_dict(self) -> dict[str, Any]:
        return {
            "timer": self.timer,
            "ceilings": dict(self.ceilings),
            "ceilings_spread": {k: v.to_dict() for k, v in self.ceilings_spread.items()},
            "hbm_peak": {"device": self.device, "gbps": self.hbm_peak_gbps},
            "suites": [s.to_dict() for s in self.suites],
            "host": list(self.host),
            "repeats": self.repeats,
        }

    def suite(self, name: str) -> SuiteSummary:
        for s in self.suites:
            if s.suite == name:
                return s
        raise KeyError(name)


def _impl_names(results: BenchResults) -> list[str]:
    seen: list[str] = []
    for r in results.repeats:
        for c in r.cases:
            for name in c.impls:
                if name not in seen:
                    seen.append(name)
    order = {n: i for i, n in enumerate(IMPLS)}
    return sorted(seen, key=lambda n: (order.get(n, len(order)), n))


def _combine_status(items: list[ImplResult]) -> tuple[str, str]:
    """A case's status over repeats: failed beats unavailable beats not-run beats ok."""
    for st in (FAILED, UNAVAILABLE, NOT_RUN):
        for it in items:
            if it.status == st:
                return st, it.reason
    return OK, ""


def _ceilings_median(results: BenchResults) -> tuple[dict[str, float], dict[str, Spread]]:
    keys: list[str] = []
    for r in results.repeats:
        for k in r.ceilings:
            if k not in keys:
                keys.append(k)
    spreads = {k: Spread.of(r.ceilings.get(k) for r in results.repeats) for k in keys}
    med = {k: s.median for k, s in spreads.items() if s.median is not None}
    return med, spreads


def _link_balanced(cases: list[CaseSummary]) -> None:
    """Give each ragged decode case its balanced case (same batch, next_n and total) and dgx's time ratio."""
    by_shape = {c.shape: c for c in cases if c.shape.suite == PAGED_MQA}
    for c in by_shape.values():
        if not c.shape.ragged:
            continue
        twin = by_shape.get(c.shape.balanced())
        mine = c.impls.get(DGX)
        theirs = twin.impls.get(DGX) if twin else None
        ok = bool(mine and mine.us and theirs and theirs.us)
        c.balanced = {
            "label": c.shape.balanced().label,
            "dgx_us": theirs.us if ok else None,
            "ratio": (mine.us / theirs.us) if ok else None,
        }


def summarize(results: BenchResults) -> Summary:
    """Derive every reported number from the recorded results."""
    ceilings, ceilings_spread = _ceilings_median(results)
    device = results.env.get("device")
    hbm_peak = hbm_peak_gbps(device)
    timer = results.settings.get("timer") or "events"
    names = _impl_names(results)
    n_rep = len(results.repeats)
    n_cases = len(results.repeats[0].cases) if results.repeats else 0

    case_summaries: list[CaseSummary] = []
    # per repeat, per case: impl -> us (for spreads of geomeans)
    per_repeat_us: list[list[dict[str, float]]] = []
    for r in results.repeats:
        per_repeat_us.append([{n: it.us for n, it in c.impls.items() if it.ok} for c in r.cases])

    for ci in range(n_cases):
        shape = results.repeats[0].cases[ci].shape
        bound, floor = bound_of(shape, ceilings)
        read_floors = [r.cases[ci].read_floor_us for r in results.repeats if r.cases[ci].read_floor_us]
        read_floor = statistics.median(read_floors) if read_floors else None
        impls: dict[str, ImplSummary] = {}
        for name in names:
            items = [r.cases[ci].impls[name] for r in results.repeats if name in r.cases[ci].impls]
            if not items:
                continue
            status, reason = _combine_status(items)
            notes = sorted({it.note for it in items if it.note})
            configs = list(dict.fromkeys(it.config for it in items if it.config))
            diffs = [it.diff for it in items if it.diff is not None]
            s = ImplSummary(
                name, status, reason, note="; ".join(notes), config=" | ".join(configs), diff=max(diffs) if diffs else None
            )
            if status == OK:
                meds = [it.us for it in items]
                s.us = statistics.median(meds)
                s.us_spread = (min(meds), max(meds))
                s.us_best = min(it.us_min if it.us_min is not None else it.us for it in items)
                s.us_worst = max(it.us_max if it.us_max is not None else it.us for it in items)
                s.tflops = tflops(shape.flops, s.us)
                s.gbps = gbps(shape.bytes_moved, s.us)
                s.fraction = floor / s.us if floor else None
                if hbm_peak and bound == "memory" and not isinstance(shape, MqaShape):
                    s.hbm_share = s.gbps / hbm_peak
                if read_floor and bound == "memory":
                    s.floor_share = read_floor / s.us
            impls[name] = s
        dgx = impls.get(DGX)
        speedups: dict[str, float | None] = {}
        for name in names:
            if name == DGX:
                continue
            p = impls.get(name)
            speedups[name] = (p.us / dgx.us) if (dgx and dgx.us and p and p.us) else None
        anchor = anchor_for(shape, timer)
        vs_anchor = (dgx.tflops / anchor["tflops"]) if (dgx and dgx.tflops and anchor) else None
        case_summaries.append(
            CaseSummary(shape, bound, floor, roofline_tflops(shape, ceilings), impls, speedups, anchor, vs_anchor,
                        read_floor_us=read_floor)
        )

    _link_balanced(case_summaries)
    suites: list[SuiteSummary] = []
    for suite in SUITES:
        idx = [i for i, c in enumerate(case_summaries) if c.shape.suite == suite]
        if not idx:
            continue
        cases = [case_summaries[i] for i in idx]
        gm_tflops = {n: geomean(c.impls[n].tflops for c in cases if n in c.impls) for n in names}
        gm_tflops = {n: v for n, v in gm_tflops.items() if any(n in c.impls for c in cases)}
        gm_frac = geomean(c.impls[DGX].fraction for c in cases if DGX in c.impls)
        gm_anchor = geomean(c.vs_anchor for c in cases)
        gm_speed = {n: geomean(c.speedups.get(n) for c in cases) for n in names if n != DGX}
        gm_speed = {n: v for n, v in gm_speed.items() if any(n in c.impls for c in cases)}

        # spread over repeats: recompute each geomean from one repeat's medians
        rep_speed: dict[str, list[float | None]] = {n: [] for n in gm_speed}
        rep_anchor: list[float | None] = []
        rep_tflops: list[float | None] = []
        rep_gbps: list[float | None] = []
        for rus in per_repeat_us:
            for n in gm_speed:
                rep_speed[n].append(
                    geomean(rus[i][n] / rus[i][DGX] for i in idx if n in rus[i] and DGX in rus[i])
                )
            rep_anchor.append(
                geomean(
                    tflops(case_summaries[i].shape.flops, rus[i][DGX]) / case_summaries[i].anchor["tflops"]
                    for i in idx
                    if DGX in rus[i] and case_summaries[i].anchor
                )
            )
            rep_tflops.append(geomean(tflops(case_summaries[i].shape.flops, rus[i][DGX]) for i in idx if DGX in rus[i]))
            rep_gbps.append(geomean(gbps(case_summaries[i].shape.bytes_moved, rus[i][DGX]) for i in idx if DGX in rus[i]))
        gm_gbps = {n: geomean(c.impls[n].gbps for c in cases if n in c.impls) for n in gm_tflops}
        suites.append(
            SuiteSummary(
                suite,
                cases,
                gm_tflops,
                gm_frac,
                gm_anchor,
                gm_speed,
                {n: Spread.of(v) for n, v in rep_speed.items()},
                Spread.of(rep_anchor),
                Spread.of(rep_tflops),
                gm_gbps,
                Spread.of(rep_gbps),
            )
        )

    host: list[dict[str, Any]] = []
    host_keys: list[tuple[str, str]] = []  # (pattern, implementation), in order of first appearance
    for r in results.repeats:
        for h in r.host:
            if (h.pattern, h.name) not in host_keys:
                host_keys.append((h.pattern, h.name))
    for pattern, name in host_keys:
        items = [h for r in results.repeats for h in r.host if (h.pattern, h.name) == (pattern, name)]
        oks = [h for h in items if h.status == OK and h.cpu_us is not None]
        entry: dict[str, Any] = {"name": name, "pattern": pattern, "label": items[0].label, "shape": items[0].shape,
                                 "calls": items[0].calls, "goal_us": items[0].goal_us}
        if oks:
            sp = Spread.of(h.cpu_us for h in oks)
            entry.update(
                status=OK,
                cpu_us=sp.median,
                cpu_us_spread=sp.to_dict(),
                plain_us=Spread.of(h.plain_us for h in oks).median,
                wall_us=Spread.of(h.wall_us for h in oks).median,
                held=all(h.held for h in oks),
                saturated=any(h.saturated for h in oks),
                prep_us=Spread.of(h.prep_us for h in oks).median,
            )
        else:
            entry.update(status=items[0].status, reason=items[0].reason)
        host.append(entry)

    return Summary(ceilings, ceilings_spread, suites, host, n_rep, timer, device, hbm_peak)


def peer_names(suite: SuiteSummary) -> list[str]:
    """The implementations other than dgx that appear in `suite`, in order of first appearance."""
    names: list[str] = []
    for c in suite.cases:
        for n in c.impls:
            if n != DGX and n not in names:
                names.append(n)
    return names
