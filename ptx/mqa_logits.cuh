// FP8 MQA logits of the DeepSeek-V3.2 indexer, prefill (contiguous KV) and decode (paged KV):
//   logits[q, j] = scale[j] * sum_h weights[q, h] * relu(Q[q, h, :] . KV[j, :])
// (scale[j] > 0, so applying it after the ReLU and the head sum is the same function with one multiply per
// logit instead of one per head.)
//
// One CTA: a producer warpgroup (one thread issues TMA; in prefill its other three warps write -inf outside the
// windows) and two or three math warpgroups. Work comes in groups: a group is a block of kBlockQ query tokens
// (prefill: consecutive tokens; decode: the next_n tokens of one sequence) and a run of 64-token KV blocks. The
// producer hands each group over through its Q stage (the group's record, its Q tile [kBlockQ * H, D], the wgmma
// B operand with N = kBlockQ * H, and its weights); each KV block [64, D] is the A operand (M = 64), so one
// m64nNk32 chain gives 64 tokens x (queries x heads) in registers. The math warpgroups take a group's KV blocks
// in turns, each from its own run of stages, so one warpgroup's ReLU-weight-sum (FP32 cores) runs while the
// others' MMAs keep the tensor cores busy.
#pragma once
#include "common.cuh"
#include "mbarrier.cuh"
#include "pdl.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace dgx {

template <bool kBf16>
DGX_DEVICE void store_logit(void* base, int64_t index, float v) {
    if constexpr (kBf16)
        st_global_bf16(static_cast<uint16_t*>(base) + index, v);
    else
        st_global_f32(static_cast<float*>(base) + index, v);
}

DGX_DEVICE int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The L2 policy for loads another group reads again soon (indices=: a run's groups over one chunk of blocks): normal
// eviction priority, where the decode cache otherwise streams as evict-first. PTX ISA, "createpolicy".
DGX_DEVICE uint64_t l2_evict_normal_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// a[i] for a run-time i, by selects: indexing a register array at run time would move it to local memory.
template <int kN>
DGX_DEVICE int select_int(const int (&a)[kN], int i) {
    int v = a[0];
#pragma unroll
    for (int j = 1; j < kN; ++j) v = i == j ? a[j] : v;
    return v;
}

template <int kH, int kD, int kQ, int kStages, bool kIsPaged, bool kIsCompressed, bool kIsBf16, int kMathWgs,
          bool kIsStreamKv = false, bool kIsVarlen = false, int kPassQ_ = 0>
struct MqaTraits {
    static constexpr int kHeads = kH;
    static constexpr int kHeadDim = kD;
    static constexpr int kBlockQ = kQ;  // query tokens per group (decode: next_n)
    static constexpr int kNumKvStages = kStages;
    static constexpr bool kPaged = kIsPaged;
    static constexpr bool kCompressed = kIsCompressed;
    static constexpr bool kBf16 = kIsBf16;
    // KV loads carry the L2 evict-first policy (tma.cuh): the decode cache is read once per call.
    static constexpr bool kStreamKv = kIsStreamKv;
    // Paged with indices (for_each_varlen_group): a group is up to kBlockQ tokens of one sequence; its other query
    // slots have lo = 1 and are not stored.
    static constexpr bool kVarlen = kIsVarlen;
    static_assert(!kVarlen || kPaged, "indices are for the paged kernel");
    static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "H must be 16, 32 or 64");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128, "D must be 32, 64 or 128");
    static_assert(!(kPaged && kCompressed), "the paged kernel writes full rows");
    static constexpr int kN = kBlockQ * kHeads;  // wgmma N: every head of every query of the group
    static_assert(kN % 16 == 0 && kN <= 256, "wgmma N is at most 256");
    static constexpr int kBlockKv = 64;  // KV tokens per block: one wgmma M
    // Math warpgroups take a group's KV blocks in turns, so one's ReLU-weight-sum runs while another's MMAs do
    // (three beat two with two accumulator sets each: PERFLOG, MQA logits).
    static constexpr int kMathWarpgroups = kMathWgs;
    static_assert(kMathWarpgroups == 2 || kMathWarpgroups == 3, "two or three math warpgroups");
    static constexpr int kMathThreads = 128 * kMathWarpgroups;
    static constexpr int kThreads = kMathThreads + 128;
    static constexpr int kNumQStages = 2;
    // Each math warpgroup has its own run of KV stages, consumed in order: with one ring shared in turns, a
    // warpgroup could wait on a stage whose last completed phase had the parity it wanted but belonged to a block
    // 2 x kNumKvStages earlier (it faulted on the device under load).
    static constexpr int kStagesPerWg = kNumKvStages / kMathWgs;
    static_assert(kNumKvStages % kMathWgs == 0, "the KV stages split evenly over the math warpgroups");
    static constexpr int kSmemQ = kN * kHeadDim;
    static constexpr int kSmemKv = kBlockKv * kHeadDim;
    static constexpr int kSmemScales = kBlockKv * 4;
    // Swizzled tiles start on their swizzle pattern's period (8 rows of kHeadDim bytes: what the wgmma descriptors'
    // zero base offset assumes), the KV ring on 1024 bytes.
    static_assert(kSmemQ % (8 * kHeadDim) == 0 && (kNumQStages * kSmemQ) % 1024 == 0 && kSmemKv % 1024 == 0,
                  "swizzled tiles stay aligned to their swizzle pattern");
    static constexpr int kNumBarriers = 2 * kNumQStages + 2 * kNumKvStages;
    // One Q stage's weights, padded to 128 bytes (a TMA destination), and its group's record (MqaGroup).
    static constexpr int kWeightsBytes = (kN * 4 + 127) / 128 * 128;
    static constexpr int kGroupBytes = (4 + 2 * kBlockQ) * 4 <= 64 ? 64 : 128;
    static_assert((4 + 2 * kBlockQ) * 4 <= kGroupBytes, "MqaGroup fits its slot");
    static constexpr int kSmemBytes = kNumQStages * (kSmemQ + kWeightsBytes + kGroupBytes) +
                                      kNumKvStages * (kSmemKv + kSmemScales) + 8 * kNumBarriers;
    static constexpr int kAccum = kN / 2;                 // accumulator floats per thread
    static constexpr int kColGroupsPerQuery = kHeads / 8;  // 8-column groups of one query in the accumulator
    static constexpr int kWeightsPerQuery = kHeads / 4;    // heads a thread holds per query per row
    static constexpr int kValues = 2 * kBlockQ;            // partial logits per thread: 2 rows x the queries
    // The quad reduction halves a power of two: three queries (next_n 3) reduce 8 values, the last two zeros.
    static constexpr int kValuesPad = kValues <= 2 ? kValues : (kValues <= 4 ? 4 : (kValues <= 8 ? 8 : 16));
    static_assert(kValues <= 16, "at most 8 queries a group");
    static constexpr int kFinal = kValuesPad >= 4 ? kValuesPad / 4 : 1;  // logits per thread after the quad reduction
    // setmaxnreg budgets: (math x warpgroups + producer) x 128 threads within the 64K registers of an SM. The
    // producer keeps 40: with 32 (three math warpgroups) and 24 (four) the decode and prefill kernels faulted or
    // hung on the device (PERFLOG, MQA logits).
    static constexpr int kProducerRegs = 40;
    static constexpr int kMathRegs = kMathWarpgroups == 2 ? 232 : 152;
    static_assert((kMathRegs * kMathWarpgroups + kProducerRegs) * 128 <= 65536, "register file");
    // Passes (mqa_pass): a block's MMAs and ReLU-weight sums taken kPassQ queries at a time, so a tile wider than
    // three warpgroups' registers hold (64 heads x next_n 3 or 4: N 192, 256) still runs on three (two ran the
    // 256-wide tile at 0.69 of next_n 1's bandwidth share). 0: one pass over every query (the tile's own N).
    static constexpr int kPassQ = kPassQ_ == 0 ? kBlockQ : kPassQ_;
    static constexpr int kPasses = (kBlockQ + kPassQ - 1) / kPassQ;
    static_assert(kPassQ >= 1 && kPassQ <= kBlockQ, "a pass takes 1 .. kBlockQ queries");
    static constexpr int kFirstQ = 0;  // the group's first query a view of it starts at (MqaPass)
};

