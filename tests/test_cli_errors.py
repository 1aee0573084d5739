"""Every command against bad cache roots, bad environment values and out-of-range sizes: one ``Error:``
line and exit status 1 (or success where the command can do its job), never a traceback.

Read-only roots must really be read-only to the process under test. CI runs as root, whom permissions do
not stop, so there the commands run in a child process that drops to uid/gid 65534 after importing
everything it needs; elsewhere a chmod is enough.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgx import cli
ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
NOBODY = 65534
TINY = [{"kind": "dense", "n": 256, "k": 256, "max_m": 64}]  # one kernel
INSPECT_TINY = ["inspect", "--gemm", "64", "256", "256", "--json"]

# Runs CLI commands through click's runner in one process, optionally as another uid, and prints one
# JSON list of results. Everything the commands import lazily is imported before dropping privileges
# (the interpreter may live where that uid cannot read).
DRIVER = r"""
import difflib, importlib.metadata, json, os, sys, traceback, warnings
from click.testing import CliRunner
from dgx import cli, cache, sass_tools
import dgx.cache.bundle, dgx.sass_tools.inspect
from dgx import compiler, enumeration, heuristics, install, jit, problems, user_errors, warmup, workpool
from dgx.kernels import fp8_gemm
compiler.nvrtc_version()
cli.collect_info()
jit.install_summary()
commands, uid = json.loads(sys.argv[1]), int(sys.argv[2])
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
out = []
for args in commands:
    jit._caches.clear()
    res = CliRunner().invoke(cli.main, args)
    bug = res.exception is not None and not isinstance(res.exception, SystemExit)
    out.append({"args": args, "code": res.exit_code, "output": res.output,
                "traceback": "".join(traceback.format_exception(*res.exc_info)) if bug else None})
