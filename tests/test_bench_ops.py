"""`dgx bench` single-operation suites without a GPU (BF16 GEMMs, einsums, HC pre-norm GEMM, skip-head-mid): the cases
and their counts, selection and the command, which implementations run, the inputs and float64 references with the
torch peers checked on the CPU at small sizes, and the reports from fabricated results."""

from __future__ import annotations

import json

import pytest

import dgx.bench as bench
from dgx.bench import render_markdown, render_table, summarize, write_json
from dgx.bench import suites as S
from dgx.bench.bf16_suites import BF16_SUITES, builtin_bf16_suite, dense_case
from dgx.bench.op_shape import OpShape
from dgx.bench.op_suites import OP_SUITES
from dgx.bench.results import BenchResults, CaseResult, ImplResult, RepeatResult
from dgx.bench.v32_suites import V32_SUITES, fp8_einsum_case, hc_case, head_case, skip_case, sum_case

COUNTS = {"bf16": 26, "bf16_masked": 6, "bf16_contiguous": 4, "bf16_k_grouped": 4, "einsum": 38, "fp8_einsum": 16,
          "hc_prenorm": 24, "skip_head_mid": 6}


def test_cases_and_counts_by_hand():
    assert {s: len(S.builtin_suite(s)) for s in OP_SUITES} == COUNTS
    dense = builtin_bf16_suite("bf16")
    assert [(c.m, c.n, c.k) for c in dense[:18]] == list(S.DENSE_MNK)  # the FP8 anchor shapes, in BF16
    assert {(c.n, c.k) for c in dense[18:]} == {(7168, 14336), (256, 7168), (64, 7168), (128, 4096)}
    c = dense_case(64, 2112, 7168)
    assert c.flops == 2 * 64 * 2112 * 7168 and c.bytes_moved == 2 * (64 * 7168 + 2112 * 7168 + 64 * 2112)
    assert c.compute_ceiling == "bf16_tflops" and c.label == "nt m=64 n=2112 k=7168"
    masked = S.builtin_suite("bf16_masked")[4]
    assert masked.groups == 4 and masked.max_m == 4096 and len(masked.group_ms) == 4
    assert all(int(0.7 * 256) <= m <= int(1.3 * 256) for m in masked.group_ms)
    assert masked.flops == 2 * sum(masked.group_ms) * 4096 * 7168
    kg = S.builtin_suite("bf16_k_grouped")[0]
    assert kg.out_dtype == "float32" and all(k % 128 == 0 for k in kg.group_ks) and len(kg.group_ks) == 4
    assert kg.bytes_moved == 2 * sum(kg.group_ks) * (7168 + 4096) + 8 * 4 * 7168 * 4096
    assert sum_case(129, 128, 384, 128, "float32").bytes_moved == 2 * 129 * 512 * 128 + 12 * 128 * 384
    assert head_case("bhd,hdr->bhr", 4, 128, 512, 128).flops == 2 * 4 * 128 * 512 * 128
    f = fp8_einsum_case(17, 8, 1024, 4096)
    assert f.compute_ceiling == "fp8_tflops" and f.bytes_moved == (
        17 * 8 * 4096 + 8 * 1024 * 4096 + 4 * (17 * 8 * 32 + 8 * 8 * 32) + 2 * 17 * 8 * 1024)
    assert hc_case(13, 24, 7168, 16).bytes_moved == 13 * 7168 * 2 + 24 * 7168 * 4 + 16 * (13 * 24 + 13) * 4
    assert skip_case(64, 32768, 512).dim("mid") == 64
    with pytest.raises(ValueError, match="whole number of heads"):
        skip_case(64, 1000, 512)
    with pytest.raises(ValueError, match="compute_ceiling"):
        OpShape("bf16", "nt", (("m", 1),), 1, 1, "tf32")


