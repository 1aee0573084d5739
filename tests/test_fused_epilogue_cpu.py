"""The fused epilogues of the FP8 GEMMs on the CPU: the Epilogue config (tags, validation, rendering and key), the
heuristic's tiles for it, every entry point's checks of the fused arguments (fake device views: nothing launches),
prepare_gate_up, and NVRTC compiles of every epilogue variant checked in the SASS."""

from __future__ import annotations

import itertools
import re
import subprocess

import pytest

from dgx import fused, gemm, grouped, grouped_psum, heuristics, launch
from dgx.kernels.fp8_epilogue import Epilogue, parse_epilogue
from dgx.kernels.fp8_gemm import (LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS_PSUM, LAYOUT_K_GROUPED, LAYOUT_MASKED, SHARE_B,
                                  GemmConfig)
from fake_views import BASE, fake_view

ALL_EPILOGUES = [
    Epilogue(fp8=True, swiglu=s, clamp=c, row_weight=r, alpha=a, scale_format=f)
    for s, c, r, a, f in itertools.product((False, True), (False, True), (False, True), (False, True),
                                           ("fp32", "ue8m0", "packed"))
    if s or not c
] + [Epilogue(fp8=False, alpha=True)]


# --- the config ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("epilogue", ALL_EPILOGUES, ids=lambda e: e.tag)
def test_tag_round_trips(epilogue):
    assert parse_epilogue(epilogue.tag) == epilogue


@pytest.mark.parametrize("kwargs, message", [
    (dict(fp8=False), "without alpha is the plain kernel"),
    (dict(fp8=False, alpha=True, swiglu=True), "need the FP8 output"),
    (dict(clamp=True), "clamp (swiglu_limit) is for swiglu"),
    (dict(scale_format="e8m0"), "scale_format must be one of"),
    (dict(fp8=False, alpha=True, scale_format="ue8m0"), "has no scales"),
])
def test_invalid_epilogues_raise(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Epilogue(**kwargs)


@pytest.mark.parametrize("text", ["", "fp16", "fp8_relu", "fp8_swiglu_swiglu", "fp8_ue8m0_packed", None])
def test_bad_tags_raise(text):
    with pytest.raises(ValueError, match="epilogue"):
        parse_epilogue(text)


def test_epilogue_is_rendered_into_source_name_and_key():
    from dgx import jit

    plain = GemmConfig(4096, 7168, 128, 128, 5)
    fp8 = GemmConfig(4096, 7168, 128, 128, 5, epilogue=Epilogue())
    ue8m0 = GemmConfig(4096, 7168, 128, 128, 5, epilogue=Epilogue(scale_format="ue8m0"))
    src = plain.render().source
    assert "fp8_gemm_fused.cuh" not in src and "FusedEpilogue" not in src and "Fp8GemmFusedParams" not in src
    assert ("epilogue", "None") not in plain.describe()
    for config in (fp8, ue8m0):
        s = config.render()
        assert '#include "fp8_gemm_fused.cuh"' in s.source and config.epilogue.render() in s.source
        assert "Fp8GemmFusedParams" in s.source and s.name.endswith("_e" + config.epilogue.tag)
        assert ("epilogue", str(config.epilogue)) in config.describe()
    keys = {jit.kernel_key(c.render(), "sm_90a") for c in (plain, fp8, ue8m0)}
    assert len(keys) == 3
    assert fp8.interface.params[-6].name == "sf_out" and plain.interface.params[-1].name == "group_maps"


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_n=144, epilogue=Epilogue()), "needs block_n 128"),
    (dict(block_m=256, stages=3, epilogue=Epilogue()), "need block_m 64 or 128"),
    (dict(n=4224, epilogue=Epilogue(swiglu=True)), "multiple of 256"),
    (dict(n=4104, epilogue=Epilogue()), "multiple of 128"),
    (dict(wgrad=True, stages=4, epilogue=Epilogue()), "not for the weight gradients"),
    (dict(k=0, layout=LAYOUT_K_GROUPED, wgrad=True, stages=4, epilogue=Epilogue()), "not for the weight gradients"),
    (dict(block_m=64, split_k=2, stages=4, epilogue=Epilogue()), "split_k 1"),
    (dict(head_splits=(64, 64, 64), n=4096, epilogue=Epilogue(fp8=False, alpha=True)), "head splits"),
])
def test_configs_the_kernel_cannot_run_raise(kwargs, message):
    base = dict(n=4096, k=7168, block_m=128, block_n=128, stages=5)
    base.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        GemmConfig(**base)


