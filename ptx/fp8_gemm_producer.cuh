// The producer warpgroup of the FP8 GEMM kernel (ptx/fp8_gemm.cuh): one elected thread that fills the ring of
// stages with TMA (and writes the weight gradient's tiles out), and (kSfaTimesSfb) one warp per stage that stores
// the A scales times the B scale.
#pragma once
#include "common.cuh"
#include "fp8_gemm_epilogue.cuh"
#include "fp8_gemm_traits.cuh"
#include "mbarrier.cuh"
#include "scheduler.cuh"
#include "tma.cuh"

namespace dgx {

// One operand's tile of a k-block: one box; or, for the operand a pair shares, this CTA's half multicast to
// both CTAs (kWhole: rank 0's whole tile, T::kWholeB); or, where a pair does not share this unit, both halves
// loaded here. The stage receives the same bytes either way. kHint: with L2 cache policy `policy`.
template <typename T, bool kWhole = false, bool kHint = false, typename Scheduler>
DGX_DEVICE void load_operand(const Scheduler& scheduler, const TensorMap* map, uint64_t* full, uint8_t* dst, int k0,
                             int row, int half_rows, bool paired, bool share, uint64_t policy = 0) {
    if (!paired || (kWhole && !share)) {
        tma_load_2d<kHint>(map, full, dst, k0, row, policy);
    } else if (kWhole) {
        if (scheduler.rank == 0) tma_load_2d_multicast<kHint>(map, full, dst, k0, row, 0x3, policy);
    } else if (share) {
        const int half = scheduler.rank * half_rows;
        tma_load_2d_multicast<kHint>(map, full, dst + half * T::kBlockK, k0, row + half, 0x3, policy);
    } else {
        tma_load_2d<kHint>(map, full, dst, k0, row, policy);
        tma_load_2d<kHint>(map, full, dst + half_rows * T::kBlockK, k0, row + half_rows, policy);
    }
}

// An A-scale warp of kSfaTimesSfb, for stage `stage` of the ring: in each round of every tile, the k-block's
// BLOCK_M A scales times the tile's B scale into the stage's A-scale slot, then its lanes' arrivals on the full
// barrier (also for a stage the tile's last round leaves unused). With one warp per stage a round's loads are
// issued a whole ring ahead of the stage; staging them further ahead was slower (PERFLOG exp. 35, 36).
// `sfa`, `sfa_rows` and `sfa_stride` are what `tmap_sfa` maps: its base, floats per row, row stride in floats.
template <typename T, typename Scheduler>
DGX_DEVICE void sfa_times_sfb(Scheduler& scheduler, const Fp8GemmSmem& smem, uint32_t stage,
                              const float* __restrict__ sfa, int sfa_rows, int sfa_stride,
                              const float* __restrict__ sfb, uint32_t lane) {
    static_assert(T::kBlockM % 128 == 0 && T::kSingleSfb, "a lane takes 4 rows of every 128; one B scale per tile");
    constexpr int kRuns = T::kBlockM / 128;
    // Round-robin over the rounds' k-blocks, unused ones included.
    static_assert(T::kSplit == 1, "the products use k-block kb's B scale from the tile's k-block 0");
    constexpr int kRoundBlocks = (T::kNumKBlocks + T::kNumStages - 1) / T::kNumStages * T::kNumStages;
    const uint32_t slot = smem_addr(smem.sfa) + stage * T::kSmemSfa + lane * 16;
    uint32_t phase = 0;
    Tile tile;
    while (scheduler.next_tile(tile)) {
        const int n = scheduler.shape_n();
        const float* sfb_tile = sfb + T::sfb_index(tile.group, T::sfb_rows(tile.n_block * T::kBlockN, n).lo, n);
        // This lane's rows: 4 from `first` in each run of 128. 16-byte aligned: the scales' base and row stride
        // are (TMA layout), and tiles start at multiples of 128 rows.
        const int first = tile.sfa_row + static_cast<int>(lane) * 4;
        const float* sfa_tile = sfa + static_cast<int64_t>(tile.sfa_kb0 + tile.kb0) * sfa_stride + first;
        for (int kb = static_cast<int>(stage); kb < kRoundBlocks; kb += T::kNumStages) {
            const bool used = kb < T::kNumKBlocks;
            // The products are formed before the wait, so that once the stage is free only the stores remain.
            F32x4 p[kRuns];
            if (used) {
                const float* src = sfa_tile + static_cast<int64_t>(kb) * sfa_stride;
                const float sb = ld_global_nc(sfb_tile + kb);
#pragma unroll
                for (int r = 0; r < kRuns; ++r) {
                    const int valid = min(max(sfa_rows - first - r * 128, 0), 4);
                    F32x4 v{0.0f, 0.0f, 0.0f, 0.0f};  // rows past the last: zeros, as TMA fills them
                    if (valid == 4) {
                        v = ld_global_nc_f32x4(src + r * 128);
                    } else {
                        if (valid > 0) v.x = ld_global_nc(src + r * 128 + 0);
                        if (valid > 1) v.y = ld_global_nc(src + r * 128 + 1);
                        if (valid > 2) v.z = ld_global_nc(src + r * 128 + 2);
                    }
                    p[r] = F32x4{v.x * sb, v.y * sb, v.z * sb, v.w * sb};
                }
            }
            mbarrier_wait<true>(&smem.empty[stage], phase ^ 1);
            phase ^= 1;
            if (used) {
#pragma unroll
                for (int r = 0; r < kRuns; ++r) st_shared_v4_f32(slot + r * 512, p[r]);
            }
            mbarrier_arrive(&smem.full[stage]);  // every lane, each after its own stores
        }
    }
}

// T::kStoreByProducer: the producer thread's part in writing the weight gradient's tiles out. Each tile staged
// by the math warps (smem.tile_bars[0]) is stored span by span during the next tile's loads: the first once the
// math warps have started that tile, the rest evenly over its k-blocks, so that the CTAs' reduce-adds (each reads
// C in the L2) spread over a tile's time. (One span every 3, 4, 6 or 7 k-blocks ran alike; every k-block was
// 3-5% slower, every second up to 3.5%.) Once the stores have read the staged tile, smem.tile_bars[1] lets the
// math warps stage the next one.
template <typename T, bool kOn = T::kStoreByProducer>
struct TileStores {
    const Fp8GemmSmem& smem;
    const TensorMap& tmap_d;
    bool accumulate;
    TileOut out{};         // the place in D of the tile the math warps stage next, or have staged
    bool pending = false;  // whether there is such a tile (none before the first tile's loads end)
    int next = 0;          // its next span to store
    int every = 1;         // k-blocks of the tile being loaded between two spans
    uint32_t staged = 0;   // tiles stored before it (the parity of both barriers)

