"""The HyperConnection pre-norm GEMM family (ptx/hc_prenorm.cuh): config, heuristic, rendering, launch contract.

    d[m, n] = sum_k a[m, k] * b[n, k]   (TF32 tensor cores, FP32 out)
    s[m]    = sum_k a[m, k]^2           (FP32, from the BF16 values)

for BF16 a [M, K] and FP32 b [N, K] with N small (24 in DeepSeek-V4). Memory-bound: reading a once is the cost,
so the kernel streams a's rows through a TMA ring and spreads K over enough CTAs to keep every SM reading. A CTA
takes 64 or 128 rows (one or two math warpgroups sharing the stage's b tile) and one K range; the user's
`num_splits` ranges each write their own partial [M, N] and [M] slices, and inside a split the ranges of a cluster of
CTAs are summed through distributed shared memory in rank order (so the result is bitwise the same on every run).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

from .. import jit, runtime
from ..intmath import ceil_div, round_up
from .interface import TENSOR_MAP, KernelInterface, Param

SMEM_LIMIT = 232448  # bytes of shared memory one block may use on Hopper (227 KB)
SM_SMEM = 233472  # bytes of shared memory per SM (228 KB), of which each resident block reserves 1 KB
BLOCK_K = 64  # BF16 elements of K per stage: one 128-byte swizzled row of a
BLOCK_MS = (64, 128)
CLUSTERS = (1, 2, 4, 8)  # CTAs summing one split's K ranges (a portable cluster holds at most 8)
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
        """One or two math warpgroups and the producer warp."""
        return 128 * (self.block_m // 64) + 32

    @property
    def k_blocks(self) -> int:
        return ceil_div(self.k, BLOCK_K)

    @property
    def smem_bytes(self) -> int:
        """ptx/hc_prenorm.cuh HcPrenormTraits::kSmemBytes: the stages (a tile, two b half-tiles), the cluster's
        partial tile, the barriers."""
        return smem_bytes(self.n, self.block_m, self.cluster, self.stages)

    def grid(self, m: int) -> int:
        return ceil_div(m, self.block_m) * self.splits * self.cluster

    @property
    def kernel_name(self) -> str:
        return (f"dgx_hc_prenorm_n{self.n}_k{self.k}_bm{self.block_m}_sp{self.splits}_c{self.cluster}"
                f"_s{self.stages}")

    def describe(self) -> tuple[tuple[str, str], ...]:
        return (("family", "hc_prenorm"),) + tuple((f.name, str(getattr(self, f.name))) for f in fields(self))

    def render(self) -> jit.KernelSource:
        return _render(self)


def smem_bytes(n: int, block_m: int, cluster: int, stages: int) -> int:
    n_pad = round_up(n, 8)
    stage = block_m * BLOCK_K * 2 + 2 * n_pad * 128
    partial = round_up((block_m * n_pad + block_m) * 4, 1024) if cluster > 1 else 0
    return stages * stage + partial + 2 * stages * 8


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
        + INTERFACE.render_entry(config.kernel_name, config.threads, f"dgx::hc_prenorm_body<{traits}>")
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

# What the config choice assumes (H100; the model only has to rank configs): a CTA reads at most this many bytes a
# second (one SM's TMA ring with ~100-180 KB in flight; DeepGEMM's kernel reached ~30 GB/s per SM), the card's HBM
# this many, and a cluster's reduction costs about this long per extra rank.
SM_BYTES_PER_S = 40e9
HBM_BYTES_PER_S = 3.0e12
L2_BYTES_PER_S = 6.0e12
CLUSTER_RANK_S = 0.3e-6
MIN_K_BLOCKS_PER_CTA = 2  # a clustered CTA runs at least this many k-blocks


def stages_for(n: int, block_m: int, cluster: int) -> int:
    """Stages of the ring: as many as fit (128-row tiles, one CTA an SM), or as many as let two 64-row CTAs share
    an SM; at most 16."""
    budget = SMEM_LIMIT if block_m == 128 else SM_SMEM // 2 - 1024
    fixed = smem_bytes(n, block_m, cluster, 0)
    per_stage = smem_bytes(n, block_m, cluster, 1) - fixed
    return max(2, min(16, (budget - fixed) // per_stage))


def estimate_seconds(config: HcPrenormConfig, m: int, num_sms: int) -> float:
    """A rough time for M rows: the slowest of the card's HBM (a read once, b once per split), its L2 (b read by
    every row block) and the busiest SM (its CTAs' bytes at SM_BYTES_PER_S), plus the cluster's reduction."""
    ranges = config.splits * config.cluster
    rows = min(config.block_m, m)
    k_range = config.k_blocks / ranges * BLOCK_K
    cta_bytes = (rows * 2 + config.n_pad * 4) * k_range
    ctas = config.grid(m)
    per_sm = ceil_div(ctas, num_sms)
    sm = per_sm * cta_bytes / SM_BYTES_PER_S
    hbm = (m * config.k * 2 + config.n * config.k * 4) / HBM_BYTES_PER_S
    l2 = (m * config.k * 2 + ceil_div(m, config.block_m) * config.n_pad * config.k * 4) / L2_BYTES_PER_S
    return max(sm, hbm, l2) + (config.cluster - 1) * CLUSTER_RANK_S


def l2_bytes(config: HcPrenormConfig, m: int) -> int:
    return ceil_div(m, config.block_m) * config.n_pad * config.k * 4


@lru_cache(maxsize=4096)
def choose_config(m: int, n: int, k: int, splits: int, num_sms: int) -> HcPrenormConfig:
    """The config for M rows: the fewest estimated seconds; ties go to fewer b bytes read from L2, then smaller
    clusters."""
    if m <= 0 or num_sms <= 0:
        raise ValueError(f"choose_config needs positive M and SM count; got M={m}, num_sms={num_sms}")
    k_blocks = ceil_div(k, BLOCK_K)
    best, best_key = None, None
    for block_m in BLOCK_MS:
        if block_m == 128 and m <= 64:
            continue
        for cluster in CLUSTERS:
            if cluster > 1 and k_blocks // splits < MIN_K_BLOCKS_PER_CTA * cluster:
                continue
            config = HcPrenormConfig(n, k, block_m, splits, cluster, stages_for(n, block_m, cluster))
            t = estimate_seconds(config, m, num_sms)
            key = (round(t * 1e8), l2_bytes(config, m), cluster)  # 10 ns buckets
            if best_key is None or key < best_key:
                best, best_key = config, key
    return best


_launchers: dict[tuple, runtime.Launcher] = {}


def launcher(config: HcPrenormConfig, device: int, m: int) -> runtime.Launcher:
    """The loaded kernel of `config` with its grid for M rows (clusters of `config.cluster` CTAs)."""
    grid = config.grid(m)
    key = (config, device, grid)
    found = _launchers.get(key)
    if found is None:
        kernel = jit.get_kernel(config.render(), device)
        shape = runtime.LaunchShape((grid, 1, 1), (config.threads, 1, 1), (config.cluster, 1, 1), config.smem_bytes)
        found = runtime.Launcher(kernel, shape)
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
    """Every config choose_config picks for M in 1..max_m (distinct ones, in order of first use)."""
    seen: dict[HcPrenormConfig, None] = {}
    m = 1
    while m <= max_m:
        seen.setdefault(choose_config(m, n, k, splits, num_sms))
        m = m + 1 if m < 256 else m + 64
    return list(seen)
