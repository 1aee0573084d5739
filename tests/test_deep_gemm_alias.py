"""`import deep_gemm` served by dgx with DGX_AS_DEEP_GEMM=1 (the startup hook dgx/deep_gemm_alias.py, installed through
dgx-as-deep-gemm.pth), checked in fresh interpreters whose site directory holds that .pth; and DeepGEMM's DG_*
environment variables (dgx/env.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgx import cli
from dgx import deep_gemm_alias as _dgx_as_deep_gemm
from dgx import env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "dgx" / "_build"))  # the build backend's path: its build step
import dgx_build_py as build_hooks  # noqa: E402


@pytest.fixture
def site_dir(tmp_path):
    """A site directory holding dgx's .pth, as pip installs it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / build_hooks.PTH_FILE).write_text(build_hooks.PTH_LINE)
    return site


def _run(site: Path, code: str, variable: str | None, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter after the site directory's .pth files are processed (what Python does at
    start for site-packages), with DGX_AS_DEEP_GEMM set to `variable` (None: unset)."""
    environ = {k: v for k, v in os.environ.items() if k != "DGX_AS_DEEP_GEMM"}
    if variable is not None:
        environ["DGX_AS_DEEP_GEMM"] = variable
    environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, extra_path) if p is not None)
    prelude = f"import site, sys; site.addsitedir({str(site)!r})\n"
    return subprocess.run([sys.executable, "-W", "always", "-c", prelude + textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=300)


CHECK_ON = """
    import importlib.util
    assert "torch" not in sys.modules, "the startup hook imported torch"  # (dgx itself: only where the variable is set)
    spec = importlib.util.find_spec("deep_gemm")
    assert spec is not None and spec.origin.endswith("dgx/deep_gemm/__init__.py"), spec
    import deep_gemm, deep_gemm.utils, deep_gemm.testing, deep_gemm.utils.math
    from deep_gemm.utils import per_token_cast_to_fp8, get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor
    from deep_gemm.testing import bench_kineto, calc_diff
    import dgx.deep_gemm
    assert deep_gemm is dgx.deep_gemm and deep_gemm.utils is dgx.deep_gemm.utils and deep_gemm.fp8_gemm_nt
    assert deep_gemm.__spec__.name == "dgx.deep_gemm" and importlib.util.find_spec("deep_gemm") is not None
    print("OK", deep_gemm.__version__)
"""

CHECK_OFF = """
    import importlib.util
    assert importlib.util.find_spec("deep_gemm") is None
    try:
        import deep_gemm
    except ModuleNotFoundError:
        print("OK none")
