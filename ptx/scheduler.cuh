// Persistent tile scheduler, one for every layout. Work comes in units: a single tile, or - when CTAs run
// as 2-CTA clusters that share one operand through TMA multicast (dense and contiguous) - a pair of tiles
// adjacent along the shared dimension, one per CTA of the cluster, or - split-K - one tile whose K the
// CTAs of the cluster divide among them. Cluster c takes units c, c + clusters,
// ... in a rasterised order: units are walked in bands of kGroupN along N, so CTAs running at the same
// time share the A rows of an m-block and a band of B, which keeps both in L2.
//
// Layouts (A and D seen as 2-D [rows, K] / [rows, N]; B as [groups * N, K]):
// - dense: M rows, one group.
// - contiguous (MoE, grouped along M): M rows hold every group's rows one segment after another; a
//   block's group is m_indices[first row of the block]. Blocks whose group is outside [0, groups) -
//   padding (-1) or a bad index - are skipped: no loads, no math, no stores. Pairs along M share B only
//   when both blocks belong to one group; a pair with one skipped block still runs it (see next_tile).
// - masked (MoE decode): `groups` slices of m_max rows each; group g's first masked_m[g] rows (clamped to
//   [0, m_max]) are valid. Only blocks holding valid rows are visited (and, in pairs along M, the block after a
//   group's odd last one).
// - K-grouped (MoE weight gradient): every group is a full M x N output (D[g] stacked along rows) over
//   its own range of K: group g's K is ks[g] (a multiple of 128), the groups' ranges follow one another
//   in A and B. Groups with no K are skipped.
// - contiguous with prefix sums (MoE, DeepGEMM's psum layout): one int per group, psum[g] = the end (exclusive)
//   of group g's rows; group g starts at psum[g - 1] rounded up to kBlockM (0 for g = 0), so the caller's
//   alignment of the groups must be a multiple of kBlockM. Values are clamped to [the group's start, M]: a
//   group whose end does not pass its start is empty. Rows in the gaps between groups are not inputs; the
//   last block of a group may store into the gap after it (as the m_indices layout stores padding rows).
// - batched (per-head einsums over strided views: dgx.einsum's 'bhr,hdr->bhd' / 'bhd,hdr->bhr' on the BF16
//   kernel, dgx.fp8_einsum on the FP8 kernel): `groups` full M x N outputs over one K; A and D (and the BF16
//   kernel's B) read and written through 3-D maps whose outer coordinate is the group, so a batch needs no copy and
//   a tile past M is clipped by TMA; rows and N blocks count within the group. The FP8 kernel reads B as the
//   M-grouped layouts do ([groups x N, K]: b_row includes the group), the BF16 kernel by its 3-D map.
// - batch-sum ('bmk,bnk->mn': the S batch summed into one output): one M x N output whose reduction runs over
//   (s, k), `groups` = S batches of kNumKBlocks k-blocks each. The flattened k-blocks are cut into
//   gridDim.x / tiles equal ranges (the host launches exactly tiles x ranges CTAs, one unit each); unit u is tile
//   u % tiles over range u / tiles, whose partial goes to slice `group` = range of a [ranges, M, N] workspace that
//   a second kernel sums in range order (deterministic: no atomics).
#pragma once
#include "common.cuh"

