"""The `dgx` command through click's test runner (CPU only)."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgx import cli
from dgx.cache import KernelCache
from dgx import env, jit, runtime, warmup

ROOT = Path(__file__).resolve().parents[1]


def _sass_analyzer_available() -> bool:
    try:
        from dgx import sass_tools
    except Exception:
        return False
    return hasattr(sass_tools, "analyze_cubin")


# --- info -----------------------------------------------------------------------------------------


def test_info_json(runner, tmp_cache):
    result = runner.invoke(cli.main, ["info", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("dgx", "cuda_bindings", "nvrtc", "driver", "gpus", "cache_root", "cache_entries", "nvdisasm", "env"):
        assert key in data, key
    assert data["dgx"] == cli.dgx.__version__
    assert re.fullmatch(r"\d+\.\d+", data["nvrtc"])
    assert data["cache_root"] == str(tmp_cache) and data["cache_entries"] == 0
    assert not tmp_cache.exists()  # info looks, it does not create the cache
    assert set(data["env"]) == {v.name for v in env.VARIABLES}
    assert data["env"]["DGX_CACHE_DIR"]["value"] == str(tmp_cache)
    if runtime.device_count() == 0:
        assert data["gpus"] == []


def test_info_text_without_gpu(runner, tmp_cache):
    result = runner.invoke(cli.main, ["info"])
    assert result.exit_code == 0, result.output
    assert "NVRTC" in result.output and str(tmp_cache) in result.output
    for var in env.VARIABLES:
        assert var.name in result.output
    if runtime.device_count() == 0:
        assert re.search(r"^GPU\s+none$", result.output, re.M)


# --- cache ----------------------------------------------------------------------------------------


def _fake_entries(root: Path, n: int = 2) -> list[str]:
    kc = KernelCache(root)
    keys = []
    for i in range(n):
        key = f"{i:02x}" * 32
        kc.store(key, b"\x7fELF" + bytes([i]) * 100, {"name": f"dgx_test_kernel_{i}", "compiler": "NVRTC 13.0"})
        keys.append(key)
    return keys


def test_cache_commands_round_trip(runner, tmp_cache, tmp_path, fresh_jit):
    result = runner.invoke(cli.main, ["cache", "path"])
    assert result.exit_code == 0 and result.stdout.strip() == str(tmp_cache)

    result = runner.invoke(cli.main, ["cache", "list"])
    assert result.exit_code == 0 and "no kernels" in result.output

    keys = _fake_entries(tmp_cache)
    result = runner.invoke(cli.main, ["cache", "list"])
    assert result.exit_code == 0, result.output
    assert keys[0][:16] in result.output and "dgx_test_kernel_1" in result.output and "2 kernels" in result.output

    listed = json.loads(runner.invoke(cli.main, ["cache", "list", "--json"]).stdout)
    assert [e["key"] for e in listed] == keys
    assert listed[0]["kernel"] == "dgx_test_kernel_0" and listed[0]["size"] == 104
    assert set(listed[0]) == {"key", "kernel", "size", "created", "compiler"}

    verified = json.loads(runner.invoke(cli.main, ["cache", "verify", "--json"]).stdout)
    assert verified | {"other_compiler": None} == {
        "ok": 2, "removed": 0, "corrupt": [], "compiler": verified["compiler"], "other_compiler": None
    }
    assert verified["other_compiler"] == ({} if verified["compiler"] == "NVRTC 13.0" else {"NVRTC 13.0": 2})

    bundle = tmp_path / "kernels.tar.gz"
    result = runner.invoke(cli.main, ["cache", "export", str(bundle)])
    assert result.exit_code == 0 and "exported 2 kernels" in result.output and bundle.exists()

    # Without --yes and without an answer, nothing is removed.
    result = runner.invoke(cli.main, ["cache", "clear"], input="n\n")
    assert result.exit_code != 0 and len(KernelCache(tmp_cache).entries()) == 2
    result = runner.invoke(cli.main, ["cache", "clear", "--yes"])
    assert result.exit_code == 0 and "removed 2 kernels" in result.output
    assert KernelCache(tmp_cache).entries() == []

    result = runner.invoke(cli.main, ["cache", "import", str(bundle)])
    assert result.exit_code == 0, result.output
    assert "imported 2 kernels, skipped 0" in result.output
    assert [e.key for e in KernelCache(tmp_cache).entries()] == keys
    result = runner.invoke(cli.main, ["cache", "import", str(bundle)])
    assert "imported 0 kernels, skipped 2" in result.output

    # A truncated cubin is found and removed by verify.
    cubin = KernelCache(tmp_cache).entry_dir(keys[1]) / "kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[:10])
    verified = json.loads(runner.invoke(cli.main, ["cache", "verify", "--json"]).stdout)
    assert verified["ok"] == 1 and verified["removed"] == 1 and verified["corrupt"][0]["key"] == keys[1]
    result = runner.invoke(cli.main, ["cache", "verify"])
    assert "1 ok, 0 removed" in result.output


def test_cache_list_shows_the_name_jit_records(runner, tmp_cache, monkeypatch, fresh_jit):
    """jit stores the kernel's name in the manifest; `cache list` shows it from there."""
    from dgx import compiler

    def fake_compile(source, kernel, options, want_ptx=False):
        return compiler.CompileResult(b"\x7fELF" + kernel.encode(), None, "", 0.01, tuple(options))

    monkeypatch.setattr(compiler, "compile_cubin", fake_compile)
    src = jit.KernelSource(name="dgx_named_kernel", source="// never compiled: compile_cubin is faked")
    jit.get_cubin(src, "sm_90a")
    key = jit.kernel_key(src, "sm_90a")
    manifest = KernelCache(tmp_cache).manifest(key)
    assert manifest["name"] == "dgx_named_kernel" and "kernel" not in manifest["extra"]
    (entry,) = KernelCache(tmp_cache).entries()
    assert entry.name == "dgx_named_kernel"
    listed = json.loads(runner.invoke(cli.main, ["cache", "list", "--json"]).stdout)
    assert [(e["key"], e["kernel"]) for e in listed] == [(key, "dgx_named_kernel")]
    result = runner.invoke(cli.main, ["cache", "list"])
    assert result.exit_code == 0 and re.search(rf"^{key[:16]} .* dgx_named_kernel$", result.output, re.M)