"""


def test_on_a_fresh_interpreter_imports_dgx_as_deep_gemm(site_dir):
    run = _run(site_dir, CHECK_ON, "1")
    assert run.returncode == 0 and "OK 2.6.1" in run.stdout, run.stderr


@pytest.mark.parametrize("variable", [None, "0", ""])
def test_off_import_deep_gemm_is_untouched(site_dir, variable):
    check = textwrap.dedent(CHECK_OFF) + f"assert 'dgx' not in sys.modules or {variable!r} == '0'\n"
    run = _run(site_dir, check, variable)
    assert run.returncode == 0 and "OK none" in run.stdout, run.stderr


def test_with_a_real_deepgemm_installed_dgx_wins_and_warns_only_when_on(site_dir, tmp_path):
    real = tmp_path / "real"
    (real / "deep_gemm").mkdir(parents=True)
    (real / "deep_gemm" / "__init__.py").write_text("REAL = True\n")
    on = _run(site_dir, """
        import warnings
        import deep_gemm, dgx.deep_gemm
        assert deep_gemm is dgx.deep_gemm and not hasattr(deep_gemm, "REAL")
        print("OK dgx")
    """, "1", real)
    assert on.returncode == 0 and "OK dgx" in on.stdout, on.stderr
    assert "DeepGemmShadowedWarning" in on.stderr and str(real / "deep_gemm") in on.stderr
    off = _run(site_dir, "import deep_gemm\nassert deep_gemm.REAL\nprint('OK real')\n", None, real)
    assert off.returncode == 0 and "OK real" in off.stdout and "Warning" not in off.stderr, off.stderr


def test_install_in_process(monkeypatch):
    import importlib.util

    monkeypatch.delenv("DGX_AS_DEEP_GEMM", raising=False)
    assert _dgx_as_deep_gemm.install() is False and _dgx_as_deep_gemm.installed_finder() is None
    monkeypatch.setenv("DGX_AS_DEEP_GEMM", "1")
    try:
        assert _dgx_as_deep_gemm.install() is True and _dgx_as_deep_gemm.install() is True
        assert sum(isinstance(f, _dgx_as_deep_gemm.DeepGemmFinder) for f in sys.meta_path) == 1
        assert importlib.util.find_spec("deep_gemm.utils.layout") is not None
        assert importlib.util.find_spec("deep_gemm.no_such_module") is None
        monkeypatch.setenv("DGX_AS_DEEP_GEMM", "0")  # read at each lookup (dgx.env): off again
        for name in [m for m in sys.modules if m == "deep_gemm" or m.startswith("deep_gemm.")]:
            del sys.modules[name]
        assert importlib.util.find_spec("deep_gemm") is None
    finally:
        _dgx_as_deep_gemm.uninstall()
        for name in [m for m in sys.modules if m == "deep_gemm" or m.startswith("deep_gemm.")]:
            del sys.modules[name]
    assert _dgx_as_deep_gemm.installed_finder() is None


def test_the_build_step_writes_the_pth(tmp_path):
    from setuptools import Distribution

    assert build_hooks.PTH_LINE == _dgx_as_deep_gemm.PTH_LINE and build_hooks.PTH_FILE == _dgx_as_deep_gemm.PTH_FILE
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'build_py = "dgx_build_py.BuildPyWithDeepGemmHook"' in pyproject and 'backend-path = ["dgx/_build"]' in pyproject
    dist = Distribution({"name": "x", "packages": [], "cmdclass": {"build_py": build_hooks.BuildPyWithDeepGemmHook}})
    cmd = dist.get_command_obj("build_py")
    cmd.build_lib = str(tmp_path / "lib")
    cmd.ensure_finalized()
    cmd.run()
    assert (tmp_path / "lib" / build_hooks.PTH_FILE).read_text() == build_hooks.PTH_LINE
    assert str(tmp_path / "lib" / build_hooks.PTH_FILE) in cmd.get_outputs()


# --- DeepGEMM's environment variables --------------------------------------------------------------------------

_DG_NAMES = [v.name for v in env.DEEPGEMM_VARIABLES]


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in _DG_NAMES + [v.name for v in env.VARIABLES] + ["XDG_CACHE_HOME"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_dg_jit_cache_dir_alone_points_the_cache_there(clean_env, tmp_path):
    clean_env.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    assert env.cache_root() == tmp_path / "dg" and env.source("DGX_CACHE_DIR") == "DG_JIT_CACHE_DIR"
    clean_env.setenv("DGX_CACHE_DIR", str(tmp_path / "dgx"))  # both set: dgx's wins
    assert env.cache_root() == tmp_path / "dgx" and env.source("DGX_CACHE_DIR") == "DGX_CACHE_DIR"
    clean_env.setenv("DGX_CACHE_DIR", " ")  # empty counts as unset
    assert env.cache_root() == tmp_path / "dg"


@pytest.mark.parametrize("dg_name, reader", [
    ("DG_JIT_DEBUG", env.jit_debug), ("DG_PRINT_CONFIGS", env.print_configs),
    ("DG_JIT_PTXAS_VERBOSE", env.ptxas_verbose), ("DG_JIT_PRINT_COMPILER_COMMAND", env.print_compiler_command),
    ("DG_JIT_WITH_LINEINFO", env.lineinfo),
])
def test_dg_flags_stand_in_for_dgx_flags(clean_env, dg_name, reader):
    dgx_name = next(v.dgx_name for v in env.DEEPGEMM_VARIABLES if v.name == dg_name)
    assert reader() is False
    clean_env.setenv(dg_name, "1")
    assert reader() is True and env.source(dgx_name) == dg_name
    clean_env.setenv(dgx_name, "0")  # a DGX_* value wins, also when it turns the knob off
    assert reader() is False and env.source(dgx_name) == dgx_name


@pytest.mark.parametrize("flag", ["DG_JIT_DUMP_PTX", "DG_JIT_DUMP_SASS", "DG_JIT_DUMP_ASM"])
def test_dg_dump_flags_dump_under_the_cache_root(clean_env, tmp_path, flag):
    clean_env.setenv("DGX_CACHE_DIR", str(tmp_path / "c"))
    clean_env.setenv(flag, "0")
    assert env.dump_dir() is None
    clean_env.setenv(flag, "1")
    assert env.dump_dir() == tmp_path / "c" / env.DEEPGEMM_DUMP_SUBDIR and env.source("DGX_JIT_DUMP_DIR") == flag
    clean_env.setenv("DGX_JIT_DUMP_DIR", str(tmp_path / "d"))
    assert env.dump_dir() == tmp_path / "d"


def test_dgx_info_shows_which_variable_is_in_force(clean_env, tmp_path):
    clean_env.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    clean_env.setenv("DG_JIT_DEBUG", "1")
    clean_env.setenv("DGX_JIT_DEBUG", "0")
    clean_env.setenv("DG_JIT_USE_NVRTC", "0")
    clean_env.setenv("DG_JIT_NVCC_COMPILER", "/opt/nvcc")
    result = CliRunner().invoke(cli.main, ["info"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"DGX_CACHE_DIR = '{tmp_path / 'dg'}' (from DG_JIT_CACHE_DIR)" in out
    assert "DG_JIT_CACHE_DIR = " in out and "in force as DGX_CACHE_DIR" in out
    assert "DG_JIT_DEBUG = '1'  overridden by DGX_JIT_DEBUG" in out
    assert "DG_JIT_USE_NVRTC = '0'  ignored: dgx always compiles with NVRTC" in out
    assert "DG_JIT_NVCC_COMPILER = '/opt/nvcc'  ignored" in out
    data = cli.collect_info()
    assert data["env"]["DGX_CACHE_DIR"]["source"] == "DG_JIT_CACHE_DIR"
    assert {v["name"] for v in data["deep_gemm_env"]} == {"DG_JIT_CACHE_DIR", "DG_JIT_DEBUG", "DG_JIT_USE_NVRTC",
                                                          "DG_JIT_NVCC_COMPILER"}


def test_every_dg_variable_is_accounted_for():
    stands_in = {v.name for v in env.DEEPGEMM_VARIABLES if v.dgx_name}
    assert stands_in == {"DG_JIT_CACHE_DIR", "DG_JIT_DEBUG", "DG_PRINT_CONFIGS", "DG_JIT_PTXAS_VERBOSE",
                         "DG_JIT_PRINT_COMPILER_COMMAND", "DG_JIT_WITH_LINEINFO", "DG_JIT_DUMP_PTX",
                         "DG_JIT_DUMP_SASS", "DG_JIT_DUMP_ASM"}
    assert {v.dgx_name for v in env.DEEPGEMM_VARIABLES if v.dgx_name} <= {v.name for v in env.VARIABLES}
    ignored = {v.name for v in env.DEEPGEMM_VARIABLES if v.note.startswith("ignored")}
    assert {"DG_JIT_USE_NVRTC", "DG_JIT_NVCC_COMPILER", "DG_JIT_CPP_STANDARD"} <= ignored
