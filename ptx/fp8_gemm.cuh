// FP8 GEMM with DeepSeek-V3 fine-grained scaling on Hopper: D[M, N] = A[M, K] . B[N, K]^T, where A carries one
// FP32 scale per row per 128 of K and B one per 128x128 block. Persistent and warp-specialised:
// - the producer warpgroup (fp8_gemm_producer.cuh) fills a ring of shared-memory stages with TMA;
// - one or two math warpgroups (fp8_gemm_math.cuh) run wgmma m64nNk32 (e4m3) per 128 of K into FP32
//   registers and promote each partial sum into a second FP32 set scaled by scale_a[row] * scale_b[block]
//   (the promotion keeps FP8 tensor-core accumulation error from building up over long K);
// - their epilogue (fp8_gemm_epilogue.cuh) stores the tile through swizzled shared memory with TMA while the
//   producer already loads the next tile.
// The weight gradient (kWgrad) scales B per row too and writes FP32 D = C + A . B^T with TMA reduce-adds, which
// the producer issues span by span during the next tile; its K-grouped layout runs each group over its own range
// of K. Split-K (decode shapes): the CTAs of a cluster share one tile's K and sum their partial tiles through
// distributed shared memory (reduce_split_tile). Compile-time configuration, and the feature flags that choose
// between measured variants (with their PERFLOG experiments): Fp8GemmTraits in fp8_gemm_traits.cuh.
#pragma once
#include "cluster.cuh"
#include "common.cuh"
#include "fp8_gemm_epilogue.cuh"
#include "fp8_gemm_math.cuh"
#include "fp8_gemm_producer.cuh"
#include "fp8_gemm_traits.cuh"
#include "mbarrier.cuh"
#include "pdl.cuh"
#include "scheduler.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace dgx {

// `tmap_sfa` covers the A scales in the M-major layout: a row of M floats per k-block (rows 16-byte
// aligned; masked: the groups' k-blocks one after another), loaded in boxes of BLOCK_M x 1; `tmap_sfb`
// the weight gradient's B scales likewise (N-major), or for BF16 one-slice tiles the B scales `sfb` as one
// row of floats from the 16-byte boundary at or below `sfb`, in 16-byte aligned boxes of 4 x 1. `m` is the
// number of rows (masked, K-grouped, batched: per group), `grouped_layout` m_indices, masked_m or the K-grouped
// groups' K, `d_ptr`/`ld_d` D for the stores done from the registers (partial masked blocks), `accumulate`
// whether the weight gradient adds to D (which holds C) instead of overwriting it, `group_maps` (K-grouped)
// the groups' maps of A and B, two per group, in global memory. `sfa`, `sfa_rows` and `sfa_stride` are what
// `tmap_sfa` maps (its base, floats per row, row stride in floats), for the A-scale warps' plain loads.
template <int kLayout, int kN, int kK, int kBlockM, int kBlockN, int kNumStages, int kGroupN, int kDSpan, int kPair,
          bool kWgrad, bool kDefer, int kSplit, bool kStreamB, int kHeadLeft = 0, int kHeadMid = 0, int kHeadRight = 0,
          typename Epi = NoFusedEpilogue, bool kRuntimeKRounds = false, bool kRuntimeStreamB = false, typename Params>
