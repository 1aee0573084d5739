"""What ``dgx inspect`` shows of a cubin: resources, instruction mix, FFMA runs, disassembly."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from .codec import FFMA, HGMMA, LDL, QGMMA, STL, decode
from .elf import Cubin
from .errors import CubinError, NvdisasmError, NvdisasmNotFoundError
from .interleave import DEFAULT_MIN_RUN, FfmaRun, ffma_runs
from .opcodes import require_supported_arch

NVDISASM_INSTALL_HINT = (
    "nvdisasm was not found. Install it with `pip install nvidia-cuda-nvdisasm` "
    "(or `pip install 'dgx[inspect]'`), or put a CUDA toolkit's bin directory on PATH."
)


@dataclass(frozen=True)
class KernelReport:
    kernel: str
    arch: int  # SM version (90 for sm_90a)
    instructions: int
    registers: int | None  # EIATTR_REGCOUNT
    shared_bytes: int  # static shared memory (dynamic shared memory is set at launch)
    local_bytes: int  # stack frame per thread (local memory)
    spill_instructions: int  # LDL + STL
    ldl: int
    stl: int
    qgmma: int
    hgmma: int
    ffma: int
    ffma_yield_set: int  # FFMA with the yield flag, anywhere in the kernel
    ffma_runs: tuple[FfmaRun, ...]  # runs of at least min_run FFMA
    histogram: dict[str, int] = field(hash=False)  # mnemonic (or "unknown 0x..." for unknown opcodes) -> count

    @property
    def ffma_interleaved_runs(self) -> int:
        return sum(r.interleaved for r in self.ffma_runs)

    def to_json(self) -> dict:
        """A JSON-ready dict. ``ffma_runs`` entries: ``start`` is the byte offset of the run's first
        FFMA in the kernel's code (as nvdisasm prints it), ``length`` counts instructions,
        ``yield_set`` counts FFMA of the run with the yield flag, ``interleaved`` tells whether those
        form an even interleaving pattern."""
        return {
            "kernel": self.kernel,
            "arch": f"sm_{self.arch}",
            "instructions": self.instructions,
            "registers": self.registers,
            "shared_bytes": self.shared_bytes,
            "local_bytes": self.local_bytes,
            "spill_instructions": self.spill_instructions,
            "ldl": self.ldl,
            "stl": self.stl,
            "qgmma": self.qgmma,
            "hgmma": self.hgmma,
            "ffma": self.ffma,
            "ffma_yield_set": self.ffma_yield_set,
            "ffma_runs": [
                {"start": r.offset, "length": r.length, "yield_set": r.yield_set, "interleaved": r.interleaved}
                for r in self.ffma_runs
            ],
            "ffma_interleaved_runs": self.ffma_interleaved_runs,
            "histogram": dict(sorted(self.histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        }


def unknown_label(opcode: int) -> str:
    """How reports name an opcode the table does not know."""
    return f"unknown 0x{opcode:03x}"


def analyze_cubin(cubin: bytes, *, min_run: int = DEFAULT_MIN_RUN) -> list[KernelReport]:
    """One report per kernel (``.text.<name>`` section), in section order. ``min_run`` is the shortest
    FFMA run listed (by default the FFMA pass's own threshold). sm_90 cubins only (CubinError else):
    the opcode table is sm_90's."""
    parsed = Cubin(cubin)
    require_supported_arch(parsed.arch)
    reports = []
    for kernel in parsed.kernels.values():
        instrs = decode(parsed.text(kernel.name))
        classes = Counter(ins.op_class for ins in instrs)
        histogram = Counter(ins.mnemonic or unknown_label(ins.opcode) for ins in instrs)
        reports.append(
            KernelReport(
                kernel=kernel.name,
                arch=parsed.arch,
                instructions=len(instrs),
                registers=kernel.registers,
                shared_bytes=kernel.shared_bytes,
                local_bytes=kernel.local_bytes,
                spill_instructions=classes[LDL] + classes[STL],
                ldl=classes[LDL],
                stl=classes[STL],
                qgmma=classes[QGMMA],
                hgmma=classes[HGMMA],
                ffma=classes[FFMA],
                ffma_yield_set=sum(1 for i in instrs if i.op_class == FFMA and i.control.yield_flag),
                ffma_runs=tuple(ffma_runs(instrs, min_run)),
                histogram=dict(histogram),
            )
        )
    return reports


def nvdisasm_path() -> str | None:
    """The nvdisasm executable: from an installed ``nvidia-cuda-nvdisasm`` wheel
    (``nvidia/<cuXY or cuda_nvdisasm>/bin``), else PATH, else /usr/local/cuda/bin; None if none."""
    exe = "nvdisasm.exe" if sys.platform == "win32" else "nvdisasm"
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    candidates = []
    for root in roots:
        candidates += sorted(glob.glob(os.path.join(root, "*", "bin", exe)), reverse=True)
    candidates += [shutil.which(exe) or "", os.path.join("/usr/local/cuda/bin", exe)]
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def disassemble(cubin: bytes, *, kernel: str | None = None, hex: bool = False) -> str:
    """nvdisasm's listing of the cubin's code (all kernels, or one), optionally with encodings."""
    exe = nvdisasm_path()
    if exe is None:
        raise NvdisasmNotFoundError(NVDISASM_INSTALL_HINT)
    args = [exe, "--print-code"]
    if hex:
        args.append("--print-instruction-encoding")
    if kernel is not None:
        k = Cubin(cubin).kernel(kernel)
        if k.symbol is None:
            raise CubinError(f"kernel {kernel!r} has no function symbol to select it by")
        args += ["--cuda-function-index", str(k.symbol.index)]
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        res = subprocess.run(args + [path], capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        raise NvdisasmError(f"nvdisasm exited with {res.returncode}: {res.stderr.strip()}")
    return res.stdout
