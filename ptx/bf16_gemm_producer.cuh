// The producer warpgroup of the BF16 GEMM kernel (ptx/bf16_gemm.cuh): one elected thread fills the ring of stages
// with TMA loads of A and B; the other threads of the warpgroup only give their registers to the math warpgroups.
#pragma once
#include "bf16_gemm_traits.cuh"
#include "common.cuh"
#include "mbarrier.cuh"
#include "scheduler.cuh"
#include "tma.cuh"

namespace dgx {

// One operand's tile (Op: an OperandTile) of a k-block into stage `dst`: every box here; or, for the operand a pair shares, this CTA's
// half of the boxes multicast to both CTAs; or, where a pair does not share this unit (contiguous tiles of two
// groups), both halves here. The stage receives the same bytes either way.
template <typename Op, bool k3D, typename Scheduler>
DGX_DEVICE void load_tile(const Scheduler& scheduler, const TensorMap* map, uint64_t* full, uint8_t* dst, int k0,
                          int row, int group, bool share) {
    if constexpr (Op::kShared) {
        if (share) {
            Op::template load<true, k3D>(map, full, dst, k0, row, group, scheduler.rank, 2);
            return;
        }
    }
    Op::template load<false, k3D>(map, full, dst, k0, row, group, 0, 1);
}

// The producer warpgroup's role. For each k-block of each tile of the scheduler, the elected thread waits for the
// ring's next stage to be handed back (by the math warps of every CTA that reads it), announces the stage's bytes
// and loads A and B into it. The ring runs on across tiles, so a tile's first loads overlap the previous tile's
// epilogue. K-grouped tiles take their group's K range (tile.kb0, tile.num_kb count 128 of K: one or two k-blocks).
template <typename T, typename Scheduler, typename Params>
DGX_DEVICE void bf16_gemm_producer(const Params& params) {
    if constexpr (T::kNumMathWG == 2) setmaxnreg_dec<T::kProducerRegs>();
    const Bf16GemmSmem smem = bf16_gemm_smem<T>();
    Scheduler scheduler(params.m, params.grouped_layout, params.num_groups);
    if (warp_id() == T::kProducerWarp && elect_one()) {
        uint32_t it = 0;  // k-blocks loaded so far
        Tile tile;
        while (scheduler.next_tile(tile)) {
            // Split-K: this CTA's range of the tile's K (the scheduler's kb0, num_kb in this kernel's k-blocks).
            const int num_kb = T::kKGrouped ? tile.num_kb * (128 / T::kBlockK)
                                            : (T::kBatchSum ? tile.num_kb : T::kTileKBlocks);
            const int kb_first = T::kKGrouped ? tile.kb0 * (128 / T::kBlockK)
                                              : (T::kSplit > 1 || T::kBatchSum ? tile.kb0 : 0);
            // MN-major B of the M-grouped layouts: its 3-D map's group coordinate (the K-grouped B is one 2-D-like
            // [K, N] slab whose group lies in the K offset).
            const int b_group = T::kKGrouped ? 0 : tile.group;
            const int a_group = T::kBatched ? tile.group : 0;
            // (A batched B is read through its 3-D map: its row counts within the group, unlike the scheduler's b_row.)
            const int b_row = T::TileB::kKMajor && !T::kBatched ? tile.b_row : tile.n_block * T::kBlockN;
#pragma unroll 1
            for (int kb = 0; kb < num_kb; ++kb, ++it) {
                const uint32_t s = it % T::kNumStages;
                const uint32_t phase = (it / T::kNumStages) & 1;
                mbarrier_wait(&smem.empty[s], phase ^ 1);
                // Out-of-bounds parts of a box are zero-filled and still counted in the bytes.
                mbarrier_arrive_expect_tx(&smem.full[s], T::kStageBytes);
                int k0 = (kb_first + kb) * T::kBlockK;
                int ga = a_group, gb = b_group;
                if constexpr (T::kBatchSum) {
                    // The range's flattened k-block: batch s (both maps' outer coordinate), k-block within it.
                    const int flat = kb_first + kb;
                    const int batch = flat / T::kNumKBlocks;
                    k0 = (flat - batch * T::kNumKBlocks) * T::kBlockK;
                    ga = gb = batch;
                }
                load_tile<typename T::TileA, T::kA3D>(scheduler, &params.tmap_a, &smem.full[s],
                                                      smem.a + s * T::kSmemA, k0, tile.a_row, ga, tile.share);
                load_tile<typename T::TileB, T::kB3D>(scheduler, &params.tmap_b, &smem.full[s],
                                                      smem.b + s * T::kSmemB, k0, b_row, gb, tile.share);
            }
        }
    }
    __syncwarp();
}

}  // namespace dgx
