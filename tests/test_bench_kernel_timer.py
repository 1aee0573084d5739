"""dgx bench's kernel timer without a GPU: the per-call grouping on fabricated profiler records, time_kernels on
a fake torch whose GPU is a clock, the timers by name, and the note a call of several kernels gets."""

import dataclasses
import random
import sys
import types

import pytest

from dgx.bench.kernel_timer import (
    DELIMITER_KERNEL,
    CallKernels,
    DeviceEvent,
    KernelTimerError,
    device_events,
    group_calls,
    time_kernels,
)
from dgx.bench.timers import TIMERS, check_timer, timer_function
from dgx.bench.timing import Timing, time_gpu

DELIM = "at::cuda::(anonymous namespace)::spin_kernel(long)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<signed char>, ...>"


def timeline(calls, flush=FILL, flush_us=330.0, gap=3.0):
    """Device records of ``len(calls)`` timed calls as time_kernels issues them: flush, delimiter, the call's
    activities (``[(name, µs), ...]``), delimiter; ``gap`` µs of idle GPU between activities."""
    out, t = [], 1000.0

    def put(name, us):
        nonlocal t
        out.append(DeviceEvent(name, t, us))
        t += us + gap

    for acts in calls:
        if flush:
            put(flush, flush_us)
        put(DELIM, 0.8)
        for name, us in acts:
            put(name, us)
        put(DELIM, 0.8)
    return out


# ---- group_calls: the pure per-call aggregation ------------------------------------------------


def test_group_calls_sums_each_calls_kernels_and_skips_the_flush():
    calls = [
        [("dgx::fp8_gemm_kernel", 10.5)],
        [("transform_sf_kernel", 2.0), ("dgx::fp8_gemm_kernel", 10.0)],  # scales converted, then the GEMM
        [("Memcpy DtoD (Device -> Device)", 7.25)],  # a copy is GPU work too
    ]
    events = timeline(calls)
    random.Random(0).shuffle(events)  # the profiler's order is not the device's
    got = group_calls(events, 3)
    assert [c.total_us for c in got] == [10.5, 12.0, 7.25]  # the gaps between kernels are not counted
    assert got[1].names == ("transform_sf_kernel", "dgx::fp8_gemm_kernel")  # in device order
    assert all(FILL not in c.names and DELIM not in c.names for c in got)


def test_group_calls_tells_calls_apart_by_position_not_by_name():
    """A flush whose kernel has the call's name, and a call made of fill kernels: still only the fenced work."""
    events = timeline([[("gemm", 5.0)], [("gemm", 6.0), ("gemm", 1.0)]], flush="gemm", flush_us=300.0)
    assert [c.total_us for c in group_calls(events, 2)] == [5.0, 7.0]
    events = timeline([[(FILL, 4.0)], [(FILL, 4.5)]])
    assert [c.total_us for c in group_calls(events, 2)] == [4.0, 4.5]


def test_group_calls_accepts_tuples_and_ignores_work_outside_the_fences():
    events = [(e.name, e.start_us, e.duration_us) for e in timeline([[("k", 2.0)], [("k", 3.0)]], flush=None)]
    events.append(("late straggler", 10_000.0, 50.0))  # after the last fence
    events.append(("early warm-up", 0.0, 50.0))  # before the first
    assert group_calls(events, 2) == [CallKernels(2.0, ("k",)), CallKernels(3.0, ("k",))]


def test_group_calls_nothing_recorded_names_what_was_expected():
    with pytest.raises(KernelTimerError) as e:
        group_calls([], 30)
    msg = str(e.value)
    assert "recorded no CUDA kernel, copy or memset" in msg
    assert f"expected 60 delimiter kernels ({DELIMITER_KERNEL}) fencing 30 timed call(s)" in msg
    assert "CUPTI" in msg and "--timer events" in msg


