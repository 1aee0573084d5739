"""Kernel JIT: rendered source -> cache key -> cubin (compiled on a miss, SASS-patched) -> loaded kernel.

The cache key is computed here, from one place: the rendered source, the content of every header it includes
(directly or through other headers; ``ptx.included``), the NVRTC version, the options, the arch and the SASS pass (off, or its version and parameters: see
:func:`sass_pass_settings`). Nothing machine-specific enters it, so a cache built on one machine or install
path hits on another. Cubins are remembered in memory by the KernelCache (one layer, one set of hit
counters); loaded kernels per device here.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field, fields
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

from . import ptx
from .cache import CacheMissError, KernelCache, compute_key

from . import compiler, env, runtime
from .errors import JitStrictError
from .limits import SUPPORTED_ARCH

# Bump when the way dgx turns a KernelSource into a cubin changes in a way the inputs do not show.
JIT_FORMAT = "1"


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel, ready to compile: everything that determines the binary."""

    name: str  # the extern "C" entry point
    source: str
    dynamic_smem: int = 0
    summary: tuple[tuple[str, str], ...] = ()  # human description (family, config) for listings
    warmup_hint: str = ""  # the `dgx warmup` arguments that would build it (strict-mode message)


def config_summary(family: str, config: Any,
                   keep: Callable[[str], bool] = lambda name: True) -> tuple[tuple[str, str], ...]:
    """A :attr:`KernelSource.summary` from a kernel's config: the family, then each field of the dataclass `config`
    whose name `keep` accepts, as text."""
    return (("family", family),) + tuple((f.name, str(getattr(config, f.name))) for f in fields(config) if keep(f.name))


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
    """What the JIT itself did; cache hits are the KernelCache's counters (see :func:`jit_stats`)."""

    compiles: int = 0
    compile_seconds: float = 0.0
    loads: int = 0
    compiled_kernels: list[str] = field(default_factory=list)


_stats = JitStats()
_lock = threading.Lock()
_caches: dict[str, KernelCache] = {}
# cache root -> (the cache, its memory and disk hits) when reset_jit_stats ran
_hits_at_reset: dict[str, tuple[KernelCache, int, int]] = {}
_loaded: dict[tuple[str, int], runtime.LoadedKernel] = {}


def _cache_hits() -> tuple[int, int]:
    """Memory and disk hits of every cache this process used, since the last reset_jit_stats."""
    memory = disk = 0
    for root, kc in list(_caches.items()):
        s = kc.stats
        base = _hits_at_reset.get(root)
        base_memory, base_disk = base[1:] if base is not None and base[0] is kc else (0, 0)
        memory += s.hits_memory - base_memory
        disk += s.hits_disk - base_disk
    return memory, disk


def jit_stats() -> dict[str, object]:
    """Compiles, cache hits and loads since the process started (or since reset_jit_stats)."""
    s = _stats
    memory_hits, disk_hits = _cache_hits()
    return {
        "compiles": s.compiles,
        "compile_seconds": round(s.compile_seconds, 4),
        "memory_hits": memory_hits,
        "disk_hits": disk_hits,
        "loads": s.loads,
        "compiled_kernels": list(s.compiled_kernels),
    }


def reset_jit_stats() -> None:
    global _stats
    _stats = JitStats()
    for root, kc in list(_caches.items()):
        s = kc.stats
        _hits_at_reset[root] = (kc, s.hits_memory, s.hits_disk)


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


def sass_pass_settings() -> SassPassSettings:
    """Whether the FFMA pass applies, and with which parameters (the same for every kernel).

    DGX_SASS_INTERLEAVE=on applies it with sass_tools' defaults; off and auto (the default) leave it off:
    NVRTC 13 already interleaves the promotion FFMAs, and forcing the pass on measured slower
    (docs/SASS_PASS.md).
    """
    if env.sass_interleave() != "on":
        return SassPassSettings(False)
    from . import sass_tools
    return SassPassSettings(True, str(sass_tools.PASS_VERSION), sass_tools.DEFAULT_MIN_RUN, sass_tools.DEFAULT_FRACTION)