def test_group_sizes_match_the_device_script():
    """The suites draw the group sizes exactly as tests/device/bf16_bench.py always has (its figures compare)."""
    import random

    def old(groups, expected, key, alignment=1):
        rng = random.Random(key)
        return [-(-int(expected * rng.uniform(0.7, 1.3)) // alignment) * alignment for _ in range(groups)]

    assert list(S.builtin_suite("bf16_masked")[2].group_ms) == old(2, 512, 52)
    assert list(S.builtin_suite("bf16_contiguous")[1].group_ms) == old(4, 8192, 1)
    assert list(S.builtin_suite("bf16_k_grouped")[3].group_ks) == old(8, 4096, 103, 128)


def test_shapes_round_trip_through_json():
    for s in OP_SUITES:
        for c in S.builtin_suite(s):
            d = json.loads(json.dumps(c.to_dict()))
            assert S.Shape.from_dict(d) == c


def test_suite_selection_and_the_command():
    from dgx import cli

    assert tuple(cli.BENCH_SUITES) == tuple(bench.SUITES) + ("all",)
    assert S.suite_names("all")[-len(OP_SUITES):] == list(OP_SUITES) == list(BF16_SUITES + V32_SUITES)
    assert all("bf16" in s for s in BF16_SUITES) and set(OP_SUITES) <= set(S.FIXED_SUITES)
    for s in OP_SUITES:
        assert [c.suite for c in S.select_shapes(s)] == [s] * COUNTS[s]
        assert bench.unavailable_reason(s) is None  # this build has every suite's function


def test_shapes_file_does_not_apply(tmp_path):
    from bench_echo import Echo

    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"kind": "dense", "m": 64, "n": 2112, "k": 7168}]))
    echo = Echo()
    assert bench.main(suite="bf16", shapes_file=str(path), echo=echo) == bench.EXIT_USAGE
    assert "--shapes does not apply to suite bf16" in echo.text


def test_impls_per_suite():
    from dgx.bench.deepgemm import DeepGemmInfo
    from dgx.bench.moe_impls import moe_impls
    from dgx.bench.op_impls import op_impls
    from dgx.bench.peers import make_impls

    def every(with_peers, dg=None):  # what dgx.bench.runner.run_suite runs
        return make_impls(with_peers, dg) + moe_impls(with_peers) + op_impls(with_peers, dg)

    def names(suite, with_peers=True, dg=None):
        return [i.name for i in every(with_peers, dg) if i.runs_on(suite)]

    assert names("bf16") == ["dgx", "bf16"]
    assert names("bf16_masked") == names("bf16_contiguous") == ["dgx", "torch_grouped"]
    assert names("bf16_k_grouped") == ["dgx", "cublas_loop"]
    assert names("einsum") == ["dgx", "torch_einsum"]
    assert names("fp8_einsum") == ["dgx", "torch_einsum", "gemm_loop"]
    assert names("hc_prenorm") == ["dgx", "torch_fp32"]
    assert names("skip_head_mid") == ["dgx", "fp8_gemm_nt", "fp8_gemm_copy"]
    assert all(names(s, with_peers=False) == ["dgx"] for s in OP_SUITES)
    found = DeepGemmInfo(module=object(), version="2.6.1")
    assert found.found
    op = [i.name for i in op_impls(True, found) if i.runs_on("bf16_k_grouped")]
    assert op == ["dgx", "deepgemm", "cublas_loop"] and not any(i.runs_on("einsum") for i in op_impls(True, found)
                                                                 if i.name == "deepgemm")
    # the FP8 suites' implementations do not run on the new suites, nor these on theirs
    assert not any(i.runs_on(s) for i in make_impls(True) + moe_impls(True) for s in OP_SUITES)
    assert not any(i.runs_on(s) for i in op_impls(True) for s in ("dense", "masked", "mqa", "moe"))


def test_op_notes_name_the_peers():
    from dgx.bench.runner import OP_CHECK_NOTE, op_notes

    assert op_notes(["dense"]) == []
    notes = op_notes(["bf16", "hc_prenorm"])
    assert len(notes) == 3 and notes[-1] == OP_CHECK_NOTE and "cuBLAS" in notes[0] and "a.float() @ b.T" in notes[1]
    assert "float64" in OP_CHECK_NOTE


# ---- problems, references and the torch peers on the CPU (small sizes) ---------------------------------------------


