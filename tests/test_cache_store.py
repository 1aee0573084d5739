"""KernelCache on one process: layout, security of the root, atomic writes, corruption, verify, clear."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings

import pytest

from dgx import cache
from dgx.cache import (
    CacheCorruptionWarning,
    CacheError,
    CacheMissError,
    CacheSecurityError,
    KernelCache,
    compute_key,
)

KEY = compute_key({"kernel": "a"})
KEY2 = compute_key({"kernel": "b"})
KEY3 = compute_key({"kernel": "c"})
REPO = os.path.dirname(os.path.dirname(os.path.abspath(cache.__file__)))


class Builder:
    """A build function that counts its calls and returns a distinct cubin per key."""

    def __init__(self, key, extra=None):
        self.key = key
        self.calls = 0
        self.extra = extra if extra is not None else {"name": f"kernel_{key[:6]}", "compiler": "nvrtc 13.0"}

    def __call__(self):
        self.calls += 1
        return b"\x7fELF" + self.key.encode() * 40, dict(self.extra)


def never_build():
    raise AssertionError("build must not be called")


@pytest.fixture
def root(tmp_path):
    return tmp_path / "cache"


def entry(root, key):
    return root / key[:2] / key


def fill(c, *keys):
    for key in keys:
        c.get_or_build(key, Builder(key))


# -- the root -------------------------------------------------------------------------------------


def test_root_is_created_private_parents_default(tmp_path):
    old = os.umask(0o022)
    try:
        KernelCache(tmp_path / "p1" / "p2" / "root")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "p1" / "p2" / "root").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "p1").st_mode) == 0o755
    for sub in ("tmp", "locks"):
        assert stat.S_IMODE(os.stat(tmp_path / "p1" / "p2" / "root" / sub).st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o707, 0o702, 0o777])
def test_root_writable_by_others_is_refused(root, mode):
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(CacheSecurityError) as info:
        KernelCache(root)
    msg = str(info.value)
    assert "someone else's cubin would run on our GPU" in msg
    assert f"chmod 700 {root}" in msg
    assert "writable by" in msg
    assert not (root / "tmp").exists()  # refused before anything was written
    os.chmod(root, 0o700)
    KernelCache(root)  # the fix works


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another uid")
def test_root_owned_by_another_uid_is_refused(root):
    root.mkdir(mode=0o700)
    os.chown(root, 4242, 4242)
    with pytest.raises(CacheSecurityError, match="owned by uid 4242"):
        KernelCache(root)


def test_symlinked_root_is_resolved_and_checked(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    c = KernelCache(link)
    assert c.root == real
    os.chmod(real, 0o777)
    with pytest.raises(CacheSecurityError):
        KernelCache(link)


def test_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(CacheError, match="not a directory"):
        KernelCache(tmp_path / "f")


# -- hits, builds, manifest -----------------------------------------------------------------------


def test_build_once_then_memory_then_disk(root):
    c = KernelCache(root)
    build = Builder(KEY)
    cubin = c.get_or_build(KEY, build)
    assert c.get_or_build(KEY, build) == cubin
    assert build.calls == 1
    assert c.stats == cache.CacheStats(hits_memory=1, hits_disk=0, misses=1, builds=1, corrupt=0)

    fresh = KernelCache(root)
    assert fresh.get_or_build(KEY, never_build) == cubin
    assert fresh.load(KEY) == cubin
    assert fresh.stats == cache.CacheStats(hits_memory=1, hits_disk=1, misses=0, builds=0, corrupt=0)
    assert fresh.contains(KEY) and not fresh.contains(KEY2)
    assert fresh.load(KEY2) is None


def test_entry_layout_and_manifest(root):
    c = KernelCache(root)
    summary = {"kernel": "fp8_gemm_nt", "n": 4096, "k": 7168}
    cubin = c.get_or_build(KEY, Builder(KEY, {"name": "fp8_gemm_nt", "inputs": summary, "compiler": "nvrtc 13.0.88", "sass_pass": 3}))
    assert sorted(os.listdir(entry(root, KEY))) == ["kernel.cubin", "manifest.json"]
    assert (entry(root, KEY) / "kernel.cubin").read_bytes() == cubin
    on_disk = json.loads((entry(root, KEY) / "manifest.json").read_text())
    assert on_disk == c.manifest(KEY)
    assert on_disk["format"] == cache.FORMAT_VERSION
    assert on_disk["key"] == KEY
    assert on_disk["inputs"] == summary
    assert on_disk["name"] == "fp8_gemm_nt"
    assert on_disk["compiler"] == "nvrtc 13.0.88"
    assert on_disk["extra"] == {"sass_pass": 3}
    assert on_disk["cubin_size"] == len(cubin)
    assert abs(on_disk["created"] - time.time()) < 60
    assert on_disk["cubin_sha256"] == hashlib.sha256(cubin).hexdigest()
    [info] = c.entries()
    assert (info.key, info.size, info.name, info.compiler, info.inputs) == (KEY, len(cubin), "fp8_gemm_nt", "nvrtc 13.0.88", summary)
    assert c.manifest(KEY2) is None


@pytest.mark.parametrize(
    "extra, error",
    [({"key": "x"}, ValueError), ({"cubin_sha256": "x"}, ValueError), ({"blob": b"x"}, TypeError), ({"inputs": "x"}, TypeError)],
)
def test_bad_manifest_extra_is_refused_and_stores_nothing(root, extra, error):
    c = KernelCache(root)
    with pytest.raises(error):
        c.get_or_build(KEY, Builder(KEY, extra))
    assert not entry(root, KEY).exists()


@pytest.mark.parametrize("result", [b"x", (b"", {}), ("text", {}), (b"x", ["not", "a", "dict"])])
def test_bad_build_result_is_refused(root, result):
    c = KernelCache(root)
    with pytest.raises((TypeError, ValueError)):
        c.get_or_build(KEY, lambda: result)
    assert not c.contains(KEY)


def test_allow_build_false_raises_cache_miss(root):
    c = KernelCache(root)
    with pytest.raises(CacheMissError) as info:
        c.get_or_build(KEY, never_build, allow_build=False)
    assert info.value.key == KEY
    assert KEY in str(info.value)
    fill(c, KEY)
    assert KernelCache(root).get_or_build(KEY, never_build, allow_build=False)


def test_store_keeps_the_first_writer(root):
    c = KernelCache(root)
    c.store(KEY, b"first", {"name": "a"})
    c.store(KEY, b"second", {"name": "b"})
    assert c.load(KEY) == b"first"
    fresh = KernelCache(root)
    assert fresh.load(KEY) == b"first"
    assert fresh.manifest(KEY)["name"] == "a"


@pytest.mark.parametrize("bad", ["../../etc/passwd", KEY.upper(), KEY[:-1], "", 5])
def test_malformed_keys_are_refused(root, bad):
    c = KernelCache(root)
    with pytest.raises(ValueError):
        c.load(bad)
    with pytest.raises(ValueError):
        c.get_or_build(bad, never_build)
    with pytest.raises(ValueError):
        c.store(bad, b"x")


def test_recursive_build_of_the_same_key_is_refused(root):
    c = KernelCache(root)
    with pytest.raises(CacheError, match="requested again"):
        c.get_or_build(KEY, lambda: c.get_or_build(KEY, Builder(KEY)))
    assert c.get_or_build(KEY, Builder(KEY))  # the lock was released


def test_threads_build_once(root):
    c = KernelCache(root)
    calls = []

    def build():
        calls.append(1)
        time.sleep(0.2)
        return b"cubin", {}

    results = []
    threads = [threading.Thread(target=lambda: results.append(c.get_or_build(KEY, build))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [b"cubin"] * 8


# -- atomic writes --------------------------------------------------------------------------------


def test_failing_build_leaves_nothing(root):
    c = KernelCache(root)

    def build():
        raise RuntimeError("nvrtc said no")

    with pytest.raises(RuntimeError, match="nvrtc said no"):
        c.get_or_build(KEY, build)
    assert not (root / KEY[:2]).exists()
    assert os.listdir(root / "tmp") == []
    assert not c.contains(KEY)
    assert c.get_or_build(KEY, Builder(KEY))  # lock released, a retry builds


def test_failing_write_leaves_nothing(root, monkeypatch):
    c = KernelCache(root)
    from dgx.cache import store as store_mod

    real = store_mod.write_file

    def write_file(directory, name, data):
        if name == "manifest.json":
            raise OSError(28, "No space left on device")
        real(directory, name, data)

    monkeypatch.setattr(store_mod, "write_file", write_file)
    with pytest.raises(OSError, match="No space"):
        c.get_or_build(KEY, Builder(KEY))
    assert os.listdir(root / "tmp") == []
    assert not entry(root, KEY).exists()


def test_leftover_temp_dirs_do_not_confuse_loads(root):
    c = KernelCache(root)
    fill(c, KEY2)
    # what a writer that died before its rename leaves: a complete-looking entry under tmp/
    for name, age in (("new-fresh", 0), ("new-stale", 2 * 3600)):
        d = root / "tmp" / name
        d.mkdir()
        (d / "kernel.cubin").write_bytes(b"leftover")
        (d / "manifest.json").write_text(json.dumps({"format": 1, "key": KEY}))
        old = time.time() - age
        os.utime(d, (old, old))
    (root / "tmp" / "stray-file").write_bytes(b"")

    fresh = KernelCache(root)  # sweeps leftovers older than an hour, keeps young ones (a writer may be busy)
    assert sorted(os.listdir(root / "tmp")) == ["new-fresh", "stray-file"]
    assert fresh.load(KEY) is None and not fresh.contains(KEY)
    assert [e.key for e in fresh.entries()] == [KEY2]
    assert fresh.verify().ok == (KEY2,)
    build = Builder(KEY)
    assert fresh.get_or_build(KEY, build) != b"leftover"
    assert build.calls == 1


def test_crash_between_write_and_rename_leaves_nothing_loadable(root):
    KernelCache(root)
    code = (
        "import os, sys\n"
        "from cache import KernelCache\n"
        "c = KernelCache(sys.argv[1])\n"
        "os.rename = lambda *a, **k: os._exit(3)  # the process dies right before the rename\n"
        "c.get_or_build(sys.argv[2], lambda: (b'complete cubin', {'name': 'k'}))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code, str(root), KEY], env=env, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    [leftover] = os.listdir(root / "tmp")
    assert sorted(os.listdir(root / "tmp" / leftover)) == ["kernel.cubin", "manifest.json"]  # fully written

    c = KernelCache(root)
    assert not c.contains(KEY)
    assert c.entries() == []
    build = Builder(KEY)
    c.get_or_build(KEY, build)
    assert build.calls == 1


# -- corruption -----------------------------------------------------------------------------------


def test_truncated_cubin_is_detected_removed_and_rebuilt(root):
    fill(KernelCache(root), KEY)
    path = entry(root, KEY) / "kernel.cubin"
    good = path.read_bytes()
    path.write_bytes(good[:10])

    c = KernelCache(root)
    build = Builder(KEY)
    with pytest.warns(CacheCorruptionWarning, match=r"truncated"):
        assert c.get_or_build(KEY, build) == good
    assert build.calls == 1
    assert path.read_bytes() == good
    assert c.stats.corrupt == 1 and c.stats.builds == 1
    assert KernelCache(root).verify().ok == (KEY,)


def _set_manifest(d, **changes):
    m = json.loads((d / "manifest.json").read_text())
    m.update(changes)
    (d / "manifest.json").write_text(json.dumps(m))


def _flip_cubin_byte(d):
    data = bytearray((d / "kernel.cubin").read_bytes())
    data[-1] ^= 0xFF
    (d / "kernel.cubin").write_bytes(bytes(data))


TAMPERINGS = {
    "cubin altered": (_flip_cubin_byte, "sha256"),
    "cubin grown": (lambda d: (d / "kernel.cubin").write_bytes((d / "kernel.cubin").read_bytes() + b"x"), "bytes"),
    "cubin missing": (lambda d: (d / "kernel.cubin").unlink(), "kernel.cubin is missing"),
    "cubin symlink": (lambda d: ((d / "kernel.cubin").unlink(), (d / "kernel.cubin").symlink_to("/etc/hostname")), "symlink"),
    "manifest missing": (lambda d: (d / "manifest.json").unlink(), "manifest.json is missing"),
    "manifest sha altered": (lambda d: _set_manifest(d, cubin_sha256="0" * 64), "sha256"),
    "manifest size altered": (lambda d: _set_manifest(d, cubin_size=1), "bytes"),
    "manifest key altered": (lambda d: _set_manifest(d, key=KEY2), "names key"),
    "manifest format": (lambda d: _set_manifest(d, format=99), "format"),
    "manifest not json": (lambda d: (d / "manifest.json").write_bytes(b'{"format": 1, "key"'), "not valid JSON"),
    "manifest a list": (lambda d: (d / "manifest.json").write_text("[1, 2]"), "not an object"),
    "manifest NaN": (lambda d: (d / "manifest.json").write_text('{"format": NaN}'), "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(TAMPERINGS))
def test_altered_entry_is_never_returned(root, name):
    tamper, reason = TAMPERINGS[name]
    fill(KernelCache(root), KEY, KEY2)
    tamper(entry(root, KEY))

    c = KernelCache(root)
    with pytest.warns(CacheCorruptionWarning, match=reason):
        assert c.load(KEY) is None
    assert not entry(root, KEY).exists()  # removed
    assert c.stats.corrupt == 1
    assert c.load(KEY2) is not None  # the neighbour is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gone now: a plain miss, no second warning
        assert c.load(KEY) is None


def test_entry_copied_under_another_key_is_detected(root):
    fill(KernelCache(root), KEY)
    (root / KEY2[:2]).mkdir(exist_ok=True)
    shutil.copytree(entry(root, KEY), entry(root, KEY2))
    c = KernelCache(root)
    with pytest.warns(CacheCorruptionWarning, match="names key"):
        assert c.load(KEY2) is None
    assert not entry(root, KEY2).exists()
    assert c.load(KEY) is not None


def test_corrupt_entry_without_build_permission_is_a_miss(root):
    fill(KernelCache(root), KEY)
    _flip_cubin_byte(entry(root, KEY))
    c = KernelCache(root)
    with pytest.warns(CacheCorruptionWarning), pytest.raises(CacheMissError):
        c.get_or_build(KEY, never_build, allow_build=False)
    assert not entry(root, KEY).exists()


def test_verify_reports_and_removes_corrupt_entries(root):
    c = KernelCache(root)
    fill(c, KEY, KEY2, KEY3)
    (entry(root, KEY) / "kernel.cubin").write_bytes(b"trunc")
    _set_manifest(entry(root, KEY3), key=KEY)

    report = KernelCache(root).verify(remove=False)
    assert report.ok == (KEY2,) and set(report.corrupt) == {KEY, KEY3} and not report.removed
    assert entry(root, KEY).exists() and entry(root, KEY3).exists()
    assert "bytes" in report.reasons[KEY] and "names key" in report.reasons[KEY3]

    v = KernelCache(root)
    report = v.verify()
    assert report.ok == (KEY2,) and set(report.corrupt) == {KEY, KEY3} and report.removed
    assert not entry(root, KEY).exists() and not entry(root, KEY3).exists()
    assert v.stats.corrupt == 2
    assert [e.key for e in v.entries()] == [KEY2]
    assert v.verify().corrupt == ()


def test_clear_removes_everything(root):
    c = KernelCache(root)
    fill(c, KEY, KEY2, KEY3)
    assert c.clear() == 3
    assert c.entries() == []
    assert c.load(KEY) is None  # the in-memory copy went too
    assert c.clear() == 0
    build = Builder(KEY)
    c.get_or_build(KEY, build)
    assert build.calls == 1
