// Compile-time configuration of the FP8 GEMM kernel (ptx/fp8_gemm.cuh): tile, warpgroups, feature flags,
// shared-memory layout and barrier counts, all derived from the twelve template arguments that
// dgx/kernels/fp8_gemm.py renders. Every role of the kernel takes this struct as `T`.
#pragma once
#include "common.cuh"
#include "scheduler.cuh"

namespace dgx {

// The plain epilogue (fp8_gemm_epilogue.cuh: BF16 or the weight gradient's FP32). Fused ones, with the same
// members: fp8_gemm_fused.cuh, included only by the kernels that use them.
struct NoFusedEpilogue {
    static constexpr bool kFused = false;
    static constexpr uint32_t smem_d_bytes(int, int) { return 0; }  // (unused: the traits size the plain tile)
    template <int kLayout, int kBlockM, int kBlockN, int kNumNBlocks, int kNumKBlocks, int kGroupN, int kPair, int kN,
              int kSplit>
    using Scheduler = TileScheduler<kLayout, kBlockM, kBlockN, kNumNBlocks, kNumKBlocks, kGroupN, kPair, kN, kSplit>;
};

template <int kN_, int kK_, int kBlockM_, int kBlockN_, int kNumStages_, int kGroupN_, int kDSpan_, int kPair_,
          bool kWgrad_, bool kDeferred_, int kSplit_ = 1, bool kStreamB_ = false, int kHeadLeft_ = 0,
          int kHeadMid_ = 0, int kHeadRight_ = 0, typename Epi_ = NoFusedEpilogue, bool kRuntimeKRounds_ = false,
          bool kRuntimeStreamB_ = false>
struct Fp8GemmTraits {
    using Epi = Epi_;  // the epilogue: NoFusedEpilogue, or a fused one (fp8_gemm_fused.cuh)
    // ---- The problem and the tile.
    static constexpr int kN = kN_;  // 0: N comes at run time (the parameter `n`; GemmConfig.runtime_n)
    static constexpr bool kRuntimeN = kN_ == 0;
    static constexpr int kK = kK_;  // 0 for the K-grouped layout (each group's K comes at run time)
    // K at run time outside the K-grouped layout (kK 0 and not a weight gradient; the parameter `k`,
    // GemmConfig.runtime_k): the k-loop takes its trip count from the scheduler (ShapeK); no lean rounds,
    // straight-line whole loops or split-K, which need the k-block count at compile time, and stage rounds only
    // where the host promises whole rounds for every K (kRuntimeKRounds_: GemmConfig.stage_rounds).
    static constexpr bool kRuntimeK = kK_ == 0 && !kWgrad_;
    static_assert(!kRuntimeKRounds_ || kRuntimeK, "stage rounds over a run-time K: a kernel that takes K at run time");
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kBlockK = 128;  // one promotion (one scale) per 128 of K
    static constexpr int kNumStages = kNumStages_;
    static constexpr int kGroupN = kGroupN_;  // raster band of the scheduler, in units along N
    static constexpr int kDSpan = kDSpan_;    // bytes per swizzle span of the staged output tile (16: none)
    static constexpr int kPair = kPair_;      // PairDim: 2-CTA clusters sharing A (kPairN) or B (kPairM)
    static constexpr bool kWgrad = kWgrad_;   // weight gradient: B scaled per row, FP32 D = C + A . B^T
    static constexpr int kNumKBlocks = (kK + kBlockK - 1) / kBlockK;  // K of the kernel (K-grouped: per group)
    // Split-K: the kSplit CTAs of a cluster run one tile each over its own kTileKBlocks k-blocks and sum their
    // partial tiles through distributed shared memory (reduce_split_tile): memory-bound decode shapes whose
    // tiles alone leave SMs idle, or whose narrow tiles would read A once per tile.
    static constexpr int kSplit = kSplit_;
    static constexpr int kTileKBlocks = kNumKBlocks / kSplit;  // k-blocks one tile runs (K-grouped: per group)
    static constexpr int kNumNBlocks = (kN + kBlockN - 1) / kBlockN;
    // B's loads carry the L2 evict-first policy (tma.cuh): decode tiles read each B tile once.
    static constexpr bool kStreamB = kStreamB_;
    // B's L2 policy chosen per launch instead (the parameter `stream_b`; GemmConfig.runtime_stream_b): every B load
    // carries a policy, evict-first or normal.
    static constexpr bool kRuntimeStreamB = kRuntimeStreamB_;
    static_assert(!kRuntimeStreamB || !kStreamB, "B's L2 policy comes at run time or is compiled in, not both");
    // Skip-head-mid output (dgx.skip_head_mid): the N columns are heads of kHeadLeft + kHeadRight columns, and D
    // holds each head as kHeadLeft columns, kHeadMid columns the kernel leaves untouched, then kHeadRight columns.
    // Only the column coordinate of each TMA store span changes; without head splits it is the identity.
    static constexpr int kHeadLeft = kHeadLeft_;
    static constexpr int kHeadMid = kHeadMid_;
    static constexpr int kHeadRight = kHeadRight_;
    static constexpr bool kHeadSplits = kHeadLeft_ + kHeadRight_ > 0;
    // D's column of computed column n (DeepGEMM's EpilogueHeadSplits mapping): head h = n / (left + right) moves
    // right by h mids, and by one more in its right part.
    static DGX_DEVICE int d_col(int n) {
        if constexpr (kHeadSplits)
            return n + (n + kHeadRight) / (kHeadLeft + kHeadRight) * kHeadMid;
        else
            return n;
    }

