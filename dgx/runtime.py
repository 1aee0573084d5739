"""CUDA driver-API runtime: context, module loading, kernel lookup, tensor maps and launches.

Everything goes through ``cuda.bindings.driver``; every CUresult is checked and a failure raises a
CudaError naming the call. Launches use ``cuLaunchKernelEx`` with a pre-packed parameter array (the
cheapest path through the bindings) on the caller's stream, so they can be captured in a CUDA graph.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Sequence

from . import pdl as _pdl
from .errors import CudaError

_lock = threading.Lock()
_initialized = False


_driver_module = None


def _driver():
    """cuda.bindings.driver, imported on first use (an import statement per call costs 0.4 µs)."""
    global _driver_module
    if _driver_module is None:
        from cuda.bindings import driver

        _driver_module = driver
    return _driver_module


def check(result, call: str):
    """Raises CudaError unless `result` (a CUresult, or a tuple starting with one) is CUDA_SUCCESS.

    Returns the remaining tuple items: none -> None, one -> that item, several -> a tuple.
    """
    drv = _driver()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != drv.CUresult.CUDA_SUCCESS:
        name = drv.cuGetErrorName(err)
        detail = drv.cuGetErrorString(err)
        text = detail[1].decode() if detail[0] == drv.CUresult.CUDA_SUCCESS and detail[1] else ""
        label = name[1].decode() if name[0] == drv.CUresult.CUDA_SUCCESS else str(err)
        raise CudaError(call, label, text)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def init() -> None:
    """cuInit once per process."""
    global _initialized
    if _initialized:
        return
    with _lock:
        if not _initialized:
            check(_driver().cuInit(0), "cuInit")
            _initialized = True


def device_count() -> int:
    """Number of CUDA devices; 0 where there is no driver or no GPU (never raises)."""
    try:
        init()
        return int(check(_driver().cuDeviceGetCount(), "cuDeviceGetCount"))
    except Exception:
        return 0


def driver_version() -> int | None:
    """The driver's CUDA version as an int (13000 = 13.0), or None without a driver."""
    try:
        return int(check(_driver().cuDriverGetVersion(), "cuDriverGetVersion"))
    except Exception:
        return None


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    num_sms: int
    max_smem_per_block_optin: int
    l2_bytes: int

    @property
    def arch(self) -> str:
        """The NVRTC architecture to compile for: sm_90a on Hopper (wgmma, setmaxnreg need the 'a')."""
        major, minor = self.compute_capability
        suffix = "a" if major == 9 else ""
        return f"sm_{major}{minor}{suffix}"


_device_info: dict[int, DeviceInfo] = {}


