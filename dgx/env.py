"""Every environment variable dgx reads, in one place.

Values are read when asked for (not cached at import), so tests and long-running servers can change them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import EnvError
from .limits import MAX_NUM_SMS


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str
    help: str


#: The values an on/off variable accepts (any case, surrounding spaces ignored); anything else is refused.
FLAG_ON = ("1", "true", "yes", "on")
FLAG_OFF = ("0", "false", "no", "off", "")
FLAG_VALUES = "1, true, yes or on (on), or 0, false, no, off or empty (off)"

VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("DGX_CACHE_DIR", "$XDG_CACHE_HOME/dgx or ~/.cache/dgx", "Root of the on-disk kernel cache (an absolute path)."),
    EnvVar("DGX_JIT_STRICT", "0", "1: compiling a kernel at run time is an error (production servers)."),
    EnvVar("DGX_JIT_DEBUG", "0", "1: print each compile (kernel, options, time) and each cache miss."),
    EnvVar("DGX_JIT_PRINT_COMPILER_COMMAND", "0", "1: print the NVRTC options of every compile."),
    EnvVar("DGX_JIT_LINEINFO", "0", "1: compile with -lineinfo (source lines in profilers); part of the key."),
    EnvVar("DGX_JIT_PTXAS_VERBOSE", "0", "1: ptxas -v (registers, spills) printed for every compile."),
    EnvVar("DGX_JIT_DUMP_DIR", "", "If set: write each compiled kernel's source, PTX, cubin and (with nvdisasm installed) SASS there."),
    EnvVar("DGX_SASS_INTERLEAVE", "auto", "auto|on|off: the FFMA yield/reuse SASS pass (auto: on no kernel; docs/PERFORMANCE.md says why)."),
    EnvVar("DGX_PRINT_CONFIGS", "0", "1: print the kernel config the heuristic picks for each new shape."),
    EnvVar("DGX_GEMM_RUNTIME_N", "0", "1: FP8 GEMM kernels take N at run time, one kernel for every N of a config "
           "(fewer kernels to build and warm; each config's code timed against N compiled in by tests/device/warmup_ab.py)."),
    EnvVar("DGX_GEMM_RUNTIME_STREAM_B", "0", "1: dense FP8 GEMM kernels take B's L2 policy (evict-first or normal) at run "
           "time, one kernel for both (timed against the policy compiled in by tests/device/warmup_ab.py)."),
    EnvVar("DGX_GEMM_RUNTIME_K", "0", "1: FP8 GEMM kernels whose k-loop needs no compile-time k-block count take K at "
           "run time too, one kernel for every K of a config (timed against K compiled in by tests/device/warmup_ab.py)."),
    EnvVar("DGX_NUM_SMS", "", f"Use this many SMs (default: all of the device's; at most {MAX_NUM_SMS})."),
    EnvVar("DGX_BF16_PINGPONG", "0", "1: the BF16 GEMM heuristic also weighs ping-pong tiles (each math warpgroup its own tiles, epilogues under the other's MMAs); off until measured on a device."),
    EnvVar("DGX_AS_DEEP_GEMM", "0", "1: `import deep_gemm` gets dgx.deep_gemm in every process of this environment (the startup hook dgx installs)."),
)

#: The on/off variables (read through :func:`_flag`).
FLAGS = (
    "DGX_JIT_STRICT",
    "DGX_JIT_DEBUG",
    "DGX_JIT_PRINT_COMPILER_COMMAND",
    "DGX_JIT_LINEINFO",
    "DGX_JIT_PTXAS_VERBOSE",
    "DGX_PRINT_CONFIGS",
    "DGX_BF16_PINGPONG",
    "DGX_AS_DEEP_GEMM",
    "DGX_GEMM_RUNTIME_N",
    "DGX_GEMM_RUNTIME_K",
    "DGX_GEMM_RUNTIME_STREAM_B",
)


def _flag(name: str) -> bool:
    """An on/off variable (or the DeepGEMM variable standing in for it): unset or empty is off; a value outside
    FLAG_ON and FLAG_OFF raises EnvError naming the variable that holds it (a typo such as ``ture`` must not
    silently mean off). DeepGEMM's own DG_* variables also take what DeepGEMM reads them as, an integer (0 off)."""
    raw, holder = lookup(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in FLAG_ON:
        return True
    if value in FLAG_OFF:
        return False
    if holder.startswith("DG_"):
        try:
            return int(value) != 0
        except ValueError:
            pass
    raise EnvError(holder, raw, FLAG_VALUES, "unset it for the default (off)")


def unwritable_reason(path: Path) -> str | None:
    """Why dgx could not create and write the directory ``path``, or None if it can. Probes the filesystem
    (a file made and removed in it, or a directory in its nearest existing parent) instead of trusting
    permission bits, which say yes to root even on read-only or virtual filesystems; leaves nothing behind."""
    probe_in = path
    while not probe_in.exists():
        if probe_in.is_symlink():
            return f"{probe_in} is a broken symbolic link"
        if probe_in.parent == probe_in:
            break
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        return f"{probe_in} is a file, not a directory" if probe_in != path else "it is not a directory"
    try:
        if probe_in == path:
            with tempfile.TemporaryFile(dir=probe_in):
                pass
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".dgx-probe-", dir=probe_in))
    except OSError as exc:
        what = "write in" if probe_in == path else "create a directory in"
        return f"cannot {what} {probe_in}: {exc.strerror or exc}"
    return None


