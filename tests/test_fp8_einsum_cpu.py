"""dgx.fp8_einsum ('bhr,hdr->bhd') without a GPU: the expression, the batched-layout config and its choice, the
kernel's NVRTC compile checked in the SASS, every input check (before a launch), the launch's 3-D maps and the
scale conversion (driver stood in), the family (warm-up kind, inspect) and DeepGEMM's name."""

from __future__ import annotations

import inspect
import re
import struct

import pytest

from dgx.errors import Sm100OnlyError
from dgx.kernels.fp8_gemm import INTERFACE, LAYOUT_BATCHED, GemmConfig
from fake_views import fake_view

torch = pytest.importorskip("torch")

from driver_stand_in import decode_map, stand_in  # noqa: E402

SHAPES = [(8, 1024, 4096), (128, 128, 512)]  # (h, d, r): DeepSeek's MLA projections
BS = (1, 4, 17, 32, 128, 4096, 4097, 8192)


# --- the expression ---------------------------------------------------------------------------------------------


def test_expression_is_normalised_and_the_sm100_ones_refused():
    from dgx.fp8_einsum import normalize_expr

    assert normalize_expr("bhr,hdr->bhd") == normalize_expr(" bhr, hdr -> bhd ") == "bhr,hdr->bhd"
    for expr in ("bhd,hdr->bhr", "bhd, bhr -> hdr"):
        with pytest.raises(Sm100OnlyError, match="sm_100 \\(Blackwell\\) only"):
            normalize_expr(expr)
    with pytest.raises(ValueError, match="expected 'bhr,hdr->bhd'.*got 'bmk,bnk->mn'"):
        normalize_expr("bmk,bnk->mn")
    with pytest.raises(TypeError, match="expr: expected a string"):
        normalize_expr(None)
    assert issubclass(Sm100OnlyError, NotImplementedError)


# --- the config and its choice ----------------------------------------------------------------------------------


def test_batched_config_is_named_validated_and_kinded():
    from dgx.kinds import FP8_EINSUM_BHR_HDR_BHD, GemmKind

    c = GemmConfig(1024, 4096, 128, 128, 5, layout=LAYOUT_BATCHED)
    assert c.kernel_name.startswith("dgx_fp8_gemm_nt_batched_n1024_k4096") and "gemm_" in c.kernel_name
    assert c.warmup_kind == FP8_EINSUM_BHR_HDR_BHD and c.kind is GemmKind.M_GROUPED_MASKED
    assert '"kind": "fp8_einsum_bhr_hdr_bhd", "d": 1024, "r": 4096' in c.render().warmup_hint
    assert "dgx::fp8_gemm_nt_body<5, 1024, 4096, 128, 128, 5," in c.render().source
    with pytest.raises(ValueError, match="multicast pairs are for the dense, contiguous and masked layouts only"):
        GemmConfig(1024, 4096, 128, 128, 5, pair=2, layout=LAYOUT_BATCHED)
    with pytest.raises(ValueError, match="batched layout .* BF16 GEMM without split-K"):
        GemmConfig(1024, 4096, 64, 128, 4, layout=LAYOUT_BATCHED, split_k=2)


@pytest.mark.parametrize("h,d,r", SHAPES)
def test_choice_covers_every_b(h, d, r):
    from dgx.heuristics import choose_batched

    for b in BS:
        choice = choose_batched(b, d, r, h, 132)
        c = choice.config
        assert c.layout == LAYOUT_BATCHED and c.n == d and c.k == r and c.pair == 0 and c.split_k == 1
        assert choice.num_tiles == c.units(b) * h
        if b <= 32:
            assert c.block_m == 64  # decode: one 64-row tile covers b
    # prefill: the widest tiles; decode: enough tiles for the SMs (memory-bound on y)
    assert choose_batched(8192, d, r, h, 132).config.block_m == 256
    assert choose_batched(4, 1024, 4096, 8, 132).num_tiles >= 128


def test_bad_problem_sizes_are_refused_by_the_heuristic():
    from dgx.heuristics import choose_batched

    with pytest.raises(ValueError, match="choose_batched needs positive"):
        choose_batched(0, 1024, 4096, 8, 132)


# --- the kernel -------------------------------------------------------------------------------------------------


