// Compile-time configuration of the BF16 GEMM kernel (ptx/bf16_gemm.cuh): the tile, the warpgroups, how each
// operand's tile lies in shared memory (K-major or MN-major, 128-byte or 64-byte swizzle) and how wgmma and TMA
// address it, the shared-memory layout and the barrier counts, all derived from the template arguments that
// dgx/kernels/bf16_gemm.py renders. Every role of the kernel takes this struct as `T`.
#pragma once
#include "common.cuh"
#include "scheduler.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace dgx {

// How an operand is stored: K contiguous (A [M, K] row-major, B [N, K] row-major), or M / N contiguous (A^T or
// B^T row-major). Hopper's BF16 wgmma reads both from shared memory (its transpose flags), so neither needs a copy.
enum OperandMajor : int { kMajorK = 0, kMajorMN = 1 };

// m64nNk16, bf16 x bf16 -> f32, both operands from shared-memory descriptors, kTransA / kTransB: the operand is
// MN-major. Specialised per (N, transposes) by the renderer (dgx/kernels/wgmma_render.py), as the register list has
// N/2 operands.
template <int kN, bool kTransA, bool kTransB>
struct WgmmaBF16;

// Descriptor of an MN-major tile stored as atoms of kSwizzleBytes (64 or 128) along M or N by 8 rows of K, each row
// swizzled at that width, as TMA writes it with CU_TENSOR_MAP_SWIZZLE_64B/128B. PTX ISA "Matrix Descriptor Format"
// for MN-major swizzled layouts: the leading byte offset is the stride between atoms along M/N (`atom_stride`, one
// TMA box apart), the stride byte offset the stride between groups of 8 rows along K (8 rows of kSwizzleBytes).
template <int kSwizzleBytes>
DGX_DEVICE uint64_t make_smem_desc_mn_major(const void* tile, uint32_t atom_stride) {
    static_assert(kSwizzleBytes == 64 || kSwizzleBytes == 128, "MN-major tiles are swizzled at 64 or 128 bytes");
    constexpr uint64_t kLayout = kSwizzleBytes == 128 ? 1 : 2;
    uint64_t desc = (static_cast<uint64_t>(smem_addr(tile)) & 0x3FFFFull) >> 4;
    desc |= static_cast<uint64_t>((atom_stride >> 4) & 0x3FFF) << 16;
    desc |= static_cast<uint64_t>(8 * kSwizzleBytes >> 4) << 32;
    desc |= kLayout << 62;
    return desc;
}

// One operand's tile of a k-block (kKAtoms x 64 BF16 of K) in a stage: kRows rows of M (A) or N (B).
// - K-major: kKAtoms sub-tiles one after another, one per 64 of K, each kRows rows of 128 bytes, 128-byte swizzled;
//   loaded as one box per sub-tile, or two half-boxes when a 2-CTA cluster shares the operand (each CTA loads one
//   half of every sub-tile and multicasts it).
// - MN-major: kRows / kAtom atoms of kAtom elements along M/N (kSwizzle bytes) by kKAtoms x 64 rows of K, one TMA
//   box each, one after another; a cluster sharing the operand splits the atoms between its two CTAs.
// Box i lies i * kBoxBytes into the tile; CTA `part` of `parts` loads boxes part, part + parts, ...
template <int kMajor_, int kRows_, bool kShared_, int kKAtoms_ = 1>
struct OperandTile {
    static constexpr int kMajor = kMajor_;
    static constexpr int kRows = kRows_;
    static constexpr bool kShared = kShared_;
    static constexpr int kKAtoms = kKAtoms_;
    static constexpr bool kKMajor = kMajor == kMajorK;
    // MN-major: the widest swizzle whose atom divides the tile (a 64-byte one keeps BLOCK_N 32, 96, 160, 224).
    static constexpr int kSwizzle = kKMajor || kRows % 64 == 0 ? 128 : 64;
    static constexpr int kAtom = kSwizzle / 2;  // elements along M/N per MN-major atom
    static constexpr uint32_t kBytes = kRows * 128 * kKAtoms;  // 64 BF16 of K per row (or atom row) and K atom
    static constexpr int kHalves = kShared ? 2 : 1;            // K-major: boxes per sub-tile
    static constexpr int kBoxes = kKMajor ? kHalves * kKAtoms : kRows / kAtom;
    static constexpr uint32_t kBoxBytes = kBytes / kBoxes;
    static constexpr int kBoxRows = kKMajor ? kRows / kHalves : kAtom;  // rows of M/N per box
    static constexpr uint32_t kSubTileBytes = kRows * 128;              // K-major: one 64-K sub-tile
    static constexpr uint32_t kAtomBytes = 64 * kKAtoms * kSwizzle;     // MN-major: one box