def test_group_calls_delimiters_that_do_not_add_up():
    events = timeline([[("k", 2.0)], [("k", 3.0)]])
    with pytest.raises(KernelTimerError, match=r"recorded 4 delimiter kernels \(spin_kernel\), expected 6"):
        group_calls(events, 3)
    with pytest.raises(KernelTimerError, match="recorded 3 delimiter kernels"):
        group_calls(events[:-1], 2)


def test_group_calls_call_without_gpu_work():
    events = timeline([[("k", 2.0)], [], [("k", 3.0)]])
    with pytest.raises(KernelTimerError, match="timed call 1 of 3: no CUDA kernel, copy or memset between its delimiters"):
        group_calls(events, 3)
    with pytest.raises(ValueError):
        group_calls(events, 0)


# ---- time_kernels on a fake torch -----------------------------------------------------------------


@dataclasses.dataclass
class _Range:
    start: float
    end: float


class _Type:
    def __init__(self, name):
        self.name = name


CUDA, CPU = _Type("CUDA"), _Type("CPU")


@dataclasses.dataclass
class _Event:
    name: str
    time_range: _Range
    device_type: _Type = CUDA
    is_user_annotation: bool = False
    device_index: int = 0


class FakeGpu:
    """A fake torch whose GPU is a clock and a list of launched activities, and whose profiler hands back the
    activities launched while it was active (plus a CPU-side event and a GPU annotation, which must be ignored)."""

    def __init__(self, record=True):
        self.t = 0.0
        self.launched: list[_Event] = []
        self.profiling = False
        self.record = record
        self.activities = None
        torch = types.ModuleType("torch")
        torch.__version__ = "fake"
        torch.cuda = types.SimpleNamespace(
            synchronize=lambda: None, current_device=lambda: 0, _sleep=lambda cycles: self.launch(DELIM, 0.5)
        )
        prof_mod = types.ModuleType("torch.profiler")
        prof_mod.ProfilerActivity = types.SimpleNamespace(CUDA="cuda", CPU="cpu")
        gpu = self

        class profile:
            def __init__(self, activities):
                gpu.activities = activities

            def __enter__(self):
                gpu.profiling = True
                self.seen = []
                gpu.sink = self.seen
                return self

            def __exit__(self, *exc):
                gpu.profiling = False

            def events(self):
                if not gpu.record:
                    return []
                first = self.seen[0].time_range.start if self.seen else 0.0
                extra = [
                    _Event("cudaLaunchKernel", _Range(first, first + 1e6), device_type=CPU),
                    _Event("call annotation", _Range(first, first + 1e6), is_user_annotation=True),
                    _Event("work on another GPU", _Range(first + 1, first + 2), device_index=1),
                ]
                return extra + list(self.seen)

        prof_mod.profile = profile
        torch.profiler = prof_mod
        self.torch, self.profiler = torch, prof_mod

    def launch(self, name, us):
        ev = _Event(name, _Range(self.t, self.t + us))
        self.t += us + 4.0  # idle GPU between activities: never counted
        self.launched.append(ev)
        if self.profiling:
            self.sink.append(ev)


