"""The compile-time model behind warmup's order and ETA (dgx/compile_cost.py), CPU only, nothing compiled."""

from __future__ import annotations

import heapq
import random

import pytest

from dgx import compile_cost
from dgx.heuristics import pipeline_stages
from dgx.kernels import scale_layout
from dgx.kernels.fp8_gemm import LAYOUT_MASKED, GemmConfig
from dgx.jit import KernelSource


def test_the_long_compiles_are_predicted_long():
    """The traits that made the preset's slow kernels slow (measured, docs/PERFORMANCE.md, "Warm-up") rank them first."""
    predict = lambda c: compile_cost.predicted_seconds(c.render())  # noqa: E731
    straight = predict(GemmConfig(2112, 7168, 128, 32, 10, defer=True))  # 56 k-blocks in one chunk: ~6 s
    straight_wgrad = predict(GemmConfig(2112, 4096, 128, 32, 10, wgrad=True, defer=True))  # 32 k-blocks: ~2 s
    chunked = predict(GemmConfig(512, 32768, 128, 32, 10, defer=True))  # 256 k-blocks in chunks of 8: ~0.3 s
    split_rounds = predict(GemmConfig(7168, 2048, 128, 160, 4, layout=1))  # split compiled in, stage rounds: ~3 s
    split = predict(GemmConfig(7168, 18432, 128, 96, pipeline_stages(128, 96)))  # split compiled in: ~0.8-1.3 s
    plain = predict(GemmConfig(2112, 7168, 128, 128, 5))  # ~0.25 s
    assert straight > split_rounds > straight_wgrad > split > plain
    assert chunked < split and 4.0 < straight < 8.0 and plain < 1.0
    masked = predict(GemmConfig(4096, 7168, 64, 32, 13, layout=LAYOUT_MASKED, defer=True))
    assert masked == pytest.approx(predict(GemmConfig(4096, 7168, 64, 32, 13, defer=True)))
    assert compile_cost.predicted_seconds(scale_layout.CONFIG.render()) == compile_cost.OTHER_SECONDS
    assert compile_cost.predicted_seconds(KernelSource("x", "")) == compile_cost.OTHER_SECONDS


def test_longest_first():
    assert compile_cost.longest_first([1.0, 3.0, 2.0, 3.0]) == [1, 3, 2, 0]
    assert compile_cost.longest_first([]) == []


def _simulate(costs: list[float], actual: list[float], workers: int, startup: float = 0.0):
    """Runs tasks longest first (by `costs`) on `workers`, each taking `actual`; returns (end time, [(t, done, eta)])
    with the clock's ETA after each task ends."""
    clock = compile_cost.CompileClock(costs, workers)
    order = compile_cost.longest_first(costs)
    free = [(startup, w) for w in range(workers)]
    events = []  # (end, index, start)
    for index in order:  # hand each task to the first free worker
        t, w = heapq.heappop(free)
        events.append((t + actual[index], index, t))
        heapq.heappush(free, (t + actual[index], w))
    starts = sorted((start, index) for _, index, start in events)
    ends = sorted((end, index) for end, index, _ in events)
    out, s, done = [], 0, 0
    for end, index in ends:
        while s < len(starts) and starts[s][0] <= end:
            clock.start(starts[s][1], starts[s][0])
            s += 1
        start = next(st for e, i, st in events if i == index)
        clock.finish(index, end, end - start)
        done += 1
        out.append((end, done, clock.eta(end)))
    return ends[-1][0], out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_eta_within_30_percent_after_the_first_tenth(seed, workers):
    """A preset-like mix (a few 6 s kernels, many half-second ones), every compile off its prediction by a random
    factor (the model's spread) and the whole machine slower or faster than the model: once 10% of the kernels are
    done, every ETA is within 30% of the time actually left."""
    rng = random.Random(seed)
    costs = [6.0] * 11 + [3.5] * 12 + [2.0] * 20 + [1.0] * 60 + [0.5] * 228
    rng.shuffle(costs)
    machine = rng.choice([0.5, 1.0, 2.5])
    actual = [c * machine * rng.lognormvariate(0.0, 0.3) for c in costs]
    end, points = _simulate(costs, actual, workers, startup=0.5)
    checked = 0
    for t, done, eta in points:
        if done < len(costs) // 10 or done == len(costs):
            continue
        left = end - t
        assert eta is not None
        assert abs(eta - left) <= 0.3 * left + 1.0, (done, eta, left)  # (+1 s: the last seconds' granularity)
        checked += 1
    assert checked > 250


def test_eta_needs_a_finished_compile_and_ignores_kernels_built_elsewhere():
    clock = compile_cost.CompileClock([2.0, 1.0, 1.0], 2)
    assert clock.eta(0.0) is None
    clock.start(0, 0.0)
    clock.start(1, 0.0)
    clock.finish(1, 0.01, 0.01, measured=False)  # another process had built it: says nothing of the speed
    assert clock.eta(0.01) is None
    clock.start(2, 0.01)
    clock.finish(2, 2.01, 2.0)  # predicted 1 s, took 2: the machine is twice as slow as the model
    # Left: task 0 (2 s predicted = 4 s here, 2.01 s of it done); one task, so no sharing between the workers.
    assert clock.eta(2.01) == pytest.approx(4.0 - 2.01, abs=0.01)
    clock.finish(0, 4.0, 4.0)
    assert clock.eta(4.0) == 0.0
