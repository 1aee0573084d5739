"""The inputs a newcomer tried that dgx used to accept (or refuse badly), each now refused before any work with
one ``Error:`` line that names the variable or option (numbered as in the issue that listed them).

"Before any work" is checked where work would show: no kernel compiled (the cache stays empty, the JIT's
counters stay at zero), nothing enumerated, nothing created on disk.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
import dgx
from dgx import env, jit, problems, warmup
from dgx.errors import EnvError
from dgx.jit import KernelSource

TINY = {"kind": "dense", "n": 256, "k": 256, "max_m": 64}
NO_MAX_M = {"kind": "dense", "n": 256, "k": 256}
INSPECT = ["inspect", "--gemm", "64", "256", "256", "--json"]
SRC = KernelSource(name="refused_probe", source='extern "C" __global__ void refused_probe(int* p) { if (p) *p = 1; }')


def run(args: list[str], **environ: str) -> dict:
    res = CliRunner().invoke(cli.main, args, env=environ or None)
    bug = res.exception is not None and not isinstance(res.exception, SystemExit)
    assert not bug, f"dgx {' '.join(args)} raised {res.exception!r}"
    return {"code": res.exit_code, "output": res.output}


def refused(result: dict, *phrases: str, code: int = 1) -> str:
    """Exactly one ``Error:`` line, holding every phrase; no traceback; the exit status ``code``."""
    out = result["output"]
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in out, out
    assert result["code"] == code, out
    for phrase in phrases:
        assert phrase in errors[0], out
    return errors[0]


def shapes(tmp_path: Path, *entries: dict, name: str = "s.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(list(entries)))
    return str(path)


def cache_kernels(root: Path) -> list[Path]:
    return [p for p in root.rglob("kernel.cubin")] if root.exists() else []


@pytest.fixture
def no_compiles(fresh_jit):
    """The JIT's counters start at zero; the test asserts they stay there."""
    yield
    assert jit.jit_stats()["compiles"] == 0


# --- 1. on/off variables accept a documented set and refuse anything else ---------------------------------------


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), (" YES ", True), ("On", True),
                                       ("0", False), ("false", False), ("no", False), ("OFF", False), ("", False)])
def test_on_off_values_in_the_documented_set(monkeypatch, value, on):
    for name in env.FLAGS:
        monkeypatch.setenv(name, value)
        assert env._flag(name) is on
    monkeypatch.delenv("DGX_JIT_STRICT")
    assert env.jit_strict() is False


@pytest.mark.parametrize("name", env.FLAGS)
@pytest.mark.parametrize("value", ["maybe", "ture", "2"])
def test_1_on_off_variables_refuse_anything_else(tmp_cache, tmp_path, no_compiles, name, value):
    for args in (["warmup", "--shapes", shapes(tmp_path, TINY), "-j", "1"], INSPECT):
        refused(run(args, **{name: value}), f"{name}={value!r}", "expected 1, true, yes or on")
    assert cache_kernels(tmp_cache) == []
    info = run(["info"], **{name: value})
    assert info["code"] == 0
    assert any(name in line and "INVALID" in line for line in info["output"].splitlines()), info["output"]
    data = json.loads(run(["info", "--json"], **{name: value})["output"])
    assert "expected 1, true, yes or on" in data["env"][name]["error"]


@pytest.mark.parametrize("name", ["DGX_JIT_STRICT", "DGX_JIT_PTXAS_VERBOSE"])
def test_1_the_library_refuses_before_compiling(monkeypatch, tmp_cache, no_compiles, name):
    """DGX_JIT_PTXAS_VERBOSE is read after NVRTC returns: the JIT checks every variable before it compiles."""
    monkeypatch.setenv(name, "ture")
    with pytest.raises(EnvError, match=name):
        jit.get_cubin(SRC, "sm_90a")


# --- 2. DGX_JIT_DUMP_DIR that cannot be written --------------------------------------------------------------


def unwritable_dump_dirs(tmp_path: Path) -> list[str]:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    dirs = [str(a_file / "dump"), str(a_file)]
    if os.path.isdir("/proc/self"):
        dirs.append("/proc/nope")  # a virtual filesystem: permission bits say yes to root, mkdir says no
    return dirs


