"""dgx bench: derived numbers, terminal table, JSON, Markdown and PNG on recorded (synthetic) results.

No GPU and no torch needed; the plot test needs matplotlib.
"""

import json
import math
import struct

import pytest

from dgx.bench import load_json, render_markdown, render_table, summarize, write_json, write_markdown
from dgx.bench.results import (
    BenchResults,
    CaseResult,
    HostCost,
    ImplResult,
    RepeatResult,
    geomean,
)
from dgx.bench.suites import make_shape

CEIL = {"fp8_tflops": 1000.0, "copy_gbps": 2000.0, "bf16_tflops": 700.0}

# shape A: 4096×4096×7168, compute-bound (anchor 1410 TFLOPS)
A = make_shape("dense", 4096, 4096, 7168)
# shape B: 64×7168×16384, memory-bound (anchor 271 TFLOPS)
B = make_shape("dense", 64, 7168, 16384)
# a masked shape (anchor 627 TFLOPS), a wgrad shape (anchor 831 TFLOPS) and a k_grouped one (anchor 751 TFLOPS)
MK = make_shape("masked", 256, 7168, 2048, groups=4, max_m=4096)
W = make_shape("wgrad", 7168, 2112, 4096)
KG = make_shape("k_grouped", 2048, 7168, 4096, groups=8)

# per repeat: shape -> impl -> µs
TIMES = [
    {
        A: {"dgx": 160.0, "cublaslt": 200.0, "triton": 300.0, "bf16": 280.0},
        B: {"dgx": 80.0, "cublaslt": 120.0, "triton": 140.0, "bf16": 130.0},
        MK: {"dgx": 40.0, "triton": 80.0, "bf16": 70.0},
        W: {"dgx": 100.0, "cublaslt": 150.0, "triton": 250.0, "bf16": 160.0},
        KG: {"dgx": 1200.0, "cublaslt": 1400.0, "bf16": 2000.0},
    },
    {
        A: {"dgx": 170.0, "cublaslt": 200.0, "triton": 300.0, "bf16": 280.0},
        B: {"dgx": 80.0, "cublaslt": 110.0, "triton": 140.0, "bf16": 130.0},
        MK: {"dgx": 40.0, "triton": 80.0, "bf16": 70.0},
        W: {"dgx": 110.0, "cublaslt": 150.0, "triton": 250.0, "bf16": 160.0},
        KG: {"dgx": 1300.0, "cublaslt": 1400.0, "bf16": 2000.0},
    },
]


def make_results(repeats: int = 2, times: list[dict] | None = None) -> BenchResults:
    res = BenchResults(
        env={"device": "Fake H100", "driver": "580.0", "torch": "2.11", "dgx": "0.1.0", "date": "2026-11-22T00:00:00+00:00"},
        settings={"suite": "all", "repeat": repeats, "warmup": 5, "iters": 30, "diff_tolerance": 1e-3},
        notes=["synthetic"],
    )
    for r in range(repeats):
        rr = RepeatResult(ceilings=dict(CEIL))
        for shape, impls in (times or TIMES)[r].items():
            case = CaseResult(shape)
            for name, us in impls.items():
                case.impls[name] = ImplResult(name, "ok", us=us, us_min=us * 0.98, us_max=us * 1.05, diff=1e-5, note=f"{name} note")
            if shape is B:
                case.impls["triton"] = ImplResult("triton", "failed", "calc_diff 0.5 >= 0.001", diff=0.5)
            if shape is MK:
                case.impls["cublaslt"] = ImplResult("cublaslt", "unavailable", "CUBLAS_STATUS_NOT_SUPPORTED")
            case.impls["fp8_tensor"] = ImplResult("fp8_tensor", "unavailable", "no per-tensor API here")
            rr.cases.append(case)
        rr.host = [
            HostCost("dgx", "ok", cpu_us=8.0 + r, plain_us=15.0, wall_us=15.2, calls=1000, shape="64×2112×7168", held=True),
            HostCost("cublaslt", "ok", cpu_us=30.0, plain_us=30.0, wall_us=30.1, calls=1000, shape="64×2112×7168", held=True, saturated=True),
            HostCost("triton", "unavailable", "triton missing", calls=1000, shape="64×2112×7168"),
        ]
        res.repeats.append(rr)
    return res


def _tf(shape, us):
    return shape.flops / (us * 1e-6) / 1e12


