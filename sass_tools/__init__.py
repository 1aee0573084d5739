"""Read, inspect and patch sm_90a cubins: ELF reader, SASS control-bit codec, FFMA yield/reuse pass.

A leaf package: imports only the standard library (never dgx, cache or ptx).
"""

from .codec import OP_CLASSES, Control, Instruction, classify, decode, encode
from .elf import Cubin, Kernel
from .errors import CubinError, NvdisasmError, NvdisasmNotFoundError, SassToolsError
from .inspect import KernelReport, analyze_cubin, disassemble, nvdisasm_path
from .interleave import (
    DEFAULT_FRACTION,
    DEFAULT_MIN_RUN,
    PASS_VERSION,
    FfmaRun,
    PassReport,
    ffma_runs,
    interleave_ffma,
)

__all__ = [
    "DEFAULT_FRACTION",
    "DEFAULT_MIN_RUN",
    "OP_CLASSES",
    "PASS_VERSION",
    "Control",
    "Cubin",
    "CubinError",
    "FfmaRun",
    "Instruction",
    "Kernel",
    "KernelReport",
    "NvdisasmError",
    "NvdisasmNotFoundError",
    "PassReport",
    "SassToolsError",
    "analyze_cubin",
    "classify",
    "decode",
    "disassemble",
    "encode",
    "ffma_runs",
    "interleave_ffma",
    "nvdisasm_path",
]