def test_2_dump_dir_refused_before_compiling(tmp_cache, tmp_path, no_compiles):
    for dump in unwritable_dump_dirs(tmp_path):
        t0 = time.monotonic()
        for args in (["warmup", "--shapes", shapes(tmp_path, TINY), "-j", "1"], INSPECT):
            out = refused(run(args, DGX_JIT_DUMP_DIR=dump), f"DGX_JIT_DUMP_DIR={dump!r}", "create and write")
            assert "enumerating" not in out
        assert time.monotonic() - t0 < 10  # no compile ran (one takes seconds)
        assert cache_kernels(tmp_cache) == []
        info = run(["info"], DGX_JIT_DUMP_DIR=dump)
        assert info["code"] == 0 and "INVALID: DGX_JIT_DUMP_DIR" in info["output"]


def test_2_library_refuses_dump_dir_before_compiling(monkeypatch, tmp_cache, tmp_path, no_compiles):
    monkeypatch.setenv("DGX_JIT_DUMP_DIR", unwritable_dump_dirs(tmp_path)[0])
    with pytest.raises(EnvError, match="DGX_JIT_DUMP_DIR"):
        jit.get_cubin(SRC, "sm_90a")


def test_2_a_dump_dir_to_be_created_is_fine_and_probing_leaves_nothing(monkeypatch, tmp_path):
    target = tmp_path / "new" / "dump"
    monkeypatch.setenv("DGX_JIT_DUMP_DIR", str(target))
    assert env.dump_dir() == target and "DGX_JIT_DUMP_DIR" not in env.problems()
    assert list(tmp_path.iterdir()) == []  # the probe made and removed its own directory


# --- 3. a shared directory (/tmp) as the cache root -------------------------------------------------------------


def test_3_shared_cache_root_gets_advice_that_fits(tmp_path):
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    for args in (["cache", "list"], ["warmup", "--shapes", shapes(tmp_path, TINY), "-j", "1"]):
        line = refused(run(args, DGX_CACHE_DIR=str(shared)), "shared by every user", "of your own inside it")
        assert "chmod" not in line
    assert sorted(p.name for p in shared.iterdir()) == []


# --- 4. SM counts no GPU has ------------------------------------------------------------------------------------


def test_4_sm_counts_no_gpu_has(tmp_cache, tmp_path, no_compiles):
    big = "100000000"
    refused(run(["warmup", "--shapes", shapes(tmp_path, TINY), "--num-sms", big]), "--num-sms", "1 to 144", big)
    refused(run([*INSPECT, "--num-sms", big]), "--num-sms", "1 to 144")
    for args in (["warmup", "--shapes", shapes(tmp_path, TINY)], INSPECT):
        refused(run(args, DGX_NUM_SMS="1000000000000"), "DGX_NUM_SMS='1000000000000'", "1 to 144")
    assert "INVALID: DGX_NUM_SMS" in run(["info"], DGX_NUM_SMS="145")["output"]
    assert cache_kernels(tmp_cache) == []
    with pytest.raises(ValueError, match="set_num_sms: expected an SM count from 1 to 144"):
        dgx.set_num_sms(10**12)
    assert problems.check_num_sms(144) == 144
    with pytest.raises(problems.ProblemError, match="--num-sms"):
        problems.check_num_sms(145, "--num-sms")


# --- 5 and 8. an M range warmup cannot enumerate; the option named as typed --------------------------------------


@pytest.mark.parametrize("value", ["2147483392", "1000000000000", str(warmup.MAX_WARM_M + 1)])
def test_5_8_max_m_beyond_what_warmup_enumerates(tmp_cache, tmp_path, value):
    t0 = time.monotonic()
    line = refused(run(["warmup", "--shapes", shapes(tmp_path, NO_MAX_M), "--max-m", value]), "--max-m", value)
    assert "field" not in line and time.monotonic() - t0 < 10  # nothing enumerated
    assert not tmp_cache.exists() or cache_kernels(tmp_cache) == []


