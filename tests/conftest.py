import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _has_hopper_gpu() -> bool:
    try:
        from dgx import runtime

        return runtime.device_count() > 0 and runtime.device_info(0).compute_capability[0] == 9
    except Exception:
        return False


HAS_GPU = _has_hopper_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA Hopper GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private, empty kernel cache for one test."""
    root = tmp_path / "dgx-cache"
    monkeypatch.setenv("DGX_CACHE_DIR", str(root))
    return root

# tests/device/ holds scripts for a GPU machine, not tests.
collect_ignore = ["device"]


@pytest.fixture
def runner():
    """A click test runner for the `dgx` command."""
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture
def fresh_jit(monkeypatch):
    """Forget the in-process kernel caches so every lookup goes to the (test's) disk cache."""
    from dgx import jit

    monkeypatch.setattr(jit, "_caches", {})
    jit.reset_jit_stats()
