"""dgx bench --timer through the CLI, main and run_suite (no GPU), and what the reports say: the timer, the
share of the HBM peak of memory-bound rows, DeepGEMM's kernel-only anchors under the kernel timer."""

import json
import types

import pytest

import dgx.bench as bench
from dgx.bench import EXIT_NO_GPU, EXIT_OK, EXIT_USAGE, render_markdown, render_table, summarize, write_json
from dgx.bench.hbm import HBM_PEAKS_GBPS, hbm_peak_gbps

from bench_echo import Echo


# ---- the option: CLI, main, run_suite -----------------------------------------------------------


def test_cli_timer_choices_are_the_bench_timers():
    from dgx import cli
    assert cli.BENCH_TIMERS == bench.TIMERS


@pytest.mark.parametrize("args, timer", [(["--timer", "kernel"], "kernel"), (["--timer", "events"], "events"), ([], "events")])
def test_cli_bench_passes_the_timer(monkeypatch, runner, args, timer):
    from dgx import cli
    got = {}

    def main(**kwargs):
        got.update(kwargs)
        return EXIT_OK

    monkeypatch.setattr(bench, "main", main)
    result = runner.invoke(cli.main, ["bench", "--suite", "dense", *args])
    assert result.exit_code == 0, result.output
    assert got["timer"] == timer and got["suite"] == "dense"


def test_cli_bench_rejects_a_bad_timer(monkeypatch, runner):
    from dgx import cli
    monkeypatch.setattr(bench, "main", lambda **k: pytest.fail("must not run"))
    result = runner.invoke(cli.main, ["bench", "--timer", "wall"])
    assert result.exit_code == 2
    assert "Invalid value for '--timer'" in result.output and "'wall' is not one of 'events', 'kernel'" in result.output


def test_main_rejects_a_bad_timer_before_anything_runs(monkeypatch):
    monkeypatch.setattr(bench, "run_suite", lambda *a, **k: pytest.fail("must not run"))
    echo = Echo()
    assert bench.main(timer="cupti", echo=echo) == EXIT_USAGE
    assert "dgx bench: unknown timer 'cupti'; expected one of events, kernel" in echo.text


def test_main_threads_the_timer_and_reports_it(monkeypatch, tmp_path):
    from test_bench_report import make_results

    got = {}

    def run_suite(suite, **kwargs):
        got.update(kwargs)
        res = make_results(1)
        res.settings["timer"] = kwargs["timer"]
        return res

    monkeypatch.setattr(bench, "gpu_problem", lambda: None)
    monkeypatch.setattr(bench, "unavailable_reason", lambda suite: None)
    monkeypatch.setattr(bench, "run_suite", run_suite)
    echo = Echo()
    path = tmp_path / "r.json"
    assert bench.main("dense", json_path=str(path), timer="kernel", echo=echo) == EXIT_OK
    assert got["timer"] == "kernel"
    assert "Timer: kernel — kernel-only GPU time per call" in echo.text
    data = json.loads(path.read_text())
    assert data["settings"]["timer"] == "kernel" and data["summary"]["timer"] == "kernel"


def test_main_timer_unavailable_exits_1(monkeypatch):
    def run_suite(*a, **k):
        raise bench.TimerUnavailable("--timer kernel cannot run here: torch.profiler recorded no CUDA kernel")

    monkeypatch.setattr(bench, "gpu_problem", lambda: None)
    monkeypatch.setattr(bench, "unavailable_reason", lambda suite: None)
    monkeypatch.setattr(bench, "run_suite", run_suite)
    echo = Echo()
    assert bench.main("dense", timer="kernel", echo=echo) == EXIT_NO_GPU
    assert "dgx bench: --timer kernel cannot run here" in echo.text


