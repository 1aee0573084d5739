// Per-row scales into the layout the GEMM kernels load with TMA: a [G][rows][cols] float tensor of any strides
// (row-major SFA [M, K/128], a slice, DeepGEMM's transposed K-grouped scales...) copied into the TMA-aligned
// M-major layout, dst[(g * cols + c) * dst_ld + r] (dst_ld = rows rounded up to 4 floats; the padding is not
// written, and the GEMM's tensor maps never read it). One CTA moves a kTile x kTile tile through shared memory,
// so both the reads (along a row-major source's columns) and the writes (along M) are coalesced.
#pragma once
#include "common.cuh"
#include "pdl.cuh"

namespace dgx {

template <int kTile, int kThreads, typename Params>
DGX_DEVICE void scale_transpose_body(const Params& p) {
    static_assert(kThreads % kTile == 0, "whole rows of threads per tile");
    constexpr int kRowsPerPass = kThreads / kTile;
    __shared__ float tile[kTile][kTile + 1];  // +1: the transposed reads hit 32 distinct banks
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): no prologue; the scales may be a predecessor's output
    griddepcontrol_launch_dependents();

    const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
    const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTile;
    const int64_t g = blockIdx.z;
    const float* src = p.src + g * p.src_group_stride;
    float* dst = p.dst + g * p.cols * static_cast<int64_t>(p.dst_ld);

#pragma unroll
    for (int i = ty; i < kTile; i += kRowsPerPass) {
        const int64_t r = r0 + i, c = c0 + tx;
        if (r < p.rows && c < p.cols) tile[i][tx] = src[r * p.src_row_stride + c * p.src_col_stride];
    }
    __syncthreads();
#pragma unroll
    for (int i = ty; i < kTile; i += kRowsPerPass) {
        const int64_t c = c0 + i, r = r0 + tx;
        if (r < p.rows && c < p.cols) dst[c * p.dst_ld + r] = tile[tx][i];
    }
}

}  // namespace dgx
