"""The FP8 GEMM family (ptx/fp8_gemm.cuh): config, rendering, and the kernel's launch contract (INTERFACE)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from math import gcd

from .. import jit
from ..intmath import ceil_div, round_up
from ..kinds import FP8_EINSUM_BHR_HDR_BHD, M_GROUPED_CONTIGUOUS_PSUM, GemmKind, Layout, ShareDim
from .fp8_epilogue import FUSED_PARAMS, Epilogue
from .interface import TENSOR_MAP, KernelInterface, Param
from .wgmma_render import render_wgmma_e4m3

# What a 2-CTA cluster shares through TMA multicast (GemmConfig.pair; ptx/scheduler.cuh PairDim).
SHARE_NONE, SHARE_A, SHARE_B = int(ShareDim.NONE), int(ShareDim.A), int(ShareDim.B)
PAIR_NONE, PAIR_N, PAIR_M = SHARE_NONE, SHARE_A, SHARE_B  # earlier names: pairs along N share A, along M share B
# How the scheduler walks the tiles (GemmConfig.layout; ptx/scheduler.cuh GemmLayout).
(LAYOUT_DENSE, LAYOUT_CONTIGUOUS, LAYOUT_MASKED, LAYOUT_K_GROUPED, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_BATCHED) = (
    int(Layout.DENSE), int(Layout.CONTIGUOUS), int(Layout.MASKED), int(Layout.K_GROUPED), int(Layout.CONTIGUOUS_PSUM),
    int(Layout.BATCHED))
# The FP8 kernel's layouts (batch-sum is the BF16 kernel's einsum layout only).
LAYOUT_NAMES = {int(v): v.name.lower() for v in Layout if v <= Layout.BATCHED}

# The kernel's one parameter: a struct of these members, in this order (ptx/fp8_gemm.cuh fp8_gemm_nt_body
# binds them to its names). `tmap_*` are tensor maps of A, B, D and the A and B scales; `sfa`, `sfa_rows`,
# `sfa_stride` what `tmap_sfa` maps (base, floats per row, row stride in floats); `sfb` the B scales; `m` the
# rows (masked, K-grouped: per group); `grouped_layout` m_indices, masked_m or the K-grouped groups' K;
# `d_ptr`/`ld_d` D for stores from registers; `accumulate` (weight gradient) whether D holds C and is added
# to; `group_maps` (K-grouped) the groups' maps of A and B in device memory.
INTERFACE = KernelInterface(
    "Fp8GemmParams",
    (
        Param("tmap_a", TENSOR_MAP),
        Param("tmap_b", TENSOR_MAP),
        Param("tmap_d", TENSOR_MAP),
        Param("tmap_sfa", TENSOR_MAP),
        Param("tmap_sfb", TENSOR_MAP),
        Param("sfb", "const float*"),
        Param("sfa", "const float*"),
        Param("sfa_rows", "int"),
        Param("sfa_stride", "int"),
        Param("m", "int"),
        Param("grouped_layout", "const int*", default=0),
        Param("num_groups", "int", default=1),
        Param("d_ptr", "void*"),
        Param("ld_d", "long long"),
        Param("accumulate", "int", default=0),
        Param("group_maps", "const dgx::TensorMap*", default=0),
    ),
)
# The fused-epilogue kernels' struct (ptx/fp8_gemm_fused.cuh): the same members, then the epilogue's.
FUSED_INTERFACE = KernelInterface("Fp8GemmFusedParams", INTERFACE.params + FUSED_PARAMS)
# Kernels that take N or K at run time (GemmConfig.runtime_n, runtime_k) have one more member each, last, so that
# every other member keeps its offset: `n`, the columns of D (per group), then `k`, the reduction's length.
# (Then `stream_b`, for kernels that take B's L2 policy at run time: GemmConfig.runtime_stream_b.)
RUNTIME_N_PARAM = Param("n", "int")
RUNTIME_K_PARAM = Param("k", "int")
RUNTIME_STREAM_B_PARAM = Param("stream_b", "int")
INTERFACE_RUNTIME_N = KernelInterface(INTERFACE.struct_name, INTERFACE.params + (RUNTIME_N_PARAM,))
INTERFACE_RUNTIME_K = KernelInterface(INTERFACE.struct_name, INTERFACE.params + (RUNTIME_K_PARAM,))
INTERFACE_RUNTIME_NK = KernelInterface(INTERFACE.struct_name, INTERFACE.params + (RUNTIME_N_PARAM, RUNTIME_K_PARAM))
# The structs by (runtime_n, runtime_k, runtime_stream_b), one object each.
_RUNTIME_INTERFACES = {(True, False, False): INTERFACE_RUNTIME_N, (False, True, False): INTERFACE_RUNTIME_K,
                       (True, True, False): INTERFACE_RUNTIME_NK}
for _flags in ((False, False, True), (True, False, True), (False, True, True), (True, True, True)):
    _RUNTIME_INTERFACES[_flags] = KernelInterface(INTERFACE.struct_name, INTERFACE.params + tuple(
        p for on, p in zip(_flags, (RUNTIME_N_PARAM, RUNTIME_K_PARAM, RUNTIME_STREAM_B_PARAM)) if on))
WHOLE_LOOP_K_BLOCKS = 56  # Fp8GemmTraits::kWholeLoopKBlocks: narrow deferred tiles up to this run one chunk
SMEM_LIMIT = 232448  # bytes of shared memory one block may use on Hopper (227 KB)
BARRIER_BYTES = 16  # full + empty mbarrier per stage
TILE_BARRIER_BYTES = 16  # split-K: partials published / read; weight gradient: tile staged / read by its stores
SFA_SLOT_BYTES_PER_ROW = 4  # A scales per stage: BLOCK_M floats
SFB_BOX_SLOT_BYTES = 128  # BF16 tiles of 64 or 128 rows: a 128-byte aligned TMA box of B scales per block spanned


@dataclass(frozen=True)
class GemmConfig:
    """Everything compile-time about one dense FP8 GEMM kernel. M is a run-time argument."""

    n: int
    k: int
    block_m: int
    block_n: int
    stages: int
    group_n: int = 16
    pair: int = SHARE_NONE  # 2-CTA clusters sharing A (SHARE_A) or B (SHARE_B) through TMA multicast
    layout: int = LAYOUT_DENSE  # dense, MoE groups along M (contiguous segments, masked slices) or along K
    wgrad: bool = False  # weight gradient: B scaled per row too, FP32 D = C + A.B^T
    # Deferred promotion: each k-block is promoted after the next one's MMAs are issued, into a second set of
    # accumulators (one-slice tiles; pays for latency-bound decode tiles and the weight gradients' heavier
    # promotion).
    defer: bool = False
    # Split-K: clusters of `split_k` CTAs run each tile, CTA r over the r-th of split_k equal ranges of K, and
    # sum their FP32 partial tiles through distributed shared memory in rank order (deterministic). For the
    # memory-bound decode shapes: fewer, wider tiles read A fewer times and still give every SM work.
    split_k: int = 1
    # B's TMA loads marked L2 evict-first: for decode shapes, whose one row of tiles reads each B tile once, so
    # the stream does not evict (and force the write-back of) the lines a neighbouring kernel left in L2.
    stream_b: bool = False
    # Skip-head-mid output (dgx.skip_head_mid): (left, mid, right). The N columns are heads of left + right
    # columns; D holds each head as left columns, mid columns left untouched, right columns (d_cols wide).
    head_splits: tuple[int, int, int] | None = None
    # A fused epilogue (dgx.kernels.fp8_epilogue): FP8 output with its scales, SwiGLU, row weights, alpha.
    epilogue: Epilogue | None = None
    # N as a kernel parameter instead of a compile-time constant: one kernel serves every N of this config (the
    # tile stays compiled in, so the k-loop is the same code). Not with head splits, fused epilogues, the batched
    # or K-grouped layout (runtime_n_allowed). False keeps N compiled in, and the kernels exactly as they were; `n`
    # still says the problem's N to the host side (grid, tensor maps, the parameter).
    runtime_n: bool = False
    # K as a kernel parameter too (the k-loop's trip count from it): one kernel serves every K of this config (in
    # stage rounds: every K that fills whole rounds). For the configs whose k-loop does not need the k-block count
    # at compile time (runtime_k_allowed: no lean rounds, no straight-line whole loop, no split-K), with the
    # restrictions of runtime_n. False: the kernels as they were.
    runtime_k: bool = False
    # B's L2 policy (stream_b) as a kernel parameter: one kernel for both policies of a dense BF16 tile (every B
    # load then carries a policy, evict-first or normal). `stream_b` still says which policy the call uses.
    runtime_stream_b: bool = False

    def __post_init__(self) -> None:
        # Plain ints (an enum member given here renders and hashes like its value).
        for name in ("pair", "layout"):
            if isinstance(getattr(self, name), IntEnum):
                object.__setattr__(self, name, int(getattr(self, name)))
        problems = validate_blocks(self.block_m, self.block_n, self.pair, self.defer, self.wgrad)
        problems = problems or validate_split(self.split_k, self.k, self.block_m, self.pair, self.layout)
        if self.layout not in LAYOUT_NAMES:
            problems = problems or f"layout must be one of {sorted(LAYOUT_NAMES)}; got {self.layout}"
        elif self.layout not in (LAYOUT_DENSE, LAYOUT_CONTIGUOUS, LAYOUT_MASKED) and self.pair != SHARE_NONE:
            problems = problems or "multicast pairs are for the dense, contiguous and masked layouts only"
        elif self.layout == LAYOUT_MASKED and self.pair == SHARE_A and ceil_div(self.n, self.block_n) % 2:
            # (a pair's second tile past N would read the next group's B and its scales)
            problems = problems or (f"masked pairs sharing A need an even number of n-blocks; N = {self.n} makes "
                                    f"{ceil_div(self.n, self.block_n)} of {self.block_n}")
        elif self.wgrad and self.pair == SHARE_A:
            problems = problems or "the weight gradient shares only B (pair 2) through multicast"
        elif (self.layout == LAYOUT_K_GROUPED) != self.wgrad and self.layout != LAYOUT_DENSE:
            problems = problems or "the K-grouped layout is a weight gradient, the M-grouped ones are not"
        if self.layout == LAYOUT_BATCHED and (self.wgrad or self.split_k != 1):
            problems = problems or "the batched layout (dgx.fp8_einsum) is a BF16 GEMM without split-K"
        if self.head_splits is not None:
            problems = problems or validate_head_splits(self.head_splits, self.n, self.block_n, self.layout,
                                                        self.wgrad, self.split_k)
        if self.epilogue is not None:
            problems = problems or validate_epilogue(self.epilogue, self.n, self.block_m, self.block_n, self.layout,
                                                     self.wgrad, self.split_k, self.head_splits)
        if self.runtime_n and not runtime_n_allowed(self):
            problems = problems or ("N comes at run time for GEMMs without head splits, fused epilogues, the batched "
                                    "or the K-grouped layout only (runtime_n False)")
        if self.runtime_stream_b and not runtime_stream_b_allowed(self):
            problems = problems or ("B's L2 policy comes at run time for dense BF16 outputs without head splits or "
                                    "fused epilogues only (runtime_stream_b False)")
        if self.runtime_k and not runtime_k_allowed(self):
            problems = problems or ("K comes at run time for BF16 outputs without head splits, fused epilogues, the "
                                    "batched layout, split-K, lean rounds or a straight-line k-loop only "
                                    "(runtime_k False)")
        if problems:
            raise ValueError(f"invalid GEMM config {self}: {problems}")
        if self.smem_bytes > SMEM_LIMIT:
            raise ValueError(f"GEMM config {self} needs {self.smem_bytes} bytes of shared memory; the limit is {SMEM_LIMIT}")

    @property
    def interface(self) -> KernelInterface:
        """The kernel's parameter struct: INTERFACE (FUSED_INTERFACE with a fused epilogue); a run-time N adds one
        member each, last, so that every other member keeps its offset (INTERFACE_RUNTIME_N, _K, _NK)."""
        if self.runtime_n or self.runtime_k or self.runtime_stream_b:
            return _RUNTIME_INTERFACES[self.runtime_n, self.runtime_k, self.runtime_stream_b]
        return INTERFACE if self.epilogue is None else FUSED_INTERFACE

    @property
    def compiled_n(self) -> int:
        """The N compiled into the kernel: `n`, or 0 where N comes at run time."""
        return 0 if self.runtime_n else self.n

    @property
    def compiled_k(self) -> int:
        """The K compiled into the kernel: `k`, or 0 where K comes at run time (or per group: K-grouped)."""
        return 0 if self.runtime_k else self.k

    @property
    def cluster(self) -> int:
        """CTAs per cluster: a multicast pair, or the split-K ranks of one tile."""
        return self.split_k if self.pair == SHARE_NONE else 2

    @property
    def box_rows_a(self) -> int:
        """Rows of A one CTA loads per stage (half the tile when A is shared)."""
        return self.block_m // 2 if self.pair == SHARE_A else self.block_m

    @property
    def box_rows_b(self) -> int:
        """Rows of B one CTA loads per stage: half the tile when B is shared, unless the halves would break the
        1024-byte swizzle alignment (weight gradient, block_n 152: rank 0 loads the whole tile for both)."""
        return self.block_n // 2 if self.pair == SHARE_B and self.block_n % 16 == 0 else self.block_n

    def units(self, m: int) -> int:
        """Scheduler work units for M rows: tiles (one per cluster under split-K), or tile pairs when paired."""
        mb, nb = ceil_div(m, self.block_m), ceil_div(self.n, self.block_n)
        if self.epilogue is not None and self.epilogue.swiglu:
            nb = ceil_div(nb, 2)  # a SwiGLU unit is a gate tile and its up tile, run by one CTA
        if self.pair == SHARE_B:
            mb = ceil_div(mb, 2)
        elif self.pair == SHARE_A:
            nb = ceil_div(nb, 2)
        return mb * nb

    def grid(self, units: int, num_sms: int) -> int:
        """CTAs of the persistent grid for `units` work units: a whole number of clusters, at most one per
        SM, and no more than keep the wave count (the same makespan on fewer SMs draws less power and
        L2 bandwidth; DeepGEMM sizes its grids the same way)."""
        slots = max(num_sms // self.cluster, 1)
        waves = max(ceil_div(units, slots), 1)
        return max(ceil_div(units, waves), 1) * self.cluster

    @property
    def d_cols(self) -> int:
        """Columns of D: N, or with head splits N plus every head's mid columns."""
        if self.head_splits is None:
            return self.n
        left, mid, right = self.head_splits
        return self.n + self.n // (left + right) * mid

    @property
    def math_warpgroups(self) -> int:
        return 1 if self.block_m == 64 else 2

    @property
    def threads(self) -> int:
        return 128 * (self.math_warpgroups + 1)

    @property
    def d_span(self) -> int:
        """Bytes per swizzle span of the output tile (BF16, or FP32 for the weight gradient; 16 = no swizzle)."""
        return d_span_bytes(self.block_n, 4 if self.wgrad else 2)

    @property
    def b_scales_in_stage(self) -> bool:
        """Whether the producer loads the B scales into each stage with TMA (BF16 one-slice tiles that promote
        as they go; Fp8GemmTraits::kSfbInStage), through a map over the scale tensor as one row of floats."""
        return b_scales_in_stage(self.block_m, self.wgrad, self.defer)

    @property
    def stage_rounds(self) -> bool:
        """Whether the k-loop runs in stage rounds (Fp8GemmTraits::kRounds): BF16 one-slice tiles, and plain
        one-slice weight-gradient tiles up to 128 columns with a compile-time K, whose k-blocks fill whole rounds.
        With K at run time the kernel serves only K that fill whole rounds (it says so: kRuntimeKRounds)."""
        return stage_rounds(self.block_m, self.block_n, self.k, self.stages, self.wgrad, self.defer, self.split_k)

    @property
    def sfa_times_sfb(self) -> bool:
        """Whether warps of the producer warpgroup multiply the A scales by the B scale into the stage
        (Fp8GemmTraits::kSfaTimesSfb)."""
        return sfa_times_sfb(self.block_m, self.block_n, self.compiled_k, self.stages, self.wgrad)

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.block_m, self.block_n, self.stages, self.wgrad, self.defer, self.split_k, self.epilogue)

    @property
    def kernel_name(self) -> str:
        prefix = "dgx_fp8_gemm_nt" if self.layout == LAYOUT_DENSE else f"dgx_fp8_gemm_nt_{LAYOUT_NAMES[self.layout]}"
        if self.wgrad and self.layout == LAYOUT_DENSE:
            prefix += "_wgrad"
        shape_n = "nrt" if self.runtime_n else f"n{self.n}"
        # K at run time: "krt", or "krtr" for a kernel in stage rounds (every K it serves fills whole rounds).
        shape_k = ("krtr" if self.stage_rounds else "krt") if self.runtime_k else f"k{self.k}"
        name = f"{prefix}_{shape_n}_{shape_k}_bm{self.block_m}_bn{self.block_n}_s{self.stages}_g{self.group_n}_p{self.pair}"
        if self.split_k > 1:
            name += f"_sk{self.split_k}"
        if self.runtime_stream_b:
            name += "_sbrt"  # (B's policy at run time)
        elif self.stream_b:
            name += "_sb"
        if self.head_splits is not None:
            name += "_hs{}_{}_{}".format(*self.head_splits)
        if self.epilogue is not None:
            name += f"_e{self.epilogue.tag}"
        return name + "_d" if self.defer else name

    @property
    def kind(self) -> GemmKind:
        """What the kernel computes."""
        return GemmKind.of(self.layout, self.wgrad)

    @property
    def warmup_kind(self) -> str:
        """The `dgx warmup` shapes-file kind that builds this kernel (the prefix-sum layout's is a kind of its own:
        ``m_grouped_contiguous_psum``)."""
        if self.layout == Layout.CONTIGUOUS_PSUM:
            return M_GROUPED_CONTIGUOUS_PSUM
        if self.layout == Layout.BATCHED:
            return FP8_EINSUM_BHR_HDR_BHD
        return self.kind.value

    def describe(self) -> tuple[tuple[str, str], ...]:
        optional = {"head_splits": self.head_splits is not None, "epilogue": self.epilogue is not None,
                    "runtime_n": self.runtime_n, "runtime_k": self.runtime_k,
                    "runtime_stream_b": self.runtime_stream_b}
        return jit.config_summary("fp8_gemm_nt", self, lambda name: optional.get(name, True))

    def render(self) -> jit.KernelSource:
        # Fp8GemmTraits' template arguments; the kernel body takes the layout first, then the same.
        traits = (
            f"{self.compiled_n}, {self.compiled_k}, {self.block_m}, {self.block_n}, {self.stages}, {self.group_n}, {self.d_span}, "
            f"{self.pair}, {'true' if self.wgrad else 'false'}, {'true' if self.defer else 'false'}, {self.split_k}, "
            f"{'true' if self.stream_b and not self.runtime_stream_b else 'false'}"
        )
        if self.head_splits is not None:
            traits += ", {}, {}, {}".format(*self.head_splits)
        if self.epilogue is not None:
            traits += (", 0, 0, 0" if self.head_splits is None else "") + f", {self.epilogue.render()}"
        elif (self.runtime_k and self.stage_rounds) or self.runtime_stream_b:  # (no head splits, no fused epilogue)
            rounds = "true" if self.runtime_k and self.stage_rounds else "false"
            traits += f", 0, 0, 0, dgx::NoFusedEpilogue, {rounds}, {'true' if self.runtime_stream_b else 'false'}"
        body = f"dgx::fp8_gemm_nt_body<{self.layout}, {traits}>"
        source = (
            ('#include "fp8_gemm.cuh"\n' if self.epilogue is None else '#include "fp8_gemm_fused.cuh"\n')
            + render_wgmma_e4m3(self.block_n)
            + self.interface.render_entry(self.kernel_name, self.threads, body)
            + f"static_assert(dgx::Fp8GemmTraits<{traits}>::kSmemBytes == {self.smem_bytes},\n"
            '              "dgx.kernels.fp8_gemm.smem_bytes disagrees with the kernel\'s shared-memory layout");\n'
            f"static_assert(dgx::Fp8GemmTraits<{traits}>::kSfbInStage == {'true' if self.b_scales_in_stage else 'false'},\n"
            '              "GemmConfig.b_scales_in_stage (whether tmap_sfb maps the B scales) disagrees with the kernel");\n'
            f"static_assert(dgx::Fp8GemmTraits<{traits}>::kSfaTimesSfb == {'true' if self.sfa_times_sfb else 'false'},\n"
            '              "GemmConfig.sfa_times_sfb disagrees with the kernel");\n'
            f"static_assert(dgx::Fp8GemmTraits<{traits}>::kRounds == {'true' if self.stage_rounds else 'false'},\n"
            '              "GemmConfig.stage_rounds disagrees with the kernel");\n'
        )
        return jit.KernelSource(
            name=self.kernel_name,
            source=source,
            dynamic_smem=self.smem_bytes,
            summary=self.describe(),
            warmup_hint=self._warmup_hint(),
        )


    def _warmup_hint(self) -> str:
        if self.layout == Layout.BATCHED:  # the einsum's kind names its dimensions
            return f"--shapes FILE with {{\"kind\": \"{self.warmup_kind}\", \"d\": {self.n}, \"r\": {self.k}, \"h\": H}}"
        return f"--shapes FILE with {{\"kind\": \"{self.warmup_kind}\", \"n\": {self.n}, \"k\": {self.k}}}"