def _install(monkeypatch, gpu):
    monkeypatch.setitem(sys.modules, "torch", gpu.torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", gpu.profiler)


def test_time_kernels_on_a_fake_gpu(monkeypatch):
    gpu = FakeGpu()
    _install(monkeypatch, gpu)
    calls = iter(range(100))

    def fn():  # call i: a 1 µs prologue kernel and a (10 + i) µs GEMM
        i = next(calls)
        gpu.launch("prologue", 1.0)
        gpu.launch("gemm", 10.0 + i)

    t = time_kernels(fn, lambda: gpu.launch(FILL, 300.0), warmup=2, iters=5)
    assert gpu.activities == ["cuda"]
    # the warm-ups (calls 0 and 1) ran before the profiler: the samples are calls 2..6
    assert t.samples_us == [13.0, 14.0, 15.0, 16.0, 17.0]
    assert (t.median_us, t.min_us, t.max_us) == (15.0, 13.0, 17.0)
    assert t.kernels == ["prologue", "gemm"]
    names = [e.name for e in gpu.launched]
    assert names[:6] == [FILL, "prologue", "gemm", FILL, "prologue", "gemm"]  # warm-ups: no fences
    assert names[6:11] == [FILL, DELIM, "prologue", "gemm", DELIM]  # flush, then the fenced call


def test_time_kernels_without_flush(monkeypatch):
    gpu = FakeGpu()
    _install(monkeypatch, gpu)
    t = time_kernels(lambda: gpu.launch("Memcpy DtoD (Device -> Device)", 350.0), None, warmup=1, iters=3)
    assert t.samples_us == [350.0] * 3


def test_time_kernels_when_the_profiler_records_nothing(monkeypatch):
    gpu = FakeGpu(record=False)  # e.g. no CUPTI: the profiler runs and sees no GPU activity
    _install(monkeypatch, gpu)
    with pytest.raises(KernelTimerError, match="recorded no CUDA kernel, copy or memset at all"):
        time_kernels(lambda: gpu.launch("gemm", 5.0), None, warmup=0, iters=2)


def test_time_kernels_needs_the_delimiter(monkeypatch):
    gpu = FakeGpu()
    del gpu.torch.cuda._sleep
    _install(monkeypatch, gpu)
    with pytest.raises(KernelTimerError, match="torch.cuda._sleep"):
        time_kernels(lambda: None, None, warmup=0, iters=2)


def test_device_events_keeps_only_this_gpus_work():
    prof = types.SimpleNamespace(
        events=lambda: [
            _Event("k", _Range(10.0, 12.5)),
            _Event("cudaLaunchKernel", _Range(9.0, 9.5), device_type=CPU),
            _Event("annotation", _Range(10.0, 20.0), is_user_annotation=True),
            _Event("other gpu", _Range(10.0, 11.0), device_index=1),
        ]
    )
    assert device_events(prof, 0) == [DeviceEvent("k", 10.0, 2.5)]
    assert len(device_events(prof)) == 2  # any device


# ---- choosing the timer -------------------------------------------------------------------------


def test_timer_names_and_functions():
    assert TIMERS == ("events", "kernel")
    assert timer_function("events") is time_gpu
    assert timer_function("kernel") is time_kernels
    assert check_timer("kernel") == "kernel"
    with pytest.raises(ValueError, match="unknown timer 'wall'; expected one of events, kernel"):
        timer_function("wall")


def test_ctx_times_with_its_timer(monkeypatch):
    from dgx.bench import timers
    from dgx.bench.peers import Ctx

    seen = []

    def fake(fn, flush, warmup, iters):
        seen.append((flush, warmup, iters))
        return Timing(1.0, 1.0, 1.0, [1.0])

    monkeypatch.setattr(timers, "time_kernels", fake)
    ctx = Ctx("flush", 5, 30, timer="kernel")
    ctx.time(lambda: None)
    ctx.time(lambda: None, warmup=1, iters=5)
    assert ctx.timer == "kernel" and seen == [("flush", 5, 30), ("flush", 1, 5)]
    assert Ctx(None).timer == "events"
    with pytest.raises(ValueError, match="unknown timer"):
        Ctx(None, timer="cupti")


def test_measure_notes_several_kernels_per_call():
    from dgx.bench.peers import Ctx, Peer, Prepared

    class One(Peer):
        name = "bf16"

        def select(self, problem, ctx):
            return Prepared(lambda: None, lambda: None, note="torch.matmul"), 0.0, "torch.matmul"

    class FakeCtx(Ctx):
        kernels: list = []

        def time(self, fn, warmup=None, iters=None):
            return Timing(5.0, 4.0, 6.0, [5.0], list(self.kernels))

    ctx = FakeCtx(None)
    assert One().measure(None, ctx).note == "torch.matmul"
    ctx.kernels = ["convert", "gemm"]
    r = One().measure(None, ctx)
    assert r.status == "ok" and r.us == 5.0
    assert r.note == "torch.matmul; kernel timer: 2 GPU activities a call, summed"
