"""NVRTC front end: compiles a rendered instantiation unit to an sm_90a cubin.

Works without a GPU (NVRTC compiles for any architecture). Headers from ``ptx/`` are handed to NVRTC in
memory, so no include path, and nothing machine-specific, enters the compile.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import ptx
from . import env
from .errors import CompileError, CudaError

# Options every kernel is compiled with. -default-device spares __device__ on helpers; the rest keep
# NVRTC quiet about what our inline PTX does on purpose.
BASE_OPTIONS: tuple[str, ...] = (
    "-std=c++17",
    "-default-device",
    "--diag-suppress=177,550",
    "-DNDEBUG",
)


@dataclass(frozen=True)
class CompileResult:
    """What one NVRTC compile produced."""

    cubin: bytes
    ptx: str | None
    log: str
    seconds: float
    options: tuple[str, ...]


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """The (major, minor) version of the NVRTC library that is loaded."""
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


def compile_options(arch: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The full option list for `arch` (e.g. 'sm_90a'); debug switches come from the environment."""
    if not arch.startswith("sm_"):
        raise ValueError(f"arch must look like 'sm_90a'; got {arch!r}")
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS]
    if env.lineinfo():
        opts.append("-lineinfo")
    if env.ptxas_verbose():
        opts.append("--ptxas-options=-v")
    opts.extend(extra)
    return tuple(opts)


def compile_cubin(source: str, kernel: str, options: tuple[str, ...], want_ptx: bool = False) -> CompileResult:
    """Compiles `source` with the in-memory headers of ptx/ it includes (the ones its cache key covers) and
    returns the cubin.

    Raises CompileError (with the NVRTC log and the path of a saved copy of the source) on failure.
    """
    from cuda.bindings import nvrtc

    headers = ptx.included(source)
    names = [n.encode() for n in headers]
    contents = [c for c in headers.values()]
    if env.print_compiler_command():
        print(f"dgx: NVRTC {'.'.join(map(str, nvrtc_version()))} {kernel}: {' '.join(options)}", file=sys.stderr)

    start = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{kernel}.cu".encode(), len(names), contents, names)
    _check(err, "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(kernel, log or str(result), save_failed_source(kernel, source), list(options))
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
        ptx_text = _program_ptx(prog) if want_ptx else None
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - start
    if env.ptxas_verbose() and log.strip():
        print(f"dgx: {kernel}:\n{log.strip()}", file=sys.stderr)
    return CompileResult(bytes(cubin), ptx_text, log, seconds, options)


def save_failed_source(kernel: str, source: str) -> str:
    """Writes the source of a failed compile where a developer can find it; returns the path."""
    folder = env.dump_dir() or Path(tempfile.gettempdir()) / f"dgx-failed-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    path = folder / f"{kernel}-{digest}.cu"
    path.write_text(source)
    # The headers are needed to rebuild; put them beside the source.
    for name, content in ptx.headers().items():
        (folder / name).write_bytes(content)
    return str(path)


def _program_log(prog) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    buf = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


def _program_ptx(prog) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetPTXSize(prog)
    _check(err, "nvrtcGetPTXSize")
    buf = bytearray(size)
    nvrtc.nvrtcGetPTX(prog, buf)
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


def _check(err, call: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaError(call, err)
