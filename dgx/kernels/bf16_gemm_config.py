"""The BF16 GEMM family's config (ptx/bf16_gemm.cuh): what a kernel compiles in, what it supports (validate, the
device code's static_asserts said first), its shared memory, the source it renders, and the kernel's launch
contract (INTERFACE). dgx.kernels.bf16_gemm is the family's surface."""

from __future__ import annotations

from dataclasses import dataclass

from .. import jit
from ..intmath import ceil_div
from ..kinds import Layout, ShareDim
from .interface import TENSOR_MAP, KernelInterface, Param
from .wgmma_render import render_wgmma_bf16

SHARE_NONE, SHARE_A, SHARE_B = int(ShareDim.NONE), int(ShareDim.A), int(ShareDim.B)
(LAYOUT_DENSE, LAYOUT_CONTIGUOUS, LAYOUT_MASKED, LAYOUT_K_GROUPED, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_BATCHED,
 LAYOUT_BATCH_SUM) = (int(v) for v in Layout)
#: The einsum family's layouts (dgx/kernels/einsum.py): operands and D through 3-D maps, one group per head or batch.
BATCHED_LAYOUTS = (LAYOUT_BATCHED, LAYOUT_BATCH_SUM)
LAYOUT_NAMES = {int(v): v.name.lower() for v in Layout}

#: Operand major-ness: "k" (K contiguous: A [M, K], B [N, K] row-major) or "mn" (M / N contiguous).
MAJORS = ("k", "mn")
#: Output dtypes.
OUT_DTYPES = ("bfloat16", "float32")
#: How the math warpgroups share the work (Bf16GemmTraits' Bf16Schedule, by index). "cooperative": every tile's rows
#: split between them (64-row tiles: one warpgroup), both running the epilogue while the tensor cores wait;
#: "pingpong": each owns alternate whole tiles and they take turns at the tensor cores, one's epilogue under the
#: other's MMAs (ptx/bf16_gemm_pingpong.cuh).
SCHEDULES = ("cooperative", "pingpong")
#: DeepGEMM's names of the four dense forms by (major of A, major of B): n = K-major A, t = M-major A; then t =
#: K-major B, n = N-major B.
FORMS = {("k", "k"): "nt", ("k", "mn"): "nn", ("mn", "mn"): "tn", ("mn", "k"): "tt"}

BLOCK_K = 64  # BF16 of K per K atom: one 128-byte swizzle row (a k-block holds k_atoms of them)
K_ATOMS = (1, 2, 4)
SMEM_LIMIT = 232448  # bytes of shared memory one block may use on Hopper (227 KB)
BARRIER_BYTES = 16  # full + empty mbarrier per stage
TILE_BARRIER_BYTES = 16  # split-K: the partials-published and partials-read barriers
MAX_SPLIT_K = 8  # a portable cluster holds at most 8 CTAs
MAX_ACCUMULATORS = 160  # FP32 accumulators per math thread (Bf16GemmTraits: kMmaPerWG * kAccum)
MAX_STAGES = 16

# The kernel's parameters, in this order (ptx/bf16_gemm.cuh bf16_gemm_body reads them by name): the tensor maps of A,
# B and D; `m` the rows (masked: per group; K-grouped: M of each group's output); `grouped_layout` m_indices, the
# prefix sums, masked_m or the K-grouped groups' K (device memory); `num_groups`; `d_ptr`/`ld_d` D for the rows the
# masked layout stores from registers.
INTERFACE = KernelInterface(
    "Bf16GemmParams",
    (
        Param("tmap_a", TENSOR_MAP),
        Param("tmap_b", TENSOR_MAP),
        Param("tmap_d", TENSOR_MAP),
        Param("m", "int"),
        Param("grouped_layout", "const int*"),
        Param("num_groups", "int"),
        Param("d_ptr", "void*"),
        Param("ld_d", "long long"),
    ),
)


def mn_swizzle(rows: int) -> int:
    """Bytes of the swizzle an MN-major tile of `rows` rows of M/N is stored with (OperandTile::kSwizzle): 128 when
    its rows are whole 64-element atoms, else 64 (32-element atoms)."""
    return 128 if rows % 64 == 0 else 64