print("RESULTS" + json.dumps(out))
"""


def run_as(commands: list[list[str]], env: dict[str, str], uid: int = -1) -> list[dict]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DGX_")}
    environ.update(PYTHONPATH=str(ROOT), **env)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(commands), str(uid)],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULTS"))
    return json.loads(line[len("RESULTS"):])


def assert_clean(result: dict, code: int | None = None, text: str | None = None) -> None:
    """No traceback; exit 0 or 1; on 1, exactly one ``Error:`` line; optionally the code and a phrase."""
    where = f"dgx {' '.join(result['args'])} -> {result['code']}:\n{result['output']}"
    assert result["traceback"] is None, where + "\n" + result["traceback"]
    assert "Traceback" not in result["output"], where
    assert result["code"] in (0, 1), where
    if result["code"] == 1:
        errors = [l for l in result["output"].splitlines() if l.startswith("Error:")]
        assert len(errors) == 1, where
    if code is not None:
        assert result["code"] == code, where
    if text is not None:
        assert text in result["output"], where


def make_readonly(path: Path) -> int:
    """Make ``path`` (recursively) read-only to the uid the commands run as; return that uid (-1: us)."""
    for p in [path, *path.rglob("*")]:
        mode = 0o500 if p.is_dir() else 0o400
        if IS_ROOT:
            os.chown(p, NOBODY, NOBODY)
        os.chmod(p, mode)
    return NOBODY if IS_ROOT else -1


@pytest.fixture
def base():
    """A scratch directory the unprivileged uid can reach (pytest's own tmp_path is private to us)."""
    path = Path(tempfile.mkdtemp(prefix="dgx-faults-"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o700)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def files(base):
    """A shapes file, a valid one-kernel bundle and a directory the commands may write to."""
    tmp_path = base
    out = tmp_path / "out"
    out.mkdir()
    shapes = out / "tiny.json"
    shapes.write_text(json.dumps(TINY))
    warm = tmp_path / "warm"
    result = run_as([["warmup", "--shapes", str(shapes), "-j", "1"], ["cache", "export", str(out / "b.tar.gz")]],
                    {"DGX_CACHE_DIR": str(warm)})
    for r in result:
        assert_clean(r, code=0)
    if IS_ROOT:
        os.chown(out, NOBODY, NOBODY)
        for p in out.iterdir():
            os.chown(p, NOBODY, NOBODY)
    return {"shapes": shapes, "bundle": out / "b.tar.gz", "out": out, "warm": warm}


def every_command(files) -> list[list[str]]:
    return [
        ["info"],
        ["cache", "path"],
        ["cache", "list"],
        ["cache", "verify"],
        ["cache", "clear", "--yes"],
        ["cache", "export", str(files["out"] / "x.tar.gz")],
        ["cache", "import", str(files["bundle"])],
        INSPECT_TINY,
        ["warmup", "--shapes", str(files["shapes"]), "-j", "1"],
    ]


def by_command(results: list[dict]) -> dict[str, dict]:
    return {" ".join(r["args"][:2]) if r["args"][0] == "cache" else r["args"][0]: r for r in results}


def test_read_only_empty_cache(base, files):
    tmp_path = base
    root = tmp_path / "ro"
    root.mkdir()
    uid = make_readonly(root)
    results = by_command(run_as(every_command(files), {"DGX_CACHE_DIR": str(root)}, uid))
    for name, r in results.items():
        assert_clean(r)
    for name in ("info", "cache path", "cache list", "cache verify", "cache export"):
        assert results[name]["code"] == 0, results[name]
    for name in ("cache clear", "cache import", "inspect", "warmup"):
        assert_clean(results[name], code=1, text="not writable")
        assert "DGX_CACHE_DIR" in results[name]["output"]


def test_read_only_warm_cache_keeps_loading(base, files):
    """A read-only cache that holds the kernels: loads, listing, verifying and a warmup with nothing to
    build all work; only what would write fails, with one line."""
    root = base / "ro-warm"
    shutil.copytree(files["warm"], root)
    uid = make_readonly(root)
    results = by_command(run_as(every_command(files), {"DGX_CACHE_DIR": str(root)}, uid))
    for name in ("info", "cache path", "cache list", "cache verify", "cache export", "inspect", "warmup"):
        assert_clean(results[name], code=0)
    assert "1 kernels" not in results["warmup"]["output"]
    # the entry's kernel and the two helper kernels every GEMM warmup builds
    assert "3 kernels: 0 compiled, 3 cached, 0 failed" in results["warmup"]["output"]
    assert json.loads(results["inspect"]["output"])[0]["qgmma"] > 0
    for name in ("cache clear", "cache import"):
        assert_clean(results[name], code=1, text="not writable")


@pytest.mark.parametrize("case", ["missing", "file", "under_file", "foreign", "group_writable"])
def test_unusable_or_missing_cache_roots(base, files, case):
    tmp_path = base
    uid = -1
    if case == "missing":
        root = tmp_path / "not" / "yet" / "there"
    elif case == "file":
        root = tmp_path / "a-file"
        root.write_text("x")
    elif case == "under_file":
        (tmp_path / "a-file").write_text("x")
        root = tmp_path / "a-file" / "cache"
    elif case == "foreign":
        root = tmp_path / "theirs"
        root.mkdir(mode=0o700)
        if IS_ROOT:
            os.chown(root, NOBODY, NOBODY)  # and we stay root: not ours
        else:
            root = Path("/")  # owned by root, not by us
    else:
        root = tmp_path / "shared"
        root.mkdir()
        os.chmod(root, 0o777)
    results = by_command(run_as(every_command(files), {"DGX_CACHE_DIR": str(root)}, uid))
    for r in results.values():
        assert_clean(r)
    assert results["info"]["code"] == 0 and results["cache path"]["code"] == 0
    others = [r for name, r in results.items() if name not in ("info", "cache path")]
    if case == "missing":
        assert all(r["code"] == 0 for r in others), [r["output"] for r in others if r["code"]]
    else:
        expected = {
            "file": "is not a directory",
            "under_file": "is a file, not a directory",
            "foreign": "owned by uid",
            "group_writable": "writable by",
        }[case]
        for r in others:
            assert_clean(r, code=1, text=expected)
        assert "unusable" in results["info"]["output"]


# --- bad environment values and sizes (in process) ---------------------------------------------------


@pytest.fixture
def runner():
    return CliRunner()


def shapes_file(tmp_path, entry) -> str:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([entry]))
    return str(path)


def invoke(runner, args, **env):
    res = runner.invoke(cli.main, args, env=env or None)
    bug = res.exception is not None and not isinstance(res.exception, SystemExit)
    return {"args": args, "code": res.exit_code, "output": res.output, "traceback": repr(res.exception) if bug else None}


@pytest.mark.parametrize(
    "name, value",
    [("DGX_NUM_SMS", "abc"), ("DGX_NUM_SMS", "0"), ("DGX_NUM_SMS", "-4"), ("DGX_SASS_INTERLEAVE", "sometimes")],
)
def test_bad_environment_values(runner, tmp_cache, tmp_path, name, value):
    shapes = shapes_file(tmp_path, TINY[0])
    for args in (["warmup", "--shapes", shapes, "-j", "1"], INSPECT_TINY):
        assert_clean(invoke(runner, args, **{name: value}), code=1, text=f"{name}={value!r}")
    info = invoke(runner, ["info"], **{name: value})
    assert_clean(info, code=0)
    assert "INVALID" in info["output"] and name in info["output"]
    data = json.loads(invoke(runner, ["info", "--json"], **{name: value})["output"])
    assert "expected" in data["env"][name]["error"]


def test_get_num_sms_without_a_driver_says_what_to_do(monkeypatch):
    import dgx
    from dgx import device, runtime

    def no_driver(ordinal):
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.delenv("DGX_NUM_SMS", raising=False)
    monkeypatch.setattr(device, "_num_sms", None)
    monkeypatch.setattr(runtime, "device_info", no_driver)
    with pytest.raises(dgx.DgxError, match="set_num_sms.*DGX_NUM_SMS"):
        dgx.get_num_sms()


@pytest.mark.parametrize(
    "entry, phrase",
    [
        ({"kind": "dense", "n": 4294967296, "k": 7168}, "field 'n': expected N <= 2147483392"),
        ({"kind": "dense", "n": 2112, "k": 2**31}, "field 'k': expected K <= "),
        ({"kind": "dense", "n": 2112, "k": 7168, "max_m": 2**31}, "field 'max_m': expected M <= "),
        ({"kind": "dense", "n": 2112, "k": 7168, "m": 2**40}, "field 'm': expected M <= "),
        ({"kind": "m_grouped_masked", "n": 2**30, "k": 7168, "groups": 4}, "field 'groups': expected groups x N"),
        ({"kind": "m_grouped_masked", "n": 4096, "k": 7168, "groups": 1024, "max_m": 2**22}, "groups x M"),
        ({"kind": "k_grouped", "n": 4096, "k": 7000, "groups": 4}, "multiple of 128 for k_grouped (K per group)"),
        ({"kind": "k_grouped", "n": 4096, "k": 2**28, "groups": 16}, "groups x K"),
        ({"kind": "dense", "n": 2100, "k": 7168}, "field 'n': expected a multiple of 8"),
    ],
)
def test_out_of_range_sizes_in_shapes_files(runner, tmp_cache, tmp_path, entry, phrase):
    r = invoke(runner, ["warmup", "--shapes", shapes_file(tmp_path, entry)])
    assert_clean(r, code=1, text=phrase)
    assert "entry 0:" in r["output"]


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["--gemm", "4096", "2100", "7168"], "--gemm N: expected a multiple of 8"),
        (["--gemm", "4096", "2112", "7000"], "--gemm K: expected a multiple of 16"),
        (["--gemm", "4096", "4294967296", "7168"], "--gemm N: expected N <= "),
        (["--gemm", str(2**31), "2112", "7168"], "--gemm M: expected M <= "),
        (["--gemm", "256", "4096", "7056", "--kind", "k_grouped", "--groups", "4"], "--gemm K: expected a multiple of 128"),
        (["--gemm", "256", "2**30", "7168"], None),
        (["--gemm", "4096", "2112", "7168", "--arch", "sm_80"], "only sm_90a is supported"),
        (["--gemm", "4096", "2112", "7168", "--arch", "sm_100a"], "only sm_90a is supported"),
    ],
)
def test_inspect_applies_the_warmup_rules(runner, tmp_cache, args, phrase):
    r = invoke(runner, ["inspect", *args])
    if phrase is None:  # not an integer: click's usage error (exit 2), still no traceback
        assert r["traceback"] is None and r["code"] == 2 and "Traceback" not in r["output"]
        return
    assert_clean(r, code=1, text=phrase)
    assert "static_assert" not in r["output"] and "ptxas" not in r["output"]


def test_warmup_refuses_other_archs(runner, tmp_cache, tmp_path):
    r = invoke(runner, ["warmup", "--shapes", shapes_file(tmp_path, TINY[0]), "--arch", "sm_100a"])
    assert_clean(r, code=1, text="only sm_90a is supported")