    // ---- Warpgroups: one or two math warpgroups of kWGRows rows each, then the producer warpgroup.
    static constexpr int kNumMathWG = kBlockM == 64 ? 1 : 2;
    static constexpr int kWGRows = kBlockM / kNumMathWG;
    static constexpr int kMmaPerWG = kWGRows / 64;  // m64 slices per warpgroup, run one after the other
    static constexpr int kAccum = kBlockN / 2;      // FP32 accumulators per thread per m64 slice
    static constexpr int kMathThreads = kNumMathWG * 128;
    static constexpr int kThreads = kMathThreads + 128;
    static constexpr uint32_t kProducerWarp = kMathThreads / 32;  // the first warp of the producer warpgroup
    // Two math warpgroups: 2 x 128 x 232 + 128 x 40 = 64512 of the SM's 65536 registers (setmaxnreg).
    static constexpr uint32_t kMathRegs = 232;
    static constexpr uint32_t kProducerRegs = 40;
    static constexpr int kPeers = kPair == kPairNone ? 1 : 2;  // CTAs that read each stage (multicast)
    static constexpr int kCluster = kPair == kPairNone ? kSplit : 2;
    // Rows of the shared operand that each CTA of a pair loads and multicasts to both. A weight-gradient B tile
    // whose halves would not keep the 1024-byte alignment of the 128B swizzle (BLOCK_N 152: halves of 76 rows)
    // is loaded whole by rank 0 and multicast to both (kWholeB); rank 1 loads no B.
    static constexpr bool kWholeB = kPair == kPairM && (kBlockN / 2) * 128 % 1024 != 0;
    static constexpr int kHalfRowsA = kPair == kPairN ? kBlockM / 2 : kBlockM;
    static constexpr int kHalfRowsB = kPair == kPairM && !kWholeB ? kBlockN / 2 : kBlockN;

    // ---- B-scale blocks (128 columns each; the weight gradient has a scale per column instead).
    static constexpr int kNumSfbRows = (kN + 127) / 128;  // (kRuntimeN: num_sfb_rows(n))
    static DGX_DEVICE int num_sfb_rows(int n) { return kRuntimeN ? (n + 127) / 128 : kNumSfbRows; }
    // A tile spans one 128-column block, or at most two (validate_blocks allows no wider split).
    static constexpr bool kSingleSfb = 128 % kBlockN == 0;
    // Tiles start at multiples of BLOCK_N, so the worst offset inside a 128 block is 128 - gcd(BLOCK_N, 128).
    static constexpr int kGcd128 = (kBlockN & -kBlockN) < 128 ? (kBlockN & -kBlockN) : 128;
    struct SfbRows {
        int lo, hi;
    };
    // The B-scale rows of the first and the last column of the tile starting at column n_start; clamped, as
    // a pair's second tile may lie past N (nothing of it is stored). `n`: N (read only with kRuntimeN).
    static DGX_DEVICE SfbRows sfb_rows(int n_start, int n = kN) {
        const int rows = num_sfb_rows(n);
        return {min(n_start / 128, rows - 1), min((n_start + kBlockN - 1) / 128, rows - 1)};
    }
    // Index of k-block 0's B scale of block `row` of group `group` (scales laid out [groups, rows, k-blocks]).
    // `num_kb`: the k-blocks of K (read only with kRuntimeK).
    static DGX_DEVICE int sfb_index(int group, int row, int n = kN, int num_kb = kNumKBlocks) {
        return (group * num_sfb_rows(n) + row) * (kRuntimeK ? num_kb : kNumKBlocks);
    }