def d_span_bytes(block_n: int, elem_bytes: int) -> int:
    """Bytes per swizzle span of the staged output tile (Bf16GemmTraits::kDSpan; 16 = no swizzle)."""
    row = block_n * elem_bytes
    for span in (128, 64, 32):
        if row % span == 0:
            return span
    return 16


def stage_bytes(block_m: int, block_n: int, k_atoms: int = 1) -> int:
    """Bytes of A and B one stage holds: k_atoms x 64 of K of both tiles."""
    return (block_m + block_n) * 128 * k_atoms


def out_tile_bytes(block_m: int, block_n: int, out_dtype: str = "bfloat16", split_k: int = 1,
                   schedule: str = "cooperative") -> int:
    """Bytes of the staged output tile (Bf16GemmTraits::kSmemD); split-K: the FP32 partial tile instead, rows padded
    by 8 floats, rounded up to 1024 bytes; ping-pong: one staged tile per math warpgroup."""
    if split_k > 1:
        return ceil_div(block_m * (block_n + 8) * 4, 1024) * 1024
    return block_m * block_n * (4 if out_dtype == "float32" else 2) * (2 if schedule == "pingpong" else 1)


def smem_bytes(block_m: int, block_n: int, stages: int, out_dtype: str = "bfloat16", k_atoms: int = 1,
               split_k: int = 1, schedule: str = "cooperative") -> int:
    """Dynamic shared memory of a config (Bf16GemmTraits::kSmemBytes): the staged output tile (split-K: the partial
    tile; ping-pong: two), then per stage A and B (k_atoms x 64 of K each) and two barriers (split-K: two more)."""
    return (out_tile_bytes(block_m, block_n, out_dtype, split_k, schedule)
            + stages * (stage_bytes(block_m, block_n, k_atoms) + BARRIER_BYTES)
            + (TILE_BARRIER_BYTES if split_k > 1 else 0))


