"""Mismatched installs and the smaller faults of issue-style use: a bundle or cache from another NVRTC,
bundle names and places, corruption, clearing, and what concurrent warmups report (CPU only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgx import cli
from dgx.cache import KernelCache, export_bundle
from dgx import install, jit, warmup
from dgx.errors import JitStrictError
from dgx.kernels.fp8_gemm import GemmConfig

TINY = [{"kind": "dense", "n": 256, "k": 256, "max_m": 64}]
OTHER_NVRTC = "12.9"


def foreign_cache(root: Path, n: int = 3) -> list[str]:
    """A cache whose entries another NVRTC built (as a build machine with another install would have)."""
    kc = KernelCache(root)
    keys = [f"{i + 1:02x}" * 32 for i in range(n)]
    for i, key in enumerate(keys):
        kc.store(key, b"\x7fELF" + bytes([i]) * 64, {"name": f"dgx_kernel_{i}", "compiler": f"NVRTC {OTHER_NVRTC}"})
    return keys


def test_import_and_verify_name_another_nvrtc(runner, tmp_path, tmp_cache, fresh_jit):
    bundle = tmp_path / "other.tar.gz"
    built_by = dict(jit.install_summary(), nvrtc=OTHER_NVRTC)
    export_bundle(KernelCache(foreign_cache(tmp_path / "build") and tmp_path / "build"), bundle,
                  metadata={"built_by": built_by})
    result = runner.invoke(cli.main, ["cache", "import", str(bundle)])
    assert result.exit_code == 0, result.output
    assert f"this bundle was built with NVRTC {OTHER_NVRTC}" in result.stderr
    assert f"3 of the 3 kernels in bundle {bundle} were built by another compiler" in result.stderr
    assert "unusable on this install" in result.stderr and "imported 3 kernels" in result.stdout

    verified = runner.invoke(cli.main, ["cache", "verify"])
    assert verified.exit_code == 0
    assert f"3 of the 3 kernels in {tmp_cache} were built by another compiler" in verified.output
    assert json.loads(runner.invoke(cli.main, ["cache", "verify", "--json"]).stdout)["other_compiler"] == {
        f"NVRTC {OTHER_NVRTC}": 3
    }


def test_bundle_records_this_install(runner, tmp_path, tmp_cache):
    foreign_cache(tmp_cache, 1)
    out = tmp_path / "b.tar.gz"
    assert runner.invoke(cli.main, ["cache", "export", str(out)]).exit_code == 0
    from dgx.cache.bundle import read_bundle_metadata

    assert read_bundle_metadata(out)["built_by"] == jit.install_summary()


def test_strict_mode_names_the_mismatch(tmp_cache, monkeypatch, fresh_jit):
    foreign_cache(tmp_cache)
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    with pytest.raises(JitStrictError) as info:
        jit.get_cubin(GemmConfig(n=256, k=256, block_m=64, block_n=16, stages=4).render(), "sm_90a")
    message = str(info.value)
    assert "dgx warmup" in message
    assert f"3 of the 3 kernels in the cache at {tmp_cache} were built by another compiler" in message
    assert install.compiler_label() in message


def test_info_prints_the_key_fingerprint(runner, tmp_cache):
    result = runner.invoke(cli.main, ["info"])
    assert f"fingerprint {jit.key_fingerprint('sm_90a')}" in result.output
    assert len(jit.key_fingerprint('sm_90a')) == 16


# --- item 7: the smaller faults ------------------------------------------------------------------------


def test_export_names_and_places(runner, tmp_path, tmp_cache):
    foreign_cache(tmp_cache, 1)
    result = runner.invoke(cli.main, ["cache", "export", str(tmp_path / "k.zip")])
    assert result.exit_code == 1 and "must end in .tar.gz" in result.output
    assert "compression" not in result.output
    missing = tmp_path / "no" / "such" / "dir"
    result = runner.invoke(cli.main, ["cache", "export", str(missing / "k.tar.gz")])
    assert result.exit_code == 1 and str(missing) in result.output
    assert ".part" not in result.output and "Traceback" not in result.output


def test_corruption_is_one_line_and_warmup_says_it_rebuilds(runner, tmp_path, tmp_cache, fresh_jit):
    shapes = tmp_path / "s.json"
    shapes.write_text(json.dumps(TINY))
    assert runner.invoke(cli.main, ["warmup", "--shapes", str(shapes), "-j", "1"]).exit_code == 0
    entries = KernelCache(tmp_cache).entries()
    assert len(entries) == 3  # the entry's kernel and the two helper kernels every GEMM warmup builds
    entry = entries[0]
    cubin = KernelCache(tmp_cache).entry_dir(entry.key) / "kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[:100])
    jit._caches.clear()
    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "dgx: warning: kernel cache entry" in result.stderr and "was corrupt" in result.stderr
    assert "warnings.warn" not in result.stderr and "CacheCorruptionWarning" not in result.stderr
    assert "1 corrupt cache entry removed; rebuilding" in result.stderr
    assert "1 compiled" in result.stdout


def test_clear_leaves_no_locks_or_shards(runner, tmp_path, tmp_cache, fresh_jit):
    shapes = tmp_path / "s.json"
    shapes.write_text(json.dumps(TINY))
    assert runner.invoke(cli.main, ["warmup", "--shapes", str(shapes), "-j", "1"]).exit_code == 0
    assert list((tmp_cache / "locks").iterdir())
    result = runner.invoke(cli.main, ["cache", "clear", "--yes"])
    assert result.exit_code == 0 and "removed 3 kernels" in result.output  # with the two helpers
    assert list((tmp_cache / "locks").iterdir()) == []
    # (plans/: the warmup's plan record, which names kernels and holds none)
    assert sorted(p.name for p in tmp_cache.iterdir()) == ["locks", "plans", "tmp"]


def test_lock_survives_a_clear_between_open_and_flock(tmp_path):
    """A lock file deleted by clear() while another process had it open is not a second, separate lock."""
    kc = KernelCache(tmp_path / "c")
    key = "ab" * 32
    with kc._key_lock(key):
        kc._remove_idle_locks()  # held: kept
        assert (tmp_path / "c" / "locks" / f"{key}.lock").exists()
    kc._remove_idle_locks()
    assert not (tmp_path / "c" / "locks" / f"{key}.lock").exists()
    with kc._key_lock(key):
        pass


def test_warmup_says_what_another_process_built(runner, tmp_path, tmp_cache, monkeypatch):
    def shared_run(the_plan, **kwargs):
        kwargs["progress"](warmup.Progress(2, 2, 0, 1.0, "k", None, compiled=1, elsewhere=1))
        return warmup.WarmupResult(kernels=2, compiled=1, cached=1, built_elsewhere=1, seconds=1.0)

    monkeypatch.setattr(warmup, "run", shared_run)
    shapes = tmp_path / "s.json"
    shapes.write_text(json.dumps(TINY))
    result = runner.invoke(cli.main, ["warmup", "--shapes", str(shapes)])
    assert result.exit_code == 0, result.output
    assert "2/2 done (1 compiled here, 1 built by another process)" in result.stderr
    assert "1 compiled, 1 cached (1 of them built meanwhile by another process)" in result.stdout


def test_dtype_errors_say_what_each_argument_accepts():
    torch = pytest.importorskip("torch")
    from dgx.tensors import as_view

    t = torch.zeros(4, 4, dtype=torch.float16)
    expected = {"A": "float8_e4m3fn", "SFB": "float32", "d": "bfloat16/float32", "m_indices": "int32"}
    for name, accepted in expected.items():
        with pytest.raises(TypeError, match=f"^{name}: expected a tensor of dtype {accepted}; got torch.float16$"):
            as_view(t, name)