def test_case_numbers():
    s = summarize(make_results())
    dense = s.suite("dense")
    ca, cb = dense.cases
    # dgx µs is the median over repeats of the per-repeat medians
    assert ca.impls["dgx"].us == pytest.approx(165.0)
    assert ca.impls["dgx"].us_spread == (160.0, 170.0)
    assert ca.impls["dgx"].us_best == pytest.approx(160.0 * 0.98)
    assert ca.impls["dgx"].tflops == pytest.approx(_tf(A, 165.0))
    assert ca.impls["dgx"].gbps == pytest.approx(A.bytes_moved / 165e-6 / 1e9)
    # A is compute-bound: floor = FLOPs / 1000 TFLOPS
    assert ca.bound == "compute"
    assert ca.impls["dgx"].fraction == pytest.approx(A.flops / 1000e12 / 165e-6)
    assert ca.speedups["cublaslt"] == pytest.approx(200.0 / 165.0)
    assert ca.vs_anchor == pytest.approx(_tf(A, 165.0) / 1410.0)
    # B is memory-bound: floor = bytes / 2000 GB/s
    assert cb.bound == "memory"
    assert cb.impls["dgx"].fraction == pytest.approx(B.bytes_moved / 2000e9 / 80e-6)
    assert cb.speedups["cublaslt"] == pytest.approx(115.0 / 80.0)
    assert cb.speedups["triton"] is None  # failed: no speedup
    assert cb.impls["triton"].status == "failed" and cb.impls["triton"].diff == 0.5
    assert cb.roofline_tflops == pytest.approx(B.flops / (B.bytes_moved / 2000e9) / 1e12)


def test_suite_geomeans_and_spread():
    s = summarize(make_results())
    dense = s.suite("dense")
    assert dense.geomean_speedup["cublaslt"] == pytest.approx(math.sqrt((200 / 165) * (115 / 80)))
    assert dense.geomean_speedup["triton"] == pytest.approx(300 / 165)  # only where both ran
    assert dense.geomean_tflops["dgx"] == pytest.approx(math.sqrt(_tf(A, 165) * _tf(B, 80)))
    assert dense.geomean_vs_anchor == pytest.approx(math.sqrt((_tf(A, 165) / 1410) * (_tf(B, 80) / 271)))
    frac = math.sqrt((A.flops / 1e15 / 165e-6) * (B.bytes_moved / 2e12 / 80e-6))
    assert dense.geomean_fraction == pytest.approx(frac)
    # spread over repeats: each repeat's own geomean
    r1 = math.sqrt((200 / 160) * (120 / 80))
    r2 = math.sqrt((200 / 170) * (110 / 80))
    sp = dense.spread_speedup["cublaslt"]
    assert (sp.min, sp.max) == (pytest.approx(min(r1, r2)), pytest.approx(max(r1, r2)))
    assert sp.median == pytest.approx((r1 + r2) / 2)
    masked = s.suite("masked")
    assert masked.geomean_speedup["triton"] == pytest.approx(2.0)
    assert masked.geomean_speedup["cublaslt"] is None
    assert masked.cases[0].anchor is not None
    wgrad = s.suite("wgrad")
    assert wgrad.cases[0].anchor == {"tflops": 831.0, "us": 149.0}
    assert wgrad.geomean_vs_anchor == pytest.approx(_tf(W, 105) / 831)
    sp = wgrad.spread_vs_anchor
    assert (sp.min, sp.max) == (pytest.approx(_tf(W, 110) / 831), pytest.approx(_tf(W, 100) / 831))
    assert wgrad.geomean_speedup["cublaslt"] == pytest.approx(150 / 105)
    kg = s.suite("k_grouped")
    assert kg.cases[0].anchor == {"tflops": 751.0, "us": 1281.0}
    assert kg.cases[0].vs_anchor == pytest.approx(_tf(KG, 1250) / 751)  # TFLOPS over TFLOPS, not µs over µs
    assert kg.geomean_vs_anchor == pytest.approx(_tf(KG, 1250) / 751)
    # host: median over repeats
    host = {h["name"]: h for h in s.host}
    assert host["dgx"]["cpu_us"] == pytest.approx(8.5)
    assert host["triton"]["status"] == "unavailable"


def test_geomean_ignores_missing():
    assert geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert geomean([]) is None


