"""GPU-less precompile (``dgx warmup``): build every kernel the heuristics can choose for a set of shapes.

A shapes file (or a preset from dgx/presets/) lists ``(kind, n, k, groups, max_m)`` entries. For each
entry :func:`plan` asks the heuristics which kernel they pick for every M in 1..max_m, dedupes the
kernels by cache key across all entries, and :func:`run` compiles the ones missing from the cache in
parallel (spawned) processes. Each worker goes through :func:`dgx.jit.get_cubin`, which stores into the
cache under the key's lock, so several warmups (or ranks) sharing one cache compile each kernel once.
No GPU is needed: the SM count and the architecture are arguments.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from . import jit
from .jit import KernelSource
from .kinds import KIND_NAMES, GemmKind, Layout

KINDS = KIND_NAMES  # the shapes-file kinds (dgx.kinds.GemmKind values)
GROUPED_KINDS = frozenset(k.value for k in GemmKind if k.grouped)
FIELDS = ("kind", "n", "k", "groups", "max_m", "m", "note")

DEFAULT_MAX_M = 8192
DEFAULT_NUM_SMS = 132  # H100 / H800 SXM
DEFAULT_ARCH = "sm_90a"

# Every M up to here is asked of the heuristics; beyond it, only the M at which some block count
# changes (see m_samples).
EXHAUSTIVE_BELOW = 512


class ShapesFileError(ValueError):
    """A shapes file or preset that cannot be used; the message names the entry index and the field."""


@dataclass(frozen=True)
class ShapeSpec:
    """One entry of a shapes file."""

    kind: str  # a GemmKind (a str: its shapes-file value)
    n: int
    k: int
    groups: int | None = None
    max_m: int | None = None
    note: str = ""
    m: int | None = None  # the benchmark's M (dgx bench --shapes); stands in for max_m when that is absent

    @property
    def label(self) -> str:
        out = f"{self.kind} n={self.n} k={self.k}"
        if self.groups is not None:
            out += f" groups={self.groups}"
        if self.max_m is not None:
            out += f" max_m={self.max_m}"
        elif self.m is not None:
            out += f" m={self.m}"
        return out

    def m_limit(self, default: int) -> int:
        """The largest M to warm for: max_m, else m, else ``default``."""
        return self.max_m or self.m or default


# --- shapes files and presets ---------------------------------------------------------------------


def _positive_int(entry: dict, idx: int, name: str, required: bool) -> int | None:
    if name not in entry:
        if required:
            raise ShapesFileError(f"entry {idx}: field {name!r}: expected a positive integer, got nothing (missing)")
        return None
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapesFileError(f"entry {idx}: field {name!r}: expected a positive integer, got {value!r}")
    return value


def parse_shapes(data: Any, *, on_unknown_field: Callable[[str], None] | None = None) -> list[ShapeSpec]:
    """Validates the decoded JSON of a shapes file; raises ShapesFileError naming the entry and field.

    A field outside :data:`FIELDS` is an error, unless ``on_unknown_field`` is given: then it is
    called with a message naming the entry and the field, and the field is ignored (``dgx bench``
    warns about such fields instead of refusing the file).
    """
    if not isinstance(data, list):
        raise ShapesFileError(f"expected a JSON list of shape entries at the top level, got {type(data).__name__}")
    if not data:
        raise ShapesFileError("expected at least one shape entry, got an empty list")
    specs = []
    for idx, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ShapesFileError(f"entry {idx}: expected an object, got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(FIELDS), key=str)
        if unknown:
            if on_unknown_field is None:
                raise ShapesFileError(
                    f"entry {idx}: field {unknown[0]!r}: expected one of the fields {', '.join(FIELDS)}, "
                    f"got {unknown[0]!r}"
                )
            for name in unknown:
                on_unknown_field(f"entry {idx}: field {name!r}: not one of the fields {', '.join(FIELDS)}; ignored")
        if "kind" not in entry:
            raise ShapesFileError(f"entry {idx}: field 'kind': expected one of {', '.join(KINDS)}, got nothing (missing)")
        kind = entry["kind"]
        if kind not in KINDS:
            raise ShapesFileError(f"entry {idx}: field 'kind': expected one of {', '.join(KINDS)}, got {kind!r}")
        n = _positive_int(entry, idx, "n", True)
        k = _positive_int(entry, idx, "k", True)
        if n % 8:
            raise ShapesFileError(
                f"entry {idx}: field 'n': expected a multiple of 8 (16-byte rows of the BF16 output), got {n}"
            )
        if k % 16:
            raise ShapesFileError(f"entry {idx}: field 'k': expected a multiple of 16 (16-byte FP8 rows for TMA), got {k}")
        grouped = kind in GROUPED_KINDS
        groups = _positive_int(entry, idx, "groups", grouped)
        if not grouped and groups is not None:
            raise ShapesFileError(
                f"entry {idx}: field 'groups': expected no groups for kind {kind!r} (only "
                f"{', '.join(sorted(GROUPED_KINDS))} take them), got {groups}"
            )
        max_m = _positive_int(entry, idx, "max_m", False)
        m = _positive_int(entry, idx, "m", False)
        note = entry.get("note", "")
        if not isinstance(note, str):
            raise ShapesFileError(f"entry {idx}: field 'note': expected a string, got {note!r}")
        specs.append(ShapeSpec(GemmKind(kind), n, k, groups, max_m, note, m))
    return specs


def load_shapes_file(
    path: str | os.PathLike, *, on_unknown_field: Callable[[str], None] | None = None
) -> list[ShapeSpec]:
    """Reads and validates a shapes file; errors name the file, the entry index and the field.

    ``on_unknown_field`` is passed to :func:`parse_shapes`.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ShapesFileError(f"shapes file {path}: expected a readable file, got {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ShapesFileError(f"shapes file {path}: expected JSON, got an error at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    try:
        return parse_shapes(data, on_unknown_field=on_unknown_field)
    except ShapesFileError as exc:
        raise ShapesFileError(f"shapes file {path}: {exc}") from None


def preset_names() -> list[str]:
    from . import presets

    return presets.names()


def load_preset(name: str) -> list[ShapeSpec]:
    """The entries of a built-in preset (dgx/presets/<name>.json)."""
    from . import presets

    try:
        return parse_shapes(presets.load(name))
    except ShapesFileError as exc:
        raise ShapesFileError(f"preset {name}: {exc}") from None


# --- enumeration ----------------------------------------------------------------------------------


def m_samples(max_m: int, block_ms: Sequence[int] | None = None) -> list[int]:
    """The M values whose heuristic choices cover every M in 1..max_m.

    The dense heuristic sees M only through block counts ceil(M / block_m) (and comparisons of M with
    block sizes), so its choice is constant between consecutive multiples of the block sizes. Every M
    up to EXHAUSTIVE_BELOW is taken anyway; above it, each multiple j*block_m and j*block_m + 1 of every
    candidate block_m, and max_m itself. tests/test_warmup.py checks this against asking for every M.
    """
    if max_m <= 0:
        raise ValueError(f"max_m: expected a positive integer, got {max_m}")
    if block_ms is None:
        from . import heuristics

        block_ms = heuristics.BLOCK_MS
    ms = set(range(1, min(max_m, EXHAUSTIVE_BELOW) + 1))
    for bm in block_ms:
        for edge in range(bm, max_m + 1, bm):
            ms.add(edge)
            if edge + 1 <= max_m:
                ms.add(edge + 1)
    ms.add(max_m)
    return sorted(ms)


def dense_configs(n: int, k: int, max_m: int, num_sms: int, exhaustive: bool = False) -> list:
    """The distinct GemmConfigs choose_dense picks for M in 1..max_m (in order of first appearance)."""
    from .heuristics import choose_dense

    ms = range(1, max_m + 1) if exhaustive else m_samples(max_m)
    seen: dict = {}
    for m in ms:
        config = choose_dense(m, n, k, num_sms).config
        seen.setdefault(config, m)
    return list(seen)


def _dense_sources(spec: ShapeSpec, max_m: int, num_sms: int) -> list[KernelSource]:
    return [c.render() for c in dense_configs(spec.n, spec.k, max_m, num_sms)]


CONTIGUOUS_WARM_LIMIT = 65536  # largest M_sum (rows of all groups) warmed for the contiguous layout


def grouped_configs(layout: int, n: int, k: int, groups: int, max_m: int, num_sms: int) -> list:
    """The distinct GemmConfigs choose_grouped picks: contiguous for every M_sum (a multiple of the
    alignment) up to groups x max_m (max_m rows per group, at most CONTIGUOUS_WARM_LIMIT in all),
    masked for every expected M per group up to max_m."""
    from .heuristics import CONTIGUOUS_ALIGNMENT, choose_grouped

    if layout == Layout.CONTIGUOUS:
        # max_m is per group here: M_sum runs up to groups x max_m (capped: the choice settles on large
        # tiles long before that).
        top = min(groups * max_m, CONTIGUOUS_WARM_LIMIT)
        ms = range(CONTIGUOUS_ALIGNMENT, max(top, CONTIGUOUS_ALIGNMENT) + 1, CONTIGUOUS_ALIGNMENT)
    else:
        ms = m_samples(max_m)
    seen: dict = {}
    for m in ms:
        seen.setdefault(choose_grouped(layout, m, n, k, groups, num_sms).config, m)
    return list(seen)


def _contiguous_sources(spec: ShapeSpec, max_m: int, num_sms: int) -> list[KernelSource]:
    return [c.render() for c in grouped_configs(Layout.CONTIGUOUS, spec.n, spec.k, spec.groups or 1, max_m, num_sms)]


def _masked_sources(spec: ShapeSpec, max_m: int, num_sms: int) -> list[KernelSource]:
    return [c.render() for c in grouped_configs(Layout.MASKED, spec.n, spec.k, spec.groups or 1, max_m, num_sms)]


def wgrad_configs(n: int, k: int, groups: int, max_m: int, num_sms: int, k_grouped: bool) -> list:
    """The distinct GemmConfigs choose_wgrad picks for M in 1..max_m (dense, or K-grouped with `groups`
    outputs and `k` the K of a group)."""
    from .heuristics import choose_wgrad

    layout = Layout.K_GROUPED if k_grouped else Layout.DENSE
    seen: dict = {}
    for m in m_samples(max_m):
        seen.setdefault(choose_wgrad(m, n, k, num_sms, layout, groups if k_grouped else 1).config, m)
    return list(seen)


def _wgrad_sources(spec: ShapeSpec, max_m: int, num_sms: int) -> list[KernelSource]:
    return [c.render() for c in wgrad_configs(spec.n, spec.k, 1, max_m, num_sms, False)]


def _k_grouped_sources(spec: ShapeSpec, max_m: int, num_sms: int) -> list[KernelSource]:
    return [c.render() for c in wgrad_configs(spec.n, spec.k, spec.groups or 1, max_m, num_sms, True)]


# kind -> the kernels the heuristics can choose for one entry (every kind has its kernels).
ENUMERATORS: dict[GemmKind, Callable[[ShapeSpec, int, int], list[KernelSource]]] = {
    GemmKind.DENSE: _dense_sources,
    GemmKind.M_GROUPED_CONTIGUOUS: _contiguous_sources,
    GemmKind.M_GROUPED_MASKED: _masked_sources,
    GemmKind.WGRAD: _wgrad_sources,
    GemmKind.K_GROUPED: _k_grouped_sources,
}


@dataclass(frozen=True)
class PlannedKernel:
    key: str
    source: KernelSource
    used_by: tuple[str, ...]  # labels of the entries that need it


@dataclass
class Plan:
    arch: str
    num_sms: int
    kernels: list[PlannedKernel]
    seconds: float = 0.0


def _enumerate_entry(spec: ShapeSpec, max_m: int, num_sms: int, arch: str) -> list[tuple[str, KernelSource]]:
    """(cache key, source) of every kernel the heuristics can choose for one entry (runs in a worker too)."""
    return [(jit.kernel_key(src, arch), src) for src in ENUMERATORS[spec.kind](spec, spec.m_limit(max_m), num_sms)]


def plan(
    entries: Iterable[ShapeSpec],
    *,
    max_m: int = DEFAULT_MAX_M,
    num_sms: int = DEFAULT_NUM_SMS,
    arch: str = DEFAULT_ARCH,
    jobs: int = 1,
) -> Plan:
    """Every distinct kernel (by cache key) the heuristics can choose for the entries.

    ``max_m`` applies to entries that set neither ``max_m`` nor ``m``. With ``jobs`` > 1 the entries are
    enumerated in that many spawned processes (asking the heuristics for every M takes ~0.5 s a shape).
    """
    for name, value in (("max_m", max_m), ("num_sms", num_sms), ("jobs", jobs)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if not isinstance(arch, str) or not arch.startswith("sm_"):
        raise ValueError(f"arch: expected an architecture like 'sm_90a', got {arch!r}")
    t0 = time.perf_counter()
    todo = list(entries)
    if jobs > 1 and len(todo) > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx) as pool:
            found = list(pool.map(_enumerate_entry, todo, *zip(*[(max_m, num_sms, arch)] * len(todo))))
    else:
        found = [_enumerate_entry(spec, max_m, num_sms, arch) for spec in todo]
    by_key: dict[str, tuple[KernelSource, list[str]]] = {}
    for spec, kernels in zip(todo, found):
        for key, src in kernels:
            if key not in by_key:
                by_key[key] = (src, [])
            if spec.label not in by_key[key][1]:
                by_key[key][1].append(spec.label)
    kernels = [PlannedKernel(key, src, tuple(used)) for key, (src, used) in by_key.items()]
    return Plan(arch, num_sms, kernels, time.perf_counter() - t0)


# --- compiling ------------------------------------------------------------------------------------


@dataclass
class WarmupResult:
    kernels: int = 0
    compiled: int = 0  # compiled by this warmup
    cached: int = 0  # already in the cache, or built meanwhile by another process sharing it
    failed: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (kernel name, error)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernels": self.kernels,
            "compiled": self.compiled,
            "cached": self.cached,
            "failed": self.failed,
            "seconds": round(self.seconds, 2),
        }