def runtime_n_allowed(config: GemmConfig) -> bool:
    """Whether `config` may take N at run time (GemmConfig.runtime_n): GEMMs without head splits, fused epilogues,
    the batched or the K-grouped layout (the head remap, the fused epilogues' scale groups, the einsum's 3-D maps
    and the K-grouped weight gradient, not timed with it, keep N compiled in)."""
    return (config.head_splits is None and config.epilogue is None
            and config.layout not in (LAYOUT_BATCHED, LAYOUT_K_GROUPED))


def straight_line_k_loop(config: GemmConfig) -> bool:
    """Whether `config`'s k-loop is one straight-line chunk (Fp8GemmTraits::kDeferChunk: deferred tiles at most 32
    columns wide with at most WHOLE_LOOP_K_BLOCKS k-blocks per tile), fully unrolled over a compile-time K."""
    tile_k_blocks = ceil_div(config.k, 128) // config.split_k if config.k > 0 else 0
    return config.defer and config.block_n <= 32 and 0 < tile_k_blocks <= WHOLE_LOOP_K_BLOCKS


def runtime_stream_b_allowed(config: GemmConfig) -> bool:
    """Whether `config` may take B's L2 policy at run time (GemmConfig.runtime_stream_b): the dense BF16 GEMMs that
    runtime_n allows (the layout whose heuristic streams B: dgx.heuristics.with_streamed_b)."""
    return runtime_n_allowed(config) and config.layout == LAYOUT_DENSE and not config.wgrad