    // ---- Feature flags. Each one is a measured trade-off; docs/PERFLOG.md has the numbers.
    // Deferred promotion: a k-block is promoted after the next k-block's MMAs are issued, into a second
    // accumulator set, so the chain of small MMAs overlaps the promotion (latency-bound one-slice tiles and
    // the weight gradient; PERFLOG exp. 16, 19).
    static constexpr bool kDefer = kDeferred_;
    // Straight-line chunks of k-blocks that end with no MMA in flight: an MMA in flight across a loop's
    // back edge while the other set is read makes ptxas serialise every wgmma (warning C7514). Each chunk ends
    // in a drain. Tiles at most 32 columns wide (the decode shapes' narrow tiles, latency-bound) with at most
    // kWholeLoopKBlocks k-blocks run the tile as one chunk: 3-16% faster than chunks of 8 at K 7168 (N 576 to
    // 4096, M <= 256). At 128 k-blocks one chunk ran 2.3x slower (its code outgrows the instruction cache), and
    // chunks of 16 or 28 gained little or lost (PERFLOG 2026-11-24, fourth session); the rest keep 8.
    static constexpr int kWholeLoopKBlocks = 56;
    static constexpr int kDeferChunk =
        kBlockN <= 32 && kTileKBlocks > 0 && kTileKBlocks <= kWholeLoopKBlocks ? kTileKBlocks : 8;
    static_assert(!kDefer || kMmaPerWG == 1, "deferred promotion is for one-slice tiles");
    // BF16 one-slice tiles load their k-block's (at most two) B scales into the stage with TMA, like the A
    // scales (PERFLOG exp. 28, 29); deferred tiles keep prefetching them from global memory (exp. 33).
    static constexpr bool kSfbInStage = !kWgrad && kMmaPerWG == 1 && !kDefer;
    // Two-slice (256-row) warpgroups run the lean k-block (ring position as a counter, descriptors as an
    // offset, the next stage's barrier probed early) with suspending barrier waits: faster for them, slower
    // for one-slice tiles (PERFLOG exp. 13-15).
    static constexpr bool kLean = kMmaPerWG == 2;
    // Stage rounds: when every tile starts at stage 0, the k-loop runs rounds of kNumStages k-blocks whose
    // stages, barriers and descriptors are compile-time constants (fewer instructions per k-block).
    // One-slice tiles with the B scales in the stage need a k-block count that is a multiple of the stage
    // count (PERFLOG exp. 28, 30); so do plain one-slice weight-gradient tiles, whose column scales travel with
    // the stage too (128x128: 166 instead of 197 instructions a k-block, 2-8% faster on 10 of DeepGEMM's 12
    // weight-gradient shapes; PERFLOG 2026-11-24 fifth session), up to 128 columns (128x152 spilled). Not
    // K-grouped: a group's K comes at run time.
    // With K at run time the host says whether every K the kernel serves fills whole rounds (kRuntimeKRounds_).
    static constexpr bool kRounds =
        (kSfbInStage || (kWgrad && !kDefer && kMmaPerWG == 1 && kK > 0 && kBlockN <= 128)) &&
        (kRuntimeK ? kRuntimeKRounds_ : kTileKBlocks % kNumStages == 0);
    // The other plain one-slice weight-gradient tiles up to 128 columns (K-grouped, whose groups' k-blocks come at
    // run time, and dense ones whose k-blocks do not fill whole rounds): the k-loop runs ring k-blocks until the
    // ring reaches stage 0, then stage rounds, then ring k-blocks for the rest (3-5% faster on five of the six
    // K-grouped anchors, 5-10% over the deferred tiles on dense K of 33-65 k-blocks; PERFLOG 2026-11-24 fifth
    // session). The producer's ring is unchanged.
    static constexpr bool kRoundsInRing = kWgrad && !kDefer && kMmaPerWG == 1 && kBlockN <= 128 && !kRounds;
    // 256x128 tiles complete the stages a tile's last round leaves unused with a bare arrival; that pays
    // with none or at most one such stage per 32 k-blocks (PERFLOG exp. 31).
    static constexpr int kUnusedStages = (kNumStages - kTileKBlocks % kNumStages) % kNumStages;
    static constexpr bool kLeanRounds = kLean && kBlockN == 128 && kK > 0 && kTileKBlocks >= 32 * kUnusedStages;
    // BF16 lean-round tiles of at least 32 k-blocks take their A scales already multiplied by the B scale:
    // one idle producer-warpgroup warp per stage forms the products, so the math warps' k-block has no
    // B-scale load and no scale product (PERFLOG exp. 35).
    static constexpr bool kSfaTimesSfb = kLeanRounds && !kWgrad && kTileKBlocks >= 32;
    static_assert(!kSfaTimesSfb || kNumStages <= 3, "the producer warpgroup has three idle warps, one per stage");
    // The weight gradient's tiles are written out by the producer thread, one swizzle span of the staged tile at
    // a time, spread over the next tile's k-blocks (fp8_gemm_producer.cuh TileStores). Issued by the math warps
    // at the tile's end, every CTA's reduce-adds reached the L2 at once, and the next tile's loads queued behind
    // them: its fifth k-block waited 1.6 us instead of 0.5 (7-10% of the time; PERFLOG 2026-11-24 sixth session).
    static constexpr bool kStoreByProducer = kWgrad && kSplit == 1;
    static constexpr int kStoreSpans = kNumMathWG * kBlockN * 4 / kDSpan;  // FP32 spans of the whole tile

