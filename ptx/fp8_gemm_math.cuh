// The math warpgroups of the FP8 GEMM kernel (ptx/fp8_gemm.cuh): per k-block, wgmma into FP32 accumulators, then
// the promotion result += accum * scale_a[row] * scale_b[block or column]; per tile, the epilogue.
//
// Fp8GemmMath holds a math thread's state; its k-loop comes in four variants, chosen at compile time:
// - k_loop_ring: the plain ring of stages, which runs on across tiles;
// - k_loop_rounds: stage rounds, where every tile starts at stage 0 (T::kRounds, T::kLeanRounds);
// - k_loop_rounds_in_ring: stage rounds inside the plain ring, where a tile's k-blocks do not fill whole rounds
//   (T::kRoundsInRing);
// - k_loop_deferred: deferred promotion, in straight-line chunks (T::kDefer).
// The first three run k_block, in its plain or lean (T::kLean) form; the last runs issue and retire.
#pragma once
#include "common.cuh"
#include "fp8_gemm_epilogue.cuh"
#include "fp8_gemm_traits.cuh"
#include "mbarrier.cuh"
#include "scheduler.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace dgx {

// B scales of one k-block for the (at most two) 128-column blocks a tile touches.
struct SfbPair {
    float lo, hi;
};

template <typename T, typename Scheduler>
struct Fp8GemmKLoop {
    // References to the math thread's state in fp8_gemm_math, one set per tile, as lambdas would capture them
    // (a struct that held the state itself compiled to different SASS).
    uint8_t* const& smem_a;
    uint8_t* const& smem_b;
    uint8_t* const& smem_sfb;
    uint64_t* const& full;
    uint64_t* const& empty;
    const uint32_t& lane;
    const uint32_t& wg;
    const uint64_t& desc_a0;  // this warpgroup's rows of stage 0's A
    const uint64_t& desc_b0;
    const uint32_t (&sfa_offset)[T::kMmaPerWG][2];  // byte offsets of this thread's A-scale rows in a stage's slot
    const uint32_t& sfa_base;
    const uint32_t& sfb_base;  // the weight gradient's per-column B scales of stage 0, at this thread's columns
    float (&accum)[T::kAccum];
    float (&result)[T::kMmaPerWG][T::kAccum];
    float (&accum2)[2][T::kAccum];
    float (&scale2)[2][4];
    uint32_t (&stage2)[2];
    uint32_t& it;
    uint32_t& stage;
    uint32_t& phase;
    bool& ready;
    const int& num_kb;
    const int& boundary;
    const float* const& sfb0;
    const float* const& sfb1;
    const uint32_t& sfb_spot_lo;
    const uint32_t& sfb_spot_hi;

    DGX_DEVICE void run() {
        if constexpr (T::kSingleSfb || T::kWgrad) {
            k_loop<T::kBlockN / 8>();
        } else if constexpr (128 / T::kGcd128 <= 4) {
            // `boundary` takes 128 / gcd(BLOCK_N, 128) values; with few of them the k-loop is compiled for
            // each (a select per column group otherwise: up to 25% slower, PERFLOG exp. 6).
            constexpr int kGap = T::kGcd128 / 8;
            dispatch_int<kGap, kGap, 16>(min(boundary, T::kBlockN) / 8,
                                         [&](auto former) { k_loop<decltype(former)::value>(); });
        } else {
            k_loop<-1>();
        }
    }

    // kFormer: how many 8-column groups of the tile use B-scale block lo (the rest hi), where known at compile
    // time; -1: compare with `boundary` at run time.
    template <int kFormer>
    DGX_DEVICE void k_loop() {
        if constexpr (T::kDefer)
            k_loop_deferred<kFormer>();
        else if constexpr (T::kRounds || T::kLeanRounds)
            k_loop_rounds<kFormer>();
        else if constexpr (T::kRoundsInRing)
            k_loop_rounds_in_ring<kFormer>();
        else
            k_loop_ring<kFormer>();
    }

