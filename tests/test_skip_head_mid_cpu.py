"""fp8_gemm_nt_skip_head_mid without a GPU: the head-split config and its choice (fp8_gemm_nt's tile), the kernel's
NVRTC compile checked in the SASS, input checks, and the launch's output map (driver stood in)."""

from __future__ import annotations

import re
import struct

import pytest

from dgx.kernels.fp8_gemm import INTERFACE, GemmConfig, validate_head_splits
from fake_views import fake_view

torch = pytest.importorskip("torch")
sass_tools = pytest.importorskip("sass_tools")

from driver_stand_in import decode_map, stand_in  # noqa: E402

HS = (128, 64, 128)


def test_validate_head_splits():
    assert validate_head_splits(HS, 32768, 128) == ""
    assert validate_head_splits((72, 8, 72), 144 * 8, 72) == ""  # 72-column tiles store 8-column spans
    assert "tuple of three ints" in validate_head_splits([128, 64, 128], 32768, 128)
    assert "left > 0" in validate_head_splits((0, 64, 128), 32768, 128)
    assert "whole number of heads" in validate_head_splits(HS, 32768 + 256 + 8, 128)
    assert "must divide left (72)" in validate_head_splits((72, 0, 72), 144 * 8, 128)
    assert "dense BF16" in validate_head_splits(HS, 32768, 128, wgrad=True)
    with pytest.raises(ValueError, match="dense BF16 GEMM without split-K"):
        GemmConfig(4096, 7168, 64, 128, 4, split_k=7, head_splits=HS)


def test_config_renders_the_column_map_and_names_it():
    plain = GemmConfig(32768, 512, 128, 128, 5)
    split = GemmConfig(32768, 512, 128, 128, 5, head_splits=HS)
    assert split.kernel_name == plain.kernel_name + "_hs128_64_128"
    assert split.d_cols == 32768 + 128 * 64 and plain.d_cols == 32768
    assert ", false, 1, false, 128, 64, 128>" in split.render().source
    assert ", false, 1, false>" in plain.render().source and "128, 64, 128" not in plain.render().source
    assert ("head_splits", str(HS)) in split.describe() and all(k != "head_splits" for k, _ in plain.describe())


@pytest.mark.parametrize("m", [1, 128, 4096])
@pytest.mark.parametrize("n,k", [(32768, 512), (8192, 512), (16384, 7168)])
def test_choice_is_fp8_gemm_nts_tile_where_it_fits(m, n, k):
    from dataclasses import replace

    from dgx.heuristics import choose_dense
    from dgx.skip_head_mid import choose_config

    config = choose_config(m, n, k, HS, 132)
    assert config == replace(choose_dense(m, n, k, 132).config, head_splits=HS)


def test_choice_falls_back_to_tiles_whose_spans_fit():
    from dgx.skip_head_mid import choose_config

    config = choose_config(4096, 144 * 64, 7168, (72, 8, 72), 132)
    assert config.head_splits == (72, 8, 72) and not validate_head_splits((72, 8, 72), 144 * 64, config.block_n)


def test_kernel_compiles_with_the_mapped_stores(tmp_path):
    from dgx import compiler

    for config in (GemmConfig(32768, 512, 128, 128, 5, head_splits=HS),
                   GemmConfig(144 * 64, 7168, 64, 72, 9, defer=True, head_splits=(72, 8, 72))):
        src = config.render()
        result = compiler.compile_cubin(src.source, src.name,
                                        compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
        assert spills and all(s == ("0", "0") for s in spills), result.log
        text = sass_tools.disassemble(result.cubin)
        assert re.search(r"\bQGMMA\.", text) and re.search(r"\bSTSM\.", text) and "UTMASTG" in text
        assert not re.search(r"\b(LDL|STL)(\.|\s)", text)


# --- input checks ---------------------------------------------------------------------------------------------


def fake(shape, dtype="float32", **kw):
    return fake_view(shape, dtype, **kw)


def _args(m=64, n=1024, k=512, hs=HS):
    left, mid, right = hs
    cols = n + n // (left + right) * mid
    return dict(a=(fake((m, k), "float8_e4m3fn"), fake((m, k // 128), strides=(1, m))),
                b=(fake((n, k), "float8_e4m3fn"), fake((n // 128, k // 128))), d=fake((m, cols), "bfloat16"),
                head_splits=hs)


@pytest.mark.parametrize(
    "change,error,match",
    [
        (dict(head_splits=(128, 64)), TypeError, "head_splits: expected \\(left, mid, right\\)"),
        (dict(head_splits=(128.0, 64, 128)), TypeError, "three ints"),
        (dict(head_splits=(128, -1, 128)), ValueError, "mid >= 0"),
        (dict(head_splits=(100, 64, 100)), ValueError, "multiples of 8"),
        (dict(head_splits=(96, 64, 96)), ValueError, "whole number of heads of left \\+ right = 192"),
        (dict(d=fake((64, 1024), "bfloat16")), ValueError, "d: expected shape \\(64, 1280\\)"),
        (dict(d=fake((64, 1280))), TypeError, "writes BF16"),
        (dict(d=fake((64, 1280), "bfloat16", device=1)), ValueError, "cuda:0 like the others"),
    ],
)
def test_bad_inputs_are_refused_before_a_launch(change, error, match):
    from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid

    args = {**_args(), **change}
    with pytest.raises(error, match=match):
        fp8_gemm_nt_skip_head_mid(**args)


def test_a_config_for_other_head_splits_is_refused():
    from dgx.skip_head_mid import fp8_gemm_nt_skip_head_mid

    with pytest.raises(ValueError, match="its head_splits None are not this call's"):
        fp8_gemm_nt_skip_head_mid(**_args(), config=GemmConfig(1024, 512, 64, 128, 4))


# --- the launch (driver stood in) ------------------------------------------------------------------------------


def test_launch_maps_the_whole_padded_output():
    from dgx.skip_head_mid import choose_config, fp8_gemm_nt_skip_head_mid

    m, n, k = 128, 2048, 512
    cols = n + n // 256 * 64
    a = (torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.zeros(k // 128, m).t())
    b = (torch.zeros(n, k, dtype=torch.float8_e4m3fn), torch.ones(n // 128, k // 128))
    d = torch.zeros(m, cols, dtype=torch.bfloat16)
    with stand_in() as si:
        fp8_gemm_nt_skip_head_mid(a, b, d, HS)
    (launch,) = si.driver.launches
    config = choose_config(m, n, k, HS, 132)
    assert launch.kernel == config.kernel_name and "_hs128_64_128" in launch.kernel
    offsets = dict(zip((p.name for p in INTERFACE.params), INTERFACE.offsets))
    tmap_d = decode_map(launch.params[offsets["tmap_d"]:offsets["tmap_d"] + 128])
    assert tmap_d["address"] == d.data_ptr() and tmap_d["dims"] == (cols, m) and tmap_d["strides"] == (cols * 2,)
    tmap_b = decode_map(launch.params[offsets["tmap_b"]:offsets["tmap_b"] + 128])
    assert tmap_b["dims"] == (k, n)
    assert struct.unpack_from("<q", launch.params, offsets["ld_d"])[0] == cols