    // ---- Shared memory: the output tile, then per stage A, B, the A scales and the B-scale slot, then the
    // full and empty barriers (and split-K's two).
    // Split-K keeps its FP32 partial tile where the output tile would be, rows padded by 8 floats so that the
    // fragment's 64-bit stores from 4 rows at a time fill the 32 banks once; 1024-byte aligned stages follow.
    static constexpr uint32_t kPartialStride = kBlockN + 8;  // floats per row of the partial tile
    static constexpr uint32_t kSmemD = kSplit > 1 ? (kBlockM * kPartialStride * 4 + 1023) / 1024 * 1024
                                       : Epi::kFused ? Epi::smem_d_bytes(kBlockM, kBlockN)
                                                     : kBlockM * kBlockN * (kWgrad ? 4 : 2);  // BF16; wgrad FP32
    static constexpr uint32_t kSmemA = kBlockM * kBlockK;
    static constexpr uint32_t kSmemB = kBlockN * kBlockK;
    static constexpr uint32_t kSmemSfa = kBlockM * 4;  // the k-block's BLOCK_M A scales (M-major)
    // B scales in the stage: the 16-byte box that holds each block's scale (a TMA box must start 16-byte
    // aligned; the reader picks the scale out of it). Weight gradient: BLOCK_N per-column scales.
    static constexpr uint32_t kSfbBox = 16;
    static constexpr uint32_t kSmemSfb = kWgrad ? kBlockN * 4 : (kSfbInStage ? (kSingleSfb ? 1 : 2) * kSfbBox : 0);
    // TMA destinations are 128-byte aligned: the hi block's box lies 128 bytes after the lo block's.
    static constexpr uint32_t kSmemSfbSlot =
        kWgrad ? (kSmemSfb + 127) / 128 * 128 : (kSfbInStage ? (kSingleSfb ? 128 : 256) : 0);
    // Two barriers per tile follow the stages' (tile_bars): split-K's partials published / read, or the staged
    // tile written by the math warps / read by the producer's stores (kStoreByProducer).
    static constexpr bool kTileBars = kSplit > 1 || kStoreByProducer;
    static constexpr uint32_t kSmemBytes =
        kSmemD + kNumStages * (kSmemA + kSmemB + kSmemSfa + kSmemSfbSlot) + kNumStages * 2 * 8 + (kTileBars ? 16 : 0);
    // What TMA lands per stage (the A-scale warps of kSfaTimesSfb store their products themselves).
    static constexpr uint32_t kStageBytes = kSmemA + kSmemB + (kSfaTimesSfb ? 0 : kSmemSfa) + kSmemSfb;

