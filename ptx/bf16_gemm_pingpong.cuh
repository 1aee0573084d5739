// The ping-pong schedule of the BF16 GEMM kernel (ptx/bf16_gemm.cuh, Bf16GemmTraits::kPingPong): the two math
// warpgroups own alternate tiles of the CTA's share (even ones warpgroup 0, odd ones warpgroup 1) and take turns at
// the tensor cores in tile order, so one's epilogue (and the other's k-loop start) overlaps the other's MMAs.
//
// The turns are handed over through a pair of named barriers, one per warpgroup: warpgroup w waits on barrier
// kTurnBarrier + w (bar.sync, 256 threads: its own 128 plus the other's arrival) before its tile's first MMA, and
// arrives on the other's (bar.arrive, which does not wait) once its tile's last MMAs are issued, so the other's
// first MMAs queue right behind them. Warpgroup 1 arrives once up front (warpgroup 0 has the first tile); after
// the last tile, the warpgroup whose turn would be next takes the pending arrival, so no barrier is left half
// passed. The producer fills the ring in tile order, which is the order the turns consume it in.
#pragma once
#include "common.cuh"

namespace dgx {

// Named barriers 1 and 2 are the epilogue's (one per warpgroup, bf16_store_tile); 3 and 4 the turns.
constexpr uint32_t kTurnBarrier = 3;
constexpr uint32_t kTurnThreads = 256;  // both math warpgroups

// Arrives on named barrier `id` for `count` threads without waiting (the bar.sync side waits for the count).
DGX_DEVICE void named_barrier_arrive(uint32_t id, uint32_t count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Before a warpgroup's first tile: warpgroup 1 lets warpgroup 0 take the first turn.
DGX_DEVICE void pingpong_start(uint32_t wg) {
    if (wg == 1) named_barrier_arrive(kTurnBarrier + 0, kTurnThreads);
}

// Waits for warpgroup `wg`'s turn at the tensor cores (the other warpgroup's MMAs of the previous tile issued).
DGX_DEVICE void pingpong_wait_turn(uint32_t wg) { named_barrier_sync(kTurnBarrier + wg, kTurnThreads); }

// Hands the tensor cores to the other warpgroup: this warpgroup's MMAs of its tile are all issued.
DGX_DEVICE void pingpong_pass_turn(uint32_t wg) { named_barrier_arrive(kTurnBarrier + (wg ^ 1), kTurnThreads); }

// After the last of `tiles` tiles (the CTA's, both warpgroups'): the warpgroup whose turn would come next takes the
// last turn's arrival (warpgroup 1's up-front one when there was no tile).
DGX_DEVICE void pingpong_finish(uint32_t wg, uint32_t tiles) {
    if ((tiles & 1) == wg) pingpong_wait_turn(wg);
}

}  // namespace dgx