// One pass over queries [kFirst, kFirst + kQ) of a group of T: the view of T that the MMA issue, the logit slots,
// the group's outputs and finish_block read. Its MMA spans kMmaQ >= kQ queries' rows of the Q tile (wgmma N =
// kMmaQ x H): the columns of the queries past kQ are computed and never read (next_n 3's second pass runs as wide
// as its first: with a narrower accumulator set ptxas spilled), and rows past the tile are other shared memory.
template <typename T, int kFirst, int kQ, int kMmaQ = kQ>
struct MqaPass {
    static constexpr int kHeads = T::kHeads;
    static constexpr int kHeadDim = T::kHeadDim;
    static constexpr int kBlockKv = T::kBlockKv;
    static constexpr bool kPaged = T::kPaged;
    static constexpr bool kCompressed = T::kCompressed;
    static constexpr bool kBf16 = T::kBf16;
    static constexpr bool kVarlen = T::kVarlen;
    static constexpr int kFirstQ = kFirst;
    static constexpr int kBlockQ = kQ;
    static constexpr int kN = kMmaQ * kHeads;
    static constexpr int kAccum = kN / 2;
    static constexpr int kColGroupsPerQuery = T::kColGroupsPerQuery;
    static constexpr int kWeightsPerQuery = T::kWeightsPerQuery;
    static constexpr int kValues = 2 * kQ;
    // The quad reduction is the MMA's width's (a narrower pass's values padded with zeros, as next_n 3's).
    static constexpr int kValuesPad = 2 * kMmaQ <= 2 ? 2 : (2 * kMmaQ <= 4 ? 4 : (2 * kMmaQ <= 8 ? 8 : 16));
    static constexpr int kFinal = kValuesPad >= 4 ? kValuesPad / 4 : 1;
    static_assert(kFirst + kQ <= T::kBlockQ && kQ <= kMmaQ && kN % 16 == 0 && kN <= 256,
                  "a pass covers the group's queries, wgmma N a multiple of 16 up to 256");
    static_assert((kFirst * kHeads * kHeadDim) % (8 * kHeadDim) == 0, "a pass's Q rows start on a swizzle period");
};

// One group of work: kBlockQ query tokens and a run of KV blocks. The producer walks the groups and hands each to
// the math warpgroups through the group's Q stage (this record, the Q tile and the weights), so only one role
// reads the schedule, the windows and the context lengths from global memory, ahead of the math.
template <typename T>
struct MqaGroup {
    int q_token;     // prefill: first query token; decode: first row of weights / logits (b * next_n)
    int seq;         // decode: the sequence
    int kv_begin;    // prefill: first KV token; decode: first block index in the sequence's block table
    int num_blocks;  // KV blocks to visit; -1 in the record after the last group
    int lo[T::kBlockQ];  // prefill: each query's window start (clamped); decode: 0
    int hi[T::kBlockQ];  // prefill: window end (clamped); decode: keys the query may see (causal)
};

// Prefill groups: blocks of kBlockQ query tokens, handed out zig-zag over the CTAs (round r goes forwards when
// even, backwards when odd), so causal windows, whose length grows with the token, even out per CTA. A group
// covers the union of its tokens' windows; tokens past the sequence have empty windows.
template <typename T, typename Params, typename F>
DGX_DEVICE void for_each_prefill_group(const Params& p, F&& f) {
    const int num_q_blocks = ceil_div(p.seq_len, T::kBlockQ);
    for (int round = 0;; ++round) {
        const int offset = (round & 1) ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
        const int qb = round * static_cast<int>(gridDim.x) + offset;
        if (qb >= num_q_blocks) break;
        MqaGroup<T> g;
        g.q_token = qb * T::kBlockQ;
        g.seq = 0;
        int lo = p.seq_len_kv, hi = 0;
#pragma unroll
        for (int i = 0; i < T::kBlockQ; ++i) {
            const int q = g.q_token + i;
            const int s = q < p.seq_len ? clamp_int(ld_global_nc_s32(p.ks + q), 0, p.seq_len_kv) : 0;
            const int e = q < p.seq_len ? clamp_int(ld_global_nc_s32(p.ke + q), 0, p.seq_len_kv) : 0;
            g.lo[i] = s;
            g.hi[i] = e;
            if (s < e) {
                lo = s < lo ? s : lo;
                hi = e > hi ? e : hi;
            }
        }
        // The scale map's box must start on 16 bytes (a TMA rule for the inner coordinate): the group starts on a
        // multiple of 4 tokens; the tokens before the window are computed and not stored.
        lo &= ~3;
        g.kv_begin = lo;
        g.num_blocks = hi > lo ? ceil_div(hi - lo, 64) : 0;
        if (g.num_blocks > 0) f(g, 0);
    }
}

