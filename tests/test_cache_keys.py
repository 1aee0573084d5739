"""Cache keys: stable across order, processes and install locations; unambiguous; no absolute paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import cache
from cache import check_relative_name, collect_headers, compute_key, header_digest

INPUTS = {
    "source": 'extern "C" __global__ void k() {}\n',
    "headers": {"dgx/common.cuh": b"#pragma once\n", "dgx/gemm.cuh": b"// gemm\n\x00\xff"},
    "nvrtc_version": "13.0.88",
    "options": ["-arch=sm_90a", "-std=c++17", "-O3"],
    "arch": "sm_90a",
    "sass_pass": 3,
    "fast_math": False,
    "extra": None,
}
# Pins the serialization: if this changes, every cache in the field misses. Change it only on purpose
# (and bump KEY_SCHEME with it).
GOLDEN = "e48ccb9ba071d1e5e8124fa7ad391e1e7a3349dddfa74fc9517d54e88abef6a6"


def test_key_is_pinned_sha256_hex():
    key = compute_key(INPUTS)
    assert key == GOLDEN
    assert cache.is_key(key)


def test_mapping_order_does_not_matter():
    reordered = {k: INPUTS[k] for k in reversed(list(INPUTS))}
    reordered["headers"] = dict(reversed(list(INPUTS["headers"].items())))
    assert compute_key(reordered) == compute_key(INPUTS)


def test_list_order_matters():
    swapped = dict(INPUTS, options=list(reversed(INPUTS["options"])))
    assert compute_key(swapped) != compute_key(INPUTS)


def test_same_key_in_another_process_with_another_hash_seed():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_cache_keys as t; "
        "print(t.compute_key(t.INPUTS))"
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(cache.__file__)))
    here = os.path.dirname(os.path.abspath(__file__))
    keys = set()
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", code, here], env=env, capture_output=True, text=True, check=True)
        keys.add(out.stdout.strip())
    assert keys == {compute_key(INPUTS)}


@pytest.mark.parametrize(
    "a, b",
    [
        ({"a": "bc"}, {"ab": "c"}),
        ({"x": "1"}, {"x": 1}),
        ({"x": "x"}, {"x": b"x"}),
        ({"x": True}, {"x": 1}),
        ({"x": None}, {"x": ""}),
        ({"x": ["ab", "c"]}, {"x": ["a", "bc"]}),
        ({"x": ["a"]}, {"x": "a"}),
        ({"x": {"a": "b"}}, {"x": ["a", "b"]}),
        ({"h": {"a": "b"}}, {"h.a": "b"}),
        ({}, {"": ""}),
    ],
)
def test_serialization_is_unambiguous(a, b):
    assert compute_key(a) != compute_key(b)


def _make_include_dir(base):
    (base / "dgx" / "detail").mkdir(parents=True)
    (base / "dgx" / "gemm.cuh").write_bytes(b"#pragma once\n#include \"detail/mma.cuh\"\n")
    (base / "dgx" / "detail" / "mma.cuh").write_bytes(b"// wgmma wrappers\n" * 50)
    (base / "dgx" / "notes.txt").write_bytes(b"not a header")
    (base / "__pycache__").mkdir()
    (base / "__pycache__" / "x.h").write_bytes(b"ignored")
    return base


def test_key_does_not_depend_on_where_headers_live(tmp_path):
    one = _make_include_dir(tmp_path / "site-packages" / "ptx" / "include")
    two = tmp_path / "elsewhere" / "deeper" / "copy"
    shutil.copytree(one, two)

    h1, h2 = collect_headers(one), collect_headers(two)
    assert sorted(h1) == ["dgx/detail/mma.cuh", "dgx/gemm.cuh"]
    assert h1 == h2
    assert header_digest(h1) == header_digest(h2)
    assert compute_key(dict(INPUTS, headers=h1)) == compute_key(dict(INPUTS, headers=h2))
    assert compute_key(dict(INPUTS, headers=header_digest(h1))) == compute_key(dict(INPUTS, headers=header_digest(h2)))

    # one byte of one header changes both the digest and the key
    mma = two / "dgx" / "detail" / "mma.cuh"
    data = bytearray(mma.read_bytes())
    data[7] ^= 0x01
    mma.write_bytes(bytes(data))
    h3 = collect_headers(two)
    assert header_digest(h3) != header_digest(h1)
    assert compute_key(dict(INPUTS, headers=h3)) != compute_key(dict(INPUTS, headers=h1))


def test_header_digest_sees_renames_and_is_order_free():
    files = {"a.cuh": b"x", "b.cuh": b"y"}
    assert header_digest(files) == header_digest(dict(reversed(list(files.items()))))
    assert header_digest(files) != header_digest({"a.cuh": b"x", "c.cuh": b"y"})
    assert header_digest(files) != header_digest({"a.cuh": b"xy", "b.cuh": b""})


@pytest.mark.parametrize(
    "name", ["/usr/include/x.cuh", "C:\\inc\\x.cuh", "~/x.cuh", "../x.cuh", "a/../x.cuh", "./x.cuh", "a//x.cuh", "a\\x.cuh", ""]
)
def test_header_names_must_be_relative(name):
    with pytest.raises(ValueError):
        check_relative_name(name)
    with pytest.raises(ValueError):
        header_digest({name: b""})


def test_absolute_path_as_mapping_key_is_refused():
    with pytest.raises(ValueError, match="absolute path"):
        compute_key(dict(INPUTS, headers={"/home/me/ptx/include/dgx/gemm.cuh": b""}))


@pytest.mark.parametrize("value", [1.5, {1, 2}, object(), {1: "x"}])
def test_unsupported_types_are_refused(value):
    with pytest.raises(TypeError):
        compute_key({"x": value})


def test_header_content_must_be_bytes():
    with pytest.raises(TypeError, match="bytes"):
        header_digest({"a.cuh": "text"})