def test_kernels_compile_without_spills_with_3d_loads_and_stores():
    from dgx import compiler
    from dgx.heuristics import choose_batched

    sass_tools = pytest.importorskip("sass_tools")
    # decode (64-row deferred tile) and prefill (256 rows, A scales times B scale in the stage)
    for config in (choose_batched(32, 1024, 4096, 8, 132).config, choose_batched(4096, 128, 512, 128, 132).config):
        src = config.render()
        result = compiler.compile_cubin(src.source, src.name,
                                        compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
        assert spills and all(s == ("0", "0") for s in spills), result.log
        text = sass_tools.disassemble(result.cubin)
        assert re.search(r"\bQGMMA\.", text) and "UTMALDG.3D" in text and "UTMASTG.3D" in text
        assert "UTMASTG.2D" not in text  # D is only ever stored through its 3-D map
        assert not re.search(r"\b(LDL|STL)(\.|\s)", text)


# --- input checks -----------------------------------------------------------------------------------------------


def fake(shape, dtype="float32", **kw):
    return fake_view(shape, dtype, **kw)


def _args(b=32, h=8, d=256, r=512):
    return dict(a=(fake((b, h, r), "float8_e4m3fn"), fake((b, h, r // 128))),
                b=(fake((h, d, r), "float8_e4m3fn"), fake((h, d // 128, r // 128))), d=fake((b, h, d), "bfloat16"))


@pytest.mark.parametrize(
    "change,error,match",
    [
        (dict(a=(fake((32, 512), "float8_e4m3fn"), fake((32, 8, 4)))), ValueError, "x: expected a 3-D tensor"),
        (dict(a=(fake((32, 8, 512), "bfloat16"), fake((32, 8, 4)))), TypeError, "x: expected dtype float8_e4m3fn"),
        (dict(a=(fake((32, 8, 512), "float8_e4m3fn"), fake((32, 8, 4), "bfloat16"))), TypeError,
         "sfx: expected dtype float32"),
        (dict(a=(fake((32, 8, 512), "float8_e4m3fn"), fake((32, 8, 5)))), ValueError,
         "sfx: expected shape \\(32, 8, 4\\)"),
        (dict(a=(fake((32, 8, 0), "float8_e4m3fn"), fake((32, 8, 0)))), ValueError, "r .* must be positive"),
        (dict(b=(fake((4, 256, 512), "float8_e4m3fn"), fake((4, 2, 4)))), ValueError,
         "y: expected shape \\(8, d, 512\\)"),
        (dict(b=(fake((8, 256, 512), "float8_e4m3fn"), fake((8, 1, 4)))), ValueError, "sfy: expected shape \\(8, 2, 4\\)"),
        (dict(b=(fake((8, 256, 512), "float8_e4m3fn"), fake((8, 2, 4), strides=(1, 8, 2)))), ValueError,
         "sfy: expected a contiguous"),
        (dict(b=(fake((8, 260, 512), "float8_e4m3fn"), fake((8, 3, 4))), d=fake((32, 8, 260), "bfloat16")),
         ValueError, "y: d must be a multiple of 8"),
        (dict(b=(fake((8, 256, 512), "float8_e4m3fn", strides=(256 * 640 + 16, 640, 1)), fake((8, 2, 4)))),
         ValueError, "y: expected the heads stored one after another"),
        (dict(a=(fake((32, 8, 520), "float8_e4m3fn"), fake((32, 8, 5))),
          b=(fake((8, 256, 520), "float8_e4m3fn"), fake((8, 2, 5)))), ValueError,
         "x: TMA needs row strides that are a multiple of 16 bytes"),
        (dict(a=(fake((32, 8, 512), "float8_e4m3fn", strides=(4096, 1, 8)), fake((32, 8, 4)))), ValueError,
         "x: expected contiguous rows"),
        (dict(a=(fake((32, 8, 512), "float8_e4m3fn", ptr=0x7F0000000008), fake((32, 8, 4)))), ValueError,
         "x: TMA needs a 16-byte aligned base address"),
        (dict(d=fake((32, 8, 256))), TypeError, "writes BF16"),
        (dict(d=fake((32, 8, 128), "bfloat16")), ValueError, "z: expected shape \\(32, 8, 256\\)"),
        (dict(d=fake((32, 8, 256), "bfloat16", device=1)), ValueError, "cuda:0 like the others"),
        (dict(a=(fake((32, 8, 512), "float8_e4m3fn"), fake((32, 8, 4), strides=(-32, 4, 1)))), ValueError,
         "sfx: negative strides"),
        (dict(a=[fake((32, 8, 512), "float8_e4m3fn")]), TypeError, "a: expected a \\(tensor, scales\\) pair"),
    ],
)
def test_bad_inputs_are_refused_before_a_launch(change, error, match):
    from dgx.fp8_einsum import fp8_einsum

    args = {**_args(), **change}
    with stand_in() as si:
        with pytest.raises(error, match=match):
            fp8_einsum("bhr,hdr->bhd", **args)
    assert si.driver.launches == []


def test_fake_views_of_another_layout_are_not_converted():
    from dgx.fp8_einsum import fp8_einsum

    with pytest.raises(ValueError, match="sfx: expected float32 scales of a torch tensor"):
        fp8_einsum("bhr,hdr->bhd", **_args())


def test_config_for_another_problem_is_refused():
    from dgx.fp8_einsum import fp8_einsum

    with pytest.raises(ValueError, match="config: expected a batched-layout"):
        fp8_einsum("bhr,hdr->bhd", **_args(), config=GemmConfig(256, 512, 64, 128, 4))
    with pytest.raises(TypeError, match="config: expected a GemmConfig"):
        fp8_einsum("bhr,hdr->bhd", **_args(), config="64x128")


def test_sm100_expression_is_refused_before_the_operands_are_read():
    from dgx.fp8_einsum import fp8_einsum

    with pytest.raises(Sm100OnlyError, match="'bhd,hdr->bhr' is sm_100"):
        fp8_einsum("bhd,hdr->bhr", None, None, None)


# --- the launch (driver stood in) ------------------------------------------------------------------------------


def _params(launch):
    offsets = dict(zip((p.name for p in INTERFACE.params), INTERFACE.offsets))

    def tmap(name):
        return decode_map(launch.params[offsets[name]:offsets[name] + 128])

    def i32(name):
        return struct.unpack_from("<i", launch.params, offsets[name])[0]

    def u64(name):
        return struct.unpack_from("<Q", launch.params, offsets[name])[0]

    return tmap, i32, u64


def _tensors(b, h, d, r, x_pad=0):
    x = torch.zeros(b, h, r + x_pad, dtype=torch.float8_e4m3fn)[:, :, :r]
    sfx = torch.ones(b, h, -(-r // 128))
    y = torch.zeros(h, d, r, dtype=torch.float8_e4m3fn)
    sfy = torch.ones(h, -(-d // 128), -(-r // 128))
    z = torch.zeros(b, h, d, dtype=torch.bfloat16)
    return x, sfx, y, sfy, z


@pytest.mark.parametrize("b,x_pad", [(17, 0), (4096, 128), (1, 0)])
def test_launch_maps_x_and_z_per_head_and_converts_sfx(b, x_pad):
    from dgx.fp8_einsum import fp8_einsum
    from dgx.heuristics import choose_batched

    h, d, r = 8, 1024, 4096
    x, sfx, y, sfy, z = _tensors(b, h, d, r, x_pad)
    with stand_in() as si:
        fp8_einsum("bhr,hdr->bhd", (x, sfx), (y, sfy), z)
    convert, gemm = si.driver.launches
    config = choose_batched(b, d, r, h, 132).config
    assert convert.kernel.startswith("dgx_sf_transpose") and convert.grid[2] == h  # one group per head
    assert gemm.kernel == config.kernel_name
    tmap, i32, u64 = _params(gemm)
    ta = tmap("tmap_a")
    assert ta["address"] == x.data_ptr() and ta["dims"] == (r, h, b)
    assert ta["strides"] == (r + x_pad, h * (r + x_pad)) and ta["box"] == (128, 1, config.block_m)
    td = tmap("tmap_d")
    assert td["address"] == z.data_ptr() and td["dims"] == (d, h, b) and td["strides"] == (d * 2, h * d * 2)
    assert td["box"][1] == 1
    tb = tmap("tmap_b")
    assert tb["address"] == y.data_ptr() and tb["dims"] == (r, h * d)
    # the converted scales: per head, a row of b (padded to 4) floats per k-block
    tsfa = tmap("tmap_sfa")
    kb = r // 128
    assert tsfa["dims"] == (b, h * kb) and tsfa["strides"] == (4 * -(-b // 4) * 4,)
    assert i32("m") == b and i32("num_groups") == h and i32("sfa_rows") == b
    assert u64("sfb") == sfy.data_ptr()


def test_sfx_for_kernel_is_read_without_a_conversion():
    from dgx.fp8_einsum import fp8_einsum, sfx_for_kernel

    b, h, d, r = 17, 8, 256, 512
    x, sfx, y, sfy, z = _tensors(b, h, d, r)
    sfx = torch.randn(b, h, r // 128)
    ready = sfx_for_kernel(sfx)
    assert ready.shape == sfx.shape and torch.equal(ready, sfx) and ready.stride() == (1, 4 * 20, 20)
    with stand_in() as si:
        fp8_einsum("bhr,hdr->bhd", (x, ready), (y, sfy), z)
    (gemm,) = si.driver.launches
    tmap, _, _ = _params(gemm)
    assert tmap("tmap_sfa")["address"] == ready.data_ptr()


def test_repeated_calls_take_the_fast_path_with_new_addresses():
    from dgx.fp8_einsum import fp8_einsum

    b, h, d, r = 32, 8, 256, 512
    x, sfx, y, sfy, z = _tensors(b, h, d, r)
    z2 = torch.zeros_like(z)
    with stand_in() as si:
        fp8_einsum("bhr,hdr->bhd", (x, sfx), (y, sfy), z)
        fp8_einsum("bhr,hdr->bhd", (x, sfx), (y, sfy), z2)
    kernels = [launch.kernel for launch in si.driver.launches]
    assert len(kernels) == 4 and kernels[0] == kernels[2] and kernels[1] == kernels[3]
    tmap, _, _ = _params(si.driver.launches[3])
    assert tmap("tmap_d")["address"] == z2.data_ptr()


def test_empty_problems_launch_nothing():
    from dgx.fp8_einsum import fp8_einsum

    for b, h in ((0, 8), (4, 0)):
        x, sfx, y, sfy, z = _tensors(b, h, 256, 512)
        with stand_in() as si:
            fp8_einsum("bhr,hdr->bhd", (x, sfx), (y, sfy), z)
        assert si.driver.launches == []


# --- the family, warm-up and inspect ------------------------------------------------------------------------------


def test_family_kind_parses_and_warms_every_choice():
    from dgx import families
    from dgx.heuristics import choose_batched
    from dgx.problems import ProblemError

    kind = families.kind("fp8_einsum_bhr_hdr_bhd")
    spec = kind.parse({"h": 8, "d": 1024, "r": 4096, "max_b": 8192}, lambda f: f)
    pieces = kind.pieces(spec, 8192)
    names = {src.name for piece, _ in pieces for src in kind.kernels(spec, piece, 132)}
    assert {choose_batched(b, 1024, 4096, 8, 132).config.kernel_name for b in BS} <= names
    assert any(name for name, _ in kind.helpers)  # the scale-layout kernel every call may launch
    for entry, field in (({"h": 8, "d": 1020, "r": 4096}, "d"), ({"h": 8, "d": 1024, "r": 4100}, "r"),
                         ({"h": 70000, "d": 1024, "r": 4096}, "h"), ({"d": 1024, "r": 4096}, "h")):
        with pytest.raises(ProblemError, match=field):
            kind.parse(entry, lambda f: f)


def test_inspect_selects_the_heuristics_kernel():
    from dgx import families
    from dgx.heuristics import choose_batched

    found = families.kind("fp8_einsum_bhr_hdr_bhd").inspect({"gemm": (4096, 1024, 4096), "groups": 8}, 132, "sm_90a")
    assert found.source.name == choose_batched(4096, 1024, 4096, 8, 132).config.kernel_name
    assert "fp8_einsum 'bhr,hdr->bhd' b=4096 h=8 d=1024 r=4096" in found.header


def test_cli_inspect_refuses_options_the_kind_does_not_read(runner, tmp_cache):
    from dgx.cli import main

    out = runner.invoke(main, ["inspect", "--kind", "fp8_einsum_bhr_hdr_bhd", "--gemm", "4", "1024", "4096",
                               "--groups", "8", "--heads", "8"])
    assert out.exit_code == 2 and "--kind fp8_einsum_bhr_hdr_bhd reads --gemm, --groups, --num-sms" in out.output


def test_registered_once_with_its_representatives():
    from dgx import families

    (family,) = [f for f in families.FAMILIES if f.name == "fp8_einsum"]
    reps = family.representatives()
    assert len(reps) == 4 and all(c.layout == LAYOUT_BATCHED and "gemm_" in c.kernel_name for _, c in reps)


# --- DeepGEMM's name ------------------------------------------------------------------------------------------------


def test_deep_gemm_name_has_deepgemms_signature_and_checks():
    import dgx.deep_gemm as deep_gemm

    assert str(inspect.signature(deep_gemm.fp8_einsum)) == "(expr, a, b, d, c=None, recipe=(1, 128, 128))"
    assert not hasattr(deep_gemm.fp8_einsum, "family")  # not the pending stand-in
    args = _args()
    with pytest.raises(Sm100OnlyError, match="'bhd,bhr->hdr' \\(weight gradient\\) is sm_100"):
        deep_gemm.fp8_einsum("bhd,bhr->hdr", args["a"], args["b"], args["d"], args["d"], recipe=(1, 1, 128))
    with pytest.raises(ValueError, match="recipe: expected \\(1, 128, 128\\)"):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", args["a"], args["b"], args["d"], recipe=(1, 1, 128))
    with pytest.raises(ValueError, match="c: 'bhr,hdr->bhd' .* adds no c"):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", args["a"], args["b"], args["d"], c=args["d"])