    // Before a tile's loads: how far apart its k-blocks take the spans.
    DGX_DEVICE void before_tile(int num_kb) { every = max(1, (num_kb - T::kNumStages) / T::kStoreSpans); }

    // After k-block `kb` of the tile has been loaded: a span of the staged tile, if one is due. `n`: N (the
    // scheduler's shape_n: a constant unless N comes at run time), past which spans are not stored.
    DGX_DEVICE void after_load(int kb, int n = T::kN) {
        if (pending && next < T::kStoreSpans && kb >= T::kNumStages + next * every) issue_next(n);
    }

    DGX_DEVICE void issue_next(int n) {
        // Loading k-block kNumStages of a tile waited for its first k-block's stage, so the math warps have
        // staged the tile before it: this wait returns at once unless the tile is shorter.
        if (next == 0) mbarrier_wait(&smem.tile_bars[0], staged & 1);
        constexpr int kWGSpans = T::kStoreSpans / T::kNumMathWG;  // spans of one warpgroup's slice
        store_span<T>(tmap_d, smem.d, out, next / kWGSpans, next % kWGSpans, accumulate, n);
        tma_store_commit();
        ++next;
    }

    // At the end of a tile's loads: the rest of the staged tile's spans, and once they have read it, the staged
    // tile handed back; then `tile`'s place is kept for its stores. The math warps stage `tile` only after they
    // have had the stages this tile's loads wait for, so the hand-back comes before any later wait of ours.
    DGX_DEVICE void after_tile(const TileOut& tile, int n = T::kN) {
        if (pending) {
            while (next < T::kStoreSpans) issue_next(n);
            tma_store_wait_read();
            mbarrier_arrive(&smem.tile_bars[1]);
            ++staged;
        }
        out = tile;
        pending = true;
        next = 0;
    }