    // ---- Scales, release, MMAs.

    // B scales not in the stage come from global memory (L1-resident: a line holds 32 k-blocks), loaded one
    // k-block ahead so their latency does not sit between the MMAs and the promotion.
    DGX_DEVICE SfbPair load_sfb(int kb) const {
        if constexpr (T::kWgrad) {
            return SfbPair{1.0f, 1.0f};  // per-column scales come from the stage instead
        } else {
            const float lo = ld_global_nc(sfb0 + kb);
            return SfbPair{lo, T::kSingleSfb ? lo : ld_global_nc(sfb1 + kb)};
        }
    }

    // B scales in the stage: each block's scale picked out of its 16-byte box (k-block kb's: kb further, mod 4).
    DGX_DEVICE SfbPair stage_sfb(int kb, uint32_t s) const {
        const uint32_t slot = smem_addr(smem_sfb) + s * T::kSmemSfbSlot;
        const uint32_t lo = slot + (sfb_spot_lo + kb) % 4 * 4;
        SfbPair b;
        b.lo = ld_shared_f32(lo);
        if constexpr (T::kSingleSfb)
            b.hi = b.lo;
        else  // the two blocks' rows lie a multiple of 16 bytes apart when K % 512 == 0
            b.hi = ld_shared_f32(!T::kRuntimeK && T::kNumKBlocks % 4 == 0 ? lo + 128
                                                                          : slot + 128 + (sfb_spot_hi + kb) % 4 * 4);
        return b;
    }

    // The A scales of this thread's rows in stage s (every read of a stage comes before it is handed back).
    DGX_DEVICE void load_sa(float (&sa)[T::kMmaPerWG][2], uint32_t s) const {
#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
            for (int h = 0; h < 2; ++h) sa[mm][h] = ld_shared_f32(sfa_base + s * T::kSmemSfa + sfa_offset[mm][h]);
    }

    // Hands stage s back (T::kEmptyArrivals): lane 0 of each warp, or each lane (kSfaTimesSfb); in a pair on both
    // CTAs' barriers (lane r on rank r's, or each lane on both).
    DGX_DEVICE void release(uint32_t s) const {
        if constexpr (T::kPeers == 1) {
            if (T::kSfaTimesSfb || lane == 0) mbarrier_arrive(&empty[s]);
        } else if constexpr (T::kSfaTimesSfb) {
#pragma unroll
            for (uint32_t rank = 0; rank < T::kPeers; ++rank) mbarrier_arrive_cluster(&empty[s], rank);
        } else {
            if (lane < T::kPeers) mbarrier_arrive_cluster(&empty[s], lane);
        }
    }

    // res += acc * scale: scale[0], scale[1] (rows row and row + 8) for the columns of block lo, scale[2],
    // scale[3] for those of block hi.
    template <int kFormer>
    DGX_DEVICE void promote(float (&res)[T::kAccum], const float (&acc)[T::kAccum], const float (&scale)[4]) const {
#pragma unroll
        for (int i = 0; i < T::kBlockN / 8; ++i) {
            const bool first = T::kSingleSfb || (kFormer >= 0 ? i < kFormer : i * 8 < boundary);
            const float lo = first ? scale[0] : scale[2];
            const float hi = first ? scale[1] : scale[3];
            res[i * 4 + 0] = fmaf(acc[i * 4 + 0], lo, res[i * 4 + 0]);
            res[i * 4 + 1] = fmaf(acc[i * 4 + 1], lo, res[i * 4 + 1]);
            res[i * 4 + 2] = fmaf(acc[i * 4 + 2], hi, res[i * 4 + 2]);
            res[i * 4 + 3] = fmaf(acc[i * 4 + 3], hi, res[i * 4 + 3]);
        }
    }

