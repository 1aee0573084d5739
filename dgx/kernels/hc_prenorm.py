"""The HyperConnection pre-norm GEMM family (ptx/hc_prenorm.cuh): config, heuristic, rendering, launch contract.

    d[m, n] = sum_k a[m, k] * b[n, k]   (TF32 tensor cores, FP32 out)
    s[m]    = sum_k a[m, k]^2           (FP32, from the BF16 values)

for BF16 a [M, K] and FP32 b [N, K] with N small (24 in DeepSeek-V4); b enters the tensor cores rounded to TF32
(nearest even, as cuBLAS's TF32 GEMM takes it). Memory-bound: reading a once is the cost, so the kernel streams a's
rows through a TMA ring and spreads K over enough CTAs to keep every SM reading. A CTA takes 64 or 128 rows (one or
two math warpgroups sharing the stage's b tile) and one K range; the user's `num_splits` ranges each write their own
partial [M, N] and [M] slices, and inside a split the ranges of a cluster of CTAs are summed through distributed
shared memory in rank order (so the result is bitwise the same on every run).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import jit, runtime
from ..intmath import ceil_div, round_up
from .interface import TENSOR_MAP, KernelInterface, Param
from .. import caches

SMEM_LIMIT = 232448  # bytes of shared memory one block may use on Hopper (227 KB)
SM_SMEM = 233472  # bytes of shared memory per SM (228 KB), of which each resident block reserves 1 KB
BLOCK_K = 64  # BF16 elements of K per stage: one 128-byte swizzled row of a
BLOCK_MS = (64, 128)
CLUSTERS = (1, 2, 4, 8, 16)  # CTAs summing one split's K ranges (16: a non-portable cluster, which Hopper allows)
PORTABLE_CLUSTER = 8
MAX_N = 64  # accumulators per thread: N / 2
MAX_SPLITS = 1024

INTERFACE = KernelInterface(
    "HcPrenormParams",
    (
        Param("tmap_a", TENSOR_MAP),  # a [M, K] bf16, boxes of 64 of K x block_m rows, 128B swizzle
        Param("tmap_b", TENSOR_MAP),  # b [N, K] fp32, boxes of 32 of K x round_up(N, 8) rows, 128B swizzle
        Param("d", "float*"),
        Param("s", "float*"),
        Param("d_row_stride", "long long"),  # floats between rows of d
        Param("d_split_stride", "long long"),  # floats between the splits' [M, N] slices
        Param("s_split_stride", "long long"),  # floats between the splits' [M] slices
        Param("m", "int"),
    ),
)


def _flag(v: bool) -> str:
    return "true" if v else "false"


@dataclass(frozen=True)
class HcPrenormConfig:
    """Everything compile-time about one pre-norm GEMM kernel. M is a run-time argument.

    `splits` is the caller's num_splits (1 when None: d [M, N]); `cluster` the CTAs that share each split's K
    (their partials summed in rank order); `block_m` the rows of a CTA (64 or 128: one or two math warpgroups)."""

    n: int
    k: int
    block_m: int
    splits: int
    cluster: int
    stages: int

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.n <= MAX_N:
            problems.append(f"n must be in 1..{MAX_N}")
        if self.k <= 0:
            problems.append("k must be positive")
        if self.block_m not in BLOCK_MS:
            problems.append(f"block_m must be one of {BLOCK_MS}")
        if not 1 <= self.splits <= MAX_SPLITS:
            problems.append(f"splits must be in 1..{MAX_SPLITS}")
        if self.cluster not in CLUSTERS:
            problems.append(f"cluster must be one of {CLUSTERS}")
        if not 2 <= self.stages <= 16:
            problems.append("stages must be in 2..16")
        if problems:
            raise ValueError(f"invalid HC pre-norm config {self}: {'; '.join(problems)}")
        if self.smem_bytes > SMEM_LIMIT:
            raise ValueError(f"HC pre-norm config {self} needs {self.smem_bytes} bytes of shared memory; "
                             f"the limit is {SMEM_LIMIT}")

    @property
    def n_pad(self) -> int:
        """wgmma N: N rounded up to 8 (b's rows past N are read as zeros)."""
        return round_up(self.n, 8)

    @property
    def threads(self) -> int:
        """One or two math warpgroups, the producer warp and the warp that rounds b to TF32."""
        return threads(self.block_m)

    @property
    def k_blocks(self) -> int:
        return ceil_div(self.k, BLOCK_K)

    @property
    def smem_bytes(self) -> int:
        """ptx/hc_prenorm.cuh HcPrenormTraits::kSmemBytes: the stages (a tile, two b half-tiles), the cluster's
        partial tile, the barriers (full, ready, empty per stage)."""
        return smem_bytes(self.n, self.block_m, self.cluster, self.stages)

    @property
    def ctas_per_sm(self) -> int:
        """CTAs of this kernel one SM holds: 2 where shared memory allows and the CTA has one math warpgroup, else 1.
        Two 128-row CTAs would not fit the register file: capped at 96 registers a thread, ptxas serialises the
        wgmmas (C7512), as two fragment sets in flight need ~102."""
        return ctas_per_sm(self.smem_bytes) if self.block_m == 64 else 1

    def grid(self, m: int) -> int:
        return ceil_div(m, self.block_m) * self.splits * self.cluster

    @property
    def kernel_name(self) -> str:
        return (f"dgx_hc_prenorm_n{self.n}_k{self.k}_bm{self.block_m}_sp{self.splits}_c{self.cluster}"
                f"_s{self.stages}")

    def describe(self) -> tuple[tuple[str, str], ...]:
        return jit.config_summary("hc_prenorm", self)

    def render(self) -> jit.KernelSource:
        return _render(self)


def threads(block_m: int) -> int:
    return 128 * (block_m // 64) + 64


def smem_bytes(n: int, block_m: int, cluster: int, stages: int) -> int:
    n_pad = round_up(n, 8)
    stage = block_m * BLOCK_K * 2 + 2 * n_pad * 128
    partial = round_up((block_m * n_pad + block_m) * 4, 1024) if cluster > 1 else 0
    return stages * stage + partial + 3 * stages * 8


def ctas_per_sm(smem: int) -> int:
    """How many CTAs of `smem` bytes of dynamic shared memory share an SM (each also reserves 1 KB), at most 2."""
    return max(1, min(2, SM_SMEM // (smem + 1024)))


def render_wgmma_tf32_rs(n: int) -> str:
    """C++ source of ``template <> struct dgx::WgmmaTf32Rs<n>``: m64nNk8, tf32 x tf32 -> f32, A from four
    registers per thread (FP32 bit patterns), B from a shared-memory descriptor; always accumulates."""
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma tf32 takes N in 8..256, a multiple of 8; got {n}")
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    a = ", ".join(f"%{regs + i}" for i in range(4))
    return (
        "namespace dgx {\n"
        f"template <> struct WgmmaTf32Rs<{n}> {{\n"
        f"  DGX_DEVICE static void mma(const uint32_t (&a)[4], uint64_t desc_b, float (&d)[{regs}]) {{\n"
        "    asm volatile(\n"
        '        "{\\n.reg .pred p;\\n"\n'
        f'        "setp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{{outs}}}, {{{a}}}, %{regs + 4}, p, 1, 1;\\n}}\\n"\n'
        f"        : {binds}\n"
        '        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1u));\n'
        "  }\n"
        "};\n"
        "}  // namespace dgx\n"
    )


@lru_cache(maxsize=None)
def _render(config: HcPrenormConfig) -> jit.KernelSource:
    traits = (f"dgx::HcPrenormTraits<{config.n}, {config.k}, {config.block_m}, {config.splits}, {config.cluster}, "
              f"{config.stages}>")
    source = (
        '#include "hc_prenorm.cuh"\n'
        + render_wgmma_tf32_rs(config.n_pad)
        + INTERFACE.render_entry(config.kernel_name, config.threads, f"dgx::hc_prenorm_body<{traits}>",
                                 config.ctas_per_sm)
        + f"static_assert({traits}::kSmemBytes == {config.smem_bytes}, "
        '"dgx.kernels.hc_prenorm smem_bytes disagrees with the kernel");\n'
        + f'static_assert({traits}::kThreads == {config.threads}, "thread count");\n'
    )
    return jit.KernelSource(
        name=config.kernel_name,
        source=source,
        dynamic_smem=config.smem_bytes,
        summary=config.describe(),
        warmup_hint=f'a warmup entry for hc_prenorm with n={config.n}, k={config.k}, num_splits={config.splits}',
    )


# ---- heuristic ------------------------------------------------------------------------------------------------

# The cost model ranks configs by an estimated time: the fixed cost of a launch, plus the slowest of the card's HBM
# (a read once), its L2 (a, and b once per row block) and the busiest SM over the waves the grid runs in; plus the
# cluster's reduction. Fitted to the first device run (H200, kernel-only after the benchmark's flush; the old
# kernel): a 64-row stage took ~0.25 µs of math (the MMAs of a stage waited for before the next stage's fragment
# loads), 128 CTAs moved 5.2-5.4 TB/s out of L2 with a and b together, and ~3.5 µs of every run were fixed (launch,
# first loads, the flush's write-backs, the stores). The kernel now keeps one stage's MMAs in flight, so a stage
# costs its tensor-core time: 8 k8 MMAs of N_pad columns per 64 rows, N_pad cycles each per SM sub-partition.
FIXED_S = 3.0e-6
HBM_BYTES_PER_S = 3.3e12
L2_BYTES_PER_S = 5.5e12
SM_BYTES_PER_S = 60e9  # what one SM pulls out of L2 with a ring of TMA loads in flight
CLOCK_HZ = 1.7e9  # the SM clock under a memory-bound load
STAGE_OVERHEAD_S = 0.03e-6  # barrier waits and fragment loads not hidden behind the MMAs
CLUSTER_RANK_S = 0.15e-6  # per extra rank: the partial tile through distributed shared memory
MIN_K_BLOCKS_PER_CTA = 2  # a clustered CTA runs at least this many k-blocks
# Clusters of each size that are resident at once with one CTA per SM, per 132 SMs (H100, cuOccupancyMaxActiveClusters;
# docs/PERFLOG.md, split-K: 66 of 2, 30 of 4, 15 of 8, as the GPCs' SM counts are not all multiples of 4 or 8; 16:
# assumed one per GPC that has 16 SMs). With two CTAs per SM a cluster of C takes the slots of one of C / 2.
RESIDENT_CLUSTERS_132 = {1: 132, 2: 66, 4: 30, 8: 15, 16: 7}


def resident_clusters(cluster: int, per_sm: int, num_sms: int) -> int:
    """Clusters of `cluster` CTAs that run at once on `num_sms` SMs with `per_sm` CTAs an SM (a grid of more runs in
    waves)."""
    if cluster == 1:
        return num_sms * per_sm
    if per_sm >= 2:
        return resident_clusters(cluster // 2, 1, num_sms)
    return max(1, RESIDENT_CLUSTERS_132[cluster] * num_sms // 132)


def stages_for(n: int, block_m: int, cluster: int, per_sm: int = 1) -> int:
    """Stages of the ring: as many as fit one CTA an SM (per_sm 1) or two (per_sm 2), at least 2, at most 16."""
    budget = SMEM_LIMIT if per_sm == 1 else SM_SMEM // 2 - 1024
    fixed = smem_bytes(n, block_m, cluster, 0)
    per_stage = smem_bytes(n, block_m, cluster, 1) - fixed
    return max(2, min(16, (budget - fixed) // per_stage))


def stage_seconds(config: HcPrenormConfig) -> float:
    """One stage's math on an SM: the warpgroups' TF32 MMAs share its tensor cores."""
    return (config.block_m // 64) * 8 * config.n_pad / CLOCK_HZ + STAGE_OVERHEAD_S


def estimate_seconds(config: HcPrenormConfig, m: int, num_sms: int) -> float:
    """A rough time for M rows (see the constants above): the grid runs in waves of the clusters resident at once;
    a wave takes the slowest of its CTAs (their stages at the math's or the SM's pace, SMs with two CTAs sharing
    both), the HBM reading its a and the L2 handing it a and b. b itself is read from HBM once."""
    ranges = config.splits * config.cluster
    rows = min(config.block_m, m)  # rows a row block reads (TMA reads none past M)
    stages = ceil_div(config.k_blocks, ranges)  # the busiest CTA's k-blocks
    k_range = min(config.k, stages * BLOCK_K)
    ctas = config.grid(m)
    resident = resident_clusters(config.cluster, config.ctas_per_sm, num_sms) * config.cluster
    sharing = min(config.ctas_per_sm, ceil_div(min(ctas, resident), num_sms))  # CTAs an SM runs at once
    stage_bytes = (rows * 2 + config.n * 4) * BLOCK_K
    cta = stages * sharing * max(stage_seconds(config), stage_bytes / SM_BYTES_PER_S)
    hbm_per_cta = rows * k_range * 2 / HBM_BYTES_PER_S
    l2_per_cta = (rows * 2 + config.n * 4) * k_range / L2_BYTES_PER_S

    def wave(count: int) -> float:
        return max(cta, count * hbm_per_cta, count * l2_per_cta)

    full, tail = divmod(ctas, resident)
    grid = full * wave(resident) + (wave(tail) if tail else 0.0)
    return FIXED_S + config.n * config.k * 4 / HBM_BYTES_PER_S + grid + (config.cluster - 1) * CLUSTER_RANK_S


def l2_bytes(config: HcPrenormConfig, m: int) -> int:
    return ceil_div(m, config.block_m) * config.n_pad * config.k * 4


def candidates(m: int, n: int, k: int, splits: int, max_cluster: int = CLUSTERS[-1]) -> list[HcPrenormConfig]:
    """Every config the heuristic weighs for M rows: 64- or 128-row tiles (128 only past 64 rows), clusters up to
    `max_cluster` whose CTAs keep MIN_K_BLOCKS_PER_CTA k-blocks each, and rings sized for one or two CTAs an SM."""
    k_blocks = ceil_div(k, BLOCK_K)
    out = []
    for block_m in BLOCK_MS:
        if block_m == 128 and m <= 64:
            continue
        for cluster in CLUSTERS:
            if cluster > max_cluster or (cluster > 1 and k_blocks // splits < MIN_K_BLOCKS_PER_CTA * cluster):
                continue
            for per_sm in (1, 2) if block_m == 64 else (1,):
                config = HcPrenormConfig(n, k, block_m, splits, cluster, stages_for(n, block_m, cluster, per_sm))
                if config not in out:
                    out.append(config)
    return out


@lru_cache(maxsize=4096)
def choose_config(m: int, n: int, k: int, splits: int, num_sms: int,
                  max_cluster: int = CLUSTERS[-1]) -> HcPrenormConfig:
    """The config for M rows: the fewest estimated seconds; ties go to fewer b bytes read from L2, then smaller
    clusters, then deeper rings. `max_cluster` 8 keeps to portable clusters (a device whose GPCs cannot hold 16)."""
    if m <= 0 or num_sms <= 0:
        raise ValueError(f"choose_config needs positive M and SM count; got M={m}, num_sms={num_sms}")
    if max_cluster not in CLUSTERS:
        raise ValueError(f"max_cluster must be one of {CLUSTERS}; got {max_cluster}")
    best, best_key = None, None
    for config in candidates(m, n, k, splits, max_cluster):
        t = estimate_seconds(config, m, num_sms)
        key = (round(t * 1e8), l2_bytes(config, m), config.cluster, -config.stages)  # 10 ns buckets
        if best_key is None or key < best_key:
            best, best_key = config, key
    return best


_launchers: dict[tuple, runtime.Launcher] = caches.per_process({})
_fits: dict[tuple, bool] = caches.per_process({})  # (config, device) -> one cluster fits; for clusters of 16, their kernel allowed them


def _kernel(config: HcPrenormConfig, device: int) -> runtime.LoadedKernel:
    kernel = jit.get_kernel(config.render(), device)
    if config.cluster > PORTABLE_CLUSTER and (config, device) not in _fits:
        runtime.allow_non_portable_clusters(kernel)
    return kernel


def cluster_fits(config: HcPrenormConfig, device: int) -> bool:
    """Whether one cluster of `config` can be placed on `device` (a cluster of 16 needs a GPC with 16 SMs free for
    it); portable clusters always can. Asked once per config and device."""
    if config.cluster <= PORTABLE_CLUSTER:
        return True
    key = (config, device)
    found = _fits.get(key)
    if found is None:
        shape = runtime.LaunchShape((config.cluster, 1, 1), (config.threads, 1, 1), (config.cluster, 1, 1),
                                    config.smem_bytes)
        found = _fits[key] = runtime.max_active_clusters(_kernel(config, device), shape) >= 1
    return found


def launcher(config: HcPrenormConfig, device: int, m: int) -> runtime.Launcher:
    """The loaded kernel of `config` with its grid for M rows (clusters of `config.cluster` CTAs)."""
    grid = config.grid(m)
    key = (config, device, grid)
    found = _launchers.get(key)
    if found is None:
        shape = runtime.LaunchShape((grid, 1, 1), (config.threads, 1, 1), (config.cluster, 1, 1), config.smem_bytes)
        found = runtime.Launcher(_kernel(config, device), shape)
        if len(_launchers) >= 1024:
            _launchers.clear()
        _launchers[key] = found
    return found


def tensor_maps(config: HcPrenormConfig, a_ptr: int, lda: int, b_ptr: int, ldb: int, m: int):
    """(a's map, b's map): a as [M, K] bf16 in boxes of 64 x block_m, b as [N, K] fp32 in boxes of 32 x n_pad (rows
    past N and columns past K read as zeros), both 128-byte swizzled."""
    tmap_a = runtime.encode_tensor_map_2d("bfloat16", a_ptr, config.k, m, lda * 2, BLOCK_K, config.block_m,
                                          runtime.Swizzle.B128)
    tmap_b = runtime.encode_tensor_map_2d("float32", b_ptr, config.k, config.n, ldb * 4, 32, config.n_pad,
                                          runtime.Swizzle.B128)
    return tmap_a, tmap_b


def warmup_configs(n: int, k: int, splits: int = 1, max_m: int = 8192, num_sms: int = 132) -> list[HcPrenormConfig]:
    """Every config choose_config picks for M in 1..max_m (distinct ones, in order of first use), and where it picks
    a cluster of 16, the portable config a device that cannot place one runs instead."""
    seen: dict[HcPrenormConfig, None] = {}
    m = 1
    while m <= max_m:
        config = choose_config(m, n, k, splits, num_sms)
        seen.setdefault(config)
        if config.cluster > PORTABLE_CLUSTER:
            seen.setdefault(choose_config(m, n, k, splits, num_sms, PORTABLE_CLUSTER))
        m = m + 1 if m < 256 else m + 64
    return list(seen)
