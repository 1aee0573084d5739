"""silu_mul_quant without a GPU: configs and the heuristic, NVRTC compiles checked in the SASS, the family's warm-up
kind and inspect, every bad argument refused before a launch, the launch the per-call path makes (driver stood in),
and the torch operators' fake implementations."""

from __future__ import annotations

import re
import struct

import pytest

from dgx.kernels import silu_mul_quant as K

torch = pytest.importorskip("torch")
sass_tools = pytest.importorskip("sass_tools")

from driver_stand_in import stand_in  # noqa: E402

# --- configs and the heuristic ---------------------------------------------------------------------------------


def test_config_rejects_what_the_kernel_cannot_do():
    for kwargs, match in [(dict(scale_mode="fp16"), "scale_mode"), (dict(unroll=3), "unroll"),
                          (dict(threads=96), "threads"), (dict(clamp=1), "clamp must be a bool"),
                          (dict(fast_silu=0), "fast_silu must be a bool")]:
        with pytest.raises(ValueError, match=match):
            K.SiluMulQuantConfig(**kwargs)
    c = K.SiluMulQuantConfig(True, "packed_ue8m0", 4)
    assert c.units_per_cta == 64 and c.kernel_name == "dgx_silu_mul_quant_packed_ue8m0_clamp_u4_w256"
    assert c.grid(100, 16, 3) == (25, 3, 1) and c.grid(0, 16, 1) == (1, 1, 1)
    precise = K.SiluMulQuantConfig(unroll=8, fast_silu=False)  # A/B-only variants: valid configs, never picked
    assert precise.kernel_name == "dgx_silu_mul_quant_fp32_u8_w256_precise"
    assert "dgx::SmqTraits<256, 8, false, 0, false>" in precise.render().source


def test_heuristic_keeps_bytes_in_flight_and_spreads_small_problems():
    # one unit a half-warp everywhere (measured fastest on every case of tests/device/smq_ab.py)
    for rows, groups in ((8192, 1), (384, 32), (128, 32), (64, 8)):
        assert K.choose_config(rows, 16, groups, 132).unroll == 1
    assert K.chosen_unrolls() == (1,)
    assert K.choose_config(64, 16, 1, 132, True, "ue8m0") == K.SiluMulQuantConfig(True, "ue8m0", 1)
    assert all(c.fast_silu and c.unroll in K.UNROLLS for c in K.warmup_configs())
    with pytest.raises(ValueError, match="positive blocks"):
        K.choose_config(10, 0, 1, 132)
    every = K.warmup_configs()
    assert len(every) == len(set(every)) == 2 * 3 * len(K.chosen_unrolls())
    for rows, groups in ((1, 1), (16, 8), (8192, 1), (4096, 32)):
        for clamp in (False, True):
            for mode in K.SCALE_MODES:
                assert K.choose_config(rows, 16, groups, 132, clamp, mode) in every
    assert K.warmup_configs((True,), ("fp32",)) == [K.SiluMulQuantConfig(True, "fp32", u) for u in K.chosen_unrolls()]


def test_render_pins_the_variant():
    src = K.SiluMulQuantConfig(True, "ue8m0", 1).render()
    assert "dgx::SmqTraits<256, 1, true, 1, true>" in src.source and src.name.endswith("_ue8m0_clamp_u1_w256")
    assert '#include "silu_mul_quant.cuh"' in src.source and src.dynamic_smem == 0


# --- NVRTC compiles, checked in the SASS -----------------------------------------------------------------------


@pytest.mark.parametrize("config", [K.SiluMulQuantConfig(False, "fp32", 4), K.SiluMulQuantConfig(True, "packed_ue8m0", 1),
                                    K.SiluMulQuantConfig(False, "ue8m0", 2)],
                         ids=lambda c: c.kernel_name)
