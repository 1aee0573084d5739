// BF16 GEMM on Hopper: D[M, N] (+)= A[M, K] . B[N, K]^T with FP32 accumulation, D BF16 or FP32, A and B each
// K-major or MN-major (the nt / nn / tn / tt forms run natively: wgmma's transpose flags read either from shared
// memory). Persistent and warp-specialised:
// - the producer warpgroup (bf16_gemm_producer.cuh) fills a ring of shared-memory stages with TMA (128-byte
//   swizzle; 2-CTA clusters multicast the operand they share);
// - one or two math warpgroups (bf16_gemm_math.cuh) run wgmma m64nNk16 into FP32 registers over the whole of K;
// - their epilogue (bf16_gemm_epilogue.cuh) stores the tile through swizzled shared memory with TMA (or, with C,
//   reduce-adds it into D, which holds C) while the producer already loads the next tile; or, split-K, the
//   cluster's CTAs sum their partial tiles of one tile's K ranges through distributed shared memory.
// Tiles come from the scheduler every dgx GEMM shares (scheduler.cuh): dense, M-grouped contiguous (m_indices or
// prefix sums), masked, and K-grouped. Compile-time configuration: Bf16GemmTraits in bf16_gemm_traits.cuh.
#pragma once
#include "bf16_gemm_math.cuh"
#include "bf16_gemm_producer.cuh"
#include "bf16_gemm_traits.cuh"
#include "cluster.cuh"
#include "common.cuh"
#include "mbarrier.cuh"
#include "pdl.cuh"
#include "scheduler.cuh"
#include "tma.cuh"

namespace dgx {

// The kernel body. `params` (dgx.kernels.bf16_gemm.INTERFACE renders its struct) holds the tensor maps of A, B and D,
// `m` (rows; masked: rows per group; K-grouped: M of every group's output), `grouped_layout` (m_indices, prefix
// sums, masked_m or the K-grouped groups' K, on the GPU), `num_groups`, and `d_ptr` / `ld_d` for the rows the
// masked layout stores from registers.
template <typename T, typename Params>
__device__ __forceinline__ void bf16_gemm_body(const Params& params) {
    using Scheduler = TileScheduler<T::kLayout, T::kBlockM, T::kBlockN, T::kNumNBlocks, T::kNumKBlocks, T::kGroupN,
                                    T::kPair, T::kN, T::kSplit>;
    const Bf16GemmSmem smem = bf16_gemm_smem<T>();
    if (warp_id() == T::kProducerWarp && lane_id() == 0) {
        prefetch_tensor_map(&params.tmap_a);
        prefetch_tensor_map(&params.tmap_b);
        prefetch_tensor_map(&params.tmap_d);
        for (int s = 0; s < T::kNumStages; ++s) {
            mbarrier_init(&smem.full[s], T::kFullArrivals);
            mbarrier_init(&smem.empty[s], T::kEmptyArrivals);
        }
        if constexpr (T::kSplit > 1) {
            // One arrival per math thread of every CTA of the cluster (each publishes its own accesses).
            mbarrier_init(&smem.tile_bars[0], T::kSplit * T::kMathThreads);
            mbarrier_init(&smem.tile_bars[1], T::kSplit * T::kMathThreads);
        }
        fence_barrier_init();
    }
    // The peers' barriers must be initialised before our multicast (or split-K arrival) can signal them.
    if constexpr (T::kCluster > 1) cluster_sync(); else __syncthreads();
    // PDL (ptx/pdl.cuh): the prologue above overlaps the previous kernel's tail. Every role reads global memory from
    // here on (the schedulers' constructors read masked_m or the prefix sums), so all threads wait here.
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
    if (threadIdx.x >= T::kMathThreads)
        bf16_gemm_producer<T, Scheduler>(params);
    else
        bf16_gemm_math<T, Scheduler>(params);
    // No CTA may leave while its peer can still multicast into it, arrive on its barriers or read its partial.
    if constexpr (T::kCluster > 1) cluster_sync();
}

}  // namespace dgx