def test_cache_list_entry_without_a_name(runner, tmp_cache):
    """An entry whose manifest has no name (written before dgx recorded one) is still listed."""
    named = _fake_entries(tmp_cache, 1)[0]
    old = "ab" * 32
    KernelCache(tmp_cache).store(old, b"\x7fELF" + b"\x05" * 60, {"compiler": "NVRTC 12.9"})
    listed = json.loads(runner.invoke(cli.main, ["cache", "list", "--json"]).stdout)
    assert [(e["key"], e["kernel"]) for e in listed] == [(named, "dgx_test_kernel_0"), (old, None)]
    assert listed[1]["compiler"] == "NVRTC 12.9" and listed[1]["size"] == 64
    result = runner.invoke(cli.main, ["cache", "list"])
    assert result.exit_code == 0, result.output
    assert re.search(rf"^{old[:16]} .* \?$", result.output, re.M) and "2 kernels" in result.output


def test_cache_import_refuses_bad_bundles(runner, tmp_cache, tmp_path):
    keys = _fake_entries(tmp_cache, 1)
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"this is not a tar file")
    result = runner.invoke(cli.main, ["cache", "import", str(garbage)])
    assert result.exit_code == 1 and "nothing was imported" in result.output

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        data = b"planted"
        info = tarfile.TarInfo("../../outside/kernel.cubin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    result = runner.invoke(cli.main, ["cache", "import", str(evil)])
    assert result.exit_code == 1 and "refusing" in result.output
    assert not (tmp_path / "outside").exists()
    assert [e.key for e in KernelCache(tmp_cache).entries()] == keys

    result = runner.invoke(cli.main, ["cache", "import", str(tmp_path / "missing.tar.gz")])
    assert result.exit_code == 2
    result = runner.invoke(cli.main, ["cache", "export", str(tmp_path / "kernels.zip")])
    assert result.exit_code == 1 and ".tar.gz" in result.output


# --- inspect --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, groups", [("contiguous", 4), ("masked", 8), ("wgrad", None), ("k_grouped", 4)])
def test_inspect_grouped_kinds(runner, tmp_cache, kind, groups):
    grouping = ["--groups", str(groups)] if groups else []
    result = runner.invoke(cli.main, ["inspect", "--gemm", "256", "512", "256", "--kind", kind, *grouping, "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)
    prefix = {"wgrad": "dgx_fp8_gemm_nt_wgrad_n512_k256", "k_grouped": "dgx_fp8_gemm_nt_k_grouped_n512_k0"}.get(
        kind, f"dgx_fp8_gemm_nt_{kind}_n512_k256")
    assert report["kernel"].startswith(prefix) and report["qgmma"] > 0
    assert report["spill_instructions"] == 0


def test_inspect_gemm_names_deferred_promotion(runner, tmp_cache):
    # A decode shape: its 64-row tile promotes deferred, and the header says so (a prefill shape's does not).
    result = runner.invoke(cli.main, ["inspect", "--gemm", "64", "2112", "7168"])
    assert result.exit_code == 0, result.output
    assert "block 64x16" in result.output and "deferred promotion" in result.output
    result = runner.invoke(cli.main, ["inspect", "--gemm", "4096", "7168", "2048"])
    assert result.exit_code == 0, result.output
    assert "block 256x128" in result.output and "deferred promotion" not in result.output


def test_inspect_gemm_names_evict_first_b(runner, tmp_cache):
    # One row of 64-row tiles over K 16384 streams B as L2 evict-first (dgx.heuristics.with_streamed_b); 16-column
    # tiles over a small B (576 x 7168) and several rows of M tiles do not.
    result = runner.invoke(cli.main, ["inspect", "--gemm", "64", "7168", "16384"])
    assert result.exit_code == 0, result.output
    assert "B evict-first" in result.output
    for shape in (["64", "576", "7168"], ["4096", "7168", "16384"]):
        result = runner.invoke(cli.main, ["inspect", "--gemm", *shape])
        assert result.exit_code == 0, result.output
        assert "B evict-first" not in result.output


def test_inspect_usage_errors(runner, tmp_cache):
    result = runner.invoke(cli.main, ["inspect"])
    assert result.exit_code == 2 and "exactly one of --cubin, --key, --gemm" in result.output
    result = runner.invoke(cli.main, ["inspect", "--gemm", "64", "2112", "7168", "--key", "abcdef12"])
    assert result.exit_code == 2
    result = runner.invoke(cli.main, ["inspect", "--key", "0123456789abcdef"])
    assert result.exit_code == 1 and "no kernel" in result.output


@pytest.mark.skipif(not _sass_analyzer_available(), reason="sass_tools.analyze_cubin is not there yet")
def test_inspect_gemm_json_key_and_cubin(runner, tmp_cache, tmp_path, fresh_jit):
    result = runner.invoke(cli.main, ["inspect", "--gemm", "4096", "7168", "2048", "--json"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert isinstance(reports, list) and len(reports) == 1
    r = reports[0]
    for key in ("kernel", "registers", "shared_bytes", "local_bytes", "spill_instructions", "histogram", "qgmma"):
        assert key in r, key
    assert "ffma_runs" in r and "ffma_yield_set" in r
    assert r["kernel"].startswith("dgx_fp8_gemm_nt_n7168_k2048")
    assert r["qgmma"] > 0 and r["spill_instructions"] == 0 and r["local_bytes"] == 0

    # The kernel is now in the cache: inspect it by key prefix, and as a cubin file.
    (entry,) = KernelCache(tmp_cache).entries()
    result = runner.invoke(cli.main, ["inspect", "--key", entry.key[:12]])
    assert result.exit_code == 0, result.output
    assert r["kernel"] in result.output and "QGMMA" in result.output
    path = tmp_path / "k.cubin"
    path.write_bytes(KernelCache(tmp_cache).load(entry.key))
    result = runner.invoke(cli.main, ["inspect", "--cubin", str(path), "--json"])
    assert json.loads(result.stdout) == reports


# --- warmup ---------------------------------------------------------------------------------------


def test_warmup_tiny_shapes_twice(runner, tmp_cache, tmp_path, fresh_jit):
    shapes = tmp_path / "shapes.json"
    shapes.write_text(
        json.dumps(
            [
                {"kind": "dense", "n": 256, "k": 256, "max_m": 1024},
                {"kind": "m_grouped_contiguous", "n": 256, "k": 256, "groups": 4, "max_m": 512},
                {"kind": "wgrad", "n": 256, "k": 256, "max_m": 256},
            ]
        )
    )
    from dgx.kinds import Layout
    from dgx.warmup import dense_configs, grouped_configs, wgrad_configs

    expected = (
        len(dense_configs(256, 256, 1024, 132))
        + len(grouped_configs(Layout.CONTIGUOUS, 256, 256, 4, 512, 132))
        + len(wgrad_configs(256, 256, 1, 256, 132, False))
        + 2  # the helper kernels every GEMM warmup builds (SFA layout conversion, UE8M0 unpack)
    )
    assert expected >= 6  # every kind contributes
    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes), "--json", "-j", "2"])
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout)
    assert "of them, 2 helper kernels any GEMM call can launch, whatever its shape: SFA layout conversion" in result.stderr
    assert set(first) == {"kernels", "compiled", "cached", "failed", "seconds"}
    assert (first["kernels"], first["compiled"], first["cached"], first["failed"]) == (expected, expected, 0, 0)
    assert "s to enumerate)" in result.stderr

    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes), "--json"])
    assert result.exit_code == 0, result.output
    assert f"{expected} distinct kernels (reusing the plan of an identical warmup), 0 to compile" in result.stderr
    second = json.loads(result.stdout)
    assert (second["kernels"], second["compiled"], second["cached"], second["failed"]) == (expected, 0, expected, 0)

    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes)])
    assert result.exit_code == 0 and f"{expected} kernels: 0 compiled, {expected} cached, 0 failed" in result.stdout
    assert len(KernelCache(tmp_cache).entries()) == expected