def test_kernel_compiles_to_wide_loads_without_spills(config):
    from dgx import compiler

    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    regs = int(re.search(r"Used (\d+) registers", result.log).group(1))
    assert regs * config.threads * 4 <= 65536, "four CTAs an SM fit the register file"
    text = sass_tools.disassemble(result.cubin)
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text), "local-memory traffic"
    loads = re.findall(r"\bLDG\.E\.(?:\S+\.)?128\b", text)
    assert len(loads) == 2 * config.unroll, "one 16-byte load of gate and one of up per unit"
    assert len(re.findall(r"\bSTG\.E\.64\b", text)) == config.unroll, "8 FP8 bytes a lane per unit"
    assert len(re.findall(r"\bF2FP\.SATFINITE\.E4M3\.F32\.PACK_AB", text)) == 4 * config.unroll
    assert len(re.findall(r"\bSHFL\.BFLY\b", text)) == 4 * config.unroll, "the amax over 16 lanes"
    assert "MUFU.EX2" in text and "MUFU.RCP" in text, "exp and the reciprocal of the sigmoid: the fast forms"
    assert "MUFU.RSQ" not in text, "no precise expf / IEEE division path in the fast kernel"
    assert bool(re.search(r"\bSTG\.E\.U8\b", text)) == (config.scale_mode == "packed_ue8m0")


# --- the family: warm-up kind, inspect, representatives ----------------------------------------------------------


def test_warmup_kind_parses_and_enumerates():
    from dgx import families
    from dgx.problems import ProblemError

    kind = families.kind("silu_mul_quant")
    spec = kind.parse({"kind": "silu_mul_quant"}, lambda f: f)
    assert spec.scales == K.SCALE_MODES and spec.clamp == (False, True)
    pieces = kind.pieces(spec, 8192)
    assert [s.name for p, _ in pieces for s in kind.kernels(spec, p, 132)] == [
        c.kernel_name for c in K.warmup_configs()]
    narrow = kind.parse({"kind": "silu_mul_quant", "scales": "packed_ue8m0", "clamp": False}, lambda f: f)
    assert [s.name for s in kind.kernels(narrow, None, 132)] == [
        K.SiluMulQuantConfig(False, "packed_ue8m0", u).kernel_name for u in K.chosen_unrolls()]
    with pytest.raises(ProblemError, match="scales.*fp32, ue8m0, packed_ue8m0"):
        kind.parse({"kind": "silu_mul_quant", "scales": "bf16"}, lambda f: f)
    with pytest.raises(ProblemError, match="clamp.*true or false"):
        kind.parse({"kind": "silu_mul_quant", "clamp": "yes"}, lambda f: f)
    assert "silu_mul_quant" in families.inspect_names()
    found = kind.inspect({}, 132, "sm_90a")
    assert found.source.name == K.SiluMulQuantConfig().kernel_name and "FP32 scales" in found.header


def test_warmup_shapes_file_entry(tmp_path):
    import json

    from dgx import warmup

    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"kind": "silu_mul_quant", "scales": "fp32", "clamp": True}]))
    specs = warmup.parse_shapes(json.loads(path.read_text()))
    assert len(specs) == 1 and specs[0].scales == ("fp32",) and specs[0].clamp == (True,)


def test_representatives_cover_the_variants():
    from dgx.families import silu_mul_quant as F

    configs = [c for _, c in F.representatives()]
    assert {c.scale_mode for c in configs} == set(K.SCALE_MODES) and {c.clamp for c in configs} == {False, True}
    assert {c.unroll for c in configs} == set(K.UNROLLS)


# --- input checks ---------------------------------------------------------------------------------------------


def _smq(*args, **kwargs):
    from dgx.moe_activation import silu_mul_quant

    return silu_mul_quant(*args, **kwargs)