def cache_root() -> Path:
    """The kernel cache root: $DGX_CACHE_DIR (or DeepGEMM's $DG_JIT_CACHE_DIR), else $XDG_CACHE_HOME/dgx, else
    ~/.cache/dgx.

    A relative DGX_CACHE_DIR raises EnvError (it would put a cache wherever a command happens to run); a
    relative XDG_CACHE_HOME is ignored, as the XDG base-directory rules say."""
    raw, holder = lookup("DGX_CACHE_DIR")
    explicit = (raw or "").strip()
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_absolute():
            raise EnvError(
                holder, raw, "an absolute path (or one starting with ~)",
                "a relative one would put a kernel cache wherever a command runs; give the full path",
            )
        return path
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg and Path(xdg).expanduser().is_absolute() else Path.home() / ".cache"
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
    """Where compiled kernels are dumped: $DGX_JIT_DUMP_DIR; else, with one of DeepGEMM's DG_JIT_DUMP_PTX/_SASS/_ASM
    on, <cache root>/dumps; else None. A directory dgx cannot create or write raises EnvError naming the variable,
    so a compile is refused before it starts rather than failing after it."""
    raw = os.environ.get("DGX_JIT_DUMP_DIR", "")
    value = raw.strip()
    if value:
        path, holder = Path(value).expanduser(), "DGX_JIT_DUMP_DIR"
    elif any(_flag(name) for name in _DUMP_FLAGS):
        holder = next(name for name in _DUMP_FLAGS if _flag(name))
        path, raw = cache_root() / DEEPGEMM_DUMP_SUBDIR, os.environ[holder]
    else:
        return None
    why = unwritable_reason(path)
    if why is not None:
        raise EnvError(holder, raw, f"a dump directory dgx can create and write ({path}: {why})",
                       "point DGX_JIT_DUMP_DIR at a writable directory, or unset it")
    return path


def sass_interleave() -> str:
    raw = os.environ.get("DGX_SASS_INTERLEAVE", "auto")
    value = raw.strip().lower() or "auto"
    if value not in ("auto", "on", "off"):
        raise EnvError("DGX_SASS_INTERLEAVE", raw, "auto, on or off", "unset it for the default (auto)")
    return value


def print_configs() -> bool:
    return _flag("DGX_PRINT_CONFIGS")


def bf16_pingpong() -> bool:
    """DGX_BF16_PINGPONG: whether the BF16 GEMM heuristic weighs the ping-pong schedule too."""
    return _flag("DGX_BF16_PINGPONG")


def gemm_runtime_n() -> bool:
    """Whether the FP8 GEMM heuristics pick kernels that take N at run time (GemmConfig.runtime_n)."""
    return _flag("DGX_GEMM_RUNTIME_N")


def gemm_runtime_stream_b() -> bool:
    """Whether the dense FP8 GEMM heuristic picks kernels that take B's L2 policy at run time."""
    return _flag("DGX_GEMM_RUNTIME_STREAM_B")


def gemm_runtime_k() -> bool:
    """Whether the FP8 GEMM heuristics pick kernels that take K at run time where they can (GemmConfig.runtime_k)."""
    return _flag("DGX_GEMM_RUNTIME_K")


def num_sms_override() -> int | None:
    raw = os.environ.get("DGX_NUM_SMS", "")
    value = raw.strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 0 < n <= MAX_NUM_SMS:
        raise EnvError(
            "DGX_NUM_SMS", raw,
            f"an SM count from 1 to {MAX_NUM_SMS} (the most a Hopper GPU has; e.g. 132 for H100 SXM)",
            "set it to the SMs the servers use, or unset it to use all of the GPU's",
        )
    return n


