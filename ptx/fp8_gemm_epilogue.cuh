// The epilogue of the FP8 GEMM kernel (ptx/fp8_gemm.cuh): a math warpgroup's promoted results out to D, through
// its swizzled slice of the staged output tile and TMA (a store, or the weight gradient's reduce-add, issued by
// the producer during the next tile), while the next tile's MMAs start; or, split-K, the cluster's partial tiles
// summed and stored.
#pragma once
#include "cluster.cuh"
#include "common.cuh"
#include "fp8_gemm_traits.cuh"
#include "mbarrier.cuh"
#include "scheduler.cuh"
#include "tma.cuh"

namespace dgx {

// A math thread's place: its warpgroup, warp and lane, and where its part of an m64 accumulator fragment lies
// (rows row_in_wg and row_in_wg + 8 of the slice; columns col_in_8 and col_in_8 + 1 of each group of 8).
struct MathThread {
    uint32_t wg, warp, lane, row_in_wg, col_in_8;
};

// Offset inside a region written for TMA's SWIZZLE_<kSpan>B mode (rows of kSpan bytes): the 16-byte unit index
// is XORed with the row index within each 128-byte line group (CUTLASS's Swizzle<log2(kSpan/16), 4, 3>).
// kSpan == 16 means no swizzle. The region must be 1024-byte aligned.
template <uint32_t kSpan>
DGX_DEVICE uint32_t swizzle_offset(uint32_t offset) {
    static_assert(kSpan == 16 || kSpan == 32 || kSpan == 64 || kSpan == 128, "TMA swizzle spans 32/64/128 B");
    if constexpr (kSpan == 16) {
        return offset;
    } else {
        constexpr uint32_t kMask = kSpan / 16 - 1;
        return offset ^ (((offset >> 7) & kMask) << 4);
    }
}

// Shared address of byte `col_bytes` of row `row` in a warpgroup's slice of the output tile, which holds the
// warpgroup's rows span by span (kDSpan bytes of each row, rows one after another), swizzled for TMA.
// `region_addr` by reference: passed by value, the address arithmetic compiled differently.
template <typename T>
DGX_DEVICE uint32_t d_offset(const uint32_t& region_addr, uint32_t row, uint32_t col_bytes) {
    return region_addr + swizzle_offset<T::kDSpan>((col_bytes / T::kDSpan) * T::kWGRows * T::kDSpan +
                                                   row * T::kDSpan + col_bytes % T::kDSpan);
}

// A masked group's last block may end inside a warpgroup's rows, and the rows past the group's count must stay
// untouched: such a block is stored row by row from the registers (BF16).
template <typename T>
DGX_DEVICE void store_rows(const float (&result)[T::kMmaPerWG][T::kAccum], const MathThread& t, int wg_row,
                           int row_end, int n_start, void* d_ptr, int64_t ld_d, int n = T::kN) {
    uint16_t* d = static_cast<uint16_t*>(d_ptr);
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = wg_row + mm * 64 + static_cast<int>(t.row_in_wg) + h * 8;
            if (row >= row_end) continue;
            uint16_t* out = d + row * ld_d + n_start + t.col_in_8;
#pragma unroll
            for (int i = 0; i < T::kBlockN / 8; ++i) {
                if (n_start + i * 8 + static_cast<int>(t.col_in_8) < n)
                    st_global_u32(out + i * 8, pack_bf16x2(result[mm][i * 4 + h * 2], result[mm][i * 4 + h * 2 + 1]));
            }
        }
    }
}

// Weight gradient: FP32 results into the slice with 64-bit stores (stmatrix is 16-bit only).
// The plain one-slice tile computes its store addresses here, per tile: left to the compiler, they were formed
// once before the tile loop and held in BLOCK_N / 4 registers through every k-block (128x152 then spilled with
// the column scales held in registers too).
template <typename T>
DGX_DEVICE void write_slice_fp32(const float (&result)[T::kMmaPerWG][T::kAccum], const MathThread& t,
                                 uint32_t region_addr) {
    uint32_t row_in_wg = t.row_in_wg, col_in_8 = t.col_in_8;
    if constexpr (!T::kDefer && T::kMmaPerWG == 1) asm volatile("" : "+r"(row_in_wg), "+r"(col_in_8));
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
#pragma unroll
        for (int i = 0; i < T::kBlockN / 8; ++i) {
            const uint32_t col_bytes = (i * 8 + col_in_8) * 4;
            const uint32_t row = mm * 64 + row_in_wg;
            st_shared_v2_f32(d_offset<T>(region_addr, row, col_bytes), result[mm][i * 4 + 0], result[mm][i * 4 + 1]);
            st_shared_v2_f32(d_offset<T>(region_addr, row + 8, col_bytes), result[mm][i * 4 + 2],
                             result[mm][i * 4 + 3]);
        }
    }
}