def runtime_k_allowed(config: GemmConfig) -> bool:
    """Whether `config` may take K at run time (GemmConfig.runtime_k): what runtime_n allows, less split-K and the
    weight gradient, and only where the k-loop needs no compile-time k-block count: no lean rounds (nor their
    products of scales) and no straight-line whole loop. Stage rounds stay (the kernel then serves the K that fill
    whole rounds, GemmConfig.stage_rounds); with K at run time a deferred tile's tail runs as one-k-block chunks."""
    if not runtime_n_allowed(config) or config.wgrad or config.split_k != 1 or config.k <= 0:
        return False
    k = config.k
    return not (sfa_times_sfb(config.block_m, config.block_n, k, config.stages, config.wgrad)
                or lean_rounds(config.block_m, config.block_n, k, config.stages)
                or straight_line_k_loop(config))


def lean_rounds(block_m: int, block_n: int, k: int, stages: int) -> bool:
    """Fp8GemmTraits::kLeanRounds: 256x128 tiles over a compile-time K with at most one stage of the last round
    unused per 32 k-blocks."""
    if block_m != 256 or block_n != 128 or k <= 0:
        return False
    k_blocks = ceil_div(k, 128)
    return k_blocks >= 32 * ((stages - k_blocks % stages) % stages)


def d_span_bytes(block_n: int, elem_bytes: int = 2) -> int:
    row = block_n * elem_bytes
    for span in (128, 64, 32):
        if row % span == 0:
            return span
    return 16


