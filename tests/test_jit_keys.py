"""Cache keys of rendered kernels: stable, and free of anything machine-specific."""

from __future__ import annotations

import re
from pathlib import Path

import ptx
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
    name = sorted(original)[0]
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