def test_warmup_malformed_shapes_file(runner, tmp_cache, tmp_path):
    shapes = tmp_path / "bad.json"
    shapes.write_text(json.dumps([{"kind": "dense", "n": 256, "k": 256}, {"kind": "dense", "n": 256, "k": "7168"}]))
    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes)])
    assert result.exit_code == 1
    assert "entry 1: field 'k': expected a positive integer, got '7168'" in result.output
    assert not tmp_cache.exists() or KernelCache(tmp_cache).entries() == []


def test_warmup_needs_exactly_one_source(runner, tmp_cache, tmp_path):
    result = runner.invoke(cli.main, ["warmup"])
    assert result.exit_code == 2 and "exactly one of --preset NAME or --shapes FILE" in result.output
    shapes = tmp_path / "s.json"
    shapes.write_text("[]")
    result = runner.invoke(cli.main, ["warmup", "--preset", "deepseek-v3", "--shapes", str(shapes)])
    assert result.exit_code == 2
    result = runner.invoke(cli.main, ["warmup", "--preset", "no-such-model"])
    assert result.exit_code == 2 and "deepseek-v3" in result.output


def test_warmup_exit_status_on_failure(runner, tmp_cache, monkeypatch, tmp_path, fresh_jit):
    monkeypatch.setenv("DGX_JIT_DUMP_DIR", str(tmp_path / "dump"))
    bad = jit.KernelSource(name="dgx_broken_kernel", source='extern "C" __global__ void dgx_broken_kernel() { nope; }')

    def broken_plan(entries, **kwargs):
        return warmup.Plan("sm_90a", 132, [warmup.PlannedKernel(jit.kernel_key(bad, "sm_90a"), bad, ("x",))])

    monkeypatch.setattr(warmup, "plan", broken_plan)
    shapes = tmp_path / "s.json"
    shapes.write_text(json.dumps([{"kind": "dense", "n": 256, "k": 256}]))
    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["failed"] == 1
    assert "FAILED dgx_broken_kernel" in result.stderr and "nope" in result.stderr