// Decode groups: this CTA's run of (sequence, block) pairs, from schedule[blockIdx.x] up to schedule[blockIdx.x + 1]
// (dgx.get_paged_mqa_logits_metadata splits all sequences' blocks evenly over the CTAs). Bounded by the batch, by
// each sequence's own block count and by its block table, so a stale or foreign schedule can cost balance but
// never reach past them. A sequence's blocks reach its longest query's context. Each lane of the calling warp
// also reads one block id of the group's first 32 (`ids`, for block kv_begin + lane), issued together with the
// context length so that the two reads cost one memory latency, not two (bounded by the table's width, which the
// group's blocks never pass).
template <typename T, typename Params, typename F>
DGX_DEVICE void for_each_paged_group(const Params& p, F&& f) {
    const int b0 = ld_global_nc_s32(p.schedule + 2 * blockIdx.x), k0 = ld_global_nc_s32(p.schedule + 2 * blockIdx.x + 1);
    const int b1 = ld_global_nc_s32(p.schedule + 2 * blockIdx.x + 2), k1 = ld_global_nc_s32(p.schedule + 2 * blockIdx.x + 3);
    const int lane = static_cast<int>(lane_id());
    for (int b = b0 < 0 ? 0 : b0; b < p.batch && b <= b1; ++b) {
        const int begin = b == b0 ? (k0 > 0 ? k0 : 0) : 0;
        int ids = 0;
        if (begin + lane < p.table_width)
            ids = ld_global_nc_s32(p.block_table + static_cast<int64_t>(b) * p.table_stride + begin + lane);
        MqaGroup<T> g;
        g.q_token = b * T::kBlockQ;
        g.seq = b;
        int ctx = 0;
#pragma unroll
        for (int t = 0; t < T::kBlockQ; ++t) {
            // 1-D lengths: query t of next_n sees keys j <= len - next_n + t; 2-D: keys j < len[b, t].
            const int limit = p.context_2d ? ld_global_nc_s32(p.context_lens + g.q_token + t)
                                           : ld_global_nc_s32(p.context_lens + b) - T::kBlockQ + t + 1;
            g.lo[t] = 0;
            g.hi[t] = limit;
            ctx = limit > ctx ? limit : ctx;
        }
        int blocks = ceil_div(ctx, 64);
        blocks = blocks < p.table_width ? blocks : p.table_width;
        const int end = b == b1 ? (k1 < blocks ? k1 : blocks) : blocks;
        g.kv_begin = begin;
        g.num_blocks = end - begin;
        if (begin < end) f(g, ids);
    }
}

// Decode with indices (one query row per token, indices[t] its sequence): the units are runs of consecutive tokens
// with equal indices, which share their first token's block-table row and so their KV blocks. This CTA's runs go from
// schedule[blockIdx.x] to schedule[blockIdx.x + 1], each (first token of a run, block) as
// dgx.get_paged_mqa_logits_metadata(..., indices=) makes them; a run is taken in groups of up to kBlockQ tokens, each
// token with its own context length (keys j < context_lens[t]) and each group over the blocks of its longest one.
// A run of more than one group walks its blocks in chunks of kVarlenChunk, every group's piece of a chunk after the
// other's, so the later pieces read the chunk from L2: f's third argument `keep` (true but for the last group's
// piece) asks for its loads to stay in L2 (evict-normal instead of evict-first).
// Bounded like for_each_paged_group: the token count, the table's width, the run itself.
template <typename T, typename Params, typename F>
DGX_DEVICE void for_each_varlen_group(const Params& p, F&& f) {
    constexpr int kVarlenChunk = 16;  // blocks (135 KB at D 128): 132 CTAs' chunks, 18 MB, fit L2 between two reads
    const int* row = p.schedule + 2 * blockIdx.x;
    const int t0 = ld_global_nc_s32(row), k0 = ld_global_nc_s32(row + 1);
    const int t1 = ld_global_nc_s32(row + 2), k1 = ld_global_nc_s32(row + 3);
    const int lane = static_cast<int>(lane_id());
    for (int t = t0 < 0 ? 0 : t0; t < p.batch && t <= t1;) {
        // The run's end: the first token past t with another index, 32 tokens a step (one per lane).
        const int id = ld_global_nc_s32(p.indices + t);
        int end = t + 1;
        for (;;) {
            const int u = end + lane;
            const bool other = u >= p.batch || ld_global_nc_s32(p.indices + u) != id;
            const uint32_t found = __ballot_sync(0xffffffffu, other);
            if (found) {
                end += __ffs(found) - 1;
                break;
            }
            end += 32;
        }
        const int begin = t == t0 ? (k0 > 0 ? k0 : 0) : 0;
        // Group `first` of the run: its record over blocks [from, min(to, its stop)); returns that stop.
        auto make_group = [&](int first, int from, int to, MqaGroup<T>& g) {
            g.q_token = first;
            g.seq = t;  // the run's block-table row
            int ctx = 0;
#pragma unroll
            for (int q = 0; q < T::kBlockQ; ++q) {
                const bool mine = first + q < end;
                const int limit = mine ? ld_global_nc_s32(p.context_lens + first + q) : 0;
                g.lo[q] = mine ? 0 : 1;  // lo = 1: a slot past the run, not stored (finish_block)
                g.hi[q] = limit;
                ctx = limit > ctx ? limit : ctx;
            }
            int blocks = ceil_div(ctx, 64);
            blocks = blocks < p.table_width ? blocks : p.table_width;
            const int stop = t == t1 ? (k1 < blocks ? k1 : blocks) : blocks;
            g.kv_begin = from;
            g.num_blocks = (stop < to ? stop : to) - from;
            return stop;
        };
        auto first_ids = [&](int from) {
            int ids = 0;
            if (from + lane < p.table_width)
                ids = ld_global_nc_s32(p.block_table + static_cast<int64_t>(t) * p.table_stride + from + lane);
            return ids;
        };
        if (end - t <= T::kBlockQ) {
            MqaGroup<T> g;
            const int ids = first_ids(begin);
            make_group(t, begin, 1 << 30, g);
            if (g.num_blocks > 0) f(g, ids, false);
        } else {
            // The chunks run to the furthest stop of the run's groups (a group past its own stops early).
            int from = begin, run_stop = begin + 1;
            while (from < run_stop) {
                const int ids = first_ids(from);
                run_stop = from;
                for (int first = t; first < end; first += T::kBlockQ) {
                    MqaGroup<T> g;
                    const int stop = make_group(first, from, from + kVarlenChunk, g);
                    run_stop = stop > run_stop ? stop : run_stop;
                    if (g.num_blocks > 0) f(g, ids, first + T::kBlockQ < end);
                }
                from += kVarlenChunk;
            }
        }
        t = end;
    }
}