def test_run_suite_times_cases_and_ceilings_with_the_timer(monkeypatch):
    """run_suite without a GPU: every GPU-touching step replaced; what must reach them is the timer."""
    pytest.importorskip("torch")
    from dgx.bench import peers, runner, timing
    from dgx.bench.results import ImplResult
    from dgx.bench.suites import make_shape

    seen = {}

    class Impl:
        name = "dgx"

        def runs_on(self, suite):
            return True

        def measure(self, problem, ctx):
            seen["ctx_timer"] = ctx.timer
            return ImplResult("dgx", "ok", us=10.0)

    def ceilings(flush, warmup, iters, timer):
        seen["ceiling_timer"] = timer
        return {"fp8_tflops": 1000.0, "copy_gbps": 3000.0}, {"copy_gbps": f"copy ({timer} timer)"}

    monkeypatch.setattr(runner, "gpu_problem", lambda: None)
    monkeypatch.setattr(runner, "environment", lambda: {"device": "NVIDIA H100 80GB HBM3"})
    monkeypatch.setattr(timing, "L2Flusher", lambda: "flush")
    monkeypatch.setattr(peers, "make_impls", lambda with_peers, deep_gemm=None: [Impl()])
    monkeypatch.setattr(runner, "probe_timer", lambda ctx: seen.setdefault("probed", ctx.timer))
    monkeypatch.setattr(runner, "measure_ceilings", ceilings)
    monkeypatch.setattr(runner, "build_case", lambda shape, seed: types.SimpleNamespace(free=lambda: None))
    res = runner.run_suite(shapes=[make_shape("dense", 64, 7168, 16384)], peers=False, host=False, timer="kernel")
    assert seen == {"probed": "kernel", "ceiling_timer": "kernel", "ctx_timer": "kernel"}
    assert res.settings["timer"] == "kernel"
    assert any(n.startswith("µs: median of the timed calls (kernel timer: kernel-only") for n in res.notes)
    with pytest.raises(ValueError, match="unknown timer"):
        runner.run_suite(shapes=[make_shape("dense", 64, 7168, 16384)], timer="wall")


# ---- reports: the timer, the HBM peak -----------------------------------------------------------


def _results(device="NVIDIA H100 80GB HBM3", timer=None):
    from test_bench_report import make_results

    res = make_results(1)
    res.env["device"] = device
    if timer:
        res.settings["timer"] = timer
    return res