@pytest.mark.parametrize("field", ["max_m", "m"])
def test_5_entry_ranges_beyond_what_warmup_enumerates(tmp_cache, tmp_path, field):
    path = shapes(tmp_path, {**NO_MAX_M, field: 1 << 30})
    refused(run(["warmup", "--shapes", path]), f"shapes file {path}: entry 0: field {field!r}", "at most 1048576")
    with pytest.raises(warmup.ShapesFileError, match=f"field {field!r}"):
        warmup.plan(warmup.parse_shapes([{**NO_MAX_M, field: 1 << 30}]))


# --- 6. a shapes file that is not text ---------------------------------------------------------------------------


def test_6_binary_shapes_file_names_the_file(tmp_cache, tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * 4)
    refused(run(["warmup", "--shapes", str(path)]), f"shapes file {path}", "UTF-8")
    from dgx.bench import suites

    with pytest.raises(suites.ShapesFileError, match=f"shapes file {path}: expected JSON text"):
        suites.load_shapes_file(str(path))  # dgx bench --shapes reads it the same way


# --- 7. options that do not apply; an entry with both m and max_m ------------------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["--gemm", "64", "2112", "7168", "--heads", "7"], "--heads"),
        (["--gemm", "64", "2112", "7168", "--head-dim", "64"], "--head-dim"),
        (["--gemm", "64", "2112", "7168", "--next-n", "2"], "--next-n"),
        (["--gemm", "64", "2112", "7168", "--groups", "5"], "--groups"),
        (["--gemm", "64", "2112", "7168", "--kind", "wgrad", "--groups", "1"], "--groups"),
        (["--kind", "mqa_logits", "--groups", "5"], "--groups"),
        (["--kind", "mqa_logits", "--next-n", "2"], "--next-n"),
        (["--kind", "paged_mqa_logits", "--num-sms", "100"], "--num-sms"),
        (["--key", "0123456789abcdef", "--kind", "masked"], "--kind"),
        (["--key", "0123456789abcdef", "--num-sms", "100"], "--num-sms"),
    ],
)
def test_7_inspect_refuses_options_that_do_not_apply(tmp_cache, no_compiles, args, option):
    line = refused(run(["inspect", *args]), code=2)
    assert line.endswith(f"got {option}") or f"with {option}" in line, line  # the option is named as refused


def test_7_the_options_that_apply_still_work(tmp_cache):
    ok = run(["inspect", "--gemm", "256", "512", "256", "--kind", "masked", "--groups", "2", "--num-sms", "132"])
    assert ok["code"] == 0, ok["output"]


def test_7_entry_with_m_and_max_m(tmp_cache, tmp_path):
    from dgx.bench import suites

    entry = {**NO_MAX_M, "m": 32, "max_m": 64}
    refused(run(["warmup", "--shapes", shapes(tmp_path, entry)]), "entry 0: field 'm'", "got both (m=32, max_m=64)")
    (shape,), _ = suites.parse_shapes([entry])  # the benchmark reads both: the M it times, the largest M
    assert shape.m == 32


# --- 9. cache roots that cannot be a cache: uncreatable, relative ------------------------------------------------


def test_9_uncreatable_cache_root_is_unusable_in_info(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    roots = [a_file / "x" / "cache"] + ([Path("/proc/nope/x")] if os.path.isdir("/proc/self") else [])
    for root in roots:
        data = json.loads(run(["info", "--json"], DGX_CACHE_DIR=str(root))["output"])
        assert data["cache_entries"] is None and "cannot be created" in data["cache_error"]
        assert "unusable" in run(["info"], DGX_CACHE_DIR=str(root))["output"]
        refused(run(["cache", "list"], DGX_CACHE_DIR=str(root)), "cannot be created", "DGX_CACHE_DIR")


def test_9_relative_cache_root_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["cache", "path"], ["cache", "list"], ["warmup", "--shapes", shapes(tmp_path, TINY)], INSPECT):
        refused(run(args, DGX_CACHE_DIR="kernels"), "DGX_CACHE_DIR='kernels'", "absolute path")
    info = run(["info"], DGX_CACHE_DIR="kernels")
    assert info["code"] == 0 and "INVALID: DGX_CACHE_DIR" in info["output"] and "unusable" in info["output"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]  # no cache made here
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.delenv("DGX_CACHE_DIR", raising=False)
    assert env.cache_root() == Path.home() / ".cache" / "dgx"  # the XDG rules: a relative value is ignored


