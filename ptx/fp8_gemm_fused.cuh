// Fused epilogues of the FP8 GEMM kernel (ptx/fp8_gemm.cuh), chosen at compile time by the traits' Epi type:
// - FP8 output quantised per row per 128 output channels (the layout the next FP8 GEMM reads as its A), with its
//   scales as FP32, UE8M0-valued FP32 or UE8M0 bytes packed four to an int32 (DeepGEMM's packed layout);
// - SwiGLU before that quantisation: B's rows come in units of 256, 128 gate rows then the 128 up rows of the same
//   channels (dgx.prepare_gate_up). The scheduler hands a CTA both 128-wide halves of a unit one after the other;
//   the gate half leaves silu(gate) in shared memory (FP32, each thread its own values), the up half multiplies
//   it in and quantises, so every CTA writes whole 128-channel groups and no BF16 intermediate exists;
// - a run-time `alpha` on any output, and a per-row weight (MoE top-k weights) on the FP8 ones.
// Quantisation matches dgx's torch helpers bit for bit on the same FP32 values, in the operations torch runs on the
// GPU: amax clamped to 1e-4; scale `amax / 448.0`, which torch computes as amax * fl(1/448) (a division by a scalar
// is a multiplication by its rounded reciprocal), rounded up to a power of two for UE8M0; value * `(448.0 / amax)`,
// which torch computes as fl(1/amax) * 448 (Tensor.__rtruediv__ is reciprocal() * other), UE8M0: value * (1 /
// scale), exact; e4m3 with round-to-nearest-even and saturation.
#pragma once
#include "fp8_gemm.cuh"