    // Weight gradient: res += acc * scale_a[row] * scale_b[col] (scale[0], scale[1]: rows row and row + 8), the
    // column scales read from stage s (two adjacent columns per load).
    DGX_DEVICE void promote_columns(float (&res)[T::kAccum], const float (&acc)[T::kAccum], const float (&scale)[4],
                                    uint32_t s) const {
        const uint32_t sfb_stage = sfb_base + s * T::kSmemSfbSlot;
#pragma unroll
        for (int i = 0; i < T::kBlockN / 8; ++i) {
            const F32x2 col = ld_shared_f32x2(sfb_stage + i * 32);
            res[i * 4 + 0] = fmaf(acc[i * 4 + 0], scale[0] * col.x, res[i * 4 + 0]);
            res[i * 4 + 1] = fmaf(acc[i * 4 + 1], scale[0] * col.y, res[i * 4 + 1]);
            res[i * 4 + 2] = fmaf(acc[i * 4 + 2], scale[1] * col.x, res[i * 4 + 2]);
            res[i * 4 + 3] = fmaf(acc[i * 4 + 3], scale[1] * col.y, res[i * 4 + 3]);
        }
    }

    // The plain one-slice weight-gradient k-block takes its column scales into registers while its MMAs run
    // (kColsEarly) and hands the stage back as soon as the MMAs are done: read during the promotion, the loads'
    // latency followed the MMA wait and the stage stayed taken until the promotion ended (PERFLOG 2026-11-24,
    // the weight-gradient gap read from the SASS). The deferred k-block keeps reading them in its promotion,
    // where the other set's MMAs hide the loads (it has no registers for them).
    static constexpr bool kColsEarly = T::kWgrad && T::kMmaPerWG == 1;
    static constexpr int kNumCols = kColsEarly ? T::kBlockN / 8 : 1;

    DGX_DEVICE void load_columns(F32x2 (&cols)[kNumCols], uint32_t s) const {
        const uint32_t sfb_stage = sfb_base + s * T::kSmemSfbSlot;
#pragma unroll
        for (int i = 0; i < kNumCols; ++i) cols[i] = ld_shared_f32x2(sfb_stage + i * 32);
    }

    // promote_columns with the column scales already in registers.
    DGX_DEVICE void promote_columns(float (&res)[T::kAccum], const float (&acc)[T::kAccum], const float (&scale)[4],
                                    const F32x2 (&cols)[kNumCols]) const {
#pragma unroll
        for (int i = 0; i < kNumCols; ++i) {
            res[i * 4 + 0] = fmaf(acc[i * 4 + 0], scale[0] * cols[i].x, res[i * 4 + 0]);
            res[i * 4 + 1] = fmaf(acc[i * 4 + 1], scale[0] * cols[i].y, res[i * 4 + 1]);
            res[i * 4 + 2] = fmaf(acc[i * 4 + 2], scale[1] * cols[i].x, res[i * 4 + 2]);
            res[i * 4 + 3] = fmaf(acc[i * 4 + 3], scale[1] * cols[i].y, res[i * 4 + 3]);
        }
    }

    // One m64 slice's four k32 MMAs of a k-block into `acc`, committed as one group.
    DGX_DEVICE void mma_slice(float (&acc)[T::kAccum], uint64_t desc_a, uint64_t desc_b) {
#pragma unroll
        for (int i = 0; i < T::kAccum; ++i) fence_operand(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < T::kBlockK / 32; ++j)
            WgmmaE4M3<T::kBlockN>::mma(advance_desc(desc_a, j * 32), advance_desc(desc_b, j * 32), acc, j > 0);
        wgmma_commit();
    }

    // ---- The k-block (plain ring, lean, and stage rounds of either).

    // The plain ring's next slot: its stage, and the parity its full barrier completes with.
    DGX_DEVICE uint32_t next_slot(uint32_t& parity) {
        const uint32_t slot = it % T::kNumStages;
        parity = (it / T::kNumStages) & 1;
        ++it;
        return slot;
    }

