"""The UE8M0 unpack kernel (ptx/ue8m0.cuh): scale factors packed four exponent bytes to an int32 (DeepGEMM's
packed format) into the FP32 scales the GEMM kernels read, on the GPU, in one launch."""

from __future__ import annotations

from dataclasses import dataclass

from .. import jit, runtime
from ..intmath import ceil_div
from .interface import KernelInterface, Param
from .. import caches

# The kernel's parameters (ptx/ue8m0.cuh ue8m0_unpack reads them by name). Strides are in elements: of the packed
# int32 tensor [groups, rows, words] (in_group, in_row, in_word) and of the float32 output [groups, rows,
# kblocks] (out_group, out_row, out_kblock).
INTERFACE = KernelInterface(
    "Ue8m0UnpackParams",
    (
        Param("packed", "const int*"),
        Param("out", "float*"),
        Param("rows", "int"),
        Param("kblocks", "int"),
        Param("in_group", "long long"),
        Param("in_row", "long long"),
        Param("in_word", "long long"),
        Param("out_group", "long long"),
        Param("out_row", "long long"),
        Param("out_kblock", "long long"),
    ),
)


#: The `dgx warmup` arguments that build it (a strict-mode miss names them): every plan with a GEMM entry holds it.
HELPER_WARMUP_HINT = "--preset NAME, or --shapes FILE with any GEMM entry (every GEMM warmup builds this helper kernel)"


@dataclass(frozen=True)
class Ue8m0UnpackConfig:
    """`threads` rows per CTA (one thread per row); the grid's y is the group."""

    threads: int = 256

    def __post_init__(self) -> None:
        if self.threads not in (128, 256, 512):
            raise ValueError(f"Ue8m0UnpackConfig.threads: expected 128, 256 or 512; got {self.threads}")

    @property
    def kernel_name(self) -> str:
        return f"dgx_ue8m0_unpack_t{self.threads}"

    def render(self) -> jit.KernelSource:
        source = (
            '#include "ue8m0.cuh"\n'
            "template <typename Params>\n"
            "__device__ __forceinline__ void ue8m0_unpack_body(const Params& p) {\n"
            f"  dgx::ue8m0_unpack<{self.threads}>(p);\n"
            "}\n"
            + INTERFACE.render_entry(self.kernel_name, self.threads, "ue8m0_unpack_body")
        )
        return jit.KernelSource(
            name=self.kernel_name,
            source=source,
            summary=(("family", "ue8m0_unpack"), ("threads", str(self.threads))),
            warmup_hint=HELPER_WARMUP_HINT,
        )


_launchers: dict[tuple, runtime.Launcher] = caches.per_process({})
_LAUNCHER_CACHE_LIMIT = 256


def launch_unpack(packed: int, in_strides: tuple[int, int, int], out: int, out_strides: tuple[int, int, int],
                  groups: int, rows: int, kblocks: int, device: int, stream: int,
                  config: Ue8m0UnpackConfig = Ue8m0UnpackConfig()) -> None:
    """out[g, r, kb] = 2^(byte kb % 4 of packed[g, r, kb // 4] - 127) for every g < groups, r < rows, kb < kblocks
    (addresses and element strides of both tensors on `device`), on `stream`. The caller has checked the shapes."""
    if groups <= 0 or rows <= 0 or kblocks <= 0:
        return
    grid = (ceil_div(rows, config.threads), groups, 1)
    key = (config, device, grid)
    launcher = _launchers.get(key)
    if launcher is None:
        kernel = jit.get_kernel(config.render(), device)
        if len(_launchers) >= _LAUNCHER_CACHE_LIMIT:
            _launchers.clear()
        launcher = _launchers[key] = runtime.Launcher(kernel, runtime.LaunchShape(grid, (config.threads, 1, 1)))
    params = INTERFACE.pack(
        packed=packed, out=out, rows=rows, kblocks=kblocks,
        in_group=in_strides[0], in_row=in_strides[1], in_word=in_strides[2],
        out_group=out_strides[0], out_row=out_strides[1], out_kblock=out_strides[2],
    )
    launcher.launch(stream, params)
