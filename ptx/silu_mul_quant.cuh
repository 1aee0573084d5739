// The standalone SwiGLU + FP8 quantisation between an MoE expert's two GEMMs:
//   x BF16 [rows, 2I] (gate = x[:, :I], up = x[:, I:]), optionally clamped (gate <= L, -L <= up <= L);
//   h = silu(gate) * up in FP32 (fast forms: exp as ex2.approx of a log2e prescale, the division as rcp.approx; the
//   precise expf and IEEE division are kept as a variant for A/B runs);
//   per row and 128 channels: sf = max(amax |h|, 1e-4) * RN(1 / 448) (UE8M0: rounded up to a power of two),
//   y = h * RN(1 / sf) as FP8 e4m3 (nearest even): the steps torch takes on the GPU for per_token_cast_to_fp8 of the
//   same FP32 h (its `amax / 448.0` multiplies by the rounded reciprocal of a scalar divisor), so those are exact.
// sf goes straight into the layout the FP8 GEMM reads A's scales in: M-major FP32 (sf[kb * ld + row]) or packed
// UE8M0 (byte kb % 4 of the int32 at [kb / 4 * ld + row]).
//
// Memory-bound: each row's 2I BF16 are read once, its I FP8 bytes and I/128 scales written once. A unit of work is
// one row's 128-channel block: 16 lanes (a half-warp) each load 8 gate and 8 up values with two 16-byte loads,
// reduce the block's amax with four shuffles, and store 8 FP8 bytes each (128 contiguous bytes per half-warp). A
// thread issues the loads of kUnroll units before any math, so enough bytes are in flight to cover HBM latency.
// Groups (masked layout): blockIdx.y; a group's rows past masked_m[g] are neither read nor written (the count is
// read on the GPU, so a captured graph replays with new counts).
#pragma once
#include "common.cuh"
#include "pdl.cuh"

namespace dgx {

enum SmqScaleMode : int {
    kSmqScaleFp32 = 0,    // sf = amax / 448 as FP32
    kSmqScaleUe8m0 = 1,   // that rounded up to a power of two, as FP32
    kSmqScalePacked = 2,  // the power of two's biased exponent, four k-blocks to an int32
};

struct SmqWords {
    uint32_t w[4];
};

// 16 bytes read once: no L1 allocation (nothing is re-read).
DGX_DEVICE SmqWords ld_global_stream_v4(const void* ptr) {
    SmqWords v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(ptr));
    return v;
}

