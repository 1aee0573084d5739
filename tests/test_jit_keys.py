"""Cache keys of rendered kernels: stable, and free of anything machine-specific."""

from __future__ import annotations

import re
from pathlib import Path

from dgx import ptx
from dgx import jit
from dgx.kernels.fp8_gemm import GemmConfig

CONFIGS = [
    GemmConfig(n=2112, k=7168, block_m=64, block_n=112, stages=8),
    GemmConfig(n=7168, k=2112, block_m=128, block_n=144, stages=5, pair=1),
]

# --- cache keys -----------------------------------------------------------------------------------


def test_key_stability(monkeypatch):
    src = CONFIGS[0].render()
    key = jit.kernel_key(src, "sm_90a")
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert jit.kernel_key(CONFIGS[0].render(), "sm_90a") == key
    assert jit.kernel_key(src, "sm_90") != key
    assert jit.kernel_key(CONFIGS[1].render(), "sm_90a") != key

    original = ptx.headers()
    name = sorted(ptx.included(src.source))[0]  # a header this kernel includes
    changed = dict(original)
    content = bytearray(changed[name])
    content[len(content) // 2] ^= 0x01  # one bit of one byte of one header
    changed[name] = bytes(content)
    monkeypatch.setattr(ptx, "headers", lambda: dict(changed))
    assert jit.kernel_key(src, "sm_90a") != key
    monkeypatch.setattr(ptx, "headers", lambda: dict(original))
    assert jit.kernel_key(src, "sm_90a") == key

    monkeypatch.setenv("DGX_JIT_LINEINFO", "1")  # a compile option is part of the key
    assert jit.kernel_key(src, "sm_90a") != key


def test_key_inputs_hold_nothing_machine_specific():
    inputs = jit.key_inputs(CONFIGS[0].render(), "sm_90a")
    here = str(Path(__file__).resolve().parents[1])

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield str(k)
                yield from strings(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from strings(v)

    for s in strings(inputs):
        assert here not in s and str(Path.home()) not in s, s
    assert all(not Path(name).is_absolute() for name in inputs["headers"])


def test_key_covers_only_the_headers_a_kernel_includes(monkeypatch):
    gemm = CONFIGS[0].render()
    original = ptx.headers()
    gemm_headers = ptx.included(gemm.source)
    assert "fp8_gemm.cuh" in gemm_headers and "tma.cuh" in gemm_headers  # through fp8_gemm.cuh
    assert "mqa_logits.cuh" not in gemm_headers and "smoke.cuh" not in gemm_headers
    keys = {src.name: jit.kernel_key(src, "sm_90a") for src in (gemm, CONFIGS[1].render())}

    # A new header, and an edit of a header no GEMM includes: no GEMM key changes.
    changed = dict(original, **{"brand_new_family.cuh": b"#pragma once\n"})
    changed["mqa_logits.cuh"] = original["mqa_logits.cuh"] + b"\n// edited\n"
    monkeypatch.setattr(ptx, "headers", lambda: dict(changed))
    assert {src.name: jit.kernel_key(src, "sm_90a") for src in (gemm, CONFIGS[1].render())} == keys

    # An edit of a header the GEMM includes only through another header changes its key.
    changed = dict(original)
    changed["mbarrier.cuh"] = original["mbarrier.cuh"] + b"\n// edited\n"
    monkeypatch.setattr(ptx, "headers", lambda: dict(changed))
    assert jit.kernel_key(gemm, "sm_90a") != keys[gemm.name]


def test_included_follows_includes_transitively():
    available = {"a.cuh": b'#include "b.cuh"\n', "b.cuh": b'#pragma once\n  #  include "c.cuh"\n',
                 "c.cuh": b'#include "a.cuh"\n', "d.cuh": b""}
    assert list(ptx.included('#include "a.cuh"\n', available)) == ["a.cuh", "b.cuh", "c.cuh"]
    assert ptx.included("// no include\n", available) == {}
    assert list(ptx.included('#include "missing.cuh"\n#include "d.cuh"', available)) == ["d.cuh"]