def _x(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: _smq(_x(4, 512, dtype=torch.float32)), TypeError, "x: expected dtype bfloat16"),
        (lambda: _smq(_x(4, 384)), ValueError, "I a positive multiple of 128; got 384"),
        (lambda: _smq(_x(4, 0)), ValueError, "I a positive multiple of 128"),
        (lambda: _smq(_x(2, 4, 512)), ValueError, "x: expected a 2-D tensor"),
        (lambda: _smq(_x(4, 512), masked_m=torch.zeros(4, dtype=torch.int32)), ValueError, "x: expected a 3-D"),
        (lambda: _smq(_x(512, 4).t()), ValueError, "x: expected contiguous rows"),
        (lambda: _smq(_x(4, 520)[:, 4:516]), ValueError, "16-byte aligned|multiples of 8"),
        (lambda: _smq(_x(2, 4, 512), masked_m=torch.zeros(3, dtype=torch.int32)), ValueError,
         r"masked_m: expected shape \(2,\)"),
        (lambda: _smq(_x(2, 4, 512), masked_m=torch.zeros(2, dtype=torch.int64)), TypeError,
         "masked_m: expected dtype int32|masked_m: expected a tensor of dtype int32"),
        (lambda: _smq(_x(4, 512), swiglu_limit=0.0), ValueError, "swiglu_limit: expected None or a positive"),
        (lambda: _smq(_x(4, 512), swiglu_limit=float("inf")), ValueError, "swiglu_limit"),
        (lambda: _smq(_x(4, 512), swiglu_limit=True), ValueError, "swiglu_limit"),
        (lambda: _smq(_x(4, 512), packed_ue8m0=True), ValueError, "packing needs UE8M0 scales"),
        (lambda: _smq(_x(4, 512), use_ue8m0=1), TypeError, "use_ue8m0: expected a bool"),
        (lambda: _smq(_x(4, 512), out=torch.zeros(4, 256, dtype=torch.bfloat16)), TypeError,
         "out: expected dtype float8_e4m3fn"),
        (lambda: _smq(_x(4, 512), out=torch.zeros(4, 512, dtype=torch.float8_e4m3fn)), ValueError,
         r"out: expected shape \(4, 256\)"),
        (lambda: _smq(_x(4, 512), out_scales=torch.zeros(4, 2)), ValueError,
         "out_scales: expected the M-major TMA-aligned FP32"),
        (lambda: _smq(_x(5, 512), out_scales=torch.zeros(2, 5).t()), ValueError, "k-block stride a multiple of 4"),
        (lambda: _smq(_x(4, 512), out_scales=torch.zeros(4, 2, dtype=torch.int32)), TypeError,
         "out_scales: expected dtype float32"),
        (lambda: _smq(_x(4, 512), use_ue8m0=True, packed_ue8m0=True, out_scales=torch.zeros(4, 1)), TypeError,
         "out_scales: expected dtype int32"),
        (lambda: _smq(_x(2, 4, 512), masked_m=torch.zeros(2, dtype=torch.int32),
                      out_scales=torch.zeros(2, 3, 4)[:, :2].transpose(1, 2)), ValueError, "groups one after another"),
    ],
)
def test_bad_inputs_are_refused_before_a_launch(call, error, match):
    with stand_in() as si:
        with pytest.raises(error, match=match):
            call()
    assert si.driver.launches == []


def test_outputs_overlapping_x_are_refused():
    x = _x(4, 512)
    with stand_in() as si:
        with pytest.raises(ValueError, match="out: must not overlap x"):
            _smq(x, out=x.view(torch.uint8)[:, :256].view(torch.float8_e4m3fn))
    assert si.driver.launches == []


# --- the launch (driver stood in) ------------------------------------------------------------------------------


def _params(launch) -> dict:
    out = {}
    for p, off in zip(K.INTERFACE.params, K.INTERFACE.offsets):
        fmt = "Q" if p.ctype.endswith("*") else {"int": "i", "long long": "q", "float": "f"}[p.ctype]
        out[p.name] = struct.unpack_from("<" + fmt, launch.params, off)[0]
    return out


