"""The MQA-logits family (ptx/mqa_logits.cuh): the indexer's logits kernel (prefill and paged decode), the
kernel that writes -inf outside the windows, and the decode schedule kernel. Configs, rendering, interfaces."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import jit
from .interface import TENSOR_MAP, KernelInterface, Param
from .wgmma_render import render_wgmma_e4m3

SMEM_LIMIT = 232448  # bytes of shared memory one block may use on Hopper (227 KB)
HEADS = (16, 32, 64)  # 16: DeepSeek-V4's indexer (beyond DeepGEMM's sm_90 kernels, which take 32 and 64)
HEAD_DIMS = (32, 64, 128)
PAGED_BLOCK_KV = 64  # tokens per block of the paged cache (the kernel's KV block)
NEXT_NS = (1, 2, 3, 4)  # query tokens per sequence of the paged kernel (DeepGEMM's sm_90 kernel: 1 and 2)
MAX_VARLEN_BLOCK_Q = 8  # tokens of one sequence a group of the paged kernel with indices takes at most
WARMUP_NEXT_NS = (1, 2)  # what warmup_configs builds (extended_paged_configs lists the rest)
SCHEDULE_THREADS = 1024
CLEAN_THREADS = 256

MQA_INTERFACE = KernelInterface(
    "MqaLogitsParams",
    (
        Param("tmap_q", TENSOR_MAP),  # Q as [tokens * H, D] fp8, boxes of one group's rows
        Param("tmap_kv", TENSOR_MAP),  # prefill: KV [S_kv, D]; decode: the cache's values [blocks, 64, D]
        Param("tmap_scales", TENSOR_MAP),  # prefill: [1, S_kv] floats; decode: [blocks, 64] floats in the cache
        Param("tmap_weights", TENSOR_MAP),  # [query tokens, H] floats, boxes of one group's rows
        Param("ks", "const int*"),
        Param("ke", "const int*"),
        Param("context_lens", "const int*"),
        Param("block_table", "const int*"),
        Param("schedule", "const int*"),
        Param("logits", "void*"),
        Param("logits_stride", "long long"),
        Param("table_stride", "long long"),
        Param("seq_len", "int"),
        Param("seq_len_kv", "int"),
        Param("max_seqlen_k", "int"),
        Param("batch", "int"),
        Param("table_width", "int"),
        Param("context_2d", "int"),
        Param("max_context_len", "int"),
        Param("clean", "int"),  # prefill: the producer warpgroup's idle warps write -inf outside the windows
    ),
)

CLEAN_INTERFACE = KernelInterface(
    "MqaCleanParams",
    (
        Param("logits", "void*"),
        Param("logits_stride", "long long"),
        Param("ks", "const int*"),
        Param("ke", "const int*"),
        Param("lens", "const int*"),
        Param("seq_len_kv", "int"),
        Param("width", "int"),
        Param("context_2d", "int"),
    ),
)

SCHEDULE_INTERFACE = KernelInterface(
    "PagedScheduleParams",
    (
        Param("lens", "const int*"),
        Param("schedule", "int*"),
        Param("batch", "int"),
        Param("next_n", "int"),
        Param("context_2d", "int"),
        Param("num_ctas", "int"),
    ),
)

# The paged kernel and its schedule with `indices` (one query row per token, indices[t] its sequence): the same
# members plus the indices. Only the varlen kernels have them, so the others keep their parameters.
MQA_VARLEN_INTERFACE = KernelInterface("MqaLogitsVarlenParams",
                                       MQA_INTERFACE.params + (Param("indices", "const int*"),))
SCHEDULE_VARLEN_INTERFACE = KernelInterface("PagedVarlenScheduleParams",
                                            SCHEDULE_INTERFACE.params + (Param("indices", "const int*"),))


def _flag(v: bool) -> str:
    return "true" if v else "false"


@dataclass(frozen=True)
class MqaLogitsConfig:
    """Everything compile-time about one MQA-logits kernel. Sequence lengths and the batch are run-time."""

    heads: int
    head_dim: int
    block_q: int  # query tokens per group: prefill 128 / heads (wgmma N = 128), decode next_n
    kv_stages: int
    paged: bool = False
    compressed: bool = False  # prefill only: logits[i, j - ks[i]] in a [S, max_seqlen_k] output
    bf16: bool = False  # BF16 logits (else FP32)
    math_wgs: int = 3  # math warpgroups, taking the KV blocks in turns
    stream_kv: bool = False  # KV loads marked L2 evict-first (read once: the paged decode cache)
    # Paged with `indices`: a group is up to block_q consecutive tokens of one sequence (a run of equal indices),
    # each with its own context length; a run longer than block_q is taken in several groups.
    varlen: bool = False
    # Queries per pass (paged): a block's MMAs and ReLU-weight sums in two passes, the first over this many queries
    # (wgmma N = pass_queries x heads), the second over the rest; 0: one pass over the whole tile.
    pass_queries: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.heads not in HEADS:
            problems.append(f"heads must be one of {HEADS}")
        if self.head_dim not in HEAD_DIMS:
            problems.append(f"head_dim must be one of {HEAD_DIMS}")
        n = self.block_q * self.heads
        if self.block_q < 1 or n > 256 or n % 16:
            problems.append(f"block_q x heads must be a multiple of 16 up to 256 (wgmma N); got {n}")
        if self.paged and not self.varlen and self.block_q not in NEXT_NS:
            problems.append(f"a paged kernel's block_q is next_n, one of {NEXT_NS}")
        if self.varlen and not 1 <= self.block_q <= MAX_VARLEN_BLOCK_Q:
            problems.append(f"a varlen group takes 1..{MAX_VARLEN_BLOCK_Q} tokens")
        if self.varlen and not self.paged:
            problems.append("varlen (indices) is for the paged kernel")
        if self.paged and self.compressed:
            problems.append("the paged kernel has no compressed form")
        if self.pass_queries:
            rest = self.block_q - self.pass_queries
            if not self.paged or not 1 <= self.pass_queries < self.block_q or rest > self.pass_queries:
                problems.append("pass_queries: a paged tile in two passes, the first of 1 .. block_q - 1 queries "
                                "and the larger")
            elif (self.pass_queries * self.heads) % 16:
                problems.append("pass_queries: a pass's wgmma N (queries x heads) must be a multiple of 16")
        if not 2 <= self.kv_stages <= 32:
            problems.append("kv_stages must be in 2..32")
        if self.math_wgs not in (2, 3):
            problems.append("math_wgs must be 2 or 3")
        elif self.kv_stages % self.math_wgs:
            problems.append("kv_stages must be a multiple of math_wgs (each math warpgroup has its own stages)")
        # Registers a math thread holds across a block: the accumulators (of the widest pass) and its heads'
        # weights; the rest of the budget (232 with two math warpgroups, 152 with three) goes to addresses and sums.
        held = self.pass_n // 2 + n // 4
        if held > (200 if self.math_wgs == 2 else (128 if self.pass_queries else 120)):
            problems.append(f"{held} registers of accumulators and weights per thread do not fit {self.math_wgs} math warpgroups")
        if problems:
            raise ValueError(f"invalid MQA-logits config {self}: {'; '.join(problems)}")
        if self.smem_bytes > SMEM_LIMIT:
            raise ValueError(f"MQA-logits config {self} needs {self.smem_bytes} bytes of shared memory; the limit is {SMEM_LIMIT}")

    @property
    def n(self) -> int:
        return self.block_q * self.heads

    @property
    def pass_n(self) -> int:
        """wgmma N of the widest pass (the tile's N with one pass)."""
        return (self.pass_queries or self.block_q) * self.heads

    @property
    def wgmma_ns(self) -> tuple[int, ...]:
        """The wgmma N the kernel issues: the tile's, or with two passes both passes' (the second as wide as the
        first: ptx/mqa_logits.cuh, MqaPass)."""
        return (self.pass_n,)

    @property
    def threads(self) -> int:
        return 128 * (self.math_wgs + 1)

    @property
    def smem_bytes(self) -> int:
        """ptx/mqa_logits.cuh MqaTraits::kSmemBytes: two Q stages (Q, weights, the group's record), the KV ring
        (values and scales), barriers."""
        return 2 * (self.n * self.head_dim + weights_bytes(self.n) + group_bytes(self.block_q)) + self.kv_stages * (
            64 * self.head_dim + 256) + 8 * (4 + 2 * self.kv_stages)

    @property
    def kernel_name(self) -> str:
        kind = "paged_mqa_logits" if self.paged else "mqa_logits"
        name = f"dgx_{kind}_h{self.heads}_d{self.head_dim}_q{self.block_q}_s{self.kv_stages}"
        name += f"_w{self.math_wgs}" + ("_skv" if self.stream_kv else "") + ("_vl" if self.varlen else "")
        name += f"_pq{self.pass_queries}" if self.pass_queries else ""
        return name + ("_c" if self.compressed else "") + ("_bf16" if self.bf16 else "")

    @property
    def kind(self) -> str:
        return "paged_mqa_logits" if self.paged else "mqa_logits"

    def describe(self) -> tuple[tuple[str, str], ...]:
        return jit.config_summary(self.kind, self, lambda name: (name != "varlen" or self.varlen)
                                  and (name != "pass_queries" or self.pass_queries))

    @property
    def interface(self) -> KernelInterface:
        return MQA_VARLEN_INTERFACE if self.varlen else MQA_INTERFACE

    def render(self) -> jit.KernelSource:
        return _render_logits(self)


def weights_bytes(n: int) -> int:
    """One Q stage's weights: n floats, padded to 128 bytes (a TMA destination)."""
    return (n * 4 + 127) // 128 * 128


def group_bytes(block_q: int) -> int:
    """One Q stage's group record (MqaGroup): 64 bytes, or 128 for the 8 queries of a 16-head prefill group."""
    return 64 if (4 + 2 * block_q) * 4 <= 64 else 128


@lru_cache(maxsize=None)
def _render_logits(config: MqaLogitsConfig) -> jit.KernelSource:
    """The kernel source of `self` (rendered once per config)."""
    traits = (
        f"dgx::MqaTraits<{config.heads}, {config.head_dim}, {config.block_q}, {config.kv_stages}, {_flag(config.paged)}, "
        f"{_flag(config.compressed)}, {_flag(config.bf16)}, {config.math_wgs}, {_flag(config.stream_kv)}"
        + (f", {_flag(config.varlen)}, {config.pass_queries}>" if config.pass_queries
           else (", true>" if config.varlen else ">"))
    )
    source = (
        '#include "mqa_logits.cuh"\n'
        + "".join(render_wgmma_e4m3(n) for n in config.wgmma_ns)
        + config.interface.render_entry(config.kernel_name, config.threads, f"dgx::mqa_logits_body<{traits}>")
        + f"static_assert({traits}::kSmemBytes == {config.smem_bytes}, "
        '"dgx.kernels.mqa_logits smem_bytes disagrees with the kernel");\n'
        + f"static_assert({traits}::kThreads == {config.threads}, \"thread count\");\n"
    )
    shape = {"heads": config.heads, "head_dim": config.head_dim}
    if config.paged and not config.varlen:
        shape["next_n"] = config.block_q
    return jit.KernelSource(
        name=config.kernel_name,
        source=source,
        dynamic_smem=config.smem_bytes,
        summary=config.describe(),
        warmup_hint="--shapes FILE with " + str({"kind": config.kind, **shape}).replace("'", '"'),
    )


@dataclass(frozen=True)
class MqaCleanConfig:
    """The kernel that writes -inf outside the windows (one CTA per row of logits)."""

    paged: bool
    compressed: bool = False
    bf16: bool = False
    next_n: int = 1  # paged: query tokens per sequence

    threads = CLEAN_THREADS
    smem_bytes = 0

    @property
    def kernel_name(self) -> str:
        kind = f"paged_n{self.next_n}" if self.paged else ("compressed" if self.compressed else "full")
        return f"dgx_mqa_clean_{kind}" + ("_bf16" if self.bf16 else "")

    @lru_cache(maxsize=None)
    def render(self) -> jit.KernelSource:
        body = (f"dgx::mqa_clean_body<{_flag(self.paged)}, {_flag(self.compressed)}, {_flag(self.bf16)}, "
                f"{self.next_n}>")
        return jit.KernelSource(
            name=self.kernel_name,
            source='#include "mqa_logits.cuh"\n' + CLEAN_INTERFACE.render_entry(self.kernel_name, CLEAN_THREADS, body),
            summary=jit.config_summary("mqa_clean", self),
        )


@dataclass(frozen=True)
class PagedScheduleConfig:
    """The decode schedule kernel (one CTA). `varlen`: the schedule of a call with `indices`, whose units are runs of
    tokens of one sequence."""

    varlen: bool = False

    threads = SCHEDULE_THREADS
    smem_bytes = 0

    @property
    def kernel_name(self) -> str:
        return "dgx_paged_mqa_schedule" + ("_varlen" if self.varlen else "")

    @property
    def interface(self) -> KernelInterface:
        return SCHEDULE_VARLEN_INTERFACE if self.varlen else SCHEDULE_INTERFACE

    @lru_cache(maxsize=None)
    def render(self) -> jit.KernelSource:
        body = (f"dgx::paged_varlen_schedule_body<{SCHEDULE_THREADS}>" if self.varlen
                else f"dgx::paged_schedule_body<{SCHEDULE_THREADS}>")
        return jit.KernelSource(
            name=self.kernel_name,
            source='#include "mqa_logits.cuh"\n' + self.interface.render_entry(self.kernel_name, SCHEDULE_THREADS, body),
            summary=(("family", "paged_mqa_schedule"),) + ((("varlen", "True"),) if self.varlen else ()),
        )


def prefill_config(heads: int, head_dim: int, compressed: bool, bf16: bool) -> MqaLogitsConfig:
    """The prefill kernel for (H, D): groups of 128 / H query tokens (wgmma N = 128), three math warpgroups
    (faster than two: PERFLOG, MQA logits), up to five KV stages each."""
    return MqaLogitsConfig(heads, head_dim, 128 // heads, _stages(128, head_dim, 3, block_q=128 // heads), False,
                           compressed, bf16)


def paged_config(heads: int, head_dim: int, next_n: int, bf16: bool, varlen: bool = False) -> MqaLogitsConfig:
    """The decode kernel: memory-bound, so a deep KV ring keeps enough bytes in flight per SM; three math
    warpgroups ran 1-6% faster than two; the cache, read once, streams through L2 as evict-first, which kept
    3-13% of the time that evicting other kernels' lines cost (PERFLOG, MQA logits). Tiles wider than 128 (64 heads x
    next_n 3 or 4) run in two passes of at most 128 columns on three warpgroups (on two, with the whole tile's
    accumulators, they reached 0.69-0.73 of next_n 1's bandwidth share). `varlen`: the kernel of a call with
    indices, whose groups are up to `next_n` tokens of one sequence (varlen_block_q)."""
    n = next_n * heads
    pass_queries = 128 // heads if n > 128 else 0
    return MqaLogitsConfig(heads, head_dim, next_n, _stages(n, head_dim, 3), True, False, bf16,
                           stream_kv=True, varlen=varlen, pass_queries=pass_queries)


def varlen_block_q(heads: int) -> int:
    """Tokens of one sequence a varlen group takes (a run of more is split; each group reads the run's KV blocks):
    4 at 16 and 32 heads, 2 at 64 (N 64 to 128, one pass). Groups twice as large (two passes) ran slower on the
    H200: 256 sequences of 6 tokens at 8K context, 64 heads 224 us against 156, 16 heads 147 against 119
    (docs/PERFLOG.md, 2026-11-27)."""
    return 4 if heads <= 32 else 2


def varlen_config(heads: int, head_dim: int, bf16: bool) -> MqaLogitsConfig:
    """The paged kernel of a call with `indices`."""
    return paged_config(heads, head_dim, varlen_block_q(heads), bf16, varlen=True)


def _stages(n: int, head_dim: int, math_wgs: int, most: int = 16, block_q: int = 1) -> int:
    """KV stages for a tile of N = n: as many as shared memory holds up to `most`, a multiple of `math_wgs`."""
    fixed = 2 * (n * head_dim + weights_bytes(n) + group_bytes(block_q)) + 8 * 4
    per_stage = 64 * head_dim + 256 + 16
    stages = min(most, (SMEM_LIMIT - fixed) // per_stage)
    return max(math_wgs, stages - stages % math_wgs)


def check_shape(heads: object, head_dim: object, next_n: object = 1, label=lambda f: f) -> None:
    """Raises ValueError unless (H, D, next_n) is a shape the kernels take; ``label`` names a field for the caller
    (a shapes-file field, a CLI option)."""
    for value, name, allowed in ((heads, "heads", HEADS), (head_dim, "head_dim", HEAD_DIMS), (next_n, "next_n", NEXT_NS)):
        if isinstance(value, bool) or value not in allowed:
            raise ValueError(f"{label(name)}: expected one of {', '.join(map(str, allowed))}, got {value!r}")


def warmup_configs(kind: str, heads: int, head_dim: int) -> list:
    """Every kernel a model with H heads of dimension D can run for `kind` ('mqa_logits' or 'paged_mqa_logits'):
    both logits dtypes, the full and compressed prefill forms, both next_n, and the helper kernels."""
    check_shape(heads, head_dim)
    if kind == "mqa_logits":
        return [c for compressed in (False, True) for bf16 in (False, True)
                for c in (prefill_config(heads, head_dim, compressed, bf16), MqaCleanConfig(False, compressed, bf16))]
    if kind == "paged_mqa_logits":
        return [c for next_n in WARMUP_NEXT_NS for bf16 in (False, True)
                for c in (paged_config(heads, head_dim, next_n, bf16), MqaCleanConfig(True, False, bf16, next_n))
                ] + [PagedScheduleConfig()]
    raise ValueError(f"kind: expected mqa_logits or paged_mqa_logits, got {kind!r}")


def extended_paged_configs(heads: int, head_dim: int) -> list:
    """The paged kernels beyond warmup_configs' set: next_n 3 and 4, and the calls with `indices` (the varlen
    kernel, its schedule; its cleaning kernel is next_n 1's), both logits dtypes."""
    check_shape(heads, head_dim)
    extra = [c for next_n in NEXT_NS if next_n not in WARMUP_NEXT_NS for bf16 in (False, True)
             for c in (paged_config(heads, head_dim, next_n, bf16), MqaCleanConfig(True, False, bf16, next_n))]
    return extra + [varlen_config(heads, head_dim, bf16) for bf16 in (False, True)] + [PagedScheduleConfig(True)]
