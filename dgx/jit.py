"""Kernel JIT: rendered source -> cache key -> cubin (compiled on a miss, SASS-patched) -> loaded kernel.

The cache key is computed here, from one place: the rendered source, the content of every header, the
NVRTC version, the options, the arch and the SASS-pass version (and whether the pass is applied). Nothing
machine-specific enters it, so a cache built on one machine or install path hits on another.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field

import ptx
from cache import CacheMissError, KernelCache, compute_key

from . import compiler, env, runtime
from .errors import JitStrictError

# Bump when the way dgx turns a KernelSource into a cubin changes in a way the inputs do not show.
JIT_FORMAT = "1"


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel, ready to compile: everything that determines the binary."""

    name: str  # the extern "C" entry point
    source: str
    dynamic_smem: int = 0
    sass_interleave: bool = False
    summary: tuple[tuple[str, str], ...] = ()  # human description (family, config) for listings
    warmup_hint: str = ""  # the `dgx warmup` arguments that would build it (strict-mode message)


@dataclass
class JitStats:
    compiles: int = 0
    compile_seconds: float = 0.0
    memory_hits: int = 0
    disk_hits: int = 0
    loads: int = 0
    compiled_kernels: list[str] = field(default_factory=list)


_stats = JitStats()
_lock = threading.Lock()
_caches: dict[str, KernelCache] = {}
_cubins: dict[str, bytes] = {}
_loaded: dict[tuple[str, int], runtime.LoadedKernel] = {}


def jit_stats() -> dict[str, object]:
    """Compiles, cache hits and loads since the process started (or since reset_jit_stats)."""
    s = _stats
    return {
        "compiles": s.compiles,
        "compile_seconds": round(s.compile_seconds, 4),
        "memory_hits": s.memory_hits,
        "disk_hits": s.disk_hits,
        "loads": s.loads,
        "compiled_kernels": list(s.compiled_kernels),
    }


def reset_jit_stats() -> None:
    global _stats
    _stats = JitStats()


def kernel_cache() -> KernelCache:
    """The KernelCache at the configured root (DGX_CACHE_DIR, ...), one object per root."""
    root = str(env.cache_root())
    kc = _caches.get(root)
    if kc is None:
        with _lock:
            kc = _caches.get(root)
            if kc is None:
                kc = KernelCache(root)
                _caches[root] = kc
    return kc


def key_inputs(src: KernelSource, arch: str) -> dict[str, object]:
    """Everything that changes the binary, and nothing that does not (no paths, users or hosts)."""
    major, minor = compiler.nvrtc_version()
    return {
        "jit_format": JIT_FORMAT,
        "kernel": src.name,
        "source": src.source,
        "headers": dict(ptx.headers()),
        "nvrtc": f"{major}.{minor}",
        "options": list(compiler.compile_options(arch)),
        "arch": arch,
        "sass_pass": _sass_pass_version() if src.sass_interleave else "off",
    }


def _sass_pass_version() -> str:
    import sass_tools

    return str(sass_tools.PASS_VERSION)


def kernel_key(src: KernelSource, arch: str) -> str:
    return compute_key(key_inputs(src, arch))


def build_cubin(src: KernelSource, arch: str) -> tuple[bytes, dict[str, object]]:
    """Compiles (and SASS-patches) one kernel; returns the cubin and manifest metadata."""
    if env.jit_debug():
        print(f"dgx: compiling {src.name} for {arch}", file=sys.stderr)
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options(arch))
    cubin = result.cubin
    pass_report = None
    if src.sass_interleave:
        import sass_tools

        cubin, report = sass_tools.interleave_ffma(cubin)
        pass_report = str(report)
    with _lock:
        _stats.compiles += 1
        _stats.compile_seconds += result.seconds
        _stats.compiled_kernels.append(src.name)
    dump = env.dump_dir()
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"{src.name}.cu").write_text(src.source)
        (dump / f"{src.name}.cubin").write_bytes(cubin)
    major, minor = compiler.nvrtc_version()
    meta = {
        "kernel": src.name,
        "arch": arch,
        "compiler": f"NVRTC {major}.{minor}",
        "options": list(result.options),
        "compile_seconds": round(result.seconds, 4),
        "summary": dict(src.summary),
        "dynamic_smem": src.dynamic_smem,
        "sass_pass": pass_report or "off",
        "source": src.source,
    }
    return cubin, meta


def get_cubin(src: KernelSource, arch: str) -> bytes:
    """The cubin of `src` for `arch`: from memory, from disk, or compiled (unless DGX_JIT_STRICT=1)."""
    key = kernel_key(src, arch)
    cubin = _cubins.get(key)
    if cubin is not None:
        _stats.memory_hits += 1
        return cubin
    kc = kernel_cache()
    strict = env.jit_strict()
    before = _stats.compiles
    try:
        cubin = kc.get_or_build(key, lambda: build_cubin(src, arch), allow_build=not strict)
    except CacheMissError:
        hint = f" (build it with: dgx warmup {src.warmup_hint})" if src.warmup_hint else ""
        raise JitStrictError(
            f"DGX_JIT_STRICT=1 forbids compiling at run time, and kernel {src.name} (key {key[:16]}…) is not "
            f"in the cache at {kc.root}{hint}"
        ) from None
    if _stats.compiles == before:
        _stats.disk_hits += 1
    _cubins[key] = cubin
    return cubin


def get_kernel(src: KernelSource, device: int) -> runtime.LoadedKernel:
    """`src` compiled for and loaded on CUDA device `device`."""
    info = runtime.device_info(device)
    key = (kernel_key(src, info.arch), device)
    kernel = _loaded.get(key)
    if kernel is None:
        cubin = get_cubin(src, info.arch)
        t0 = time.perf_counter()
        kernel = runtime.load_kernel(cubin, src.name, device, src.dynamic_smem)
        _stats.loads += 1
        if env.jit_debug():
            print(f"dgx: loaded {src.name} in {1e3 * (time.perf_counter() - t0):.2f} ms", file=sys.stderr)
        _loaded[key] = kernel
    return kernel
