// The HyperConnection pre-norm GEMM: for BF16 a [M, K] and FP32 b [N, K] (N small),
//   d[m, n] = sum_k a[m, k] * tf32(b[n, k])   on TF32 tensor cores, FP32 out;
//   s[m]    = sum_k a[m, k]^2                  in FP32 on the CUDA cores.
// tf32() rounds to nearest even, as cuBLAS's TF32 GEMM reads an FP32 operand (a wgmma reading FP32 from shared
// memory would drop the low 13 bits instead: a bias of ~4e-4 against torch's product); a's BF16 values are TF32
// values already. Memory-bound: a is read once, so the kernel is a TMA stream of a's rows with the math riding on it.
//
// One CTA: kBlockM rows (one or two math warpgroups of 64) and one range of K, handed by a producer warp through a
// ring of stages (a's [kBlockM x 64] BF16 tile, b's [N x 64] FP32 tile as two 128-byte swizzled halves). A rounding
// warp rounds each stage's b tile in place once it lands. A math thread loads its wgmma A fragment from the BF16
// tile, widens it to FP32 (exact), adds the squares of its elements, and issues m64nNk8 TF32 wgmmas with the
// fragment in registers and b from shared memory, one stage's MMAs in flight while it loads the next.
// The K ranges: the caller's kSplits splits, each over the kCluster CTAs of a cluster, whose partial tiles are summed
// through distributed shared memory in rank order. Every sum has a fixed order: the result is bitwise the same on
// every run.
#pragma once
#include "cluster.cuh"
#include "common.cuh"
#include "mbarrier.cuh"
#include "pdl.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace dgx {

// m64nNk8 tf32 x tf32 -> f32 with A from registers (a thread's four values: rows r, r + 8 at columns c, then
// c + 4) and B from a shared-memory descriptor; accumulates. Specialised per N by dgx.kernels.hc_prenorm.
template <int kN>
struct WgmmaTf32Rs;

// A 16-bit shared-memory value, zero-extended.
DGX_DEVICE uint32_t ld_shared_u16(uint32_t addr) {
    uint16_t v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
    return v;
}

// An FP32 value rounded to TF32, to nearest even (sm_90: one F2FP): the FP32 layout with the low 13 bits zero, which
// is what a TF32 wgmma reads.
DGX_DEVICE uint32_t tf32_rn(uint32_t bits) {
    uint32_t out;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(out) : "f"(__uint_as_float(bits)));
    return out;
}

struct U32x4 {
    uint32_t x, y, z, w;
};

DGX_DEVICE U32x4 ld_shared_u32x4(uint32_t addr) {
    U32x4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
                 : "memory");
    return v;
}

