// The epilogue of the BF16 GEMM kernel (ptx/bf16_gemm.cuh): a math warpgroup's accumulators out to D through its
// swizzled slice of the staged output tile and TMA (a store, or with C a reduce-add into D, which holds C), issued
// asynchronously so the next tile's MMAs start meanwhile. The slice layout and the register-to-shared writes are the
// FP8 kernel's (fp8_gemm_epilogue.cuh write_slice_bf16 / write_slice_fp32, store_rows), instantiated with T.
#pragma once
#include "bf16_gemm_traits.cuh"
#include "common.cuh"
#include "fp8_gemm_epilogue.cuh"
#include "scheduler.cuh"
#include "tma.cuh"

namespace dgx {

// A math warpgroup's rows of the tile out to D. Masked partial blocks (rows past the group's count stay untouched)
// are stored row by row from the registers; every other block goes through the warpgroup's slice of the staged tile
// with one TMA store (or reduce-add) per swizzle span, rows past the end of D (K-grouped: of the group's D) clipped
// by TMA. The warpgroup's leader first waits until its previous tile's stores have read the slice. Ping-pong: the
// warpgroup's rows are the whole tile, and its slice a staged tile of its own.
template <typename T, typename Scheduler, typename Params>
DGX_DEVICE void bf16_store_tile(const Params& params, const Tile& tile, const float (&acc)[T::kMmaPerWG][T::kAccum],
                                const MathThread& t, uint8_t* smem_d) {
    const int n_start = tile.n_block * T::kBlockN;
    const int wg_row = tile.d_row + static_cast<int>(t.wg * T::kWGRowStride);
    if constexpr (Scheduler::kLayout == kLayoutMasked) {
        if (wg_row + T::kWGRows > tile.d_row_end) {
            store_rows<T>(acc, t, wg_row, tile.d_row_end, n_start, params.d_ptr, params.ld_d);
            return;
        }
    }
    uint8_t* region = smem_d + t.wg * T::kWGRows * T::kBlockN * T::kOutBytes;
    const bool leader = threadIdx.x % 128 == 0;
    if (leader) tma_store_wait_read();  // the previous tile's stores have left this slice
    named_barrier_sync(1 + t.wg, 128);
    if constexpr (T::kOutF32)
        write_slice_fp32<T>(acc, t, smem_addr(region));
    else
        write_slice_bf16<T>(acc, t, smem_addr(region));
    fence_proxy_async_shared();  // each thread's writes, before the TMA engine reads the slice
    named_barrier_sync(1 + t.wg, 128);
    if (leader && wg_row < tile.d_row_end && n_start < T::kN) {
#pragma unroll
        for (int span = 0; span < T::kBlockN / T::kSpanCols; ++span) {
            const int col = n_start + span * T::kSpanCols;
            if (col < T::kN) {
                const uint8_t* src = region + span * T::kWGRows * T::kDSpan;
                if constexpr (T::kD3D) {
                    const int row = tile.a_row + static_cast<int>(t.wg * T::kWGRowStride);  // in the group's rows
                    if constexpr (T::kReduce)
                        tma_reduce_add_3d(&params.tmap_d, src, col, row, tile.group);
                    else
                        tma_store_3d(&params.tmap_d, src, col, row, tile.group);
                } else if constexpr (T::kReduce) {
                    tma_reduce_add_2d(&params.tmap_d, src, col, wg_row);
                } else {
                    tma_store_2d(&params.tmap_d, src, col, wg_row);
                }
            }
        }
        tma_store_commit();
    }
}

}  // namespace dgx
