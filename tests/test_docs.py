"""The repository's documents point at things that exist, and say what the code does.

- Every cited Markdown file and every docs/ path, in any file of the repository, names a file the repository holds
  (a Markdown link is resolved from its file's folder; a path given "at commit <sha>" must exist at that commit).
- docs/PEERS.md holds the figures `dgx bench` compares against, as dgx/bench/suites.py has them.
- The drift the issue listed stays fixed: help(dgx) says the SASS pass is off by default, DEPLOYMENT.md's kernel
  count is the deepseek-v3 plan's, the README's exit statuses are the CLI's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".md", ".py", ".json", ".cuh", ".toml", ".txt", ".cfg", ".sh"}
SKIP_DIRS = {".git", ".venv", ".venv-test", "build", "dist", "__pycache__", ".pytest_cache", ".whl", ".dev"}
# A Markdown name or path (a {a,b} brace list allowed, as the performance log writes several runs), or a docs/ path.
MD_CITE = re.compile(r"(?<![\w/.-])((?:\.\.?/)*[\w./-]*?(?:\{[\w,.-]*\}[\w./-]*?)*[\w-]+(?:\{[\w,.-]*\})?\.md)\b")
DOCS_CITE = re.compile(r"(?<![\w/.-])(docs/[\w./{},-]*[\w/}])")
AT_COMMIT = re.compile(r"commit ([0-9a-f]{7,40})\b")
PLACEHOLDERS = {"FILE.md", "NAME.md", "RUN.md"}  # names standing for the user's files


def repository_files() -> list[Path]:
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / p for p in out.decode().split("\0") if p]
        untracked = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"], cwd=ROOT,
                                   capture_output=True, check=True).stdout
        files += [ROOT / p for p in untracked.decode().split("\0") if p]
        return sorted(p for p in files if p.is_file())
    found = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [Path(folder) / n for n in names]
    return sorted(found)


def text_files() -> list[Path]:
    return [p for p in repository_files() if p.suffix in TEXT_SUFFIXES or p.relative_to(ROOT).as_posix() == ".ci/run"]


def expand(path: str) -> list[str]:
    """``a{x,y}b`` -> ``axb``, ``ayb`` (one level, as many lists as there are); a brace group without a comma is
    code (an f-string's field), not a list: no citation."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    if "," not in match.group(1):
        return []
    return [q for alt in match.group(1).split(",") for q in expand(path[: match.start()] + alt + path[match.end():])]


def exists_at(commit: str, path: str) -> bool | None:
    """Whether ``path`` exists at ``commit`` (None where git cannot say: no git, a shallow clone)."""
    if not (shutil.which("git") and (ROOT / ".git").exists()):
        return None
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
    if known.returncode:
        return None
    return subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=ROOT, capture_output=True).returncode == 0