DGX_DEVICE void st_shared_u32x4(uint32_t addr, const U32x4& v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// One float from the shared memory of any CTA of the cluster (`addr` from map_shared_rank).
DGX_DEVICE float ld_shared_cluster_f32(uint32_t addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

template <int kN_, int kK_, int kBlockM_, int kSplits_, int kCluster_, int kStages_>
struct HcPrenormTraits {
    static constexpr int kN = kN_;                   // columns of d
    static constexpr int kNPad = (kN + 7) / 8 * 8;   // wgmma N; b's rows past N arrive as zeros
    static constexpr int kK = kK_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockK = 64;               // BF16: one 128-byte row of the swizzled a tile
    static constexpr int kSplits = kSplits_;         // the caller's splits, each its own slice of d and s
    static constexpr int kCluster = kCluster_;       // CTAs summing one split's K ranges
    static constexpr int kStages = kStages_;
    static constexpr int kMathWarpgroups = kBlockM / 64;
    static constexpr int kMathThreads = 128 * kMathWarpgroups;
    static constexpr int kThreads = kMathThreads + 64;  // the producer warp, then the rounding warp
    static constexpr int kKBlocks = (kK + kBlockK - 1) / kBlockK;
    static constexpr int kRanges = kSplits * kCluster;
    static constexpr int kSmemA = kBlockM * kBlockK * 2;
    static constexpr int kSmemBHalf = kNPad * 128;   // 32 floats of K per row: one 128-byte swizzle span
    static constexpr int kSmemStage = kSmemA + 2 * kSmemBHalf;
    // A cluster's partial results: the tile [kBlockM, kNPad], then the rows' sums of squares.
    static constexpr int kPartialFloats = kBlockM * kNPad + kBlockM;
    static constexpr int kSmemPartial = kCluster > 1 ? (kPartialFloats * 4 + 1023) / 1024 * 1024 : 0;
    // Barriers per stage: full (TMA landed), ready (b rounded), empty (the math warpgroups' MMAs read it).
    static constexpr int kSmemBytes = kStages * kSmemStage + kSmemPartial + 3 * kStages * 8;
    static constexpr int kAccum = kNPad / 2;         // accumulators per thread (m64nN: N / 2)
    static constexpr int kSteps = kBlockK / 8;       // k8 wgmmas per stage
    static constexpr int kBVectorsPerLane = 2 * kSmemBHalf / 16 / 32;  // 16-byte pieces of b a rounding lane takes

    static_assert(kBlockM == 64 || kBlockM == 128, "one or two math warpgroups of 64 rows");
    static_assert(kN >= 1 && kNPad <= 64, "N up to 64 (N / 2 accumulators a thread)");
    static_assert(kSmemA % 1024 == 0 && kSmemBHalf % 1024 == 0, "swizzled tiles stay 1024-byte aligned");
    static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8 || kCluster == 16,
                  "clusters of 1-8 CTAs, or 16 (non-portable: the launcher allows it)");
    static_assert(2 * kSmemBHalf % (16 * 32) == 0, "the rounding warp's lanes take equal shares of b");
    static_assert(static_cast<long long>(kKBlocks) * kRanges < (1ll << 31), "range bounds fit an int");
    static_assert(kSmemBytes <= 232448, "Hopper gives a block at most 227 KB of shared memory");
};

// The CTA's work: its row block, its split, its rank in the cluster and its range of k-blocks (range
// split * kCluster + rank of the kRanges equal ranges).
template <typename T>
struct HcWork {
    int m0, split, rank, kb_begin, kb_end;
    DGX_DEVICE HcWork() {
        const int cta = static_cast<int>(blockIdx.x);
        rank = cta % T::kCluster;
        split = (cta / T::kCluster) % T::kSplits;
        m0 = cta / (T::kCluster * T::kSplits) * T::kBlockM;
        const int range = split * T::kCluster + rank;
        kb_begin = range * T::kKBlocks / T::kRanges;
        kb_end = (range + 1) * T::kKBlocks / T::kRanges;
    }
};

// The producer: a's tile (L2 evict-first: read once) and b's two halves (read by every row block) per stage.
template <typename T, typename Params>
DGX_DEVICE void hc_produce(const Params& p, uint8_t* smem, uint64_t* full, uint64_t* empty, const HcWork<T>& w) {
    const uint64_t policy = l2_evict_first_policy();
    int s = 0;
    uint32_t phase = 0;
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        mbarrier_wait(&empty[s], phase ^ 1);
        uint8_t* stage = smem + s * T::kSmemStage;
        // Boxes past M, N or K are filled with zeros and still count their full size.
        mbarrier_arrive_expect_tx(&full[s], T::kSmemStage);
        tma_load_2d<true>(&p.tmap_a, &full[s], stage, kb * T::kBlockK, w.m0, policy);
        tma_load_2d(&p.tmap_b, &full[s], stage + T::kSmemA, kb * T::kBlockK, 0);
        tma_load_2d(&p.tmap_b, &full[s], stage + T::kSmemA + T::kSmemBHalf, kb * T::kBlockK + 32, 0);
        if (++s == T::kStages) {
            s = 0;
            phase ^= 1;
        }
    }
}

