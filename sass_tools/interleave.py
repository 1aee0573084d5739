"""FFMA yield/reuse pass: let the warp scheduler interleave long FFMA runs with other warps' work.

In the FP8 GEMM's promotion code, a math warpgroup issues dozens of back-to-back FFMA (accumulator ×
scale). The pass finds runs of at least ``min_run`` consecutive FFMA in a kernel's ``.text`` and, on a
deterministic ``fraction`` of each run's instructions, sets the yield flag (encoding: clears bit 109,
see codec.py for why 0 means "yield") and clears the reuse flags (bits 122..125): the operand-reuse
cache does not survive a warp switch, so an instruction that may yield must not leave an operand in it
for the next one. Nothing else changes: same instructions, same count, same stall counts and barriers,
every byte outside the touched instructions' bits 109 and 122..125 identical.

Which instructions: position ``k`` of a run (0-based) is chosen when ``ceil(k * fraction)`` is less
than ``ceil((k + 1) * fraction)``: evenly spread, starting with the first FFMA; ``fraction=0.5`` picks
positions 0, 2, 4, ... That is the pattern ptxas 13.5 produces when it interleaves a promotion run by
itself (yield on every other FFMA from the first, reuse only on the others; the ``wgmma_fp8_384`` test
kernel), and the pass reproduces it bit for bit on a run ptxas left alone. The choice depends only on
opcodes and positions, which the pass does not change, and the edit (clear two fields) is idempotent,
so applying the pass twice gives the bytes of applying it once.

Runs that already interleave (at least two FFMA with the yield flag, evenly spaced, see
``looks_interleaved``) are reported and, with ``skip_interleaved`` (the default), left alone. Whether
ptxas interleaves is not a matter of compiler version alone (DeepGEMM turns its own pass off from CUDA
12.9): NVRTC 13.5 interleaves the promotion run of a 384-thread kernel and leaves the same code in a
128- or 256-thread kernel with no yield at all, so it is checked per run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from math import ceil

from .codec import FFMA, INSTRUCTION_BYTES, Instruction, decode
from .elf import Cubin
from .opcodes import require_supported_arch

# Part of dgx's cache key: bump it whenever the pass can produce different bytes for the same input
# and parameters.
PASS_VERSION = "ffma-yield-reuse-1"
DEFAULT_MIN_RUN = 8
DEFAULT_FRACTION = 0.5


@dataclass(frozen=True)
class FfmaRun:
    """A maximal run of consecutive FFMA in one kernel."""

    start: int  # index of the first instruction (byte offset = 16 * start)
    length: int
    yield_set: int  # how many of its FFMA have the yield flag
    interleaved: bool  # the yield flags form an even pattern over the run (looks_interleaved)

    @property
    def offset(self) -> int:
        return self.start * INSTRUCTION_BYTES


def looks_interleaved(yield_positions: list[int], length: int) -> bool:
    """Whether yield flags at these positions (0-based within a run of ``length``) are an
    interleaving pattern: at least two, gaps differing by at most one, and neither end of the run
    longer without a yield than the largest gap."""
    if len(yield_positions) < 2:
        return False
    gaps = [b - a for a, b in zip(yield_positions, yield_positions[1:])]
    widest = max(gaps)
    return (
        widest - min(gaps) <= 1
        and yield_positions[0] <= widest
        and length - 1 - yield_positions[-1] <= widest
    )


def ffma_runs(instructions: list[Instruction], min_run: int = 1) -> list[FfmaRun]:
    """Maximal runs of consecutive FFMA of at least ``min_run`` instructions."""
    runs = []
    i, n = 0, len(instructions)
    while i < n:
        if instructions[i].op_class != FFMA:
            i += 1
            continue
        j = i
        while j < n and instructions[j].op_class == FFMA:
            j += 1
        if j - i >= min_run:
            yields = [k for k in range(j - i) if instructions[i + k].control.yield_flag]
            runs.append(FfmaRun(i, j - i, len(yields), looks_interleaved(yields, j - i)))
        i = j
    return runs


def selected_positions(length: int, fraction: float) -> list[int]:
    """Positions within a run of ``length`` that the pass edits: ``ceil(length * fraction)`` of them,
    evenly spread, the first one included (exact arithmetic on the decimal value of ``fraction``)."""
    f = Fraction(str(fraction))
    return [k for k in range(length) if ceil(k * f) < ceil((k + 1) * f)]


@dataclass(frozen=True)
class RunReport:
    start: int  # instruction index
    offset: int  # byte offset in the kernel's .text, as nvdisasm prints it
    length: int
    yield_before: int
    interleaved_before: bool  # the compiler (or an earlier pass) already interleaved this run
    skipped: bool  # left alone because interleaved_before and skip_interleaved
    changed: int  # instructions whose bytes this pass changed


@dataclass(frozen=True)
class KernelPassReport:
    kernel: str
    instructions: int
    runs: tuple[RunReport, ...]

    @property
    def changed(self) -> int:
        return sum(r.changed for r in self.runs)


@dataclass(frozen=True)
class PassReport:
    pass_version: str
    min_run: int
    fraction: float
    skip_interleaved: bool
    kernels: tuple[KernelPassReport, ...]

    @property
    def changed(self) -> int:
        """Instructions changed over all kernels."""
        return sum(k.changed for k in self.kernels)

    @property
    def already_interleaved(self) -> int:
        """Runs found interleaved before the pass."""
        return sum(r.interleaved_before for k in self.kernels for r in k.runs)

    def to_json(self) -> dict:
        out = asdict(self)
        for k, kj in zip(self.kernels, out["kernels"]):
            kj["changed"] = k.changed
        out["changed"] = self.changed
        out["already_interleaved"] = self.already_interleaved
        return out


def interleave_ffma(
    cubin: bytes,
    *,
    min_run: int = DEFAULT_MIN_RUN,
    fraction: float = DEFAULT_FRACTION,
    kernels: list[str] | None = None,
    skip_interleaved: bool = True,
) -> tuple[bytes, PassReport]:
    """Run the pass over ``kernels`` (default: every kernel) of an sm_90 cubin.

    Returns the patched cubin (the input bytes themselves when nothing changed) and a report.
    """
    if isinstance(min_run, bool) or not isinstance(min_run, int) or min_run < 1:
        raise ValueError(f"min_run must be an integer >= 1, got {min_run!r}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    parsed = Cubin(cubin)
    require_supported_arch(parsed.arch)
    names = list(parsed.kernels) if kernels is None else list(kernels)
    changes: dict[str, dict[int, bytes]] = {}
    reports = []
    for name in names:
        instrs = decode(parsed.text(name))
        run_reports = []
        for run in ffma_runs(instrs, min_run):
            skip = skip_interleaved and run.interleaved
            changed = 0
            if not skip:
                for k in selected_positions(run.length, fraction):
                    ins = instrs[run.start + k]
                    new = ins.with_control(replace(ins.control, yield_flag=True, reuse=0))
                    if new != ins:
                        changes.setdefault(name, {})[ins.index] = new.to_bytes()
                        changed += 1
            run_reports.append(
                RunReport(run.start, run.offset, run.length, run.yield_set, run.interleaved, skip, changed)
            )
        reports.append(KernelPassReport(name, len(instrs), tuple(run_reports)))
    report = PassReport(PASS_VERSION, min_run, fraction, skip_interleaved, tuple(reports))
    return (parsed.patched(changes) if changes else parsed.data), report