def citations(path: Path) -> list[tuple[int, str, str | None]]:
    """(line number, cited path, the commit it is cited at or None) for every citation in ``path``."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        commit = AT_COMMIT.search(line)
        for regex in (MD_CITE, DOCS_CITE):
            for match in regex.finditer(line):
                for cited in expand(match.group(1)):
                    out.append((number, cited, commit.group(1) if commit else None))
    return out


def resolves(source: Path, cited: str, names: set[str]) -> bool:
    cited = cited.rstrip(".")
    if "/" not in cited:
        # a bare name: "PERFLOG.md" in prose names a document somewhere in the tree; lower-case ones in code are
        # the names of files a test or a command writes
        return cited in names or not cited[0].isupper() or cited in PLACEHOLDERS
    for base in (ROOT, source.parent):
        if (base / cited).exists():
            return True
    return False


def test_every_cited_document_exists():
    files = [p for p in text_files() if p != Path(__file__).resolve()]  # this file cites missing ones on purpose
    names = {p.name for p in repository_files()}
    missing = []
    for path in files:
        for number, cited, commit in citations(path):
            if commit is not None and "/" in cited:
                if exists_at(commit, cited) is False:
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {cited} (not at commit {commit})")
                continue
            if not resolves(path, cited, names):
                missing.append(f"{path.relative_to(ROOT)}:{number}: {cited}")
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_the_scan_finds_what_it_should(tmp_path):
    """The scanner itself: it sees links, bare names, brace lists and docs/ paths, and resolves them right."""
    doc = tmp_path / "x.md"
    doc.write_text("see [m](docs/METHOD.md), ANCHORS.md and docs/bench/2026-11-24-h100-dense{,-kernel}.md; "
                   "DESIGN.md's flush; docs/bench/\n")
    cited = [c for _, c, _ in citations(doc)]
    assert {"docs/METHOD.md", "ANCHORS.md", "docs/bench/2026-11-24-h100-dense.md",
            "docs/bench/2026-11-24-h100-dense-kernel.md", "DESIGN.md", "docs/bench/"} <= set(cited)
    names = {p.name for p in repository_files()}
    assert not resolves(ROOT / "README.md", "ANCHORS.md", names)
    assert not resolves(ROOT / "README.md", "DESIGN.md", names)
    assert not resolves(ROOT / "docs" / "DEPLOYMENT.md", "docs/bench/2026-11-22-h100.md", names)
    assert resolves(ROOT / "docs" / "DEPLOYMENT.md", "PEERS.md", names)
    assert resolves(ROOT / "dgx" / "presets" / "README.md", "../../docs/PEERS.md", names)


# --- docs/PEERS.md and the figures dgx bench compares against -----------------------------------------------------


def peers_tables() -> dict[str, list[list[str]]]:
    """Each Markdown table of docs/PEERS.md under the heading it follows: heading -> rows of cells."""
    tables: dict[str, list[list[str]]] = {}
    heading = ""
    for line in (ROOT / "docs" / "PEERS.md").read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("|") and not set(line) <= set("|-: "):
            tables.setdefault(heading, []).append([c.strip() for c in line.strip("|").split("|")])
    return {h: rows[1:] for h, rows in tables.items()}  # the header row dropped


def table(title_start: str) -> list[list[float]]:
    (rows,) = [rows for heading, rows in peers_tables().items() if heading.startswith(title_start)]
    return [[float(c) for c in row] for row in rows]


def test_peers_md_holds_the_figures_dgx_bench_compares_with():
    from dgx.bench import suites as S

    dense = {(int(r[0]), int(r[1]), int(r[2])): r[3:] for r in table("Dense GEMM")}
    assert dense == {k: [v["tflops"], v["us"], v["gbps"], v["cublaslt_blockwise_tflops"],
                         v["triton_blockwise_tflops"], v["bf16_cublas_tflops"]] for k, v in S.DENSE_ANCHORS.items()}
    for title, anchors in (("M-grouped contiguous", S.CONTIGUOUS_ANCHORS), ("M-grouped masked", S.MASKED_ANCHORS),
                           ("K-grouped weight gradient", S.K_GROUPED_ANCHORS)):
        rows = {tuple(int(x) for x in r[:4]): r[4:] for r in table(title)}
        assert rows == {k: [v["tflops"], v["us"]] for k, v in anchors.items()}, title
    wgrad = {tuple(int(x) for x in r[:3]): r[3:] for r in table("Dense weight gradient")}
    assert wgrad == {k: [v["tflops"], v["us"]] for k, v in S.WGRAD_ANCHORS.items()}
    kernel = {tuple(int(x) for x in r[:3]): r[3] for r in (row[:4] for row in _kernel_rows())}
    assert kernel == S.DENSE_KERNEL_ANCHORS_US
    text = (ROOT / "docs" / "PEERS.md").read_text()
    for name, value in S.ANCHOR_CEILINGS.items():
        assert f"{value:.0f}" in text, name
    assert f"{S.HOST_ANCHOR['deepgemm_cpu_us_per_call']:.0f} µs of CPU per call" in text
    assert "3fc6728" in text and "2026-11-22" in text and S.ANCHOR_DEVICE.startswith("NVIDIA H100 80GB HBM3")


def _kernel_rows() -> list[list[float]]:
    (rows,) = [rows for heading, rows in peers_tables().items() if heading.startswith("Kernel-only times")]
    return [[float(c.rstrip("%")) for c in row] for row in rows]


# --- drift ----------------------------------------------------------------------------------------------------------


def test_help_dgx_says_what_the_sass_pass_does():
    import dgx
    from dgx import env

    doc = " ".join(dgx.__doc__.split())
    assert "patched by a SASS pass" not in doc
    assert "off by default" in doc
    assert {v.name: v.default for v in env.VARIABLES}["DGX_SASS_INTERLEAVE"] == "auto"


def test_deployment_kernel_count_is_the_plans():
    """DEPLOYMENT.md's count of the deepseek-v3 preset is what `dgx warmup` would build (no compiling: the plan)."""
    from dgx import warmup

    text = (ROOT / "docs" / "DEPLOYMENT.md").read_text()
    claimed = int(re.search(r"\*\*(\d+) kernels\*\*", text).group(1))
    plan = warmup.plan(warmup.load_preset("deepseek-v3"), jobs=2)
    assert len(plan.kernels) == claimed


def test_readme_exit_statuses_are_the_clis(runner, tmp_cache):
    import cli

    readme = (ROOT / "README.md").read_text()
    assert "exit with status 1" in readme and "status 2" in readme
    usage = runner.invoke(cli.main, ["warmup", "--max-m", "nope", "--preset", "deepseek-v3"])
    assert usage.exit_code == 2 and "Error:" in usage.output
    user = runner.invoke(cli.main, ["warmup", "--preset", "deepseek-v3", "--max-m", str(1 << 30)])
    assert user.exit_code == 1 and "Error: --max-m" in user.output
