"""GPU-less precompile (``dgx warmup``): build every kernel the heuristics can choose for a set of shapes.

A shapes file (or a preset from dgx/presets/) lists ``(kind, n, k, groups, max_m)`` entries. For each
entry :func:`plan` asks the heuristics which kernel they pick for every M in 1..max_m, dedupes the
kernels by cache key across all entries, and :func:`run` compiles the ones missing from the cache in
parallel (spawned) processes. Each worker goes through :func:`dgx.jit.get_cubin`, which stores into the
cache under the key's lock, so several warmups (or ranks) sharing one cache compile each kernel once.
No GPU is needed: the SM count and the architecture are arguments. :func:`recorded_plan` (what ``dgx warmup``
and :func:`warmup` use) answers a warmup identical to an earlier one from the plan record that one left in the
cache (dgx/plan_record.py) instead of enumerating again.

The kinds, their fields, how their kernels are enumerated and which helper kernels their calls launch come from
the families' registry (dgx/families): a plan with a GEMM entry also holds the shape-independent helper kernels a
GEMM call can launch before the GEMM itself (the SFA layout conversion, dgx/scales.py, and the UE8M0 unpack of
dgx.deep_gemm's packed scales), labelled with why they are there (``PlannedKernel.helper``, ``used_by``).
The prefix-sum contiguous layout (DeepGEMM's ``use_psum_layout=True``) has a kind of its own,
``m_grouped_contiguous_psum``: its kernels are not the contiguous kind's.

"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from . import compile_cost, enumeration, env, families, interrupts, jit, plan_record, workpool
from .families import MqaSpec, ShapeSpec
from .jit import KernelSource
from .kinds import Layout
from .problems import GROUPED_KINDS, KINDS, ProblemError, check_arch, check_num_sms  # KINDS: the GEMM-like kinds (dgx.bench)

#: Every field a shapes-file entry may hold: `kind`, `note` and the fields of every kind (dgx/families).
FIELDS = ("kind",) + tuple(dict.fromkeys(f for k in families.all_kinds() for f in k.fields)) + ("note",)

DEFAULT_MAX_M = 8192
#: The largest M warmup enumerates for (--max-m, an entry's max_m or m). It asks the heuristics about every
#: block boundary up to M: about 33,000 questions per entry at 2**20 (under a minute of CPU), but tens of
#: millions, for days, near the kernels' own limit of 2**31 - 256.
MAX_WARM_M = 1 << 20
DEFAULT_NUM_SMS = 132  # H100 / H800 SXM
DEFAULT_ARCH = "sm_90a"


class ShapesFileError(ValueError):
    """A shapes file or preset that cannot be used; the message names the entry index and the field."""


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


def parse_shapes(
    data: Any, *, on_unknown_field: Callable[[str], None] | None = None, m_with_max_m: bool = False
) -> list[ShapeSpec]:
    """Validates the decoded JSON of a shapes file; raises ShapesFileError naming the entry and field.

    A field outside :data:`FIELDS` is an error, unless ``on_unknown_field`` is given: then it is
    called with a message naming the entry and the field, and the field is ignored (``dgx bench``
    warns about such fields instead of refusing the file). An entry with both ``m`` and ``max_m`` is an
    error unless ``m_with_max_m``: warmup would have to pick one of them as the largest M (``dgx bench`` reads
    both: the M it times and the masked kind's M_max).
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
        all_kinds = families.kind_names()
        if "kind" not in entry:
            raise ShapesFileError(f"entry {idx}: field 'kind': expected one of {', '.join(all_kinds)}, got nothing (missing)")
        name = entry["kind"]
        if name not in all_kinds:
            raise ShapesFileError(f"entry {idx}: field 'kind': expected one of {', '.join(all_kinds)}, got {name!r}")
        kind = families.kind(name)
        note = entry.get("note", "")
        if not isinstance(note, str):
            raise ShapesFileError(f"entry {idx}: field 'note': expected a string, got {note!r}")
        for field_name in FIELDS:
            if field_name in entry and field_name not in kind.fields + ("kind", "note"):
                takes = ", ".join(kind.fields[:-1]) + " and " + kind.fields[-1] if len(kind.fields) > 1 else kind.fields[0]
                raise ShapesFileError(f"entry {idx}: field {field_name!r}: kind {name!r} takes {takes}, not {field_name}")
        if "m" in entry and "max_m" in entry and not m_with_max_m:
            raise ShapesFileError(
                f"entry {idx}: field 'm': expected either 'max_m' (the largest M to warm for) or 'm' (the "
                f"benchmark's M, which stands in for it), got both (m={entry['m']!r}, max_m={entry['max_m']!r})"
            )
        try:
            specs.append(kind.parse(entry, lambda f: f"field {f!r}"))
        except ProblemError as exc:
            raise ShapesFileError(f"entry {idx}: {exc}") from None
    return specs


def load_shapes_file(
    path: str | os.PathLike, *, on_unknown_field: Callable[[str], None] | None = None, m_with_max_m: bool = False
) -> list[ShapeSpec]:
    """Reads and validates a shapes file; errors name the file, the entry index and the field.

    ``on_unknown_field`` and ``m_with_max_m`` are passed to :func:`parse_shapes`.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ShapesFileError(f"shapes file {path}: expected a readable file, got {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ShapesFileError(
            f"shapes file {path}: expected JSON text (UTF-8), got a byte that is not UTF-8 at offset {exc.start} "
            f"({exc.reason}): is it the right file?"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ShapesFileError(f"shapes file {path}: expected JSON, got an error at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    try:
        return parse_shapes(data, on_unknown_field=on_unknown_field, m_with_max_m=m_with_max_m)
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

# Kept here for callers of earlier versions; dgx/enumeration.py holds the logic.
CONTIGUOUS_WARM_LIMIT = enumeration.CONTIGUOUS_WARM_LIMIT
m_samples = enumeration.m_samples
#: Enumerate in worker processes only past this many heuristic calls (spawning one costs about a second).
POOL_MIN_SAMPLES = 4000


def dense_configs(n: int, k: int, max_m: int, num_sms: int, exhaustive: bool = False) -> list:
    """The distinct GemmConfigs choose_dense picks for M in 1..max_m (in order of first appearance)."""
    ms = range(1, max_m + 1) if exhaustive else m_samples(max_m)
    return families.configs_for("dense", n, k, None, ms, num_sms)


def grouped_configs(layout: int, n: int, k: int, groups: int, max_m: int, num_sms: int) -> list:
    """The distinct GemmConfigs choose_grouped picks: contiguous for every M_sum (a multiple of the
    alignment) up to groups x max_m (max_m rows per group, at most CONTIGUOUS_WARM_LIMIT in all),
    masked for every expected M per group up to max_m."""
    kind = families.kind("m_grouped_contiguous" if layout == Layout.CONTIGUOUS else "m_grouped_masked")
    ms = enumeration.m_values(kind.m_space, groups, max_m, 1, enumeration.m_range(kind.m_space, groups, max_m))
    return families.configs_for(kind.name, n, k, groups, ms, num_sms)


def psum_configs(n: int, k: int, groups: int, max_m: int, num_sms: int) -> list:
    """The distinct GemmConfigs dgx.heuristics.psum_config picks (alignment 128) for every heuristic M up to the
    rows of `groups` groups of max_m rows (each padded to the alignment; at most CONTIGUOUS_WARM_LIMIT in all)."""
    space = enumeration.PSUM
    ms = enumeration.m_values(space, groups, max_m, 1, enumeration.m_range(space, groups, max_m))
    return families.configs_for("m_grouped_contiguous_psum", n, k, groups, ms, num_sms)


def wgrad_configs(n: int, k: int, groups: int, max_m: int, num_sms: int, k_grouped: bool) -> list:
    """The distinct GemmConfigs choose_wgrad picks for M in 1..max_m (dense, or K-grouped with `groups`
    outputs and `k` the K of a group)."""
    kind = "k_grouped" if k_grouped else "wgrad"
    return families.configs_for(kind, n, k, groups if k_grouped else None, m_samples(max_m), num_sms)


@dataclass(frozen=True)
class PlannedKernel:
    key: str
    source: KernelSource
    used_by: tuple[str, ...]  # labels of the entries that need it (for a helper: why the plan holds it)
    helper: bool = False  # a shape-independent helper kernel the entries' calls can launch (Kind.helpers)


@dataclass
class Plan:
    arch: str
    num_sms: int
    kernels: list[PlannedKernel]
    seconds: float = 0.0  # spent enumerating (for a reused plan: reading its record)
    reused: bool = False  # read from the plan record of an identical earlier warmup (dgx/plan_record.py)


@dataclass(frozen=True)
class PlanProgress:
    """Reported as enumeration pieces end: ``done`` of ``total`` heuristic calls so far."""

    done: int
    total: int
    elapsed: float

    @property
    def eta(self) -> float | None:
        if self.done == 0:
            return None
        return self.elapsed / self.done * max(self.total - self.done, 0)


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")


def _check_plan_args(entries: list, max_m: int, num_sms: int, arch: str, jobs: int) -> None:
    for name, value in (("max_m", max_m), ("jobs", jobs)):
        _check_positive(name, value)
    check_num_sms(num_sms)
    check_arch(arch)
    check_warm_range(entries, max_m)  # (each entry's own fields are checked by its kind: dgx/families)


_WARM_LIMIT_TEXT = f"at most {MAX_WARM_M} (2**20: warmup asks the heuristics about every block boundary up to M)"


def check_warm_max_m(value: object, label: str = "max_m") -> int:
    """Return ``value`` if warmup can enumerate M up to it (1 to MAX_WARM_M), else raise ShapesFileError naming
    ``label`` (``--max-m`` on the CLI)."""
    _check_positive(label, value)
    if value > MAX_WARM_M:
        raise ShapesFileError(f"{label}: expected {_WARM_LIMIT_TEXT}, got {value}")
    return value


def check_warm_range(entries: Iterable[Any], max_m: int, *, where: str = "") -> None:
    """Raise ShapesFileError unless the range of M warmup would enumerate for each entry of a kind with a range of
    M (its ``max_m``, else its ``m``, else ``max_m``) stays within MAX_WARM_M; the message names the entry and
    the field, after ``where`` (e.g. ``shapes file x.json: ``). Cheap: called before anything is enumerated."""
    check_warm_max_m(max_m)
    for idx, spec in enumerate(entries):
        if not hasattr(spec, "m_limit"):  # a kind whose kernels do not depend on M (the MQA logits)
            continue
        field_name = ("max_m" if getattr(spec, "max_m", None) is not None
                      else "m" if getattr(spec, "m", None) is not None else None)
        value = spec.m_limit(max_m)
        if field_name is not None and value > MAX_WARM_M:
            raise ShapesFileError(f"{where}entry {idx}: field {field_name!r}: expected {_WARM_LIMIT_TEXT}, got {value}")


def plan(
    entries: Iterable[ShapeSpec],
    *,
    max_m: int = DEFAULT_MAX_M,
    num_sms: int = DEFAULT_NUM_SMS,
    arch: str = DEFAULT_ARCH,
    jobs: int = 1,
    progress: Callable[[PlanProgress], None] | None = None,
) -> Plan:
    """Every distinct kernel (by cache key) the heuristics can choose for the entries, and the helper kernels their
    kinds' calls can launch (last, ``helper=True``).

    ``max_m`` applies to entries that set neither ``max_m`` nor ``m``. Each entry's kernels are enumerated in the
    pieces its kind cuts it into (dgx/enumeration.py: windows of M for the GEMM-like kinds); with ``jobs`` > 1 and
    enough of them, in that many spawned processes. ``progress`` is called as pieces end. A SIGINT or SIGTERM
    stops the enumeration at once and raises :class:`dgx.interrupts.Interrupted` (nothing has been written by then).
    """
    entries = list(entries)
    _check_plan_args(entries, max_m, num_sms, arch, jobs)
    t0 = time.perf_counter()
    tasks: list[tuple] = []
    owners: list[ShapeSpec | MqaSpec] = []
    counts: list[int] = []
    helpers: dict[str, Callable[[], KernelSource]] = {}  # why -> source, in order of first appearance
    for spec in entries:
        kind = families.kind(spec.kind)
        for why, source in kind.helpers:
            helpers.setdefault(why, source)
        for piece, count in kind.pieces(spec, max_m):
            tasks.append((kind.name, spec, piece, num_sms, arch))
            owners.append(spec)
            counts.append(count)
    total = sum(counts)
    found: list[list[tuple[str, KernelSource]] | None] = [None] * len(tasks)
    done = 0

    def finished(index: int, kernels, error: BaseException | None) -> None:
        nonlocal done
        if error is not None:
            raise error
        found[index] = kernels
        done += counts[index]
        if progress is not None:
            progress(PlanProgress(done, total, time.perf_counter() - t0))

    with interrupts.guard() as state:
        if jobs > 1 and total >= POOL_MIN_SAMPLES and len(tasks) > 1:
            outcome = workpool.run_tasks(
                families.run_piece, tasks, jobs=jobs, on_done=finished, state=state, finish_running=False
            )
            if outcome.interrupted:
                raise interrupts.Interrupted(outcome.signum)
        else:
            for index, task in enumerate(tasks):
                if state.requested:
                    raise state.interrupted()
                finished(index, families.run_piece(*task), None)
            if state.requested:
                raise state.interrupted()
    by_key: dict[str, tuple[KernelSource, list[str]]] = {}
    for spec, kernels in zip(owners, found):
        for key, src in kernels or ():
            if key not in by_key:
                by_key[key] = (src, [])
            if spec.label not in by_key[key][1]:
                by_key[key][1].append(spec.label)
    helper_keys: set[str] = set()
    for why, source in helpers.items():
        src = source()
        key = jit.kernel_key(src, arch)
        helper_keys.add(key)
        by_key.setdefault(key, (src, []))[1].append(why)
    kernels = [PlannedKernel(key, src, tuple(used), key in helper_keys) for key, (src, used) in by_key.items()]
    return Plan(arch, num_sms, kernels, time.perf_counter() - t0)


def _entry_fields(spec) -> dict[str, Any]:
    """What of an entry decides its kernels: every field of its kind's spec (a frozen dataclass) but its note."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "note"}


def plan_record_key(entries: Iterable[ShapeSpec | MqaSpec], *, max_m: int = DEFAULT_MAX_M,
                    num_sms: int = DEFAULT_NUM_SMS, arch: str = DEFAULT_ARCH) -> str:
    """The key of the plan record of these arguments (:mod:`dgx.plan_record`), and of the settings that change the
    heuristics' picks (DGX_GEMM_RUNTIME_N, DGX_GEMM_RUNTIME_K, DGX_GEMM_RUNTIME_STREAM_B)."""
    options = {name: True for name, on in (("gemm_runtime_n", env.gemm_runtime_n()),
                                           ("gemm_runtime_k", env.gemm_runtime_k()),
                                           ("gemm_runtime_stream_b", env.gemm_runtime_stream_b())) if on} or None
    return plan_record.record_key([_entry_fields(s) for s in entries], max_m=max_m, num_sms=num_sms, arch=arch,
                                  options=options)


def recorded_plan(
    entries: Iterable[ShapeSpec | MqaSpec],
    *,
    max_m: int = DEFAULT_MAX_M,
    num_sms: int = DEFAULT_NUM_SMS,
    arch: str = DEFAULT_ARCH,
    jobs: int = 1,
    progress: Callable[[PlanProgress], None] | None = None,
    root: str | os.PathLike | None = None,
) -> Plan:
    """:func:`plan`, answered from the plan record an identical earlier warmup left in the cache at ``root``
    (default: the kernel cache's) when there is one (``Plan.reused``); else enumerated, and recorded there unless
    that cache is read-only. Same arguments, checks and interrupts as :func:`plan`."""
    entries = list(entries)
    _check_plan_args(entries, max_m, num_sms, arch, jobs)
    t0 = time.perf_counter()
    if root is None:
        kc = jit.kernel_cache()
        root, writable = kc.root, not kc.read_only
    else:
        writable = True
    key = plan_record_key(entries, max_m=max_m, num_sms=num_sms, arch=arch)
    found = plan_record.load(root, key)
    if found is not None:
        kernels = [PlannedKernel(k.key, k.source, k.used_by, k.helper) for k in found[0]]
        return Plan(arch, num_sms, kernels, time.perf_counter() - t0, reused=True)
    the_plan = plan(entries, max_m=max_m, num_sms=num_sms, arch=arch, jobs=jobs, progress=progress)
    if writable:
        recorded = [plan_record.RecordedKernel(pk.key, pk.source, pk.used_by, pk.helper) for pk in the_plan.kernels]
        inputs = {"entries": len(entries), "max_m": max_m, "num_sms": num_sms, "arch": arch,
                  "kernels": len(recorded), **jit.install_summary(arch)}
        plan_record.save(root, key, recorded, the_plan.seconds, inputs)
    return the_plan


# --- compiling ------------------------------------------------------------------------------------


@dataclass
class WarmupResult:
    kernels: int = 0
    compiled: int = 0  # compiled by this warmup
    cached: int = 0  # already in the cache, or built meanwhile by another process sharing it
    failed: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (kernel name, error)
    built_elsewhere: int = 0  # of ``cached``: built by another process sharing the cache while this one ran
    corrupt_rebuilt: int = 0  # corrupt entries found (and removed) before building
    interrupted: str | None = None  # the signal that stopped the warmup ("SIGINT", "SIGTERM"), if one did
    not_built: int = 0  # kernels left unbuilt because of the interrupt (never started, or killed)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kernels": self.kernels,
            "compiled": self.compiled,
            "cached": self.cached,
            "failed": self.failed,
            "seconds": round(self.seconds, 2),
        }
        if self.interrupted:
            out["interrupted"] = self.interrupted
            out["not_built"] = self.not_built
        return out


