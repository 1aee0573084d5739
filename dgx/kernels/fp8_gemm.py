"""The dense FP8 GEMM family (ptx/fp8_gemm.cuh): config, rendering and launch arguments."""

from __future__ import annotations

from dataclasses import dataclass, fields
from math import gcd

from .. import jit
from .wgmma_render import render_wgmma_e4m3

SMEM_LIMIT = 232448  # bytes of shared memory one block may use on Hopper (227 KB)
BARRIER_BYTES = 16  # full + empty mbarrier per stage


@dataclass(frozen=True)
class GemmConfig:
    """Everything compile-time about one dense FP8 GEMM kernel. M is a run-time argument."""

    n: int
    k: int
    block_m: int
    block_n: int
    stages: int
    group_n: int = 16

    def __post_init__(self) -> None:
        problems = validate_blocks(self.block_m, self.block_n)
        if problems:
            raise ValueError(f"invalid GEMM config {self}: {problems}")
        if self.smem_bytes > SMEM_LIMIT:
            raise ValueError(f"GEMM config {self} needs {self.smem_bytes} bytes of shared memory; the limit is {SMEM_LIMIT}")

    @property
    def math_warpgroups(self) -> int:
        return 1 if self.block_m == 64 else 2

    @property
    def threads(self) -> int:
        return 128 * (self.math_warpgroups + 1)

    @property
    def d_span(self) -> int:
        """Bytes per swizzle span of the BF16 output tile (16 = no swizzle)."""
        return d_span_bytes(self.block_n)

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.block_m, self.block_n, self.stages)

    @property
    def kernel_name(self) -> str:
        return (
            f"dgx_fp8_gemm_nt_n{self.n}_k{self.k}_bm{self.block_m}_bn{self.block_n}"
            f"_s{self.stages}_g{self.group_n}"
        )

    def describe(self) -> tuple[tuple[str, str], ...]:
        return (("family", "fp8_gemm_nt"),) + tuple((f.name, str(getattr(self, f.name))) for f in fields(self))

    def render(self) -> jit.KernelSource:
        args = f"{self.n}, {self.k}, {self.block_m}, {self.block_n}, {self.stages}, {self.group_n}, {self.d_span}"
        source = (
            '#include "fp8_gemm.cuh"\n'
            + render_wgmma_e4m3(self.block_n)
            + f'extern "C" __global__ void __launch_bounds__({self.threads}, 1) {self.kernel_name}(\n'
            "    const __grid_constant__ dgx::TensorMap tmap_a, const __grid_constant__ dgx::TensorMap tmap_b,\n"
            "    const __grid_constant__ dgx::TensorMap tmap_d, const float* sfa, long long sfa_stride_m,\n"
            "    long long sfa_stride_k, const float* sfb, int m) {\n"
            f"  dgx::fp8_gemm_nt_body<{args}>(tmap_a, tmap_b, tmap_d, sfa, sfa_stride_m, sfa_stride_k, sfb, m);\n"
            "}\n"
        )
        return jit.KernelSource(
            name=self.kernel_name,
            source=source,
            dynamic_smem=self.smem_bytes,
            summary=self.describe(),
            warmup_hint=f"--shapes FILE with {{\"kind\": \"dense\", \"n\": {self.n}, \"k\": {self.k}}}",
        )


def d_span_bytes(block_n: int) -> int:
    row = block_n * 2
    for span in (128, 64, 32):
        if row % span == 0:
            return span
    return 16


def smem_bytes(block_m: int, block_n: int, stages: int) -> int:
    return block_m * block_n * 2 + stages * (block_m * 128 + block_n * 128 + BARRIER_BYTES)


def validate_blocks(block_m: int, block_n: int) -> str:
    """'' if (block_m, block_n) is a tile the kernel supports, else what is wrong."""
    if block_m not in (64, 128, 256):
        return f"block_m must be 64, 128 or 256; got {block_m}"
    if block_n % 8 or not 8 <= block_n <= 256:
        return f"block_n must be a multiple of 8 in 8..256; got {block_n}"
    if 128 % block_n and block_n - gcd(block_n, 128) > 128:
        return f"block_n {block_n} lets a tile span three 128-column B-scale blocks"
    # Registers: two sets of N/2 FP32 accumulators per m64 MMA in a math thread. One math warpgroup may
    # use up to 255 registers a thread; two get 232 each through setmaxnreg.
    mmas_per_thread = block_m // 64 if block_m == 64 else block_m // 128
    per_thread = mmas_per_thread * block_n
    limit = 208 if block_m == 64 else 160
    if per_thread > limit:
        return f"block_m {block_m} x block_n {block_n} needs {per_thread} accumulator registers per thread (max {limit})"
    return ""