template <typename T, typename Params, typename F>
DGX_DEVICE void for_each_group(const Params& p, F&& f) {
    if constexpr (T::kVarlen)
        for_each_varlen_group<T>(p, f);
    else if constexpr (T::kPaged)
        for_each_paged_group<T>(p, f);
    else
        for_each_prefill_group<T>(p, f);
}

// Shared memory and barriers of one CTA: Q stages, the KV ring (values, scales), the groups' weights and records.
template <typename T>
struct MqaSmem {
    uint8_t* q;
    uint8_t* kv;
    float* scales;
    float* weights;
    MqaGroup<T>* groups;
    uint64_t* q_full;
    uint64_t* q_empty;
    uint64_t* kv_full;
    uint64_t* kv_empty;

    DGX_DEVICE explicit MqaSmem(uint8_t* base) {
        q = base;
        kv = q + T::kNumQStages * T::kSmemQ;
        scales = reinterpret_cast<float*>(kv + T::kNumKvStages * T::kSmemKv);
        weights = scales + T::kNumKvStages * T::kBlockKv;
        groups = reinterpret_cast<MqaGroup<T>*>(weights + T::kNumQStages * (T::kWeightsBytes / 4));
        q_full = reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(groups) + T::kNumQStages * T::kGroupBytes);
        q_empty = q_full + T::kNumQStages;
        kv_full = q_empty + T::kNumQStages;
        kv_empty = kv_full + T::kNumKvStages;
    }
};

// The producer: one warp walks the groups; lane 0 writes each group's record and issues the loads. Decode block
// ids are read 32 at a time, one per lane, so the table's latency is paid once per 32 blocks instead of once per
// block. After the last group, a record with num_blocks = -1 ends the math warpgroups' loop.
template <typename T, typename Params>
DGX_DEVICE void mqa_produce(const Params& p, const MqaSmem<T>& sm) {
    const bool leader = lane_id() == 0;
    const uint64_t kv_policy = T::kStreamKv ? l2_evict_first_policy() : 0;
    uint32_t group_index = 0;
    uint32_t handed[T::kMathWarpgroups] = {};  // blocks handed to each math warpgroup so far
    for_each_group<T>(p, [&](const MqaGroup<T>& g, int first_ids, bool keep = false) {
        uint64_t policy = kv_policy;
        if constexpr (T::kVarlen) {
            if (keep) policy = l2_evict_normal_policy();  // another group of the run reads these blocks next
        }
        const int qs = group_index % T::kNumQStages;
        mbarrier_wait(&sm.q_empty[qs], ((group_index / T::kNumQStages) & 1) ^ 1);
        if (leader) {
            sm.groups[qs] = g;  // published by the arrival below (release), read after the wait (acquire)
            mbarrier_arrive_expect_tx(&sm.q_full[qs], T::kSmemQ + T::kN * 4);
            tma_load_2d(&p.tmap_q, &sm.q_full[qs], sm.q + qs * T::kSmemQ, 0, g.q_token * T::kHeads);
            tma_load_2d(&p.tmap_weights, &sm.q_full[qs], sm.weights + qs * (T::kWeightsBytes / 4), 0, g.q_token);
        }
        // Decode: the lanes hold the ids of blocks t0 .. t0 + 31 (the first 32 came with the group); the next 32
        // are read while these are issued, so the table's latency hides behind the stages' waits.
        int block_id = first_ids;
        for (int t0 = 0; t0 < g.num_blocks; t0 += 32) {
            int next_id = 0;
            if constexpr (T::kPaged) {
                const int t = t0 + 32 + static_cast<int>(lane_id());
                if (t < g.num_blocks)
                    next_id = ld_global_nc_s32(p.block_table + static_cast<int64_t>(g.seq) * p.table_stride +
                                               g.kv_begin + t);
            }
            const int count = g.num_blocks - t0 < 32 ? g.num_blocks - t0 : 32;
            for (int i = 0; i < count; ++i) {
                const int id = __shfl_sync(0xffffffffu, block_id, i);
                const int wg = (t0 + i) % T::kMathWarpgroups;  // block t of a group goes to warpgroup t % count
                uint32_t n = handed[0];
#pragma unroll
                for (int j = 1; j < T::kMathWarpgroups; ++j) n = wg == j ? handed[j] : n;
#pragma unroll
                for (int j = 0; j < T::kMathWarpgroups; ++j) handed[j] += wg == j ? 1 : 0;
                const int s = wg * T::kStagesPerWg + n % T::kStagesPerWg;
                mbarrier_wait(&sm.kv_empty[s], ((n / T::kStagesPerWg) & 1) ^ 1);
                if (leader) {
                    mbarrier_arrive_expect_tx(&sm.kv_full[s], T::kSmemKv + T::kSmemScales);
                    if constexpr (T::kPaged) {
                        // Ids outside [0, num_blocks) fall outside both maps: TMA fills zeros, nothing is read.
                        tma_load_3d<T::kStreamKv>(&p.tmap_kv, &sm.kv_full[s], sm.kv + s * T::kSmemKv, 0, 0, id,
                                                  policy);
                        tma_load_2d<T::kStreamKv>(&p.tmap_scales, &sm.kv_full[s], sm.scales + s * T::kBlockKv, 0, id,
                                                  policy);
                    } else {
                        const int row = g.kv_begin + (t0 + i) * T::kBlockKv;
                        tma_load_2d<T::kStreamKv>(&p.tmap_kv, &sm.kv_full[s], sm.kv + s * T::kSmemKv, 0, row,
                                                  kv_policy);
                        tma_load_2d<T::kStreamKv>(&p.tmap_scales, &sm.kv_full[s], sm.scales + s * T::kBlockKv, row,
                                                  0, kv_policy);
                    }
                }
            }
            block_id = next_id;
        }
        ++group_index;
    });
    const int qs = group_index % T::kNumQStages;
    mbarrier_wait(&sm.q_empty[qs], ((group_index / T::kNumQStages) & 1) ^ 1);
    if (leader) {
        sm.groups[qs].num_blocks = -1;
        mbarrier_arrive(&sm.q_full[qs]);
    }
}

// Sums kValues partial logits over the 4 lanes of a quad (the lanes that share accumulator rows): each exchange
// halves the values a lane holds, so lane (b1 b0) (bits 0 and 1 of the lane id) ends with values
// [b0 * kValues/2 + b1 * kValues/4, + kFinal).
// Fixed order, so the result is bitwise the same on every run.
template <int kValues>
DGX_DEVICE void quad_reduce(float (&v)[kValues], bool b0, bool b1) {
    if constexpr (kValues >= 2) {
        constexpr int kHalf = kValues / 2;
#pragma unroll
        for (int i = 0; i < kHalf; ++i) {
            const float send = b0 ? v[i] : v[i + kHalf];
            const float keep = b0 ? v[i + kHalf] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
        }
    }
    if constexpr (kValues >= 4) {
        constexpr int kQuarter = kValues / 4;
#pragma unroll
        for (int i = 0; i < kQuarter; ++i) {
            const float send = b1 ? v[i] : v[i + kQuarter];
            const float keep = b1 ? v[i + kQuarter] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
    } else {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], 2);
    }
}