@dataclass(frozen=True)
class Progress:
    """Reported after each kernel that had to be built: ``done`` of ``total`` so far."""

    done: int
    total: int
    failed: int
    elapsed: float
    kernel: str
    error: str | None

    @property
    def eta(self) -> float | None:
        if self.done == 0 or self.done >= self.total:
            return None if self.done == 0 else 0.0
        return self.elapsed / self.done * (self.total - self.done)


def _worker_init() -> None:
    # A warmup is how one builds the cache strict mode needs: it must compile even under DGX_JIT_STRICT=1.
    os.environ["DGX_JIT_STRICT"] = "0"


def build_one(source: KernelSource, arch: str) -> tuple[bool, str | None]:
    """Runs in a worker: get (and, on a miss, compile and store) one kernel. Returns (compiled, error)."""
    before = jit.jit_stats()["compiles"]
    try:
        jit.get_cubin(source, arch)
    except Exception as exc:  # reported per kernel; the other kernels go on
        return False, f"{type(exc).__name__}: {exc}"
    return jit.jit_stats()["compiles"] > before, None


def run(
    the_plan: Plan,
    *,
    jobs: int | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> WarmupResult:
    """Compiles the planned kernels missing from the cache in ``jobs`` spawned processes."""
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs <= 0:
        raise ValueError(f"jobs: expected a positive integer, got {jobs!r}")
    t0 = time.perf_counter()
    result = WarmupResult(kernels=len(the_plan.kernels))
    kc = jit.kernel_cache()
    todo = []
    for pk in the_plan.kernels:
        if kc.contains(pk.key):
            result.cached += 1
        else:
            todo.append(pk)
    if todo:
        ctx = multiprocessing.get_context("spawn")
        done = 0
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx, initializer=_worker_init) as pool:
            futures = {pool.submit(build_one, pk.source, the_plan.arch): pk for pk in todo}
            for future in as_completed(futures):
                pk = futures[future]
                try:
                    compiled, error = future.result()
                except Exception as exc:  # the worker died (crash, out of memory): that kernel failed
                    compiled, error = False, f"worker process failed: {type(exc).__name__}: {exc}"
                if error is not None:
                    result.failed += 1
                    result.failures.append((pk.source.name, error))
                elif compiled:
                    result.compiled += 1
                else:
                    result.cached += 1
                done += 1
                if progress is not None:
                    progress(Progress(done, len(todo), result.failed, time.perf_counter() - t0, pk.source.name, error))
    result.seconds = the_plan.seconds + time.perf_counter() - t0
    return result


def warmup(
    entries: Iterable[ShapeSpec],
    *,
    max_m: int = DEFAULT_MAX_M,
    num_sms: int = DEFAULT_NUM_SMS,
    arch: str = DEFAULT_ARCH,
    jobs: int | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> WarmupResult:
    """plan() then run(): builds every kernel the entries can need into the cache (DGX_CACHE_DIR)."""
    jobs = jobs or os.cpu_count() or 1
    return run(plan(entries, max_m=max_m, num_sms=num_sms, arch=arch, jobs=jobs), jobs=jobs, progress=progress)