// The rounding warp: each stage's b tile, once it has landed, rounded in place to TF32 (nearest even), then handed to
// the math warpgroups (ready). Its generic-proxy writes are fenced before the arrival, so the wgmmas (async proxy)
// read the rounded values, and the producer's next TMA into the stage comes after them (the math warpgroups hand the
// stage back only after their MMAs, which wait for ready).
template <typename T>
DGX_DEVICE void hc_round_b(uint8_t* smem, uint64_t* full, uint64_t* ready, const HcWork<T>& w) {
    const uint32_t first = smem_addr(smem + T::kSmemA) + lane_id() * 16;
    int s = 0;
    uint32_t phase = 0;
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        mbarrier_wait(&full[s], phase);
        const uint32_t b = first + s * T::kSmemStage;
        U32x4 v[T::kBVectorsPerLane];
#pragma unroll
        for (int i = 0; i < T::kBVectorsPerLane; ++i) v[i] = ld_shared_u32x4(b + i * 512);
#pragma unroll
        for (int i = 0; i < T::kBVectorsPerLane; ++i) {
            v[i] = {tf32_rn(v[i].x), tf32_rn(v[i].y), tf32_rn(v[i].z), tf32_rn(v[i].w)};
            st_shared_u32x4(b + i * 512, v[i]);
        }
        fence_proxy_async_shared();
        mbarrier_arrive(&ready[s]);
        if (++s == T::kStages) {
            s = 0;
            phase ^= 1;
        }
    }
}

// A math thread's part of the stage's a tile, as wgmma wants it: for step j (k = 8 j .. 8 j + 7), rows r and r + 8
// at columns 8 j + c and 8 j + c + 4, widened to FP32 bit patterns (a BF16 value is the high half of its FP32);
// their squares go into sq[0] (row r) and sq[1] (row r + 8) in a fixed order. `a_row` is the shared address of
// the thread's element (r, c) in stage 0 before the swizzle; the 128B swizzle XORs the 16-byte unit with r % 8.
template <typename T>
DGX_DEVICE void load_fragment(uint32_t a_row, uint32_t swizzle, uint32_t (&frag)[T::kSteps][4], float (&sq)[2]) {
#pragma unroll
    for (int j = 0; j < T::kSteps; ++j) {
        const uint32_t at = a_row + ((static_cast<uint32_t>(j) ^ swizzle) << 4);
        frag[j][0] = ld_shared_u16(at) << 16;
        frag[j][1] = ld_shared_u16(at + 8 * 128) << 16;
        frag[j][2] = ld_shared_u16(at + 8) << 16;
        frag[j][3] = ld_shared_u16(at + 8 * 128 + 8) << 16;
    }
#pragma unroll
    for (int j = 0; j < T::kSteps; ++j) {
        const float r0c0 = __uint_as_float(frag[j][0]), r1c0 = __uint_as_float(frag[j][1]);
        const float r0c4 = __uint_as_float(frag[j][2]), r1c4 = __uint_as_float(frag[j][3]);
        sq[0] = fmaf(r0c4, r0c4, fmaf(r0c0, r0c0, sq[0]));
        sq[1] = fmaf(r1c4, r1c4, fmaf(r1c0, r1c0, sq[1]));
    }
}