def as_deep_gemm() -> bool:
    """DGX_AS_DEEP_GEMM: whether `import deep_gemm` gets dgx.deep_gemm (asked by the startup hook's finder)."""
    return _flag("DGX_AS_DEEP_GEMM")


# Variables whose value is checked, and the function that checks it (raising EnvError).
_CHECKED = {
    "DGX_CACHE_DIR": cache_root,
    "DGX_JIT_DUMP_DIR": dump_dir,
    "DGX_SASS_INTERLEAVE": sass_interleave,
    "DGX_NUM_SMS": num_sms_override,
    **{name: (lambda name=name: _flag(name)) for name in FLAGS},
}


def problems() -> dict[str, str]:
    """The variables set to a value dgx cannot use: name -> the error message (``dgx info`` shows them)."""
    out = {}
    for name, check in _CHECKED.items():
        try:
            check()
        except EnvError as exc:
            out[name] = str(exc)
    return out


def check() -> None:
    """Raise the EnvError of the first variable set to a value dgx cannot use (commands call it before any
    work, so a bad value stops them at once instead of where it is first read)."""
    for check_one in _CHECKED.values():
        check_one()


# --- DeepGEMM's variables (DG_*) ---------------------------------------------------------------------------------
# Where dgx has the same knob, a DG_* variable stands in for the DGX_* one (read through the same function, so
# validated the same way); a DGX_* value wins when both are set. The others are accepted and ignored.


@dataclass(frozen=True)
class DeepGemmVar:
    name: str
    dgx_name: str | None  # the dgx variable it stands in for; None: ignored, or read as it is (`note` says)
    note: str


DEEPGEMM_DUMP_SUBDIR = "dumps"  # DG_JIT_DUMP_*: dgx writes its dumps under the cache root (DeepGEMM: next to the cubin)
_DUMP_FLAGS = ("DG_JIT_DUMP_PTX", "DG_JIT_DUMP_SASS", "DG_JIT_DUMP_ASM")

DEEPGEMM_VARIABLES: tuple[DeepGemmVar, ...] = (
    DeepGemmVar("DG_JIT_CACHE_DIR", "DGX_CACHE_DIR", "the kernel cache root"),
    DeepGemmVar("DG_JIT_DEBUG", "DGX_JIT_DEBUG", "print compiles, cache misses and loads"),
    DeepGemmVar("DG_PRINT_CONFIGS", "DGX_PRINT_CONFIGS", "print the config chosen for each new shape"),
    DeepGemmVar("DG_JIT_PTXAS_VERBOSE", "DGX_JIT_PTXAS_VERBOSE", "print ptxas's register/spill report"),
    DeepGemmVar("DG_JIT_PRINT_COMPILER_COMMAND", "DGX_JIT_PRINT_COMPILER_COMMAND", "print the NVRTC options"),
    DeepGemmVar("DG_JIT_WITH_LINEINFO", "DGX_JIT_LINEINFO", "compile with -lineinfo"),
    DeepGemmVar("DG_JIT_DUMP_PTX", "DGX_JIT_DUMP_DIR", f"1: dump every compiled kernel (source, PTX, cubin, SASS) "
                f"into <cache root>/{DEEPGEMM_DUMP_SUBDIR}"),
    DeepGemmVar("DG_JIT_DUMP_SASS", "DGX_JIT_DUMP_DIR", "as DG_JIT_DUMP_PTX (dgx dumps all four)"),
    DeepGemmVar("DG_JIT_DUMP_ASM", "DGX_JIT_DUMP_DIR", "as DG_JIT_DUMP_PTX (dgx dumps all four)"),
    DeepGemmVar("DG_USE_NVIDIA_TOOLS", None, "read as it is: 1 makes dgx.deep_gemm.testing.bench_kineto profile nothing"),
    DeepGemmVar("DG_JIT_USE_NVRTC", None, "ignored: dgx always compiles with NVRTC"),
    DeepGemmVar("DG_JIT_NVCC_COMPILER", None, "ignored: dgx uses no nvcc"),
    DeepGemmVar("DG_JIT_CPP_STANDARD", None, "ignored: dgx's kernels fix their NVRTC options (part of the cache key)"),
    DeepGemmVar("DG_JIT_PTXAS_CHECK", None, "ignored: dgx's CPU tests check every kernel family for local memory"),
    DeepGemmVar("DG_JIT_PRINT_LOAD_TIME", None, "ignored: DGX_JIT_DEBUG prints each load"),
    DeepGemmVar("DG_JIT_USE_RUNTIME_API", None, "ignored: dgx loads kernels through the driver API"),
    DeepGemmVar("DG_USE_PYTORCH_CUBLASLT_HANDLE", None, "ignored: cublaslt_gemm_* run through torch, its handle"),
    DeepGemmVar("DG_USE_TEMP_CUBLASLT_WORKSPACE", None, "ignored: cublaslt_gemm_* run through torch, its workspace"),
    DeepGemmVar("DG_COMM_KERNEL_DEBUG", None, "ignored: the Mega MoE kernels are sm_100 only"),
    DeepGemmVar("DG_SKIP_CUDA_BUILD", None, "ignored: a DeepGEMM build option (dgx compiles nothing at install)"),
    DeepGemmVar("DG_FORCE_BUILD", None, "ignored: a DeepGEMM build option"),
    DeepGemmVar("DG_USE_LOCAL_VERSION", None, "ignored: a DeepGEMM build option"),
)

