"""The scale-layout kernel (ptx/scale_layout.cuh): per-row FP32 scales of any strides copied into the TMA-aligned
M-major layout the GEMM kernels read (what get_mn_major_tma_aligned_tensor makes), on the caller's stream."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import jit, runtime
from ..intmath import ceil_div
from .interface import KernelInterface, Param
from .. import caches

# dst[(g * cols + c) * dst_ld + r] = src[g * src_group_stride + r * src_row_stride + c * src_col_stride] for every
# group g < groups, row r < rows, column (k-block) c < cols. Strides in floats.
INTERFACE = KernelInterface(
    "ScaleTransposeParams",
    (
        Param("src", "const float*"),
        Param("dst", "float*"),
        Param("src_group_stride", "long long"),
        Param("src_row_stride", "long long"),
        Param("src_col_stride", "long long"),
        Param("rows", "long long"),
        Param("cols", "long long"),
        Param("dst_ld", "int"),
    ),
)
#: Byte offsets of the two addresses in the parameter struct (a launch with new tensors rewrites just these).
SRC_OFFSET, DST_OFFSET = INTERFACE.offsets[0], INTERFACE.offsets[1]
MAX_GROUPS = 65535  # grid z
#: The `dgx warmup` arguments that build it (a strict-mode miss names them): every plan with a GEMM entry holds it.
HELPER_WARMUP_HINT = "--preset NAME, or --shapes FILE with any GEMM entry (every GEMM warmup builds this helper kernel)"


@dataclass(frozen=True)
class ScaleTransposeConfig:
    """Tiles of `tile` x `tile` floats per CTA of `threads` threads."""

    tile: int = 32
    threads: int = 256

    def __post_init__(self) -> None:
        if self.tile not in (16, 32) or self.threads % self.tile or not 32 <= self.threads <= 1024:
            raise ValueError(f"invalid scale-transpose config {self}: tile 16 or 32, threads a multiple of it in 32..1024")

    @property
    def kernel_name(self) -> str:
        return f"dgx_sf_transpose_t{self.tile}_w{self.threads}"

    def render(self) -> jit.KernelSource:
        return _render(self)

    def grid(self, rows: int, cols: int, groups: int) -> tuple[int, int, int]:
        return (ceil_div(rows, self.tile), ceil_div(cols, self.tile), groups)


@lru_cache(maxsize=None)
def _render(config: ScaleTransposeConfig) -> jit.KernelSource:
    body = f"dgx::scale_transpose_body<{config.tile}, {config.threads}>"
    return jit.KernelSource(
        name=config.kernel_name,
        source='#include "scale_layout.cuh"\n' + INTERFACE.render_entry(config.kernel_name, config.threads, body),
        summary=(("family", "scale_transpose"), ("tile", str(config.tile)), ("threads", str(config.threads))),
        warmup_hint=HELPER_WARMUP_HINT,
    )


CONFIG = ScaleTransposeConfig()

_launchers: dict[tuple[int, int, int, int], runtime.Launcher] = caches.per_process({})


def launcher(device: int, rows: int, cols: int, groups: int) -> runtime.Launcher:
    """The kernel loaded on `device`, with its grid for `groups` x `rows` x `cols` scales."""
    key = (device, rows, cols, groups)
    found = _launchers.get(key)
    if found is None:
        if groups > MAX_GROUPS:
            raise ValueError(f"scales: at most {MAX_GROUPS} groups can be converted; got {groups}")
        kernel = jit.get_kernel(CONFIG.render(), device)
        shape = runtime.LaunchShape(CONFIG.grid(rows, cols, groups), (CONFIG.threads, 1, 1))
        found = runtime.Launcher(kernel, shape)
        if len(_launchers) >= 1024:
            _launchers.clear()
        _launchers[key] = found
    return found


def pack(src: int, dst: int, strides: tuple[int, int, int], rows: int, cols: int, dst_ld: int) -> runtime.ParamPack:
    """The kernel's parameters: `strides` (group, row, column) of the source in floats."""
    return INTERFACE.pack(src=src, dst=dst, src_group_stride=strides[0], src_row_stride=strides[1],
                          src_col_stride=strides[2], rows=rows, cols=cols, dst_ld=dst_ld)
