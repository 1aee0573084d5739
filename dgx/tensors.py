"""Tensor adapter: any DLPack-capable object (torch, CuPy, JAX) -> TensorView.

torch tensors take a fast path that reads attributes directly; everything else goes through
``__dlpack__`` and the DLPack C structs, read with ctypes.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

#: dtype names dgx recognises.
DTYPES = ("float8_e4m3fn", "bfloat16", "float32", "int32", "uint8")
#: What each named argument of the GEMM entry points accepts (an unknown dtype's error says this).
ACCEPTED_DTYPES = {
    "A": ("float8_e4m3fn",),
    "B": ("float8_e4m3fn",),
    "SFA": ("float32",),
    "SFB": ("float32",),
    "d": ("bfloat16", "float32"),
    "c": ("float32",),
    "m_indices": ("int32",),
    "masked_m": ("int32",),
    "ks_tensor": ("int32",),
    "q": ("float8_e4m3fn",),
    "kv": ("float8_e4m3fn",),
    "kv_cache": ("uint8",),
    "weights": ("float32",),
}


def _accepted(name: str) -> str:
    return "/".join(ACCEPTED_DTYPES.get(name, DTYPES))
_ITEMSIZE = {"float8_e4m3fn": 1, "bfloat16": 2, "float32": 4, "int32": 4, "uint8": 1}


@dataclass(frozen=True)
class TensorView:
    """What dgx needs of a tensor: base address, shape and strides (in elements), dtype, device."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: int  # CUDA ordinal; -1 for host memory
    device_kind: str = "cuda"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


# --- torch fast path --------------------------------------------------------------------------------

_TORCH_DTYPES: dict[Any, str] | None = None


def _torch_dtypes() -> dict[Any, str]:
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch

        table = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.int32: "int32", torch.uint8: "uint8"}
        if hasattr(torch, "float8_e4m3fn"):
            table[torch.float8_e4m3fn] = "float8_e4m3fn"
        _TORCH_DTYPES = table
    return _TORCH_DTYPES


def _is_torch_tensor(obj: object) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "stride")


def _from_torch(t, name: str) -> TensorView:
    dtype = _torch_dtypes().get(t.dtype)
    if dtype is None:
        raise TypeError(f"{name}: expected a tensor of dtype {_accepted(name)}; got {t.dtype}")
    dev = t.device
    if dev.type == "cuda":
        ordinal, kind = dev.index if dev.index is not None else 0, "cuda"
    else:
        ordinal, kind = -1, dev.type
    return TensorView(t.data_ptr(), tuple(t.shape), tuple(t.stride()), dtype, ordinal, kind)


# --- generic DLPack path ----------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# DLPack (dlpack.h): type codes and device types we accept.
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_FLOAT8_E4M3FN = 0, 1, 2, 4, 10
_DL_DTYPES = {
    (_DL_FLOAT8_E4M3FN, 8): "float8_e4m3fn",
    (_DL_BFLOAT, 16): "bfloat16",
    (_DL_FLOAT, 32): "float32",
    (_DL_INT, 32): "int32",
    (_DL_UINT, 8): "uint8",
}
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13
_DL_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 13: "cuda_managed", 10: "rocm"}

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj, name: str) -> TensorView:
    try:
        capsule = obj.__dlpack__()
    except TypeError:
        raise
    except Exception as exc:  # producers raise their own types for unsupported dtypes/devices
        raise TypeError(f"{name}: __dlpack__ failed: {exc}") from exc
    address = _get_pointer(capsule, b"dltensor")
    # DLManagedTensor starts with its DLTensor.
    dl = _DLTensor.from_address(address)
    ndim = dl.ndim
    shape = tuple(dl.shape[i] for i in range(ndim))
    if dl.strides:
        strides = tuple(dl.strides[i] for i in range(ndim))
    else:  # NULL strides mean compact row-major
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    code = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or code not in _DL_DTYPES:
        raise TypeError(
            f"{name}: expected a tensor of dtype {_accepted(name)}; got DLPack type code {dl.dtype.code} "
            f"with {dl.dtype.bits} bits x {dl.dtype.lanes} lanes"
        )
    dev_type = dl.device.device_type
    kind = _DL_DEVICE_NAMES.get(dev_type, f"dlpack-device-{dev_type}")
    ordinal = dl.device.device_id if dev_type in (_DL_CUDA, _DL_CUDA_MANAGED) else -1
    if dev_type == _DL_CUDA_MANAGED:
        kind = "cuda_managed"
    ptr = (dl.data or 0) + dl.byte_offset
    return TensorView(ptr, shape, strides, _DL_DTYPES[code], ordinal, kind)


def as_view(obj: object, name: str = "tensor") -> TensorView:
    """A TensorView of a torch tensor, any ``__dlpack__`` object, or a TensorView (returned as is)."""
    if isinstance(obj, TensorView):
        return obj
    if _is_torch_tensor(obj):
        return _from_torch(obj, name)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name)
    raise TypeError(f"{name}: expected a tensor (torch, or any object with __dlpack__); got {type(obj).__name__}")


def require_cuda(view: TensorView, name: str, device: int | None = None) -> None:
    """Raises unless `view` lives in CUDA device memory (on `device`, if given)."""
    if view.device_kind != "cuda":
        raise ValueError(f"{name}: expected a tensor in CUDA device memory; got one on {view.device_kind}")
    if device is not None and view.device != device:
        raise ValueError(f"{name}: expected a tensor on cuda:{device} like the others; got cuda:{view.device}")