@dataclass(frozen=True)
class Progress:
    """Reported after each kernel that had to be built: ``done`` of ``total`` so far, of which
    ``compiled`` were compiled here and ``elsewhere`` built meanwhile by another process.
    ``predicted_eta`` is :class:`dgx.compile_cost.CompileClock`'s estimate of the seconds left (None before it
    has one)."""

    done: int
    total: int
    failed: int
    elapsed: float
    kernel: str
    error: str | None
    compiled: int = 0
    elsewhere: int = 0
    predicted_eta: float | None = None

    @property
    def eta(self) -> float | None:
        """Seconds left: the compile clock's estimate, else the mean time per kernel so far times the kernels left."""
        if self.done == 0 or self.done >= self.total:
            return None if self.done == 0 else 0.0
        if self.predicted_eta is not None:
            return self.predicted_eta
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


def _build_timed(source: KernelSource, arch: str) -> tuple[bool, str | None, float]:
    """:func:`build_one`, and the seconds it took in the worker (what the compile clock's speed is made of)."""
    t0 = time.perf_counter()
    compiled, error = build_one(source, arch)
    return compiled, error, time.perf_counter() - t0


def run(
    the_plan: Plan,
    *,
    jobs: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    on_interrupt: Callable[[int], None] | None = None,
) -> WarmupResult:
    """Compiles the planned kernels missing from the cache in up to ``jobs`` spawned processes, the longest
    first (as :func:`dgx.compile_cost.predicted_seconds` has it), so the processes finish together.

    SIGINT or SIGTERM (the first) stops handing out kernels and lets the running compiles finish
    (``on_interrupt(running)`` is told how many); a second one kills them. Either way the workers are
    reaped, a killed compile's unfinished files are removed, and the result says what was kept
    (``interrupted``, ``not_built``). Entries only ever land whole, so the cache stays consistent.
    """
    if jobs is None:
        jobs = os.cpu_count() or 1
    _check_positive("jobs", jobs)
    t0 = time.perf_counter()
    result = WarmupResult(kernels=len(the_plan.kernels))
    kc = jit.kernel_cache()
    corrupt_before = kc.stats.corrupt
    todo = []
    for pk in the_plan.kernels:
        if kc.contains(pk.key):
            result.cached += 1
        else:
            todo.append(pk)
    result.corrupt_rebuilt = kc.stats.corrupt - corrupt_before
    done = 0
    costs = [compile_cost.predicted_seconds(pk.source) for pk in todo]
    clock = compile_cost.CompileClock(costs, max(1, min(jobs, len(todo))))

    def started(index: int) -> None:
        clock.start(index, time.perf_counter())

    def finished(index: int, value, error: BaseException | None) -> None:
        nonlocal done
        pk = todo[index]
        now = time.perf_counter()
        if error is not None:  # the worker died (crash, out of memory): that kernel failed
            compiled, message = False, f"worker process failed: {type(error).__name__}: {error}"
            clock.finish(index, now, measured=False)
        else:
            compiled, message, seconds = value
            clock.finish(index, now, seconds, measured=compiled)
        if message is not None:
            result.failed += 1
            result.failures.append((pk.source.name, message))
        elif compiled:
            result.compiled += 1
        else:
            result.cached += 1
            result.built_elsewhere += 1
        done += 1
        if progress is not None:
            progress(
                Progress(
                    done, len(todo), result.failed, now - t0, pk.source.name, message,
                    result.compiled, result.built_elsewhere, clock.eta(now),
                )
            )

    if todo:
        with interrupts.guard() as state:
            outcome = workpool.run_tasks(
                _build_timed,
                [(pk.source, the_plan.arch) for pk in todo],
                jobs=jobs,
                on_done=finished,
                state=state,
                on_interrupt=on_interrupt,
                initializer=_worker_init,
                order=compile_cost.longest_first(costs),
                on_start=started,
            )
        if outcome.killed:
            kc.remove_abandoned([todo[i].key for i in outcome.killed])
        if outcome.interrupted:
            result.interrupted = interrupts.signal_name(outcome.signum)
            result.not_built = len(outcome.not_started) + len(outcome.killed)
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
    """recorded_plan() then run(): builds every kernel the entries can need into the cache (DGX_CACHE_DIR)."""
    jobs = jobs or os.cpu_count() or 1
    the_plan = recorded_plan(entries, max_m=max_m, num_sms=num_sms, arch=arch, jobs=jobs)
    return run(the_plan, jobs=jobs, progress=progress)
