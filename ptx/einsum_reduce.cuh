// The second kernel of 'bmk,bnk->mn' (the BF16 GEMM kernel's batch-sum layout, scheduler.cuh): d = (c +) the sum
// of the FP32 partials [ranges, M, N] the GEMM kernel wrote, one per range of the (s, k) reduction. Every element
// adds its ranges in range order, so the result never depends on which CTA finished first: bitwise deterministic,
// no atomics. Four columns per thread (N is a multiple of 8; rows of d and c are 16-byte aligned).
#pragma once
#include "common.cuh"
#include "pdl.cuh"

namespace dgx {

// `p`: partials (FP32 [ranges, m, n], dense), d (FP32 or BF16, row stride ld_d elements), c (FP32, row stride ld_c;
// read only when kWithC: it may be d itself, each element read before the same thread overwrites it), m, n, ranges.
template <bool kOutF32, bool kWithC, int kThreads, typename Params>
DGX_DEVICE void batch_sum_reduce_body(const Params& p) {
    static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
    static_assert(kOutF32 || !kWithC, "C is added to an FP32 d only (DeepGEMM's rule: c has d's dtype, FP32)");
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): the partials are the previous kernel's output
    griddepcontrol_launch_dependents();
    const long long row_vecs = p.n / 4;
    const long long vecs = static_cast<long long>(p.m) * row_vecs;
    const long long slice = static_cast<long long>(p.m) * p.n;  // floats per range
    for (long long v = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; v < vecs;
         v += static_cast<long long>(gridDim.x) * kThreads) {
        const long long row = v / row_vecs;
        const long long col = (v - row * row_vecs) * 4;
        const float* src = p.partials + row * p.n + col;
        F32x4 sum = ld_global_nc_f32x4(src);
#pragma unroll 4
        for (int r = 1; r < p.ranges; ++r) {
            const F32x4 x = ld_global_nc_f32x4(src + r * slice);
            sum.x += x.x;
            sum.y += x.y;
            sum.z += x.z;
            sum.w += x.w;
        }
        if constexpr (kOutF32) {
            float* out = static_cast<float*>(p.d) + row * p.ld_d + col;
            if constexpr (kWithC) {
                const F32x4 c = ld_global_f32x4(p.c + row * p.ld_c + col);
                sum = F32x4{c.x + sum.x, c.y + sum.y, c.z + sum.z, c.w + sum.w};
            }
            st_global_v4_f32(out, sum);
        } else {
            st_global_v2_u32(static_cast<uint16_t*>(p.d) + row * p.ld_d + col, pack_bf16x2(sum.x, sum.y),
                             pack_bf16x2(sum.z, sum.w));
        }
    }
}

}  // namespace dgx