// A math warpgroup: its 64 rows over the CTA's k-blocks. Returns the accumulators (row r + 8 h, column
// 8 i + 2 c + e in register 4 i + 2 h + e; PTX ISA, wgmma D fragment) and each row's sum of squares, reduced over
// the quad of threads that share the row (every lane of the quad ends with the same bits).
// Pipelined one stage deep: stage i's MMAs stay in flight while the thread loads stage i + 1's fragment; the wait
// after stage i + 1's issue completes them, hands stage i back, and frees its fragment registers (set i % 2), which
// stage i + 2 loads into. So the tensor cores always have the next stage queued.
template <typename T>
DGX_DEVICE void hc_math(uint8_t* smem, uint64_t* full, uint64_t* ready, uint64_t* empty, const HcWork<T>& w,
                        uint32_t wg, float (&acc)[T::kAccum], float (&sq)[2]) {
    const uint32_t lane = lane_id();
    const uint32_t row = wg * 64 + (warp_id() % 4) * 16 + lane / 4;  // the thread's first row in the tile
    const uint32_t a_row = smem_addr(smem) + row * 128 + (lane % 4) * 2;
    const uint32_t swizzle = row % 8;
    const uint64_t desc_b = make_smem_desc_kmajor<128>(smem + T::kSmemA);
#pragma unroll
    for (int i = 0; i < T::kAccum; ++i) acc[i] = 0.0f;
    sq[0] = sq[1] = 0.0f;
    uint32_t frag[2][T::kSteps][4];
    int s = 0, previous = 0;
    uint32_t phase = 0;
    const int count = w.kb_end - w.kb_begin;
    auto stage = [&](auto set, int i) {
        constexpr int kSet = decltype(set)::value;
        mbarrier_wait(&full[s], phase);   // a's tile (read by this thread's loads below)
        mbarrier_wait(&ready[s], phase);  // b rounded
        load_fragment<T>(a_row + s * T::kSmemStage, swizzle, frag[kSet], sq);
#pragma unroll
        for (int r = 0; r < T::kAccum; ++r) fence_operand(acc[r]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < T::kSteps; ++j) {
            // Step j reads b's k-rows 8 j .. 8 j + 7: half j / 4, 32 bytes per step inside its swizzled rows.
            const uint32_t offset = s * T::kSmemStage + (j / 4) * T::kSmemBHalf + (j % 4) * 32;
            WgmmaTf32Rs<T::kNPad>::mma(frag[kSet][j], advance_desc(desc_b, offset), acc);
        }
        wgmma_commit();
#pragma unroll
        for (int r = 0; r < T::kAccum; ++r) fence_operand(acc[r]);
        if (i > 0) {
            wgmma_wait<1>();  // the previous stage's MMAs are done: its b tile, a tile and fragment are free
            mbarrier_arrive(&empty[previous]);
        }
        previous = s;
        if (++s == T::kStages) {
            s = 0;
            phase ^= 1;
        }
    };
    for (int i = 0; i < count; i += 2) {
        stage(IntConst<0>{}, i);
        if (i + 1 < count) stage(IntConst<1>{}, i + 1);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < T::kAccum; ++r) fence_operand(acc[r]);
    if (count > 0) mbarrier_arrive(&empty[previous]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        sq[h] += __shfl_xor_sync(0xffffffffu, sq[h], 1);
        sq[h] += __shfl_xor_sync(0xffffffffu, sq[h], 2);
    }
}

template <typename T, typename Params>
DGX_DEVICE float* d_slice(const Params& p, int split) {
    return p.d + split * p.d_split_stride;
}

template <typename T, typename Params>
DGX_DEVICE float* s_slice(const Params& p, int split) {
    return p.s + split * p.s_split_stride;
}

// Without a cluster: the thread's results straight to d and s (rows past M and columns past N are not stored).
template <typename T, typename Params>
DGX_DEVICE void hc_store(const Params& p, const HcWork<T>& w, uint32_t wg, const float (&acc)[T::kAccum],
                         const float (&sq)[2]) {
    const uint32_t lane = lane_id();
    const int row = w.m0 + static_cast<int>(wg * 64 + (warp_id() % 4) * 16 + lane / 4);
    const int col0 = 2 * static_cast<int>(lane % 4);
    float* d = d_slice<T>(p, w.split);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = row + 8 * h;
        if (r >= p.m) continue;
        float* out = d + r * p.d_row_stride;
#pragma unroll
        for (int i = 0; i < T::kNPad / 8; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = 8 * i + col0 + e;
                if (col < T::kN) st_global_f32(out + col, acc[4 * i + 2 * h + e]);
            }
        }
        if (lane % 4 == 0) st_global_f32(s_slice<T>(p, w.split) + r, sq[h]);
    }
}

