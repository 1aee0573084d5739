"""Every environment variable dgx reads, in one place.

Values are read when asked for (not cached at import), so tests and long-running servers can change them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import EnvError


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str
    help: str


VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("DGX_CACHE_DIR", "$XDG_CACHE_HOME/dgx or ~/.cache/dgx", "Root of the on-disk kernel cache."),
    EnvVar("DGX_JIT_STRICT", "0", "1: compiling a kernel at run time is an error (production servers)."),
    EnvVar("DGX_JIT_DEBUG", "0", "1: print each compile (kernel, options, time) and each cache miss."),
    EnvVar("DGX_JIT_PRINT_COMPILER_COMMAND", "0", "1: print the NVRTC options of every compile."),
    EnvVar("DGX_JIT_LINEINFO", "0", "1: compile with -lineinfo (source lines in profilers); part of the key."),
    EnvVar("DGX_JIT_PTXAS_VERBOSE", "0", "1: ptxas -v (registers, spills) printed for every compile."),
    EnvVar("DGX_JIT_DUMP_DIR", "", "If set: write each compiled kernel's source, PTX, cubin and (with nvdisasm installed) SASS there."),
    EnvVar("DGX_SASS_INTERLEAVE", "auto", "auto|on|off: the FFMA yield/reuse SASS pass (README says what auto does)."),
    EnvVar("DGX_PRINT_CONFIGS", "0", "1: print the kernel config the heuristic picks for each new shape."),
    EnvVar("DGX_NUM_SMS", "", "Use this many SMs (default: all of the device's)."),
)


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


def cache_root() -> Path:
    """The kernel cache root: $DGX_CACHE_DIR, else $XDG_CACHE_HOME/dgx, else ~/.cache/dgx."""
    explicit = os.environ.get("DGX_CACHE_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dgx"


def jit_strict() -> bool:
    return _flag("DGX_JIT_STRICT")


def jit_debug() -> bool:
    return _flag("DGX_JIT_DEBUG")


def print_compiler_command() -> bool:
    return _flag("DGX_JIT_PRINT_COMPILER_COMMAND")


def lineinfo() -> bool:
    return _flag("DGX_JIT_LINEINFO")


def ptxas_verbose() -> bool:
    return _flag("DGX_JIT_PTXAS_VERBOSE")


def dump_dir() -> Path | None:
    value = os.environ.get("DGX_JIT_DUMP_DIR", "").strip()
    return Path(value).expanduser() if value else None


def sass_interleave() -> str:
    raw = os.environ.get("DGX_SASS_INTERLEAVE", "auto")
    value = raw.strip().lower() or "auto"
    if value not in ("auto", "on", "off"):
        raise EnvError("DGX_SASS_INTERLEAVE", raw, "auto, on or off", "unset it for the default (auto)")
    return value


def print_configs() -> bool:
    return _flag("DGX_PRINT_CONFIGS")


def num_sms_override() -> int | None:
    raw = os.environ.get("DGX_NUM_SMS", "")
    value = raw.strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise EnvError(
            "DGX_NUM_SMS", raw, "a positive integer (the SM count to plan kernels for, e.g. 132)",
            "set it to the SMs the servers use, or unset it to use all of the GPU's",
        )
    return n


# Variables whose value is checked, and the function that checks it (raising EnvError).
_CHECKED = {"DGX_SASS_INTERLEAVE": sass_interleave, "DGX_NUM_SMS": num_sms_override}


def problems() -> dict[str, str]:
    """The variables set to a value dgx cannot use: name -> the error message (``dgx info`` shows them)."""
    out = {}
    for name, check in _CHECKED.items():
        try:
            check()
        except EnvError as exc:
            out[name] = str(exc)
    return out
