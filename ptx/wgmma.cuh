// Warpgroup MMA (sm_90a): shared-memory matrix descriptors and the fence/commit/wait protocol.
// The mma_async wrapper for one N is rendered by Python into the instantiation unit (its register list
// has N/2 operands), as a specialisation of WgmmaE4M3 declared here.
#pragma once
#include "common.cuh"

namespace dgx {

// Descriptor of a K-major tile whose rows are kRowBytes (32, 64 or 128) long, swizzled at that width, as TMA
// writes it with CU_TENSOR_MAP_SWIZZLE_32B/64B/128B. PTX ISA "Matrix Descriptor Format": start address >> 4 in
// bits 0-13, leading byte offset (unused for swizzled K-major) in 16-29, stride byte offset >> 4 in 32-45 (8 rows),
// layout type in 62-63 (1 = 128B, 2 = 64B, 3 = 32B). The tile must be aligned to 8 rows (base offset 0).
template <int kRowBytes>
DGX_DEVICE uint64_t make_smem_desc_kmajor(const void* tile) {
    static_assert(kRowBytes == 32 || kRowBytes == 64 || kRowBytes == 128, "rows of 32, 64 or 128 bytes");
    constexpr uint64_t kLayout = kRowBytes == 128 ? 1 : (kRowBytes == 64 ? 2 : 3);
    uint64_t desc = (static_cast<uint64_t>(smem_addr(tile)) & 0x3FFFFull) >> 4;
    desc |= 1ull << 16;
    desc |= static_cast<uint64_t>(8 * kRowBytes >> 4) << 32;
    desc |= kLayout << 62;
    return desc;
}

// The GEMM's operand tiles: rows of 128 bytes (128 of K in e4m3), 128-byte swizzled.
DGX_DEVICE uint64_t make_smem_desc_sw128(const void* tile) { return make_smem_desc_kmajor<128>(tile); }

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