// With a cluster: the thread's results into this CTA's partial tile ([row][kNPad], then the rows' sums).
template <typename T>
DGX_DEVICE void hc_stage_partial(float* partial, uint32_t wg, const float (&acc)[T::kAccum], const float (&sq)[2]) {
    const uint32_t lane = lane_id();
    const uint32_t row = wg * 64 + (warp_id() % 4) * 16 + lane / 4;
    const uint32_t col0 = 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < T::kNPad / 8; ++i)
            st_shared_v2_f32(smem_addr(partial + (row + 8 * h) * T::kNPad + 8 * i + col0), acc[4 * i + 2 * h],
                             acc[4 * i + 2 * h + 1]);
    }
    if (lane % 4 == 0) {
        partial[T::kBlockM * T::kNPad + row] = sq[0];
        partial[T::kBlockM * T::kNPad + row + 8] = sq[1];
    }
}

// With a cluster, after every CTA staged its partial: CTA `rank` sums its share of the partial values (the
// rank-th of kCluster equal runs) over ranks 0, 1, ... in that order and stores them.
template <typename T, typename Params>
DGX_DEVICE void hc_reduce_cluster(const Params& p, const HcWork<T>& w, const float* partial) {
    constexpr int kTile = T::kBlockM * T::kNPad;
    const int first = w.rank * T::kPartialFloats / T::kCluster;
    const int last = (w.rank + 1) * T::kPartialFloats / T::kCluster;
    const uint32_t base = smem_addr(partial);
    float* d = d_slice<T>(p, w.split);
    float* s = s_slice<T>(p, w.split);
    for (int e = first + static_cast<int>(threadIdx.x); e < last; e += T::kThreads) {
        const uint32_t at = base + static_cast<uint32_t>(e) * 4;
        float sum = ld_shared_cluster_f32(map_shared_rank(at, 0));
#pragma unroll
        for (int r = 1; r < T::kCluster; ++r) sum += ld_shared_cluster_f32(map_shared_rank(at, r));
        if (e < kTile) {
            const int row = w.m0 + e / T::kNPad, col = e % T::kNPad;
            if (row < p.m && col < T::kN) st_global_f32(d + row * p.d_row_stride + col, sum);
        } else {
            const int row = w.m0 + e - kTile;
            if (row < p.m) st_global_f32(s + row, sum);
        }
    }
}

template <typename T, typename Params>
DGX_DEVICE void hc_prenorm_body(const Params& p) {
    extern __shared__ __align__(1024) uint8_t smem[];
    float* partial = reinterpret_cast<float*>(smem + T::kStages * T::kSmemStage);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kStages * T::kSmemStage + T::kSmemPartial);
    uint64_t* ready = full + T::kStages;
    uint64_t* empty = ready + T::kStages;
    const uint32_t warp = warp_id();
    constexpr uint32_t kProducerWarp = T::kMathThreads / 32;
    constexpr uint32_t kRoundingWarp = kProducerWarp + 1;
    if (warp == kProducerWarp && lane_id() == 0) {
        prefetch_tensor_map(&p.tmap_a);
        prefetch_tensor_map(&p.tmap_b);
        for (int s = 0; s < T::kStages; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&ready[s], 32);  // every lane of the rounding warp publishes its own writes
            mbarrier_init(&empty[s], T::kMathThreads);
        }
        fence_barrier_init();
    }
    __syncthreads();
    // PDL (ptx/pdl.cuh): every role reads or writes global memory from here on.
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
    const HcWork<T> w;
    if (warp == kProducerWarp) {
        if (lane_id() == 0) hc_produce<T>(p, smem, full, empty, w);
    } else if (warp == kRoundingWarp) {
        hc_round_b<T>(smem, full, ready, w);
    } else {
        float acc[T::kAccum];
        float sq[2];
        hc_math<T>(smem, full, ready, empty, w, warp / 4, acc, sq);
        if constexpr (T::kCluster == 1)
            hc_store<T>(p, w, warp / 4, acc, sq);
        else
            hc_stage_partial<T>(partial, warp / 4, acc, sq);
    }
    if constexpr (T::kCluster > 1) {
        cluster_sync();  // every CTA's partial is staged (release / acquire at cluster scope)
        hc_reduce_cluster<T>(p, w, partial);
        cluster_sync();  // no CTA leaves while a peer may still read its partial
    }
}

}  // namespace dgx