DGX_DEVICE void st_global_u8(void* ptr, uint32_t v) {
    asm volatile("st.global.u8 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

// Two floats to two FP8 e4m3 bytes (nearest even; finite values past 448 saturate): `lo` in the low byte.
DGX_DEVICE uint32_t pack_e4m3x2(float lo, float hi) {
    uint16_t packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
    return packed;
}

DGX_DEVICE float ex2_approx_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

DGX_DEVICE float rcp_approx_ftz(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// silu(g) * u in FP32. Fast: g * (1 / (1 + 2^(-g log2e))) * u, two MUFU ops and four FP32 ops (the precise expf and
// IEEE division cost ~40 instructions an element, which made the kernel compute-bound on an H200); h is then within
// a few ulps of torch's silu * up. Precise: torch's order, g / (1 + expf(-g)) with IEEE division.
template <bool kFast>
DGX_DEVICE float silu_mul(float g, float u) {
    if constexpr (kFast) {
        constexpr float kMinusLog2e = -1.4426950408889634f;
        return g * rcp_approx_ftz(1.0f + ex2_approx_ftz(g * kMinusLog2e)) * u;
    } else {
        return __fdiv_rn(g, 1.0f + expf(-g)) * u;
    }
}

// The biased exponent of the smallest power of two at or above sf (sf > 0), kept to the normal range 1..254: what
// dgx.ue8m0.ceil_to_ue8m0 computes.
DGX_DEVICE uint32_t ue8m0_exponent(float sf) {
    const uint32_t bits = __float_as_uint(sf);
    uint32_t e = (bits >> 23) + ((bits & 0x7fffffu) != 0u ? 1u : 0u);
    return min(max(e, 1u), 254u);
}

template <int kThreads_, int kUnroll_, bool kClamp_, int kScaleMode_, bool kFastSilu_ = true>
struct SmqTraits {
    static constexpr int kThreads = kThreads_;
    static constexpr int kUnroll = kUnroll_;          // units a half-warp loads before its first math
    static constexpr bool kClamp = kClamp_;           // swiglu_limit given
    static constexpr int kScaleMode = kScaleMode_;
    static constexpr bool kFastSilu = kFastSilu_;    // ex2.approx / rcp.approx (false: expf and IEEE division)
    static constexpr int kBlock = 128;                // channels per scale
    static constexpr int kLanes = 16;                 // a half-warp per unit: 8 channels a lane
    static constexpr int kPerLane = kBlock / kLanes;
    static constexpr int kHalfWarps = kThreads / kLanes;
    static constexpr int kUnitsPerCta = kHalfWarps * kUnroll;

    static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024, "whole warps");
    static_assert(kPerLane == 8, "one 16-byte load of BF16 gate and of up per lane");
    static_assert(kUnroll >= 1 && kUnroll <= 8, "registers: 8 words of input per unit in flight");
    static_assert(kScaleMode >= kSmqScaleFp32 && kScaleMode <= kSmqScalePacked, "a known scale layout");
};

// Eight BF16 (four words, the lower element in the low half) widened to FP32.
DGX_DEVICE void widen_bf16x8(const SmqWords& v, float (&out)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = __uint_as_float(v.w[i] << 16);
        out[2 * i + 1] = __uint_as_float(v.w[i] & 0xffff0000u);
    }
}

// One unit's scale, written by the half-warp's first lane into the layout of the scale mode.
template <typename T, typename Params>
DGX_DEVICE void store_scale(const Params& p, int64_t g, int row, int kb, float sf, uint32_t exponent) {
    if constexpr (T::kScaleMode == kSmqScalePacked) {
        uint8_t* word = reinterpret_cast<uint8_t*>(p.sf + g * p.sf_group + (kb / 4) * p.sf_ld + row);
        st_global_u8(word + kb % 4, exponent);
        // The last k-block fills the rest of its word with zeros (what the packed layout holds past K / 128).
        if (kb == p.blocks - 1)
            for (int j = kb % 4 + 1; j < 4; ++j) st_global_u8(word + j, 0u);
    } else {
        st_global_f32(reinterpret_cast<float*>(p.sf) + g * p.sf_group + kb * p.sf_ld + row, sf);
    }
}

template <typename T, typename Params>
DGX_DEVICE void silu_mul_quant_body(const Params& p) {
    // PDL (ptx/pdl.cuh): no prologue; x and masked_m may be the predecessor's output.
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
    const int64_t g = blockIdx.y;
    int rows = p.rows;
    if (p.masked_m != nullptr) rows = min(max(ld_global_nc_s32(p.masked_m + g), 0), p.rows);
    // rows x blocks < 2^31 (checked by the host): unit indices, rows and k-blocks fit 32-bit ints.
    const int units = rows * p.blocks;
    const int cta_first = static_cast<int>(blockIdx.x) * T::kUnitsPerCta;
    if (cta_first >= units) return;  // the whole CTA is past the group's rows
    const int first = cta_first + static_cast<int>(threadIdx.x) / T::kLanes;
    const int lane = static_cast<int>(threadIdx.x % T::kLanes);
    const int64_t half = static_cast<int64_t>(p.blocks) * T::kBlock;  // I: where up starts in a row of x
    const uint16_t* x = p.x + g * p.x_group;

    SmqWords gate[T::kUnroll], up[T::kUnroll];
    // Each unit's row and k-block, divided once (unsigned: no sign fix-ups) and kept for the stores.
    uint32_t rows_of[T::kUnroll], kbs_of[T::kUnroll];
#pragma unroll
    for (int j = 0; j < T::kUnroll; ++j) {
        const int u = first + j * T::kHalfWarps;
        rows_of[j] = static_cast<uint32_t>(u) / static_cast<uint32_t>(p.blocks);
        kbs_of[j] = static_cast<uint32_t>(u) - rows_of[j] * static_cast<uint32_t>(p.blocks);
        if (u < units) {
            const uint16_t* at = x + static_cast<int64_t>(rows_of[j]) * p.x_row + kbs_of[j] * T::kBlock +
                                 lane * T::kPerLane;
            gate[j] = ld_global_stream_v4(at);
            up[j] = ld_global_stream_v4(at + half);
        } else {
            gate[j] = up[j] = SmqWords{{0u, 0u, 0u, 0u}};  // a unit past the rows: math on zeros, nothing stored
        }
    }
#pragma unroll
    for (int j = 0; j < T::kUnroll; ++j) {
        const int u = first + j * T::kHalfWarps;
        float gv[8], uv[8], h[8];
        widen_bf16x8(gate[j], gv);
        widen_bf16x8(up[j], uv);
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float gi = gv[i], ui = uv[i];
            if constexpr (T::kClamp) {
                gi = fminf(gi, p.limit);
                ui = fminf(fmaxf(ui, -p.limit), p.limit);
            }
            h[i] = silu_mul<T::kFastSilu>(gi, ui);
            amax = fmaxf(amax, fabsf(h[i]));
        }
        // The block's 16 lanes are one half of the warp: xor offsets below 16 stay inside it.
#pragma unroll
        for (int offset = 8; offset >= 1; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        // torch on the GPU divides by a scalar as a product with its rounded reciprocal: amax / 448.0 is
        // RN(amax * RN(1 / 448)), not RN(amax / 448) (they differ in the last bit for some amax).
        constexpr float kInvFp8Max = 1.0f / 448.0f;
        float sf = fmaxf(amax, 1e-4f) * kInvFp8Max;
        uint32_t exponent = 0;
        if constexpr (T::kScaleMode != kSmqScaleFp32) {
            exponent = ue8m0_exponent(sf);
            sf = __uint_as_float(exponent << 23);
        }
        const float inv = __frcp_rn(sf);  // torch: x * (1.0 / sf), the reciprocal rounded once
        if (u >= units) continue;
        const int row = static_cast<int>(rows_of[j]);
        const int kb = static_cast<int>(kbs_of[j]);
        uint32_t lo = pack_e4m3x2(h[0] * inv, h[1] * inv) | (pack_e4m3x2(h[2] * inv, h[3] * inv) << 16);
        uint32_t hi = pack_e4m3x2(h[4] * inv, h[5] * inv) | (pack_e4m3x2(h[6] * inv, h[7] * inv) << 16);
        uint8_t* y = p.y + g * p.y_group + static_cast<int64_t>(row) * p.y_row + kb * T::kBlock;
        st_global_v2_u32(y + lane * T::kPerLane, lo, hi);
        if (lane == 0) store_scale<T>(p, g, row, kb, sf, exponent);
    }
}

}  // namespace dgx
