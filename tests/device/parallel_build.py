"""Builds many kernels into the kernel cache at once, one NVRTC compile per worker process (CPU only): what the
device scripts' ``--precompile`` modes call, so a GPU run compiles nothing while it times."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def _build(src) -> str:
    from dgx import jit
    from dgx.limits import SUPPORTED_ARCH

    jit.get_cubin(src, SUPPORTED_ARCH)
    return src.name


def build_all(configs, jobs: int | None = None) -> dict:
    """Compiles every config's kernel (each config has ``render()``) missing from DGX_CACHE_DIR, in `jobs` processes
    (default: every CPU); returns what it did."""
    return build_sources({c.render().name: c.render() for c in configs}.values(), jobs)


def build_sources(sources, jobs: int | None = None) -> dict:
    """Compiles kernel sources (dgx.jit.KernelSource, distinct names) missing from DGX_CACHE_DIR, as build_all."""
    sources = list(sources)
    jobs = max(1, jobs or os.cpu_count() or 1)
    t0 = time.time()
    if jobs == 1 or len(sources) < 2:
        for src in sources:
            _build(src)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for done, name in enumerate(pool.map(_build, sources), 1):
                print(f"[{done}/{len(sources)}] {name}", file=sys.stderr)
    return {"kernels": len(sources), "seconds": round(time.time() - t0, 1)}
