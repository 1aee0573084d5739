"""The installed distribution exposes the package `dgx` alone, for wheel and editable installs alike: the
repository's ptx/, cache/, sass_tools/ and cli.py are reached as dgx.ptx, dgx.cache, dgx.sass_tools and dgx.cli,
and `import ptx` (or cache, sass_tools, cli) fails outside the source tree (CPU only; builds both wheels)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAVES = ("ptx", "cache", "sass_tools", "cli")

# Run in a fresh interpreter whose only view of dgx is the unpacked wheel (a site dir, so .pth files apply).
PROBE = r"""
import importlib, json, site, sys
site.addsitedir(sys.argv[1])
import dgx, dgx.ptx, dgx.cache, dgx.sass_tools, dgx.cli
found = {}
for name in ("ptx", "cache", "sass_tools", "cli"):
    try:
        importlib.import_module(name)
        found[name] = True
    except ImportError:
        found[name] = False
print(json.dumps({"fp8_gemm_nt": hasattr(dgx, "fp8_gemm_nt"), "headers": len(dgx.ptx.headers()),
                  "main": callable(dgx.cli.main), "leaked": found}))
"""


def _build(kind: str, out: Path, tree: Path) -> Path:
    """Builds a wheel (or an editable one) of the copy `tree` of the repository through its own backend, as pip
    would (the backend's path first on sys.path)."""
    pytest.importorskip("setuptools")
    code = (f"import sys; sys.path.insert(0, 'dgx/_build'); import dgx_backend as b; "
            f"print(b.build_{kind}(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=tree, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def _probe(site_dir: Path, cwd: Path) -> dict:
    import json

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", PROBE, str(site_dir)], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_the_distribution_installs_dgx_alone(kind, tmp_path):
    tree = tmp_path / "tree"  # the tracked files (the links inside dgx/ included), as a fresh clone has them
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src, dst = ROOT / name.decode(), tree / name.decode()
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copyfile(src, dst)
    wheel = _build(kind, tmp_path / "dist", tree)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "site")
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert "dgx-as-deep-gemm.pth" in top  # the DGX_AS_DEEP_GEMM start-up line (it imports nothing unless set)
    top.discard("dgx-as-deep-gemm.pth")
    if kind == "wheel":
        assert top == {"dgx"}, top
        assert not any(n.startswith("dgx/_build") for n in names)  # the build backend's path is not installed
        for leaf in ("dgx/ptx/fp8_gemm.cuh", "dgx/cache/store.py", "dgx/sass_tools/codec.py", "dgx/cli.py"):
            assert leaf in names
    else:  # an editable wheel holds a path hook and its finder, which map `dgx` to the source tree
        assert not top & set(LEAVES) and not any(n.startswith("dgx/") for n in names), top
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "dgx = dgx.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    seen = _probe(tmp_path / "site", outside)
    assert seen["fp8_gemm_nt"] and seen["main"] and seen["headers"] > 5, seen
    assert seen["leaked"] == dict.fromkeys(LEAVES, False), seen


@pytest.mark.parametrize("name, target", [("cli.py", "../cli.py"), ("ptx", "../ptx"), ("cache", "../cache"),
                                          ("sass_tools", "../sass_tools")])
def test_the_source_tree_links_stay_links(name, target):
    """dgx/cli.py, dgx/ptx, dgx/cache and dgx/sass_tools are links to the top-level ones (one copy of each file): an
    editor that writes through a link's path replaces it with a copy, which then drifts from the real file."""
    link = Path(__file__).resolve().parent.parent / "dgx" / name
    assert link.is_symlink(), f"dgx/{name} should be a link to {target}, found a plain {'file' if link.is_file() else 'folder'}"
    assert os.readlink(link) == target