def b_scales_in_stage(block_m: int, wgrad: bool, defer: bool) -> bool:
    """Whether a config's B scales travel with the stage (GemmConfig.b_scales_in_stage)."""
    return not wgrad and block_m <= 128 and not defer


def stage_rounds(block_m: int, block_n: int, k: int, stages: int, wgrad: bool = False, defer: bool = False,
                 split_k: int = 1) -> bool:
    """Whether a config's k-loop runs in stage rounds (GemmConfig.stage_rounds, Fp8GemmTraits::kRounds): one-slice
    tiles that take the B scales with the stage (BF16 ones that promote as they go, or plain weight-gradient ones
    up to 128 columns with a compile-time K) whose tile's k-blocks are a whole number of rounds of the stages."""
    one_slice = block_m <= 128
    in_stage = b_scales_in_stage(block_m, wgrad, defer) or (
        wgrad and not defer and one_slice and k > 0 and block_n <= 128)
    tile_k_blocks = ceil_div(k, 128) // split_k if k > 0 else 0
    return in_stage and tile_k_blocks % stages == 0


def sfa_times_sfb(block_m: int, block_n: int, k: int, stages: int, wgrad: bool = False) -> bool:
    """Whether a config's A scales reach the stage already multiplied by the B scale (GemmConfig.sfa_times_sfb):
    BF16 256x128 tiles that run their k-loop in stage rounds (Fp8GemmTraits::kLeanRounds: a compile-time K with
    no stage of a tile's last round unused, or one per >= 32 k-blocks) over at least 32 k-blocks."""
    if wgrad or block_m != 256 or block_n != 128 or k <= 0:
        return False
    k_blocks = ceil_div(k, 128)
    unused_stages = (stages - k_blocks % stages) % stages
    return k_blocks >= 32 * max(unused_stages, 1)


