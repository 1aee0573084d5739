"""How long NVRTC takes on a kernel, predicted from its config: the order warmup compiles in, and its ETA.

The figures are CPU seconds of NVRTC 13.5 for sm_90a on the deepseek-v3 preset's 331 kernels (2-core build
machine; docs/PERFORMANCE.md, "Warm-up"), fitted to the few config traits that make a kernel's code long:

* a deferred tile at most 32 columns wide with at most 56 k-blocks per tile runs its whole k-loop as one
  straight-line chunk (ptx/fp8_gemm_traits.cuh kDeferChunk): NVVM and ptxas work through every k-block of it,
  about 0.047 s per k-block and 16 columns (6 s at K 7168 and 32 columns, the slowest kernels of the preset;
  half that for the weight gradient);
* a BF16 tile whose columns straddle two 128-column B-scale blocks at a compile-time split (BLOCK_N 96, 160, 192,
  224) has its k-loop compiled once per split, about 0.7 s more, and 2.2 s more again where the loop runs in
  stage rounds;
* everything else costs about half a second (MQA logits and the helpers less).

Only the order of compiles and the ETA depend on these numbers: a wrong prediction builds the same kernels.
The ETA scales them by the speed measured on the kernels finished so far (:class:`CompileClock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd

from .jit import KernelSource

BASE_SECONDS = 0.51  # an ordinary FP8 GEMM kernel
STRAIGHT_SECONDS_PER_KBLOCK_16_COLS = 0.047  # per k-block of a straight-line chunk, per 16 columns of the tile
STRAIGHT_WGRAD_FACTOR = 0.5  # the weight gradient's straight-line chunks (a lighter promotion per k-block)
SPLIT_SECONDS = 0.73  # a k-loop compiled once per compile-time B-scale split
SPLIT_ROUNDS_SECONDS = 2.2  # ... and run in stage rounds
OTHER_SECONDS = 0.1  # MQA logits (0.15-0.2 s), helpers (0.03-0.1 s) and other small families
WHOLE_LOOP_KBLOCKS = 56  # ptx/fp8_gemm_traits.cuh kWholeLoopKBlocks
STRAIGHT_MAX_BLOCK_N = 32


def _fields(src: KernelSource) -> dict[str, str]:
    return dict(src.summary)


def predicted_seconds(src: KernelSource) -> float:
    """Predicted NVRTC CPU seconds of one kernel (see the module's docstring); never below a few hundredths."""
    f = _fields(src)
    if f.get("family") != "fp8_gemm_nt":
        return OTHER_SECONDS
    try:
        block_n, k, split_k = int(f["block_n"]), int(f["k"]), int(f.get("split_k", "1"))
        defer, wgrad = f.get("defer") == "True", f.get("wgrad") == "True"
        block_m, stages = int(f["block_m"]), int(f["stages"])
    except (KeyError, ValueError):
        return BASE_SECONDS
    tile_kblocks = -(-k // 128) // max(split_k, 1) if k > 0 else 0
    seconds = BASE_SECONDS
    if defer and block_n <= STRAIGHT_MAX_BLOCK_N and 0 < tile_kblocks <= WHOLE_LOOP_KBLOCKS:
        per_kblock = STRAIGHT_SECONDS_PER_KBLOCK_16_COLS * (STRAIGHT_WGRAD_FACTOR if wgrad else 1.0)
        seconds += per_kblock * tile_kblocks * block_n / 16
    splits = 128 // gcd(block_n, 128) if 128 % block_n else 1
    if not wgrad and 1 < splits <= 4:  # the B-scale split compiled in (dgx.kernels.fp8_gemm.scale_split_compiled_in)
        seconds += SPLIT_SECONDS
        rounds = not defer and block_m <= 128 and tile_kblocks > 0 and tile_kblocks % stages == 0
        if rounds:
            seconds += SPLIT_ROUNDS_SECONDS
    return seconds


def longest_first(costs: list[float]) -> list[int]:
    """Indices of ``costs`` from the largest to the smallest (ties in their given order): two workers that take
    the longest compiles first finish within one short compile of each other."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])


@dataclass
class CompileClock:
    """An ETA for compiles running on ``workers`` processes, in predicted seconds scaled by the measured speed.

    ``start(i, t)`` and ``finish(i, t, seconds)`` report task i's start and end at time t (seconds of one monotonic
    clock; ``seconds``: what the task itself took, if known, else t less its start). The speed is the predicted
    seconds of the compiled tasks over the time they took (a task that compiled nothing, ``measured=False``, does
    not count); what is left is the predicted seconds of the tasks not started plus, for each running task, its
    prediction less what the speed says it has done. Until a compile has finished there is no speed and no ETA.
    """

    costs: list[float]
    workers: int
    _waiting: set[int] = field(default_factory=set)
    _running: dict[int, float] = field(default_factory=dict)
    _done_cost: float = 0.0
    _done_time: float = 0.0

    def __post_init__(self) -> None:
        self._waiting = set(range(len(self.costs)))

    def start(self, index: int, t: float) -> None:
        self._waiting.discard(index)
        self._running[index] = t

    def finish(self, index: int, t: float, seconds: float | None = None, measured: bool = True) -> None:
        self._waiting.discard(index)  # (also when it finished without a start report)
        began = self._running.pop(index, t)
        if measured:
            self._done_cost += self.costs[index]
            self._done_time += max(seconds if seconds is not None else t - began, 0.0)

    def eta(self, t: float) -> float | None:
        """Seconds until the last task ends, or None before any speed is known."""
        if self._done_cost <= 0.0 or self._done_time <= 0.0:
            return None
        speed = self._done_cost / self._done_time  # predicted seconds per second of one worker
        left = [self.costs[i] for i in self._waiting]
        left += [max(self.costs[i] - speed * (t - began), 0.1 * self.costs[i]) for i, began in self._running.items()]
        if not left:
            return 0.0
        # Every worker busy until the work runs out, but never less than the longest task still to run.
        return max(sum(left) / max(self.workers, 1), max(left)) / speed