    // Plain k-block: waits for the next stage (kFixed: stage kFixed of a round, else the ring's next slot),
    // prefetching the next k-block's B scales first where they do not travel with the stage.
    template <int kFixed>
    DGX_DEVICE uint32_t wait_plain(int kb, SfbPair& sb_next) {
        uint32_t s, parity;
        if constexpr (kFixed >= 0) {
            s = kFixed;
            parity = phase;
        } else {
            s = next_slot(parity);
        }
        if constexpr (!T::kSfbInStage) sb_next = load_sfb(kb + 1 < num_kb ? kb + 1 : kb);
        mbarrier_wait(&full[s], parity);
        return s;
    }

    // Lean k-block: the wait is skipped when the previous k-block's probe found the stage full already.
    template <int kFixed>
    DGX_DEVICE uint32_t wait_lean(int kb, SfbPair& sb_next) {
        if constexpr (kFixed >= 0) {
            if (!ready) mbarrier_wait<true>(&full[kFixed], phase);
            if constexpr (kFixed == T::kNumStages - 1) phase ^= 1;
            return kFixed;
        } else {
            if (!ready) mbarrier_wait<true>(&full[stage], phase);
            const uint32_t s = stage;
            if (++stage == T::kNumStages) {
                stage = 0;
                phase ^= 1;
            }
            return s;
        }
    }