    static_assert(kKMajor || kMajor == kMajorMN, "an operand is K-major or MN-major");
    static_assert(kRows % 8 == 0 && kRows >= 8 && kRows <= 256, "tiles of 8..256 rows by 8");
    static_assert(kKAtoms == 1 || kKAtoms == 2 || kKAtoms == 4, "a k-block is 64, 128 or 256 of K");
    static_assert(kKMajor || kRows % kAtom == 0, "an MN-major tile is whole atoms (BLOCK_N a multiple of 32)");
    static_assert(!kShared || kBoxes % 2 == 0, "a shared tile splits into two halves of whole boxes");
    static_assert(kBoxBytes % 1024 == 0 || (!kKMajor && kBoxBytes % 512 == 0),
                  "each box keeps the alignment of its swizzle pattern (1024 bytes for 128B, 512 for 64B)");

    // Byte offset in the tile of the sub-tile `rows` in (a multiple of 64 for A's m64 slices; 0 for B) at k16 step j
    // of the k-block (j < 4 kKAtoms).
    static constexpr uint32_t byte_offset(int rows, int j) {
        return kKMajor ? (j / 4) * kSubTileBytes + rows * 128 + (j % 4) * 32
                       : (rows / kAtom) * kAtomBytes + j * 16 * kSwizzle;
    }

    // The wgmma descriptor of the tile at `tile` (stage 0), `rows` rows in; advancing along K or to another stage
    // only adds to the start-address field (shared memory stays below 256 KB: it never carries).
    static DGX_DEVICE uint64_t desc(const uint8_t* tile, int rows) {
        if constexpr (kKMajor)
            return make_smem_desc_kmajor<128>(tile + byte_offset(rows, 0));
        else
            return make_smem_desc_mn_major<kSwizzle>(tile + byte_offset(rows, 0), kAtomBytes);
    }

    // TMA loads of boxes part, part + parts, ... into `dst` for the k-block at K offset `k0` of the tile whose first
    // row (M/N) is `row`. K-major maps are [rows, K] (2-D) or, k3D, [groups, rows, K] (the batched layouts); MN-major
    // maps [K, M] (2-D, A) or [groups, K, N] (3-D, B). `group` is a 3-D map's outer coordinate. kMulticast: to both
    // CTAs of the cluster.
    template <bool kMulticast, bool k3D>
    static DGX_DEVICE void load(const TensorMap* map, uint64_t* full, uint8_t* dst, int k0, int row, int group,
                                int part, int parts) {
        for (int i = part; i < kBoxes; i += parts) {
            uint8_t* box = dst + i * kBoxBytes;
            if constexpr (kKMajor) {
                const int k = k0 + (i / kHalves) * 64, r = row + (i % kHalves) * kBoxRows;
                if constexpr (k3D) {
                    static_assert(!kMulticast, "3-D maps (the batched layouts' operands) are loaded without multicast");
                    tma_load_3d(map, full, box, k, r, group);
                } else if constexpr (kMulticast)
                    tma_load_2d_multicast(map, full, box, k, r, 0x3);
                else
                    tma_load_2d(map, full, box, k, r);
            } else if constexpr (k3D) {
                static_assert(!kMulticast, "3-D maps (grouped MN-major B) are loaded without multicast");
                tma_load_3d(map, full, box, row + i * kAtom, k0, group);
            } else {
                if constexpr (kMulticast)
                    tma_load_2d_multicast(map, full, box, row + i * kAtom, k0, 0x3);
                else
                    tma_load_2d(map, full, box, row + i * kAtom, k0);
            }
        }
    }
};

// How the math warpgroups share the work. Cooperative: both work on every tile, each on its own rows (one
// warpgroup for 64-row tiles), so both run their epilogue while the tensor cores wait. Ping-pong: each owns whole
// tiles (even and odd tiles of the CTA's share), and they take turns at the tensor cores
// (bf16_gemm_pingpong.cuh), so one's epilogue runs under the other's MMAs.
enum Bf16Schedule : int { kScheduleCooperative = 0, kSchedulePingPong = 1 };