def smem_bytes(
    block_m: int, block_n: int, stages: int, wgrad: bool = False, defer: bool = False, split_k: int = 1,
    epilogue: Epilogue | None = None,
) -> int:
    """Dynamic shared memory of a config (ptx/fp8_gemm.cuh Fp8GemmTraits::kSmemBytes). Stage counts are chosen
    for the plain tile (defer False), so a deferred tile runs its plain twin's count in a little less.
    Split-K keeps an FP32 partial tile (rows padded by 8 floats, 1 KB aligned) instead of the output tile; it and
    the weight gradient (whose tiles the producer stores) have two more barriers."""
    per_stage = block_m * 128 + block_n * 128 + block_m * SFA_SLOT_BYTES_PER_ROW + BARRIER_BYTES
    if split_k > 1:
        out_tile, extra = round_up(block_m * (block_n + 8) * 4, 1024), TILE_BARRIER_BYTES
    else:
        out_tile, extra = block_m * block_n * (4 if wgrad else 2), TILE_BARRIER_BYTES if wgrad else 0
        if epilogue is not None:
            out_tile = epilogue.smem_d_bytes(block_m, block_n)
    if wgrad:  # B scales per stage (128-byte aligned slot)
        return out_tile + stages * (per_stage + round_up(block_n * 4, 128)) + extra
    if b_scales_in_stage(block_m, wgrad, defer):
        per_stage += SFB_BOX_SLOT_BYTES * (1 if 128 % block_n == 0 else 2)
    return out_tile + stages * per_stage + extra