// BF16 results into the slice with stmatrix: one x4 per 16 rows x 16 columns of the warp's fragment (matrices:
// rows 0-7 and 8-15 of column group i, then of group i + 1), an x2 for an odd last group. Lane l gives the
// address of row l % 8 of matrix l / 8; 8 rows of 16 bytes land in 8 distinct bank groups (the swizzle XORs by
// row % 8; unswizzled rows are 16 bytes apart). PERFLOG exp. 10.
template <typename T>
DGX_DEVICE void write_slice_bf16(const float (&result)[T::kMmaPerWG][T::kAccum], const MathThread& t,
                                 uint32_t region_addr) {
    const uint32_t lane_row = (t.warp % 4) * 16 + (t.lane / 8) % 2 * 8 + t.lane % 8;
    const uint32_t lane_group = t.lane / 16;
    auto pack = [&](int mm, int i, int h) {
        return pack_bf16x2(result[mm][i * 4 + h * 2], result[mm][i * 4 + h * 2 + 1]);
    };
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
#pragma unroll
        for (int i = 0; i < T::kBlockN / 8; i += 2) {
            if (i + 1 < T::kBlockN / 8) {
                stmatrix_x4(d_offset<T>(region_addr, mm * 64 + lane_row, (i + lane_group) * 16), pack(mm, i, 0),
                            pack(mm, i, 1), pack(mm, i + 1, 0), pack(mm, i + 1, 1));
            } else {
                stmatrix_x2(d_offset<T>(region_addr, mm * 64 + lane_row, i * 16), pack(mm, i, 0), pack(mm, i, 1));
            }
        }
    }
}

// Where a tile's output goes, as the producer keeps it for the stores it issues during the next tile.
struct TileOut {
    int d_row, d_row_end, n_start;
};

// Span `span` of warpgroup `wg`'s slice of the staged weight-gradient tile out to D with TMA: a reduce-add with
// `accumulate` (D += tile; D holds C), else a store. Spans wholly past the rows to store or past N (`n`) are skipped.
template <typename T>
DGX_DEVICE void store_span(const TensorMap& tmap_d, const uint8_t* smem_d, const TileOut& out, int wg, int span,
                           bool accumulate, int n) {
    static_assert(T::kWgrad, "FP32 spans of the weight gradient's staged tile");
    constexpr int kSpanCols = T::kDSpan / 4;
    const int wg_row = out.d_row + wg * T::kWGRows;
    const int col = out.n_start + span * kSpanCols;
    if (wg_row < out.d_row_end && col < n) {
        const uint8_t* src = smem_d + (wg * T::kBlockN * 4 / T::kDSpan + span) * T::kWGRows * T::kDSpan;
        if (accumulate)
            tma_reduce_add_2d(&tmap_d, src, col, wg_row);
        else
            tma_store_2d(&tmap_d, src, col, wg_row);
    }
}

// A math warpgroup's rows of the tile out to D through its slice of the staged tile.
// - Weight gradient (T::kStoreByProducer): the slice is only staged, once `bars[1]` says the producer's stores have
//   read the previous tile (`tiles`: the tiles staged before), and `bars[0]` told; the producer thread issues its
//   TMA reduce-adds or stores (fp8_gemm_producer.cuh TileStores).
// - BF16: stored with one TMA store per swizzle span, asynchronously (the next tile's MMAs start meanwhile), at
//   D's column T::d_col of the span (skip-head-mid outputs); batched, into the tile's group of the 3-D map.
//   Masked partial blocks: store_rows.
// `n`: N (Scheduler::shape_n: a constant unless N comes at run time).
template <typename T, typename Scheduler>
DGX_DEVICE void store_tile(const Tile& tile, int n_start, const float (&result)[T::kMmaPerWG][T::kAccum],
                           const MathThread& t, uint8_t* smem_d, const TensorMap& tmap_d, void* d_ptr, int64_t ld_d,
                           uint64_t* bars, uint32_t tiles, int n) {
    if constexpr (T::kStoreByProducer) {
        mbarrier_wait(&bars[1], (tiles & 1) ^ 1);
        write_slice_fp32<T>(result, t, smem_addr(smem_d + t.wg * T::kWGRows * T::kBlockN * 4));
        fence_proxy_async_shared();  // each thread's stores, before the producer's TMA reads them
        mbarrier_arrive(&bars[0]);
    } else {
        static_assert(!T::kWgrad, "the weight gradient's tiles are stored by the producer");
        const int wg_row = tile.d_row + static_cast<int>(t.wg * T::kWGRows);
        if (Scheduler::kLayout == kLayoutMasked && wg_row + T::kWGRows > tile.d_row_end) {
            store_rows<T>(result, t, wg_row, tile.d_row_end, n_start, d_ptr, ld_d, n);
            return;
        }
        uint8_t* region = smem_d + t.wg * T::kWGRows * T::kBlockN * 2;
        const bool leader = threadIdx.x % 128 == 0;
        if (leader) tma_store_wait_read();  // the previous tile's store has left this buffer
        named_barrier_sync(1 + t.wg, 128);
        write_slice_bf16<T>(result, t, smem_addr(region));
        fence_proxy_async_shared();
        named_barrier_sync(1 + t.wg, 128);
        if (leader && wg_row < tile.d_row_end && n_start < n) {
            constexpr int kSpanCols = T::kDSpan / 2;
#pragma unroll
            for (int span = 0; span < T::kBlockN / kSpanCols; ++span) {
                if (n_start + span * kSpanCols < n) {
                    if constexpr (Scheduler::kLayout == kLayoutBatched)  // D [rows, groups, N]
                        tma_store_3d(&tmap_d, region + span * T::kWGRows * T::kDSpan, n_start + span * kSpanCols,
                                     tile.group, wg_row);
                    else
                        tma_store_2d(&tmap_d, region + span * T::kWGRows * T::kDSpan,
                                     T::d_col(n_start + span * kSpanCols), wg_row);
                }
            }
            tma_store_commit();
        }
    }
}

