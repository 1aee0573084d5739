"""dgx's kernel cache: compiled kernels (cubin bytes) stored under keys the caller hands the inputs of.

A leaf package (stdlib only): it never imports dgx, sass_tools or ptx. dgx computes a key with
:func:`compute_key` from everything that changes the binary, then asks
:meth:`KernelCache.get_or_build` for the cubin. The root is the caller's choice (dgx/env.py
resolves the default); it must be private to us (mode 0700, our uid).

    key = compute_key({"source": src, "headers": {"gemm.cuh": b"..."}, "nvrtc": "13.0",
                       "options": ["-arch=sm_90a"], "arch": "sm_90a", "sass_pass": 3})
    cubin = KernelCache(root).get_or_build(key, lambda: (compile_it(), {"name": "fp8_gemm"}))

Bundles (:func:`export_bundle`, :func:`import_bundle`) carry verified entries between machines.
"""

from .bundle import ImportReport, export_bundle, import_bundle
from .errors import (
    BundleError,
    CacheCorruptionWarning,
    CacheError,
    CacheMissError,
    CacheReadOnlyError,
    CacheSecurityError,
)
from .keys import compute_key
from .store import FORMAT_VERSION, CacheStats, EntryInfo, KernelCache, VerifyReport, is_key

__all__ = [
    "FORMAT_VERSION",
    "BundleError",
    "CacheCorruptionWarning",
    "CacheError",
    "CacheMissError",
    "CacheReadOnlyError",
    "CacheSecurityError",
    "CacheStats",
    "EntryInfo",
    "ImportReport",
    "KernelCache",
    "VerifyReport",
    "compute_key",
    "export_bundle",
    "import_bundle",
    "is_key",
]