_ALIASES: dict[str, tuple[str, ...]] = {}
for _v in DEEPGEMM_VARIABLES:
    if _v.dgx_name is not None and _v.name not in _DUMP_FLAGS:
        _ALIASES.setdefault(_v.dgx_name, ())
        _ALIASES[_v.dgx_name] += (_v.name,)


def lookup(name: str) -> tuple[str | None, str | None]:
    """(value, the variable it came from) for dgx variable `name`: its own value when set (non-empty), else that of
    the DeepGEMM variable standing in for it, else (None, None)."""
    for candidate in (name, *_ALIASES.get(name, ())):
        value = os.environ.get(candidate)
        if value is not None and value.strip():
            return value, candidate
    return None, None


def source(name: str) -> str | None:
    """The variable that sets dgx variable `name` now (itself, a DG_* stand-in, or None when unset)."""
    if name == "DGX_JIT_DUMP_DIR" and not os.environ.get(name, "").strip():
        return next((flag for flag in _DUMP_FLAGS if _flag(flag)), None)
    return lookup(name)[1]


def deep_gemm_variables() -> list[dict[str, str]]:
    """The DeepGEMM variables set in the environment: name, value and what dgx does with it (``dgx info``)."""
    out = []
    for v in DEEPGEMM_VARIABLES:
        value = os.environ.get(v.name)
        if value is None:
            continue
        if v.dgx_name is None:
            effect = v.note
        elif source(v.dgx_name) == v.name:
            effect = f"in force as {v.dgx_name} ({v.note})"
        elif os.environ.get(v.dgx_name, "").strip():
            effect = f"overridden by {v.dgx_name}"
        else:
            effect = f"off: sets {v.dgx_name} only when 1 ({v.note})" if v.name in _DUMP_FLAGS else f"empty: {v.note}"
        out.append({"name": v.name, "value": value, "effect": effect})
    return out


def deep_gemm_use_nvidia_tools() -> bool:
    """DG_USE_NVIDIA_TOOLS: bench_kineto of dgx.deep_gemm.testing profiles nothing (under Nsight, sanitizers)."""
    return _flag("DG_USE_NVIDIA_TOOLS")


def distributed_rendezvous() -> tuple[str, int, int, int]:
    """(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) as dgx.deep_gemm.utils.dist.init_dist reads them (WORLD_SIZE
    nodes, RANK this node's), with DeepGEMM's defaults 127.0.0.1, 8361, 1, 0."""
    def integer(name: str, default: int, low: int) -> int:
        raw = os.environ.get(name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if value < low:
            raise EnvError(name, raw, f"an integer >= {low}", "unset it for the default")
        return value

    return (os.environ.get("MASTER_ADDR", "").strip() or "127.0.0.1", integer("MASTER_PORT", 8361, 1),
            integer("WORLD_SIZE", 1, 1), integer("RANK", 0, 0))



def raw_reader(name: str):
    """A function of no arguments giving the raw values of dgx variable `name` (and of the DeepGEMM variables standing
    in for it), unparsed, None where unset: a per-call cache keyed by them follows every change of the variable (the
    full path parses, and refuses, a new value). As cheap as a dict lookup where os.environ keeps its values in a
    dict of bytes (POSIX CPython, which os.environ[...] = and del update); os.environ.get elsewhere."""
    names = (name, *_ALIASES.get(name, ()))
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and os.name == "posix" and os.environ.encodekey("A") == b"A":
        get, keys = data.get, tuple(n.encode() for n in names)
    else:
        get, keys = os.environ.get, names
    if len(keys) == 1:
        (key,) = keys
        return lambda: get(key)
    return lambda: tuple(get(k) for k in keys)
