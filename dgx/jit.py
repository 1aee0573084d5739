"""Kernel JIT: rendered source -> cache key -> cubin (compiled on a miss, SASS-patched) -> loaded kernel.

The cache key is computed here, from one place: the rendered source, the content of every header, the
NVRTC version, the options, the arch and the SASS pass as it applies to the kernel (off, or its version
and parameters: see :func:`sass_pass_settings`). Nothing machine-specific enters it, so a cache built on
one machine or install path hits on another.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction

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
    sass_interleave: bool = False  # DGX_SASS_INTERLEAVE=auto applies the FFMA pass to this kernel
    summary: tuple[tuple[str, str], ...] = ()  # human description (family, config) for listings
    warmup_hint: str = ""  # the `dgx warmup` arguments that would build it (strict-mode message)
    sass_min_run: int | None = None  # the pass's min_run for this kernel (None: sass_tools' default)
    sass_fraction: float | None = None  # the pass's fraction for this kernel (None: sass_tools' default)


@dataclass(frozen=True)
class SassPassSettings:
    """The FFMA interleave pass as it applies to one kernel: off, or on with these parameters.

    ``fraction`` is kept as given (what the pass is called with); :meth:`key_value` writes it as the
    exact fraction the pass computes with, so two spellings of one value (0.5, 0.50) share a key.
    """

    enabled: bool
    version: str = ""
    min_run: int = 0
    fraction: float = 0.0
    skip_interleaved: bool = True

    def key_value(self) -> object:
        """What enters the cache key: "off", or every setting that changes the pass's output."""
        if not self.enabled:
            return "off"
        return {
            "version": self.version,
            "min_run": self.min_run,
            "fraction": str(Fraction(str(self.fraction))),
            "skip_interleaved": self.skip_interleaved,
        }


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


def sass_pass_settings(src: KernelSource) -> SassPassSettings:
    """Whether the FFMA pass applies to `src`, and with which parameters.

    DGX_SASS_INTERLEAVE=on applies it to every kernel, off to none, auto (the default) to the kernels
    whose source asks for it (``sass_interleave``). The parameters are the kernel's ``sass_min_run``
    and ``sass_fraction``, else sass_tools' defaults. Raises ValueError for a parameter the pass refuses.
    """
    mode = env.sass_interleave()
    if not (mode == "on" or (mode == "auto" and src.sass_interleave)):
        return SassPassSettings(False)
    import sass_tools

    min_run = sass_tools.DEFAULT_MIN_RUN if src.sass_min_run is None else src.sass_min_run
    fraction = sass_tools.DEFAULT_FRACTION if src.sass_fraction is None else src.sass_fraction
    if isinstance(min_run, bool) or not isinstance(min_run, int) or min_run < 1:
        raise ValueError(f"kernel {src.name}: sass_min_run: expected an integer >= 1, got {min_run!r}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"kernel {src.name}: sass_fraction: expected a number in [0, 1], got {fraction!r}")
    return SassPassSettings(True, str(sass_tools.PASS_VERSION), min_run, fraction)


def key_inputs(src: KernelSource, arch: str, sass: SassPassSettings | None = None) -> dict[str, object]:
    """Everything that changes the binary, and nothing that does not (no paths, users or hosts).

    ``sass`` is the pass's settings for `src` when the caller has resolved them already (default:
    :func:`sass_pass_settings`), so that the key and the build see the same settings.
    """
    if sass is None:
        sass = sass_pass_settings(src)
    major, minor = compiler.nvrtc_version()
    return {
        "jit_format": JIT_FORMAT,
        "kernel": src.name,
        "source": src.source,
        "headers": dict(ptx.headers()),
        "nvrtc": f"{major}.{minor}",
        "options": list(compiler.compile_options(arch)),
        "arch": arch,
        "sass_pass": sass.key_value(),
    }


def kernel_key(src: KernelSource, arch: str, sass: SassPassSettings | None = None) -> str:
    """The cache key of `src` compiled for `arch` (see :func:`key_inputs`)."""
    return compute_key(key_inputs(src, arch, sass))


def build_cubin(
    src: KernelSource, arch: str, sass: SassPassSettings | None = None
) -> tuple[bytes, dict[str, object]]:
    """Compiles (and SASS-patches, per ``sass``, default :func:`sass_pass_settings`) one kernel;
    returns the cubin and manifest metadata."""
    if sass is None:
        sass = sass_pass_settings(src)
    if env.jit_debug():
        print(f"dgx: compiling {src.name} for {arch}", file=sys.stderr)
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options(arch))
    cubin = result.cubin
    pass_report = None
    if sass.enabled:
        import sass_tools

        cubin, report = sass_tools.interleave_ffma(
            cubin, min_run=sass.min_run, fraction=sass.fraction, skip_interleaved=sass.skip_interleaved
        )
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
        "name": src.name,  # the store lifts it into the manifest's top level: `dgx cache list` shows it
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
    sass = sass_pass_settings(src)  # resolved once: the key and a build on a miss use the same settings
    key = kernel_key(src, arch, sass)
    cubin = _cubins.get(key)
    if cubin is not None:
        _stats.memory_hits += 1
        return cubin
    kc = kernel_cache()
    strict = env.jit_strict()
    before = _stats.compiles
    try:
        cubin = kc.get_or_build(key, lambda: build_cubin(src, arch, sass), allow_build=not strict)
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
