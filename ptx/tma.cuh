// Bulk tensor copies (TMA) between global and shared memory, completing on an mbarrier (loads) or a bulk
// group (stores). PTX ISA, "cp.async.bulk.tensor".
#pragma once
#include "common.cuh"

namespace dgx {

DGX_DEVICE void prefetch_tensor_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// 2-D tile load into our own shared memory; `bar` receives the byte count on completion.
DGX_DEVICE void tma_load_2d(const TensorMap* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
            "r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}

// 3-D tile load into our own shared memory (e.g. one block of a paged cache: [blocks, rows, bytes]).
DGX_DEVICE void tma_load_3d(const TensorMap* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
            "r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// 2-D tile load delivered to the same shared-memory offset (data and barrier) in every CTA of `cta_mask`.
DGX_DEVICE void tma_load_2d_multicast(const TensorMap* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1,
                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
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

DGX_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until the committed stores have finished reading shared memory (the buffer may be rewritten).
DGX_DEVICE void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

// Waits until the committed stores are complete in global memory.
DGX_DEVICE void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) reads.
DGX_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace dgx