// A math warpgroup's place in its own run of KV stages: the stage of its next block and that stage's phase parity.
// Stepped once per block (no division by the run's length in the block loop).
struct StageCursor {
    uint32_t stage = 0;
    uint32_t phase = 0;
    template <int kStages>
    DGX_DEVICE void step() {
        if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
        }
    }
};

// The MMAs of one pass P (a view of the group's queries: MqaPass, or the traits themselves for one pass): the block's
// KV rows (A) against P's queries' rows of the Q tile (B, descriptor `desc_q` at P's first row).
template <typename P>
DGX_DEVICE void issue_mma(uint64_t desc_kv, uint64_t desc_q, float (&acc)[P::kAccum]) {
#pragma unroll
    for (int i = 0; i < P::kAccum; ++i) fence_operand(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < P::kHeadDim / 32; ++k)
        WgmmaE4M3<P::kN>::mma(advance_desc(desc_kv, k * 32), advance_desc(desc_q, k * 32), acc, k > 0);
    wgmma_commit();
#pragma unroll
    for (int i = 0; i < P::kAccum; ++i) fence_operand(acc[i]);
}

// Issues one KV block's MMAs into `acc` once its stage `s` (with descriptor `desc_kv`) has landed.
template <typename T>
DGX_DEVICE void issue_block(const MqaSmem<T>& sm, int s, uint32_t phase, uint64_t desc_kv, uint64_t desc_q,
                            float (&acc)[T::kAccum]) {
    mbarrier_wait(&sm.kv_full[s], phase);
    issue_mma<T>(desc_kv, desc_q, acc);
}

// Which logits a math thread stores per KV block, fixed for the kernel. After quad_reduce, lane (b1 b0) holds
// values [first, first + kFinal) of its quad's 2 rows x kBlockQ queries (value 2q + r: query q, row r of the
// thread's two accumulator rows, which are 8 apart).
template <typename T>
struct LogitSlots {
    int row[T::kFinal];  // the logit's token within the block (0..63)
    int q[T::kFinal];    // its query within the group
    bool stores;         // with kValues < 4 both lanes of a pair hold the same logit: one stores it
    bool b0, b1;         // bits 0 and 1 of the lane id (quad_reduce)
    DGX_DEVICE LogitSlots(uint32_t warp_in_wg, uint32_t lane) : b0(lane & 1), b1(lane & 2) {
        const int first =
            T::kValuesPad >= 4 ? (b0 ? T::kValuesPad / 2 : 0) + (b1 ? T::kValuesPad / 4 : 0) : (b0 ? 1 : 0);
        const int row_in_block = static_cast<int>(warp_in_wg * 16 + lane / 4);
#pragma unroll
        for (int f = 0; f < T::kFinal; ++f) {
            row[f] = row_in_block + 8 * ((first + f) % 2);
            q[f] = (first + f) / 2;
        }
        stores = !(T::kValuesPad < 4 && b1);
    }
};

// Where a group's logits go, for each of the thread's slots: its query's row of the output and window.
template <typename T>
struct GroupOutput {
    void* row_base[T::kFinal];  // the query's row of logits (compressed: shifted so that token lands at token - lo)
    int lo[T::kFinal];
    int hi[T::kFinal];
    template <typename Params, typename Group>
    DGX_DEVICE GroupOutput(const Params& p, const Group& g, const LogitSlots<T>& slots) {
        constexpr int kBytes = T::kBf16 ? 2 : 4;
#pragma unroll
        for (int f = 0; f < T::kFinal; ++f) {
            lo[f] = select_int(g.lo, T::kFirstQ + slots.q[f]);
            hi[f] = select_int(g.hi, T::kFirstQ + slots.q[f]);
            int64_t offset = static_cast<int64_t>(g.q_token + T::kFirstQ + slots.q[f]) * p.logits_stride;
            if constexpr (T::kCompressed) offset -= lo[f];
            row_base[f] = static_cast<uint8_t*>(p.logits) + offset * kBytes;
        }
    }
};

// After the block's MMAs completed: its rows' scales, the stage handed back, then ReLU-weight-sum, the quad
// reduction and the stores. Accumulator layout (wgmma m64nN, PTX ISA): register 4c + 2r + e of lane l holds row
// l / 4 + 8 r, column 8 c + 2 (l % 4) + e; column q * H + h is query q's head h. `w` holds the thread's heads'
// weights: w[q][2c + e] is query q's head 8c + 2 (l % 4) + e. `block_token0`: the block's first token.
// With passes (T an MqaPass), `release` is the last pass's: the stage is handed back once every pass's MMAs and
// scale reads are done.
template <typename T, bool kRelease = true, typename Smem, typename Params>
DGX_DEVICE void finish_block(const Params& p, const Smem& sm, const GroupOutput<T>& out,
                             const LogitSlots<T>& slots, const float (&w)[T::kBlockQ][T::kWeightsPerQuery], int s,
                             int block_token0, const float (&acc)[T::kAccum]) {
    float scale[T::kFinal];
#pragma unroll
    for (int f = 0; f < T::kFinal; ++f) scale[f] = sm.scales[s * T::kBlockKv + slots.row[f]];
    if constexpr (kRelease) mbarrier_arrive(&sm.kv_empty[s]);

    float v[T::kValuesPad];
#pragma unroll
    for (int q = 0; q < T::kBlockQ; ++q) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < T::kColGroupsPerQuery; ++c) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float x = acc[4 * (q * T::kColGroupsPerQuery + c) + 2 * r + e];
                    sum = fmaf(fmaxf(x, 0.0f), w[q][2 * c + e], sum);
                }
            }
            v[2 * q + r] = sum;
        }
    }
#pragma unroll
    for (int i = T::kValues; i < T::kValuesPad; ++i) v[i] = 0.0f;  // the padding queries of next_n 3
    quad_reduce<T::kValuesPad>(v, slots.b0, slots.b1);
    if (!slots.stores) return;
