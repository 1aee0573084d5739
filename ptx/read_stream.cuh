// The benchmark's read floor (dgx/bench/read_floor.py): a kernel that only reads. Each CTA (one per SM) streams its
// contiguous share of `chunks` chunks of kChunk bytes into a ring of kStages shared-memory slots with 1-D bulk
// copies, L2 evict-first (kHint), one thread issuing; a slot is re-filled as soon as its previous fill has landed.
// Nothing is computed or written, so its time for N bytes is what any kernel that must read N bytes can reach on
// the card under the same clock and L2 state (PERFLOG 2026-11-24, fourth session). kPaged (tests/device/
// read_floor.py): chunk j is chunk p.pages[j] of the buffer, as a paged cache's blocks are read.
#pragma once
#include "common.cuh"
#include "mbarrier.cuh"
#include "pdl.cuh"
#include "tma.cuh"

namespace dgx {

template <int kStages, int kChunk, bool kHint = true, bool kPaged = false, typename Params>
DGX_DEVICE void read_stream_body(const Params& p) {
    static_assert(kChunk % 16 == 0, "bulk copies move multiples of 16 bytes");
    static_assert(kStages >= 2, "a ring");
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kChunk);
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): no prologue worth overlapping
    griddepcontrol_launch_dependents();
    if (threadIdx.x != 0) return;
    for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 1);
    fence_barrier_init();
    const uint64_t policy = kHint ? l2_evict_first_policy() : 0;
    const int64_t begin = p.chunks * blockIdx.x / gridDim.x, end = p.chunks * (blockIdx.x + 1) / gridDim.x;
    const int n = static_cast<int>(end - begin);
    for (int i = 0; i < n; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbarrier_wait(&full[s], (i / kStages - 1) & 1);  // the slot's previous fill landed
        mbarrier_arrive_expect_tx(&full[s], kChunk);
        int64_t chunk = begin + i;
        if constexpr (kPaged) chunk = __ldg(p.pages + chunk);
        bulk_load_1d<kHint>(smem + s * kChunk, p.src + chunk * kChunk, kChunk, &full[s], policy);
    }
    for (int i = n > kStages ? n - kStages : 0; i < n; ++i) mbarrier_wait(&full[i % kStages], (i / kStages) & 1);
}

}  // namespace dgx
