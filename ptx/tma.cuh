// Bulk tensor copies (TMA) between global and shared memory, completing on an mbarrier (loads) or a bulk
// group (stores). PTX ISA, "cp.async.bulk.tensor".
#pragma once
#include "common.cuh"

namespace dgx {

DGX_DEVICE void prefetch_tensor_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// An L2 cache policy for data a kernel reads once (a decode GEMM's B, a paged KV cache): its lines are the first
// evicted, so streaming it through L2 neither pushes out lines others still use nor forces dirty lines (a
// previous kernel's output) to be written back early, which costs HBM bandwidth on top of the stream's own.
// PTX ISA, "createpolicy".
DGX_DEVICE uint64_t l2_evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// 2-D tile load into our own shared memory; `bar` receives the byte count on completion. kHint: with the L2
// cache policy `policy` (l2_evict_first_policy).
template <bool kHint = false>
DGX_DEVICE void tma_load_2d(const TensorMap* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1,
                            uint64_t policy = 0) {
    if constexpr (kHint)
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
            " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
            : "memory");
    else
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
                "r"(smem_addr(dst)),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
            : "memory");
}

// 3-D tile load into our own shared memory (e.g. one block of a paged cache: [blocks, rows, bytes]); kHint as
// for tma_load_2d.
template <bool kHint = false>
DGX_DEVICE void tma_load_3d(const TensorMap* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1, int32_t c2,
                            uint64_t policy = 0) {
    if constexpr (kHint)
        asm volatile(
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
            " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_addr(dst)),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "l"(policy)
            : "memory");
    else
        asm volatile(
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
                "r"(smem_addr(dst)),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
            : "memory");
}

// 2-D tile load delivered to the same shared-memory offset (data and barrier) in every CTA of `cta_mask`; kHint as
// for tma_load_2d.
template <bool kHint = false>
DGX_DEVICE void tma_load_2d_multicast(const TensorMap* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1,
                                      uint16_t cta_mask, uint64_t policy = 0) {
    if constexpr (kHint)
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
            ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5, %6;" ::"r"(smem_addr(dst)),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask), "l"(policy)
            : "memory");
    else
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
            "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
            "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
            : "memory");
}

// 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global into our own shared
// memory, completing on `bar`; kHint as for tma_load_2d. PTX ISA, "cp.async.bulk".
template <bool kHint = false>
DGX_DEVICE void bulk_load_1d(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy = 0) {
    if constexpr (kHint)
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
            ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
            : "memory");
    else
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
                     : "memory");
}

// 2-D tile store from shared memory; rows and columns outside the tensor are clipped by the hardware.
DGX_DEVICE void tma_store_2d(const TensorMap* map, const void* src, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

// 2-D tile reduction from shared memory: global += tile, element-wise, in the map's type (FP32 here).
DGX_DEVICE void tma_reduce_add_2d(const TensorMap* map, const void* src, int32_t c0, int32_t c1) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

// 3-D tile store and reduction from shared memory (e.g. one group's rows of a [groups, rows, N] output, so a tile
// past the group's last row is clipped there instead of landing in the next group's rows).
DGX_DEVICE void tma_store_3d(const TensorMap* map, const void* src, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

DGX_DEVICE void tma_reduce_add_3d(const TensorMap* map, const void* src, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

DGX_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until the committed stores have finished reading shared memory (the buffer may be rewritten).
DGX_DEVICE void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

// Waits until the committed stores are complete in global memory.
DGX_DEVICE void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) reads.
DGX_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace dgx