#pragma unroll
    for (int f = 0; f < T::kFinal; ++f) {
        if constexpr (T::kValuesPad != T::kValues) {
            if (slots.q[f] >= T::kBlockQ) continue;  // a padding query
        }
        const int token = block_token0 + slots.row[f];
        const float logit = v[f] * scale[f];
        if constexpr (T::kPaged) {
            if (token < p.max_context_len && (!T::kVarlen || out.lo[f] == 0))
                store_logit<T::kBf16>(out.row_base[f], token, token < out.hi[f] ? logit : -__int_as_float(0x7f800000));
        } else if (token >= out.lo[f] && token < out.hi[f]) {
            if constexpr (T::kCompressed) {
                if (token - out.lo[f] < p.max_seqlen_k) store_logit<T::kBf16>(out.row_base[f], token, logit);
            } else {
                store_logit<T::kBf16>(out.row_base[f], token, logit);
            }
        }
    }
}

// A math warpgroup: per group (as the producer hands them over), its blocks wg, wg + kMathWarpgroups, ...
template <typename T, typename Params>
DGX_DEVICE void mqa_math(const Params& p, const MqaSmem<T>& sm, uint32_t wg) {
    const uint32_t lane = lane_id();
    const LogitSlots<T> slots(warp_id() % 4, lane);
    // Stage s of this warpgroup's run: the first stage's descriptor advanced by s tiles (start address >> 4).
    const int first_stage = static_cast<int>(wg) * T::kStagesPerWg;
    const uint64_t desc_kv0 = make_smem_desc_kmajor<T::kHeadDim>(sm.kv + first_stage * T::kSmemKv);
    float acc[T::kAccum];
    float w[T::kBlockQ][T::kWeightsPerQuery];
    StageCursor cursor;
    for (uint32_t group_index = 0;; ++group_index) {
        const int qs = group_index % T::kNumQStages;
        mbarrier_wait(&sm.q_full[qs], (group_index / T::kNumQStages) & 1);
        const MqaGroup<T> g = sm.groups[qs];
        if (g.num_blocks < 0) break;
        const float* weights = sm.weights + qs * (T::kWeightsBytes / 4);
#pragma unroll
        for (int q = 0; q < T::kBlockQ; ++q) {
#pragma unroll
            for (int c = 0; c < T::kColGroupsPerQuery; ++c) {
                const F32x2 pair = ld_shared_f32x2(smem_addr(weights + q * T::kHeads + 8 * c + 2 * (lane % 4)));
                w[q][2 * c] = pair.x;
                w[q][2 * c + 1] = pair.y;
            }
        }
        const GroupOutput<T> out(p, g, slots);
        const uint64_t desc_q = make_smem_desc_kmajor<T::kHeadDim>(sm.q + qs * T::kSmemQ);
        constexpr int kStep = T::kMathWarpgroups;
        const int mine = g.num_blocks > static_cast<int>(wg) ? (g.num_blocks - static_cast<int>(wg) + kStep - 1) / kStep : 0;
        // Paged blocks are whole pages of the sequence; prefill blocks start at the group's first KV token.
        int block_token0 = T::kPaged ? (g.kv_begin + static_cast<int>(wg)) * T::kBlockKv
                                     : g.kv_begin + static_cast<int>(wg) * T::kBlockKv;
        for (int k = 0; k < mine; ++k) {
            const int s = first_stage + static_cast<int>(cursor.stage);
            issue_block<T>(sm, s, cursor.phase, desc_kv0 + cursor.stage * (T::kSmemKv >> 4), desc_q, acc);
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < T::kAccum; ++i) fence_operand(acc[i]);  // read only after the wait
            finish_block<T>(p, sm, out, slots, w, s, block_token0, acc);
            cursor.step<T::kStagesPerWg>();
            block_token0 += kStep * T::kBlockKv;
        }
        mbarrier_arrive(&sm.q_empty[qs]);  // every Q read of this warpgroup has completed (waited above)
    }
}

// A math warpgroup of a kernel with two passes (MqaTraits::kPasses): per block, the first kPassQ queries' MMAs and
// ReLU-weight sums, then the rest's, into one accumulator set of the wider pass (the warpgroup holds the weights of
// every query). The other warpgroups' MMAs fill the tensor cores while one runs a pass's sums.
template <typename T, typename Params>
DGX_DEVICE void mqa_math_passes(const Params& p, const MqaSmem<T>& sm, uint32_t wg) {
    static_assert(T::kPasses == 2, "two passes");
    using P0 = MqaPass<T, 0, T::kPassQ>;
    using P1 = MqaPass<T, T::kPassQ, T::kBlockQ - T::kPassQ, T::kPassQ>;
    const uint32_t lane = lane_id();
    const LogitSlots<P0> slots0(warp_id() % 4, lane);
    const LogitSlots<P1> slots1(warp_id() % 4, lane);
    const int first_stage = static_cast<int>(wg) * T::kStagesPerWg;
    const uint64_t desc_kv0 = make_smem_desc_kmajor<T::kHeadDim>(sm.kv + first_stage * T::kSmemKv);
    float w[T::kBlockQ][T::kWeightsPerQuery];
    const float(&w0)[P0::kBlockQ][T::kWeightsPerQuery] =
        *reinterpret_cast<const float(*)[P0::kBlockQ][T::kWeightsPerQuery]>(&w[0][0]);
    const float(&w1)[P1::kBlockQ][T::kWeightsPerQuery] =
        *reinterpret_cast<const float(*)[P1::kBlockQ][T::kWeightsPerQuery]>(&w[T::kPassQ][0]);
    StageCursor cursor;
    for (uint32_t group_index = 0;; ++group_index) {
        const int qs = group_index % T::kNumQStages;
        mbarrier_wait(&sm.q_full[qs], (group_index / T::kNumQStages) & 1);
        const MqaGroup<T> g = sm.groups[qs];
        if (g.num_blocks < 0) break;
        const float* weights = sm.weights + qs * (T::kWeightsBytes / 4);
#pragma unroll
        for (int q = 0; q < T::kBlockQ; ++q) {
#pragma unroll
            for (int c = 0; c < T::kColGroupsPerQuery; ++c) {
                const F32x2 pair = ld_shared_f32x2(smem_addr(weights + q * T::kHeads + 8 * c + 2 * (lane % 4)));
                w[q][2 * c] = pair.x;
                w[q][2 * c + 1] = pair.y;
            }
        }
        const GroupOutput<P0> out0(p, g, slots0);
        const GroupOutput<P1> out1(p, g, slots1);
        const uint64_t desc_q = make_smem_desc_kmajor<T::kHeadDim>(sm.q + qs * T::kSmemQ);
        const uint64_t desc_q1 = advance_desc(desc_q, T::kPassQ * T::kHeads * T::kHeadDim);
        constexpr int kStep = T::kMathWarpgroups;
        const int mine = g.num_blocks > static_cast<int>(wg) ? (g.num_blocks - static_cast<int>(wg) + kStep - 1) / kStep : 0;
        int block_token0 = (g.kv_begin + static_cast<int>(wg)) * T::kBlockKv;  // paged: whole pages
        for (int k = 0; k < mine; ++k) {
            const int s = first_stage + static_cast<int>(cursor.stage);
            const uint64_t desc_kv = desc_kv0 + cursor.stage * (T::kSmemKv >> 4);
            mbarrier_wait(&sm.kv_full[s], cursor.phase);
            {
                float acc[P0::kAccum];  // the two passes' accumulators are live one after the other
                issue_mma<P0>(desc_kv, desc_q, acc);
                wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < P0::kAccum; ++i) fence_operand(acc[i]);
                finish_block<P0, false>(p, sm, out0, slots0, w0, s, block_token0, acc);
            }
            {
                float acc[P1::kAccum];
                issue_mma<P1>(desc_kv, desc_q1, acc);
                wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < P1::kAccum; ++i) fence_operand(acc[i]);
                finish_block<P1, true>(p, sm, out1, slots1, w1, s, block_token0, acc);
            }
            cursor.step<T::kStagesPerWg>();
            block_token0 += kStep * T::kBlockKv;
        }
        mbarrier_arrive(&sm.q_empty[qs]);  // every Q read of this warpgroup has completed (waited above)
    }
}