def _small(suite, **kw):
    if suite == "bf16":
        return dense_case(64, 256, 384)
    if suite == "bf16_masked":
        return OpShape("bf16_masked", "masked", (("groups", 3), ("m", 40), ("n", 128), ("k", 256)), 1, 1,
                       group_ms=(40, 1, 63), max_m=64)
    if suite == "bf16_contiguous":
        return OpShape("bf16_contiguous", "contiguous", (("groups", 2), ("m", 100), ("n", 128), ("k", 256)), 1, 1,
                       group_ms=(100, 130))
    return OpShape("bf16_k_grouped", "k_grouped", (("groups", 3), ("m", 64), ("n", 96), ("k", 128)), 1, 1,
                   group_ks=(128, 256, 128), out_dtype="float32")


@pytest.mark.parametrize("suite", BF16_SUITES)
def test_bf16_problems_and_peers_on_the_cpu(suite):
    torch = pytest.importorskip("torch")
    from dgx.bench import bf16_impls as B
    from dgx.bench.op_build import build_op_problem
    from dgx.bench.op_problems import CheckFailed

    p = build_op_problem(_small(suite), seed=0, device="cpu")
    ref = p.refs["main"]
    assert ref.dtype == torch.float64
    prep = {"bf16": B.prepare_cublas, "bf16_masked": B.prepare_grouped, "bf16_contiguous": B.prepare_grouped,
            "bf16_k_grouped": B.prepare_k_grouped_loop}[suite](p)
    prep.reset()
    prep.run()
    out = prep.output()
    assert p.check(out) < 1e-5
    with pytest.raises(CheckFailed, match="normwise relative error"):
        p.check(out * 1.01)
    assert p.check(torch.full_like(out, float("nan"))) == float("inf")
    if suite in ("bf16_masked", "bf16_contiguous"):  # the valid rows only, packed
        assert out.shape == (sum(p.shape.group_ms), p.shape.n)
    if suite == "bf16_contiguous":
        assert p.tensors["m_indices"][99].item() == 0 and p.tensors["m_indices"][100].item() == -1
        assert p.tensors["m_indices"][128].item() == 1 and p.tensors["a"].shape[0] == 128 + 256


@pytest.mark.parametrize("case", ["sum_fp32", "sum_bf16", "bhr", "bhd", "fp8", "hc", "hc_split", "skip"])
def test_v32_problems_and_peers_on_the_cpu(case):
    torch = pytest.importorskip("torch")
    from dgx.bench import v32_impls as V
    from dgx.bench.op_build import build_op_problem
    from dgx.bench.op_problems import CheckFailed
    from dgx.bench.v32_problems import PLAIN_REF, padded_heads

    shape = {"sum_fp32": sum_case(3, 64, 32, 128, "float32"), "sum_bf16": sum_case(3, 64, 32, 128, "bfloat16"),
             "bhr": head_case("bhr,hdr->bhd", 5, 2, 128, 64), "bhd": head_case("bhd,hdr->bhr", 5, 2, 128, 64),
             "fp8": fp8_einsum_case(5, 2, 128, 256), "hc": hc_case(7, 24, 256, None),
             "hc_split": hc_case(7, 24, 256, 4), "skip": skip_case(16, 512, 256, (128, 64, 128))}[case]
    p = build_op_problem(shape, seed=0, device="cpu")
    if case == "skip":  # the padded reference: each head's left, zeros, right
        ref, plain = p.refs["main"], p.refs[PLAIN_REF]
        assert ref.shape == (16, 2 * 320) and bool((ref.view(16, 2, 320)[:, :, 128:192] == 0).all())
        assert torch.equal(padded_heads(plain, (128, 64, 128)), ref)
        with pytest.raises(CheckFailed, match="shape"):
            p.check(plain.float())
        assert p.check(plain.float(), PLAIN_REF) < 1e-6
        return
    if case.startswith("hc"):
        prep = V.prepare_hc_torch(p)
        prep.run()
        d, s = prep.output()
        assert p.check((d, s)) < 1e-5
        with pytest.raises(CheckFailed):
            p.check((d * 1.01, s))  # a wrong d is caught although s dominates the norms
        with pytest.raises(CheckFailed, match="expected 2 outputs"):
            p.check(d)
        return
    prep = V.prepare_torch_einsum(p)
    prep.reset()
    prep.run()
    out = prep.output()
    if case == "fp8":  # the BF16 peer against the reference of its own operands; the FP8 one is another
        assert prep.reference == "bf16" and p.check(out, "bf16") < 1e-4
        with pytest.raises(CheckFailed):  # the FP8 operands' reference is another: BF16 is not checked against it
            p.check(out)
        return
    if case == "sum_fp32":  # torch's BF16 product before the FP32 add: its own tolerance, not the FP32 one
        assert prep.reference == "bf16_product"
        with pytest.raises(CheckFailed):
            p.check(out)
    assert p.check(out, prep.reference) < 1e-4