def validate_epilogue(epilogue, n: int, block_m: int, block_n: int, layout: int = LAYOUT_DENSE, wgrad: bool = False,
                      split_k: int = 1, head_splits=None) -> str:
    """'' if a kernel of this config can run the fused `epilogue`, else what is wrong: the BF16-path GEMMs (dense and
    M-grouped: contiguous, prefix sums, masked) without split-K or head splits, and the epilogue's tile and N."""
    if not isinstance(epilogue, Epilogue):
        return f"epilogue must be a dgx.kernels.fp8_epilogue.Epilogue or None; got {epilogue!r}"
    if wgrad or layout == LAYOUT_K_GROUPED:
        return "fused epilogues are not for the weight gradients (dense or K-grouped): their output is FP32 C + A.B^T"
    if split_k != 1:
        return "fused epilogues need whole tiles in one CTA (split_k 1)"
    if head_splits is not None:
        return "fused epilogues do not combine with head splits"
    return epilogue.validate_tile(block_m, block_n, n)


def validate_head_splits(head_splits, n: int, block_n: int, layout: int = LAYOUT_DENSE, wgrad: bool = False,
                         split_k: int = 1) -> str:
    """'' if a kernel with this tile can write a skip-head-mid output of (left, mid, right) columns per head, else
    what is wrong: a dense BF16 GEMM without split-K, N whole heads of left + right columns, and left and right
    multiples of the tile's TMA store span (so that no span straddles a head's parts)."""
    if (not isinstance(head_splits, tuple) or len(head_splits) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) for v in head_splits)):
        return f"head_splits must be a tuple of three ints (left, mid, right); got {head_splits!r}"
    left, mid, right = head_splits
    if left <= 0 or right <= 0 or mid < 0:
        return f"head_splits needs left > 0, mid >= 0, right > 0; got {head_splits}"
    if layout != LAYOUT_DENSE or wgrad or split_k != 1:
        return "head splits are for the dense BF16 GEMM without split-K"
    if n % (left + right):
        return f"N = {n} is not a whole number of heads of left + right = {left + right} columns"
    span_cols = d_span_bytes(block_n) // 2
    if left % span_cols or right % span_cols:
        return (f"block_n {block_n} stores spans of {span_cols} columns, which must divide left ({left}) and right "
                f"({right})")
    return ""