def test_terminal_table():
    res = make_results()
    text = render_table(res)
    assert "Fake H100" in text and "580.0" in text
    lines = text.splitlines()
    row_a = next(l for l in lines if l.startswith("4096×4096×7168"))
    assert "165" in row_a  # dgx µs
    assert f"{_tf(A, 165):.0f}" in row_a
    assert f"({200 / 165:.2f}×)" in row_a  # speedup over cuBLASLt
    assert f"{_tf(A, 165) / 1410:.2f}×" in row_a  # vs DeepGEMM anchor
    assert "1410" in row_a
    row_b = next(l for l in lines if l.startswith("64×7168×16384"))
    assert "FAILED" in row_b and "memory" in row_b
    gm = next(l for l in lines if l.startswith("geomean"))
    assert f"({math.sqrt((200 / 165) * (115 / 80)):.2f}×)" in gm
    assert "over 2 repeats (min / median / max)" in text
    assert "Triton blockwise failed on 64×7168×16384 (calc_diff 0.5)" in text
    assert "cuBLASLt blockwise unavailable on 4g·256×7168×2048: CUBLAS_STATUS_NOT_SUPPORTED" in text
    assert "Host cost per call" in text and "launch queue may have filled" in text
    assert "8.5" in text


def test_json_round_trip(tmp_path):
    res = make_results()
    path = tmp_path / "out" / "bench.json"
    write_json(res, str(path))
    data = json.loads(path.read_text())
    assert data["schema"] == "dgx-bench/1"
    assert data["env"]["device"] == "Fake H100"
    dense = next(s for s in data["summary"]["suites"] if s["suite"] == "dense")
    assert dense["geomean_speedup_over"]["cublaslt"] == pytest.approx(math.sqrt((200 / 165) * (115 / 80)))
    case = dense["cases"][0]
    assert case["label"] == "4096×4096×7168"
    assert case["impls"]["dgx"]["us"] == pytest.approx(165.0)
    assert case["impls"]["dgx"]["tflops"] == pytest.approx(_tf(A, 165))
    assert case["speedup_over"]["cublaslt"] == pytest.approx(200 / 165)
    assert case["anchor_deepgemm_h100"]["tflops"] == 1410.0
    assert data["summary"]["ceilings"]["fp8_tflops"] == 1000.0
    masked = next(s for s in data["summary"]["suites"] if s["suite"] == "masked")
    assert masked["cases"][0]["shape"]["group_ms"] == list(MK.group_ms)
    for name, shape, anchor, us in (("wgrad", W, {"tflops": 831.0, "us": 149.0}, 105),
                                    ("k_grouped", KG, {"tflops": 751.0, "us": 1281.0}, 1250)):
        suite = next(s for s in data["summary"]["suites"] if s["suite"] == name)
        assert suite["cases"][0]["anchor_deepgemm_h100"] == anchor
        ratio = _tf(shape, us) / anchor["tflops"]
        assert suite["cases"][0]["vs_deepgemm_anchor"] == pytest.approx(ratio)
        assert suite["geomean_vs_deepgemm_anchor"] == pytest.approx(ratio)
    # recorded results read back render the same reports
    back = load_json(str(path))
    assert render_markdown(back) == render_markdown(res)
    assert render_table(back) == render_table(res)


def test_json_non_finite_diff_is_still_valid_json(tmp_path):
    res = make_results(1)
    res.repeats[0].cases[0].impls["triton"] = ImplResult("triton", "failed", "non-finite output", diff=float("inf"))
    path = tmp_path / "b.json"
    write_json(res, str(path))
    json.loads(path.read_text())  # strict parsers accept it


def test_load_json_rejects_other_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="dgx-bench/1"):
        load_json(str(p))


def test_markdown(tmp_path):
    res = make_results()
    path = tmp_path / "bench.md"
    write_markdown(res, str(path))
    md = path.read_text()
    assert md.startswith("# dgx bench: Fake H100, 2026-11-22")
    assert "## Dense GEMM" in md and "## M-grouped masked" in md and "## Weight gradient" in md
    assert "| 4096×4096×7168 |" in md
    assert f"**{math.sqrt((_tf(A, 165) / 1410) * (_tf(B, 80) / 271)):.2f}×**" in md
    assert "| **geomean** |" in md
    assert "Group sizes: 4g·256×7168×2048: " + ",".join(str(x) for x in MK.group_ms) in md
    assert "## Host cost per call" in md
    # every table row has the header's column count
    for block in md.split("\n\n"):
        rows = [l for l in block.splitlines() if l.startswith("|")]
        if rows:
            cells = {r.count("|") - r.count("\\|") for r in rows}
            assert len(cells) == 1, block