// -inf over row `row` of the logits outside [keep_lo, keep_hi), by threads tid, tid + count, ...
template <bool kBf16>
DGX_DEVICE void fill_outside(void* logits, int64_t stride, int row, int width, int keep_lo, int keep_hi, int tid,
                             int count) {
    const float neg_inf = -__int_as_float(0x7f800000);
    const int64_t base = static_cast<int64_t>(row) * stride;
    for (int j = tid; j < width; j += count)
        if (j < keep_lo || j >= keep_hi) store_logit<kBf16>(logits, base + j, neg_inf);
}

// The positions of a prefill row the main kernel writes: [ks, ke) clamped (compressed: [0, ke - ks)).
template <bool kCompressed>
DGX_DEVICE void prefill_kept(const int* ks, const int* ke, int row, int seq_len_kv, int width, int& lo, int& hi) {
    const int s = clamp_int(ld_global_nc_s32(ks + row), 0, seq_len_kv);
    const int e = clamp_int(ld_global_nc_s32(ke + row), 0, seq_len_kv);
    if constexpr (kCompressed) {
        lo = 0;
        hi = clamp_int(e - s, 0, width);
    } else {
        lo = s < e ? s : 0;
        hi = s < e ? e : 0;
    }
}

// The prefill kernel's own cleaning, by the producer warpgroup's three idle warps while the math runs: the rows
// of this CTA's query blocks (the same zig-zag walk as the groups, empty windows included).
template <typename T, typename Params>
DGX_DEVICE void mqa_clean_own_rows(const Params& p, int tid) {
    const int width = T::kCompressed ? p.max_seqlen_k : p.seq_len_kv;
    const int num_q_blocks = ceil_div(p.seq_len, T::kBlockQ);
    for (int round = 0;; ++round) {
        const int offset = (round & 1) ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
        const int qb = round * static_cast<int>(gridDim.x) + offset;
        if (qb >= num_q_blocks) break;
        for (int row = qb * T::kBlockQ; row < (qb + 1) * T::kBlockQ && row < p.seq_len; ++row) {
            int lo, hi;
            prefill_kept<T::kCompressed>(p.ks, p.ke, row, p.seq_len_kv, width, lo, hi);
            fill_outside<T::kBf16>(p.logits, p.logits_stride, row, width, lo, hi, tid, 96);
        }
    }
}

template <typename T, typename Params>
DGX_DEVICE void mqa_logits_body(const Params& p) {
    extern __shared__ __align__(1024) uint8_t smem[];
    const MqaSmem<T> sm(smem);
    const uint32_t warp = warp_id();
    constexpr uint32_t kProducerWarp = T::kMathThreads / 32;
    if (warp == kProducerWarp && lane_id() == 0) {
        prefetch_tensor_map(&p.tmap_q);
        prefetch_tensor_map(&p.tmap_kv);
        prefetch_tensor_map(&p.tmap_scales);
        for (int i = 0; i < T::kNumQStages; ++i) {
            mbarrier_init(&sm.q_full[i], 1);
            mbarrier_init(&sm.q_empty[i], T::kMathThreads);
        }
        for (int i = 0; i < T::kNumKvStages; ++i) {
            mbarrier_init(&sm.kv_full[i], 1);
            mbarrier_init(&sm.kv_empty[i], 128);  // the one math warpgroup that consumed the stage
        }
        fence_barrier_init();
    }
    __syncthreads();
    // PDL (ptx/pdl.cuh): every role touches global memory from here on (the producer the schedule, windows and
    // tables, the cleaning warps and math warpgroups the logits), so all threads wait here; then dependents may launch.
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
    if (warp >= kProducerWarp) {
        setmaxnreg_dec<T::kProducerRegs>();
        if (warp == kProducerWarp) {
            mqa_produce<T>(p, sm);
        } else if constexpr (!T::kPaged) {
            if (p.clean) mqa_clean_own_rows<T>(p, static_cast<int>(threadIdx.x) - T::kMathThreads - 32);
        }
    } else {
        setmaxnreg_inc<T::kMathRegs>();
        if constexpr (T::kPasses == 1)
            mqa_math<T>(p, sm, warp / 4);
        else
            mqa_math_passes<T>(p, sm, warp / 4);
    }
}

// Writes -inf where a row's logits are outside what the query may see (decode; prefill with no KV); the main
// kernel writes inside only. Prefill: columns outside [ks, ke) (compressed: positions from ke - ks on); decode:
// columns from the query's causal limit on. One CTA per row.
template <bool kPaged, bool kCompressed, bool kBf16, int kNextN, typename Params>
DGX_DEVICE void mqa_clean_body(const Params& p) {
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): no prologue; the lengths may be a predecessor's output
    griddepcontrol_launch_dependents();
    const int row = blockIdx.x;
    int keep_lo, keep_hi;
    if constexpr (kPaged) {
        const int b = row / kNextN, t = row % kNextN;
        const int limit = p.context_2d ? ld_global_nc_s32(p.lens + row) : ld_global_nc_s32(p.lens + b) - kNextN + t + 1;
        keep_lo = 0;
        keep_hi = clamp_int(limit, 0, p.width);
    } else {
        prefill_kept<kCompressed>(p.ks, p.ke, row, p.seq_len_kv, p.width, keep_lo, keep_hi);
    }
    fill_outside<kBf16>(p.logits, p.logits_stride, row, p.width, keep_lo, keep_hi, threadIdx.x, blockDim.x);
}

