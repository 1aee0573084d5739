// FP8 GEMM with DeepSeek-V3 fine-grained scaling on Hopper: D[M, N] = A[M, K] . B[N, K]^T, where A carries one
// FP32 scale per row per 128 of K and B one per 128x128 block. Persistent and warp-specialised:
// - the producer warpgroup (fp8_gemm_producer.cuh) fills a ring of shared-memory stages with TMA;
// - one or two math warpgroups (fp8_gemm_math below) run wgmma m64nNk32 (e4m3) per 128 of K into FP32
//   registers and promote each partial sum into a second FP32 set scaled by scale_a[row] * scale_b[block]
//   (the promotion keeps FP8 tensor-core accumulation error from building up over long K);
// - their epilogue (fp8_gemm_epilogue.cuh) stores the tile through swizzled shared memory with TMA while the
//   producer already loads the next tile.
// The weight gradient (kWgrad) scales B per row too and writes FP32 D = C + A . B^T with TMA reduce-adds; its
// K-grouped layout runs each group over its own range of K. Compile-time configuration, and the feature flags
// that choose between measured variants (with their PERFLOG experiments): Fp8GemmTraits in fp8_gemm_traits.cuh.
#pragma once
#include "cluster.cuh"
#include "common.cuh"
#include "fp8_gemm_epilogue.cuh"
#include "fp8_gemm_producer.cuh"
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

