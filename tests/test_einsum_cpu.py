"""The einsum family on the CPU: the heuristics, the launches a call queues (driver stood in: tensor maps that say what
the kernels read and write, the batch-sum grid and its in-order reduction), every bad input refused before anything
is queued, DeepGEMM's name, the torch operator (fake implementation, make_fx), warm-up and inspect kinds, and NVRTC
compiles of every variant (HGMMA, 3-D TMA, no spills)."""

from __future__ import annotations

import inspect
import re
import struct
import subprocess

import pytest

torch = pytest.importorskip("torch")

import dgx  # noqa: E402
from dgx import compiler, families, runtime  # noqa: E402
from dgx.kernels import einsum as K  # noqa: E402
from dgx.kernels.bf16_gemm import INTERFACE  # noqa: E402
from driver_stand_in import decode_map, stand_in  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32


def t(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


@pytest.fixture
def gpu():
    with stand_in() as state:
        yield state


def maps_of(launch) -> dict:
    names = [p.name for p in INTERFACE.params]
    return {name: decode_map(launch.params[INTERFACE.offsets[names.index(name)]:][:128])
            for name in ("tmap_a", "tmap_b", "tmap_d")}


def scalar(launch, interface, name: str, fmt: str = "<i"):
    return struct.unpack_from(fmt, launch.params, interface.offsets[[p.name for p in interface.params].index(name)])[0]


# --- heuristics ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("expr", [K.BHR_HDR_BHD, K.BHD_HDR_BHR])
@pytest.mark.parametrize("h,r,d", [(128, 512, 128), (8, 4096, 1024)])
@pytest.mark.parametrize("b", [1, 4, 17, 32, 128, 4096, 8192])
def test_batched_choice_fills_the_sms_and_reads_x_once_when_large(expr, h, r, d, b):
    n, k = (d, r) if expr == K.BHR_HDR_BHD else (r, d)
    c = K.choose_batched(expr, b, h, n, k, 132)
    units = c.units(b) * h
    assert c.layout == K.LAYOUT_BATCHED and c.major_a == "k" and c.major_b == K.BATCHED_MAJOR_B[expr]
    assert c.pair == 0 and c.split_k == 1 and not c.with_c
    if b <= 128:  # memory-bound on the weights: nearly every SM streams a share of them
        assert units >= 120, (c, units)
    if b >= 4096:  # two math warpgroups, wide tiles
        assert c.block_m >= 128 and c.block_n >= 128, c
    if b <= 64:
        assert c.block_m == 64, c


@pytest.mark.parametrize("m,n,k", [(128, 384, 128), (256, 256, 256), (384, 128, 384), (64, 64, 64), (8, 24, 40)])
@pytest.mark.parametrize("s", [1, 129, 4096, 8192])
def test_batch_sum_choice_is_one_kernel_for_every_s_and_fills_one_wave(m, n, k, s):
    c = K.choose_batch_sum(m, n, k, 132)
    assert c.layout == K.LAYOUT_BATCH_SUM and c.out_dtype == "float32" and c.stages >= K.BATCH_SUM_MIN_STAGES
    ranges = K.batch_sum_ranges(c, m, s, 132)
    tiles = K.batch_sum_tiles(c, m)
    total = s * -(-k // (64 * c.k_atoms))
    assert 1 <= ranges <= total and tiles * ranges <= max(132, tiles)
    if total >= 132 * K.MIN_KBLOCKS_PER_RANGE:
        assert tiles * ranges > 120  # every SM takes a range of a tile
    assert K.choose_batch_sum(m, n, k, 132) == c  # S is not an input of the choice


def test_heuristics_refuse_bad_arguments():
    with pytest.raises(ValueError, match="expr"):
        K.choose_batched("bmk,bnk->mn", 4, 8, 128, 128)
    with pytest.raises(ValueError, match="b must be a positive int"):
        K.choose_batched(K.BHR_HDR_BHD, 0, 8, 128, 128)
    with pytest.raises(ValueError, match="m must be a positive int"):
        K.choose_batch_sum(0, 8, 8)
    with pytest.raises(ValueError, match="C is added to an FP32 D only"):
        K.BatchSumReduceConfig("bfloat16", True)


# --- launches (driver stood in) ------------------------------------------------------------------------------


def test_bhr_hdr_bhd_reads_strided_views_through_3d_maps(gpu):
    b, h, r, d = 32, 8, 512, 256
    x = t(b, h, r)
    fy = t(h, d, r + 128)
    y = fy[:, :, :r]  # DeepGEMM's test: a slice of a wider tensor
    z = t(b, h, d)
    dgx.einsum("bhr,hdr->bhd", x, y, z)
    assert len(gpu.driver.launches) == 1
    run = gpu.driver.launches[0]
    assert run.kernel.startswith("dgx_bf16_gemm_nt_batched_bf16_n256_k512_") and "gemm" in run.kernel
    maps = maps_of(run)
    assert maps["tmap_a"]["address"] == x.data_ptr()
    assert maps["tmap_a"]["dims"] == (r, b, h) and maps["tmap_a"]["strides"] == (h * r * 2, r * 2)
    assert maps["tmap_b"]["address"] == y.data_ptr()
    assert maps["tmap_b"]["dims"] == (r, d, h) and maps["tmap_b"]["strides"] == ((r + 128) * 2, d * (r + 128) * 2)
    assert maps["tmap_d"]["dims"] == (d, b, h) and maps["tmap_d"]["strides"] == (h * d * 2, d * 2)
    assert scalar(run, INTERFACE, "m") == b and scalar(run, INTERFACE, "num_groups") == h
    assert not gpu.driver.copies and not gpu.driver.memsets


def test_bhd_hdr_bhr_reads_y_n_major(gpu):
    b, h, r, d = 4, 8, 1024, 128
    x, y, z = t(b, h, d), t(h, d, r + 128)[:, :, :r], t(b, h, r)
    dgx.einsum(" bhd, hdr -> bhr ", x, y, z)
    run = gpu.driver.launches[-1]
    assert run.kernel.startswith("dgx_bf16_gemm_nn_batched_bf16_n1024_k128_")
    maps = maps_of(run)
    assert maps["tmap_a"]["dims"] == (d, b, h)
    assert maps["tmap_b"]["dims"] == (r, d, h) and maps["tmap_b"]["strides"] == ((r + 128) * 2, d * (r + 128) * 2)
    assert maps["tmap_d"]["dims"] == (r, b, h)


@pytest.mark.parametrize("out,with_c", [(F32, False), (F32, True), (BF16, False)])
def test_bmk_bnk_mn_runs_ranges_then_the_in_order_reduction(gpu, out, with_c):
    s, m, n, k = 4096, 256, 256, 256
    a, b, d = t(s, m, k), t(s, n, k), t(m, n, dtype=out)
    dgx.einsum("bmk,bnk->mn", a, b, d, d if with_c else None)
    assert len(gpu.driver.launches) == 2
    gemm, reduce = gpu.driver.launches
    assert "bmn_bnk_mn_gemm_impl" in gemm.kernel and "bmn_bnk_mn_gemm_impl" in reduce.kernel
    config = K.choose_batch_sum(m, n, k, 132)
    ranges = K.batch_sum_ranges(config, m, s, 132)
    assert gemm.grid[0] == K.batch_sum_tiles(config, m) * ranges  # one unit per CTA: the kernel derives the ranges
    maps = maps_of(gemm)
    assert maps["tmap_a"]["dims"] == (k, m, s) and maps["tmap_a"]["strides"] == (k * 2, m * k * 2)
    assert maps["tmap_b"]["dims"] == (k, n, s) and maps["tmap_b"]["strides"] == (k * 2, n * k * 2)
    assert maps["tmap_d"]["dims"] == (n, m, ranges) and maps["tmap_d"]["strides"] == (n * 4, m * n * 4)
    workspace = maps["tmap_d"]["address"]
    assert scalar(gemm, INTERFACE, "num_groups") == s and scalar(gemm, INTERFACE, "m") == m
    ri = K.REDUCE_INTERFACE
    assert scalar(reduce, ri, "partials", "<Q") == workspace and scalar(reduce, ri, "d", "<Q") == d.data_ptr()
    assert scalar(reduce, ri, "c", "<Q") == (d.data_ptr() if with_c else 0)
    assert scalar(reduce, ri, "ranges") == ranges and scalar(reduce, ri, "n") == n
    assert reduce.kernel.endswith(("_f32_c" if with_c else ("_f32" if out == F32 else "_bf16")) + "_w256")


def test_bmk_bnk_mn_reads_another_c_in_place(gpu):
    a, b, d, c = t(129, 128, 128), t(129, 384, 128), t(128, 384, dtype=F32), t(128, 384, dtype=F32)
    dgx.einsum("bmk,bnk->mn", a, b, d, c)
    reduce = gpu.driver.launches[-1]
    assert scalar(reduce, K.REDUCE_INTERFACE, "c", "<Q") == c.data_ptr()
    assert not gpu.driver.copies  # c is read by the reduction, not copied into d first


def test_empty_batches_and_k_set_d_without_a_kernel(gpu):
    d = t(64, 64, dtype=F32)
    dgx.einsum("bmk,bnk->mn", t(0, 64, 64), t(0, 64, 64), d)
    assert not gpu.driver.launches and gpu.driver.memsets
    z = t(4, 2, 64)
    dgx.einsum("bhr,hdr->bhd", t(4, 2, 0), t(2, 64, 0), z)
    assert not gpu.driver.launches and len(gpu.driver.memsets) == 1 + 4


# --- refused inputs ------------------------------------------------------------------------------------------------

BAD = [
    (("bmk,bnk->nm", t(2, 8, 8), t(2, 8, 8), t(8, 8, dtype=F32)), ValueError, "expr: expected one of"),
    ((3, t(2, 8, 8), t(2, 8, 8), t(8, 8, dtype=F32)), TypeError, "expr: expected a str"),
    (("bmk,bnk->mn", t(2, 8, 8, dtype=F32), t(2, 8, 8), t(8, 8, dtype=F32)), TypeError, "a: expected dtype bfloat16"),
    (("bmk,bnk->mn", t(2, 8, 8), t(3, 8, 8), t(8, 8, dtype=F32)), ValueError, "b: expected \\[S, N, K\\]"),
    (("bmk,bnk->mn", t(2, 8, 8), t(2, 8, 8), t(8, 16, dtype=F32)), ValueError, "d: expected shape \\(8, 8\\)"),
    (("bmk,bnk->mn", t(2, 8, 8), t(2, 12, 8), t(8, 12, dtype=F32)), ValueError, "N must be a multiple of 8"),
    (("bmk,bnk->mn", t(2, 8, 8), t(2, 8, 8), t(8, 8, dtype=torch.int32)), TypeError, "d: expected dtype"),
    (("bmk,bnk->mn", t(2, 8, 12), t(2, 8, 12), t(8, 8, dtype=F32)), ValueError, "a: TMA needs strides along dim 1"),
    (("bmk,bnk->mn", t(2, 8, 16)[:, :, ::2], t(2, 8, 8), t(8, 8, dtype=F32)), ValueError, "a: expected its last "
                                                                                           "dimension contiguous"),
    (("bmk,bnk->mn", t(2, 8, 8), t(2, 8, 8), t(8, 8), t(8, 8)), ValueError, "c: only an FP32 d takes c"),
    (("bmk,bnk->mn", t(2, 8, 8), t(2, 8, 8), t(8, 8, dtype=F32), t(8, 16, dtype=F32)), ValueError,
     "c: expected shape"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 64), t(4, 2, 32), t(4, 2, 32)), ValueError, "c: 'bhr,hdr->bhd' adds no c"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(3, 32, 64), t(4, 2, 32)), ValueError, "b: expected 2 heads"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 72), t(4, 2, 32)), ValueError, "b: expected r = 64"),
    (("bhd,hdr->bhr", t(4, 2, 64), t(2, 32, 64), t(4, 2, 64)), ValueError, "b: expected d = 64"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 64), t(4, 2, 64)), ValueError, "d: expected shape \\(4, 2, 32\\)"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(2, 36, 64), t(4, 2, 36)), ValueError, "N must be a multiple of 8"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 66)[:, :, :64], t(4, 2, 32)), ValueError,
     "b: TMA needs strides along dim 1"),
    (("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 64), t(4, 2, 32, dtype=F32)), TypeError, "d: expected dtype bfloat16"),
]


@pytest.mark.parametrize("args,error,message", BAD, ids=[m for _, _, m in BAD])
def test_bad_inputs_are_refused_before_anything_is_queued(gpu, args, error, message):
    with pytest.raises(error, match=message):
        dgx.einsum(*args)
    assert not gpu.driver.launches and not gpu.driver.memsets and not gpu.driver.copies


def test_outputs_that_alias_an_input_are_refused(gpu):
    x = t(4, 2, 128)
    with pytest.raises(ValueError, match="d: overlaps a"):
        dgx.einsum("bhr,hdr->bhd", x, t(2, 64, 128), x[:, :, :64])
    y = t(2, 64, 128)
    with pytest.raises(ValueError, match="d: overlaps b"):
        dgx.einsum("bhd,hdr->bhr", t(4, 2, 64), y, y.view(-1)[: 4 * 2 * 128].view(4, 2, 128))
    a = t(2, 8, 16, dtype=BF16)
    with pytest.raises(ValueError, match="d: overlaps a"):
        dgx.einsum("bmk,bnk->mn", a, t(2, 8, 16), a.view(F32).view(-1)[:64].view(8, 8))
    d = t(8, 16, dtype=F32)
    with pytest.raises(ValueError, match="d: overlaps c"):
        dgx.einsum("bmk,bnk->mn", t(2, 8, 8), t(2, 8, 8), d[:, :8], d[:, 8:])
    assert not gpu.driver.launches


def test_a_config_that_does_not_fit_is_refused(gpu):
    wrong = K.choose_batched(K.BHD_HDR_BHR, 4, 2, 64, 64)
    with pytest.raises(ValueError, match="does not fit this 'bhr,hdr->bhd' einsum"):
        dgx.einsum("bhr,hdr->bhd", t(4, 2, 64), t(2, 64, 64), t(4, 2, 64), config=wrong)
    with pytest.raises(TypeError, match="config: expected a Bf16GemmConfig"):
        dgx.einsum("bmk,bnk->mn", t(2, 8, 8), t(2, 8, 8), t(8, 8, dtype=F32), config="big")
    assert not gpu.driver.launches


# --- DeepGEMM's name, the torch operator ------------------------------------------------------------------------


def test_deep_gemm_einsum_has_deep_gemms_signature_and_runs_dgx(gpu):
    import dgx.deep_gemm as deep_gemm

    assert str(inspect.signature(deep_gemm.einsum)) == "(expr, a, b, d, c=None, use_cublaslt=False)"
    deep_gemm.einsum("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 64), t(4, 2, 32))
    assert len(gpu.driver.launches) == 1
    with pytest.raises(TypeError, match="use_cublaslt: expected a bool"):
        deep_gemm.einsum("bhr,hdr->bhd", t(4, 2, 64), t(2, 32, 64), t(4, 2, 32), use_cublaslt="yes")


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr", "bmk,bnk->mn"])
def test_use_cublaslt_runs_torch_into_d_after_the_same_checks(gpu, expr):
    import dgx.deep_gemm as deep_gemm

    g = torch.Generator().manual_seed(0)
    if expr == "bmk,bnk->mn":
        a, b = torch.randn(3, 16, 32, generator=g).bfloat16(), torch.randn(3, 8, 32, generator=g).bfloat16()
        c = torch.randn(16, 8, generator=g)
        d = torch.empty(16, 8)
        deep_gemm.einsum(expr, a, b, d, c, use_cublaslt=True)
        ref = c.double() + torch.einsum(expr, a.double(), b.double())
    else:
        x = torch.randn(4, 2, 64, generator=g).bfloat16()
        y = torch.randn(2, 64, 64, generator=g).bfloat16()
        d = torch.empty(4, 2, 64, dtype=BF16)
        deep_gemm.einsum(expr, x, y, d, use_cublaslt=True)
        ref = torch.einsum(expr, x.double(), y.double())
    assert not gpu.driver.launches
    assert torch.allclose(d.double(), ref, rtol=2e-2, atol=2e-1)
    with pytest.raises(ValueError, match="expr"):
        deep_gemm.einsum("ij,jk->ik", d, d, d, use_cublaslt=True)


def test_torch_operator_schema_fake_and_trace():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    assert dgx.torch_ops.einsum.__name__ == "einsum"  # (registers the operators)
    op = torch.ops.dgx.einsum.default
    assert str(op._schema) == "dgx::einsum(str expr, Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None) -> ()"
    with FakeTensorMode():
        x, y, z = torch.empty(4, 2, 64, dtype=BF16), torch.empty(2, 32, 64, dtype=BF16), torch.empty(4, 2, 32,
                                                                                                      dtype=BF16)
        assert op("bhr,hdr->bhd", x, y, z) is None  # the fake implementation: d written in place, nothing returned

    def f(a, b, d):
        dgx.torch_ops.einsum("bmk,bnk->mn", a, b, d, d)
        return d

    graph = make_fx(f, tracing_mode="fake")(t(2, 8, 8), t(2, 8, 8), t(8, 8, dtype=F32))
    assert "dgx.einsum.default" in str(graph.code)


# --- warm-up and inspect ------------------------------------------------------------------------------------------


def test_warmup_kinds_parse_and_enumerate_their_kernels():
    bmk = families.kind("einsum_bmk_bnk_mn")
    spec = bmk.parse({"m": 256, "n": 256, "k": 256}, lambda f: f)
    (piece, _), = bmk.pieces(spec, 8192)
    names = [s.name for s in bmk.kernels(spec, piece, 132)]
    assert names == [K.choose_batch_sum(256, 256, 256, 132).kernel_name]
    assert [h[1]().name for h in bmk.helpers] == [c.kernel_name for c in K.REDUCE_CONFIGS]
    bhr = families.kind("einsum_bhr_hdr_bhd")
    spec = bhr.parse({"h": 128, "d": 128, "r": 512, "max_b": 8192}, lambda f: f)
    names = {s.name for piece, _ in bhr.pieces(spec, 8192) for s in bhr.kernels(spec, piece, 132)}
    for b in (1, 4, 128, 4096, 8192):
        assert K.choose_batched(K.BHR_HDR_BHD, b, 128, 128, 512, 132).kernel_name in names
    bhd = families.kind("einsum_bhd_hdr_bhr")
    spec = bhd.parse({"h": 8, "d": 1024, "r": 4096, "b": 64}, lambda f: f)
    names = {s.name for piece, _ in bhd.pieces(spec, 8192) for s in bhd.kernels(spec, piece, 132)}
    assert K.choose_batched(K.BHD_HDR_BHR, 64, 8, 4096, 1024, 132).kernel_name in names


@pytest.mark.parametrize("entry,field", [({"m": 8, "n": 12, "k": 8}, "n"), ({"m": 8, "n": 8}, "k"),
                                         ({"m": 0, "n": 8, "k": 8}, "m")])
def test_warmup_kind_refuses_bad_fields(entry, field):
    from dgx.problems import ProblemError

    with pytest.raises(ProblemError, match=field):
        families.kind("einsum_bmk_bnk_mn").parse(entry, lambda f: f)
    with pytest.raises(ProblemError, match="d"):
        families.kind("einsum_bhr_hdr_bhd").parse({"h": 2, "d": 12, "r": 64}, lambda f: f)


def test_inspect_selects_the_heuristics_kernel():
    got = families.kind("einsum_bhd_hdr_bhr").inspect({"gemm": (4096, 4096, 1024), "groups": 8}, 132, "sm_90a")
    assert got.source.name == K.choose_batched(K.BHD_HDR_BHR, 4096, 8, 4096, 1024, 132).kernel_name
    got = families.kind("einsum_bmk_bnk_mn").inspect({"gemm": (384, 128, 384)}, 132, "sm_90a")
    assert "bmn_bnk_mn_gemm_impl" in got.source.name and "any S" in got.header


# --- NVRTC compiles ---------------------------------------------------------------------------------------------

REPRESENTATIVES = [c for _, c in families.einsum.representatives() if not isinstance(c, K.BatchSumReduceConfig)]


def _sass(src, tmp_path) -> tuple[str, str, bytes]:
    from dgx import sass_tools

    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    path = tmp_path / "k.cubin"
    path.write_bytes(result.cubin)
    sass = subprocess.run([sass_tools.nvdisasm_path(), "--print-code", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert sass.returncode == 0, sass.stderr
    return result.log, sass.stdout, result.cubin


@pytest.mark.parametrize("config", REPRESENTATIVES, ids=lambda c: c.kernel_name)
def test_einsum_gemm_kernels_compile_with_hgmma_3d_maps_and_no_spills(config, tmp_path):
    log, text, cubin = _sass(config.render(), tmp_path)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), log
    assert re.search(r"\b0 bytes stack frame", log), log
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text)
    mmas = re.findall(rf"HGMMA\.64x{config.block_n}x16\.F32\.BF16 [^;]*", text)
    slices = 2 if config.block_m == 256 else 1
    assert len(mmas) == 4 * config.k_atoms * slices
    assert all((".tnspB" in mma) == (config.major_b == "mn") and ".tnspA" not in mma for mma in mmas)
    # Both operands through 3-D maps, D (or the partials) stored through a 3-D map, nothing 2-D, no multicast.
    assert "UTMALDG.3D" in text and "UTMALDG.2D" not in text
    assert "UTMASTG.3D" in text and "UTMASTG.2D" not in text and "UTMAREDG" not in text
    assert runtime.waits_for_predecessor(cubin, config.kernel_name)  # PDL: griddepcontrol.wait present


@pytest.mark.parametrize("config", K.REDUCE_CONFIGS, ids=lambda c: c.kernel_name)
def test_reduction_kernels_compile_and_wait_for_the_gemm(config, tmp_path):
    log, text, cubin = _sass(config.render(), tmp_path)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), log
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text)
    assert not re.search(r"\bRED\.|\bATOM", text), "the reduction is in order: no atomics"
    assert re.search(r"\bLDG\.E\.128\.CONSTANT\b|\bLDG\.E\.128\b", text)
    assert re.search(r"\bSTG\.E\.128\b" if config.out_dtype == "float32" else r"\bSTG\.E\.64\b", text)
    assert runtime.waits_for_predecessor(cubin, config.kernel_name)  # PDL: griddepcontrol.wait present