    // After the last tile's loads: its spans, complete before the CTA leaves.
    DGX_DEVICE void finish(int n = T::kN) {
        if (pending)
            while (next < T::kStoreSpans) issue_next(n);
        tma_store_wait_all();
    }
};

// Kernels whose math warps store their tiles themselves hold nothing. (Built from its arguments, or with its
// calls left in, even the empty type changed their SASS.)
template <typename T>
struct TileStores<T, false> {};

// kRuntimeStreamB: B's L2 policy as the parameter `stream_b` says: evict-first, or 0 for loads with no hint at all.
// (An evict_normal policy in place of no hint was not neutral: up to 1.4x slower on dense tiles, PERFLOG
// 2026-11-27 third session. Other kernels keep their expression in the producer: through this function it moved
// their SASS.)
template <typename T, typename Params>
DGX_DEVICE uint64_t runtime_b_policy(const Params& params) {
    if constexpr (T::kRuntimeStreamB)
        return params.stream_b ? l2_evict_first_policy() : 0;
    else
        return 0;
}

// The producer warpgroup. One elected thread of its first warp issues every TMA load: for each k-block of each
// tile it waits for the next stage of the ring to be handed back and loads A, B and the scales that travel with
// the stage into it; with T::kStoreByProducer it also issues the weight gradient's stores (TileStores). The ring
// runs on across tiles, but lean-round tiles start at stage 0. With kSfaTimesSfb the next kNumStages warps run
// sfa_times_sfb. The scheduler is built after the register reallocation: built
// before, its state stayed live across setmaxnreg and ptxas spilled it (PERFLOG exp. 35). (The TMA loop stays in
// the function that builds the scheduler: moved into a function of its own, it changed the SASS.)
// `params` (ptx/fp8_gemm.cuh says what each member is): `tmap_sfb` maps the weight gradient's per-column B scales,
// or for kSfbInStage the B scales `sfb` seen as one row of floats from the 16-byte boundary at or below `sfb`;
// `group_maps` (K-grouped) each group's maps of A and B, made on the host, since each group's A_g [M, k_g] and
// B_g [N, k_g] has its own row stride.
template <typename T, typename Scheduler, typename Params>
DGX_DEVICE void fp8_gemm_producer(const Fp8GemmSmem& smem, const Params& params, uint32_t warp, uint32_t lane) {
    constexpr bool kKGrouped = Scheduler::kLayout == kLayoutKGrouped;
    const TensorMap& tmap_a = params.tmap_a;
    const TensorMap& tmap_b = params.tmap_b;
    const TensorMap& tmap_sfa = params.tmap_sfa;
    const TensorMap& tmap_sfb = params.tmap_sfb;
    const float* __restrict__ sfb = params.sfb;
    const TensorMap* group_maps = params.group_maps;
    Tile tile;
    if constexpr (T::kNumMathWG == 2) setmaxnreg_dec<T::kProducerRegs>();
    Scheduler scheduler(params.m, params.grouped_layout, params.num_groups);
    if constexpr (T::kRuntimeN) scheduler.runtime_n = params.n;
    if constexpr (T::kRuntimeK) scheduler.runtime_k_blocks = (params.k + T::kBlockK - 1) / T::kBlockK;
    if (warp == T::kProducerWarp && elect_one()) {
        uint32_t it = 0;  // k-blocks loaded so far
        const uint64_t b_policy =
            T::kRuntimeStreamB ? runtime_b_policy<T>(params) : T::kStreamB ? l2_evict_first_policy() : 0;
        auto stores = [&] {  // (built only where used)
            if constexpr (T::kStoreByProducer)
                return TileStores<T>{smem, params.tmap_d, params.accumulate != 0};
            else
                return TileStores<T>{};
        }();
        while (scheduler.next_tile(tile)) {
            const int num_kb = kKGrouped || T::kRuntimeK ? tile.num_kb : T::kTileKBlocks;
            const TensorMap* map_a = kKGrouped ? group_maps + 2 * tile.group : &tmap_a;
            const TensorMap* map_b = kKGrouped ? group_maps + 2 * tile.group + 1 : &tmap_b;
            const int k_first = kKGrouped ? 0 : tile.kb0;  // K restarts at 0 in each group's maps
            if constexpr (T::kStoreByProducer) stores.before_tile(num_kb);
            // B scales in the stage: the element of `tmap_sfb` that starts the tile's row of its first block, and
            // how far on lies the row of the block the tile ends in (0 when both are one).
            int sfb_lo = 0, sfb_hi_offset = 0;
            if constexpr (T::kSfbInStage) {
                const auto [row0, row1] = T::sfb_rows(tile.n_block * T::kBlockN, scheduler.shape_n());
                const int lead = static_cast<int>(reinterpret_cast<uint64_t>(sfb) % 16 / 4);
                sfb_lo = lead + T::sfb_index(tile.group, row0, scheduler.shape_n(), scheduler.num_k_blocks()) +
                         (T::kSplit > 1 ? tile.kb0 : 0);
                sfb_hi_offset = (row1 - row0) * (T::kRuntimeK ? scheduler.num_k_blocks() : T::kNumKBlocks);
            }
            for (int kb = 0; kb < num_kb; ++kb, ++it) {
                const uint32_t s = it % T::kNumStages;
                const uint32_t phase = (it / T::kNumStages) & 1;
                mbarrier_wait<T::kLean>(&smem.empty[s], phase ^ 1);
                // Out-of-bounds parts of a box are zero-filled and still counted in the bytes.
                mbarrier_arrive_expect_tx(&smem.full[s], T::kStageBytes);
                const int k0 = (k_first + kb) * T::kBlockK;
                if constexpr (Scheduler::kLayout == kLayoutBatched)  // A [rows, groups, K] (no pairs)
                    tma_load_3d(map_a, &smem.full[s], smem.a + s * T::kSmemA, k0, tile.group, tile.a_row);
                else
                    load_operand<T>(scheduler, map_a, &smem.full[s], smem.a + s * T::kSmemA, k0, tile.a_row,
                                    T::kHalfRowsA, T::kPair == kPairN, tile.share);
                if constexpr (T::kRuntimeStreamB) {  // a hinted load only where the policy says evict-first
                    if (b_policy != 0)
                        load_operand<T, T::kWholeB, true>(scheduler, map_b, &smem.full[s], smem.b + s * T::kSmemB,
                                                          k0, tile.b_row, T::kHalfRowsB, T::kPair == kPairM,
                                                          tile.share, b_policy);
                    else
                        load_operand<T, T::kWholeB>(scheduler, map_b, &smem.full[s], smem.b + s * T::kSmemB, k0,
                                                    tile.b_row, T::kHalfRowsB, T::kPair == kPairM, tile.share);
                } else {
                    load_operand<T, T::kWholeB, T::kStreamB>(
                        scheduler, map_b, &smem.full[s], smem.b + s * T::kSmemB, k0, tile.b_row, T::kHalfRowsB,
                        T::kPair == kPairM, tile.share, b_policy);
                }
                // A scales are per row, so each CTA of a pair loads its own (never multicast).
                if constexpr (!T::kSfaTimesSfb)
                    tma_load_2d(&tmap_sfa, &smem.full[s], smem.sfa + s * T::kSmemSfa, tile.sfa_row,
                                tile.sfa_kb0 + tile.kb0 + kb);
                if constexpr (T::kWgrad)
                    tma_load_2d(&tmap_sfb, &smem.full[s], smem.sfb + s * T::kSmemSfbSlot, tile.n_block * T::kBlockN,
                                tile.kb0 + kb);
                if constexpr (T::kSfbInStage) {
                    // The 16-byte aligned box holding each scale (an unaligned box start faults; PERFLOG exp. 29).
                    uint8_t* slot = smem.sfb + s * T::kSmemSfbSlot;
                    tma_load_2d(&tmap_sfb, &smem.full[s], slot, (sfb_lo + kb) & ~3, 0);
                    if constexpr (!T::kSingleSfb)
                        tma_load_2d(&tmap_sfb, &smem.full[s], slot + 128, (sfb_lo + kb + sfb_hi_offset) & ~3, 0);
                }
                if constexpr (T::kStoreByProducer) stores.after_load(kb, scheduler.shape_n());
            }
            if constexpr (T::kStoreByProducer)
                stores.after_tile(TileOut{tile.d_row, tile.d_row_end, tile.n_block * T::kBlockN}, scheduler.shape_n());
            // Lean rounds start every tile at stage 0: the stages this tile's last round leaves unused are
            // completed with a bare arrival (no bytes) once the math warps have handed them back.
            if constexpr (T::kLeanRounds) {
                for (int unused = 0; unused < T::kUnusedStages; ++unused, ++it) {
                    const uint32_t s = it % T::kNumStages;
                    mbarrier_wait<true>(&smem.empty[s], ((it / T::kNumStages) & 1) ^ 1);
                    mbarrier_arrive(&smem.full[s]);
                }
            }
        }
        if constexpr (T::kStoreByProducer) stores.finish(scheduler.shape_n());
    } else if (warp > T::kProducerWarp && warp <= T::kProducerWarp + T::kNumStages) {
        if constexpr (T::kSfaTimesSfb)
            sfa_times_sfb<T, Scheduler>(scheduler, smem, warp - T::kProducerWarp - 1, params.sfa, params.sfa_rows,
                                        params.sfa_stride, sfb, lane);
    }
    __syncwarp();
}

}  // namespace dgx