// Split-K: the kSplit CTAs of the cluster ran this tile over kSplit ranges of K. Each writes its FP32 partial
// tile into its shared memory (T::kPartialStride floats a row) and publishes it to every CTA of the cluster
// (`bars[0]`, one arrival per math thread of each CTA); once all are published, CTA `rank` sums its share of the
// tile - the rank-th of kSplit equal runs of 4-float vectors - over the partials of ranks 0, 1, ..., kSplit - 1 in
// that order (a fixed order, so the result is bitwise the same every run, without atomics or workspace), converts
// and stores it straight to D, then tells every CTA it has read their partials (`bars[1]`). A CTA overwrites its
// partial with the next tile's only after all have read it. `index`: the tiles this CTA reduced before.
// Weight gradient with `accumulate`: D (holding C) + sum, by the one thread that owns each element.
template <typename T>
DGX_DEVICE void reduce_split_tile(const Tile& tile, int n_start, const float (&result)[T::kMmaPerWG][T::kAccum],
                                  const MathThread& t, uint8_t* smem_d, uint64_t* bars, uint32_t rank,
                                  uint32_t index, void* d_ptr, int64_t ld_d, bool accumulate, int n = T::kN) {
    static_assert(T::kSplit > 1 && T::kMmaPerWG == 1, "split-K tiles have one m64 slice per warpgroup");
    constexpr uint32_t kStride = T::kPartialStride;
    const uint32_t base = smem_addr(smem_d);
    if (index > 0) mbarrier_wait_cluster(&bars[1], (index - 1) & 1);  // the peers have read our last partial
    const uint32_t row = t.wg * T::kWGRows + t.row_in_wg;
#pragma unroll
    for (int i = 0; i < T::kBlockN / 8; ++i) {
        const uint32_t at = base + (row * kStride + i * 8 + t.col_in_8) * 4;
        st_shared_v2_f32(at, result[0][i * 4 + 0], result[0][i * 4 + 1]);
        st_shared_v2_f32(at + 8 * kStride * 4, result[0][i * 4 + 2], result[0][i * 4 + 3]);
    }
    // Each thread publishes its part of the partial to every CTA of the cluster (mbarrier.cuh, split-K).
    publish_to_cluster<T::kSplit>(&bars[0]);
    mbarrier_wait_cluster(&bars[0], index & 1);

    constexpr int kRowVecs = T::kBlockN / 4;
    constexpr int kVecs = T::kBlockM * kRowVecs;
    const int first = static_cast<int>(rank) * kVecs / T::kSplit;
    const int last = (static_cast<int>(rank) + 1) * kVecs / T::kSplit;
#pragma unroll 1
    for (int v = first + static_cast<int>(threadIdx.x); v < last; v += T::kMathThreads) {
        const int r = v / kRowVecs;
        const int c = v % kRowVecs * 4;
        const uint32_t at = base + (r * kStride + c) * 4;
        F32x4 part[T::kSplit];
#pragma unroll
        for (int p = 0; p < T::kSplit; ++p) part[p] = ld_shared_cluster_f32x4(map_shared_rank(at, p));
        F32x4 sum = part[0];
#pragma unroll
        for (int p = 1; p < T::kSplit; ++p) {
            sum.x += part[p].x;
            sum.y += part[p].y;
            sum.z += part[p].z;
            sum.w += part[p].w;
        }
        const int d_row = tile.d_row + r;
        const int d_col = n_start + c;
        // N is a multiple of 8, so a vector (4 columns from a multiple of 4) lies wholly inside or outside.
        if (d_row < tile.d_row_end && d_col < n) {
            const int64_t offset = static_cast<int64_t>(d_row) * ld_d + d_col;
            if constexpr (T::kWgrad) {
                float* out = static_cast<float*>(d_ptr) + offset;
                if (accumulate) {
                    const F32x4 c_in = ld_global_f32x4(out);
                    sum = F32x4{c_in.x + sum.x, c_in.y + sum.y, c_in.z + sum.z, c_in.w + sum.w};
                }
                st_global_v4_f32(out, sum);
            } else {
                st_global_v2_u32(static_cast<uint16_t*>(d_ptr) + offset, pack_bf16x2(sum.x, sum.y),
                                 pack_bf16x2(sum.z, sum.w));
            }
        }
    }
    // Each thread tells every CTA it has read its share of their partials.
    publish_to_cluster<T::kSplit>(&bars[1]);
}

}  // namespace dgx