MAX_SPLIT_K = 8  # a portable cluster holds at most 8 CTAs


def validate_split(split_k: int, k: int, block_m: int, pair: int = SHARE_NONE, layout: int = LAYOUT_DENSE) -> str:
    """'' if `split_k` ranges of K are a split the kernel supports for this config, else what is wrong."""
    if not isinstance(split_k, int) or not 1 <= split_k <= MAX_SPLIT_K:
        return f"split_k must be an int in 1..{MAX_SPLIT_K} (CTAs of a portable cluster); got {split_k!r}"
    if split_k == 1:
        return ""
    if pair != SHARE_NONE:
        return "split-K clusters do not also share an operand through multicast (pair must be 0)"
    if layout == LAYOUT_K_GROUPED:
        return "split-K is not for the K-grouped layout (each group has its own K)"
    if block_m > 128:
        return f"split-K needs one m64 slice per warpgroup (block_m 64 or 128); got block_m {block_m}"
    k_blocks = ceil_div(k, 128)
    if k <= 0 or k_blocks % split_k:
        return f"split_k {split_k} must divide the {k_blocks} k-blocks of K = {k} (whole 128-K blocks per range)"
    return ""


def scale_split_compiled_in(block_n: int) -> bool:
    """Whether the kernel knows at compile time where a tile's columns switch from one 128-column B-scale
    block to the next: always with one block per tile; otherwise (ptx/fp8_gemm.cuh) it specialises the
    k-loop for each possible split when there are at most four (BLOCK_N 96, 160, 192, 224) and selects a
    scale per column group at run time for the rest."""
    return 128 % block_n == 0 or 128 // gcd(block_n, 128) <= 4