    // One k-block: wait for its stage, then per m64 slice of this warpgroup's rows: four k32 MMAs into the one
    // accumulator set, wait, promote into the slice's result. While one warpgroup promotes, the other's MMAs keep
    // the tensor cores busy, and a 256-row tile needs one accumulator set, not two. `sb`: this k-block's B scales
    // (prefetched, or in rounds loaded by the caller; unused when they are in the stage); `sb_next`: receives the
    // next k-block's where this k-block prefetches them.
    template <int kFormer, int kFixed>
    DGX_DEVICE void k_block(int kb, const SfbPair& sb, SfbPair& sb_next) {
        float sa[T::kMmaPerWG][2];
        uint32_t s;
        uint64_t desc_a, desc_b;
        if constexpr (T::kLean) {
            s = wait_lean<kFixed>(kb, sb_next);
            if constexpr (kFixed < 0) sb_next = load_sfb(kb + 1 < num_kb ? kb + 1 : kb);
            // Shared-memory addresses stay below 256 KB, so the 14-bit start-address field never carries.
            desc_a = desc_a0 + s * (T::kSmemA >> 4);
            desc_b = desc_b0 + s * (T::kSmemB >> 4);
        } else {
            s = wait_plain<kFixed>(kb, sb_next);
            load_sa(sa, s);
            if constexpr (kFixed >= 0) {
                desc_a = desc_a0 + s * (T::kSmemA >> 4);
                desc_b = desc_b0 + s * (T::kSmemB >> 4);
            } else {
                desc_b = make_smem_desc_sw128(smem_b + s * T::kSmemB);
                desc_a = make_smem_desc_sw128(smem_a + s * T::kSmemA + wg * T::kWGRows * T::kBlockK);
            }
        }
        float scale[T::kMmaPerWG][4];
        F32x2 cols[kNumCols];
#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
            mma_slice(accum, advance_desc(desc_a, mm * 64 * T::kBlockK), desc_b);
            if (mm == 0) {
                // The scale products are formed while the first MMAs run. B scales in the stage are read only
                // now: read with the A scales, they stay live across the descriptor setup and the round loop
                // of 128x160 spills.
                if constexpr (T::kLean) load_sa(sa, s);
                if constexpr (kColsEarly) load_columns(cols, s);
                SfbPair b = sb;
                if constexpr (T::kSfbInStage) b = stage_sfb(kb, s);
#pragma unroll
                for (int m2 = 0; m2 < T::kMmaPerWG; ++m2) {
                    scale[m2][0] = sa[m2][0] * b.lo;
                    scale[m2][1] = sa[m2][1] * b.lo;
                    scale[m2][2] = sa[m2][0] * b.hi;
                    scale[m2][3] = sa[m2][1] * b.hi;
                }
            }
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) fence_operand(accum[i]);
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) fence_operand(accum[i]);

            if constexpr (kColsEarly) {
                // The MMAs are done and the column scales are in registers: the stage is read.
                release(s);
                promote_columns(result[mm], accum, scale[mm], cols);
            } else if constexpr (T::kWgrad) {
                // The column scales come from the stage, so it is handed back only after the last slice.
                promote_columns(result[mm], accum, scale[mm], s);
                if (mm == T::kMmaPerWG - 1) release(s);
            } else {
                // After the last slice's MMAs the stage is read: hand it back, then promote. The lean k-block
                // probes the next stage's full barrier here, so the answer is back when it is needed.
                if (mm == T::kMmaPerWG - 1) {
                    release(s);
                    if constexpr (T::kLean)
                        ready = mbarrier_test_wait(&full[kFixed >= 0 ? (kFixed + 1) % T::kNumStages : stage],
                                                   phase);
                }
                promote<kFormer>(result[mm], accum, scale[mm]);
            }
        }
    }

    // Plain ring: unrolled by two so the prefetched B scales ping-pong between two register pairs without moves
    // (a move would wait for the load and put its latency back on the chain).
    template <int kFormer>
    DGX_DEVICE void k_loop_ring() {
        SfbPair sb_even{}, sb_odd{};
        if constexpr (!T::kSfbInStage) sb_even = load_sfb(0);
#pragma unroll 1
        for (int kb = 0; kb + 1 < num_kb; kb += 2) {
            k_block<kFormer, -1>(kb, sb_even, sb_odd);
            k_block<kFormer, -1>(kb + 1, sb_odd, sb_even);
        }
        if (num_kb % 2 == 1) k_block<kFormer, -1>(num_kb - 1, sb_even, sb_odd);
    }

    // Tiles that do not start at stage 0 (K-grouped groups' run-time k-block counts, or a compile-time count that
    // is not a whole number of rounds): ring k-blocks up to the ring's stage 0, whole stage rounds, then ring
    // k-blocks for the rest. `it` counts k-blocks for both: a round's parity is that of the ring there.
    template <int kFormer>
    DGX_DEVICE void k_loop_rounds_in_ring() {
        SfbPair one = load_sfb(0), next{};
        int kb = 0;
#pragma unroll 1
        for (; kb < num_kb && it % T::kNumStages != 0; ++kb) k_block<kFormer, -1>(kb, one, next);
        phase = (it / T::kNumStages) & 1;
#pragma unroll 1
        for (; kb + T::kNumStages <= num_kb; kb += T::kNumStages) {
            static_for<0, T::kNumStages>([&](auto j) { round_block<kFormer, decltype(j)::value>(kb + decltype(j)::value); });
            phase ^= 1;
            it += T::kNumStages;
        }
#pragma unroll 1
        for (; kb < num_kb; ++kb) k_block<kFormer, -1>(kb, one, next);
    }

    // A k-block of a stage round, in stage kJ. Its B scales come with the stage, or are in the A scales already
    // (kSfaTimesSfb), or (lean) are loaded here: the first MMAs hide the load.
    template <int kFormer, int kJ>
    DGX_DEVICE void round_block(int kb) {
        SfbPair unused{};
        if constexpr (T::kSfbInStage)
            k_block<kFormer, kJ>(kb, unused, unused);
        else if constexpr (T::kSfaTimesSfb)
            k_block<kFormer, kJ>(kb, SfbPair{1.0f, 1.0f}, unused);
        else
            k_block<kFormer, kJ>(kb, load_sfb(kb), unused);
    }

    // A stage the tile's last round leaves unused (lean rounds): the producer completes it with no data; wait
    // for it and hand it back.
    template <int kJ>
    DGX_DEVICE void skip_unused_stage() {
        if (!ready) mbarrier_wait<true>(&full[kJ], phase);
        release(kJ);
        ready = kJ + 1 < T::kNumStages && mbarrier_test_wait(&full[kJ + 1], phase);
        if constexpr (kJ == T::kNumStages - 1) phase ^= 1;
    }

    // Stage rounds: every tile starts at stage 0, so stages, barriers and descriptors are compile-time
    // constants. Whole rounds, the tail copied (a run-time check per k-block was slower, PERFLOG exp. 31), then
    // the unused stages.
    template <int kFormer>
    DGX_DEVICE void k_loop_rounds() {
        // (K at run time: whole rounds only, GemmConfig.stage_rounds.)
        constexpr int kTail = T::kRuntimeK ? 0 : T::kTileKBlocks % T::kNumStages;
        const int tile_k_blocks = T::kRuntimeK ? num_kb : T::kTileKBlocks;
        int kb = 0;
#pragma unroll 1
        for (; kb + T::kNumStages <= tile_k_blocks; kb += T::kNumStages) {
            static_for<0, T::kNumStages>([&](auto j) { round_block<kFormer, decltype(j)::value>(kb + decltype(j)::value); });
            if constexpr (!T::kLean) phase ^= 1;  // the lean k-block flips it before probing the next stage
        }
        static_for<0, kTail>([&](auto j) { round_block<kFormer, decltype(j)::value>(kb + decltype(j)::value); });
        static_for<kTail == 0 ? T::kNumStages : kTail, T::kNumStages>(
            [&](auto j) { skip_unused_stage<decltype(j)::value>(); });
    }

    // ---- Deferred promotion.

    // First half of a k-block: wait for its stage and issue its MMAs into accumulator set kP.
    template <int kP>
    DGX_DEVICE void issue(int kb, const SfbPair& sb, SfbPair& sb_next) {
        uint32_t parity;
        const uint32_t s = next_slot(parity);
        sb_next = load_sfb(kb + 1 < num_kb ? kb + 1 : kb);
        mbarrier_wait(&full[s], parity);
        const float sa0 = ld_shared_f32(sfa_base + s * T::kSmemSfa + sfa_offset[0][0]);
        const float sa1 = ld_shared_f32(sfa_base + s * T::kSmemSfa + sfa_offset[0][1]);
        const uint64_t desc_b = make_smem_desc_sw128(smem_b + s * T::kSmemB);
        const uint64_t desc_a = make_smem_desc_sw128(smem_a + s * T::kSmemA + wg * T::kWGRows * T::kBlockK);
        mma_slice(accum2[kP], desc_a, desc_b);
        scale2[kP][0] = sa0 * sb.lo;
        scale2[kP][1] = sa1 * sb.lo;
        scale2[kP][2] = sa0 * sb.hi;
        scale2[kP][3] = sa1 * sb.hi;
        stage2[kP] = s;
    }

    // Second half: once at most kPending MMA groups are in flight (set kP's are done), hand its stage back and
    // promote it. The set in flight is not touched.
    template <int kP, int kPending, int kFormer>
    DGX_DEVICE void retire() {
        wgmma_wait<kPending>();
#pragma unroll
        for (int i = 0; i < T::kAccum; ++i) fence_operand(accum2[kP][i]);
        if constexpr (T::kWgrad) {
            promote_columns(result[0], accum2[kP], scale2[kP], stage2[kP]);
            release(stage2[kP]);
        } else {
            release(stage2[kP]);
            promote<kFormer>(result[0], accum2[kP], scale2[kP]);
        }
    }

    // One straight-line chunk of kCount k-blocks from kb0 (`sb`: kb0's B scales in, the next chunk's out).
    template <int kCount, int kFormer>
    DGX_DEVICE void chunk(int kb0, SfbPair& sb) {
        SfbPair sbs[2] = {sb, sb};
        static_for<0, kCount + 1>([&](auto step) {
            constexpr int kJ = decltype(step)::value;
            if constexpr (kJ < kCount) issue<kJ % 2>(kb0 + kJ, sbs[kJ % 2], sbs[(kJ + 1) % 2]);
            if constexpr (kJ > 0) retire<(kJ - 1) % 2, kJ < kCount ? 1 : 0, kFormer>();
        });
        sb = sbs[kCount % 2];
    }

    // K at run time: the k-blocks [kb, end) (at least one) as one software-pipelined run, each k-block's MMAs in
    // flight while the one before is promoted, as a compile-time chunk of that length runs them. (One-k-block
    // chunks drain the MMAs at every k-block: the decode tiles of small K ran 5-13% slower, PERFLOG 2026-11-27
    // third session.)
    template <int kFormer>
    DGX_DEVICE void pipelined_run(int kb, int end, SfbPair& sb) {
        SfbPair sbs[2] = {sb, sb};
        issue<0>(kb, sbs[0], sbs[1]);
#pragma unroll 1
        for (++kb; kb + 1 < end; kb += 2) {
            issue<1>(kb, sbs[1], sbs[0]);
            retire<0, 1, kFormer>();
            issue<0>(kb + 1, sbs[0], sbs[1]);
            retire<1, 1, kFormer>();
        }
        if (kb < end) {
            issue<1>(kb, sbs[1], sbs[0]);
            retire<0, 1, kFormer>();
            retire<1, 0, kFormer>();
        } else {
            retire<0, 0, kFormer>();
        }
    }

    // Whole chunks, then the tail: compile-time, one pipelined run (K at run time), or one-k-block chunks
    // (K-grouped).
    template <int kFormer>
    DGX_DEVICE void k_loop_deferred() {
        SfbPair sb = load_sfb(0);
        int kb = 0;
#pragma unroll 1
        for (; kb + T::kDeferChunk <= num_kb; kb += T::kDeferChunk) chunk<T::kDeferChunk, kFormer>(kb, sb);
        if constexpr (Scheduler::kLayout != kLayoutKGrouped && !T::kRuntimeK) {
            constexpr int kTail = T::kTileKBlocks % T::kDeferChunk;
            if constexpr (kTail > 0) chunk<kTail, kFormer>(kb, sb);
        } else if constexpr (Scheduler::kLayout != kLayoutKGrouped) {
            if (kb < num_kb) pipelined_run<kFormer>(kb, num_kb, sb);
        } else {
#pragma unroll 1
            for (; kb < num_kb; ++kb) chunk<1, kFormer>(kb, sb);
        }
    }
};
// The math warpgroups' role: every tile of the scheduler, k-loop then epilogue.
// `params`: the kernel's parameters (ptx/fp8_gemm.cuh says what each member is).
template <typename T, typename Scheduler, typename Params>
__device__ __forceinline__ void fp8_gemm_math(Scheduler& scheduler, const Fp8GemmSmem& smem, const Params& params,
                                              uint32_t warp, uint32_t lane) {
    uint8_t* smem_d = smem.d;
    uint8_t* smem_a = smem.a;
    uint8_t* smem_b = smem.b;
    uint8_t* smem_sfa = smem.sfa;
    uint8_t* smem_sfb = smem.sfb;
    uint64_t* full = smem.full;
    uint64_t* empty = smem.empty;
    uint64_t* tile_bars = smem.tile_bars;
    const float* __restrict__ sfb = params.sfb;
    void* d_ptr = params.d_ptr;
    const int64_t ld_d = params.ld_d;
    Tile tile;
    // The warpgroup index is broadcast from lane 0 so the compiler knows it is warp-uniform: descriptors derived
    // from it stay in uniform registers and feed wgmma directly (4-10% faster, PERFLOG exp. 9).
    const uint32_t wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
    const uint32_t row_in_wg = (warp % 4) * 16 + lane / 4;  // accumulator row of this thread (and +8)
    const uint32_t col_in_8 = (lane % 4) * 2;               // accumulator column pair inside each 8
    float accum[T::kAccum];  // one wgmma's FP32 partial sums, reused by every m64 slice
    float result[T::kMmaPerWG][T::kAccum];
    float accum2[2][T::kAccum];  // deferred promotion: the accumulator sets of even and odd k-blocks
    float scale2[2][4];          // ... their scale products
    uint32_t stage2[2];          // ... and their stages, handed back once promoted

    uint32_t it = 0;                // plain ring: k-blocks consumed so far (the ring runs on across tiles)
    uint32_t stage = 0, phase = 0;  // lean: ring position of the next k-block; rounds: the round's parity
    bool ready = false;             // lean: the next k-block's stage is known full
    const uint64_t desc_a0 = make_smem_desc_sw128(smem_a + wg * T::kWGRows * T::kBlockK);
    const uint64_t desc_b0 = make_smem_desc_sw128(smem_b);
    uint32_t sfa_offset[T::kMmaPerWG][2];
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            sfa_offset[mm][h] = (wg * T::kWGRows + mm * 64 + row_in_wg + h * 8) * 4;
    const uint32_t sfa_base = smem_addr(smem_sfa);
    const uint32_t sfb_base = smem_addr(smem_sfb) + col_in_8 * 4;
    uint32_t tiles = 0;  // tiles stored so far (the parities of tile_bars)

    while (scheduler.next_tile(tile)) {
        const int n_start = tile.n_block * T::kBlockN;
        const int num_kb = Scheduler::kLayout == kLayoutKGrouped || T::kRuntimeK ? tile.num_kb : T::kTileKBlocks;
        // The tile's columns below `boundary` use B-scale block sfb_row0, the rest sfb_row1.
        const int n = scheduler.shape_n(), k_blocks = scheduler.num_k_blocks();
        const auto [sfb_row0, sfb_row1] = T::sfb_rows(n_start, n);
        const int boundary = (sfb_row0 + 1) * 128 - n_start;
        // (Split-K: from the tile's first k-block on.)
        const float* sfb0 = sfb + T::sfb_index(tile.group, sfb_row0, n, k_blocks) + (T::kSplit > 1 ? tile.kb0 : 0);
        const float* sfb1 = sfb + T::sfb_index(tile.group, sfb_row1, n, k_blocks) + (T::kSplit > 1 ? tile.kb0 : 0);
        // B scales in the stage: where k-block 0's lie in their 16-byte boxes.
        const uint32_t sfb_spot_lo = static_cast<uint32_t>(reinterpret_cast<uint64_t>(sfb0)) / 4;
        const uint32_t sfb_spot_hi = static_cast<uint32_t>(reinterpret_cast<uint64_t>(sfb1)) / 4;
#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) result[mm][i] = 0.0f;
        Fp8GemmKLoop<T, Scheduler>{smem_a, smem_b, smem_sfb, full, empty, lane, wg, desc_a0, desc_b0, sfa_offset,
                                   sfa_base, sfb_base, accum, result, accum2, scale2, stage2, it, stage, phase, ready,
                                   num_kb, boundary, sfb0, sfb1, sfb_spot_lo, sfb_spot_hi}
            .run();
        if constexpr (T::kSplit > 1)
            reduce_split_tile<T>(tile, n_start, result, MathThread{wg, warp, lane, row_in_wg, col_in_8}, smem_d,
                                 tile_bars, scheduler.rank, tiles++, d_ptr, ld_d, params.accumulate != 0,
                                 scheduler.shape_n());
        else if constexpr (T::Epi::kFused)
            T::Epi::template store<T, Scheduler>(tile, n_start, result, MathThread{wg, warp, lane, row_in_wg, col_in_8},
                                                 smem_d, params);
        else
            store_tile<T, Scheduler>(tile, n_start, result, MathThread{wg, warp, lane, row_in_wg, col_in_8}, smem_d,
                                     params.tmap_d, d_ptr, ld_d, tile_bars, tiles++, scheduler.shape_n());
    }
    if constexpr (!T::kStoreByProducer)
        if (threadIdx.x % 128 == 0) tma_store_wait_all();
}

}  // namespace dgx