namespace dgx {

template <bool kCond, typename A, typename B>
struct Select {
    using type = A;
};
template <typename A, typename B>
struct Select<false, A, B> {
    using type = B;
};

enum FusedScaleFormat : int { kSfFloat = 0, kSfUe8m0 = 1, kSfPacked = 2 };

// 1 / x rounded once (IEEE), as torch's reciprocal().
DGX_DEVICE float rcp_rn(float x) {
    float r;
    asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// fl(1/448): what torch multiplies by for `x / 448.0` on the GPU.
constexpr float kInvFp8Max = 1.0f / 448.0f;

// silu(x) = x / (1 + e^-x), with the approximate exp2 and reciprocal (a few ulp; the FP8 rounding that follows
// is 2^-4 relative).
DGX_DEVICE float silu(float x) {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    return x * r;
}

// The smallest power of two >= x (x positive and normal): the exponent, plus one if any mantissa bit is set.
DGX_DEVICE float ceil_pow2(float x) {
    const uint32_t bits = __float_as_uint(x);
    return __uint_as_float(((bits >> 23) + ((bits & 0x7fffffu) != 0u)) << 23);
}

// Two floats to e4m3 (round to nearest even, saturating), `lo` in the low byte.
DGX_DEVICE uint16_t pack_e4m3x2(float lo, float hi) {
    uint16_t packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
    return packed;
}

DGX_DEVICE void st_shared_u16(uint32_t addr, uint16_t v) {
    asm volatile("st.shared.b16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}

DGX_DEVICE void st_shared_f32(uint32_t addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

DGX_DEVICE void st_global_u16(void* ptr, uint16_t v) {
    asm volatile("st.global.b16 [%0], %1;" ::"l"(ptr), "h"(v) : "memory");
}

DGX_DEVICE void st_global_u8(void* ptr, uint32_t v) {
    asm volatile("st.global.b8 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

// SwiGLU units: the scheduler's units are 2 x kSubN columns wide, and each unit is returned as its two halves in
// turn (n_block counts halves). Relies on the caller keeping `t` between calls, as both roles do.
template <typename Base, int kSubN>
struct SubTileScheduler : Base {
    bool second = false;
    DGX_DEVICE SubTileScheduler(int m, const int* layout, int num_groups) : Base(m, layout, num_groups) {}
    DGX_DEVICE bool next_tile(Tile& t) {
        if (second) {
            second = false;
            t.n_block += 1;
            t.b_row += kSubN;
            return true;
        }
        if (!Base::next_tile(t)) return false;
        t.n_block *= 2;
        second = true;
        return true;
    }
};

// kFp8: FP8 output with scales (else BF16, with alpha only); kSwiglu, kClamp (swiglu_limit), kRowWeight, kAlpha;
// kSfFormat: FusedScaleFormat of the output scales.
template <bool kFp8, bool kSwiglu, bool kClamp, bool kRowWeight, bool kAlpha, int kSfFormat>
struct FusedEpilogue {
    static constexpr bool kFused = true;
    static_assert(kFp8 || (!kSwiglu && !kRowWeight), "SwiGLU and row weights are FP8-output epilogues");
    static_assert(!kClamp || kSwiglu, "swiglu_limit clamps SwiGLU's inputs");
    static_assert(kSfFormat >= kSfFloat && kSfFormat <= kSfPacked, "scale format: FP32, UE8M0 FP32 or packed");
    static constexpr int kGroup = 128;  // output channels per scale

    template <int kLayout, int kBlockM, int kBlockN, int kNumNBlocks, int kNumKBlocks, int kGroupN, int kPair, int kN,
              int kSplit>
    using Scheduler = typename Select<
        kSwiglu,
        SubTileScheduler<TileScheduler<kLayout, kBlockM, 2 * kBlockN, kNumNBlocks / 2, kNumKBlocks, kGroupN, kPair, kN,
                                       kSplit>,
                         kBlockN>,
        TileScheduler<kLayout, kBlockM, kBlockN, kNumNBlocks, kNumKBlocks, kGroupN, kPair, kN, kSplit>>::type;

    // Shared memory of the output: the FP8 tile (BLOCK_M rows of 128 bytes), then SwiGLU's silu(gate) stash.
    static constexpr uint32_t smem_d_bytes(int block_m, int block_n) {
        return kFp8 ? block_m * kGroup + (kSwiglu ? block_m * kGroup * 4 : 0) : block_m * block_n * 2;
    }

    template <typename T, typename Scheduler, typename Params>
    static DGX_DEVICE void store(const Tile& tile, int n_start, float (&result)[T::kMmaPerWG][T::kAccum],
                                 const MathThread& t, uint8_t* smem_d, const Params& params) {
        static_assert(!T::kWgrad && T::kSplit == 1, "fused epilogues: BF16-path GEMMs without split-K");
        if constexpr (!kFp8) {
#pragma unroll
            for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
                for (int i = 0; i < T::kAccum; ++i) result[mm][i] *= params.alpha;
            store_tile<T, Scheduler>(tile, n_start, result, t, smem_d, params.tmap_d, params.d_ptr, params.ld_d,
                                     nullptr, 0, T::kN);
        } else {
            store_fp8<T, Scheduler>(tile, result, t, smem_d, params);
        }
    }

    template <typename T, typename Scheduler, typename Params>
    static DGX_DEVICE void store_fp8(const Tile& tile, float (&result)[T::kMmaPerWG][T::kAccum], const MathThread& t,
                                     uint8_t* smem_d, const Params& params) {
        static_assert(T::kBlockN == kGroup, "FP8 output: a tile (SwiGLU: half a unit) is one 128-channel group");
        // Each thread's own stash slots, T::kMathThreads floats apart: a warp's store fills 32 banks once.
        const uint32_t stash = smem_addr(smem_d + T::kBlockM * kGroup) + threadIdx.x * 4;
        if constexpr (kSwiglu) {
            if (tile.n_block % 2 == 0) {  // the gate half: keep silu(gate) for the up half
#pragma unroll
                for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
                    for (int i = 0; i < T::kAccum; ++i) {
                        const float g = kClamp ? fminf(result[mm][i], params.swiglu_limit) : result[mm][i];
                        st_shared_f32(stash + (mm * T::kAccum + i) * T::kMathThreads * 4, silu(g));
                    }
                return;
            }
        }
        const int n_out = (kSwiglu ? tile.n_block / 2 : tile.n_block) * kGroup;
        const int wg_row = tile.d_row + static_cast<int>(t.wg * T::kWGRows);
        uint8_t* region = smem_d + t.wg * T::kWGRows * kGroup;
        const bool leader = threadIdx.x % 128 == 0;
        const bool rows_partial = Scheduler::kLayout == kLayoutMasked && wg_row + T::kWGRows > tile.d_row_end;
        if (leader && !rows_partial) tma_store_wait_read();  // the previous tile's store has left this buffer
        named_barrier_sync(1 + t.wg, 128);
        float scales[T::kMmaPerWG][2];
#pragma unroll
        for (int mm = 0; mm < T::kMmaPerWG; ++mm) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row_local = mm * 64 + static_cast<int>(t.row_in_wg) + h * 8;
                const int row = wg_row + row_local;
                float factor = 1.0f;
                if constexpr (kAlpha) factor = params.alpha;
                if constexpr (kRowWeight) factor *= row < tile.d_row_end ? ld_global_nc(params.row_weight + row) : 0.0f;
                float amax = 0.0f;
#pragma unroll
                for (int i = 0; i < T::kBlockN / 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int idx = i * 4 + h * 2 + e;
                        float v = result[mm][idx];
                        if constexpr (kSwiglu) {
                            const float up = kClamp ? fminf(fmaxf(v, -params.swiglu_limit), params.swiglu_limit) : v;
                            v = ld_shared_f32(stash + (mm * T::kAccum + idx) * T::kMathThreads * 4) * up;
                        }
                        if constexpr (kAlpha || kRowWeight) v *= factor;
                        result[mm][idx] = v;
                        amax = fmaxf(amax, fabsf(v));
                    }
                // The row's 128 channels lie with the 4 threads of a quad.
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                amax = fmaxf(amax, 1e-4f);
                // Two roundings each, as torch's `amax / 448.0` and `448.0 / amax` (see the top of this file).
                float sf = amax * kInvFp8Max, mul;
                if constexpr (kSfFormat == kSfFloat) {
                    mul = rcp_rn(amax) * 448.0f;
                } else {
                    sf = ceil_pow2(sf);
                    mul = rcp_rn(sf);  // exact: a power of two
                }
                scales[mm][h] = sf;
#pragma unroll
                for (int i = 0; i < T::kBlockN / 8; ++i) {
                    const int col = i * 8 + static_cast<int>(t.col_in_8);
                    const uint16_t q = pack_e4m3x2(result[mm][i * 4 + h * 2] * mul, result[mm][i * 4 + h * 2 + 1] * mul);
                    if (rows_partial) {
                        // A masked group's rows end inside this warpgroup's: rows past the count stay untouched.
                        if (row < tile.d_row_end)
                            st_global_u16(static_cast<uint8_t*>(params.d_ptr) + static_cast<int64_t>(row) * params.ld_d +
                                              n_out + col, q);
                    } else {
                        st_shared_u16(smem_addr(region) + swizzle_offset<128>(row_local * kGroup + col), q);
                    }
                }
            }
        }
        if (!rows_partial) {
            fence_proxy_async_shared();
            named_barrier_sync(1 + t.wg, 128);
            if (leader && wg_row < tile.d_row_end) {
                tma_store_2d(&params.tmap_d, region, n_out, wg_row);
                tma_store_commit();
            }
        }
        // The scales: one thread of each quad writes its two rows' (M-major: rows of a column group adjacent).
        if (t.col_in_8 == 0) {
            const int group_col = n_out / kGroup;
            const int64_t group_base = Scheduler::kLayout == kLayoutMasked ? tile.group * params.sf_group_stride : 0;
#pragma unroll
            for (int mm = 0; mm < T::kMmaPerWG; ++mm)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row_local = static_cast<int>(t.wg * T::kWGRows) + mm * 64 + static_cast<int>(t.row_in_wg) + h * 8;
                    if (tile.d_row + row_local >= tile.d_row_end) continue;
                    const int64_t m_index = tile.sfa_row + row_local;  // the row within its group
                    if constexpr (kSfFormat == kSfPacked) {
                        const int64_t word = group_base + (group_col / 4) * params.ld_sf + m_index;
                        st_global_u8(static_cast<uint8_t*>(params.sf_out) + word * 4 + group_col % 4,
                                     __float_as_uint(scales[mm][h]) >> 23);
                    } else {
                        st_global_f32(static_cast<float*>(params.sf_out) + group_base + group_col * params.ld_sf + m_index,
                                      scales[mm][h]);
                    }
                }
        }
    }
};

}  // namespace dgx
