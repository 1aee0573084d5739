"""Bundles: export/import round trip; every kind of tampered archive is refused and imports nothing."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile

import pytest

from dgx.cache import (
    BundleError,
    CacheCorruptionWarning,
    CacheMissError,
    KernelCache,
    compute_key,
    export_bundle,
    import_bundle,
)

KEYS = [compute_key({"kernel": name}) for name in ("a", "b", "c")]
OTHER = compute_key({"kernel": "already here"})


def never_build():
    raise AssertionError("build must not be called")


@pytest.fixture
def src(tmp_path):
    c = KernelCache(tmp_path / "src")
    for i, key in enumerate(KEYS):
        c.store(key, b"\x7fELF" + bytes([i]) * 300, {"name": f"k{i}", "inputs": {"i": i}, "compiler": "nvrtc 13.0"})
    return c


@pytest.fixture
def bundle(src, tmp_path):
    path = tmp_path / "kernels.tar.gz"
    assert export_bundle(src, path) == len(KEYS)
    return path


@pytest.fixture
def dest(tmp_path):
    c = KernelCache(tmp_path / "dest")
    c.store(OTHER, b"unrelated", {"name": "other"})
    return c


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.join(rel, d) + "/"] = None
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.join(rel, f)] = fh.read()
    return out


def read_members(path):
    with tarfile.open(path, "r:*") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]


def write_tar(path, members, mode="w:gz"):
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return path


def reg(name, data):
    return tarfile.TarInfo(name), data


def special(name, kind, linkname=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


# -- round trip -----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz", ".tar.xz", ".txz"])
def test_round_trip_into_another_root_hits_without_build(src, dest, tmp_path, suffix):
    path = tmp_path / f"kernels{suffix}"
    assert export_bundle(src, path) == 3
    report = import_bundle(dest, path)
    assert report.imported == tuple(sorted(KEYS)) and report.skipped == ()

    fresh = KernelCache(dest.root)
    for key in KEYS:
        assert fresh.get_or_build(key, never_build, allow_build=False) == src.load(key)
        assert fresh.manifest(key) == src.manifest(key)  # manifests travel unchanged
    assert fresh.stats.builds == 0 and fresh.stats.hits_disk == 3
    assert fresh.verify().ok == tuple(sorted(KEYS + [OTHER]))
    assert os.listdir(fresh.root / "tmp") == []


def test_import_skips_entries_already_present(src, dest, bundle):
    dest.store(KEYS[1], src.load(KEYS[1]))
    report = import_bundle(dest, bundle)
    assert report.skipped == (KEYS[1],)
    assert sorted(report.imported) == sorted(set(KEYS) - {KEYS[1]})
    again = import_bundle(dest, bundle)
    assert again.imported == () and sorted(again.skipped) == sorted(KEYS)


def test_export_is_reproducible_and_holds_only_entry_files(src, bundle, tmp_path):
    second = tmp_path / "again.tar.gz"
    export_bundle(src, second)
    assert bundle.read_bytes() == second.read_bytes()
    names = sorted(m.name for m, _ in read_members(bundle))
    assert names == sorted(f"{k}/{f}" for k in KEYS for f in ("kernel.cubin", "manifest.json"))
    assert all(m.isfile() and m.uid == 0 and m.uname == "" for m, _ in read_members(bundle))


def test_export_selected_keys_and_missing_key(src, tmp_path):
    assert export_bundle(src, tmp_path / "one.tar.xz", keys=[KEYS[2]]) == 1
    assert [m.name.split("/")[0] for m, _ in read_members(tmp_path / "one.tar.xz")] == [KEYS[2]] * 2
    with pytest.raises(CacheMissError):
        export_bundle(src, tmp_path / "two.tar.xz", keys=[KEYS[0], OTHER])
    assert not (tmp_path / "two.tar.xz").exists()
    assert [p for p in os.listdir(tmp_path) if p.endswith(".part")] == []
    with pytest.raises(ValueError, match="must end in"):
        export_bundle(src, tmp_path / "kernels.zip")


def test_export_leaves_out_corrupt_entries(src, tmp_path):
    cubin = src.entry_dir(KEYS[0]) / "kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[:-1])
    fresh = KernelCache(src.root)
    with pytest.warns(CacheCorruptionWarning):
        assert export_bundle(fresh, tmp_path / "k.tar.gz") == 2
    assert KEYS[0] not in {m.name.split("/")[0] for m, _ in read_members(tmp_path / "k.tar.gz")}


# -- refused bundles ------------------------------------------------------------------------------


def _tamper_cubin(members):
    out = []
    for info, data in members:
        if info.name == f"{KEYS[2]}/kernel.cubin":
            data = data[:-1] + bytes([data[-1] ^ 1])
        out.append((info, data))
    return out


def _replace(members, name, new):
    return [new if info.name == name else (info, data) for info, data in members]


def _rename_entry(members):
    # a valid entry of KEYS[2] presented under another key's directory
    wrong = compute_key({"kernel": "wrong"})
    return [(tarfile.TarInfo(info.name.replace(KEYS[2], wrong)), data) for info, data in members]


def _manifest_of(members, key, **changes):
    [(_, raw)] = [(i, d) for i, d in members if i.name == f"{key}/manifest.json"]
    m = json.loads(raw)
    m.update(changes)
    return json.dumps(m).encode()


TAMPERED = {
    "cubin altered": (_tamper_cubin, "sha256"),
    "path traversal": (lambda ms: ms + [reg("../x", b"evil")], r"'\.\.'"),
    "nested traversal": (lambda ms: ms + [reg(f"{KEYS[0]}/../../x", b"evil")], r"'\.\.'"),
    "absolute path": (lambda ms: ms + [reg("/tmp/dgx-evil", b"evil")], "absolute"),
    "symlink member": (lambda ms: ms + [special("evil", tarfile.SYMTYPE, "/etc/passwd")], "symlink"),
    "symlink as cubin": (
        lambda ms: _replace(ms, f"{KEYS[2]}/kernel.cubin", special(f"{KEYS[2]}/kernel.cubin", tarfile.SYMTYPE, "/etc/passwd")),
        "symlink",
    ),
    "hard link": (lambda ms: ms + [special("evil", tarfile.LNKTYPE, f"{KEYS[0]}/kernel.cubin")], "hard link"),
    "device": (lambda ms: ms + [special("evil", tarfile.CHRTYPE)], "device"),
    "fifo": (lambda ms: ms + [special("evil", tarfile.FIFOTYPE)], "not a regular file"),
    "unexpected file": (lambda ms: ms + [reg(f"{KEYS[2]}/payload.so", b"\x7fELF")], "unexpected name"),
    "unexpected top-level file": (lambda ms: ms + [reg("README", b"hi")], "unexpected name"),
    "unexpected directory": (lambda ms: ms + [special("somedir", tarfile.DIRTYPE)], "unexpected directory"),
    "manifest key mismatch": (_rename_entry, "names key"),
    "malformed manifest": (lambda ms: _replace(ms, f"{KEYS[2]}/manifest.json", reg(f"{KEYS[2]}/manifest.json", b"{not json")), "not valid JSON"),
    "manifest lies about sha": (
        lambda ms: _replace(ms, f"{KEYS[2]}/manifest.json", reg(f"{KEYS[2]}/manifest.json", _manifest_of(ms, KEYS[2], cubin_sha256="f" * 64))),
        "sha256",
    ),
    "missing cubin": (lambda ms: [(i, d) for i, d in ms if i.name != f"{KEYS[2]}/kernel.cubin"], "lacks kernel.cubin"),
    "duplicate member": (lambda ms: ms + [reg(f"{KEYS[0]}/kernel.cubin", b"second copy")], "twice"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_bundle_is_refused_and_cache_unchanged(bundle, dest, tmp_path, case):
    tamper, reason = TAMPERED[case]
    bad = write_tar(tmp_path / "bad.tar.gz", tamper(read_members(bundle)))
    before = snapshot(dest.root)
    with pytest.raises(BundleError, match=reason) as info:
        import_bundle(dest, bad)
    assert "nothing was imported" in str(info.value)
    assert snapshot(dest.root) == before  # not one entry landed, no staging left behind
    for key in KEYS:
        assert not dest.contains(key)


def test_directory_members_named_by_key_are_tolerated(bundle, dest, tmp_path):
    members = read_members(bundle)
    ok = write_tar(tmp_path / "dirs.tar.xz", [special(KEYS[0], tarfile.DIRTYPE)] + members, mode="w:xz")
    assert sorted(import_bundle(dest, ok).imported) == sorted(KEYS)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"PK\x03\x04 not a tar", "not a gzip- or xz-compressed"),
        (b"", "not a gzip- or xz-compressed"),
        (gzip.compress(b"\x00garbage" * 100), "not a readable tar"),
    ],
)
def test_non_bundles_are_refused(dest, tmp_path, content, reason):
    (tmp_path / "x.tar.gz").write_bytes(content)
    with pytest.raises(BundleError, match=reason):
        import_bundle(dest, tmp_path / "x.tar.gz")


def test_truncated_and_uncompressed_bundles_are_refused(bundle, dest, tmp_path):
    data = bundle.read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    before = snapshot(dest.root)
    with pytest.raises(BundleError):
        import_bundle(dest, tmp_path / "cut.tar.gz")
    plain = write_tar(tmp_path / "plain.tar", read_members(bundle), mode="w")
    with pytest.raises(BundleError, match="not a gzip- or xz-compressed"):
        import_bundle(dest, plain)
    assert snapshot(dest.root) == before


def test_decompression_bomb_guards(bundle, dest, tmp_path):
    before = snapshot(dest.root)
    with pytest.raises(BundleError, match="size limit"):
        import_bundle(dest, bundle, max_total_bytes=1000)
    with pytest.raises(BundleError, match="more than 4 members"):
        import_bundle(dest, bundle, max_members=4)

    # a member that claims a huge size: refused from its header, before its bytes are read
    bomb = tmp_path / "bomb.tar.gz"
    with open(bomb, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo(f"{KEYS[0]}/kernel.cubin")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(BundleError, match="size limit"):
        import_bundle(dest, bomb, max_total_bytes=1 << 20)

    # an oversized pax header, which tarfile would read into memory
    pax = tmp_path / "pax.tar.gz"
    with tarfile.open(pax, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"{KEYS[0]}/kernel.cubin")
        info.pax_headers = {"comment": "x" * (2 << 20)}
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(BundleError, match="extended header"):
        import_bundle(dest, pax)

    # many extended headers (each under its own cap): the decompressed stream as a whole is capped
    meta = tmp_path / "meta.tar.gz"
    with tarfile.open(meta, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for key in KEYS:
            info = tarfile.TarInfo(f"{key}/manifest.json")
            info.pax_headers = {"comment": "x" * (900 << 10)}
            tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(BundleError, match="decompresses to more than"):
        import_bundle(dest, meta, max_total_bytes=1000, max_members=10)
    assert snapshot(dest.root) == before