template <int kLayout_, int kN_, int kK_, int kBlockM_, int kBlockN_, int kNumStages_, int kGroupN_, int kPair_,
          int kMajorA_, int kMajorB_, bool kOutF32_, bool kReduce_, int kKAtoms_ = 1, int kSplit_ = 1,
          int kSchedule_ = kScheduleCooperative>
struct Bf16GemmTraits {
    // ---- The problem and the tile.
    static constexpr int kLayout = kLayout_;  // GemmLayout (scheduler.cuh)
    static constexpr int kN = kN_;
    static constexpr int kK = kK_;  // 0 for the K-grouped layout (each group's K comes at run time)
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    // BF16 of K per k-block: kKAtoms 128-byte swizzle rows of a K-major operand. One-warpgroup (decode) tiles take
    // two or four per stage, so a k-block's barrier round trip and MMA wait cover more of K.
    static constexpr int kKAtoms = kKAtoms_;
    static constexpr int kBlockK = 64 * kKAtoms;
    static constexpr int kNumStages = kNumStages_;
    static constexpr int kGroupN = kGroupN_;  // raster band of the scheduler, in units along N
    static constexpr int kPair = kPair_;      // PairDim: 2-CTA clusters sharing A (kPairN) or B (kPairM)
    static constexpr int kMajorA = kMajorA_;
    static constexpr int kMajorB = kMajorB_;
    static constexpr bool kOutF32 = kOutF32_;  // D is FP32 (else BF16)
    // D += the tile (TMA reduce-add in D's type): D holds C, copied there by the host unless C is D.
    static constexpr bool kReduce = kReduce_;
    static constexpr int kNumKBlocks = (kK + kBlockK - 1) / kBlockK;
    static constexpr int kNumNBlocks = (kN + kBlockN - 1) / kBlockN;
    static constexpr bool kKGrouped = kLayout == kLayoutKGrouped;
    // The einsum family's layouts (scheduler.cuh): per-group GEMMs over strided 3-D views, and the S-summed batch
    // whose reduction runs over (s, k) in ranges given by the scheduler (tile.kb0, tile.num_kb).
    static constexpr bool kBatched = kLayout == kLayoutBatched;
    static constexpr bool kBatchSum = kLayout == kLayoutBatchSum;
    // Promotion: each k-block's MMAs start a fresh accumulator that the CUDA cores add into the tile's sum. The
    // tensor cores' FP32 accumulation truncates each k16 step's sum toward zero (not IEEE round-to-nearest), an
    // error that grows linearly with the chain of steps; a batch-sum range chains thousands of them (normwise ~3e-8
    // per step), so there the chain is cut at every k-block and the adds round to nearest.
    static constexpr bool kPromote = kBatchSum;
    // Split-K (memory-bound decode shapes): the kSplit CTAs of a cluster run one tile each over its own
    // kTileKBlocks k-blocks and sum their FP32 partial tiles through distributed shared memory in rank order
    // (fp8_gemm_epilogue.cuh reduce_split_tile: deterministic, no workspace), so wide tiles still fill the SMs and
    // each CTA streams a fraction of the tile's K instead of all of A for a narrow slice of B.
    static constexpr int kSplit = kSplit_;
    static constexpr int kTileKBlocks = kNumKBlocks / kSplit;  // k-blocks one tile runs (K-grouped: per group)

    // ---- Warpgroups: one or two math warpgroups of kWGRows rows each, then the producer warpgroup. Ping-pong: two,
    // each with all kBlockM rows of its own tiles (its rows start kWGRowStride x its index into the tile: 0).
    static constexpr bool kPingPong = kSchedule_ == kSchedulePingPong;
    static constexpr int kNumMathWG = kPingPong || kBlockM != 64 ? 2 : 1;
    static constexpr int kWGRows = kPingPong ? kBlockM : kBlockM / kNumMathWG;
    static constexpr int kWGRowStride = kPingPong ? 0 : kWGRows;
    static constexpr int kMmaPerWG = kWGRows / 64;  // m64 slices per warpgroup, each its own accumulators
    static constexpr int kAccum = kBlockN / 2;      // FP32 accumulators per thread per m64 slice
    static constexpr int kMathThreads = kNumMathWG * 128;
    static constexpr int kThreads = kMathThreads + 128;
    static constexpr uint32_t kProducerWarp = kMathThreads / 32;
    // Two math warpgroups: 2 x 128 x 232 + 128 x 40 = 64512 of the SM's 65536 registers (setmaxnreg).
    static constexpr uint32_t kMathRegs = 232;
    static constexpr uint32_t kProducerRegs = 40;
    static constexpr int kPeers = kPair == kPairNone ? 1 : 2;  // CTAs that read each stage (multicast)
    static constexpr int kCluster = kPair == kPairNone ? kSplit : 2;
    static constexpr bool kDefer = false;  // (the FP8 epilogue helpers reused here ask)
    // reduce_split_tile (the FP8 epilogue's) stores FP32 sums, added to D (which holds C) when accumulating, for
    // what it calls a weight gradient; BF16 sums packed, without C.
    static constexpr bool kWgrad = kOutF32;