def key_inputs(src: KernelSource, arch: str, sass: SassPassSettings | None = None) -> dict[str, object]:
    """Everything that changes the binary, and nothing that does not (no paths, users or hosts).

    ``sass`` is the pass's settings for `src` when the caller has resolved them already (default:
    :func:`sass_pass_settings`), so that the key and the build see the same settings.
    """
    if sass is None:
        sass = sass_pass_settings()
    major, minor = compiler.nvrtc_version()
    return {
        "jit_format": JIT_FORMAT,
        "kernel": src.name,
        "source": src.source,
        "headers": ptx.included(src.source),
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
    returns the cubin and manifest metadata.

    DGX_JIT_DEBUG=1 prints the compile (options, time, SASS pass); DGX_JIT_DUMP_DIR=<dir> writes the source
    (.cu), NVRTC's PTX (.ptx), the cubin (.cubin) and, where nvdisasm is installed, its SASS (.sass) there.
    """
    env.check()  # a DGX_* value dgx cannot use stops the compile before it starts, not after
    if sass is None:
        sass = sass_pass_settings()
    debug, dump = env.jit_debug(), env.dump_dir()
    options = compiler.compile_options(arch)
    result = compiler.compile_cubin(src.source, src.name, options, want_ptx=dump is not None)
    cubin = result.cubin
    pass_report = None
    if sass.enabled:
        from . import sass_tools
        cubin, report = sass_tools.interleave_ffma(
            cubin, min_run=sass.min_run, fraction=sass.fraction, skip_interleaved=sass.skip_interleaved
        )
        pass_report = str(report)
    with _lock:
        _stats.compiles += 1
        _stats.compile_seconds += result.seconds
        _stats.compiled_kernels.append(src.name)
    if debug:
        print(
            f"dgx: compiled {src.name} for {arch} in {result.seconds:.2f} s (NVRTC {' '.join(result.options)}); "
            f"SASS pass {pass_report or 'off'}",
            file=sys.stderr,
        )
    if dump is not None:
        dump_kernel(dump, src, result.ptx, cubin)
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


def dump_kernel(folder: Path, src: KernelSource, ptx_text: str | None, cubin: bytes) -> list[Path]:
    """Writes <name>.cu, .ptx (when given), .cubin and .sass (when nvdisasm is installed) into `folder`;
    returns the paths written."""
    from . import sass_tools
    folder.mkdir(parents=True, exist_ok=True)
    files = {".cu": src.source.encode(), ".cubin": cubin}
    if ptx_text is not None:
        files[".ptx"] = ptx_text.encode()
    if sass_tools.nvdisasm_path() is not None:
        try:
            files[".sass"] = sass_tools.disassemble(cubin).encode()
        except sass_tools.SassToolsError as exc:  # a listing is a convenience: the compile stands
            print(f"dgx: no SASS listing of {src.name}: {exc}", file=sys.stderr)
    written = []
    for suffix, data in files.items():
        path = folder / f"{src.name}{suffix}"
        path.write_bytes(data)
        written.append(path)
    return written


def get_cubin(src: KernelSource, arch: str) -> bytes:
    """The cubin of `src` for `arch`: from the cache (memory, then disk), or compiled (unless DGX_JIT_STRICT=1)."""
    sass = sass_pass_settings()  # resolved once: the key and a build on a miss use the same settings
    key = kernel_key(src, arch, sass)
    kc = kernel_cache()

    def build() -> tuple[bytes, dict[str, object]]:
        if env.jit_debug():
            print(f"dgx: cache miss for {src.name} (key {key[:16]}…) in {kc.root}", file=sys.stderr)
        return build_cubin(src, arch, sass)

    try:
        return kc.get_or_build(key, build, allow_build=not env.jit_strict())
    except CacheMissError:
        hint = f" (build it with: dgx warmup {src.warmup_hint})" if src.warmup_hint else ""
        try:  # what the cache holds instead, when another NVRTC built it (a cache warmed by another install)
            from .install import strict_mismatch_note

            note = strict_mismatch_note()
        except Exception:  # noqa: BLE001 - the note is a courtesy; the error itself must come through
            note = ""
        raise JitStrictError(
            f"DGX_JIT_STRICT=1 forbids compiling at run time, and kernel {src.name} (key {key[:16]}…) is not "
            f"in the cache at {kc.root}{hint}{note}"
        ) from None


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


def key_fingerprint(arch: str) -> str:
    """16 hex digits: a digest of every cache-key input a kernel's own source does not decide (NVRTC version,
    options, arch, JIT format, SASS-pass setting) and of every header. Equal fingerprints mean equal keys for
    equal kernels (a kernel's key covers only the headers it includes, so unequal fingerprints can still share
    keys)."""
    inputs = key_inputs(KernelSource(name="", source=""), arch)
    for own in ("kernel", "source"):
        inputs.pop(own, None)
    inputs["headers"] = ptx.headers()
    return compute_key(inputs)[:16]


def install_summary(arch: str = SUPPORTED_ARCH) -> dict[str, str]:
    """This install's key-relevant setup (``dgx info``, bundles): dgx version, NVRTC version, arch, fingerprint."""
    from .install import nvrtc_version
    from .version import __version__

    return {"dgx": __version__, "nvrtc": nvrtc_version(), "arch": arch, "fingerprint": key_fingerprint(arch)}