# --- bench ----------------------------------------------------------------------------------------


def test_bench_without_gpu(runner):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    result = runner.invoke(cli.main, ["bench", "--suite", "dense", "--no-peers"])
    assert result.exit_code != 0
    try:
        from dgx.bench import runner as bench_runner
    except Exception:
        assert "dgx bench is not available" in result.output
    else:
        assert bench_runner.NO_GPU_PREFIX in result.output


def test_bench_options(runner):
    result = runner.invoke(cli.main, ["bench", "--help"])
    assert result.exit_code == 0
    for option in ("--suite", "--shapes", "--peers / --no-peers", "--repeat", "--json", "--markdown", "--plot"):
        assert option in result.output
    for suite in ("dense", "contiguous", "masked", "wgrad", "k_grouped", "all"):
        assert suite in result.output
    assert runner.invoke(cli.main, ["bench", "--suite", "sparse"]).exit_code == 2


# --- docs agree with the code ---------------------------------------------------------------------


def test_readme_documents_env_and_commands():
    readme = (ROOT / "README.md").read_text()
    reference = (ROOT / "docs" / "CLI.md").read_text()  # the README links it for the commands and variables
    assert "(docs/CLI.md)" in readme
    # a change's notes (notes/*.md in the docs folder) document its variables until docs/CLI.md takes them
    notes = "".join(p.read_text() for p in sorted((ROOT / "docs" / "notes").glob("*.md")))
    for var in env.VARIABLES:
        assert f"`{var.name}`" in reference + notes, f"{var.name} is not documented in docs/CLI.md"
    assert "python3 -m pip install -e '.[torch]' && dgx warmup --preset deepseek-v3" in readme
    assert "bash .ci/run" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = "python -m pytest -q"
    assert test_command in ci and test_command in readme
    for command in ("info", "cache", "inspect", "warmup", "bench"):
        assert f"dgx {command}" in reference
    assert "docs/PERFLOG.md" in readme


def test_console_script_entry_point():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["dgx"] == "dgx.cli:main"
    assert set(cli.main.commands) == {"info", "cache", "inspect", "warmup", "bench"}
    assert set(cli.main.commands["cache"].commands) == {"path", "list", "verify", "clear", "export", "import"}