    // ---- Operand tiles.
    using TileA = OperandTile<kMajorA, kBlockM, kPair == kPairN, kKAtoms>;
    using TileB = OperandTile<kMajorB, kBlockN, kPair == kPairM, kKAtoms>;
    // MN-major B of the M-grouped layouts is a 3-D map [groups, K, N]: a group's K tail reads zeros, not the next
    // group's rows. (K-major B stacks the groups along N: a tile's rows past N are computed and never stored.)
    // The batched layouts read A (and a K-major B) through 3-D maps [groups, rows, K] too: a head's rows of a
    // [b, h, r] tensor are strided, and the S batches of 'bmk,bnk->mn' are the outer coordinate.
    static constexpr bool kA3D = kBatched || kBatchSum;
    static constexpr bool kB3D = kMajorB == kMajorMN || kA3D;

    // ---- Output: BF16 or FP32 through a staged tile of swizzle spans (fp8_gemm_epilogue.cuh's layout).
    static constexpr int kOutBytes = kOutF32 ? 4 : 2;
    static constexpr int kDSpan = (kBlockN * kOutBytes) % 128 == 0   ? 128
                                  : (kBlockN * kOutBytes) % 64 == 0 ? 64
                                  : (kBlockN * kOutBytes) % 32 == 0 ? 32
                                                                     : 16;
    static constexpr int kSpanCols = kDSpan / kOutBytes;
    // The K-grouped D is a 3-D map [groups, M, N]: a group's last tile is clipped at its M rows (a 2-D view would
    // store the tile's rows past M over the next group's).
    // So are the batched layouts' D ([b, h, d] seen as [h, b, d]) and the batch-sum's workspace [ranges, M, N].
    static constexpr bool kD3D = kKGrouped || kBatched || kBatchSum;

    // ---- Shared memory: the staged output tile, then per stage A and B, then the full and empty barriers (and
    // split-K's two tile barriers). Split-K keeps its FP32 partial tile where the output tile would be, rows padded
    // by 8 floats (reduce_split_tile's layout), 1024-byte aligned.
    static constexpr uint32_t kPartialStride = kBlockN + 8;  // floats per row of the partial tile
    // Ping-pong: a staged tile per warpgroup, so neither waits for the other's stores to leave shared memory.
    static constexpr uint32_t kSmemD = kSplit > 1 ? (kBlockM * kPartialStride * 4 + 1023) / 1024 * 1024
                                                  : kNumMathWG * kWGRows * kBlockN * kOutBytes;
    static constexpr uint32_t kSmemA = TileA::kBytes;
    static constexpr uint32_t kSmemB = TileB::kBytes;
    static constexpr uint32_t kTileBarBytes = kSplit > 1 ? 2 * 8 : 0;
    static constexpr uint32_t kSmemBytes = kSmemD + kNumStages * (kSmemA + kSmemB) + kNumStages * 2 * 8 + kTileBarBytes;
    static constexpr uint32_t kStageBytes = kSmemA + kSmemB;  // what TMA lands per stage (multicast halves too)

    // ---- Barrier arrivals. Full: the producer's expect-tx arrival. Empty: one per math warp of every CTA that
    // reads the stage's multicast data (ping-pong: of the one warpgroup whose tile the stage holds).
    static constexpr uint32_t kFullArrivals = 1;
    static constexpr uint32_t kEmptyArrivals = (kPingPong ? 1 : kNumMathWG) * 4 * kPeers;

