"""The read floor of a memory-bound case: the time a kernel that only reads the case's bytes takes on this card.

The share of the HBM peak a memory-bound GEMM reaches is bounded by more than the datasheet: under the benchmark's
flush (1 GB zeroed, so L2 is full of dirty lines that HBM writes back while the next kernel streams) a kernel that
does nothing but read 15.1 MB takes 8.0 µs on an H100, 57% of the peak, and reaches 79% only past 100 MB
(docs/PERFLOG.md, 2026-11-24, fourth session). The benchmark times such a kernel (ptx/read_stream.cuh: one CTA per
SM streaming its share through shared memory with bulk copies, L2 evict-first) on each memory-bound case's byte
count, with the run's timer and flush, and reports the case's time against it.

torch is imported when a floor is measured, not at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from .. import jit, runtime
from ..intmath import ceil_div
from ..kernels.interface import KernelInterface, Param

INTERFACE = KernelInterface(
    "ReadStreamParams",
    (
        Param("src", "const unsigned char*"),
        Param("chunks", "long long"),
    ),
)
THREADS = 32


@dataclass(frozen=True)
class ReadStreamConfig:
    """A ring of `stages` slots of `chunk` bytes per CTA (8 x 16 KB: the best of 4-12 slots measured)."""

    stages: int = 8
    chunk: int = 16384

    def __post_init__(self) -> None:
        if not 2 <= self.stages <= 16 or self.chunk % 16 or not 1024 <= self.chunk <= 32768:
            raise ValueError(f"invalid read-stream config {self}: 2-16 stages of 1-32 KB, a multiple of 16 bytes")

    @property
    def kernel_name(self) -> str:
        return f"dgx_read_stream_s{self.stages}_c{self.chunk}"

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.chunk + 8 * self.stages

    def render(self) -> jit.KernelSource:
        return _render(self)


@lru_cache(maxsize=None)
def _render(config: ReadStreamConfig) -> jit.KernelSource:
    body = f"dgx::read_stream_body<{config.stages}, {config.chunk}>"
    return jit.KernelSource(
        name=config.kernel_name,
        source='#include "read_stream.cuh"\n' + INTERFACE.render_entry(config.kernel_name, THREADS, body),
        dynamic_smem=config.smem_bytes,
        summary=(("family", "read_stream"), ("stages", str(config.stages)), ("chunk", str(config.chunk))),
    )


CONFIG = ReadStreamConfig()


class ReadFloor:
    """Times the read-only kernel over N bytes of one device buffer, grown to the largest N asked for; each byte
    count timed once per instance (the benchmark makes one per repeat)."""

    def __init__(self, time_call: Callable, flush: Callable[[], None] | None, warmup: int, iters: int,
                 config: ReadStreamConfig = CONFIG):
        self.time_call, self.flush, self.warmup, self.iters = time_call, flush, warmup, iters
        self.config = config
        self._buffer = None
        self._launcher = None
        self._us: dict[int, float] = {}

    def us(self, nbytes: int) -> float:
        """Median µs of reading `nbytes` (rounded up to whole chunks) with the run's timer and flush."""
        if nbytes <= 0:
            raise ValueError(f"read floor: expected a positive byte count, got {nbytes}")
        chunks = ceil_div(nbytes, self.config.chunk)
        found = self._us.get(chunks)
        if found is None:
            found = self._us[chunks] = self._measure(chunks)
        return found

    def _measure(self, chunks: int) -> float:
        import torch

        size = chunks * self.config.chunk
        if self._buffer is None or self._buffer.numel() < size:
            self._buffer = None  # the smaller buffer freed before the larger one is allocated
            self._buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
        if self._launcher is None:
            device = torch.cuda.current_device()
            kernel = jit.get_kernel(self.config.render(), device)
            num_sms = torch.cuda.get_device_properties(device).multi_processor_count
            shape = runtime.LaunchShape((num_sms, 1, 1), (THREADS, 1, 1), dynamic_smem=self.config.smem_bytes)
            self._launcher = runtime.Launcher(kernel, shape)
        params = INTERFACE.pack(src=self._buffer.data_ptr(), chunks=chunks)
        launcher = self._launcher

        def read() -> None:
            launcher.launch(torch.cuda.current_stream().cuda_stream, params)

        return self.time_call(read, self.flush, self.warmup, self.iters).median_us