// The math warpgroups: per tile, the k-loop (plain ring, stage rounds, or deferred promotion: see k_loop), then
// the epilogue. The k-loop's pieces are lambdas over this function's state: as functions or members of a struct
// they compiled to different SASS (register numbering and address arithmetic), which this file must keep.
template <typename T, typename Scheduler>
__device__ __forceinline__ void fp8_gemm_math(Scheduler& scheduler, uint8_t* smem_d, uint8_t* smem_a, uint8_t* smem_b,
                                              uint8_t* smem_sfa, uint8_t* smem_sfb, uint64_t* full, uint64_t* empty,
                                              const TensorMap& tmap_d, const float* __restrict__ sfb, void* d_ptr,
                                              int64_t ld_d, bool accumulate, uint32_t warp, uint32_t lane) {
    constexpr int kLayout = Scheduler::kLayout;
    constexpr int kBlockN = T::kBlockN;
    constexpr int kNumStages = T::kNumStages;
    constexpr int kDSpan = T::kDSpan;
    constexpr int kN = T::kN;
    constexpr bool kWgrad = T::kWgrad;
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

    uint32_t it = 0;  // plain: k-blocks consumed so far (the ring runs on across tiles)
    uint32_t stage = 0, phase = 0;  // lean: the ring position of the next k-block; rounds: phase of this round
    bool ready = false;             // lean: the next k-block's stage is known full
    const uint64_t desc_a0 = make_smem_desc_sw128(smem_a + wg * T::kWGRows * T::kBlockK);
    const uint64_t desc_b0 = make_smem_desc_sw128(smem_b);

    // Byte offsets of this thread's A-scale rows inside a stage's scale slot (fixed for the kernel).
    uint32_t sfa_offset[T::kMmaPerWG][2];
#pragma unroll
    for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            sfa_offset[mm][h] = (wg * T::kWGRows + mm * 64 + row_in_wg + h * 8) * 4;
    const uint32_t sfa_base = smem_addr(smem_sfa);
    const uint32_t sfb_base = smem_addr(smem_sfb) + col_in_8 * 4;

    while (scheduler.next_tile(tile)) {
        const int n_start = tile.n_block * kBlockN;
        const int num_kb = kLayout == kLayoutKGrouped ? tile.num_kb : T::kNumKBlocks;

        // Block-scaled B (not the weight gradient): the tile's columns below `boundary` use scale row
        // sfb_row0, the rest sfb_row1.
        const auto [sfb_row0, sfb_row1] = T::sfb_rows(n_start);
        const int boundary = (sfb_row0 + 1) * 128 - n_start;
        const float* sfb0 = sfb + T::sfb_index(tile.group, sfb_row0);
        const float* sfb1 = sfb + T::sfb_index(tile.group, sfb_row1);
        // B scales in the stage: where k-block 0's scales sit in their boxes (k-block kb's: kb further, mod 4).
        const uint32_t sfb_spot_lo = static_cast<uint32_t>(reinterpret_cast<uint64_t>(sfb0)) / 4;
        const uint32_t sfb_spot_hi = static_cast<uint32_t>(reinterpret_cast<uint64_t>(sfb1)) / 4;
        // B scales not in the stage come from global memory (L1-resident: a line holds 32 k-blocks), one k-block
        // ahead so their latency does not sit between the MMAs and the promotion.
        auto load_sfb = [&](int kb) {
            if constexpr (kWgrad) {
                return SfbPair{1.0f, 1.0f};  // per-column scales come from the stage instead
            } else {
                const float lo = ld_global_nc(sfb0 + kb);
                return SfbPair{lo, T::kSingleSfb ? lo : ld_global_nc(sfb1 + kb)};
            }
        };

#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) result[mm][i] = 0.0f;

        // Hands stage s back (T::kEmptyArrivals): lane 0 of each warp, or each lane (kSfaTimesSfb); in a pair on
        // both CTAs' barriers (lane r on rank r's, or each lane on both).
        auto release = [&](uint32_t s) {
            if constexpr (T::kCluster == 1) {
                if (T::kSfaTimesSfb || lane == 0) mbarrier_arrive(&empty[s]);
            } else if constexpr (T::kSfaTimesSfb) {
#pragma unroll
                for (uint32_t rank = 0; rank < T::kCluster; ++rank) mbarrier_arrive_cluster(&empty[s], rank);
            } else {
                if (lane < T::kCluster) mbarrier_arrive_cluster(&empty[s], lane);
            }
        };

        // res += acc * scale (scale: a[row], a[row + 8] times the lo block's B scale, then times the hi block's).
        // kFormer: how many 8-column groups use block lo (the rest hi) where compiled in, else -1 (`boundary`).
        auto promote = [&](float (&res)[T::kAccum], const float (&acc)[T::kAccum], const float (&scale)[4], auto former) {
            constexpr int kFormer = decltype(former)::value;
#pragma unroll
            for (int i = 0; i < kBlockN / 8; ++i) {
                const bool first = T::kSingleSfb || (kFormer >= 0 ? i < kFormer : i * 8 < boundary);
                const float lo = first ? scale[0] : scale[2];
                const float hi = first ? scale[1] : scale[3];
                res[i * 4 + 0] = fmaf(acc[i * 4 + 0], lo, res[i * 4 + 0]);
                res[i * 4 + 1] = fmaf(acc[i * 4 + 1], lo, res[i * 4 + 1]);
                res[i * 4 + 2] = fmaf(acc[i * 4 + 2], hi, res[i * 4 + 2]);
                res[i * 4 + 3] = fmaf(acc[i * 4 + 3], hi, res[i * 4 + 3]);
            }
        };

        // Weight gradient: result += accum * scale_a[row] * scale_b[col] (scale[0], scale[1]: rows row and row + 8),
        // the column scales read from stage s (two adjacent columns per load).
        auto promote_columns = [&](float (&res)[T::kAccum], const float (&acc)[T::kAccum], const float (&scale)[4],
                                   uint32_t s) {
            const uint32_t sfb_stage = sfb_base + s * T::kSmemSfbSlot;
#pragma unroll
            for (int i = 0; i < kBlockN / 8; ++i) {
                const F32x2 col = ld_shared_f32x2(sfb_stage + i * 32);
                res[i * 4 + 0] = fmaf(acc[i * 4 + 0], scale[0] * col.x, res[i * 4 + 0]);
                res[i * 4 + 1] = fmaf(acc[i * 4 + 1], scale[0] * col.y, res[i * 4 + 1]);
                res[i * 4 + 2] = fmaf(acc[i * 4 + 2], scale[1] * col.x, res[i * 4 + 2]);
                res[i * 4 + 3] = fmaf(acc[i * 4 + 3], scale[1] * col.y, res[i * 4 + 3]);
            }
        };

        // The plain ring's next slot: its stage, and the parity its full barrier completes with.
        auto next_slot = [&](uint32_t& parity) {
            const uint32_t slot = it % kNumStages;
            parity = (it / kNumStages) & 1;
            ++it;
            return slot;
        };
        // One m64 slice's four k32 MMAs of a k-block into `acc`, committed as one group.
        auto mma_slice = [&](float (&acc)[T::kAccum], uint64_t desc_a, uint64_t desc_b) {
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) fence_operand(acc[i]);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < T::kBlockK / 32; ++j)
                WgmmaE4M3<kBlockN>::mma(advance_desc(desc_a, j * 32), advance_desc(desc_b, j * 32), acc, j > 0);
            wgmma_commit();
        };

        // One k-block: wait for its stage, then per m64 slice of this warpgroup's rows: four k32 MMAs into the
        // one accumulator set, wait, promote into the slice's result (while one warpgroup promotes, the other's
        // MMAs keep the tensor cores busy). `fixed`: the stage of a round (compile time), or -1 (the ring's next
        // slot). The lean k-block (T::kLean: PERFLOG exp. 13-15) keeps the ring position as a counter, forms
        // descriptors as an offset, reads the A scales after the first MMAs and probes the next stage early.
        auto k_block = [&](int kb, const SfbPair& sb, SfbPair& sb_next, auto former, auto fixed) {
            constexpr int kFixed = decltype(fixed)::value;
            // The stage's A scales (every read of a stage comes before it is handed back).
            float sa[T::kMmaPerWG][2];
            auto load_sa = [&](uint32_t s) {
#pragma unroll
                for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        sa[mm][h] = ld_shared_f32(sfa_base + s * T::kSmemSfa + sfa_offset[mm][h]);
            };
            uint32_t s;
            uint64_t desc_a, desc_b;
            if constexpr (T::kLean) {
                if constexpr (kFixed >= 0) {
                    if (!ready) mbarrier_wait<true>(&full[kFixed], phase);
                    s = kFixed;
                    if constexpr (kFixed == kNumStages - 1) phase ^= 1;
                } else {
                    if (!ready) mbarrier_wait<true>(&full[stage], phase);
                    s = stage;
                    if (++stage == kNumStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                    sb_next = load_sfb(kb + 1 < num_kb ? kb + 1 : kb);
                }
                // Shared-memory addresses stay below 256 KB, so the 14-bit start-address field never carries.
                desc_a = desc_a0 + s * (T::kSmemA >> 4);
                desc_b = desc_b0 + s * (T::kSmemB >> 4);
            } else {
                uint32_t parity;
                if constexpr (kFixed >= 0) {
                    s = kFixed;
                    parity = phase;
                } else {
                    s = next_slot(parity);
                }
                if constexpr (!T::kSfbInStage) sb_next = load_sfb(kb + 1 < num_kb ? kb + 1 : kb);
                mbarrier_wait(&full[s], parity);
                load_sa(s);
                if constexpr (kFixed >= 0) {
                    desc_a = desc_a0 + s * (T::kSmemA >> 4);
                    desc_b = desc_b0 + s * (T::kSmemB >> 4);
                } else {
                    desc_b = make_smem_desc_sw128(smem_b + s * T::kSmemB);
                    desc_a = make_smem_desc_sw128(smem_a + s * T::kSmemA + wg * T::kWGRows * T::kBlockK);
                }
            }
            float scale[T::kMmaPerWG][4];
#pragma unroll
            for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
                mma_slice(accum, advance_desc(desc_a, mm * 64 * T::kBlockK), desc_b);
                if (mm == 0) {
                    // The scale products are formed while the first MMAs run. B scales in the stage are read
                    // only now: read with the A scales, the round loop of 128x160 spills.
                    if constexpr (T::kLean) load_sa(s);
                    SfbPair b = sb;
                    if constexpr (T::kSfbInStage) {
                        const uint32_t slot = smem_addr(smem_sfb) + s * T::kSmemSfbSlot;
                        const uint32_t lo = slot + (sfb_spot_lo + kb) % 4 * 4;
                        b.lo = ld_shared_f32(lo);
                        if constexpr (T::kSingleSfb)
                            b.hi = b.lo;
                        else  // the two blocks' rows lie a multiple of 16 bytes apart when K % 512 == 0
                            b.hi = ld_shared_f32(T::kNumKBlocks % 4 == 0 ? lo + 128
                                                                         : slot + 128 + (sfb_spot_hi + kb) % 4 * 4);
                    }
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

                if constexpr (kWgrad) {
                    // The column scales come from the stage, so it is handed back only after the last slice.
                    promote_columns(result[mm], accum, scale[mm], s);
                    if (mm == T::kMmaPerWG - 1) release(s);
                } else {
                    // After the last slice's MMAs the stage is read: hand it back to the producer, then
                    // promote: result += accum * scale_a[row] * scale_b[block].
                    if (mm == T::kMmaPerWG - 1) {
                        release(s);
                        if constexpr (T::kLean)
                            ready = mbarrier_test_wait(&full[kFixed >= 0 ? (kFixed + 1) % kNumStages : stage], phase);
                    }
                    promote(result[mm], accum, scale[mm], former);
                }
            }
        };

        // Deferred promotion, first half: wait for k-block kb's stage and issue its MMAs into accumulator set kP.
        auto issue = [&](int kb, auto set, const SfbPair& sb, SfbPair& sb_next) {
            constexpr int kP = decltype(set)::value;
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
        };
        // ... second half: once at most kPending MMA groups are in flight (set kP's are done), hand its stage
        // back and promote it. The set in flight is not touched.
        auto retire = [&](auto set, auto pending, auto former) {
            constexpr int kP = decltype(set)::value;
            wgmma_wait<decltype(pending)::value>();
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) fence_operand(accum2[kP][i]);
            if constexpr (kWgrad) {
                promote_columns(result[0], accum2[kP], scale2[kP], stage2[kP]);
                release(stage2[kP]);
            } else {
                release(stage2[kP]);
                promote(result[0], accum2[kP], scale2[kP], former);
            }
        };

        // One straight-line chunk of kCount k-blocks from kb0 (`sb`: kb0's B scales in, the next chunk's out).
        auto chunk = [&](int kb0, auto count, SfbPair& sb, auto former) {
            constexpr int kCount = decltype(count)::value;
            SfbPair sbs[2] = {sb, sb};
            static_for<0, kCount + 1>([&](auto step) {
                constexpr int j = decltype(step)::value;
                if constexpr (j < kCount) issue(kb0 + j, IntConst<j % 2>{}, sbs[j % 2], sbs[(j + 1) % 2]);
                if constexpr (j > 0) retire(IntConst<(j - 1) % 2>{}, IntConst<j < kCount ? 1 : 0>{}, former);
            });
            sb = sbs[kCount % 2];
        };

        // The three k-loops. Deferred (PERFLOG exp. 16): whole chunks, then the tail. Stage rounds (kRounds,
        // kLeanRounds; exp. 28, 31): every tile starts at stage 0; 256x128 tiles end with a copied tail and the
        // stages the producer completes with no data. Plain ring: unrolled by two so the prefetched B scales
        // ping-pong between two register pairs without moves (a move would put the load's latency back).
        auto k_loop = [&](auto former) {
            if constexpr (T::kDefer) {
                SfbPair sb = load_sfb(0);
                int kb = 0;
#pragma unroll 1
                for (; kb + T::kDeferChunk <= num_kb; kb += T::kDeferChunk)
                    chunk(kb, IntConst<T::kDeferChunk>{}, sb, former);
                if constexpr (kLayout != kLayoutKGrouped) {
                    constexpr int kTail = T::kNumKBlocks % T::kDeferChunk;
                    if constexpr (kTail > 0) chunk(kb, IntConst<kTail>{}, sb, former);
                } else {
                    // K-grouped: K is a run-time value; a group's last k-blocks run as one-k-block chunks.
#pragma unroll 1
                    for (; kb < num_kb; ++kb) chunk(kb, IntConst<1>{}, sb, former);
                }
            } else if constexpr (T::kRounds || T::kLeanRounds) {
                // The B scales come with the stage, or (lean) from global memory in their own k-block. The unused
                // stages: wait for each, hand it back.
                constexpr int kTail = T::kNumKBlocks % kNumStages;
                SfbPair unused{};
                auto round_block = [&](int kb, auto j) {
                    if constexpr (T::kSfbInStage)
                        k_block(kb, unused, unused, former, j);
                    else if constexpr (T::kSfaTimesSfb)
                        k_block(kb, SfbPair{1.0f, 1.0f}, unused, former, j);  // in the A scales already
                    else
                        k_block(kb, load_sfb(kb), unused, former, j);
                };
                int kb = 0;
#pragma unroll 1
                for (; kb + kNumStages <= T::kNumKBlocks; kb += kNumStages) {
                    static_for<0, kNumStages>([&](auto j) { round_block(kb + decltype(j)::value, j); });
                    if constexpr (!T::kLean) phase ^= 1;  // the lean k-block flips it before probing the next stage
                }
                static_for<0, kTail>([&](auto j) { round_block(kb + decltype(j)::value, j); });
                static_for<kTail == 0 ? kNumStages : kTail, kNumStages>([&](auto j) {
                    constexpr int kJ = decltype(j)::value;
                    if (!ready) mbarrier_wait<true>(&full[kJ], phase);
                    release(kJ);
                    ready = kJ + 1 < kNumStages && mbarrier_test_wait(&full[kJ + 1], phase);
                    if constexpr (kJ == kNumStages - 1) phase ^= 1;
                });
            } else {
                SfbPair sb_even{}, sb_odd{};
                if constexpr (!T::kSfbInStage) sb_even = load_sfb(0);
#pragma unroll 1
                for (int kb = 0; kb + 1 < num_kb; kb += 2) {
                    k_block(kb, sb_even, sb_odd, former, IntConst<-1>{});
                    k_block(kb + 1, sb_odd, sb_even, former, IntConst<-1>{});
                }
                if (num_kb % 2 == 1) k_block(num_kb - 1, sb_even, sb_odd, former, IntConst<-1>{});
            }
        };
        if constexpr (T::kSingleSfb || kWgrad) {
            k_loop(IntConst<kBlockN / 8>{});
        } else {
            // `boundary` takes 128 / gcd(BLOCK_N, 128) values; with at most four the k-loop is compiled for
            // each (a select per column group otherwise: up to 25% slower, PERFLOG exp. 6).
            constexpr int kGap = T::kGcd128 / 8;
            if constexpr (128 / T::kGcd128 <= 4)
                dispatch_int<kGap, kGap, 16>(min(boundary, kBlockN) / 8, k_loop);
            else
                k_loop(IntConst<-1>{});
        }

        store_tile<T, Scheduler>(tile, n_start, result, MathThread{wg, warp, lane, row_in_wg, col_in_8}, smem_d, tmap_d,
                                 d_ptr, ld_d, accumulate);
    }
    if (threadIdx.x % 128 == 0) tma_store_wait_all();
}