    static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 256, "BLOCK_M is 64, 128 or 256");
    static_assert(kBlockN % 8 == 0 && kBlockN >= 8 && kBlockN <= 256, "wgmma bf16 takes N = 8..256 by 8");
    static_assert(kMmaPerWG * kAccum <= 160, "at most 160 accumulators per math thread (232 registers)");
    static_assert(!kPromote || 2 * kMmaPerWG * kAccum <= 192,
                  "promotion keeps a second accumulator set: at most 2 x 96 per math thread (232 registers)");
    static_assert(!kPromote || !kPingPong, "the promoted k-loop runs the cooperative schedule");
    static_assert(kNumStages >= 2, "a k-block's stage is handed back after the next one's MMAs are issued");
    static_assert(kSmemD % 1024 == 0 && kSmemA % 1024 == 0 && kSmemB % 1024 == 0,
                  "stages start 1024-byte aligned, as the 128-byte swizzle needs");
    static_assert(kSmemBytes <= 232448, "Hopper gives a block at most 227 KB of shared memory");
    static_assert(kN % 8 == 0, "TMA needs 16-byte aligned rows of D");
    static_assert(kLayout == kLayoutDense || kLayout == kLayoutContiguous || kPair == kPairNone,
                  "multicast pairs are for the dense and contiguous layouts only");
    static_assert(kLayout == kLayoutDense || kLayout == kLayoutKGrouped || kMajorA == kMajorK,
                  "the M-grouped layouts take A K-major (each group's rows one segment after another)");
    static_assert(!kKGrouped || (kMajorA == kMajorMN && kMajorB == kMajorMN),
                  "the K-grouped layout takes A and B MN-major (each group's K rows one after another)");
    static_assert(kLayout != kLayoutMasked || !kOutF32, "masked partial blocks are stored row by row in BF16");
    static_assert(!kB3D || kPair != kPairM, "B loaded through a 3-D map is not shared");
    static_assert(!kKGrouped || kBlockK <= 128, "a K-grouped group's K is a multiple of 128: whole k-blocks");
    static_assert(kSplit >= 1 && kSplit <= 8, "split-K runs on a cluster of at most 8 CTAs (the portable size)");
    static_assert(kSplit == 1 || (kPair == kPairNone && kMmaPerWG == 1 && kK > 0 && kNumKBlocks % kSplit == 0),
                  "split-K: no multicast pair, one m64 slice per warpgroup, a compile-time K split in whole k-blocks");
    static_assert(kSplit == 1 || kLayout == kLayoutDense || kLayout == kLayoutMasked,
                  "split-K is for the dense and masked layouts");
    static_assert(kSplit == 1 || !kReduce || kOutF32, "split-K adds C only to an FP32 D (the sums are stored whole)");
    static_assert(!kA3D || (kPair == kPairNone && kSplit == 1 && kMajorA == kMajorK && !kReduce),
                  "the batched layouts: a K-major A through a 3-D map, no multicast, no split-K cluster, no C");
    static_assert(!kBatchSum || (kMajorB == kMajorK && kOutF32),
                  "the batch-sum layout reads B [S, N, K] K-major and stores FP32 partials");
    static_assert(kSchedule_ == kScheduleCooperative || kSchedule_ == kSchedulePingPong, "a known schedule");
    static_assert(!kPingPong || kBlockM == 64 || kBlockM == 128,
                  "a ping-pong tile is one or two m64 slices: a warpgroup holds all of it in its registers");
    static_assert(!kPingPong || kSplit == 1, "split-K tiles are summed by both warpgroups of the cluster's CTAs");
};

// The kernel's shared memory, as bf16_gemm_smem carves it (layout: Bf16GemmTraits' kSmem* sizes).
struct Bf16GemmSmem {
    uint8_t* d;       // the staged output tile (split-K: the FP32 partial tile)
    uint8_t* a;       // kNumStages x kSmemA
    uint8_t* b;       // kNumStages x kSmemB
    uint64_t* full;   // per stage: its data has landed
    uint64_t* empty;  // per stage: every reader has handed it back
    uint64_t* tile_bars;  // split-K: [0] the cluster's partials are published, [1] they have been read
};

template <typename T>
DGX_DEVICE Bf16GemmSmem bf16_gemm_smem() {
    extern __shared__ __align__(1024) uint8_t dgx_dynamic_smem[];
    uint8_t* a = dgx_dynamic_smem + T::kSmemD;
    uint8_t* b = a + T::kNumStages * T::kSmemA;
    uint64_t* full = reinterpret_cast<uint64_t*>(b + T::kNumStages * T::kSmemB);
    return Bf16GemmSmem{dgx_dynamic_smem, a, b, full, full + T::kNumStages, full + 2 * T::kNumStages};
}

}  // namespace dgx