def test_swiglu_units_are_pairs_of_tiles():
    c = GemmConfig(4096, 7168, 128, 128, 4, epilogue=Epilogue(swiglu=True))
    assert c.units(1024) == 8 * (4096 // 256)
    assert GemmConfig(4096, 7168, 128, 128, 4, epilogue=Epilogue()).units(1024) == 8 * 32


KINDS = ["dense", "m_grouped_contiguous", "m_grouped_masked", "m_grouped_contiguous_psum"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("epilogue", [Epilogue(), Epilogue(swiglu=True, clamp=True, row_weight=True, alpha=True,
                                                           scale_format="packed"), Epilogue(fp8=False, alpha=True)],
                         ids=lambda e: e.tag)
@pytest.mark.parametrize("m", [64, 4096, 32768])
def test_heuristic_picks_valid_tiles(kind, epilogue, m):
    c = heuristics.choose_fused(kind, m, 4096, 7168, 8, 132, epilogue).config
    assert c.epilogue == epilogue and c.smem_bytes <= 232448 and c.split_k == 1
    assert not epilogue.validate_tile(c.block_m, c.block_n, 4096)
    want = {"dense": 0, "m_grouped_contiguous": LAYOUT_CONTIGUOUS, "m_grouped_masked": LAYOUT_MASKED,
            "m_grouped_contiguous_psum": LAYOUT_CONTIGUOUS_PSUM}[kind]
    assert c.layout == want
    if epilogue.fp8:
        assert c.block_n == 128 and c.block_m <= 128


def test_swiglu_waves_count_whole_units():
    """A SwiGLU unit (gate + up tile) runs on one CTA: 133 units on 132 SMs are two rounds of two tiles."""
    c = GemmConfig(4096, 7168, 128, 128, 4, epilogue=Epilogue(swiglu=True))
    assert heuristics._best("t", [(c, 132)], 7168, 132, tiles_per_unit=2).waves == 2
    assert heuristics._best("t", [(c, 133)], 7168, 132, tiles_per_unit=2).waves == 4


def test_masked_units_follow_the_count_spread():
    swiglu = Epilogue(swiglu=True)
    c64 = GemmConfig(4096, 7168, 64, 128, 6, layout=LAYOUT_MASKED, epilogue=swiglu)
    c128 = GemmConfig(4096, 7168, 128, 128, 4, layout=LAYOUT_MASKED, epilogue=swiglu)
    # Expected M 64: counts 45..83, half past one 64-row block; all within one 128-row block.
    assert heuristics.masked_units(c64, 64, 8) == 12 * 16
    assert heuristics.masked_units(c128, 64, 8) == 8 * 16


def test_masked_units_count_pairs_along_m_as_the_scheduler_does():
    """B shared by pairs along M: a group's blocks go two to a unit, its odd last block takes a whole pair."""
    swiglu = Epilogue(swiglu=True)
    pair = GemmConfig(4096, 7168, 128, 128, 4, pair=SHARE_B, layout=LAYOUT_MASKED, epilogue=swiglu)
    # Expected M 128: counts 90..166, 1 or 2 blocks of 128 rows, one pair either way.
    assert heuristics.masked_units(pair, 128, 8) == 8 * 16
    # Expected M 256: counts 180..333, 2 or 3 blocks, one or two pairs (half the groups past 256 rows).
    assert heuristics.masked_units(pair, 256, 8) == 12 * 16


@pytest.mark.parametrize("kind, m", [("m_grouped_masked", 16), ("m_grouped_masked", 128), ("m_grouped_masked", 256),
                                     ("m_grouped_contiguous", 8832), ("dense", 4096),
                                     ("m_grouped_contiguous_psum", 4096)])
@pytest.mark.parametrize("epilogue", [Epilogue(), Epilogue(swiglu=True)], ids=lambda e: e.tag)
def test_choose_fused_is_the_best_estimate_of_its_options(kind, m, epilogue):
    """choose_fused ranks fused_options by estimate (what a device sweep ranks its candidates by)."""
    options = list(heuristics.fused_options(kind, m, 4096, 7168, 8, 132, epilogue))
    assert options and all(c.epilogue == epilogue for c, _ in options)
    choice = heuristics.choose_fused(kind, m, 4096, 7168, 8, 132, epilogue)
    per_unit = heuristics.fused_tiles_per_unit(epilogue)
    estimates = [heuristics.estimate(c, u, 7168, 132, per_unit) for c, u in options]
    assert choice in estimates
    assert choice.est_cycles <= min(e.est_cycles for e in estimates) * 1.001


def test_narrow_masked_swiglu_takes_one_round_of_128_row_units():
    """8 experts x 64 tokens (DeepSeek-V3 gate-up): 64-row units need two rounds of the 132 SMs, 128-row ones one."""
    choice = heuristics.choose_fused("m_grouped_masked", 64, 4096, 7168, 8, 132, Epilogue(swiglu=True))
    assert (choice.config.block_m, choice.num_tiles, choice.waves) == (128, 128, 2)


@pytest.mark.parametrize("groups", [8, 32])
def test_masked_fused_below_the_decode_band_takes_the_models_tile(groups):
    """The masked decode rule's band starts at the expected M (17), as for the plain GEMM: at 16 tokens (counts up to
    21, which one 64-row tile holds) the model's 64-row deferred units (0.76x the 128-row ones' estimate), from 17 on
    the rule's 128-row tiles, as before."""
    swiglu = Epilogue(swiglu=True)
    low = heuristics.choose_fused("m_grouped_masked", 16, 4096, 7168, groups, 132, swiglu).config
    assert (low.block_m, low.block_n, low.defer) == (64, 128, True)
    assert heuristics.choose_grouped(LAYOUT_MASKED, 16, 4096, 7168, groups, 132).config.block_m == 64
    for m in (17, 64, 128):
        assert heuristics.choose_fused("m_grouped_masked", m, 4096, 7168, groups, 132, swiglu).config.block_m == 128


@pytest.mark.parametrize("kind", ["wgrad", "k_grouped", "nope"])
def test_heuristic_refuses_kinds_without_epilogues(kind):
    with pytest.raises(ValueError, match="fused epilogues are for the dense and M-grouped"):
        heuristics.choose_fused(kind, 4096, 4096, 7168, 1, 132, Epilogue())


# --- the entry points' checks ---------------------------------------------------------------------------

M, N, K, G = 256, 512, 1024, 4


class Launched(Exception):
    pass


@pytest.fixture
def plans(monkeypatch):
    """Planning raises Launched after recording its arguments: valid calls reach it, bad ones not."""
    seen = []

    def plan(*args, **kwargs):
        seen.append((args, kwargs))
        raise Launched()

    monkeypatch.setattr(launch, "plan", plan)
    monkeypatch.setattr(grouped_psum, "_plan", plan)
    return seen


def _v(shape, dtype, strides=None, offset=0):
    return fake_view(shape, dtype, strides, BASE + offset)


def _dense(n=N):
    return ((_v((M, K), "float8_e4m3fn"), _v((M, K // 128), "float32", (1, M), 0x100000)),
            (_v((n, K), "float8_e4m3fn", offset=0x200000), _v((n // 128, K // 128), "float32", offset=0x300000)))


def _out(rows, cols, sf_dtype="float32", sf_strides=None, offset=0x400000):
    sf_cols = cols // 128 if sf_dtype == "float32" else -(-cols // 512)
    aligned = -(-rows[-1] // 4) * 4
    if sf_strides is None:
        sf_strides = (1, aligned) if len(rows) == 1 else (sf_cols * aligned, 1, aligned)
    return (_v(rows + (cols,), "float8_e4m3fn", offset=offset), _v(rows + (sf_cols,), sf_dtype, sf_strides,
                                                                   offset + 0x100000))


def _epilogue_of(seen):
    return seen[-1][1]["epilogue"]


@pytest.mark.parametrize("sf_dtype, use_ue8m0, fmt", [("float32", False, "fp32"), ("float32", True, "ue8m0"),
                                                      ("int32", False, "packed"), ("int32", True, "packed")])
def test_dense_fp8_output_reaches_the_launch(plans, sf_dtype, use_ue8m0, fmt):
    a, b = _dense()
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(a, b, _out((M,), N, sf_dtype), use_ue8m0=use_ue8m0)
    assert _epilogue_of(plans) == Epilogue(scale_format=fmt)


def test_dense_swiglu_needs_prepare_gate_up(plans):
    a, b = _dense()
    with pytest.raises(ValueError, match=re.escape("pass b as dgx.prepare_gate_up(B, SFB) returned it")):
        gemm.fp8_gemm_nt(a, b, _out((M,), N // 2), swiglu=True)
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(a, fused.GateUpWeight(b), _out((M,), N // 2), swiglu=True, swiglu_limit=7.0,
                         row_weight=_v((M,), "float32", offset=0x800000), alpha=0.5)
    assert _epilogue_of(plans) == Epilogue(swiglu=True, clamp=True, row_weight=True, alpha=True)


def test_bf16_alpha_reaches_the_launch(plans):
    a, b = _dense()
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(a, b, _v((M, N), "bfloat16", offset=0x400000), alpha=2)
    assert _epilogue_of(plans) == Epilogue(fp8=False, alpha=True)


@pytest.mark.parametrize("call, error, message", [
    (lambda a, b: gemm.fp8_gemm_nt(a, b, (_v((M, N), "bfloat16", offset=0x400000), _out((M,), N)[1])), TypeError,
     "d_fp8: expected dtype float8_e4m3fn; got bfloat16"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, (_out((M,), N)[0], _v((M, N // 128), "bfloat16", offset=0x500000))),
     TypeError, "d_sf: expected dtype float32 (or int32"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N, sf_strides=(N // 128, 1))), ValueError,
     "d_sf: expected the layout the next FP8 GEMM reads"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N, sf_strides=(1, M + 2))), ValueError,
     "d_sf: expected the layout the next FP8 GEMM reads"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N // 2)), ValueError, "d_fp8: expected shape (256, 512)"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, (_out((M,), N)[0], _v((M, 3), "float32", (1, M), 0x500000))), ValueError,
     "d_sf: expected shape (256, 4)"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, (_out((M,), N)[0], _v((M, 2), "int32", (1, M), 0x500000))), ValueError,
     "d_sf: expected shape (256, 1)"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), swiglu_limit=1.0), ValueError,
     "swiglu_limit: clamps SwiGLU's gate and up; pass swiglu=True"),
    (lambda a, b: gemm.fp8_gemm_nt(a, fused.GateUpWeight(b), _out((M,), N // 2), swiglu=True, swiglu_limit=-1.0),
     ValueError, "swiglu_limit: expected a positive float"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _v((M, N), "bfloat16", offset=0x400000), row_weight=_v((M,), "float32")),
     ValueError, "row_weight needs the FP8 output"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _v((M, N), "bfloat16", offset=0x400000), swiglu=True), ValueError,
     "swiglu=True needs the FP8 output"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _v((M, N), "bfloat16", offset=0x400000), use_ue8m0=True), ValueError,
     "use_ue8m0=True needs the FP8 output"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), alpha=True), TypeError, "alpha: expected a float; got bool"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), alpha=float("nan")), ValueError, "alpha: expected a finite"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), swiglu=1), TypeError, "swiglu: expected a bool"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), row_weight=_v((M,), "bfloat16")), TypeError,
     "row_weight: expected dtype float32"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), row_weight=_v((M, 1), "float32")), ValueError,
     "row_weight: expected shape (256,)"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), row_weight=_v((M,), "float32", (2,))), ValueError,
     "row_weight: expected a contiguous tensor"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _out((M,), N), c=_v((M, N), "float32")), ValueError,
     "not for the weight gradient"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, _v((M, N), "float32", offset=0x400000), alpha=1.0), ValueError,
     "not for the weight gradient"),
    (lambda a, b: gemm.fp8_gemm_nt(a, b, (_out((M,), N)[0],)), TypeError, "d: expected a tensor, or a (d_fp8, d_sf)"),
])
def test_dense_bad_fused_arguments_raise_before_launch(plans, call, error, message):
    a, b = _dense()
    with pytest.raises(error, match=re.escape(message)):
        call(a, b)
    assert not plans


