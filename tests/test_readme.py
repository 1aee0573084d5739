"""The README's tables of dgx against its peers are the committed runs' figures, and every suite has its plot there.

A row that links a run under docs/bench/ must show that run's figures as `dgx bench` summarises them (the
geometric means, rounded as printed); a suite run under docs/bench/ must have its row and its plot.
"""

from __future__ import annotations

import re
from pathlib import Path

from dgx.bench import load_json, summarize
from dgx.bench.report import plot_paths

ROOT = Path(__file__).resolve().parents[1]
RUN_LINK = re.compile(r"\]\((docs/bench/[\w.-]+)\.md\)")


def readme_tables() -> list[tuple[list[str], list[list[str]]]]:
    """(header cells, rows of cells) of every table in the README."""
    tables, header, rows = [], None, []
    for line in (ROOT / "README.md").read_text().splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(line) <= set("|-: "):
                rows.append(cells)
        elif header is not None:
            tables.append((header, rows))
            header, rows = None, []
    return tables


def expected(header: str, suite, timer: str) -> str | None:
    """What the README must print in the column ``header`` for a suite summary (None: a column not checked)."""
    speedup = suite.geomean_speedup.get
    # the longer prefixes first: "× DeepGEMM 2.6.1 unfused" before "× DeepGEMM 2.6.1" before "× DeepGEMM"
    ratio = {"× DeepGEMM 2.6.1 unfused": speedup("deepgemm_unfused"), "× DeepGEMM 2.6.1": speedup("deepgemm"),
             "× DeepGEMM": suite.geomean_vs_anchor, "× dgx unfused": speedup("dgx_unfused"),
             "× cuBLASLt": speedup("cublaslt"), "× Triton": speedup("triton"), "× BF16": speedup("bf16"),
             "× torch BF16": speedup("torch_bf16"), "× torch grouped_mm": speedup("torch_grouped"),
             "× torch einsum": speedup("torch_einsum"), "× torch FP32": speedup("torch_fp32"),
             "× torch": speedup("torch"), "× cuBLAS loop": speedup("cublas_loop"),
             "× per-head GEMM loop": speedup("gemm_loop"), "× fp8_gemm_nt + copy": speedup("fp8_gemm_copy"),
             "× fp8_gemm_nt": speedup("fp8_gemm_nt")}
    for prefix, value in ratio.items():
        if header.startswith(prefix):
            return "—" if value is None else f"{value:.2f}"
    if header == "dgx":
        if suite.suite in ("paged_mqa", "hc_prenorm"):  # memory-bound at every case: bandwidth says more
            return f"{suite.geomean_gbps['dgx']:.0f} GB/s"
        return f"{suite.geomean_tflops['dgx']:.0f} TFLOPS"
    if header in ("shapes", "cases"):
        return str(len(suite.cases))
    if header == "reaches":
        what = "of the HBM peak" if suite.suite == "paged_mqa" else "of the goal"
        return f"{100 * suite.geomean_fraction:.0f}% {what}"
    return None


def test_readme_tables_are_the_committed_runs():
    checked = set()
    for header, rows in readme_tables():
        for row in rows:
            link = next((m.group(1) for cell in row for m in [RUN_LINK.search(cell)] if m), None)
            if link is None:
                continue
            results = load_json(str(ROOT / f"{link}.json"))
            summary = summarize(results)
            (suite,) = summary.suites
            for name, cell in zip(header, row):
                want = expected(name, suite, summary.timer)
                if want is not None:
                    assert cell == want, f"README row {row[0]!r}, column {name!r}: {cell} (the run says {want})"
            checked.add(link)
    runs = {f"docs/bench/{p.stem}" for p in (ROOT / "docs" / "bench").glob("*.json")}
    assert runs == checked, f"runs under docs/bench without a README row: {sorted(runs - checked)}"


def test_every_suite_has_its_plot_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for run in (ROOT / "docs" / "bench").glob("*.json"):
        if run.stem.endswith("-kernel"):
            continue  # the kernel-only runs of a suite: its events run's plot stands for it
        results = load_json(str(run))
        for path in plot_paths(str(run.with_suffix(".png")), [s.suite for s in summarize(results).suites]).values():
            rel = Path(path).relative_to(ROOT).as_posix()
            assert f"]({rel})" in readme, f"the README does not show {rel}"


def test_readme_leads_with_what_a_reader_needs():
    readme = (ROOT / "README.md").read_text()
    order = ["## The two commands", "## A small example", "## dgx against its peers", "### Other families",
             "## Documentation"]
    positions = [readme.index(heading) for heading in order]
    assert positions == sorted(positions)
    assert len(readme) < 20_000, "the long prose belongs in docs/"
