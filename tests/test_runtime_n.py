"""The run-time N option of the FP8 GEMM (GemmConfig.runtime_n, DGX_GEMM_RUNTIME_N), CPU side: rendering, the
parameter struct, the heuristics' switch, the plan record's key, and one compile for sm_90a. (That the default
kernels stay byte-identical is tests/test_sass_manifest.py's; outputs and timings: test_gpu_runtime_n.py and
tests/device/warmup_ab.py.)"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from dgx import heuristics, jit, warmup
from dgx.kernels.fp8_gemm import INTERFACE, INTERFACE_RUNTIME_N, GemmConfig
from dgx.kinds import Layout

ROOT = Path(__file__).resolve().parents[1]


def test_default_renders_n_compiled_in():
    config = GemmConfig(2112, 7168, 64, 32, 6, defer=True)
    assert not config.runtime_n and config.interface is INTERFACE and config.compiled_n == 2112
    src = config.render()
    assert "_n2112_" in src.name and "int n;" not in src.source
    assert ("runtime_n", "False") not in config.describe()


def test_runtime_n_shares_one_kernel_across_n():
    one = GemmConfig(2112, 7168, 64, 32, 6, defer=True, runtime_n=True)
    other = dataclasses.replace(one, n=576)
    assert one.interface is INTERFACE_RUNTIME_N and one.compiled_n == 0
    assert INTERFACE_RUNTIME_N.params[-1].name == "n"
    assert INTERFACE_RUNTIME_N.offsets[:-1] == INTERFACE.offsets  # every other member where it was
    assert "_nrt_" in one.kernel_name and one.render().source == other.render().source
    assert jit.kernel_key(one.render(), "sm_90a") == jit.kernel_key(other.render(), "sm_90a")
    fixed = dataclasses.replace(one, runtime_n=False)
    assert jit.kernel_key(fixed.render(), "sm_90a") != jit.kernel_key(one.render(), "sm_90a")


@pytest.mark.parametrize("extra", [{"wgrad": True}, {"head_splits": (128, 64, 64)}])
def test_runtime_n_refused_where_n_must_be_compiled_in(extra):
    base = dict(n=4096, k=4096, block_m=128, block_n=128, stages=4)
    with pytest.raises(ValueError, match="runtime_n"):
        GemmConfig(**base, **extra, runtime_n=True)


def test_heuristics_switch(monkeypatch):
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N", raising=False)
    off = heuristics.choose_dense(64, 2112, 7168, 132).config
    assert not off.runtime_n
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    on = heuristics.choose_dense(64, 2112, 7168, 132).config
    assert on == dataclasses.replace(off, runtime_n=True)
    assert heuristics.choose_grouped(Layout.MASKED, 64, 4096, 7168, 8, 132).config.runtime_n
    assert heuristics.choose_contiguous_psum(8192, 4096, 7168, 8, 132).config.runtime_n
    assert not heuristics.choose_wgrad(4096, 2112, 4096, 132).config.runtime_n  # the weight gradient keeps N
    shm = heuristics.choose_skip_head_mid(4096, 24576, 1536, (128, 64, 64), 132)
    assert shm.head_splits == (128, 64, 64) and not shm.runtime_n
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "ture")
    from dgx.errors import EnvError

    with pytest.raises(EnvError, match="DGX_GEMM_RUNTIME_N"):
        heuristics.choose_dense(64, 2112, 7168, 132)


def test_plan_record_key_covers_the_option(monkeypatch):
    entries = warmup.parse_shapes([{"kind": "dense", "n": 2112, "k": 7168, "max_m": 64}])
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N", raising=False)
    off = warmup.plan_record_key(entries, max_m=64)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    assert warmup.plan_record_key(entries, max_m=64) != off


def test_plan_with_the_option_merges_n(monkeypatch):
    entries = warmup.parse_shapes([{"kind": "dense", "n": n, "k": 7168, "max_m": 256} for n in (2112, 1536, 4096)])
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N", raising=False)
    off = warmup.plan(entries, max_m=256)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    on = warmup.plan(entries, max_m=256)
    assert len(on.kernels) < len(off.kernels)
    assert all("_nrt_" in k.source.name for k in on.kernels if not k.helper)


def test_runtime_n_kernel_compiles_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc")
    from dgx.sass_tools.elf import Cubin

    config = GemmConfig(4096, 512, 128, 128, 4, runtime_n=True)  # a short k-loop: a quick compile
    src = config.render()
    cubin, _ = jit.build_cubin(src, "sm_90a", jit.SassPassSettings(False))
    kernel = Cubin(cubin).kernel(src.name)
    assert kernel.local_bytes == 0 and kernel.instruction_count > 0