def test_n_not_a_whole_group_raises(plans):
    a, b = _dense(n=384 + 8)
    with pytest.raises(ValueError, match=re.escape("B: N must be a multiple of 128")):
        gemm.fp8_gemm_nt(a, b, _out((M,), 384 + 8))
    a, b = _dense(n=384)
    with pytest.raises(ValueError, match=re.escape("B: N must be a multiple of 256")):
        gemm.fp8_gemm_nt(a, fused.GateUpWeight(b), _out((M,), 192), swiglu=True)


def _grouped_b(n=N):
    return (_v((G, n, K), "float8_e4m3fn", offset=0x200000), _v((G, n // 128, K // 128), "float32", offset=0x300000))


def test_contiguous_and_psum_fp8_output(plans):
    a = (_v((M, K), "float8_e4m3fn"), _v((M, K // 128), "float32", (1, M), 0x100000))
    layout = _v((M,), "int32", offset=0x900000)
    with pytest.raises(Launched):
        grouped.m_grouped_fp8_gemm_nt_contiguous(a, fused.GateUpWeight(_grouped_b()), _out((M,), N // 2, "int32"),
                                                 layout, swiglu=True, row_weight=_v((M,), "float32", offset=0x800000))
    assert _epilogue_of(plans) == Epilogue(swiglu=True, row_weight=True, scale_format="packed")
    with pytest.raises(Launched):
        grouped_psum.m_grouped_fp8_gemm_nt_contiguous_psum(a, _grouped_b(), _out((M,), N), _v((G,), "int32"),
                                                           use_ue8m0=True)
    assert plans[-1][1]["epilogue"] == Epilogue(scale_format="ue8m0")
    with pytest.raises(ValueError, match=re.escape("d_fp8: expected shape (256, 512)")):
        grouped.m_grouped_fp8_gemm_nt_contiguous(a, _grouped_b(), _out((M + 128,), N), layout)


def test_masked_fp8_output_and_its_scales_per_group(plans):
    a = (_v((G, M, K), "float8_e4m3fn"), _v((G, M, K // 128), "float32", (M * K // 128, 1, M), 0x100000))
    counts = _v((G,), "int32", offset=0x900000)
    with pytest.raises(Launched):
        grouped.m_grouped_fp8_gemm_nt_masked(a, _grouped_b(), _out((G, M), N), counts, 64, alpha=0.25,
                                             row_weight=_v((G, M), "float32", offset=0x800000))
    assert _epilogue_of(plans) == Epilogue(alpha=True, row_weight=True)
    # Scales whose groups do not follow one another cannot be read back as the next masked GEMM's SFA.
    apart = _out((G, M), N, sf_strides=(M * 8, 1, M))
    with pytest.raises(ValueError, match=re.escape("the groups one after another")):
        grouped.m_grouped_fp8_gemm_nt_masked(a, _grouped_b(), apart, counts, 64)
    with pytest.raises(ValueError, match=re.escape("row_weight: expected shape (4, 256)")):
        grouped.m_grouped_fp8_gemm_nt_masked(a, _grouped_b(), _out((G, M), N), counts, 64,
                                             row_weight=_v((G * M,), "float32"))


def test_fused_call_operands_carry_the_epilogue_values(monkeypatch):
    """Past the checks: the plan gets the epilogue, the operands the scale pointer, strides and scalars."""
    captured = {}

    class Plan:
        config = GemmConfig(N, K, 128, 128, 4, epilogue=Epilogue(row_weight=True, alpha=True))

        class launcher:  # noqa: N801
            @staticmethod
            def launch(stream, pack):
                captured["launched"] = True

    monkeypatch.setattr(launch, "plan", lambda *a, **k: Plan)
    monkeypatch.setattr(launch, "pack", lambda config, ops: captured.setdefault("ops", ops))
    monkeypatch.setattr(gemm, "resolve_stream", lambda stream, device: 0)
    a, b = _dense()
    out = _out((M,), N, sf_strides=(1, M + 4))
    gemm.fp8_gemm_nt(a, b, out, row_weight=_v((M,), "float32", offset=0x800000), alpha=0.5)
    ops = captured["ops"]
    assert ops.d == out[0].ptr and ops.ldd == N and ops.sf_out == out[1].ptr and ops.ld_sf == M + 4
    assert ops.row_weight == BASE + 0x800000 and ops.alpha == 0.5 and ops.sf_group_stride == 0
    assert captured["launched"]


# --- prepare_gate_up ---------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


def _gate_up(groups=None, inter=256, k=384):
    lead = () if groups is None else (groups,)
    w = torch.randn(lead + (2 * inter, k)).to(torch.float8_e4m3fn)
    s = torch.rand(lead + (2 * inter // 128, -(-k // 128))) + 0.5
    return w, s


@pytest.mark.parametrize("groups", [None, 3])
def test_prepare_gate_up_orders_units_of_gate_then_up(groups):
    w, s = _gate_up(groups)
    b2, sfb2 = prepared = fused.prepare_gate_up(w, s)
    assert isinstance(prepared, fused.GateUpWeight) and fused.is_prepared(prepared)
    assert fused.is_prepared((b2, sfb2))  # repacked by the caller: the same B tensor
    assert not fused.is_prepared((b2.clone(), sfb2)) and not fused.is_prepared((w, s))
    inter = w.shape[-2] // 2
    wb, b2b = w.view(torch.uint8), b2.view(torch.uint8)
    for q in range(inter // 128):
        assert torch.equal(b2b[..., 256 * q:256 * q + 128, :], wb[..., 128 * q:128 * q + 128, :])
        assert torch.equal(b2b[..., 256 * q + 128:256 * q + 256, :], wb[..., inter + 128 * q:inter + 128 * q + 128, :])
        assert torch.equal(sfb2[..., 2 * q, :], s[..., q, :])
        assert torch.equal(sfb2[..., 2 * q + 1, :], s[..., inter // 128 + q, :])
    assert b2.is_contiguous() and sfb2.is_contiguous() and b2.dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("make, error, message", [
    (lambda w, s: (w.float(), s), TypeError, "b: expected dtype float8_e4m3fn"),
    (lambda w, s: (w, s.double()), TypeError, "sfb: expected dtype float32"),
    (lambda w, s: (w[:384], s[:3]), ValueError, "I a multiple of 128"),
    (lambda w, s: (w, s[:, :1]), ValueError, "sfb: expected shape (4, 3)"),
    (lambda w, s: (w.numpy() if False else list(w), s), TypeError, "b: expected a torch tensor"),
])
def test_prepare_gate_up_refuses_bad_weights(make, error, message):
    w, s = _gate_up()
    with pytest.raises(error, match=re.escape(message)):
        fused.prepare_gate_up(*make(w, s))


# --- compiles ---------------------------------------------------------------------------------------

COMPILED = [
    GemmConfig(4096, 7168, 128, 128, 5, epilogue=Epilogue()),
    GemmConfig(4096, 7168, 64, 128, 6, epilogue=Epilogue(scale_format="packed", alpha=True)),
    GemmConfig(7168, 2048, 128, 128, 4, pair=SHARE_B, layout=LAYOUT_CONTIGUOUS,
               epilogue=Epilogue(row_weight=True, scale_format="ue8m0")),
    GemmConfig(4096, 7168, 64, 128, 6, layout=LAYOUT_MASKED, defer=True,
               epilogue=Epilogue(swiglu=True, clamp=True, row_weight=True, alpha=True, scale_format="packed")),
    GemmConfig(4096, 7168, 128, 128, 4, layout=LAYOUT_MASKED, epilogue=Epilogue(swiglu=True, scale_format="ue8m0")),
    GemmConfig(4096, 7168, 128, 128, 4, layout=LAYOUT_CONTIGUOUS_PSUM, epilogue=Epilogue(swiglu=True, clamp=True)),
    GemmConfig(7168, 2048, 256, 128, 3, epilogue=Epilogue(fp8=False, alpha=True)),
]


@pytest.mark.parametrize("config", COMPILED, ids=lambda c: c.kernel_name)
def test_fused_kernels_compile_without_spills(config, tmp_path):
    from dgx import compiler, sass_tools

    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert re.search(r"\b0 bytes stack frame", result.log) and "C7514" not in result.log, result.log
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([sass_tools.nvdisasm_path(), "--print-code", str(path)], capture_output=True, text=True,
                          timeout=120).stdout
    assert re.search(r"\bQGMMA\.", sass) and not re.search(r"\b(LDL|STL)(\.|\s)", sass)
    if config.epilogue.fp8:
        assert re.search(r"\bF2FP\.SATFINITE\.E4M3\.F32\.PACK_AB", sass), "no e4m3x2 conversion"
        assert re.search(r"\bUTMASTG\.2D\b", sass), "no TMA store of the FP8 tile"
        assert "SHFL.BFLY" in sass, "no quad reduction of the row amax"
    else:
        assert re.search(r"\bSTSM\.", sass), "the BF16 output keeps the stmatrix epilogue"


# --- warm-up and inspect ------------------------------------------------------------------------------

def test_shapes_file_entries_request_an_epilogue():
    from dgx import families
    from dgx.problems import ProblemError

    kind = families.kind("m_grouped_masked")
    spec = kind.parse({"n": 4096, "k": 7168, "groups": 16, "max_m": 256, "epilogue": "fp8_swiglu_clamp_rw_ue8m0"},
                      lambda f: f)
    assert spec.epilogue == "fp8_swiglu_clamp_rw_ue8m0" and "epilogue=fp8_swiglu" in spec.label
    (piece, _count), *_ = kind.pieces(spec, 256)
    sources = kind.kernels(spec, piece, 132)
    assert sources and all(s.name.endswith("_efp8_swiglu_clamp_rw_ue8m0") or "_efp8_swiglu_clamp_rw_ue8m0_" in s.name
                           for s in sources)
    plain = kind.parse({"n": 4096, "k": 7168, "groups": 16, "max_m": 256}, lambda f: f)
    assert plain.epilogue is None and all("_e" not in s.name.rsplit("_p", 1)[-1]
                                          for s in kind.kernels(plain, kind.pieces(plain, 256)[0][0], 132))
    with pytest.raises(ProblemError, match="epilogue"):
        kind.parse({"n": 4096, "k": 7168, "groups": 16, "epilogue": "fp8_relu"}, lambda f: f)
    with pytest.raises(ProblemError, match="multiple of 256"):
        kind.parse({"n": 4224, "k": 7168, "groups": 16, "epilogue": "fp8_swiglu"}, lambda f: f)
    with pytest.raises(ProblemError, match="no fused epilogues"):
        families.kind("wgrad").parse({"n": 4096, "k": 7168, "epilogue": "fp8"}, lambda f: f)


def test_inspect_shows_the_epilogue(runner, tmp_cache):
    from dgx import cli

    result = runner.invoke(cli.main, ["inspect", "--gemm", "4096", "4096", "7168", "--epilogue", "fp8_swiglu"])
    assert result.exit_code == 0, result.output
    assert "epilogue fp8_swiglu" in result.output and "block 128x128" in result.output
    assert "_efp8_swiglu" in result.output
    result = runner.invoke(cli.main, ["inspect", "--gemm", "4096", "4096", "7168", "--kind", "wgrad",
                                      "--epilogue", "fp8"])
    assert result.exit_code == 2 and "--epilogue" in result.output
    result = runner.invoke(cli.main, ["inspect", "--gemm", "4096", "4104", "7168", "--epilogue", "fp8"])
    assert result.exit_code == 1 and "multiple of 128" in result.output
