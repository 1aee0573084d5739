"""Size limits of the FP8 GEMM kernels, each derived from what the kernels compute with.

* 32-bit index math. N and K are ``int`` template arguments of ``Fp8GemmTraits`` (ptx/fp8_gemm.cuh), M
  and the group count are ``int`` kernel arguments, and TMA takes signed 32-bit coordinates. The kernels
  round up to whole tiles (``(kN + kBlockN - 1) / kBlockN``, ``m + BLOCK_M - 1``, ``(kK + 127) / 128``)
  with BLOCK_M, BLOCK_N <= 256, so every dimension must stay :data:`MAX_DIM` = 2**31 - 256 or below for
  those sums not to overflow.
* Stacked operands. M-grouped B is one tensor map over [groups x N, K]; masked A and D are [groups x
  M_max, ...]; K-grouped A and B are stored flat along K (the sum of the groups' K) and D is [groups x M,
  N]: those row counts (TMA coordinates) obey the same bound.
* TMA strides and boxes. A global stride must be a multiple of 16 bytes and below 2**40 bytes, and a box
  side at most 256 elements. With dimensions below 2**31 the widest row (FP32 D: 4 x N bytes) stays far
  below 2**40; the 16-byte rule is why N is a multiple of 8 (BF16 D rows) and K a multiple of 16 (FP8 A
  and B rows); the boxes are the tile sizes, at most 256 by construction.
* K-grouped scales. Each group's K is a multiple of 128: the A and B scales of a group are one float per
  row per 128 of K, stacked group after group.

:mod:`dgx.problems` checks a problem against these; the shapes-file parser, ``dgx warmup`` and ``dgx
inspect`` all go through it.
"""

from __future__ import annotations

#: The largest tile side (BLOCK_M and BLOCK_N are at most 256).
MAX_TILE = 256
#: Largest value of any dimension or stacked row count: tile rounding must stay within int32.
MAX_DIM = 2**31 - MAX_TILE
#: TMA: global strides are multiples of this many bytes.
TMA_STRIDE_ALIGN = 16
#: N is a multiple of this (16-byte rows of the BF16 output).
N_ALIGN = TMA_STRIDE_ALIGN // 2
#: K is a multiple of this (16-byte rows of the FP8 operands).
K_ALIGN = TMA_STRIDE_ALIGN
#: K of one group of a K-grouped GEMM is a multiple of this (scales per 128 of K, stacked per group).
K_GROUP_ALIGN = 128
#: The only architecture the kernels are written for (wgmma, setmaxnreg, TMA multicast).
SUPPORTED_ARCH = "sm_90a"
#: The most SMs a kernel can be planned for: a full GH100 die has 144 (H100 SXM and H200 enable 132); the
#: persistent kernels launch one CTA per SM, so a larger count only describes a GPU that does not exist.
MAX_NUM_SMS = 144
