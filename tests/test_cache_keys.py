"""Cache keys: stable across order, processes and install locations; unambiguous; no absolute paths."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dgx import cache
from dgx.cache import compute_key

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


def test_headers_enter_the_key_by_relative_name_and_content():
    headers = {"dgx/gemm.cuh": b'#pragma once\n#include "detail/mma.cuh"\n', "dgx/detail/mma.cuh": b"// wgmma\n" * 50}
    key = compute_key(dict(INPUTS, headers=headers))
    assert compute_key(dict(INPUTS, headers=dict(reversed(list(headers.items()))))) == key  # order-free
    changed = dict(headers)
    data = bytearray(changed["dgx/detail/mma.cuh"])
    data[7] ^= 0x01  # one bit of one byte of one header
    changed["dgx/detail/mma.cuh"] = bytes(data)
    assert compute_key(dict(INPUTS, headers=changed)) != key
    renamed = {"dgx/gemm.cuh": headers["dgx/gemm.cuh"], "dgx/detail/mma2.cuh": headers["dgx/detail/mma.cuh"]}
    assert compute_key(dict(INPUTS, headers=renamed)) != key


def test_absolute_path_as_mapping_key_is_refused():
    with pytest.raises(ValueError, match="absolute path"):
        compute_key(dict(INPUTS, headers={"/home/me/ptx/include/dgx/gemm.cuh": b""}))


@pytest.mark.parametrize("value", [1.5, {1, 2}, object(), {1: "x"}])
def test_unsupported_types_are_refused(value):
    with pytest.raises(TypeError):
        compute_key({"x": value})