// `tmap_sfa` covers the A scales in the M-major layout: a row of M floats per k-block (rows 16-byte
// aligned; masked: the groups' k-blocks one after another), loaded in boxes of BLOCK_M x 1; `tmap_sfb`
// the weight gradient's B scales likewise (N-major), or for BF16 one-slice tiles the B scales `sfb` as one
// row of floats from the 16-byte boundary at or below `sfb`, in 16-byte aligned boxes of 4 x 1. `m` is the
// number of rows (masked, K-grouped: per group), `grouped_layout` m_indices, masked_m or the K-grouped
// groups' K, `d_ptr`/`ld_d` D for the stores done from the registers (partial masked blocks), `accumulate`
// whether the weight gradient adds to D (which holds C) instead of overwriting it, `group_maps` (K-grouped)
// the groups' maps of A and B, two per group, in global memory. `sfa`, `sfa_rows` and `sfa_stride` are what
// `tmap_sfa` maps (its base, floats per row, row stride in floats), for the A-scale warps' plain loads.
template <int kLayout, int kN, int kK, int kBlockM, int kBlockN, int kNumStages, int kGroupN, int kDSpan, int kPair,
          bool kWgrad, bool kDefer, typename Params>
__device__ __forceinline__ void fp8_gemm_nt_body(const Params& params) {
    // The kernel's parameters by name (dgx.kernels.fp8_gemm.INTERFACE lists them and renders the struct), bound
    // to the names the body uses.
    const TensorMap& tmap_a = params.tmap_a;
    const TensorMap& tmap_b = params.tmap_b;
    const TensorMap& tmap_d = params.tmap_d;
    const TensorMap& tmap_sfa = params.tmap_sfa;
    const TensorMap& tmap_sfb = params.tmap_sfb;
    const float* __restrict__ sfb = params.sfb;
    const float* __restrict__ sfa = params.sfa;
    int sfa_rows = params.sfa_rows, sfa_stride = params.sfa_stride, m = params.m;
    const int* grouped_layout = params.grouped_layout;
    int num_groups = params.num_groups;
    void* d_ptr = params.d_ptr;
    int64_t ld_d = params.ld_d;
    bool accumulate = params.accumulate != 0;
    const TensorMap* group_maps = params.group_maps;
    using T = Fp8GemmTraits<kN, kK, kBlockM, kBlockN, kNumStages, kGroupN, kDSpan, kPair, kWgrad, kDefer>;
    using Scheduler = TileScheduler<kLayout, kBlockM, kBlockN, T::kNumNBlocks, T::kNumKBlocks, kGroupN, kPair, kN>;
    static_assert(kLayout != kLayoutKGrouped || kWgrad, "the K-grouped layout is a weight gradient");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_d = smem;
    uint8_t* smem_a = smem_d + T::kSmemD;
    uint8_t* smem_b = smem_a + kNumStages * T::kSmemA;
    uint8_t* smem_sfa = smem_b + kNumStages * T::kSmemB;
    uint8_t* smem_sfb = smem_sfa + kNumStages * T::kSmemSfa;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem_sfb + kNumStages * T::kSmemSfbSlot);
    uint64_t* empty = full + kNumStages;
    const Fp8GemmSmem buffers{smem_d, smem_a, smem_b, smem_sfa, smem_sfb, full, empty};

    const uint32_t warp = warp_id();
    const uint32_t lane = lane_id();

    if (warp == T::kProducerWarp && lane == 0) {
        prefetch_tensor_map(&tmap_a);
        prefetch_tensor_map(&tmap_b);
        prefetch_tensor_map(&tmap_sfa);
        prefetch_tensor_map(&tmap_d);
        if constexpr (kWgrad || T::kSfbInStage) prefetch_tensor_map(&tmap_sfb);
        for (int s = 0; s < kNumStages; ++s) {
            mbarrier_init(&full[s], T::kFullArrivals);
            mbarrier_init(&empty[s], T::kEmptyArrivals);
        }
        fence_barrier_init();
    }
    // The peer's barriers must be initialised before our multicast can signal them.
    if constexpr (T::kCluster > 1) cluster_sync(); else __syncthreads();

    // Each role builds its scheduler after its register reallocation: built before, its state stayed live across
    // setmaxnreg, and ptxas spilled it (PERFLOG exp. 35).
    if (threadIdx.x >= T::kMathThreads) {
        fp8_gemm_producer<T, Scheduler>(buffers, tmap_a, tmap_b, tmap_sfa, tmap_sfb, sfb, sfa, sfa_rows, sfa_stride,
                                        m, grouped_layout, num_groups, group_maps, warp, lane);
    } else {
        if constexpr (T::kNumMathWG == 2) setmaxnreg_inc<T::kMathRegs>();
        Scheduler scheduler(m, grouped_layout, num_groups);
        fp8_gemm_math<T, Scheduler>(
            scheduler, smem_d, smem_a, smem_b, smem_sfa, smem_sfb, full, empty, tmap_d, sfb, d_ptr, ld_d, accumulate,
            warp, lane);
    }
    // No CTA may leave while its peer can still multicast into it or arrive on its barriers.
    if constexpr (T::kCluster > 1) cluster_sync();
}


}  // namespace dgx
