// Smoke kernel: exercises the whole path (render, NVRTC, cache, load, tensor map, cluster launch).
// Each CTA loads one kRows x kCols float tile of `src` by TMA and writes dst = 2 * src + rank in cluster.
#pragma once
#include "cluster.cuh"
#include "mbarrier.cuh"
#include "pdl.cuh"
#include "tma.cuh"

namespace dgx {

template <int kRows, int kCols>
__device__ void smoke_tile(const TensorMap& src_map, float* dst, int rows, int cols) {
    static_assert(kCols * 4 % 16 == 0, "a TMA box row must be a multiple of 16 bytes");
    static_assert(kRows <= 256 && kCols <= 256, "a TMA box dimension is at most 256 elements");
    __shared__ alignas(128) float tile[kRows * kCols];
    __shared__ alignas(8) uint64_t full;

    const int row0 = blockIdx.y * kRows;
    const int col0 = blockIdx.x * kCols;
    if (threadIdx.x == 0) {
        prefetch_tensor_map(&src_map);
        mbarrier_init(&full, 1);
        fence_barrier_init();
    }
    cluster_sync();
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): after the prologue, before the first global read
    griddepcontrol_launch_dependents();
    if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(&full, kRows * kCols * 4);
        tma_load_2d(&src_map, &full, tile, col0, row0);
    }
    mbarrier_wait(&full, 0);
    const float rank = static_cast<float>(cluster_ctarank());
    for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
        const int r = row0 + i / kCols, c = col0 + i % kCols;
        if (r < rows && c < cols) dst[static_cast<int64_t>(r) * cols + c] = 2.0f * tile[i] + rank;
    }
    cluster_sync();  // no CTA leaves while a peer may still address its shared memory
}

}  // namespace dgx
