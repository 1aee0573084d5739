"""tests/device/soak.py without a GPU: its mix covers every kind of kernel dgx has, its arguments are checked, and
its report says "ok" only for a clean run. (The run itself needs a GPU.)"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from pathlib import Path

import pytest

from dgx.kinds import KIND_NAMES, MQA_KIND_NAMES, VARIANT_KIND_NAMES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("soak", ROOT / "tests" / "device" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # its dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("soak", None)


def test_the_mix_covers_every_kind(soak):
    from dgx import families

    assert {m.family for m in soak.MAKERS} == set(families.kind_names())  # every kind of every registered family
    assert set(KIND_NAMES) | set(VARIANT_KIND_NAMES) | set(MQA_KIND_NAMES) <= set(families.kind_names())
    for m in soak.MAKERS:
        assert m.variants and callable(m.build) and callable(m.bad) and m.graphable, m
    shapes = [(m.family, m.shape) for m in soak.MAKERS]
    assert len(shapes) == len(set(shapes))


def test_dry_run_lists_the_mix(soak, capsys):
    assert soak.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for m in soak.MAKERS:
        assert m.family in out and m.shape in out
    assert f"{len(soak.MAKERS)} makers" in out


@pytest.mark.parametrize("args", [["--minutes", "0"], ["--threads", "0"], ["--bad-rate", "1.5"],
                                  ["--graph-rate", "0.6", "--reuse-rate", "0.6"]])
def test_bad_arguments(soak, args):
    with pytest.raises(SystemExit) as exc:
        soak.parse_args(args)
    assert exc.value.code == 2


def test_defaults_and_output(soak, monkeypatch, tmp_path):
    args = soak.parse_args([])
    assert args.minutes == 10 and args.threads >= 2
    monkeypatch.delenv("OUT", raising=False)
    assert soak.output_path(args) is None
    monkeypatch.setenv("OUT", str(tmp_path))
    assert soak.output_path(args) == str(tmp_path / "soak.json")
    assert soak.output_path(soak.parse_args(["--json", "x.json"])) == "x.json"


def clean_tally(soak):
    tally = soak.Tally()
    for m in soak.MAKERS:
        for mode in soak.MODES:
            tally.add(m.family, mode)
        tally.checks[m.family] += 1
        tally.worst[m.family] = 1e-4
        tally.expected_errors[m.family] += 1
    return tally


def samples(rss_end=1000.0, allocated_end=500.0):
    base = {"host_rss_mib": 1000.0, "gpu_allocated_mib": 500.0, "gpu_reserved_mib": 2000.0, "gpu_used_mib": 3000.0}
    series = [dict(base, seconds=30.0 * i) for i in range(8)]
    series.append(dict(base, seconds=240.0, host_rss_mib=rss_end, gpu_allocated_mib=allocated_end))
    return series


def test_report_of_a_clean_run(soak):
    args = argparse.Namespace(minutes=4.0, threads=4, seed=0)
    result = soak.report(clean_tally(soak), {"seconds": 1.0}, samples(), 0, args, 240.0)
    assert result["ok"] and result["errors"] == 0 and result["compiled_after_warmup"] == 0
    assert result["calls"] == len(soak.MAKERS) * len(soak.MODES)
    assert result["expected_errors"] == len(soak.MAKERS)
    assert result["by_family"]["dense"]["graph"] == 3 and result["by_family"]["dense"]["worst_error"] == 1e-4
    assert result["memory"]["start"]["host_rss_mib"] == 1000.0 and all(result["memory"]["flat"].values())


@pytest.mark.parametrize("defect", ["error", "check", "compiled", "rss", "device_memory", "family_not_run"])
def test_report_flags_what_went_wrong(soak, defect):
    args = argparse.Namespace(minutes=4.0, threads=4, seed=0)
    tally = clean_tally(soak)
    series, compiled = samples(), 0
    if defect == "error":
        tally.error("dense", "fresh", RuntimeError("CUDA error: an illegal memory access"), tally.errors)
    elif defect == "check":
        tally.error("dense", "graph", AssertionError("relative error 3e-2"), tally.check_failures)
    elif defect == "compiled":
        compiled = 1
    elif defect == "rss":
        series = samples(rss_end=1400.0)
    elif defect == "device_memory":
        series = samples(allocated_end=900.0)
    else:
        for mode in ("fresh", "reused"):
            del tally.calls[("k_grouped", mode)]
    result = soak.report(tally, {}, series, compiled, args, 240.0)
    assert not result["ok"]
    if defect in ("error", "check"):
        samples_key = "error_samples" if defect == "error" else "check_failure_samples"
        assert result[samples_key] and "dense" in result[samples_key][0]


def test_a_bad_input_that_raises_a_typed_error_counts_as_expected(soak):
    import dgx

    def refused():
        raise ValueError("n: expected a multiple of 8")

    def accepted():
        return None

    tally = soak.Tally()
    for bad in (refused, accepted, lambda: (_ for _ in ()).throw(dgx.DgxError("x")), lambda: 1 / 0):
        maker = soak.Maker("dense", "test", (1,), lambda *a: None, bad)
        soak.run_one(maker, "bad", None, None, random.Random(0), tally, False)
    assert tally.expected_errors["dense"] == 2
    assert len(tally.errors) == 2 and "accepted" in tally.errors[0] and "ZeroDivisionError" in tally.errors[1]