# --- 10. a directory that is not a cache -----------------------------------------------------------------------------


def test_10_a_directory_that_is_not_a_cache_is_left_alone(tmp_path):
    root = tmp_path / "project"
    root.mkdir(mode=0o700)
    (root / "notes.txt").write_text("mine")
    (root / "src").mkdir()
    before = sorted(p.name for p in root.iterdir())
    for args in (["cache", "clear", "--yes"], ["cache", "list"], ["warmup", "--shapes", shapes(tmp_path, TINY)]):
        refused(run(args, DGX_CACHE_DIR=str(root)), "is not a kernel cache", "'notes.txt'")
    assert "unusable" in run(["info"], DGX_CACHE_DIR=str(root))["output"]
    assert sorted(p.name for p in root.iterdir()) == before  # no locks/ or tmp/ made in it


def test_10_a_cache_is_still_a_cache(tmp_path):
    from cache import KernelCache

    root = tmp_path / "kc"
    KernelCache(root).store("ab" * 32, b"\x7fELF cubin")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert sorted(p.name for p in root.iterdir()) == ["ab", "locks", "tmp"]
    assert run(["cache", "clear", "--yes"], DGX_CACHE_DIR=str(root))["output"].startswith("removed 1 kernels")
    (root / "lost+found").mkdir()  # a filesystem mounted as the cache root
    (root / "dumps").mkdir()  # what DeepGEMM's DG_JIT_DUMP_* variables make dgx write there
    assert run(["cache", "list"], DGX_CACHE_DIR=str(root))["code"] == 0


# --- DeepGEMM's stand-in variables get the same checks ---------------------------------------------------------------


def test_deepgemm_variables_are_checked_like_dgx_ones(tmp_cache, tmp_path, monkeypatch):
    refused(run(INSPECT, DG_JIT_DEBUG="maybe"), "DG_JIT_DEBUG='maybe'", "expected 1, true, yes or on")
    assert "INVALID: DG_JIT_DEBUG" in run(["info"], DG_JIT_DEBUG="ture")["output"]
    monkeypatch.setenv("DG_JIT_DEBUG", "2")  # DeepGEMM reads its variables as integers: 2 is on
    assert env.jit_debug() is True
    monkeypatch.setenv("DGX_JIT_DEBUG", "0")  # a DGX_* value wins
    assert env.jit_debug() is False
    monkeypatch.delenv("DGX_CACHE_DIR")
    monkeypatch.chdir(tmp_path)
    refused(run(["cache", "list"], DG_JIT_CACHE_DIR="kernels"), "DG_JIT_CACHE_DIR='kernels'", "absolute path")
    refused(run(["warmup", "--shapes", shapes(tmp_path, TINY)], DGX_AS_DEEP_GEMM="sure"), "DGX_AS_DEEP_GEMM='sure'")


def test_what_dgx_puts_under_a_cache_root_keeps_it_a_cache(tmp_cache, tmp_path):
    """Every folder dgx itself writes under the cache root (plan records, DeepGEMM-style dumps) is one the store
    accepts there: two warmups in a row (the second answered from the plan record) and a listing all work."""
    from dgx import plan_record
    from dgx.cache.store import ROOT_EXTRAS

    assert {plan_record.PLANS_DIR, env.DEEPGEMM_DUMP_SUBDIR} <= ROOT_EXTRAS
    path = shapes(tmp_path, TINY)
    for _ in range(2):
        result = run(["warmup", "--shapes", path, "-j", "1"])
        assert result["code"] == 0 and "0 failed" in result["output"], result["output"]
    assert (tmp_cache / plan_record.PLANS_DIR).is_dir()
    assert run(["cache", "list"])["code"] == 0