// The decode schedule: all sequences' KV blocks split evenly over `num_ctas` CTAs. schedule[c] = (sequence,
// block) where CTA c starts; schedule[num_ctas] is the end, (batch, 0). One CTA; blocks of each sequence as
// paged_blocks_of counts them (without the table clamp, which the main kernel applies on top).
template <int kThreads, typename Params>
DGX_DEVICE void paged_schedule_body(const Params& p) {
    __shared__ long long partial[kThreads];
    __shared__ long long carry;
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): no prologue; the lengths may be a predecessor's output
    griddepcontrol_launch_dependents();
    auto blocks_of = [&](int b) -> long long {
        int ctx;
        if (p.context_2d) {
            ctx = 0;
            for (int t = 0; t < p.next_n; ++t) {
                const int c = ld_global_nc_s32(p.lens + b * p.next_n + t);
                ctx = c > ctx ? c : ctx;
            }
        } else {
            ctx = ld_global_nc_s32(p.lens + b);
        }
        return ceil_div(ctx > 0 ? ctx : 0, 64);
    };
    // Pass 1: the total.
    long long mine = 0;
    for (int b = threadIdx.x; b < p.batch; b += kThreads) mine += blocks_of(b);
    partial[threadIdx.x] = mine;
    __syncthreads();
    for (int step = kThreads / 2; step > 0; step /= 2) {
        if (static_cast<int>(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
        __syncthreads();
    }
    const long long total = partial[0];
    const long long n = p.num_ctas;
    __syncthreads();
    if (threadIdx.x == 0) carry = 0;
    // Pass 2: an exclusive prefix over the sequences, tile by tile; CTA k starts at block floor(k * total / n).
    for (int tile = 0; tile < p.batch; tile += kThreads) {
        const int b = tile + threadIdx.x;
        const long long count = b < p.batch ? blocks_of(b) : 0;
        partial[threadIdx.x] = count;
        __syncthreads();
        for (int step = 1; step < kThreads; step *= 2) {  // inclusive scan (Hillis-Steele)
            const long long add = static_cast<int>(threadIdx.x) >= step ? partial[threadIdx.x - step] : 0;
            __syncthreads();
            partial[threadIdx.x] += add;
            __syncthreads();
        }
        const long long before = carry + partial[threadIdx.x] - count;
        if (count > 0) {
            // CTAs whose start target lies in [before, before + count).
            for (long long k = (before * n + total - 1) / total; k < n; ++k) {
                const long long target = k * total / n;
                if (target >= before + count) break;
                if (target >= before) {
                    p.schedule[2 * k] = b;
                    p.schedule[2 * k + 1] = static_cast<int>(target - before);
                }
            }
        }
        __syncthreads();
        if (threadIdx.x == kThreads - 1) carry += partial[kThreads - 1];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        for (long long k = 0; k <= n; ++k) {
            if (k == n || k * total / n >= total) {
                p.schedule[2 * k] = p.batch;
                p.schedule[2 * k + 1] = 0;
            }
        }
    }
}

// The decode schedule of a call with indices (for_each_varlen_group): the units are runs of tokens with equal
// indices; a run costs its blocks (for its longest context, context_lens[t] per token) times its pairs of tokens (the
// KV is read once per group of tokens: a rough weight, it only balances the CTAs), charged to its first token.
// schedule[c] = (first token of a run, block) where CTA c starts; schedule[num_ctas] = (tokens, 0). One CTA; each
// run start scans its run, so the cost is linear in the tokens.
template <int kThreads, typename Params>
DGX_DEVICE void paged_varlen_schedule_body(const Params& p) {
    __shared__ long long partial[kThreads];
    __shared__ long long carry;
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): no prologue; the lengths may be a predecessor's output
    griddepcontrol_launch_dependents();
    // (blocks, weight) of the run starting at token t; blocks 0 where t does not start one.
    auto run_at = [&](int t, long long& blocks, long long& weight) {
        blocks = 0;
        weight = 1;
        const int id = ld_global_nc_s32(p.indices + t);
        if (t > 0 && ld_global_nc_s32(p.indices + t - 1) == id) return;
        int ctx = 0, count = 0;
        for (int u = t; u < p.batch && ld_global_nc_s32(p.indices + u) == id; ++u, ++count) {
            const int c = ld_global_nc_s32(p.lens + u);
            ctx = c > ctx ? c : ctx;
        }
        blocks = ceil_div(ctx, 64);
        weight = (count + 1) / 2;
    };
    // Pass 1: the total.
    long long mine = 0;
    for (int t = threadIdx.x; t < p.batch; t += kThreads) {
        long long blocks, weight;
        run_at(t, blocks, weight);
        mine += blocks * weight;
    }
    partial[threadIdx.x] = mine;
    __syncthreads();
    for (int step = kThreads / 2; step > 0; step /= 2) {
        if (static_cast<int>(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
        __syncthreads();
    }
    const long long total = partial[0];
    const long long n = p.num_ctas;
    __syncthreads();
    if (threadIdx.x == 0) carry = 0;
    // Pass 2: an exclusive prefix over the tokens, tile by tile; CTA k starts at cost floor(k * total / n).
    for (int tile = 0; tile < p.batch; tile += kThreads) {
        const int t = tile + threadIdx.x;
        long long blocks = 0, weight = 1;
        if (t < p.batch) run_at(t, blocks, weight);
        const long long count = blocks * weight;
        partial[threadIdx.x] = count;
        __syncthreads();
        for (int step = 1; step < kThreads; step *= 2) {  // inclusive scan (Hillis-Steele)
            const long long add = static_cast<int>(threadIdx.x) >= step ? partial[threadIdx.x - step] : 0;
            __syncthreads();
            partial[threadIdx.x] += add;
            __syncthreads();
        }
        const long long before = carry + partial[threadIdx.x] - count;
        if (count > 0) {
            for (long long k = (before * n + total - 1) / total; k < n; ++k) {
                const long long target = k * total / n;
                if (target >= before + count) break;
                if (target >= before) {
                    p.schedule[2 * k] = t;
                    p.schedule[2 * k + 1] = static_cast<int>((target - before) / weight);
                }
            }
        }
        __syncthreads();
        if (threadIdx.x == kThreads - 1) carry += partial[kThreads - 1];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        for (long long k = 0; k <= n; ++k) {
            if (k == n || k * total / n >= total) {
                p.schedule[2 * k] = p.batch;
                p.schedule[2 * k + 1] = 0;
            }
        }
    }
}

}  // namespace dgx