__device__ __forceinline__ void fp8_gemm_nt_body(const Params& params) {
    // `params` holds the kernel's parameters by name (dgx.kernels.fp8_gemm.INTERFACE lists them and renders the
    // struct); every role takes it whole.
    using T = Fp8GemmTraits<kN, kK, kBlockM, kBlockN, kNumStages, kGroupN, kDSpan, kPair, kWgrad, kDefer, kSplit,
                            kStreamB, kHeadLeft, kHeadMid, kHeadRight, Epi, kRuntimeKRounds, kRuntimeStreamB>;
    // (A fused SwiGLU epilogue walks units of two tiles; otherwise this is TileScheduler.)
    using Scheduler = typename Epi::template Scheduler<kLayout, kBlockM, kBlockN, T::kNumNBlocks, T::kNumKBlocks,
                                                       kGroupN, kPair, kN, kSplit>;
    static_assert(kLayout != kLayoutKGrouped || kWgrad, "the K-grouped layout is a weight gradient");
    static_assert(!T::kHeadSplits || kLayout == kLayoutDense, "head splits are for the dense layout");
    static_assert(kLayout != kLayoutBatched || (kPair == kPairNone && !kWgrad && !T::kHeadSplits),
                  "the batched layout's 3-D maps of A and D are loaded and stored whole by each CTA, in BF16");
    static_assert(!T::kRuntimeK || (!T::kHeadSplits && !Epi::kFused && kLayout != kLayoutBatched && kSplit == 1),
                  "K comes at run time for the BF16 GEMMs without head splits, fused epilogues or split-K only");
    static_assert(!T::kRuntimeN || (!T::kHeadSplits && !Epi::kFused && kLayout != kLayoutBatched),
                  "N comes at run time for GEMMs without head splits (whole heads) or fused epilogues only");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_d = smem;
    uint8_t* smem_a = smem_d + T::kSmemD;
    uint8_t* smem_b = smem_a + kNumStages * T::kSmemA;
    uint8_t* smem_sfa = smem_b + kNumStages * T::kSmemB;
    uint8_t* smem_sfb = smem_sfa + kNumStages * T::kSmemSfa;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem_sfb + kNumStages * T::kSmemSfbSlot);
    uint64_t* empty = full + kNumStages;
    uint64_t* tile_bars = empty + kNumStages;  // T::kTileBars (kSmemBytes has them)
    const Fp8GemmSmem buffers{smem_d, smem_a, smem_b, smem_sfa, smem_sfb, full, empty, tile_bars};

    const uint32_t warp = warp_id();
    const uint32_t lane = lane_id();

    if (warp == T::kProducerWarp && lane == 0) {
        prefetch_tensor_map(&params.tmap_a);
        prefetch_tensor_map(&params.tmap_b);
        prefetch_tensor_map(&params.tmap_sfa);
        prefetch_tensor_map(&params.tmap_d);
        if constexpr (kWgrad || T::kSfbInStage) prefetch_tensor_map(&params.tmap_sfb);
        for (int s = 0; s < kNumStages; ++s) {
            mbarrier_init(&full[s], T::kFullArrivals);
            mbarrier_init(&empty[s], T::kEmptyArrivals);
        }
        if constexpr (kSplit > 1) {
            // One arrival per math thread of every CTA of the cluster (each publishes its own accesses).
            mbarrier_init(&tile_bars[0], kSplit * T::kMathThreads);
            mbarrier_init(&tile_bars[1], kSplit * T::kMathThreads);
        }
        if constexpr (T::kStoreByProducer) {
            mbarrier_init(&tile_bars[0], T::kMathThreads);  // every math thread, after its part of the tile
            mbarrier_init(&tile_bars[1], 1);                // the producer thread, once its stores have read it
        }
        fence_barrier_init();
    }
    // The peers' barriers must be initialised before our multicast (or split-K arrival) can signal them.
    if constexpr (T::kCluster > 1) cluster_sync(); else __syncthreads();
    // PDL (ptx/pdl.cuh): the prologue above overlaps the previous kernel's tail. Every role reads or writes global
    // memory from here on (the schedulers' constructors read masked_m, the math warps B scales), so all threads
    // wait here; then dependents may launch, to run their own prologue on the SMs our CTAs leave.
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();

    // Each role builds its scheduler after its register reallocation: built before, its state stayed live across
    // setmaxnreg, and ptxas spilled it (PERFLOG exp. 35).
    if (threadIdx.x >= T::kMathThreads) {
        fp8_gemm_producer<T, Scheduler>(buffers, params, warp, lane);
    } else {
        if constexpr (T::kNumMathWG == 2) setmaxnreg_inc<T::kMathRegs>();
        Scheduler scheduler(params.m, params.grouped_layout, params.num_groups);
        if constexpr (T::kRuntimeN) scheduler.runtime_n = params.n;
        if constexpr (T::kRuntimeK) scheduler.runtime_k_blocks = (params.k + T::kBlockK - 1) / T::kBlockK;
        fp8_gemm_math<T, Scheduler>(scheduler, buffers, params, warp, lane);
    }
    // No CTA may leave while its peer can still multicast into it, arrive on its barriers or read its partial.
    if constexpr (T::kCluster > 1) cluster_sync();
}


}  // namespace dgx
