// Basic types and helpers shared by every dgx kernel.
// dgx compiles with NVRTC and includes no CUDA toolkit header, so the few types we need are spelled here.
#pragma once

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

#define DGX_DEVICE __device__ __forceinline__

namespace dgx {

// Opaque 128-byte tensor map (CUtensorMap), passed by value as a __grid_constant__ kernel parameter.
struct alignas(64) TensorMap {
    uint64_t opaque[16];
};

template <typename T>
DGX_DEVICE constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

// A compile-time int passed as a value, so a generic lambda can be instantiated per constant.
template <int kValue>
struct IntConst {
    static constexpr int value = kValue;
};

// Calls f(IntConst<v>{}) for the v in kFirst, kFirst + kStep, ... kLast that equals `value`, or
// f(IntConst<-1>{}) when none does: turns a run-time value with few possibilities into a template one.
template <int kFirst, int kStep, int kLast, typename F>
DGX_DEVICE void dispatch_int(int value, F&& f) {
    static_assert(kStep > 0, "the candidates must increase");
    if constexpr (kFirst > kLast) {
        f(IntConst<-1>{});
    } else {
        if (value == kFirst)
            f(IntConst<kFirst>{});
        else
            dispatch_int<kFirst + kStep, kStep, kLast>(value, f);
    }
}

// Calls f(IntConst<kBegin>{}), f(IntConst<kBegin + 1>{}), ... f(IntConst<kEnd - 1>{}) in order: a loop whose
// index is a compile-time constant in the body (for template arguments and register-array indices).
template <int kBegin, int kEnd, typename F>
DGX_DEVICE void static_for(F&& f) {
    if constexpr (kBegin < kEnd) {
        f(IntConst<kBegin>{});
        static_for<kBegin + 1, kEnd>(f);
    }
}

// 32-bit shared-state-space address of a generic pointer into shared memory.
DGX_DEVICE uint32_t smem_addr(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

DGX_DEVICE uint32_t lane_id() {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// Warp-uniform index of the calling warp, so branches on it need no divergence handling.
DGX_DEVICE uint32_t warp_id() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
}

// True on exactly one lane of the warp.
DGX_DEVICE bool elect_one() {
    uint32_t pred = 0;
    asm volatile(
        "{\n.reg .pred p;\n"
        "elect.sync _|p, 0xffffffff;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(pred));
    return pred != 0;
}

// Named barrier among `count` threads (a multiple of 32); id 0 is __syncthreads().
DGX_DEVICE void named_barrier_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

DGX_DEVICE float ld_shared_f32(uint32_t addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

DGX_DEVICE int ld_global_nc_s32(const int* ptr) {
    int v;
    asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(ptr));
    return v;
}

DGX_DEVICE void st_global_u32(void* ptr, uint32_t v) {
    asm volatile("st.global.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

DGX_DEVICE void st_global_f32(void* ptr, float v) {
    asm volatile("st.global.f32 [%0], %1;" ::"l"(ptr), "f"(v) : "memory");
}

// One float stored as bf16 (round to nearest even).
DGX_DEVICE void st_global_bf16(void* ptr, float v) {
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    asm volatile("st.global.b16 [%0], %1;" ::"l"(ptr), "h"(h) : "memory");
}

struct F32x2 {
    float x, y;
};

DGX_DEVICE F32x2 ld_shared_f32x2(uint32_t addr) {
    F32x2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
}

DGX_DEVICE float ld_global_nc(const float* ptr) {
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(ptr));
    return v;
}

struct F32x4 {
    float x, y, z, w;
};

DGX_DEVICE void st_shared_v4_f32(uint32_t addr, const F32x4& v) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}

DGX_DEVICE F32x4 ld_global_nc_f32x4(const float* ptr) {
    F32x4 v;
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(ptr));
    return v;
}

DGX_DEVICE void st_global_v2_u32(void* ptr, uint32_t a, uint32_t b) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(ptr), "r"(a), "r"(b) : "memory");
}

DGX_DEVICE void st_global_v4_f32(void* ptr, const F32x4& v) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}

// A coherent load (not .nc): for data this kernel also writes.
DGX_DEVICE F32x4 ld_global_f32x4(const void* ptr) {
    F32x4 v;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(ptr)
                 : "memory");
    return v;
}

// Two floats packed into one bf16x2 word, round to nearest even: `lo` in the low half.
DGX_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
    return packed;
}

// stmatrix (sm_90): the warp stores 8x8 matrices of 16-bit elements to shared memory. Register j of lane t
// holds row t / 4, columns 2 (t % 4) and +1 of matrix j - the layout of a wgmma accumulator fragment after
// packing pairs to bf16x2 - and lane 8 j + r gives the address of row r of matrix j (16 contiguous bytes).
DGX_DEVICE void stmatrix_x4(uint32_t addr, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(m0), "r"(m1),
                 "r"(m2), "r"(m3)
                 : "memory");
}

DGX_DEVICE void stmatrix_x2(uint32_t addr, uint32_t m0, uint32_t m1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" ::"r"(addr), "r"(m0), "r"(m1) : "memory");
}

DGX_DEVICE void st_shared_v2_f32(uint32_t addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// Warpgroup register reallocation (sm_90a). Takes effect only with a register cap at entry
// (__launch_bounds__(threads, 1)) and with each role in one branch.
template <uint32_t kRegs>
DGX_DEVICE void setmaxnreg_inc() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <uint32_t kRegs>
DGX_DEVICE void setmaxnreg_dec() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace dgx
