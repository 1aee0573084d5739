// mbarrier wrappers: the full/empty handshake between the TMA producer and the math warpgroups.
#pragma once
#include "common.cuh"

namespace dgx {

DGX_DEVICE void mbarrier_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes barrier initialisation visible to the async proxy (TMA) and to the other CTAs of the cluster.
DGX_DEVICE void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

DGX_DEVICE void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive on the barrier at the same offset in CTA `rank` of the cluster (rank may be our own).
// Default (CTA-scope release) semantics on purpose: the consumers only say "done reading" and publish
// no data, and `.release.cluster` would put a GPU-wide MEMBAR before every arrive (seen in SASS: it
// halved the speed of the 2-CTA kernels).
DGX_DEVICE void mbarrier_arrive_cluster(uint64_t* bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
        "r"(rank)
        : "memory");
}

// Split-K: this thread's earlier shared-memory accesses ordered before its arrivals that follow, at cluster scope
// (with mbarrier_arrive_cluster_relaxed: a release by each thread that wrote or read a partial tile).
DGX_DEVICE void fence_acq_rel_cluster() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }

// Split-K: a relaxed arrival on the barrier at the same offset in CTA `rank`, after fence_acq_rel_cluster. Every
// math thread that wrote its part of a partial tile (or read a peer's) publishes its own accesses this way, one
// fence and kSplit arrivals each: a single thread's release after a CTA barrier left compute-sanitizer racecheck
// reporting the peers' reads as racing with the writes, and releasing arrivals from every thread put a MEMBAR before
// each (9-20% slower split-K tiles); this costs ~1% (PERFLOG, split-K racecheck). PTX ISA 8.6, mbarrier.arrive
// ".relaxed".
DGX_DEVICE void mbarrier_arrive_cluster_relaxed(uint64_t* bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
        "r"(rank)
        : "memory");
}

// Arrive and announce `bytes` of TMA traffic that will complete on this barrier.
DGX_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// Whether the phase with the given parity has completed, without waiting: a probe issued early, whose
// answer is collected after other work has hidden its latency.
DGX_DEVICE bool mbarrier_test_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    return done != 0;
}

// Blocks until the phase with the given parity has completed. A fresh barrier is in phase 0, so waiting
// on parity 1 returns at once: producers use that to pass the first lap of an empty ring.
// kSleep: each try suspends the thread (up to a time-limit hint; SASS: NANOSLEEP.SYNCS) until the phase
// completes, instead of returning at once to spin.
template <bool kSleep = false>
DGX_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    const uint32_t addr = smem_addr(bar);
    uint32_t done = 0;
    do {
        if constexpr (kSleep) {
            asm volatile(
                "{\n.reg .pred p;\n"
                "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                "selp.u32 %0, 1, 0, p;\n}\n"
                : "=r"(done)
                : "r"(addr), "r"(parity), "r"(10000000u)  // ns; the hint CUTLASS's barriers pass
                : "memory");
        } else {
            asm volatile(
                "{\n.reg .pred p;\n"
                "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                "selp.u32 %0, 1, 0, p;\n}\n"
                : "=r"(done)
                : "r"(addr), "r"(parity)
                : "memory");
        }
    } while (!done);
}

// Split-K: this thread's earlier shared-memory accesses published to every CTA of a cluster of kCtas: one
// cluster-scope fence, then a relaxed arrival on the barrier at `bar`'s offset in each CTA (the two above).
template <uint32_t kCtas>
DGX_DEVICE void publish_to_cluster(uint64_t* bar) {
    fence_acq_rel_cluster();
#pragma unroll
    for (uint32_t rank = 0; rank < kCtas; ++rank) mbarrier_arrive_cluster_relaxed(bar, rank);
}

// Blocks until the phase with the given parity has completed, with cluster-scope acquire: what the peers
// published before their arrivals (fence_acq_rel_cluster, then mbarrier_arrive_cluster_relaxed) is visible
// afterwards.
DGX_DEVICE void mbarrier_wait_cluster(uint64_t* bar, uint32_t parity) {
    const uint32_t addr = smem_addr(bar);
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!done);
}

}  // namespace dgx