# ---- the weight-gradient suites against DeepGEMM's figures ---------------------------------------

W_NO_ANCHOR = make_shape("wgrad", 7168, 2112, 2048)  # docs/PEERS.md has no K = 2048 weight gradient
W8 = make_shape("wgrad", 16384, 7168, 8192)  # anchor 921 TFLOPS
KG4 = make_shape("k_grouped", 7168, 4096, 8192, groups=4)  # anchor 923 TFLOPS
WG_TIMES = [
    {
        W: {"dgx": 160.0, "cublaslt": 170.0},
        W_NO_ANCHOR: {"dgx": 90.0, "cublaslt": 95.0},
        W8: {"dgx": 2200.0, "cublaslt": 2400.0},
        KG: {"dgx": 1400.0, "cublaslt": 1500.0},
        KG4: {"dgx": 2000.0, "cublaslt": 2300.0},
    }
]
W_RATIOS = [_tf(W, 160) / 831, _tf(W8, 2200) / 921]
KG_RATIOS = [_tf(KG, 1400) / 751, _tf(KG4, 2000) / 923]


def _md_section(md: str, title: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the rows (by first cell) of the table under the Markdown heading starting with ``title``."""
    body = md.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return cells[0], {row[0]: row for row in cells[1:]}


def _text_column(text: str, title: str, column: str) -> dict[str, str]:
    """One column of the terminal table titled ``title``, by row label: its cells are right-aligned under the
    header, so a one-word cell is the last word before the header's right edge."""
    body = text.split(f"\n{title}", 1)[1].split("\n\n", 1)[0]
    header, *lines = body.splitlines()[1:]
    end = header.index(column) + len(column)
    rows = [line for line in lines if line.strip() and not line.startswith("-") and not line.startswith("  ")]
    return {line.split()[0]: line[:end].split()[-1] for line in rows}


@pytest.mark.parametrize(
    "title, shapes, ratios",
    [
        ("Weight gradient (", [W, W8], W_RATIOS),
        ("K-grouped weight gradient", [KG, KG4], KG_RATIOS),
    ],
)
def test_weight_gradient_tables_compare_with_deepgemm(title, shapes, ratios):
    res = make_results(1, WG_TIMES)
    gm = math.sqrt(ratios[0] * ratios[1])
    header, rows = _md_section(render_markdown(res), title)
    at = header.index("vs DeepGEMM (other run)")
    assert header[at - 1] == "DeepGEMM TF (H100, other run)"
    assert "vs DeepGEMM" not in header  # no DeepGEMM measured in this run: no same-run column
    for shape, ratio in zip(shapes, ratios):
        anchor = {W: "831", W8: "921", KG: "751", KG4: "923"}[shape]
        assert rows[shape.label][at - 1 : at + 1] == [anchor, f"{ratio:.2f}×"]
    assert rows["**geomean**"][at] == f"**{gm:.2f}×**"
    if title.startswith("Weight"):  # a shape without a figure: no ratio, and none in the geomean
        assert rows[W_NO_ANCHOR.label][at - 1 : at + 1] == ["-", "-"]
    text = render_table(res)
    anchors = _text_column(text, title, "DeepGEMM TF (H100, other run)")
    vs = _text_column(text, title, "vs DeepGEMM (other run)")
    for shape, ratio in zip(shapes, ratios):
        assert (anchors[shape.label], vs[shape.label]) == (rows[shape.label][at - 1], f"{ratio:.2f}×")
    assert vs["geomean"] == f"{gm:.2f}×"
    if title.startswith("Weight"):
        assert (anchors[W_NO_ANCHOR.label], vs[W_NO_ANCHOR.label]) == ("-", "-")


def test_weight_gradient_geomeans_and_spread_line():
    s = summarize(make_results(1, WG_TIMES))
    assert s.suite("wgrad").geomean_vs_anchor == pytest.approx(math.sqrt(W_RATIOS[0] * W_RATIOS[1]))
    assert s.suite("k_grouped").geomean_vs_anchor == pytest.approx(math.sqrt(KG_RATIOS[0] * KG_RATIOS[1]))
    no_anchor = next(c for c in s.suite("wgrad").cases if c.shape == W_NO_ANCHOR)
    assert no_anchor.anchor is None and no_anchor.vs_anchor is None
    twice = make_results(2, WG_TIMES * 2)
    text = render_table(twice)
    wgrad_part = text.split("\nWeight gradient (", 1)[1].split("\n\n", 1)[0]
    gm = math.sqrt(W_RATIOS[0] * W_RATIOS[1])
    assert f"vs DeepGEMM (other run) {gm:.2f} / {gm:.2f} / {gm:.2f}×" in wgrad_part


def _pattern_results() -> BenchResults:
    res = make_results(1)
    rr = res.repeats[0]
    rr.host = [
        HostCost("dgx", "ok", cpu_us=6.0, plain_us=14.0, calls=500, held=True, pattern="dense/same",
                 label="same tensors every call", goal_us=8.0),
        HostCost("dgx", "ok", cpu_us=7.5, plain_us=15.0, calls=500, held=True, pattern="dense/engine",
                 label="M changes, fresh slices", prep_us=4.2, goal_us=10.0),
        HostCost("dgx", "failed", "RuntimeError: boom", calls=500, pattern="masked/same", label="masked, same"),
        HostCost("cublaslt", "ok", cpu_us=30.0, plain_us=30.0, calls=500, held=True, pattern="dense/same",
                 label="same tensors every call"),
        HostCost("cublaslt", "ok", cpu_us=31.0, plain_us=31.0, calls=500, held=True, pattern="dense/m_changes",
                 label="M changes every call"),
    ]
    return res


def test_host_patterns_in_every_report(tmp_path):
    res = _pattern_results()
    s = summarize(res)
    assert [(h["pattern"], h["name"]) for h in s.host] == [
        ("dense/same", "dgx"), ("dense/engine", "dgx"), ("masked/same", "dgx"), ("dense/same", "cublaslt"),
        ("dense/m_changes", "cublaslt")]
    engine = s.host[1]
    assert (engine["cpu_us"], engine["prep_us"], engine["goal_us"], engine["label"]) == (7.5, 4.2, 10.0,
                                                                                      "M changes, fresh slices")
    text = render_table(res)
    row = next(line for line in text.splitlines() if line.startswith("dense/engine"))
    assert "dgx" in row and "7.5" in row and "10" in row and "(4.2 µs) taken off" in row
    assert any(line.startswith("masked/same") and "failed" in line and "boom" in line for line in text.splitlines())
    cublas = next(line for line in text.splitlines() if line.startswith("dense/m_changes"))
    assert "31.0" in cublas
    assert "· dense/engine: M changes, fresh slices" in text
    md = render_markdown(res)
    assert "| dense/engine | dgx | 7.5 | 15.0 | 10 |" in md and "- dense/engine: M changes, fresh slices" in md
    path = tmp_path / "b.json"
    write_json(res, str(path))
    assert render_table(load_json(str(path))) == text


def test_host_records_from_before_patterns_read_as_the_same_tensors(tmp_path):
    res = make_results(1)
    path = tmp_path / "old.json"
    write_json(res, str(path))
    data = json.loads(path.read_text())
    for h in data["repeats"][0]["host"]:
        for key in ("pattern", "label", "prep_us", "goal_us"):
            h.pop(key)
    path.write_text(json.dumps(data))
    back = load_json(str(path))
    assert {h.pattern for h in back.repeats[0].host} == {"dense/same"}
    assert "dense/same" in render_table(back)


def test_single_repeat_has_no_spread_column():
    text = render_table(make_results(1))
    assert "spread" not in text.split("Dense GEMM")[1].splitlines()[1]
    assert "over 1 repeats" not in text


def test_plot_png(tmp_path):
    pytest.importorskip("matplotlib")
    from dgx.bench import write_plot

    path = tmp_path / "plots" / "bench.png"
    write_plot(make_results(), str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])  # IHDR
    assert width > 800 and height > 800


def test_plot_without_matplotlib(monkeypatch, tmp_path):
    import sys

    from dgx.bench import PlotUnavailable, write_plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match="pip install matplotlib"):
        write_plot(make_results(), str(tmp_path / "x.png"))
