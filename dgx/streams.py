"""The stream a launch goes on: the caller's, torch's current stream by default."""

from __future__ import annotations

import sys


def resolve_stream(stream: object | None, device: int) -> int:
    """A raw CUstream handle as an int.

    `stream` may be None (torch's current stream on `device` when torch is loaded, else the legacy
    default stream 0), an int handle, a torch.cuda.Stream, or any object with a `cuda_stream`
    attribute or an `__int__` (CuPy streams, CUstream).
    """
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return 0
        return torch._C._cuda_getCurrentRawStream(device)
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if handle is not None:
        return int(handle)
    ptr = getattr(stream, "ptr", None)  # CuPy
    if ptr is not None:
        return int(ptr)
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(
            f"stream: expected None, an int handle, or a stream object (torch/CuPy/CUstream); got {type(stream).__name__}"
        ) from None
