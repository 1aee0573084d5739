"""One plot per suite: `dgx bench --plot` and `python -m dgx.bench.replot` (which redraws the committed runs under
docs/bench from their JSON with the same code). No GPU and no torch; matplotlib for the drawing."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from dgx.bench import load_json, render_markdown, summarize
from dgx.bench import replot as replot_mod
from dgx.bench.report import plot_paths, write_plots
from test_bench_report import make_results

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "bench"
PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG, path
    return struct.unpack(">II", data[16:24])


def test_plot_paths():
    assert plot_paths("out/run.png", ["dense"]) == {"dense": "out/run.png"}
    assert plot_paths("out/run.png", ["dense", "mqa"]) == {"dense": "out/run-dense.png", "mqa": "out/run-mqa.png"}
    assert plot_paths("run", ["a", "b"])["b"] == "run-b.png"


def test_write_plots_draws_every_suite_alone(tmp_path):
    pytest.importorskip("matplotlib")
    results = make_results()
    suites = [s.suite for s in summarize(results).suites]
    assert len(suites) > 1
    written = write_plots(results, str(tmp_path / "run.png"))
    assert written == [str(tmp_path / f"run-{s}.png") for s in suites]
    for path in written:
        width, height = png_size(Path(path))
        assert width > 800 and 300 < height < 900  # one panel each, not a stack of every suite


def committed_runs() -> list[Path]:
    return sorted(BENCH.glob("*.json"))


def test_every_committed_run_has_its_plot_and_its_table():
    """Each recorded run under docs/bench has a PNG per suite and a Markdown table, both drawn from its JSON by
    the current code (the Markdown byte for byte; the PNG's pixels depend on the matplotlib version)."""
    assert committed_runs()
    for run in committed_runs():
        results = load_json(str(run))
        stem = str(run)[: -len(".json")]
        for path in plot_paths(stem + ".png", [s.suite for s in summarize(results).suites]).values():
            png_size(Path(path))
        assert Path(stem + ".md").read_text() == render_markdown(results).rstrip("\n") + "\n", run.name


def test_replot_command(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = committed_runs()[0]
    shutil.copy(run, tmp_path / run.name)
    assert replot_mod.main([str(tmp_path), "--markdown"]) == 0
    out = capsys.readouterr().out
    png, md = tmp_path / (run.stem + ".png"), tmp_path / (run.stem + ".md")
    assert f"wrote {png}" in out and f"wrote {md}" in out
    png_size(png)
    assert md.read_text() == (BENCH / (run.stem + ".md")).read_text()


@pytest.mark.parametrize("arg", ["missing.json", "notes.txt", "empty-folder"])
def test_replot_refuses_what_is_not_a_run(tmp_path, capsys, monkeypatch, arg):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty-folder").mkdir()
    assert replot_mod.main([arg]) == 1
    err = capsys.readouterr().err
    assert err.startswith("replot: ") and arg in err and len(err.strip().splitlines()) == 1


def test_replot_names_a_broken_record(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a run"}')
    assert replot_mod.main([str(bad)]) == 1
    assert "bad.json: not a recorded dgx bench run" in capsys.readouterr().err
