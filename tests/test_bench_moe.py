"""`dgx bench --suite moe` without a GPU: the cases and their counts, selection and the command, which implementations
run, the fused-API and DeepGEMM detection, the inputs and float64 references (torch on the CPU, small sizes) with the
unfused path's FP8 error inside the tolerance, and the reports from fabricated results."""

from __future__ import annotations

import json
import sys
import types

import pytest

import dgx.bench as bench
from dgx.bench import render_markdown, render_table, summarize, write_json
from dgx.bench import suites as S
from dgx.bench.moe_suites import CONTIGUOUS_CASES, MASKED_CASES, MOE, MoeShape, builtin_moe_suite, moe_case
from dgx.bench.results import BenchResults, CaseResult, ImplResult, RepeatResult

# ---- the cases ---------------------------------------------------------------------------------------------------


def test_cases_and_counts_by_hand():
    cases = builtin_moe_suite()
    assert [(c.layout, c.experts, c.tokens) for c in cases] == (
        [("masked", e, t) for e, t in MASKED_CASES] + [("contiguous", e, t) for e, t in CONTIGUOUS_CASES])
    assert all(8 <= c.experts <= 32 and 16 <= c.tokens <= 256 for c in cases if c.layout == "masked")
    assert all(4 <= c.experts <= 8 and 2048 <= c.tokens <= 8192 for c in cases if c.layout == "contiguous")
    for c in cases:
        assert len(c.group_ms) == c.experts and all(int(0.7 * c.tokens) <= m <= round(1.3 * c.tokens) for m in c.group_ms)
        assert (c.hidden, c.inter) == (7168, 2048)
        if c.layout == "masked":
            assert c.max_m % 64 == 0 and max(c.group_ms) <= c.max_m and c.padded_m == c.experts * c.max_m
        else:
            assert c.max_m is None and c.padded_m == sum((m + 127) // 128 * 128 for m in c.group_ms)
    c = MoeShape(MOE, "masked", 2, 16, (10, 20), 64)
    assert c.valid_m == 30 and c.flops == 6 * 30 * 7168 * 2048 and c.label == "masked 2e·16"
    assert c.weight_bytes == 2 * 3 * 7168 * 2048 and c.bytes_moved == c.weight_bytes + 30 * 7168 * 3
    assert c.intermediate_bytes == 30 * 2048 * 2 * 2 * 2
    assert (c.m, c.n, c.k, c.groups, c.group_ks) == (30, 7168, 2048, 2, ())
    assert builtin_moe_suite() == builtin_moe_suite() and moe_case("masked", 8, 16, seed=1) != moe_case("masked", 8, 16)


def test_shapes_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="must fit Mmax"):
        MoeShape(MOE, "masked", 2, 16, (10, 70), 64)
    with pytest.raises(ValueError, match="2 group sizes for 3 experts"):
        MoeShape(MOE, "contiguous", 3, 16, (10, 20))
    with pytest.raises(ValueError, match="a layout in"):
        MoeShape(MOE, "paged", 1, 16, (10,))


def test_shapes_round_trip_through_json():
    for c in builtin_moe_suite():
        d = json.loads(json.dumps(c.to_dict()))
        assert S.Shape.from_dict(d) == c and MoeShape.from_dict(d) == c


# ---- selection, the command, the implementations -------------------------------------------------------------------


def test_suite_selection_and_the_command():
    from dgx import cli

    assert S.suite_names("moe") == ["moe"] and "moe" in S.suite_names("all")
    assert "moe" in bench.SUITES and "moe" in S.FIXED_SUITES and tuple(cli.BENCH_SUITES) == tuple(bench.SUITES) + ("all",)
    assert S.select_shapes("moe") == builtin_moe_suite()
    assert sum(s.suite == "moe" for s in S.select_shapes("all")) == len(MASKED_CASES) + len(CONTIGUOUS_CASES)


def test_shapes_file_does_not_apply(tmp_path):
    from bench_echo import Echo

    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"kind": "dense", "m": 64, "n": 2112, "k": 7168}]))
    echo = Echo()
    assert bench.main(suite="moe", shapes_file=str(path), echo=echo) == bench.EXIT_USAGE
    assert "--shapes does not apply to suite moe" in echo.text


