// The math warpgroups of the BF16 GEMM kernel (ptx/bf16_gemm.cuh): per k-block, wgmma m64nNk16 (bf16 x bf16 ->
// f32) into FP32 accumulators that run over the whole of K (no promotion: BF16 products are exact in FP32, and K
// chains are short), except the batch-sum layout's long (s, k) ranges (bf16_promoted_kloop); per tile, the epilogue
// (bf16_gemm_epilogue.cuh).
#pragma once
#include "bf16_gemm_epilogue.cuh"
#include "bf16_gemm_pingpong.cuh"
#include "bf16_gemm_traits.cuh"
#include "common.cuh"
#include "mbarrier.cuh"
#include "scheduler.cuh"
#include "wgmma.cuh"

namespace dgx {

// Hands stage s back: lane 0 of each warp, or in a pair lane r on rank r's barrier (the stage held the peer's
// multicast half too, so both producers wait for us).
template <typename T>
DGX_DEVICE void bf16_release(uint64_t* empty, uint32_t s, uint32_t lane) {
    if constexpr (T::kPeers == 1) {
        if (lane == 0) mbarrier_arrive(&empty[s]);
    } else {
        if (lane < T::kPeers) mbarrier_arrive_cluster(&empty[s], lane);
    }
}

// One k-block's MMAs: per m64 slice of the warpgroup's rows, 4 kKAtoms k16 steps into that slice's accumulators, all
// committed as one group. `first`: the tile's first k-block, whose first step overwrites the accumulators.
template <typename T>
DGX_DEVICE void bf16_mma_block(float (&acc)[T::kMmaPerWG][T::kAccum], uint64_t desc_a, uint64_t desc_b, bool first) {
    using Mma = WgmmaBF16<T::kBlockN, T::kMajorA == kMajorMN, T::kMajorB == kMajorMN>;
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
        for (int i = 0; i < T::kAccum; ++i) fence_operand(acc[mm][i]);
    wgmma_fence();
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
#pragma unroll
        for (int j = 0; j < T::kBlockK / 16; ++j)
            Mma::mma(desc_a + (T::TileA::byte_offset(mm * 64, j) >> 4), desc_b + (T::TileB::byte_offset(0, j) >> 4),
                     acc[mm], !first || j > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
        for (int i = 0; i < T::kAccum; ++i) fence_operand(acc[mm][i]);
}

// The promoted k-loop (T::kPromote: the batch-sum layout's long (s, k) ranges): per k-block, the MMAs overwrite
// `part`, the warpgroup waits for them, hands the stage back and adds `part` into `acc` with round-to-nearest FP32
// adds, so the tensor cores' truncating accumulation never chains past one k-block. The wait costs the overlap of
// the next k-block's MMAs with this one's, which a memory-bound stream does not miss.
template <typename T>
DGX_DEVICE void bf16_promoted_kloop(float (&acc)[T::kMmaPerWG][T::kAccum], const Bf16GemmSmem& smem, uint64_t desc_a0,
                                    uint64_t desc_b0, int num_kb, uint32_t& it, uint32_t lane) {
    float part[T::kMmaPerWG][T::kAccum];
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
        for (int i = 0; i < T::kAccum; ++i) acc[mm][i] = 0.0f;
#pragma unroll 1
    for (int kb = 0; kb < num_kb; ++kb, ++it) {
        const uint32_t s = it % T::kNumStages;
        mbarrier_wait(&smem.full[s], (it / T::kNumStages) & 1);
        bf16_mma_block<T>(part, desc_a0 + s * (T::kSmemA >> 4), desc_b0 + s * (T::kSmemB >> 4), true);
        wgmma_wait<0>();
#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) fence_operand(part[mm][i]);
        bf16_release<T>(smem.empty, s, lane);
#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) acc[mm][i] = __fadd_rn(acc[mm][i], part[mm][i]);
    }
}

// The math warpgroups' role: every tile of the scheduler, k-loop then epilogue. The k-loop keeps one k-block's MMAs
// in flight: once k-block kb's are issued it waits for kb - 1's (wgmma.wait_group 1) and hands that stage back, so
// the tensor cores always have the next group queued. The ring runs on across tiles. Split-K: the k-loop covers
// this CTA's range of the tile's K, and the cluster sums its partials (reduce_split_tile) instead of the store.
// Ping-pong (bf16_gemm_pingpong.cuh): each warpgroup walks every tile of the scheduler, runs every other one (its
// k-loop in its turn at the tensor cores, then its epilogue under the other's turn) and steps the ring's count past
// the other's k-blocks.
template <typename T, typename Scheduler, typename Params>
DGX_DEVICE void bf16_gemm_math(const Params& params) {
    if constexpr (T::kNumMathWG == 2) setmaxnreg_inc<T::kMathRegs>();
    const Bf16GemmSmem smem = bf16_gemm_smem<T>();
    Scheduler scheduler(params.m, params.grouped_layout, params.num_groups);
    // The warpgroup index is broadcast from lane 0 so the compiler knows it is warp-uniform: descriptors derived
    // from it stay in uniform registers and feed wgmma directly.
    const uint32_t wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
    const uint32_t warp = warp_id();
    const uint32_t lane = lane_id();
    const MathThread me{wg, warp, lane, (warp % 4) * 16 + lane / 4, (lane % 4) * 2};
    // Stage 0's descriptors: this warpgroup's rows of A, all of B.
    const uint64_t desc_a0 = T::TileA::desc(smem.a, static_cast<int>(wg) * T::kWGRowStride);
    const uint64_t desc_b0 = T::TileB::desc(smem.b, 0);
    float acc[T::kMmaPerWG][T::kAccum];
    uint32_t it = 0;     // k-blocks consumed so far
    uint32_t tiles = 0;  // split-K: tiles reduced so far (the parities of the tile barriers); ping-pong: tiles seen
    if constexpr (T::kPingPong) pingpong_start(wg);
    Tile tile;
    while (scheduler.next_tile(tile)) {
        const int num_kb = T::kKGrouped ? tile.num_kb * (128 / T::kBlockK)
                                        : (T::kBatchSum ? tile.num_kb : T::kTileKBlocks);
        if constexpr (T::kPingPong) {
            if ((tiles++ & 1) != wg) {  // the other warpgroup's tile
                it += num_kb;
                continue;
            }
            pingpong_wait_turn(wg);
        }
        if constexpr (T::kPromote) {
            bf16_promoted_kloop<T>(acc, smem, desc_a0, desc_b0, num_kb, it, lane);
        } else {
            uint32_t held = 0;  // the previous k-block's stage, handed back once its MMAs are done
#pragma unroll 1
            for (int kb = 0; kb < num_kb; ++kb, ++it) {
                const uint32_t s = it % T::kNumStages;
                mbarrier_wait(&smem.full[s], (it / T::kNumStages) & 1);
                bf16_mma_block<T>(acc, desc_a0 + s * (T::kSmemA >> 4), desc_b0 + s * (T::kSmemB >> 4), kb == 0);
                wgmma_wait<1>();
                if (kb > 0) bf16_release<T>(smem.empty, held, lane);
                held = s;
            }
            if constexpr (T::kPingPong) pingpong_pass_turn(wg);
            wgmma_wait<0>();
#pragma unroll
            for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
                for (int i = 0; i < T::kAccum; ++i) fence_operand(acc[mm][i]);
            if (num_kb > 0) bf16_release<T>(smem.empty, held, lane);
        }
        if constexpr (T::kSplit > 1)
            reduce_split_tile<T>(tile, tile.n_block * T::kBlockN, acc, me, smem.d, smem.tile_bars, scheduler.rank,
                                 tiles++, params.d_ptr, params.ld_d, T::kReduce);
        else
            bf16_store_tile<T, Scheduler>(params, tile, acc, me, smem.d);
    }
    if constexpr (T::kPingPong) pingpong_finish(wg, tiles);
    if (threadIdx.x % 128 == 0) tma_store_wait_all();
}

}  // namespace dgx
