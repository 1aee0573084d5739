"""Run dgx's real per-call Python path on a machine without a GPU: the driver calls replaced by stand-ins.

:func:`stand_in` patches, for the duration of a ``with`` block,

- ``dgx.runtime._driver`` with :class:`StandInDriver`: the real ``cuda.bindings.driver`` module (its types,
  launch configs, enums) except for the calls that need a GPU, which are recorded instead: tensor-map encodes
  (a deterministic 128-byte image whose first word is the global address, the rest the other arguments, so a
  test can read back what a map says), launches (with a copy of the kernel's parameter struct), stream-ordered
  allocations, stream-ordered copies and memsets, capture queries;
- ``dgx.jit.get_kernel`` (no compile, no load), ``dgx.runtime.max_active_clusters``,
  ``dgx.runtime.allow_non_portable_clusters`` (recorded);
- ``torch._C._cuda_getCurrentRawStream`` (absent from CPU builds of torch) to return stream 0;
- ``dgx.tensors._from_torch`` so that CPU torch tensors read as tensors on ``cuda:0`` (the per-call path then
  sees torch tensors exactly as it would on a GPU machine, attribute reads included).

Nothing here is a test; tests and ``tests/device/host_profile.py`` use it.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
from dataclasses import dataclass, field

from dgx import jit, runtime, tensors


@dataclass
class Launch:
    kernel: str
    stream: int
    grid: tuple[int, int, int]
    params: bytes  # the parameter struct's bytes as they were at the launch


def decode_map(raw: bytes) -> dict:
    """What a stand-in tensor map (its 128 bytes) says."""
    words = struct.unpack("<16Q", raw)
    rank = words[1] >> 32
    dims = words[3:3 + rank]
    strides = words[3 + rank:2 + 2 * rank]
    box = words[2 + 2 * rank:2 + 3 * rank]
    return {"address": words[0], "dtype": words[1] & 0xFFFFFFFF, "dims": dims, "strides": strides, "box": box,
            "swizzle": words[2]}


class StandInDriver:
    """cuda.bindings.driver with the GPU calls recorded instead of made (see the module docstring).

    ``map_address_word``: where the stand-in encode writes the global address, in 8-byte words (0, the layout
    of the real driver's maps on sm_90); another value models a driver whose layout differs, for tests of the
    fallback that re-encodes instead of patching addresses. ``record``: keep every launch's parameters (tests);
    off, a launch only counts (profiling)."""

    def __init__(self, record: bool = True, map_address_word: int = 0, capturing: bool = False):
        self._real = runtime._driver()
        # The real module's names as attributes of this object: found by plain lookup, as fast as the module's
        # (a __getattr__ fallback costs the callers about 0.7 µs per name on a slow host and skews a profile).
        mine = {name for name in dir(type(self)) if not name.startswith("_")}
        self.__dict__.update({k: v for k, v in vars(self._real).items() if k not in mine})
        self.record = record
        self.map_address_word = map_address_word
        self.capturing = capturing
        self.launches: list[Launch] = []
        self.launch_count = 0
        self.encodes = 0
        self.allocs: list[tuple[int, int]] = []  # (address, size)
        self.frees: list[int] = []
        self.copies: list[tuple[int, ...]] = []  # cuMemcpy2DAsync: (dst, dst pitch, src, src pitch, width, height)
        self.memsets: list[tuple[int, ...]] = []  # cuMemsetD2D*Async: (dst, pitch, value, width in bytes, height)
        self.param_sizes: dict[str, int] = {}  # kernel name -> bytes of its parameter struct
        self._next_alloc = 0x7E00_0000_0000
        self._ok = self._real.CUresult.CUDA_SUCCESS

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, elem_strides, interleave, swizzle,
                               l2, oob):
        self.encodes += 1
        m = self._real.CUtensorMap()
        words = [int(address), int(dtype) | int(rank) << 32, int(swizzle)]
        words += [int(x) for x in dims]
        words += [int(x) for x in strides]
        words += [int(x) for x in box]
        words += [0] * (16 - len(words))
        if self.map_address_word:  # a layout with the address elsewhere, stored shifted (not a plain word)
            words[self.map_address_word] = words[0] >> 4
            words[0] = 0
        m.opaque = words
        return (self._ok, m)

    def cuLaunchKernelEx(self, config, function, params, extra):
        self.launch_count += 1
        if self.record:
            name = getattr(function, "name", str(function))
            size = self.param_sizes.get(name)
            first = ctypes.c_void_p.from_address(params).value
            image = ctypes.string_at(first, size) if size else b""
            self.launches.append(Launch(name, int(config.hStream), (config.gridDimX, config.gridDimY,
                                                                     config.gridDimZ), image))
        return (self._ok,)

    def cuStreamIsCapturing(self, stream):
        status = self._real.CUstreamCaptureStatus
        return (self._ok, status.CU_STREAM_CAPTURE_STATUS_ACTIVE if self.capturing
                else status.CU_STREAM_CAPTURE_STATUS_NONE)

    def cuMemAllocAsync(self, size, stream):
        address = self._next_alloc
        self._next_alloc += (int(size) + 0xFFFFF) & ~0xFFFFF
        self.allocs.append((address, int(size)))
        return (self._ok, self._real.CUdeviceptr(address))

    def cuMemFreeAsync(self, ptr, stream):
        self.frees.append(int(ptr))
        return (self._ok,)

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):
        return (self._ok,)

    def cuMemcpy2DAsync(self, p, stream):
        self.copies.append((int(p.dstDevice), int(p.dstPitch), int(p.srcDevice), int(p.srcPitch),
                            int(p.WidthInBytes), int(p.Height)))
        return (self._ok,)

    def cuMemsetD2D32Async(self, dst, pitch, value, width, height, stream):
        self.memsets.append((int(dst), int(pitch), int(value), 4 * int(width), int(height)))
        return (self._ok,)

    def cuMemsetD2D16Async(self, dst, pitch, value, width, height, stream):
        self.memsets.append((int(dst), int(pitch), int(value), 2 * int(width), int(height)))
        return (self._ok,)

    def cuCtxGetCurrent(self):
        return (self._ok, self._real.CUcontext(0))


@dataclass(frozen=True)
class StandInFunction:
    name: str


@dataclass
class StandIn:
    driver: StandInDriver
    kernels: list[str] = field(default_factory=list)  # names of the kernels "loaded"
    non_portable: list[str] = field(default_factory=list)  # kernels allowed clusters of more than 8 CTAs


def _interface_of(name: str):
    """The parameter struct of a dgx kernel, by its name."""
    if name.startswith("dgx_fp8_gemm"):
        from dgx.kernels.fp8_gemm import INTERFACE

        return INTERFACE
    if name.startswith("dgx_bf16_bmn_bnk_mn_gemm_impl_reduce"):
        from dgx.kernels.einsum import REDUCE_INTERFACE

        return REDUCE_INTERFACE
    if name.startswith(("dgx_bf16_gemm", "dgx_bf16_bmn_bnk_mn_gemm_impl")):
        from dgx.kernels.bf16_gemm import INTERFACE

        return INTERFACE
    if name.startswith("dgx_sf_"):
        from dgx.kernels.scale_layout import INTERFACE

        return INTERFACE
    if name.startswith("dgx_hc_prenorm"):
        from dgx.kernels.hc_prenorm import INTERFACE

        return INTERFACE
    if name.startswith("dgx_silu_mul_quant"):
        from dgx.kernels.silu_mul_quant import INTERFACE

        return INTERFACE
    if name.startswith(("dgx_mqa_logits", "dgx_paged_mqa_logits", "dgx_paged_mqa_schedule")):
        from dgx.kernels import mqa_logits as M

        if "schedule" in name:
            return M.SCHEDULE_VARLEN_INTERFACE if name.endswith("_varlen") else M.SCHEDULE_INTERFACE
        return M.MQA_VARLEN_INTERFACE if "_vl" in name else M.MQA_INTERFACE
    if name.startswith("dgx_mqa_clean"):
        from dgx.kernels.mqa_logits import CLEAN_INTERFACE

        return CLEAN_INTERFACE
    return None


def _caches() -> list[dict]:
    """Every per-process cache of plans, packed parameters, fast-path entries and workspaces: those dgx registers
    (dgx.caches), or, for an older tree without the registry (host_profile.py measures both), the ones it had."""
    import importlib

    try:
        from dgx import caches
    except ImportError:
        pass
    else:
        return caches.registered()
    names = {"launch": ("_plans", "_params"), "gemm": ("_entries", "_fast"), "grouped": ("_contiguous", "_masked"),
             "scales": ("_workspaces",), "kernels.scale_layout": ("_launchers",), "bf16": ("_plans", "_params"),
             "mqa": ("_launchers",), "wgrad": ("_k_entries",), "k_grouped_maps": ("_maps",), "hc_prenorm": ("_params",),
             "kernels.hc_prenorm": ("_launchers", "_fits")}
    out = []
    for module_name, attrs in names.items():
        try:
            module = importlib.import_module(f"dgx.{module_name}")
        except ImportError:
            continue
        out += [getattr(module, attr) for attr in attrs if hasattr(module, attr)]
    return out


@contextlib.contextmanager
def stand_in(record: bool = True, map_address_word: int = 0, capturing: bool = False, num_sms: int = 132):
    """Patches dgx for CPU runs of its per-call path (see the module docstring); yields a :class:`StandIn`."""
    import torch

    from dgx import device

    drv = StandInDriver(record, map_address_word, capturing)
    state = StandIn(drv)

    def get_kernel(src, dev):
        interface = _interface_of(src.name)
        if interface is not None:
            drv.param_sizes[src.name] = interface.size
        state.kernels.append(src.name)
        return runtime.LoadedKernel(src.name, StandInFunction(src.name), object(), dev, src.dynamic_smem)

    def from_torch(t, name):  # tensors._from_torch, with host memory read as cuda:0 (same reads, same cost)
        dtype = tensors._torch_dtypes().get(t.dtype)
        if dtype is None:
            raise TypeError(f"{name}: expected a tensor of dtype {tensors._accepted(name)}; got {t.dtype}")
        dev = t.device
        if dev.type in ("cuda", "cpu"):
            ordinal, kind = dev.index if dev.index is not None else 0, "cuda"
        else:
            ordinal, kind = -1, dev.type
        return tensors.TensorView(t.data_ptr(), tuple(t.shape), tuple(t.stride()), dtype, ordinal, kind)

    saved = {
        (runtime, "_driver"): runtime._driver,
        (jit, "get_kernel"): jit.get_kernel,
        (runtime, "max_active_clusters"): runtime.max_active_clusters,
        (runtime, "allow_non_portable_clusters"): runtime.allow_non_portable_clusters,
        (tensors, "_from_torch"): tensors._from_torch,
        (device, "_num_sms"): device._num_sms,
        (device, "generation"): device.generation,
    }
    set_aside = [(cache, dict(cache)) for cache in _caches()]  # plans and packs made here must not outlive the stand-ins
    for cache, _ in set_aside:
        cache.clear()
    had_stream = hasattr(torch._C, "_cuda_getCurrentRawStream")
    old_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    runtime._driver = lambda: drv
    jit.get_kernel = get_kernel
    runtime.max_active_clusters = lambda kernel, shape: 1 << 20
    runtime.allow_non_portable_clusters = lambda kernel: state.non_portable.append(kernel.name)
    tensors._from_torch = from_torch
    device._num_sms = num_sms
    device.generation += 1  # no plan of an earlier run is reused
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    try:
        yield state
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
        for cache, contents in set_aside:
            cache.clear()
            cache.update(contents)
        device.generation += 1
        if had_stream:
            torch._C._cuda_getCurrentRawStream = old_stream
        else:
            del torch._C._cuda_getCurrentRawStream
