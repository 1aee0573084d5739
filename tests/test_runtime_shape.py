"""The run-time shape options of the FP8 GEMM (GemmConfig.runtime_n / runtime_k, DGX_GEMM_RUNTIME_N / _K), CPU
side: rendering, the parameter struct, which configs may take them, the heuristics' switches, the plan record's
key, the plan's kernel count, and compiles for sm_90a. (That the default kernels stay byte-identical is
tests/test_sass_manifest.py's; outputs and timings: test_gpu_runtime_shape.py and tests/device/warmup_ab.py.)"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from dgx import heuristics, jit, warmup
from dgx.kernels.fp8_epilogue import Epilogue
from dgx.kernels.fp8_gemm import (INTERFACE, INTERFACE_RUNTIME_K, INTERFACE_RUNTIME_N, INTERFACE_RUNTIME_NK,
                                  GemmConfig, runtime_k_allowed, runtime_stream_b_allowed)
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


@pytest.mark.parametrize("extra", [{"wgrad": True, "layout": int(Layout.K_GROUPED), "k": 0},
                                   {"head_splits": (128, 64, 64)}, {"epilogue": Epilogue()},
                                   {"layout": int(Layout.BATCHED)}])
def test_runtime_n_refused_where_n_must_be_compiled_in(extra):
    base = dict(n=3072, k=4096, block_m=128, block_n=128, stages=4)  # (N: 16 heads of 128 + 64)
    base = {**base, **extra}
    GemmConfig(**base)  # valid without the option
    with pytest.raises(ValueError, match="runtime_n"):
        GemmConfig(**base, runtime_n=True)


def test_runtime_k_shares_one_kernel_across_k_and_n():
    one = GemmConfig(2112, 7168, 128, 96, 6, runtime_n=True, runtime_k=True)  # 56 k-blocks: not rounds of 6
    other = dataclasses.replace(one, n=4096, k=2048)  # 16 k-blocks
    assert one.interface is INTERFACE_RUNTIME_NK and one.compiled_k == 0 and not one.stage_rounds
    assert [p.name for p in INTERFACE_RUNTIME_NK.params[-2:]] == ["n", "k"]
    assert INTERFACE_RUNTIME_NK.offsets[:-2] == INTERFACE.offsets
    assert INTERFACE_RUNTIME_K.params[-1].name == "k" and INTERFACE_RUNTIME_K.offsets[:-1] == INTERFACE.offsets
    assert dataclasses.replace(one, runtime_n=False).interface is INTERFACE_RUNTIME_K
    assert "_nrt_krt_" in one.kernel_name and one.render().source == other.render().source
    assert ("runtime_k", "True") in one.describe()
    assert "int k;" in one.render().source and "int n;" in one.render().source
    assert jit.kernel_key(one.render(), "sm_90a") == jit.kernel_key(other.render(), "sm_90a")


@pytest.mark.parametrize("config, why", [
    (GemmConfig(4096, 7168, 256, 128, 3), "lean rounds of a 256x128 tile (sfa x sfb)"),
    (GemmConfig(2112, 7168, 64, 32, 6, defer=True), "the whole k-loop one straight-line chunk"),
    (GemmConfig(2112, 7168, 64, 32, 6, split_k=2), "split-K"),
    (GemmConfig(4096, 7168, 128, 128, 4, wgrad=True), "the weight gradient"),
    (GemmConfig(4096, 7168, 128, 128, 5, epilogue=Epilogue()), "a fused epilogue"),
])
def test_runtime_k_refused_where_the_k_loop_needs_k(config, why):
    assert not runtime_k_allowed(config), why
    with pytest.raises(ValueError, match="runtime_k"):
        dataclasses.replace(config, runtime_k=True)


@pytest.mark.parametrize("config", [
    GemmConfig(4096, 7168, 128, 128, 5),  # the plain ring (56 k-blocks, 5 stages)
    GemmConfig(4096, 7168, 256, 112, 3),  # two slices, lean ring
    GemmConfig(4096, 16384, 64, 64, 8, defer=True),  # deferred in chunks of 8 (128 k-blocks)
    GemmConfig(4096, 7168, 64, 64, 6, layout=int(Layout.MASKED), pair=1),
    GemmConfig(4096, 7168, 128, 160, 5, layout=int(Layout.CONTIGUOUS)),
])
def test_runtime_k_allowed_where_the_k_loop_runs_on_a_count(config):
    assert runtime_k_allowed(config)
    runtime = dataclasses.replace(config, runtime_k=True, runtime_n=True)
    assert not runtime.stage_rounds and not runtime.sfa_times_sfb and "_krt_" in runtime.kernel_name


def test_runtime_stream_b_shares_one_kernel_for_both_policies():
    streamed = GemmConfig(4096, 7168, 64, 32, 13, defer=True, stream_b=True)
    plain = dataclasses.replace(streamed, stream_b=False)
    one, other = (dataclasses.replace(c, runtime_n=True, runtime_stream_b=True) for c in (streamed, plain))
    assert one.render().source == other.render().source and "_sbrt" in one.kernel_name
    assert [p.name for p in one.interface.params[-2:]] == ["n", "stream_b"]
    assert one.interface.offsets[:-2] == INTERFACE.offsets
    assert "dgx::NoFusedEpilogue, false, true>" in one.render().source  # (no rounds; the policy at run time)
    assert jit.kernel_key(streamed.render(), "sm_90a") != jit.kernel_key(plain.render(), "sm_90a")
    for config in (GemmConfig(4096, 7168, 64, 64, 6, layout=int(Layout.MASKED)),
                   GemmConfig(2112, 4096, 128, 128, 4, wgrad=True)):
        assert not runtime_stream_b_allowed(config)
        with pytest.raises(ValueError, match="runtime_stream_b"):
            dataclasses.replace(config, runtime_stream_b=True)


def test_runtime_k_in_stage_rounds_serves_the_k_that_fill_whole_rounds():
    rounds = GemmConfig(4096, 7168, 128, 160, 4, layout=int(Layout.CONTIGUOUS), runtime_n=True, runtime_k=True)
    assert rounds.stage_rounds and "_krtr_" in rounds.kernel_name  # 56 k-blocks: 14 rounds of 4
    assert "dgx::NoFusedEpilogue, true, false>" in rounds.render().source  # (rounds; the policy compiled in)
    other_k = dataclasses.replace(rounds, n=7168, k=2048)  # 16 k-blocks: 4 rounds
    assert other_k.render().source == rounds.render().source
    ring = dataclasses.replace(rounds, k=2944)  # 23 k-blocks: not whole rounds, the plain ring
    assert not ring.stage_rounds and "_krt_" in ring.kernel_name
    assert jit.kernel_key(ring.render(), "sm_90a") != jit.kernel_key(rounds.render(), "sm_90a")


def test_heuristics_switch(monkeypatch):
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N", raising=False)
    monkeypatch.delenv("DGX_GEMM_RUNTIME_K", raising=False)
    monkeypatch.delenv("DGX_GEMM_RUNTIME_STREAM_B", raising=False)
    off = heuristics.choose_dense(64, 2112, 7168, 132).config
    assert not off.runtime_n
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    on = heuristics.choose_dense(64, 2112, 7168, 132).config
    assert on == dataclasses.replace(off, runtime_n=True)
    assert heuristics.choose_grouped(Layout.MASKED, 64, 4096, 7168, 8, 132).config.runtime_n
    assert heuristics.choose_contiguous_psum(8192, 4096, 7168, 8, 132).config.runtime_n
    wgrad = heuristics.choose_wgrad(4096, 2112, 4096, 132).config
    assert wgrad.runtime_n and not wgrad.runtime_k  # the weight gradient: N only
    assert not heuristics.choose_wgrad(4096, 2112, 4096, 132, Layout.K_GROUPED, 4).config.runtime_n
    shm = heuristics.choose_skip_head_mid(4096, 24576, 1536, (128, 64, 64), 132)
    assert shm.head_splits == (128, 64, 64) and not shm.runtime_n
    assert not on.runtime_k
    monkeypatch.setenv("DGX_GEMM_RUNTIME_K", "1")
    both = heuristics.choose_dense(64, 2112, 7168, 132).config
    assert both.runtime_k == runtime_k_allowed(off) and both.runtime_n
    wide = heuristics.choose_dense(4096, 7168, 2048, 132).config
    assert wide.runtime_k == runtime_k_allowed(dataclasses.replace(wide, runtime_n=False, runtime_k=False))
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N")
    only_k = heuristics.choose_dense(4096, 7168, 2048, 132).config
    assert not only_k.runtime_n and only_k.runtime_k == wide.runtime_k
    assert not heuristics.choose_skip_head_mid(4096, 24576, 1536, (128, 64, 64), 132).runtime_k
    monkeypatch.delenv("DGX_GEMM_RUNTIME_K")
    assert heuristics.choose_dense(64, 2112, 7168, 132).config is heuristics.choose_dense(64, 2112, 7168, 132).config
    assert heuristics.choose_dense(64, 2112, 7168, 132).config == off
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "ture")
    from dgx.errors import EnvError

    with pytest.raises(EnvError, match="DGX_GEMM_RUNTIME_N"):
        heuristics.choose_dense(64, 2112, 7168, 132)


def test_plan_record_key_covers_the_options(monkeypatch):
    entries = warmup.parse_shapes([{"kind": "dense", "n": 2112, "k": 7168, "max_m": 64}])
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N", raising=False)
    monkeypatch.delenv("DGX_GEMM_RUNTIME_K", raising=False)
    monkeypatch.delenv("DGX_GEMM_RUNTIME_STREAM_B", raising=False)
    off = warmup.plan_record_key(entries, max_m=64)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    only_n = warmup.plan_record_key(entries, max_m=64)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_K", "1")
    both = warmup.plan_record_key(entries, max_m=64)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_STREAM_B", "1")
    three = warmup.plan_record_key(entries, max_m=64)
    assert len({off, only_n, both, three}) == 4


def test_plan_with_the_options_merges_n_and_k(monkeypatch):
    entries = warmup.parse_shapes([{"kind": "dense", "n": n, "k": k, "max_m": 4096}
                                   for n, k in ((2112, 7168), (4096, 7168), (7168, 2048), (7168, 4096))])
    monkeypatch.delenv("DGX_GEMM_RUNTIME_N", raising=False)
    monkeypatch.delenv("DGX_GEMM_RUNTIME_K", raising=False)
    monkeypatch.delenv("DGX_GEMM_RUNTIME_STREAM_B", raising=False)
    off = warmup.plan(entries, max_m=4096)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_N", "1")
    on = warmup.plan(entries, max_m=4096)
    assert len(on.kernels) < len(off.kernels)
    assert all("_nrt_" in k.source.name for k in on.kernels if not k.helper)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_K", "1")
    both = warmup.plan(entries, max_m=4096)
    assert len(both.kernels) < len(on.kernels)
    assert any("_krt_" in k.source.name for k in both.kernels)
    monkeypatch.setenv("DGX_GEMM_RUNTIME_STREAM_B", "1")
    three = warmup.plan(entries, max_m=4096)
    assert len(three.kernels) < len(both.kernels)
    assert not any("_sb_" in k.source.name or k.source.name.endswith("_sb") for k in three.kernels)


@pytest.mark.parametrize("config", [
    GemmConfig(4096, 512, 128, 128, 3, runtime_n=True),  # a short k-loop: a quick compile
    GemmConfig(4096, 7168, 128, 128, 5, runtime_n=True, runtime_k=True),
    GemmConfig(4096, 7168, 64, 64, 6, layout=int(Layout.MASKED), pair=1, runtime_n=True, runtime_k=True),
    GemmConfig(4096, 16384, 64, 64, 8, defer=True, runtime_k=True),
    GemmConfig(4096, 7168, 128, 160, 4, layout=int(Layout.CONTIGUOUS), runtime_n=True, runtime_k=True),  # rounds
    GemmConfig(2112, 4096, 128, 128, 4, wgrad=True, runtime_n=True),  # the producer's stores bounded by N
    GemmConfig(4096, 2048, 128, 64, 8, stream_b=True, runtime_n=True, runtime_k=True, runtime_stream_b=True),
])
def test_runtime_shape_kernel_compiles_without_spills(config):
    pytest.importorskip("cuda.bindings.nvrtc")
    from dgx.sass_tools.elf import Cubin

    src = config.render()
    cubin, _ = jit.build_cubin(src, "sm_90a", jit.SassPassSettings(False))
    kernel = Cubin(cubin).kernel(src.name)
    assert kernel.local_bytes == 0 and kernel.instruction_count > 0


def test_pack_operands_fills_the_run_time_members(monkeypatch):
    """The parameter struct of a kernel with N, K and B's policy at run time: today's members where they were, then
    n, k and stream_b with the call's values (tensor maps stubbed: no driver needed)."""
    import struct

    from cuda.bindings import driver

    from dgx import runtime
    from dgx.kernels import fp8_gemm_args
    from dgx.layout import SfaTma

    monkeypatch.setattr(runtime, "encode_tensor_map_2d", lambda *a, **k: driver.CUtensorMap())
    config = GemmConfig(2112, 2944, 128, 64, 8, stream_b=True, runtime_n=True, runtime_k=True,
                        runtime_stream_b=True)
    ops = fp8_gemm_args.Operands(a=1 << 20, a_rows=256, lda=2944, b=2 << 20, b_rows=2112, ldb=2944, d=3 << 20,
                                 d_rows=256, ldd=2112, sfa_layout=SfaTma(256, 23, 1024), sfa=4 << 20, sfb=5 << 20,
                                 m=256)
    image = fp8_gemm_args.pack_operands(config, ops).image()
    offsets = dict(zip((p.name for p in config.interface.params), config.interface.offsets))
    assert offsets["n"] > offsets["group_maps"] and offsets["k"] == offsets["n"] + 4
    assert struct.unpack_from("<iii", image, offsets["n"]) == (2112, 2944, 1)
    assert struct.unpack_from("<i", image, offsets["m"]) == (256,)
    plain = dataclasses.replace(config, stream_b=False)
    assert struct.unpack_from("<i", fp8_gemm_args.pack_operands(plain, ops).image(), offsets["stream_b"]) == (0,)