# ---- reports from fabricated results ------------------------------------------------------------------------------

PICKS = {s: S.builtin_suite(s)[0] for s in OP_SUITES}
PEERS = {"bf16": ["bf16"], "bf16_masked": ["torch_grouped"], "bf16_contiguous": ["torch_grouped"],
         "bf16_k_grouped": ["cublas_loop"], "einsum": ["torch_einsum"], "fp8_einsum": ["gemm_loop", "torch_einsum"],
         "hc_prenorm": ["torch_fp32"], "skip_head_mid": ["fp8_gemm_nt", "fp8_gemm_copy"]}


def make_op_results() -> BenchResults:
    res = BenchResults(env={"device": "NVIDIA H200", "torch": "2.11", "dgx": "0.1.0", "date": "2026-11-28T00:00:00+00:00"},
                       settings={"suite": "all", "repeat": 1, "warmup": 5, "iters": 30, "diff_tolerance": 1e-3},
                       notes=["synthetic"])
    rr = RepeatResult(ceilings={"fp8_tflops": 1300.0, "copy_gbps": 4000.0, "bf16_tflops": 700.0})
    for suite, shape in PICKS.items():
        case = CaseResult(shape)
        case.impls["dgx"] = ImplResult("dgx", "ok", us=10.0, us_min=9.0, us_max=11.0, diff=1e-6)
        for i, name in enumerate(PEERS[suite]):
            case.impls[name] = ImplResult(name, "ok", us=12.0 + i, us_min=12.0, us_max=14.0, diff=1e-6,
                                          note=f"{name} note")
        rr.cases.append(case)
    res.repeats.append(rr)
    return res


def test_reports(tmp_path):
    res = make_op_results()
    summary = summarize(res)
    assert [s.suite for s in summary.suites] == list(OP_SUITES)
    bf16 = summary.suite("bf16")
    assert bf16.geomean_speedup == {"bf16": pytest.approx(1.2)}
    c = bf16.cases[0]  # the BF16 ceiling bounds a BF16 case's compute, not the FP8 one
    assert c.floor_us == pytest.approx(max(PICKS["bf16"].flops / 700e12, PICKS["bf16"].bytes_moved / 4000e9) * 1e6)
    hc = summary.suite("hc_prenorm").cases[0]
    assert hc.bound == "memory" and hc.impls["dgx"].hbm_share == pytest.approx(
        PICKS["hc_prenorm"].bytes_moved / 10e-6 / 1e9 / 4800)
    assert summary.suite("skip_head_mid").geomean_speedup["fp8_gemm_copy"] == pytest.approx(1.3)
    text, md = render_table(res), render_markdown(res)
    for title in ("BF16 GEMM", "BF16 K-grouped", "BF16 einsums", "FP8 einsum", "HC pre-norm", "Skip-head-mid"):
        assert title in text and title in md
    for label in ("torch._grouped_mm (else a loop of cuBLAS calls)", "dgx.fp8_gemm_nt once per head",
                  "dgx.fp8_gemm_nt + copy into the padded layout"):
        assert label in md
    path = tmp_path / "r.json"
    write_json(res, str(path))
    data = json.loads(path.read_text())
    assert data["summary"]["suites"][0]["cases"][0]["shape"]["compute_ceiling"] == "bf16_tflops"
    assert render_markdown(bench.load_json(str(path))) == md


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from dgx.bench import write_plots

    written = write_plots(make_op_results(), str(tmp_path / "run.png"))
    assert len(written) == len(OP_SUITES)
    for p in written:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