def test_impls_per_suite():
    from dgx.bench.moe_impls import moe_impls
    from dgx.bench.peers import make_impls

    def every(with_peers):  # what dgx.bench.runner.run_suite runs
        return make_impls(with_peers) + moe_impls(with_peers)

    assert [i.name for i in every(True) if i.runs_on("moe")] == ["dgx", "dgx_unfused", "deepgemm_unfused",
                                                                 "torch_bf16"]
    assert [i.name for i in every(False) if i.runs_on("moe")] == ["dgx", "dgx_unfused"]
    assert not any(i.runs_on(s) for i in moe_impls(True) for s in ("dense", "masked", "mqa"))
    dense = [i for i in every(True) if i.runs_on("dense")]
    assert [i.name for i in dense] == ["dgx", "cublaslt", "triton", "bf16", "fp8_tensor"]
    assert type(dense[0]).__name__ == "DgxImpl" and not dense[0].runs_on("moe")


def test_fused_block_is_detected_by_its_keyword_not_faked():
    import dgx
    from dgx.bench.moe_impls import fused_unavailable_reason

    assert "swiglu" in (fused_unavailable_reason(dgx) or "swiglu")  # this build: unavailable, naming the keyword

    def gemm(a, b, d, masked_m, expected_m, *, swiglu=False, swiglu_limit=None, row_weight=None, alpha=None):
        pass

    def contiguous(a, b, d, m_indices, *, swiglu=False):
        pass

    fake = types.SimpleNamespace(m_grouped_fp8_gemm_nt_masked=gemm, m_grouped_fp8_gemm_nt_contiguous=contiguous,
                                 prepare_gate_up=lambda b, sfb: (b, sfb))
    assert fused_unavailable_reason(fake) is None
    fake.prepare_gate_up = None
    assert "prepare_gate_up" in fused_unavailable_reason(fake)
    plain = types.SimpleNamespace(m_grouped_fp8_gemm_nt_masked=lambda a, b, d, m, e: None,
                                  m_grouped_fp8_gemm_nt_contiguous=contiguous, prepare_gate_up=lambda b, s: (b, s))
    assert "m_grouped_fp8_gemm_nt_masked(..., swiglu=)" in fused_unavailable_reason(plain)


def test_real_deep_gemm_is_not_dgx_s_alias(monkeypatch, tmp_path):
    import dgx
    from dgx.bench.moe_impls import real_deep_gemm

    alias = types.ModuleType("deep_gemm")
    alias.__file__ = str(tmp_path / "x.py")
    import os

    alias.__file__ = os.path.join(os.path.dirname(dgx.__file__), "deep_gemm", "__init__.py")
    monkeypatch.setitem(sys.modules, "deep_gemm", alias)
    module, why = real_deep_gemm()
    assert module is None and "dgx's drop-in" in why
    real = types.ModuleType("deep_gemm")
    real.__file__ = str(tmp_path / "deep_gemm" / "__init__.py")
    monkeypatch.setitem(sys.modules, "deep_gemm", real)
    assert real_deep_gemm() == (real, "")
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # import fails
    module, why = real_deep_gemm()
    assert module is None and "not importable" in why


def test_moe_notes_join_the_report_only_with_the_suite():
    from dgx.bench.runner import MOE_NOTES

    assert any("6·rows·H·I" in n for n in MOE_NOTES) and any("float64 reference" in n for n in MOE_NOTES)


# ---- inputs, references and the check (torch on the CPU, small sizes) -------------------------------------------


SMALL = [MoeShape(MOE, "masked", 3, 20, (20, 1, 31), 64, hidden=512, inter=256),
         MoeShape(MOE, "contiguous", 2, 100, (100, 130), hidden=256, inter=384)]


