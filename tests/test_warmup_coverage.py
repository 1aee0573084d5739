"""Every M of the deepseek-v3 preset is served by a kernel its warmup builds: a strict-mode server, asking the
heuristics as it does at run time, finds every kernel in a cache that holds exactly the warmup's kernels.

The warmup asks the heuristics at both ends of every range of M between multiples of the block sizes
(dgx/enumeration.py: M by ranges). Here the server's side asks independently, for every entry of the preset:
every M up to 64 (decode sizes) and, in every range above, an M picked at random inside it (contiguous: one
M_sum in four, each a range of its own). DGX_TEST_EVERY_M=1 asks every M of every entry instead (about 5 CPU
minutes on a 2-core machine; it found the warmup's 329 GEMM kernels and no other when M by ranges came in).
CPU only; nothing is compiled (the cache is a stand-in that holds the warmup's keys).
"""

from __future__ import annotations

import os
import random

import pytest

from dgx.cache import CacheMissError
from dgx import enumeration, families, jit, warmup
from dgx.errors import JitStrictError
from dgx.grouped_psum import psum_config
from dgx.heuristics import CONTIGUOUS_ALIGNMENT
from dgx.kinds import M_GROUPED_CONTIGUOUS_PSUM

PRESET = "deepseek-v3"
ARCH = "sm_90a"
SMS = warmup.DEFAULT_NUM_SMS
EVERY_M = os.environ.get("DGX_TEST_EVERY_M") == "1"
SMALL_M = 64  # every M up to here, always
RANGE = 64  # the smallest block size: the ranges of M by ranges
CONTIGUOUS_SAMPLE = 4  # contiguous M_sum (every one is a range of its own): one in this many, at random


class _WarmedCache:
    """A kernel cache holding exactly ``keys`` (cubins are not needed to know a kernel is there)."""

    def __init__(self, keys: set[str]):
        self.keys, self.root = keys, "<warmed cache>"

    def get_or_build(self, key, build, *, allow_build=True):
        if key in self.keys:
            return b"cubin"
        if allow_build:
            raise AssertionError("a strict-mode lookup may not build")
        raise CacheMissError(key, self.root)


@pytest.fixture(scope="module")
def warmed():
    specs = warmup.load_preset(PRESET)
    the_plan = warmup.plan(specs, jobs=2)
    return specs, {pk.key for pk in the_plan.kernels}


def _server_config(spec: warmup.ShapeSpec, m: int):
    """The config a server picks for M as its GEMM entry points do (dgx/launch.py, dgx/grouped_psum.py)."""
    if spec.kind == M_GROUPED_CONTIGUOUS_PSUM:
        return psum_config(m, spec.n, spec.k, spec.groups or 1, SMS, CONTIGUOUS_ALIGNMENT)
    return families.kind(spec.kind).choose(m, spec.n, spec.k, spec.groups or 1, SMS).config


def _server_ms(spec: warmup.ShapeSpec, rng: random.Random) -> list[int]:
    """Every M a server can ask for this entry (contiguous: every M_sum, a multiple of the alignment), or with
    EVERY_M unset every small M and one random M inside each range (contiguous: one M_sum in CONTIGUOUS_SAMPLE)."""
    limit = spec.m_limit(warmup.DEFAULT_MAX_M)
    if spec.kind == "m_grouped_contiguous":
        space = families.kind(spec.kind).m_space
        top = enumeration.m_range(space, spec.groups, limit)
        every = enumeration.m_values(space, spec.groups, limit, 1, top)
        if EVERY_M:
            return every
        return [m for m in every if m <= SMALL_M * CONTIGUOUS_SAMPLE or rng.randrange(CONTIGUOUS_SAMPLE) == 0]
    top = enumeration.psum_top(spec.groups, limit) if spec.kind == M_GROUPED_CONTIGUOUS_PSUM else limit
    if EVERY_M:
        return list(range(1, top + 1))
    ms = list(range(1, min(SMALL_M, top) + 1))
    for lo in range(SMALL_M, top, RANGE):  # the range (lo, lo + RANGE]
        ms.append(rng.randint(lo + 1, min(lo + RANGE, top)))
    return ms


def _sweep(specs, keys: set[str], rng: random.Random, monkeypatch) -> tuple[list[str], int, int]:
    """(why each kernel a server picks is missing, M asked, distinct kernels picked) over the entries."""
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    monkeypatch.setattr(jit, "kernel_cache", lambda: _WarmedCache(keys))
    served: dict = {}  # config -> None (found) or the strict-mode error
    asked = 0
    for spec in specs:
        if not isinstance(spec, warmup.ShapeSpec):
            continue
        for m in _server_ms(spec, rng):
            config = _server_config(spec, m)
            asked += 1
            if config not in served:
                try:
                    jit.get_cubin(config.render(), ARCH)
                    served[config] = None
                except JitStrictError as exc:
                    served[config] = f"{spec.label} M={m}: {exc}"
    return [why for why in served.values() if why], asked, len(served)


def test_every_m_of_the_preset_is_served_in_strict_mode(warmed, monkeypatch):
    specs, keys = warmed
    missing, asked, served = _sweep(specs, keys, random.Random(43), monkeypatch)
    assert not missing, f"{len(missing)} kernels a server picks are not warmed, e.g. {missing[0]}"
    assert asked > 5_000 and served > 300  # (most of the preset's 329 GEMM kernels found by random M too)


def test_the_sweep_finds_a_kernel_missing_from_the_cache(warmed, monkeypatch):
    specs, keys = warmed
    spec = next(s for s in specs if s.kind == "dense")
    decode = _server_config(spec, 1).render()
    missing, _, _ = _sweep([spec], keys - {jit.kernel_key(decode, ARCH)}, random.Random(0), monkeypatch)
    assert len(missing) == 1 and f"{spec.label} M=1:" in missing[0] and decode.name in missing[0]


def test_with_the_run_time_shape_options_every_m_is_served_too(monkeypatch):
    """DGX_GEMM_RUNTIME_N, _K and _STREAM_B set at warm-up and at serve time: fewer kernels, the same coverage (the
    heuristics are the same functions on both sides)."""
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    monkeypatch.setenv("DGX_GEMM_RUNTIME_K", "1")
    monkeypatch.setenv("DGX_GEMM_RUNTIME_STREAM_B", "1")
    specs = warmup.load_preset(PRESET)
    keys = {pk.key for pk in warmup.plan(specs, jobs=2).kernels}
    assert len(keys) < 150  # (331 without the options)
    missing, asked, _ = _sweep(specs, keys, random.Random(44), monkeypatch)
    assert not missing, f"{len(missing)} kernels a server picks are not warmed, e.g. {missing[0]}"
    assert asked > 5_000
