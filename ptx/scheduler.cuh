// Persistent tile scheduler. Work comes in units: a single tile, or - when CTAs run as 2-CTA clusters
// that share one operand through TMA multicast - a pair of tiles adjacent along the shared dimension,
// one per CTA of the cluster. Cluster c takes units c, c + clusters, ... in a rasterised order: units
// are walked in bands of kGroupN along N, so CTAs running at the same time share the A rows of an
// m-block and a band of B, which keeps both in L2.
#pragma once
#include "common.cuh"

namespace dgx {

enum PairDim : int { kPairNone = 0, kPairN = 1, kPairM = 2 };

template <int kBlockM, int kBlockN, int kNumNBlocks, int kGroupN, int kPair>
struct TileScheduler {
    static_assert(kGroupN >= 1, "a raster band holds at least one unit");
    static constexpr int kCluster = kPair == kPairNone ? 1 : 2;
    static constexpr int kNumNUnits = kPair == kPairN ? (kNumNBlocks + 1) / 2 : kNumNBlocks;

    int num_m_units;
    int num_units;
    int next;
    int stride;
    int rank;

    DGX_DEVICE explicit TileScheduler(int m) {
        const int num_m_blocks = ceil_div(m, kBlockM);
        num_m_units = kPair == kPairM ? (num_m_blocks + 1) / 2 : num_m_blocks;
        num_units = num_m_units * kNumNUnits;
        // Clusters are laid out along x, so the rank in the cluster is blockIdx.x % kCluster.
        next = blockIdx.x / kCluster;
        stride = gridDim.x / kCluster;
        rank = blockIdx.x % kCluster;
    }

    // The next tile of this CTA. With a pair, the tile may lie past the matrix (odd block counts): the
    // CTA still loads its half of the shared operand for its peer, and stores nothing.
    DGX_DEVICE bool next_tile(int& m_block, int& n_block) {
        if (next >= num_units) return false;
        const int band_units = num_m_units * kGroupN;
        const int band = next / band_units;
        const int in_band = next - band * band_units;
        const int first_n = band * kGroupN;
        const int width = min(kGroupN, kNumNUnits - first_n);
        const int mu = in_band / width;
        const int nu = first_n + in_band - mu * width;
        m_block = kPair == kPairM ? mu * 2 + rank : mu;
        n_block = kPair == kPairN ? nu * 2 + rank : nu;
        next += stride;
        return true;
    }
};

}  // namespace dgx