@pytest.mark.parametrize("shape", SMALL, ids=lambda s: s.layout)
def test_problem_and_the_unfused_math_against_float64(shape):
    """The inputs in dgx's layouts; the references; the unfused block's math in torch (GEMM1 to BF16, SwiGLU,
    per-token FP8 as silu_mul_quant computes it, GEMM2) passes the check with room under 1e-3, a wrong block does
    not, and the BF16 layer passes against its own reference."""
    torch = pytest.importorskip("torch")
    from dgx.bench.moe_problems import build_moe_problem, segment_starts
    from dgx.deep_gemm.utils import per_token_cast_to_fp8
    from dgx.torch_utils import dequantize

    p = build_moe_problem(shape, seed=0, device="cpu")
    t = p.tensors
    e, h, i = shape.experts, shape.hidden, shape.inter
    assert t["w1_fp8"][0].shape == (e, 2 * i, h) and t["w2_fp8"][0].shape == (e, h, i)
    assert p.ref_fp8.shape == p.ref_bf16.shape == (len(p.rows), h) and p.ref_fp8.dtype == torch.float64
    assert {g for g, _ in p.rows} == set(range(e)) and all(r < shape.group_ms[g] for g, r in p.rows)
    if shape.layout == "masked":
        assert t["a"][0].shape == (e, shape.max_m, h) and t["a"][1].stride() == (h // 128 * 64, 1, 64)
        assert t["masked_m"].tolist() == list(shape.group_ms)
    else:
        assert t["a"][0].shape == (shape.padded_m, h) and t["a"][1].stride()[0] == 1
        starts = segment_starts(shape)
        assert t["m_indices"][starts[1] - 1].item() == -1 and t["m_indices"][starts[1]].item() == 1
    a = t["a"][0].reshape(-1, h).float() * t["a"][1].reshape(-1, h // 128).repeat_interleave(128, 1)
    out = torch.zeros(a.shape[0], h)
    groups = [(g * (shape.max_m or 0), m) if shape.layout == "masked" else (s, m)
              for g, (s, m) in enumerate(zip(segment_starts(shape), shape.group_ms))]
    for g, (start, m) in enumerate(groups):
        w1 = dequantize(t["w1_fp8"][0][g], t["w1_fp8"][1][g], 128)
        w2 = dequantize(t["w2_fp8"][0][g], t["w2_fp8"][1][g], 128)
        gate_up = (a[start:start + m] @ w1.T).to(torch.bfloat16).float()
        act = torch.nn.functional.silu(gate_up[:, :i]) * gate_up[:, i:]
        y, sf = per_token_cast_to_fp8(act, use_ue8m0=False)
        out[start:start + m] = (y.float() * sf.repeat_interleave(128, 1)) @ w2.T
    diff = p.check(p.pick(out.to(torch.bfloat16)))
    assert diff < 3e-4, diff
    assert p.check(p.pick(out * 1.1)) > 1e-3
    assert p.check(p.pick(torch.full_like(out, float("nan")))) == float("inf")
    from dgx.bench.moe_impls import _torch_bf16

    if shape.layout == "masked":  # torch.bmm runs on the CPU; _grouped_mm may not
        prep = _torch_bf16(p)
        prep.run()
        assert p.check(prep.output(), bf16=True) < 1e-4


# ---- reports from fabricated results ------------------------------------------------------------------------------

M1, C1 = builtin_moe_suite()[0], builtin_moe_suite()[-1]
TIMES = {M1: {"dgx_unfused": 60.0, "deepgemm_unfused": 58.0, "torch_bf16": 140.0},
         C1: {"dgx_unfused": 2600.0, "deepgemm_unfused": 2500.0, "torch_bf16": 4800.0}}


def make_moe_results(fused: bool = False) -> BenchResults:
    res = BenchResults(env={"device": "Fake H100", "torch": "2.11", "dgx": "0.1.0", "date": "2026-11-28T00:00:00+00:00"},
                       settings={"suite": "moe", "repeat": 1, "warmup": 5, "iters": 30, "diff_tolerance": 1e-3},
                       notes=["synthetic"])
    rr = RepeatResult(ceilings={"fp8_tflops": 1300.0, "copy_gbps": 3000.0, "bf16_tflops": 700.0})
    for shape, impls in TIMES.items():
        case = CaseResult(shape)
        case.impls["dgx"] = (ImplResult("dgx", "ok", us=impls["dgx_unfused"] * 0.95, us_min=1, us_max=1, diff=2e-4)
                             if fused else ImplResult("dgx", "unavailable", "this dgx has no fused SwiGLU epilogue yet"))
        for name, us in impls.items():
            case.impls[name] = ImplResult(name, "ok", us=us, us_min=us, us_max=us, diff=2e-4, note=f"{name} note")
        rr.cases.append(case)
    res.repeats.append(rr)
    return res


@pytest.mark.parametrize("fused", [False, True])
def test_reports(fused, tmp_path):
    res = make_moe_results(fused)
    s = summarize(res).suite("moe")
    assert s.geomean_tflops["dgx_unfused"] == pytest.approx(
        (M1.flops / 60e-6 / 1e12 * C1.flops / 2600e-6 / 1e12) ** 0.5)
    if fused:
        assert s.geomean_speedup["dgx_unfused"] == pytest.approx(1 / 0.95)
    text = render_table(res)
    assert "MoE expert block" in text and M1.label in text and C1.label in text
    md = render_markdown(res)
    assert "MoE expert block" in md and ("dgx-unfused" in md or "dgx unfused" in md)
    if not fused:
        assert "no fused SwiGLU epilogue" in md + text
    path = tmp_path / "r.json"
    write_json(res, str(path))
    data = json.loads(path.read_text())
    case = data["summary"]["suites"][0]["cases"][0]
    assert case["shape"]["layout"] == "masked" and case["shape"]["intermediate_bytes"] == M1.intermediate_bytes
    back = bench.load_json(str(path))
    assert render_markdown(back) == md


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from dgx.bench import write_plot

    path = tmp_path / "moe.png"
    write_plot(make_moe_results(True), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
