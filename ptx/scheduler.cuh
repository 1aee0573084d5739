// Persistent tile scheduler: CTA b takes tiles b, b + gridDim.x, ... in a rasterised order.
// Tiles are walked in bands of kGroupN n-blocks: CTAs running at the same time then share the A rows of
// one m-block and a band of B, which keeps both in L2.
#pragma once
#include "common.cuh"

namespace dgx {

template <int kBlockM, int kBlockN, int kNumNBlocks, int kGroupN>
struct TileScheduler {
    static_assert(kGroupN >= 1, "a raster band holds at least one n-block");

    int num_m_blocks;
    int num_tiles;
    int next;

    DGX_DEVICE explicit TileScheduler(int m) {
        num_m_blocks = ceil_div(m, kBlockM);
        num_tiles = num_m_blocks * kNumNBlocks;
        next = blockIdx.x;
    }

    DGX_DEVICE bool next_tile(int& m_block, int& n_block) {
        if (next >= num_tiles) return false;
        const int band_tiles = num_m_blocks * kGroupN;
        const int band = next / band_tiles;
        const int in_band = next - band * band_tiles;
        const int first_n = band * kGroupN;
        const int width = min(kGroupN, kNumNBlocks - first_n);
        m_block = in_band / width;
        n_block = first_n + in_band - m_block * width;
        next += gridDim.x;
        return true;
    }
};

}  // namespace dgx