def device_info(ordinal: int = 0) -> DeviceInfo:
    """Properties of device `ordinal`, read once."""
    info = _device_info.get(ordinal)
    if info is not None:
        return info
    init()
    drv = _driver()
    dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = drv.CUdevice_attribute

    def get(a):
        return int(check(drv.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute"))

    name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName").split(b"\0")[0].decode()
    info = DeviceInfo(
        ordinal=ordinal,
        name=name,
        compute_capability=(
            get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ),
        num_sms=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        max_smem_per_block_optin=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        l2_bytes=get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    )
    _device_info[ordinal] = info
    return info


_contexts: dict[int, object] = {}


def ensure_context(ordinal: int):
    """Makes device `ordinal`'s primary context (the one torch uses) current and returns it."""
    init()
    drv = _driver()
    ctx = _contexts.get(ordinal)
    if ctx is None:
        dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _contexts[ordinal] = ctx
    current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(current) != int(ctx):
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


@dataclass(frozen=True)
class LoadedKernel:
    """A kernel function loaded into one device's primary context."""

    name: str
    function: object
    module: object
    device: int
    dynamic_smem: int
    waits: bool = False  # waits for its predecessor (griddepcontrol.wait): only then launched with PDL (dgx.pdl)


def waits_for_predecessor(cubin: bytes, name: str) -> bool:
    """Whether kernel `name` of `cubin` runs griddepcontrol.wait (SASS ACQBULK). Only such kernels are launched with
    programmatic dependent launch: one that never waits could read its predecessor's output before it is written."""
    from .sass_tools import Cubin
    from .sass_tools.codec import OPCODE_MASK
    from .sass_tools.opcodes import SM90_OPCODES

    wait = {op for op, name in SM90_OPCODES.items() if name == "ACQBULK"}
    return any(low & OPCODE_MASK in wait for low, _ in struct.iter_unpack("<QQ", Cubin(cubin).text(name)))


def load_kernel(cubin: bytes, name: str, device: int, dynamic_smem: int) -> LoadedKernel:
    """Loads `cubin` into device `device`'s context, finds `name` and raises its dynamic smem limit."""
    drv = _driver()
    ensure_context(device)
    module = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
    function = check(drv.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
    if dynamic_smem > 48 * 1024:
        limit = device_info(device).max_smem_per_block_optin
        if dynamic_smem > limit:
            raise ValueError(
                f"kernel {name} needs {dynamic_smem} bytes of shared memory; device {device} allows {limit}"
            )
        check(
            drv.cuFuncSetAttribute(
                function, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem
            ),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )
    return LoadedKernel(name, function, module, device, dynamic_smem, waits_for_predecessor(cubin, name))


class Swizzle(IntEnum):
    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128


_DTYPES = {
    "uint8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "float8_e4m3fn": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
    "int32": "CU_TENSOR_MAP_DATA_TYPE_INT32",
}
_SWIZZLES = {
    Swizzle.NONE: "CU_TENSOR_MAP_SWIZZLE_NONE",
    Swizzle.B32: "CU_TENSOR_MAP_SWIZZLE_32B",
    Swizzle.B64: "CU_TENSOR_MAP_SWIZZLE_64B",
    Swizzle.B128: "CU_TENSOR_MAP_SWIZZLE_128B",
}


def encode_tensor_map(
    dtype: str,
    address: int,
    dims: Sequence[int],
    strides_bytes: Sequence[int],
    box: Sequence[int],
    swizzle: Swizzle = Swizzle.NONE,
):
    """A CUtensorMap over a row-major region of len(dims) dimensions (innermost first), with the byte strides of
    every dimension but the innermost; tiles of `box`. Out-of-bounds reads (negative coordinates too) fill zeros."""
    drv = _driver()
    for stride in strides_bytes:
        if stride % 16:
            raise ValueError(f"TMA needs strides that are multiples of 16 bytes; got {tuple(strides_bytes)}")
    if address % 16:
        raise ValueError(f"TMA needs a 16-byte aligned base address; got 0x{address:x}")
    rank = len(dims)
    enums = _encode_enums.get((dtype, swizzle))
    if enums is None:
        enums = _encode_enums[(dtype, swizzle)] = (
            getattr(drv.CUtensorMapDataType, _DTYPES[dtype]),
            getattr(drv.CUtensorMapSwizzle, _SWIZZLES[Swizzle(swizzle)]),
        )
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    return check(
        drv.cuTensorMapEncodeTiled(
            enums[0],
            rank,
            address,
            [u64(d) for d in dims],
            [u64(s) for s in strides_bytes],
            [u32(b) for b in box],
            [u32(1)] * rank,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            enums[1],
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        "cuTensorMapEncodeTiled",
    )


_encode_enums: dict[tuple[str, int], tuple[object, object]] = {}  # (dtype, swizzle) -> the driver's two enum values


def encode_tensor_map_2d(
    dtype: str,
    address: int,
    inner: int,
    outer: int,
    outer_stride_bytes: int,
    box_inner: int,
    box_outer: int,
    swizzle: Swizzle = Swizzle.NONE,
):
    """A CUtensorMap over a 2-D row-major region: `outer` rows of `inner` elements, rows
    `outer_stride_bytes` apart; tiles of box_outer x box_inner. Out-of-bounds reads fill zeros."""
    if outer_stride_bytes % 16:
        raise ValueError(f"TMA needs a row stride that is a multiple of 16 bytes; got {outer_stride_bytes}")
    return encode_tensor_map(dtype, address, (inner, outer), (outer_stride_bytes,), (box_inner, box_outer), swizzle)


class ParamPack:
    """Kernel parameters packed once into C storage, with the void* array cuLaunchKernelEx takes.

    Items are CUtensorMap objects (copied by value, 128 bytes), ('u64'|'i32'|'u32'|'f32', value) pairs.
    """

    __slots__ = ("_storage", "_pointers", "address", "size")

    _CTYPES = {"u64": ctypes.c_uint64, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "f32": ctypes.c_float}

    def __init__(self, items: Sequence[object]):
        storage = []
        for item in items:
            if isinstance(item, tuple):
                kind, value = item
                storage.append(self._CTYPES[kind](value))
            else:  # a CUtensorMap: copy its 128 bytes into 64-byte aligned storage we own
                raw = (ctypes.c_uint64 * 24)()
                base = ctypes.addressof(raw)
                aligned = (base + 63) & ~63
                ctypes.memmove(aligned, item.getPtr(), 128)
                storage.append((raw, aligned))
        addresses = [s[1] if isinstance(s, tuple) else ctypes.addressof(s) for s in storage]
        self._storage = storage
        self._pointers = (ctypes.c_void_p * len(addresses))(*addresses)
        self.address = ctypes.addressof(self._pointers)
        self.size = 0  # no single image

    @classmethod
    def of_members(cls, image: bytes, offsets: Sequence[int]) -> "ParamPack":
        """Parameters laid out as one struct (dgx.kernels.interface): `image` is its bytes, copied into
        64-byte aligned storage (the alignment of the tensor maps inside it), and each parameter's pointer
        is the address of its member, at its offset."""
        pack = cls.__new__(cls)
        raw = ctypes.create_string_buffer(len(image) + 64)
        aligned = (ctypes.addressof(raw) + 63) & ~63
        ctypes.memmove(aligned, image, len(image))
        pack._storage = [(raw, aligned)]
        pack._pointers = (ctypes.c_void_p * len(offsets))(*[aligned + off for off in offsets])
        pack.address = ctypes.addressof(pack._pointers)
        pack.size = len(image)
        return pack

    def image(self) -> bytes:
        """The parameter struct's bytes (packs made by :meth:`of_members`)."""
        return ctypes.string_at(self._storage[0][1], self.size) if self.size else b""

    def words(self) -> memoryview:
        """The parameter struct as writable 64-bit words (packs made by :meth:`of_members`): a launch after writing
        new values into it passes them, as the driver copies the parameters when a launch (or a capture) is made."""
        return memoryview((ctypes.c_char * self.size).from_address(self._storage[0][1])).cast("B").cast("Q")


@dataclass(frozen=True)
class LaunchShape:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    dynamic_smem: int = 0


def max_active_clusters(kernel: LoadedKernel, shape: LaunchShape) -> int:
    """How many clusters of `shape` can be resident at once (GPCs with an odd number of free SMs leave
    some idle, so this can be below num_sms / cluster size). A persistent grid must not exceed it, or
    the clusters beyond it run after the others, doubling the time."""
    drv = _driver()
    launcher = Launcher(kernel, shape)
    return int(check(drv.cuOccupancyMaxActiveClusters(kernel.function, launcher._config), "cuOccupancyMaxActiveClusters"))


def allow_non_portable_clusters(kernel: LoadedKernel) -> None:
    """Lets `kernel` launch with clusters of more than 8 CTAs (up to 16 on Hopper: a GPC's SMs, where it has that
    many free); whether one fits is :func:`max_active_clusters`' answer."""
    drv = _driver()
    check(
        drv.cuFuncSetAttribute(
            kernel.function, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1
        ),
        "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
    )


#: Launch configs a Launcher keeps, one per stream it has launched on; past this many, it starts over.
MAX_STREAM_CONFIGS = 64


class Launcher:
    """A kernel with a fixed launch shape; `launch` takes a stream handle and a ParamPack.

    Safe to share between threads: each stream gets its own CUlaunchConfig, made on the first launch
    there and never changed afterwards, so a launch never touches a config another thread is reading.
    With dgx.set_pdl(True) a launch takes the stream's config from a second table, whose configs add the
    programmatic-stream-serialization attribute (dgx.pdl) where the kernel waits for its predecessor: the
    switch is read per launch, so a toggle applies from the next call on.
    """

    __slots__ = ("kernel", "shape", "_config", "_attrs", "_pdl_attrs", "_drv", "_configs", "_pdl_configs",
                 "_configs_lock")

    def __init__(self, kernel: LoadedKernel, shape: LaunchShape):
        drv = _driver()
        self._drv = drv
        self.kernel = kernel
        self.shape = shape
        attrs = []
        if shape.cluster != (1, 1, 1):
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = shape.cluster
            attrs.append(attr)
        self._attrs = attrs  # shared by every config (read only), alive as long as the launcher
        pdl = drv.CUlaunchAttribute()  # programmatic dependent launch (dgx.pdl), with the cluster dims if any
        pdl.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        pdl.value.programmaticStreamSerializationAllowed = 1
        self._pdl_attrs = attrs + [pdl] if kernel.waits else attrs  # a kernel that never waits: never early
        self._config = self._new_config(0)  # the legacy default stream's; also used for occupancy queries
        self._configs: dict[int, object] = {0: self._config}
        self._pdl_configs: dict[int, object] = {}
        self._configs_lock = threading.Lock()

    def _new_config(self, stream: int, pdl: bool = False) -> object:
        """A CUlaunchConfig of this launcher's shape on `stream`, with the PDL attribute if `pdl`."""
        config = _driver().CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.shape.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self.shape.block
        config.sharedMemBytes = self.shape.dynamic_smem
        config.hStream = stream
        attrs = self._pdl_attrs if pdl else self._attrs
        config.attrs = attrs
        config.numAttrs = len(attrs)
        return config

    def config_for(self, stream: int, pdl: bool | None = None) -> object:
        """The launch config for `stream` (with the PDL attribute if `pdl`, default dgx.get_pdl()): made on
        first use, the same object afterwards, never changed."""
        if pdl is None:
            pdl = _pdl._enabled
        config = (self._pdl_configs if pdl else self._configs).get(stream)
        if config is not None:
            return config
        with self._configs_lock:
            table = self._pdl_configs if pdl else self._configs
            config = table.get(stream)
            if config is None:
                if len(table) >= MAX_STREAM_CONFIGS:
                    # Threads launching with a dropped config keep a valid one: configs are never mutated.
                    table = {} if pdl else {0: self._config}
                    setattr(self, "_pdl_configs" if pdl else "_configs", table)
                config = self._new_config(stream, pdl)
                table[stream] = config
        return config

    @property
    def configs(self) -> dict[int, object]:
        """The launch configs made so far, by stream (without PDL); read per launch (the table may be replaced)."""
        return self._configs

    @property
    def pdl_configs(self) -> dict[int, object]:
        """The same with the PDL attribute (dgx.set_pdl(True))."""
        return self._pdl_configs

    @property
    def driver_launch(self):
        """The driver's cuLaunchKernelEx, for callers that launch with a config of :meth:`config_for` themselves."""
        return self._drv.cuLaunchKernelEx

    def launch(self, stream: int, params: ParamPack) -> None:
        # One dict lookup (cheaper than setting hStream on a shared config), in the PDL table when PDL is on.
        pdl = _pdl._enabled
        config = (self._pdl_configs if pdl else self._configs).get(stream)
        if config is None:
            config = self.config_for(stream, pdl)
        (err,) = self._drv.cuLaunchKernelEx(config, self.kernel.function, params.address, 0)
        if err != 0:
            check(err, f"cuLaunchKernelEx({self.kernel.name})")


def stream_capturing(stream: int) -> bool:
    """Whether `stream` is being captured into a CUDA graph."""
    drv = _driver()
    status = check(drv.cuStreamIsCapturing(drv.CUstream(stream)), "cuStreamIsCapturing")
    return int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


def alloc_async(nbytes: int, stream: int) -> int:
    """Device memory from the device's default pool, ordered on `stream` (under capture: owned by the graph)."""
    drv = _driver()
    return int(check(drv.cuMemAllocAsync(nbytes, drv.CUstream(stream)), "cuMemAllocAsync"))


def free_async(address: int, stream: int) -> None:
    """Frees memory of :func:`alloc_async` after the work queued on `stream` so far."""
    drv = _driver()
    check(drv.cuMemFreeAsync(address, drv.CUstream(stream)), "cuMemFreeAsync")


def copy_rows(dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, height: int, stream: int) -> None:
    """Device-to-device copy of `height` rows of `width` bytes between pitched buffers, on `stream`."""
    drv = _driver()
    p = drv.CUDA_MEMCPY2D()
    p.srcMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice = src
    p.srcPitch = src_pitch
    p.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.dstDevice = dst
    p.dstPitch = dst_pitch
    p.WidthInBytes = width
    p.Height = height
    check(drv.cuMemcpy2DAsync(p, drv.CUstream(stream)), "cuMemcpy2DAsync")


# Host buffers that a captured CUDA graph copies from on every replay, by token: each is held until the graph
# (and every instantiation of it) is destroyed, when the CUDA user object the graph retains calls
# _release_graph_owned with its token. Nothing else holds them, so they do not pile up across captures.
_graph_owned: dict[int, object] = {}
_graph_owned_tokens = itertools.count(1)
_graph_owned_lock = threading.Lock()


def _release_graph_owned(token: int | None) -> None:
    """The user objects' destructor: runs on a CUDA-internal thread, so it makes no CUDA call."""
    with _graph_owned_lock:
        _graph_owned.pop(token or 0, None)


_RELEASE_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_release_graph_owned)


def keep_alive_with_graph(buffer: object, stream: int) -> int:
    """Holds `buffer` (the host source of a copy captured on `stream`) until the graph being captured is
    destroyed; returns its token. A CUDA user object, moved into the graph, releases it then."""
    drv = _driver()
    info = drv.cuStreamGetCaptureInfo(drv.CUstream(stream))
    check(info[0], "cuStreamGetCaptureInfo")
    graph = info[3]
    with _graph_owned_lock:
        token = next(_graph_owned_tokens)
        _graph_owned[token] = buffer
    try:
        destroy = drv.CUhostFn(ctypes.cast(_RELEASE_CALLBACK, ctypes.c_void_p).value)
        owner = check(
            drv.cuUserObjectCreate(token, destroy, 1, drv.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
            "cuUserObjectCreate",
        )
        check(
            drv.cuGraphRetainUserObject(graph, owner, 1, drv.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE),
            "cuGraphRetainUserObject",
        )
    except Exception:
        _release_graph_owned(token)
        raise
    return token


class DeviceTensorMaps:
    """Tensor maps in device memory, for kernels that pick one per work item at run time (the K-grouped
    GEMM: one map of A and one of B per group, whose row strides differ). Allocated and written on the
    launch stream (stream-ordered, so it works under CUDA-graph capture too); `release` after the launch
    frees it on that stream once the kernel is done."""

    __slots__ = ("address", "count", "_stream", "_host")

    def __init__(self, maps: list, stream: int):
        drv = _driver()
        self.count = len(maps)
        size = 128 * max(self.count, 1)
        self._host = ctypes.create_string_buffer(size)
        for i, m in enumerate(maps):
            if m is not None:  # a slot the kernel never reads stays zero
                ctypes.memmove(ctypes.addressof(self._host) + 128 * i, m.getPtr(), 128)
        handle = drv.CUstream(stream)
        ptr = check(drv.cuMemAllocAsync(size, handle), "cuMemAllocAsync")
        self.address = int(ptr)
        self._stream = stream
        check(drv.cuMemcpyHtoDAsync(self.address, ctypes.addressof(self._host), size, handle), "cuMemcpyHtoDAsync")
        status = check(drv.cuStreamIsCapturing(handle), "cuStreamIsCapturing")
        if int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE):
            keep_alive_with_graph(self._host, stream)  # every replay copies from it again

    def release(self) -> None:
        """Frees the device copy after the work already queued on its stream (stream-ordered)."""
        if self.address:
            drv = _driver()
            check(drv.cuMemFreeAsync(self.address, drv.CUstream(self._stream)), "cuMemFreeAsync")
            self.address = 0
