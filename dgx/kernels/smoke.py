"""The smoke kernel: one TMA tile load per CTA, launched in clusters, checking the whole JIT path."""

from __future__ import annotations

from dataclasses import dataclass

from .. import jit, runtime
from ..intmath import ceil_div, round_up
from ..streams import resolve_stream
from ..tensors import as_view, require_cuda
from .interface import TENSOR_MAP, KernelInterface, Param
from .. import caches

# The kernel's parameters (ptx/smoke.cuh smoke_tile takes them in this order).
INTERFACE = KernelInterface(
    "SmokeParams",
    (Param("src_map", TENSOR_MAP), Param("dst", "float*"), Param("rows", "int"), Param("cols", "int")),
)


@dataclass(frozen=True)
class SmokeConfig:
    """Tile of `rows` x `cols` float32 per CTA, `cluster` CTAs per cluster along x."""

    rows: int = 16
    cols: int = 32
    cluster: int = 2

    @property
    def kernel_name(self) -> str:
        return f"dgx_smoke_r{self.rows}_c{self.cols}_k{self.cluster}"

    def render(self) -> jit.KernelSource:
        source = (
            '#include "smoke.cuh"\n'
            "template <typename Params>\n"
            "__device__ __forceinline__ void smoke_body(const Params& p) {\n"
            f"  dgx::smoke_tile<{self.rows}, {self.cols}>(p.src_map, p.dst, p.rows, p.cols);\n"
            "}\n"
            + INTERFACE.render_entry(self.kernel_name, 128, "smoke_body")
        )
        return jit.KernelSource(
            name=self.kernel_name,
            source=source,
            summary=(("family", "smoke"), ("rows", str(self.rows)), ("cols", str(self.cols)),
                     ("cluster", str(self.cluster))),
        )


_launchers: dict[tuple[SmokeConfig, int, int, int], runtime.Launcher] = caches.per_process({})


def _launcher(config: SmokeConfig, device: int, rows: int, cols: int) -> runtime.Launcher:
    key = (config, device, rows, cols)
    launcher = _launchers.get(key)
    if launcher is None:
        kernel = jit.get_kernel(config.render(), device)
        grid_x = round_up(ceil_div(cols, config.cols), config.cluster)  # a whole number of clusters
        grid_y = ceil_div(rows, config.rows)
        shape = runtime.LaunchShape((grid_x, grid_y, 1), (128, 1, 1), (config.cluster, 1, 1), 0)
        launcher = _launchers[key] = runtime.Launcher(kernel, shape)
    return launcher


def smoke(src, dst, config: SmokeConfig = SmokeConfig(), stream=None) -> None:
    """dst = 2 * src + (rank of the CTA in its cluster), for 2-D float32 CUDA tensors of one shape."""
    s, d = as_view(src, "src"), as_view(dst, "dst")
    require_cuda(s, "src")
    require_cuda(d, "dst", s.device)
    for v, name in ((s, "src"), (d, "dst")):
        if v.dtype != "float32" or v.ndim != 2:
            raise TypeError(f"{name}: expected a 2-D float32 tensor; got {v.ndim}-D {v.dtype}")
        if v.strides[1] != 1 or v.strides[0] != v.shape[1]:
            raise ValueError(f"{name}: expected a contiguous row-major tensor; got strides {v.strides}")
    if s.shape != d.shape:
        raise ValueError(f"dst: expected shape {s.shape} like src; got {d.shape}")
    rows, cols = s.shape
    if rows == 0 or cols == 0:
        return
    launcher = _launcher(config, s.device, rows, cols)
    tmap = runtime.encode_tensor_map_2d("float32", s.ptr, cols, rows, cols * 4, config.cols, config.rows)
    params = INTERFACE.pack(src_map=tmap, dst=d.ptr, rows=rows, cols=cols)
    launcher.launch(resolve_stream(stream, s.device), params)