def test_hbm_peak_table():
    assert hbm_peak_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert hbm_peak_gbps("  nvidia  h100 80gb hbm3 ") == 3350.0  # case and spacing aside
    assert hbm_peak_gbps("NVIDIA H200") == 4800.0
    assert hbm_peak_gbps("NVIDIA H100 PCIe") == 2000.0  # not the SXM figure
    assert hbm_peak_gbps("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None  # a slice is not the whole card
    assert hbm_peak_gbps("Fake H100") is None and hbm_peak_gbps(None) is None
    assert all(v > 1000 for v in HBM_PEAKS_GBPS.values())


def test_hbm_share_of_memory_bound_rows(tmp_path):
    from test_bench_report import B

    s = summarize(_results())
    assert s.hbm_peak_gbps == 3350.0 and s.device == "NVIDIA H100 80GB HBM3"
    ca, cb = s.suite("dense").cases
    assert ca.bound == "compute" and ca.impls["dgx"].hbm_share is None
    assert cb.bound == "memory"
    assert cb.impls["dgx"].hbm_share == pytest.approx(B.bytes_moved / 80e-6 / 1e9 / 3350.0)
    assert cb.impls["cublaslt"].hbm_share == pytest.approx(B.bytes_moved / 120e-6 / 1e9 / 3350.0)
    # the share of the measured copy bandwidth stays where it was
    assert cb.impls["dgx"].fraction == pytest.approx(B.bytes_moved / 2000e9 / 80e-6)

    text = render_table(_results())
    row_b = next(l for l in text.splitlines() if l.startswith("64×7168×16384"))
    assert "of HBM peak" in text
    assert f"{100 * B.bytes_moved / 80e-6 / 1e9 / 3350.0:.0f}%" in row_b
    assert "HBM peak, datasheet (NVIDIA H100 80GB HBM3)  3350 GB/s (copy: 60%)" in text
    md = render_markdown(_results())
    assert "| of ceiling | of HBM peak |" in md
    assert "of HBM peak: GB/s over the 3350 GB/s datasheet HBM bandwidth of the NVIDIA H100 80GB HBM3" in md
    path = tmp_path / "r.json"
    write_json(_results(), str(path))
    data = json.loads(path.read_text())["summary"]
    assert data["hbm_peak"] == {"device": "NVIDIA H100 80GB HBM3", "gbps": 3350.0}
    dense = next(x for x in data["suites"] if x["suite"] == "dense")
    assert dense["cases"][1]["impls"]["dgx"]["hbm_share"] == pytest.approx(cb.impls["dgx"].hbm_share)
    assert dense["cases"][0]["impls"]["dgx"]["hbm_share"] is None


def test_unknown_device_shows_only_the_share_of_the_copy_bandwidth(tmp_path):
    res = _results(device="NVIDIA B200")
    s = summarize(res)
    assert s.hbm_peak_gbps is None
    assert all(i.hbm_share is None for c in s.suite("dense").cases for i in c.impls.values())
    text = render_table(res)
    assert "of HBM peak" not in text and "HBM peak, datasheet" not in text
    assert "No HBM peak is known for NVIDIA B200" in text
    md = render_markdown(res)
    assert "| of ceiling | DeepGEMM TF (H100, other run) |" in md
    path = tmp_path / "r.json"
    write_json(res, str(path))
    assert json.loads(path.read_text())["summary"]["hbm_peak"] == {"device": "NVIDIA B200", "gbps": None}


def test_reports_name_the_timer(tmp_path):
    old = _results()  # recorded before the option: CUDA events
    assert summarize(old).timer == "events"
    assert "Timer: events — CUDA events around each call (launch gaps included)." in render_table(old)
    assert "Method: events timer, CUDA events around each call" in render_markdown(old)

    new = _results(timer="kernel")
    text, md = render_table(new), render_markdown(new)
    assert "Timer: kernel — kernel-only GPU time per call (CUPTI through torch.profiler" in text
    assert "Ceilings (measured in this run, kernel timer;" in text
    assert "Method: kernel timer, kernel-only GPU time per call" in md
    assert "Measured in this run with the kernel timer" in md
    path = tmp_path / "r.json"
    write_json(new, str(path))
    data = json.loads(path.read_text())
    assert data["settings"]["timer"] == "kernel" and data["summary"]["timer"] == "kernel"
    assert bench.load_json(str(path)).settings["timer"] == "kernel"


def test_kernel_timer_compares_with_deepgemms_kernel_only_anchors():
    from test_bench_report import A, B

    from dgx.bench.suites import DENSE_KERNEL_ANCHORS_US, anchor_for

    assert DENSE_KERNEL_ANCHORS_US[(64, 7168, 16384)] == 52.1
    s = summarize(_results(timer="kernel"))
    ca, cb = s.suite("dense").cases
    assert ca.anchor is None  # docs/PEERS.md has no kernel-only time for 4096×4096×7168: no mixed clocks
    assert cb.anchor["us"] == 52.1 and cb.anchor["tflops"] == pytest.approx(B.flops / 52.1e-6 / 1e12)
    assert cb.vs_anchor == pytest.approx(52.1 / 80.0)
    assert s.suite("masked").cases[0].anchor is None
    for suite in ("wgrad", "k_grouped"):  # their figures were measured with CUDA events only
        assert s.suite(suite).cases[0].anchor is None and s.suite(suite).geomean_vs_anchor is None
    assert anchor_for(B)["us"] == 55.5 and anchor_for(A)["tflops"] == 1410.0  # events: the tables as they were
    text = render_table(_results(timer="kernel"))
    assert "DeepGEMM TF (H100, kernel-only, other run)" in text
    assert "its kernel-only times, on the clock of this run" in render_markdown(_results(timer="kernel"))
