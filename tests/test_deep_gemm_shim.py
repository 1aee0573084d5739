"""The runner of DeepGEMM's test files against dgx (tests/device/run_deep_gemm_tests.py), on the CPU: it resolves
``deep_gemm`` to dgx.deep_gemm through DGX_AS_DEEP_GEMM=1, and a failing test is reported while the next ones still
run."""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

SHIM_PATH = Path(__file__).resolve().parent / "device" / "run_deep_gemm_tests.py"


@pytest.fixture
def shim(monkeypatch):
    from dgx import deep_gemm_alias as _dgx_as_deep_gemm

    spec = importlib.util.spec_from_file_location("run_deep_gemm_tests", SHIM_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("DGX_AS_DEEP_GEMM", "0")  # the runner sets it to 1; monkeypatch puts it back
    before = set(sys.modules)
    path = list(sys.path)
    yield module
    _dgx_as_deep_gemm.uninstall()
    for name in set(sys.modules) - before:
        if name.startswith(("deep_gemm", "_deep_gemm_test_", "dg_helpers")):
            del sys.modules[name]
    sys.path[:] = path


def test_deep_gemm_is_dgx_deep_gemm_with_what_the_test_files_import(shim):
    import dgx.deep_gemm as api

    assert shim.install() is api and os.environ["DGX_AS_DEEP_GEMM"] == "1"
    import deep_gemm
    from deep_gemm.testing import bench_kineto, calc_diff, count_bytes, get_arch_major, ignore_env  # noqa: F401
    from deep_gemm.utils import (  # noqa: F401 - generators.py and test_layout.py at 54e2261 import these
        align,
        ceil_div,
        get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor,
        get_mk_alignment_for_contiguous_layout,
        get_mn_major_tma_aligned_packed_ue8m0_tensor,
        per_block_cast_to_fp8,
        per_channel_cast_to_fp8,
        per_token_cast_to_fp4,
        per_token_cast_to_fp8,
        set_mk_alignment_for_contiguous_layout,
        transpose_packed_fp4,
    )
    from deep_gemm.utils.math import cast_back_from_fp4  # noqa: F401 - test_einsum.py imports from the submodule

    assert deep_gemm is api and deep_gemm.utils is api.utils and deep_gemm.__path__
    assert set_mk_alignment_for_contiguous_layout is api.set_mk_alignment_for_contiguous_layout


TEST_FILE = '''
import random
import torch

import deep_gemm
from deep_gemm import ceil_div
from deep_gemm.testing import calc_diff, get_arch_major
from deep_gemm.utils import per_token_cast_to_fp8

from dg_helpers import LOG


def test_one():
    LOG.append(("one", random.random()))
    x = torch.randn(4, 256)
    q, s = per_token_cast_to_fp8(x, use_ue8m0=True)
    assert calc_diff(q.float() * s.repeat_interleave(128, 1), x) < 1e-2 and ceil_div(5, 2) == 3


def test_two():
    LOG.append("two")
    assert False, "this one fails"


def test_three():
    LOG.append("three")


if __name__ == '__main__':
    random.seed(0)
    LOG.append("setup")
    print(f'Library path: {deep_gemm.__path__}')
    test_one()
    test_two()
    test_three()
'''


def test_a_failing_test_is_reported_and_the_next_runs(shim, tmp_path, capsys):
    (tmp_path / "test_fake.py").write_text(textwrap.dedent(TEST_FILE))
    (tmp_path / "dg_helpers.py").write_text("LOG = []\n")
    results = shim.run_file(str(tmp_path / "test_fake.py"))
    assert [(n, s) for n, s, _ in results] == [("test_one", "PASS"), ("test_two", "FAIL"), ("test_three", "PASS")]
    log = sys.modules["dg_helpers"].LOG
    assert log[0] == "setup" and log[1][0] == "one" and log[2:] == ["two", "three"]
    import random

    random.seed(0)
    assert log[1][1] == random.random()  # the main block's seed ran before the first test
    out = capsys.readouterr()
    assert "this one fails" in out.err and "test_fake.py::test_two FAIL" in out.out and "Library path" in out.out

    results = shim.run_file(str(tmp_path / "test_fake.py"), only={"test_three"})
    assert [(n, s) for n, s, _ in results] == [("test_three", "PASS")]
    assert shim.main([str(tmp_path / "test_fake.py"), "--only", "test_one"]) == 0
    assert shim.main([str(tmp_path / "test_fake.py")]) == 1
    assert "RESULT test_fake.py::test_two FAIL" in capsys.readouterr().out


def test_an_import_error_is_a_failure(shim, tmp_path):
    (tmp_path / "test_bad.py").write_text("import deep_gemm\nfrom deep_gemm import no_such_name\n")
    assert [(n, s) for n, s, _ in shim.run_file(str(tmp_path / "test_bad.py"))] == [("<import>", "FAIL")]


def test_tests_inside_an_if_of_the_main_block_count_one_by_one(shim, tmp_path):
    """DeepGEMM's test files call their sm_90 tests inside `if get_arch_major() >= 9:`; each is run and reported on its
    own, the branch the condition takes only."""
    path = tmp_path / "test_branches.py"
    path.write_text(
        "def arch(): return 9\n"
        "def test_a(): pass\n"
        "def test_b(): raise AssertionError('b')\n"
        "def test_c(): pass\n"
        "if __name__ == '__main__':\n"
        "    if arch() >= 9:\n"
        "        test_a()\n"
        "        test_b()\n"
        "    else:\n"
        "        test_c()\n"
        "    test_c()\n")
    assert [(name, status) for name, status, _ in shim.run_file(str(path))] == [
        ("test_a", "PASS"), ("test_b", "FAIL"), ("test_c", "PASS")]