def test_dgx_inspect_reports_the_einsum_kernels_hgmma_and_no_spills(tmp_cache):
    from click.testing import CliRunner

    from dgx import cli

    for args in (["--kind", "einsum_bhr_hdr_bhd", "--gemm", "4", "128", "512", "--groups", "128"],
                 ["--kind", "einsum_bmk_bnk_mn", "--gemm", "256", "256", "256"]):
        result = CliRunner().invoke(cli.main, ["inspect", *args])
        assert result.exit_code == 0, result.output
        assert re.search(r"HGMMA\s+[1-9]", result.output) and "0 bytes, 0 LDL/STL" in result.output
    result = CliRunner().invoke(cli.main, ["inspect", "--kind", "einsum_bmk_bnk_mn", "--gemm", "256", "12", "256"])
    assert result.exit_code == 1 and "--gemm N: expected a multiple of 8" in result.output


# --- promotion (batch-sum) and ping-pong tiles (batched) ---------------------------------------------------------


def test_batch_sum_keeps_two_accumulator_sets_in_registers():
    from dgx.kernels.bf16_gemm_config import LAYOUT_BATCH_SUM, Bf16GemmConfig
    from dgx.kernels.einsum import batch_sum_candidates

    assert all(c.block_n <= 192 and c.schedule == "cooperative" for c in batch_sum_candidates(128, 512, 256))
    with pytest.raises(ValueError, match="two accumulator sets"):
        Bf16GemmConfig(n=512, k=256, block_m=128, block_n=256, stages=2, out_dtype="float32",
                       layout=LAYOUT_BATCH_SUM)
    with pytest.raises(ValueError, match="cooperative"):
        Bf16GemmConfig(n=512, k=256, block_m=64, block_n=128, stages=3, out_dtype="float32",
                       layout=LAYOUT_BATCH_SUM, schedule="pingpong")


def test_batched_pingpong_is_weighed_only_when_asked(monkeypatch):
    from dgx.kernels.einsum import batched_candidates, choose_batched

    monkeypatch.delenv("DGX_BF16_PINGPONG", raising=False)
    for b in (4, 4096):
        assert choose_batched("bhd,hdr->bhr", b, 128, 512, 128, 132).schedule == "cooperative"
        assert choose_batched("bhd,hdr->bhr", b, 128, 512, 128, 132) == \
            choose_batched("bhd,hdr->bhr", b, 128, 512, 128, 132, pingpong=False)
    both = batched_candidates(4096, 512, 128, "mn", 128, 132, pingpong=True)
    assert any(c.schedule == "pingpong" for c in both)
    assert all(c.block_m in (64, 128) for c in both if c.schedule == "pingpong")
    # one tile per SM or fewer: nothing for a second warpgroup to alternate with
    assert not any(c.schedule == "pingpong" for c in batched_candidates(4, 128, 512, "k", 1, 132, pingpong=True))
