// Thread-block cluster helpers (sm_90).
#pragma once
#include "common.cuh"

namespace dgx {

DGX_DEVICE uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

DGX_DEVICE uint32_t cluster_nctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

// All threads of all CTAs of the cluster; release/acquire orders shared-memory writes (barrier inits) across it.
DGX_DEVICE void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The address of the same shared-memory variable in CTA `rank` of the cluster.
DGX_DEVICE uint32_t map_shared_rank(uint32_t addr, uint32_t rank) {
    uint32_t out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
    return out;
}

// Four floats from shared memory of any CTA of the cluster (`addr` from map_shared_rank; 16-byte aligned).
DGX_DEVICE F32x4 ld_shared_cluster_f32x4(uint32_t addr) {
    F32x4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

}  // namespace dgx