def validate_blocks(block_m: int, block_n: int, pair: int = SHARE_NONE, defer: bool = False, wgrad: bool = False) -> str:
    """'' if (block_m, block_n, pair) is a tile the kernel supports (with deferred promotion if `defer`, as a
    weight gradient if `wgrad`), else what is wrong."""
    if pair not in (SHARE_NONE, SHARE_A, SHARE_B):
        return f"pair must be 0 (none), 1 (share A along N) or 2 (share B along M); got {pair}"
    if pair == SHARE_B and block_n % 16 and not wgrad:  # (the weight gradient multicasts such a tile whole)
        return f"sharing B needs block_n a multiple of 16 (1024-byte halves); got {block_n}"
    if block_m not in (64, 128, 256):
        return f"block_m must be 64, 128 or 256; got {block_m}"
    if block_n % 8 or not 8 <= block_n <= 256:
        return f"block_n must be a multiple of 8 in 8..256; got {block_n}"
    if not wgrad and 128 % block_n and block_n - gcd(block_n, 128) > 128:  # (the weight gradient scales per column)
        return f"block_n {block_n} lets a tile span three 128-column B-scale blocks"
    # Registers: a math thread holds N/2 FP32 accumulators for the running wgmma plus N/2 promoted results
    # per m64 slice of its warpgroup's rows (one slice, or two for BLOCK_M 256). One math warpgroup may use
    # up to 255 registers a thread; two get 232 each through setmaxnreg, which holds 160 such registers with
    # one slice and 192 with two (measured in ptxas reports: 128x192 spills, 256x128 does not). Deferred
    # promotion adds a second accumulator set; 128x128 deferred (192 such registers) compiles without spills,
    # but the weight gradient's (which also forms a scale per column) spills from 128x120 (180) on, and 64x128
    # (192) does not.
    slices = 1 if block_m <= 128 else 2
    if defer and slices != 1:
        return f"deferred promotion needs one m64 slice per warpgroup (block_m 64 or 128); got block_m {block_m}"
    per_thread = (1 + slices + defer) * block_n // 2
    if block_m == 64:
        limit = 192 if defer and wgrad else 208
    elif block_m == 128:
        # (BF16 128x168..192 without deferred promotion: 192 such registers; 128x192 sharing B, DeepGEMM 2.6.1's
        # contiguous tile, compiles without spills, but the contiguous one unshared spills 24 bytes. The heuristic
        # does not offer them yet: heuristics.py MAX_BLOCK_N_128.)
        limit = (168 if wgrad else 192) if defer else (160 if wgrad else 192)
    else:
        limit = 192
    if per_thread > limit:
        what = " with deferred promotion" if defer else ""
        return f"block_m {block_m} x block_n {block_n}{what} needs {per_thread} accumulator registers per thread (max {limit})"
    return ""