def test_contiguous_launch_allocates_the_gemm_layouts():
    x = _x(1000, 4096)
    with stand_in() as si:
        y, sf = _smq(x)
        _smq(x, out=y, out_scales=sf)  # the packed parameters are reused
    assert y.dtype == torch.float8_e4m3fn and y.shape == (1000, 2048)
    assert sf.dtype == torch.float32 and sf.shape == (1000, 16) and sf.stride() == (1, 1000)
    assert len(si.driver.launches) == 2
    launch = si.driver.launches[0]
    config = K.choose_config(1000, 16, 1, 132)
    assert launch.kernel == config.kernel_name and launch.grid == config.grid(1000, 16, 1)
    p = _params(launch)
    assert (p["x"], p["y"], p["sf"], p["masked_m"]) == (x.data_ptr(), y.data_ptr(), sf.data_ptr(), 0)
    assert (p["x_row"], p["y_row"], p["sf_ld"], p["rows"], p["blocks"]) == (4096, 2048, 1000, 1000, 16)


def test_masked_packed_clamped_launch():
    x = _x(8, 130, 1024)
    counts = torch.tensor([0, 1, 130, 5, 6, 7, 8, 9], dtype=torch.int32)
    with stand_in() as si:
        y, sf = _smq(x, masked_m=counts, swiglu_limit=7.0, use_ue8m0=True, packed_ue8m0=True)
    assert y.shape == (8, 130, 512) and sf.dtype == torch.int32
    assert sf.shape == (8, 130, 1) and sf.stride() == (132, 1, 132)
    launch = si.driver.launches[0]
    config = K.choose_config(130, 4, 8, 132, True, "packed_ue8m0")
    assert launch.kernel == config.kernel_name and config.clamp and launch.grid == config.grid(130, 4, 8)
    p = _params(launch)
    assert p["masked_m"] == counts.data_ptr() and p["limit"] == 7.0
    assert (p["x_row"], p["x_group"], p["y_row"], p["y_group"]) == (1024, 130 * 1024, 512, 130 * 512)
    assert (p["sf_ld"], p["sf_group"], p["rows"], p["blocks"]) == (132, 132, 130, 4)


def test_ue8m0_scales_keep_fp32_and_empty_inputs_launch_nothing():
    with stand_in() as si:
        _, sf = _smq(_x(3, 768), use_ue8m0=True)
        y, sf0 = _smq(_x(0, 512))
        _smq(_x(0, 4, 512), masked_m=torch.zeros(0, dtype=torch.int32))
    assert sf.dtype == torch.float32 and sf.shape == (3, 3) and sf.stride() == (1, 4)
    assert y.shape == (0, 256) and sf0.shape == (0, 2)
    assert [launch.kernel for launch in si.driver.launches] == [K.choose_config(3, 3, 1, 132, False, "ue8m0").kernel_name]


# --- torch operators --------------------------------------------------------------------------------------------


def test_torch_operators_fake_shapes_and_strides():
    from torch._subclasses.fake_tensor import FakeTensorMode

    import dgx.torch_ops

    with FakeTensorMode():
        x = torch.empty(2, 5, 1024, dtype=torch.bfloat16)
        y, sf = torch.ops.dgx.silu_mul_quant(x, torch.empty(2, dtype=torch.int32), 3.0, True, True)
        assert y.shape == (2, 5, 512) and y.dtype == torch.float8_e4m3fn
        assert sf.shape == (2, 5, 1) and sf.stride() == (8, 1, 8) and sf.dtype == torch.int32
        y, sf = torch.ops.dgx.silu_mul_quant(torch.empty(7, 512, dtype=torch.bfloat16))
        assert sf.shape == (7, 2) and sf.stride() == (1, 8) and sf.dtype == torch.float32
    with stand_in() as si:  # given outputs: the eager function, which checks them
        with pytest.raises(TypeError, match="out: expected dtype float8_e4m3fn"):
            dgx.torch_ops.silu_mul_quant(torch.empty(7, 512, dtype=torch.bfloat16), out=torch.empty(7, 256))
    assert si.driver.launches == []