def max_stages(block_m: int, block_n: int, out_dtype: str = "bfloat16", k_atoms: int = 1, split_k: int = 1,
               schedule: str = "cooperative") -> int:
    """The most stages that fit next to the staged output tile(s) (at most MAX_STAGES)."""
    fixed = smem_bytes(block_m, block_n, 0, out_dtype, k_atoms, split_k, schedule)
    return max(0, min(MAX_STAGES, (SMEM_LIMIT - fixed) // (stage_bytes(block_m, block_n, k_atoms) + BARRIER_BYTES)))


def validate(config: "Bf16GemmConfig") -> str:
    """'' if `config` is a kernel the device code supports, else what is wrong (the static_asserts of
    Bf16GemmTraits and OperandTile, said first here)."""
    c = config
    if c.major_a not in MAJORS or c.major_b not in MAJORS:
        return f"major_a and major_b must be one of {MAJORS}; got {c.major_a!r}, {c.major_b!r}"
    if c.out_dtype not in OUT_DTYPES:
        return f"out_dtype must be one of {OUT_DTYPES}; got {c.out_dtype!r}"
    if c.layout not in LAYOUT_NAMES:
        return f"layout must be one of {sorted(LAYOUT_NAMES)}; got {c.layout}"
    if c.block_m not in (64, 128, 256):
        return f"block_m must be 64, 128 or 256; got {c.block_m}"
    if c.schedule not in SCHEDULES:
        return f"schedule must be one of {SCHEDULES}; got {c.schedule!r}"
    if c.schedule == "pingpong" and c.block_m not in (64, 128):
        return (f"a ping-pong tile is one warpgroup's (block_m 64 or 128: one or two m64 slices in its registers); "
                f"got block_m {c.block_m}")
    if c.schedule == "pingpong" and c.split_k != 1:
        return f"split-K tiles are summed by every warpgroup of the cluster: no ping-pong schedule (got split_k {c.split_k})"
    if c.block_n % 8 or not 8 <= c.block_n <= 256:
        return f"block_n must be a multiple of 8 in 8..256; got {c.block_n}"
    if c.major_b == "mn" and c.block_n % 32:
        return f"an N-major B needs block_n a multiple of 32 (whole 64-byte swizzle atoms); got {c.block_n}"
    slices = c.wg_rows // 64
    if slices * c.block_n // 2 > MAX_ACCUMULATORS:
        return (f"block_m {c.block_m} x block_n {c.block_n} needs {slices * c.block_n // 2} accumulators per thread "
                f"(max {MAX_ACCUMULATORS})")
    if c.k_atoms not in K_ATOMS:
        return f"k_atoms must be one of {K_ATOMS} (64, 128 or 256 of K per k-block); got {c.k_atoms}"
    if c.layout == LAYOUT_K_GROUPED and c.k_atoms > 2:
        return f"the K-grouped layout takes k_atoms 1 or 2 (a group's K is a multiple of 128); got {c.k_atoms}"
    if not 2 <= c.stages <= MAX_STAGES:
        return f"stages must be in 2..{MAX_STAGES}; got {c.stages}"
    if c.n <= 0 or c.n % 8:
        return f"n must be a positive multiple of 8 (16-byte rows of D); got {c.n}"
    if c.k < 0 or (c.k == 0) != (c.layout == LAYOUT_K_GROUPED):
        return f"k must be positive, or 0 for the K-grouped layout (K at run time); got {c.k} with layout {c.layout}"
    if c.group_n < 1:
        return f"group_n must be at least 1; got {c.group_n}"
    if c.pair not in (SHARE_NONE, SHARE_A, SHARE_B):
        return f"pair must be 0 (none), 1 (share A along N) or 2 (share B along M); got {c.pair}"
    if c.pair != SHARE_NONE and c.layout not in (LAYOUT_DENSE, LAYOUT_CONTIGUOUS):
        return "multicast pairs are for the dense and contiguous layouts only"
    if c.pair == SHARE_A and c.major_a == "mn" and c.block_m % 128:
        return f"sharing an M-major A needs block_m 128 or 256 (two 64-row atoms to split); got {c.block_m}"
    if c.pair == SHARE_B and c.major_b == "mn":
        return "an N-major B is loaded through a 3-D map, which is not shared (pair 2)"
    if c.pair == SHARE_B and c.block_n % 16:
        return f"sharing B needs block_n a multiple of 16 (1024-byte halves); got {c.block_n}"
    if c.layout in (LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_MASKED) and c.major_a != "k":
        return "the M-grouped layouts take a K-major A"
    if c.layout == LAYOUT_MASKED and c.major_b != "k":
        return "the masked layout takes a K-major B"
    if c.layout == LAYOUT_K_GROUPED and (c.major_a, c.major_b) != ("mn", "mn"):
        return "the K-grouped layout takes A and B MN-major ([sum of K, M] and [sum of K, N] row-major)"
    if c.layout in (LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_MASKED) and c.out_dtype != "bfloat16":
        return "the M-grouped layouts write a BF16 D"
    if c.layout in (LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_MASKED) and c.with_c:
        return "the M-grouped layouts add no C"
    if c.layout in BATCHED_LAYOUTS and (c.major_a != "k" or c.with_c):
        return "the batched (einsum) layouts take a K-major A and add no C"
    if c.layout == LAYOUT_BATCH_SUM and (c.major_b != "k" or c.out_dtype != "float32"):
        return "the batch-sum layout takes a K-major B and stores FP32 partials"
    if c.layout == LAYOUT_BATCH_SUM and c.schedule != "cooperative":
        return "the batch-sum layout's promoted k-loop runs the cooperative schedule"
    if c.layout == LAYOUT_BATCH_SUM and promoted_accumulators(c.block_m, c.block_n) > MAX_PROMOTED_ACCUMULATORS:
        return (f"the batch-sum layout keeps two accumulator sets per math thread (promotion): at most "
                f"{MAX_PROMOTED_ACCUMULATORS} (block_n <= 192 at block_m 64 or 128); got "
                f"{promoted_accumulators(c.block_m, c.block_n)} for {c.block_m}x{c.block_n}")
    problem = validate_split(c)
    if problem:
        return problem
    need = c.smem_bytes
    if need > SMEM_LIMIT:
        return f"needs {need} bytes of shared memory; the limit is {SMEM_LIMIT}"
    return ""


#: Promotion (the batch-sum layout, ptx/bf16_gemm_math.cuh bf16_promoted_kloop) holds the tile's sum and one
#: k-block's MMA result: both together at most this many FP32 registers per math thread (of its 232).
MAX_PROMOTED_ACCUMULATORS = 192


def promoted_accumulators(block_m: int, block_n: int) -> int:
    """FP32 registers per math thread of a promoted (batch-sum) cooperative tile: two sets of (m64 slices per
    warpgroup) x block_n / 2."""
    wg_rows = block_m if block_m == 64 else block_m // 2
    return 2 * (wg_rows // 64) * block_n // 2


def validate_split(c: "Bf16GemmConfig") -> str:
    """'' if the config's split_k is a split the kernel supports (Bf16GemmTraits' split-K static_asserts), else what
    is wrong."""
    if isinstance(c.split_k, bool) or not isinstance(c.split_k, int) or not 1 <= c.split_k <= MAX_SPLIT_K:
        return f"split_k must be an int in 1..{MAX_SPLIT_K} (CTAs of a portable cluster); got {c.split_k!r}"
    if c.split_k == 1:
        return ""
    if c.pair != SHARE_NONE:
        return "split-K clusters do not also share an operand through multicast (pair must be 0)"
    if c.layout not in (LAYOUT_DENSE, LAYOUT_MASKED):
        return "split-K is for the dense and masked layouts"
    if c.block_m > 128:
        return f"split-K needs one m64 slice per warpgroup (block_m 64 or 128); got block_m {c.block_m}"
    k_blocks = ceil_div(c.k, BLOCK_K * c.k_atoms)
    if k_blocks % c.split_k:
        return (f"split_k {c.split_k} must divide the {k_blocks} k-blocks of K = {c.k} ({BLOCK_K * c.k_atoms} of K "
                "each): whole k-blocks per range")
    if c.with_c and c.out_dtype != "float32":
        return "split-K adds C only to an FP32 D (the cluster's sums are stored whole, not reduce-added)"
    return ""


@dataclass(frozen=True)
class Bf16GemmConfig:
    """Everything compile-time about one BF16 GEMM kernel. M (and, K-grouped, each group's K) are run-time values."""

    n: int
    k: int  # 0 for the K-grouped layout
    block_m: int
    block_n: int
    stages: int
    major_a: str = "k"
    major_b: str = "k"
    out_dtype: str = "bfloat16"
    with_c: bool = False  # D += the tile (TMA reduce-add): D holds C
    layout: int = LAYOUT_DENSE
    group_n: int = 16  # raster band of the scheduler, in units along N
    pair: int = SHARE_NONE  # 2-CTA clusters sharing A (SHARE_A, along N) or B (SHARE_B, along M) by multicast
    k_atoms: int = 1  # 64-K atoms per k-block (stage): 2 or 4 take fewer, larger k-blocks (one barrier round each)
    # Split-K: clusters of `split_k` CTAs run each tile, CTA r over the r-th of split_k equal ranges of K, and sum
    # their FP32 partial tiles through distributed shared memory in rank order (deterministic). For the memory-bound
    # decode shapes: wide tiles that read A (and the tile's B) once per K range and still give every SM work.
    split_k: int = 1
    # How the math warpgroups share the work (SCHEDULES): "pingpong" gives each warpgroup alternate whole tiles of
    # block_m x block_n and hands the tensor cores back and forth, so every epilogue runs under the other's MMAs.
    schedule: str = "cooperative"

    def __post_init__(self) -> None:
        for name in ("layout", "pair"):  # plain ints: an enum member renders and hashes like its value
            object.__setattr__(self, name, int(getattr(self, name)))
        problem = validate(self)
        if problem:
            raise ValueError(f"invalid BF16 GEMM config {self}: {problem}")

    @property
    def form(self) -> str:
        """DeepGEMM's name of the operands' layout: nt, nn, tn or tt."""
        return FORMS[(self.major_a, self.major_b)]

    @property
    def cluster(self) -> int:
        """CTAs per cluster: a multicast pair, or the split-K ranks of one tile."""
        return self.split_k if self.pair == SHARE_NONE else 2

    @property
    def math_warpgroups(self) -> int:
        return 2 if self.schedule == "pingpong" or self.block_m != 64 else 1

    @property
    def wg_rows(self) -> int:
        """Rows of a tile one math warpgroup computes (Bf16GemmTraits::kWGRows): ping-pong, all of them."""
        return self.block_m if self.schedule == "pingpong" else self.block_m // self.math_warpgroups

    @property
    def threads(self) -> int:
        return 128 * (self.math_warpgroups + 1)

    @property
    def out_bytes(self) -> int:
        return 4 if self.out_dtype == "float32" else 2

    @property
    def d_span(self) -> int:
        return d_span_bytes(self.block_n, self.out_bytes)

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.block_m, self.block_n, self.stages, self.out_dtype, self.k_atoms, self.split_k,
                          self.schedule)

    def box(self, operand: str) -> tuple[int, ...]:
        """The TMA box (innermost first) of operand "a" or "b" (OperandTile's boxes): K-major (64 of K, rows), half
        the rows when a pair shares the operand; MN-major one swizzle atom (elements, k_atoms x 64 of K), with a
        group dimension of 1 for B's 3-D map."""
        rows, major = (self.block_m, self.major_a) if operand == "a" else (self.block_n, self.major_b)
        shared = self.pair == (SHARE_A if operand == "a" else SHARE_B)
        if major == "k":
            if self.layout in BATCHED_LAYOUTS:  # a 3-D map [groups, rows, K]: one group per box
                return (BLOCK_K, rows, 1)
            return (BLOCK_K, rows // 2 if shared else rows)
        atom = mn_swizzle(rows) // 2
        return (atom, BLOCK_K * self.k_atoms) if operand == "a" else (atom, BLOCK_K * self.k_atoms, 1)

    def swizzle(self, operand: str) -> int:
        """Bytes of the swizzle operand "a" or "b" is loaded with."""
        rows, major = (self.block_m, self.major_a) if operand == "a" else (self.block_n, self.major_b)
        return 128 if major == "k" else mn_swizzle(rows)

    def units(self, m: int) -> int:
        """Scheduler work units for M rows: tiles (one per cluster under split-K), or tile pairs when paired."""
        mb, nb = ceil_div(m, self.block_m), ceil_div(self.n, self.block_n)
        if self.pair == SHARE_B:
            mb = ceil_div(mb, 2)
        elif self.pair == SHARE_A:
            nb = ceil_div(nb, 2)
        return mb * nb

    def grid(self, units: int, num_sms: int) -> int:
        """CTAs of the persistent grid for `units` work units: whole clusters, at most one CTA per SM, and no more
        than keep the wave count."""
        slots = max(num_sms // self.cluster, 1)
        waves = max(ceil_div(units, slots), 1)
        return max(ceil_div(units, waves), 1) * self.cluster

    @property
    def kernel_name(self) -> str:
        layout = "" if self.layout == LAYOUT_DENSE else f"_{LAYOUT_NAMES[self.layout]}"
        out = "f32" if self.out_dtype == "float32" else "bf16"
        c = "_c" if self.with_c else ""
        ka = f"_ka{self.k_atoms}" if self.k_atoms > 1 else ""
        sk = f"_sk{self.split_k}" if self.split_k > 1 else ""
        tile = f"_n{self.n}_k{self.k}_bm{self.block_m}_bn{self.block_n}_s{self.stages}_g{self.group_n}_p{self.pair}"
        pp = "_pp" if self.schedule == "pingpong" else ""
        if self.layout == LAYOUT_BATCH_SUM:  # DeepGEMM's test profiles its 'bmk,bnk->mn' kernels by this name
            return f"dgx_bf16_bmn_bnk_mn_gemm_impl{tile}{ka}{pp}"
        return f"dgx_bf16_gemm_{self.form}{layout}_{out}{c}{tile}{ka}{sk}{pp}"

    @property
    def warmup_kind(self) -> str:
        """The shapes-file kind that builds this kernel."""
        if self.layout == LAYOUT_BATCHED:
            return "einsum_bhr_hdr_bhd" if self.major_b == "k" else "einsum_bhd_hdr_bhr"
        return {LAYOUT_DENSE: "dense", LAYOUT_CONTIGUOUS: "m_grouped_contiguous",
                LAYOUT_CONTIGUOUS_PSUM: "m_grouped_contiguous_psum", LAYOUT_MASKED: "m_grouped_masked",
                LAYOUT_K_GROUPED: "k_grouped", LAYOUT_BATCH_SUM: "einsum_bmk_bnk_mn"}[self.layout]

    def describe(self) -> tuple[tuple[str, str], ...]:
        return jit.config_summary("bf16_gemm", self)

    def traits(self) -> str:
        """The C++ type of the kernel's compile-time configuration (trailing arguments at their defaults left out,
        so a cooperative kernel renders as it did before schedules existed)."""
        tail = f"{self.k_atoms}"
        if self.split_k > 1 or self.schedule != "cooperative":
            tail += f", {self.split_k}"
        if self.schedule != "cooperative":
            tail += f", {SCHEDULES.index(self.schedule)}"
        return (
            f"dgx::Bf16GemmTraits<{self.layout}, {self.n}, {self.k}, {self.block_m}, {self.block_n}, {self.stages}, "
            f"{self.group_n}, {self.pair}, {MAJORS.index(self.major_a)}, {MAJORS.index(self.major_b)}, "
            f"{'true' if self.out_dtype == 'float32' else 'false'}, {'true' if self.with_c else 'false'}, "
            f"{tail}>"
        )

    def render(self) -> jit.KernelSource:
        traits = self.traits()
        source = (
            '#include "bf16_gemm.cuh"\n'
            + render_wgmma_bf16(self.block_n, self.major_a == "mn", self.major_b == "mn")
            + INTERFACE.render_entry(self.kernel_name, self.threads, f"dgx::bf16_gemm_body<{traits}>")
            + f"static_assert({traits}::kSmemBytes == {self.smem_bytes},\n"
            '              "dgx.kernels.bf16_gemm.smem_bytes disagrees with the kernel\'s shared-memory layout");\n'
            f"static_assert({traits}::kThreads == {self.threads}, \"Bf16GemmConfig.threads disagrees with the kernel\");\n"
            f"static_assert({traits}::kWGRows == {self.wg_rows}, \"Bf16GemmConfig.wg_rows (D's TMA box) disagrees with the kernel\");\n"
            f"static_assert({traits}::kDSpan == {self.d_span}, \"Bf16GemmConfig.d_span disagrees with the kernel\");\n"
            f"static_assert({traits}::TileA::kBoxRows == {self.box('a')[0 if self.major_a == 'mn' else 1]} && "
            f"{traits}::TileB::kBoxRows == {self.box('b')[0 if self.major_b == 'mn' else 1]} && "
            f"{traits}::kBlockK == {BLOCK_K * self.k_atoms},\n"
            '              "Bf16GemmConfig.box disagrees with the kernel\'s TMA boxes");\n'
        )
        return jit.KernelSource(
            name=self.kernel_name,
            source=source,
            dynamic_smem=self.smem_bytes,
            summary=self.describe(),
            warmup_hint=self.warmup_hint,
        )

    @property
    def warmup_hint(self) -> str:
        """The `dgx warmup` arguments that build this kernel (a strict-mode miss names them)."""
        if self.layout in BATCHED_LAYOUTS:  # the einsum family's kinds (dgx/families/einsum.py)
            if self.layout == LAYOUT_BATCH_SUM:
                dims = f"\"m\": M, \"n\": {self.n}, \"k\": {self.k}"
            elif self.major_b == "k":  # 'bhr,hdr->bhd': N = d, K = r
                dims = f"\"h\": H, \"d\": {self.n}, \"r\": {self.k}, \"max_b\": B"
            else:  # 'bhd,hdr->bhr': N = r, K = d
                dims = f"\"h\": H, \"d\": {self.k}, \"r\": {self.n}, \"max_b\": B"
            return f"--shapes FILE with {{\"kind\": \"{self.warmup_kind}\", {dims}}}"
        return (f"--shapes FILE with {{\"kind\": \"{self.warmup_kind}\", \"n\": {self.n}, \"k\": {self.k}, "
                f"\"family\": \"bf16\"}}")