    // ---- Barrier arrivals. Full: the producer's expect-tx arrival, plus the 32 lanes of the stage's
    // A-scale warp. Empty: one per math warp of every CTA that reads the stage's multicast data - or one per
    // lane where the A-scale warps overwrite the stage with plain stores, so that racecheck sees each
    // thread's reads ordered before them (no slower; PERFLOG exp. 35).
    static constexpr uint32_t kFullArrivals = kSfaTimesSfb ? 1 + 32 : 1;
    static constexpr uint32_t kEmptyArrivals = kNumMathWG * 4 * kPeers * (kSfaTimesSfb ? 32 : 1);

    static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 256, "BLOCK_M is 64, 128 or 256");
    static_assert(kBlockN % 8 == 0 && kBlockN >= 8 && kBlockN <= 256, "wgmma e4m3 takes N = 8..256 by 8");
    static_assert(kWgrad || kBlockN - kGcd128 <= 128, "a tile must not span more than two 128-column B-scale blocks");
    static_assert((kBlockN * (kWgrad ? 4 : 2)) % kDSpan == 0, "the D tile splits into whole swizzle spans");
    static_assert((kSmemD + kNumStages * (kSmemA + kSmemB)) % 128 == 0, "TMA writes scales to 128-byte aligned smem");
    static_assert((kSmemD + kNumStages * (kSmemA + kSmemB + kSmemSfa)) % 128 == 0 && kSmemSfbSlot % 128 == 0,
                  "the B-scale slots are TMA destinations: 128-byte aligned");
    static_assert(kSmemBytes <= 232448, "Hopper gives a block at most 227 KB of shared memory");
    static_assert(kN % 8 == 0, "TMA needs 16-byte aligned rows of the BF16 output");
    static_assert(!kWgrad || kPair != kPairN, "the weight gradient shares B (along M) only");
    static_assert(!kWholeB || kWgrad, "whole-tile multicast of B is for the weight gradient's BLOCK_N only");
    static_assert(kSplit >= 1 && kSplit <= 8, "split-K runs on a cluster of at most 8 CTAs (the portable size)");
    static_assert(kSplit == 1 || (kPair == kPairNone && kBlockM <= 128 && kK > 0 && kNumKBlocks % kSplit == 0),
                  "split-K: no multicast pair, one m64 slice per warpgroup, a compile-time K split in whole k-blocks");
    static_assert(kHalfRowsA * 128 % 1024 == 0 && kHalfRowsB * 128 % 1024 == 0,
                  "each multicast half must keep the 1024-byte alignment of the 128B swizzle");
    static_assert(!kHeadSplits || (!kWgrad && kSplit == 1 && kHeadLeft > 0 && kHeadRight > 0 && kHeadMid >= 0 &&
                                   kN % (kHeadLeft + kHeadRight) == 0),
                  "head splits: a BF16 GEMM without split-K whose N is whole heads of left + right columns");
    static_assert(!kHeadSplits || (kHeadLeft % (kDSpan / 2) == 0 && kHeadRight % (kDSpan / 2) == 0),
                  "head splits: every TMA store span lies in one head's left or right part");
};

// The kernel's shared memory as fp8_gemm_nt_body carves it up (layout: Fp8GemmTraits' kSmem* sizes).
struct Fp8GemmSmem {
    uint8_t* d;    // the staged output tile
    uint8_t* a;    // kNumStages x kSmemA
    uint8_t* b;    // kNumStages x kSmemB
    uint8_t* sfa;  // kNumStages x kSmemSfa
    uint8_t* sfb;  // kNumStages x kSmemSfbSlot
    uint64_t* full;   // per stage: its data has landed
    uint64_t* empty;  // per stage: every reader has handed it back
    uint64_t* tile_bars;  // kTileBars: split-K's two, or [0] the tile is staged in `d`, [1] its stores have read it
};

}  // namespace dgx