namespace dgx {

enum PairDim : int { kPairNone = 0, kPairN = 1, kPairM = 2 };
enum GemmLayout : int { kLayoutDense = 0, kLayoutContiguous = 1, kLayoutMasked = 2, kLayoutKGrouped = 3,
                        kLayoutContiguousPsum = 4, kLayoutBatched = 5, kLayoutBatchSum = 6 };

// One tile, as the producer and the math warpgroups both need it.
struct Tile {
    int a_row;      // first row of the tile in the 2-D view of A (batched: in its group)
    int b_row;      // first row of the tile in the 2-D view of B (groups stacked along N)
    int d_row;      // first row of the tile in the 2-D view of D (batched: in its group)
    int d_row_end;  // rows of D at or past this one are not stored (end of M, or of the group's rows)
    int n_block;
    int group;
    int sfa_row;    // M coordinate of the tile in the A-scale tensor map
    int sfa_kb0;    // extra k-block offset in the A-scale tensor map (masked: group * k-blocks)
    int kb0;        // first k-block of the tile's K range (K-grouped: the group's)
    int num_kb;     // k-blocks of that range (the kernel's K unless K-grouped)
    bool share = true;  // pairs: the shared operand is multicast (else each CTA loads its whole tile itself)
};

// N and the work units along it, for the scheduler: constants (static, an empty base) when N is compiled in; with
// kN 0 the run-time N the kernel sets after construction. (Member functions for the constants, or a constructor
// argument, moved instructions of compile-time-N kernels.) The constants come from the scheduler's own kNumNBlocks
// (a SwiGLU unit scheduler's is half the tile count, not N over its unit width).
template <int kN, int kNumNBlocks, int kBlockN, int kPair>
struct ShapeN {
    DGX_DEVICE static constexpr int shape_n() { return kN; }
    DGX_DEVICE static constexpr int num_n_units() { return kPair == kPairN ? (kNumNBlocks + 1) / 2 : kNumNBlocks; }
};
template <int kNumNBlocks, int kBlockN, int kPair>
struct ShapeN<0, kNumNBlocks, kBlockN, kPair> {
    int runtime_n = 0;
    DGX_DEVICE int shape_n() const { return runtime_n; }
    DGX_DEVICE int num_n_units() const {
        const int blocks = (runtime_n + kBlockN - 1) / kBlockN;
        return kPair == kPairN ? (blocks + 1) / 2 : blocks;
    }
};

// The k-blocks of the problem and of one tile, for the scheduler: constants (static, an empty base) when K is
// compiled in; with kRuntime the run-time count the kernel sets after construction (no split-K then).
template <bool kRuntime, int kNumKBlocks, int kTileKBlocks>
struct ShapeK {
    DGX_DEVICE static constexpr int num_k_blocks() { return kNumKBlocks; }
    DGX_DEVICE static constexpr int tile_k_blocks() { return kTileKBlocks; }
};
template <int kNumKBlocks, int kTileKBlocks>
struct ShapeK<true, kNumKBlocks, kTileKBlocks> {
    int runtime_k_blocks = 0;
    DGX_DEVICE int num_k_blocks() const { return runtime_k_blocks; }
    DGX_DEVICE int tile_k_blocks() const { return runtime_k_blocks; }
};

// kN 0: N comes at run time (ShapeN::runtime_n; kNumNBlocks is then 0 and unused), so one kernel serves every
// N of its config (dgx.kernels.fp8_gemm GemmConfig.runtime_n); otherwise N and its block counts are constants.
// kNumKBlocks 0 outside the K-grouped layout: K comes at run time (ShapeK::runtime_k_blocks; GemmConfig.runtime_k).
template <int kLayout_, int kBlockM, int kBlockN, int kNumNBlocks, int kNumKBlocks, int kGroupN, int kPair, int kN,
          int kSplit = 1>
struct TileScheduler : ShapeN<kN, kNumNBlocks, kBlockN, kPair>,
                       ShapeK<kNumKBlocks == 0 && kLayout_ != kLayoutKGrouped, kNumKBlocks, kNumKBlocks / kSplit> {
    using ShapeN<kN, kNumNBlocks, kBlockN, kPair>::shape_n;
    using ShapeN<kN, kNumNBlocks, kBlockN, kPair>::num_n_units;
    using ShapeK<kNumKBlocks == 0 && kLayout_ != kLayoutKGrouped, kNumKBlocks, kNumKBlocks / kSplit>::num_k_blocks;
    using ShapeK<kNumKBlocks == 0 && kLayout_ != kLayoutKGrouped, kNumKBlocks, kNumKBlocks / kSplit>::tile_k_blocks;
    static constexpr int kLayout = kLayout_;  // GemmLayout
    static_assert(kGroupN >= 1, "a raster band holds at least one unit");
    static_assert(kLayout == kLayoutDense || kLayout == kLayoutContiguous || kLayout == kLayoutMasked ||
                  kPair == kPairNone, "multicast pairs are for the dense, contiguous and masked layouts only");
    static_assert(kSplit == 1 || (kPair == kPairNone && kLayout != kLayoutKGrouped),
                  "split-K clusters run without multicast pairs, not on the K-grouped layout");
    static_assert((kLayout != kLayoutBatched && kLayout != kLayoutBatchSum) || (kPair == kPairNone && kSplit == 1),
                  "the batched layouts read 3-D maps (no multicast) and take one CTA per unit (no split-K cluster)");
    // Split-K: the kSplit CTAs of a cluster take the same tiles, CTA `rank` the rank-th range of K.
    static constexpr int kCluster = kPair == kPairNone ? kSplit : 2;
    static constexpr int kTileKBlocks = kNumKBlocks / kSplit;

    const int* __restrict__ layout;  // m_indices (contiguous), masked_m (masked) or ks (K-grouped)
    int m;                           // dense / contiguous: rows; masked: m_max, rows per group; K-grouped: M
    int num_groups;
    int next;
    int stride;
    int rank;
    // Masked: the group `next` falls in, its valid rows and the units of the groups before it.
    // K-grouped: the first group whose K offset is not summed yet, and the k-blocks of those before it.
    int group = 0;
    int units_before = 0;
    int group_rows = 0;
    int kb_before = 0;
    // Contiguous with prefix sums: the rows [psum_start, psum_end) of the group `group` (`units_before` as for
    // masked).
    int psum_start = 0;
    int psum_end = 0;

    DGX_DEVICE TileScheduler(int m_, const int* layout_, int num_groups_)
        : layout(layout_), m(m_), num_groups(num_groups_) {
        // Clusters are laid out along x, so the rank in the cluster is blockIdx.x % kCluster.
        next = blockIdx.x / kCluster;
        stride = gridDim.x / kCluster;
        rank = blockIdx.x % kCluster;
        if constexpr (kLayout == kLayoutMasked) group_rows = masked_rows(0);
        if constexpr (kLayout == kLayoutContiguousPsum) psum_end = min(max(ld_global_nc_s32(layout), 0), m);
    }

    DGX_DEVICE int masked_rows(int g) const {
        return g < num_groups ? min(max(ld_global_nc_s32(layout + g), 0), m) : 0;
    }

    // Unit `u` of a grid of num_m_units x num_n_units, walked in bands of kGroupN units along N.
    DGX_DEVICE static void raster(int u, int num_m_units, int& mu, int& nu, int num_n_units) {
        const int band_units = num_m_units * kGroupN;
        const int band = u / band_units;
        const int in_band = u - band * band_units;
        const int first_n = band * kGroupN;
        const int width = min(kGroupN, num_n_units - first_n);
        mu = in_band / width;
        nu = first_n + in_band - mu * width;
    }

    // The next tile of this CTA. With a pair, the tile may lie past the matrix (odd block counts): the
    // CTA still loads its half of the shared operand for its peer, and stores nothing.
    DGX_DEVICE bool next_tile(Tile& t) {
        if constexpr (kLayout == kLayoutMasked && kPair != kPairNone) {
            // Pairs (issue 44): a unit is two tiles of one group, adjacent along N (sharing A; num_n_units counts
            // pairs, and N has an even number of n-blocks) or along M (sharing B). An m-block past the group's
            // rows (odd block count) still runs for its peer and stores nothing (d_row_end).
            for (;;) {
                if (group >= num_groups) return false;
                const int m_blocks = ceil_div(group_rows, kBlockM);
                const int units = (kPair == kPairM ? (m_blocks + 1) / 2 : m_blocks) * num_n_units();
                if (next < units_before + units) break;
                units_before += units;
                group_rows = masked_rows(++group);
            }
            const int m_blocks = ceil_div(group_rows, kBlockM);
            int mu, nu;
            raster(next - units_before, kPair == kPairM ? (m_blocks + 1) / 2 : m_blocks, mu, nu, num_n_units());
            next += stride;
            const int m_block = kPair == kPairM ? mu * 2 + rank : mu;
            t.n_block = kPair == kPairN ? nu * 2 + rank : nu;
            t.a_row = t.d_row = group * m + m_block * kBlockM;
            t.d_row_end = group * m + group_rows;
            t.b_row = group * shape_n() + t.n_block * kBlockN;
            t.group = group;
            t.sfa_row = m_block * kBlockM;
            t.sfa_kb0 = group * num_k_blocks();
            t.kb0 = 0;
            t.num_kb = tile_k_blocks();
            return true;
        } else if constexpr (kLayout == kLayoutMasked) {
            for (;;) {
                if (group >= num_groups) return false;
                const int units = ceil_div(group_rows, kBlockM) * num_n_units();
                if (next < units_before + units) break;
                units_before += units;
                group_rows = masked_rows(++group);
            }
            int mu, nu;
            raster(next - units_before, ceil_div(group_rows, kBlockM), mu, nu, num_n_units());
            next += stride;
            t.a_row = t.d_row = group * m + mu * kBlockM;
            t.d_row_end = group * m + group_rows;
            t.n_block = nu;
            t.b_row = group * shape_n() + nu * kBlockN;
            t.group = group;
            t.sfa_row = mu * kBlockM;
            t.sfa_kb0 = group * num_k_blocks();
            t.kb0 = kSplit > 1 ? rank * kTileKBlocks : 0;
            t.num_kb = tile_k_blocks();
            return true;
        } else if constexpr (kLayout == kLayoutBatched) {
            // Every group has all m rows: unit u is group u / per_group's tile u % per_group. Rows count within the
            // group (the maps' middle coordinate); b_row and sfa_kb0 as the M-grouped layouts (FP8 kernel).
            const int per_group = ceil_div(m, kBlockM) * num_n_units();
            if (next >= per_group * num_groups) return false;
            const int g = next / per_group;
            int mu, nu;
            raster(next - g * per_group, ceil_div(m, kBlockM), mu, nu, num_n_units());
            next += stride;
            t.a_row = t.d_row = t.sfa_row = mu * kBlockM;
            t.d_row_end = m;
            t.n_block = nu;
            t.b_row = g * shape_n() + nu * kBlockN;
            t.group = g;
            t.sfa_kb0 = g * kNumKBlocks;
            t.kb0 = 0;
            t.num_kb = kNumKBlocks;
            t.share = true;
            return true;
        } else if constexpr (kLayout == kLayoutContiguousPsum) {
            // Walk the groups from the one the previous tile was in: `next` only grows.
            for (;;) {
                if (group >= num_groups) return false;
                const int units = ceil_div(psum_end - psum_start, kBlockM) * num_n_units();
                if (next < units_before + units) break;
                units_before += units;
                if (++group >= num_groups) return false;
                psum_start = ceil_div(psum_end, kBlockM) * kBlockM;
                psum_end = min(max(ld_global_nc_s32(layout + group), psum_start), m);
            }
            int mu, nu;
            raster(next - units_before, ceil_div(psum_end - psum_start, kBlockM), mu, nu, num_n_units());
            next += stride;
            t.a_row = t.d_row = t.sfa_row = psum_start + mu * kBlockM;
            t.d_row_end = psum_end;
            t.n_block = nu;
            t.b_row = group * shape_n() + nu * kBlockN;
            t.group = group;
            t.sfa_kb0 = 0;
            t.kb0 = 0;
            t.num_kb = num_k_blocks();
            t.share = true;
            return true;
        } else if constexpr (kLayout == kLayoutKGrouped) {
            const int per_group = ceil_div(m, kBlockM) * num_n_units();
            for (; next < per_group * num_groups; next += stride) {
                const int g = next / per_group;
                for (; group < g; ++group) kb_before += ld_global_nc_s32(layout + group) / 128;
                const int num_kb = ld_global_nc_s32(layout + g) / 128;
                if (num_kb <= 0) continue;  // nothing to add to this group's D
                int mu, nu;
                raster(next - g * per_group, ceil_div(m, kBlockM), mu, nu, num_n_units());
                t.a_row = t.sfa_row = mu * kBlockM;
                t.d_row = g * m + mu * kBlockM;
                t.d_row_end = g * m + m;
                t.n_block = nu;
                t.b_row = nu * kBlockN;
                t.group = g;
                t.sfa_kb0 = 0;
                t.kb0 = kb_before;
                t.num_kb = num_kb;
                next += stride;
                return true;
            }
            return false;
        } else if constexpr (kLayout == kLayoutBatchSum) {
            const int tiles = ceil_div(m, kBlockM) * num_n_units();
            const int ranges = static_cast<int>(gridDim.x) / tiles;
            if (next >= tiles * ranges) return false;
            const int r = next / tiles;
            int mu, nu;
            raster(next - r * tiles, ceil_div(m, kBlockM), mu, nu, num_n_units());
            next += stride;
            // 64-bit: S x k-blocks x ranges may pass 2^31 (each range's bounds fit an int: the host checks S x
            // k-blocks does).
            const long long total = static_cast<long long>(num_groups) * kNumKBlocks;
            const int first = static_cast<int>(total * r / ranges);
            t.a_row = t.d_row = t.sfa_row = mu * kBlockM;
            t.d_row_end = m;
            t.n_block = nu;
            t.b_row = nu * kBlockN;
            t.group = r;  // the workspace slice of this range's partial
            t.sfa_kb0 = 0;
            t.kb0 = first;
            t.num_kb = static_cast<int>(total * (r + 1) / ranges) - first;
            t.share = true;
            return true;
        } else {
            const int num_m_blocks = ceil_div(m, kBlockM);
            const int num_m_units = kPair == kPairM ? (num_m_blocks + 1) / 2 : num_m_blocks;
            const int num_units = num_m_units * num_n_units();
            for (; next < num_units; next += stride) {
                int mu, nu;
                raster(next, num_m_units, mu, nu, num_n_units());
                const int m_block = kPair == kPairM ? mu * 2 + rank : mu;
                t.n_block = kPair == kPairN ? nu * 2 + rank : nu;
                t.a_row = t.d_row = t.sfa_row = m_block * kBlockM;
                t.d_row_end = m;
                t.sfa_kb0 = 0;
                t.kb0 = kSplit > 1 ? rank * kTileKBlocks : 0;
                t.num_kb = tile_k_blocks();
                t.group = 0;
                t.share = true;
                if constexpr (kLayout == kLayoutContiguous) {
                    // The group of the rows from `row` on (m_indices at `row`), or -1 for rows to skip:
                    // padding, a bad index, or past M.
                    auto group_at = [&](int row) {
                        const int g = row < m ? ld_global_nc_s32(layout + row) : -1;
                        return g >= 0 && g < num_groups ? g : -1;
                    };
                    t.group = group_at(t.d_row);
                    if constexpr (kPair == kPairM) {
                        // Both CTAs decide alike from both blocks, so they stay in step on the barriers they
                        // share: a pair is skipped only when both blocks are. A CTA whose block is skipped
                        // while its peer's is not runs the unit with the peer's group (loading its half of
                        // that B) and stores nothing. Blocks of two different groups load B each for itself.
                        const int peer = group_at((m_block ^ 1) * kBlockM);
                        if (t.group < 0 && peer < 0) continue;
                        t.share = t.group < 0 || peer < 0 || t.group == peer;
                        if (t.group < 0) {
                            t.group = peer;
                            t.d_row_end = 0;
                        }
                    } else if (t.group < 0) {
                        continue;
                    }
                }
                t.b_row = t.group * shape_n() + t.n_block * kBlockN;
                next += stride;
                return true;
            }
            return false;
        }
    }
};

}  // namespace dgx
