// Unpacks UE8M0 scale factors packed four to a 32-bit word (DeepGEMM's packed layout: byte j of word
// [g, r, p] is the biased exponent e of the scale of k-block 4p + j of row r) into FP32 scales, the float whose
// bits are e << 23 (2^(e - 127); e = 0 gives 0). Both tensors are [G, rows, ...] with any element strides: the
// packed input as callers hold it, the output in the layout the GEMM kernels read (the TMA-aligned MN-major
// layout for per-row scales, row-major for per-block ones).
//
// One thread per (group, row): it reads its row's words one after another and writes the row's k-blocks. With
// an MN-major input and output (the usual case), the threads of a warp read and write 32 consecutive words.
#pragma once
#include "common.cuh"
#include "pdl.cuh"

namespace dgx {

template <int kThreads, typename Params>
DGX_DEVICE void ue8m0_unpack(const Params& p) {
    griddepcontrol_wait();  // PDL (ptx/pdl.cuh): no prologue; the packed scales may be a predecessor's output
    griddepcontrol_launch_dependents();
    const int row = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
    if (row >= p.rows) return;
    const int64_t g = blockIdx.y;
    const int* src = p.packed + g * p.in_group + row * p.in_row;
    float* dst = p.out + g * p.out_group + row * p.out_row;
    for (int w = 0; w * 4 < p.kblocks; ++w) {
        const uint32_t word = static_cast<uint32_t>(src[w * p.in_word]);
        const int count = min(4, p.kblocks - w * 4);
        for (int j = 0; j < count; ++j)
            dst[(w * 4 + j) * p.out_kblock] = __uint_as_float(((word >> (8 * j)) & 0xffu) << 23);
    }
}

}  // namespace dgx
