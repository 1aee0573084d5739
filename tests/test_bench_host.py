"""dgx bench's host section on the CPU: which patterns it times for dgx and for the peers, and how a pattern's own
tensor building is taken off (the timer and the driver stood in for)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dgx.bench import host_patterns, problems, runner, timing  # noqa: E402
from dgx.bench.peers import DgxImpl  # noqa: E402
from dgx.bench.prepared import Prepared  # noqa: E402
from driver_stand_in import stand_in  # noqa: E402


class FakePeer:
    name = "cublaslt"

    def __init__(self):
        self.selected = []

    def runs_on(self, suite):
        return suite == "dense"

    def select(self, problem, ctx):
        self.selected.append(problem.m)
        return Prepared(lambda: None, lambda: None), 0.0, ""


class FakeProblem:
    def __init__(self, m):
        self.m = m
        self.freed = False

    def free(self):
        self.freed = True


@pytest.mark.filterwarnings("ignore::dgx.errors.LayoutConversionWarning")
def test_dgx_in_every_pattern_and_the_peers_in_two(monkeypatch):
    timed = []

    def fake_host_cost(fn, calls=1000, *args, **kwargs):
        for _ in range(3):
            fn()
        timed.append(calls)
        return timing.HostTiming(5.0, 6.0, 7.0, True, False)

    made = []

    def fake_problem(shape, seed):
        made.append(FakeProblem(shape.m))
        return made[-1]

    every = host_patterns.all_patterns
    monkeypatch.setattr(timing, "host_cost", fake_host_cost)
    monkeypatch.setattr(host_patterns, "all_patterns", lambda dgx, device: every(dgx, "cpu", kinds=("dense", "masked")))
    monkeypatch.setattr(problems, "build_problem", fake_problem)
    peer = FakePeer()
    with stand_in():
        out = runner.measure_host([DgxImpl(), peer], ctx=None, seed=0, calls=10)
    dgx_rows = [h for h in out if h.name == "dgx"]
    assert [h.pattern for h in dgx_rows] == ["dense/same", "dense/fresh_out", "dense/m_changes", "dense/engine",
                                             "dense/sfa_row_major", "masked/same", "masked/engine"]
    assert all(h.status == "ok" and h.goal_us == host_patterns.GOALS_US[h.pattern] and h.label for h in dgx_rows)
    fresh = {h.pattern: h for h in dgx_rows if h.prep_us is not None}
    assert set(fresh) == {"dense/fresh_out", "dense/engine", "masked/engine"}
    assert all((h.cpu_us, h.plain_us, h.prep_us) == (0.0, 0.0, 5.0) for h in fresh.values())
    assert all(h.cpu_us == 5.0 for h in dgx_rows if h.prep_us is None)
    peer_rows = [h for h in out if h.name == "cublaslt"]
    assert [h.pattern for h in peer_rows] == list(host_patterns.PEER_PATTERNS)
    assert peer.selected == [64, *host_patterns.M_SIZES] and all(p.freed for p in made)
    assert set(timed) == {10}
