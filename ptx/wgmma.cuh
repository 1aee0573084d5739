// Warpgroup MMA (sm_90a): shared-memory matrix descriptors and the fence/commit/wait protocol.
// The mma_async wrapper for one N is rendered by Python into the instantiation unit (its register list
// has N/2 operands), as a specialisation of WgmmaE4M3 declared here.
#pragma once
#include "common.cuh"

namespace dgx {

// Descriptor of a K-major tile of `rows` x 128 bytes in shared memory, 128-byte swizzled, as TMA writes
// it with CU_TENSOR_MAP_SWIZZLE_128B. PTX ISA "Matrix Descriptor Format": start address >> 4 in bits 0-13,
// leading byte offset (unused for swizzled K-major) in 16-29, stride byte offset >> 4 in 32-45 (8 rows of
// 128 bytes = 1024), swizzle mode in 62-63 (1 = 128B). The tile must be 1024-byte aligned (base offset 0).
DGX_DEVICE uint64_t make_smem_desc_sw128(const void* tile) {
    const uint64_t addr = smem_addr(tile);
    uint64_t desc = (addr & 0x3FFFFull) >> 4;
    desc |= 1ull << 16;
    desc |= (1024ull >> 4) << 32;
    desc |= 1ull << 62;
    return desc;
}

// Advancing along K inside a swizzled 128-byte row moves the start address only: the hardware applies
// the swizzle to the final address, so +32 bytes (one k32 step of e4m3) adds 2 to the field.
DGX_DEVICE uint64_t advance_desc(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

DGX_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

DGX_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

template <int kPending>
DGX_DEVICE void wgmma_wait() {
    static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMA.
DGX_DEVICE void fence_operand(float& reg) { asm volatile("" : "+f"(reg)::"memory"); }

// m64nNk32, e4m3 x e4m3 -> f32, both operands from shared memory. Specialised per N by the renderer.
template <int kN>
struct WgmmaE4M3;

}  // namespace dgx
