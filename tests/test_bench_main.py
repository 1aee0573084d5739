"""dgx bench: the entry point without a GPU, argument errors, and the CPU-checkable parts of the
problem building and peer selection (torch CPU; skipped where torch is missing)."""

import json
import sys

import pytest

import dgx.bench as bench
from dgx.bench import EXIT_DGX_FAILED, EXIT_NO_GPU, EXIT_OK, EXIT_USAGE

from bench_echo import Echo


def test_import_needs_no_torch_or_matplotlib(monkeypatch):
    import importlib

    import dgx

    monkeypatch.setattr(dgx, "bench", bench)  # the re-import below rebinds it: put the original back after
    for name in [m for m in sys.modules if m == "dgx.bench" or m.startswith("dgx.bench.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "triton", None)
    mod = importlib.import_module("dgx.bench")
    assert callable(mod.main) and callable(mod.run_suite)


def test_no_torch_message_and_exit(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    echo = Echo()
    rc = bench.main("dense", None, True, 1, None, None, None, echo=echo)
    assert rc == EXIT_NO_GPU != 0
    assert echo.text.startswith("dgx bench needs an NVIDIA GPU: ")
    assert "PyTorch is not importable" in echo.text


def test_no_cuda_message_and_exit(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    echo = Echo()
    rc = bench.main(echo=echo)
    assert rc == EXIT_NO_GPU
    assert "dgx bench needs an NVIDIA GPU: torch.cuda.is_available() is False" in echo.text


def test_run_suite_raises_without_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(bench.NoGpu, match="needs an NVIDIA GPU"):
        bench.run_suite("dense")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(suite="sparse"), "unknown suite 'sparse'"),
        (dict(repeat=0), "--repeat must be a positive integer"),
    ],
)
def test_bad_arguments_exit_2(kwargs, message):
    echo = Echo()
    assert bench.main(echo=echo, **kwargs) == EXIT_USAGE
    assert message in echo.text


def test_bad_shapes_file_exit_2_before_gpu_check(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    p = tmp_path / "s.json"
    p.write_text(json.dumps([{"kind": "dense", "m": 64, "n": 2112, "k": 7168}, {"kind": "wgrad", "m": 64, "k": 128}]))
    echo = Echo()
    assert bench.main("all", str(p), echo=echo) == EXIT_USAGE
    assert "entry 1: field 'n'" in echo.text


def test_plot_without_matplotlib_exit_2_before_running(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    echo = Echo()
    assert bench.main(plot_path=str(tmp_path / "p.png"), echo=echo) == EXIT_USAGE
    assert "--plot needs matplotlib" in echo.text


def test_main_writes_reports_and_exit_codes(monkeypatch, tmp_path):
    """main with a stubbed run: the reports are written, and dgx failures give exit code 3."""
    from test_bench_report import make_results

    results = make_results()
    monkeypatch.setattr(bench, "gpu_problem", lambda: None)
    monkeypatch.setattr(bench, "run_suite", lambda *a, **k: results)
    monkeypatch.setattr(bench, "unavailable_reason", lambda suite: None)  # a build with every suite
    echo = Echo()
    paths = [str(tmp_path / n) for n in ("r.json", "r.md", "r.png")]
    pytest.importorskip("matplotlib")
    rc = bench.main("all", None, True, 2, *paths, echo=echo)
    assert rc == EXIT_OK
    suites = list(dict.fromkeys(c.shape.suite for c in results.repeats[0].cases))
    plots = [f"r-{suite}.png" for suite in suites]  # one plot per suite of the run
    for name in ["r.json", "r.md", *plots]:
        assert (tmp_path / name).stat().st_size > 0 and f"wrote {tmp_path / name}" in echo.text
    assert len(suites) > 1 and not (tmp_path / "r.png").exists()
    assert "Dense GEMM" in echo.text
    # the weight-gradient suites are compared with DeepGEMM's figures like the others
    md = (tmp_path / "r.md").read_text()
    for title in ("## Weight gradient (", "## K-grouped weight gradient"):
        table = md.split(title, 1)[1].split("\n## ", 1)[0]
        assert "| DeepGEMM TF (H100, other run) | vs DeepGEMM (other run) |" in table and "| **geomean** |" in table
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    ratios = {s["suite"]: s["geomean_vs_deepgemm_anchor"] for s in summary["suites"]}
    assert ratios["wgrad"] is not None and ratios["k_grouped"] is not None
    results.repeats[0].cases[0].impls["dgx"].status = "failed"
    results.repeats[0].cases[0].impls["dgx"].reason = "boom"
    echo = Echo()
    assert bench.main("all", None, True, 2, None, None, None, echo=echo) == EXIT_DGX_FAILED
    assert "dgx did not run correctly on 1 case(s)" in echo.text and "boom" in echo.text


# ---- suites not available in this build: exit status 3 ------------------------------------------

MASKED_FN = "m_grouped_fp8_gemm_nt_masked"


def test_unavailable_reason_names_what_is_missing(monkeypatch):
    import types

    for suite in bench.SUITES:  # this build has every function (and every kind has kernels)
        assert bench.unavailable_reason(suite) is None
    fake = types.ModuleType("dgx")
    fake.fp8_gemm_nt = fake.m_grouped_fp8_gemm_nt_masked = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "dgx", fake)
    assert bench.unavailable_reason("dense") is None
    assert bench.unavailable_reason("masked") is None
    assert bench.unavailable_reason("wgrad") is None  # through fp8_gemm_nt
    assert bench.unavailable_reason("contiguous") == "dgx.m_grouped_fp8_gemm_nt_contiguous does not exist in this build"
    assert bench.unavailable_reason("k_grouped") == "dgx.k_grouped_fp8_gemm_nt_contiguous does not exist in this build"
    monkeypatch.setitem(sys.modules, "dgx", None)
    assert bench.unavailable_reason("dense").startswith("import dgx failed")
    with pytest.raises(ValueError, match="unknown suite 'sparse'"):
        bench.unavailable_reason("sparse")


def test_cli_bench_only_unavailable_suite_exits_3_without_gpu(monkeypatch):
    """Nothing requested can run: exit 3 saying why, without needing (or asking for) a GPU."""
    from dgx import cli
    import dgx
    from click.testing import CliRunner

    monkeypatch.delattr(dgx, MASKED_FN, raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)
    result = CliRunner().invoke(cli.main, ["bench", "--suite", "masked", "--no-peers"])
    assert result.exit_code == EXIT_DGX_FAILED == 3, result.output
    assert (
        f"suite masked is not available in this build: dgx.{MASKED_FN} does not exist in this build; "
        "skipping its 6 shape(s)" in result.output
    )
    assert "nothing to run" in result.output and "needs an NVIDIA GPU" not in result.output


def test_cli_bench_runs_what_is_available_then_exits_3(monkeypatch, tmp_path):
    from dgx import cli
    import dgx
    from click.testing import CliRunner
    from test_bench_report import make_results

    monkeypatch.delattr(dgx, MASKED_FN, raising=False)
    monkeypatch.setattr(bench, "gpu_problem", lambda: None)
    ran = {}

    def run_suite(suite, shapes=None, **kwargs):
        ran["shapes"] = list(shapes)
        return make_results()

    monkeypatch.setattr(bench, "run_suite", run_suite)
    shapes = tmp_path / "shapes.json"
    shapes.write_text(
        json.dumps(
            [
                {"kind": "dense", "m": 64, "n": 2112, "k": 7168},
                {"kind": "m_grouped_masked", "groups": 2, "m": 512, "max_m": 4096, "n": 7168, "k": 2048},
                {"kind": "dense", "m": 128, "n": 2112, "k": 7168},
            ]
        )
    )
    report = tmp_path / "r.json"
    result = CliRunner().invoke(cli.main, ["bench", "--shapes", str(shapes), "--json", str(report)])
    assert result.exit_code == EXIT_DGX_FAILED, result.output
    assert [(s.suite, s.m) for s in ran["shapes"]] == [("dense", 64), ("dense", 128)]  # the rest still ran
    assert "suite masked is not available in this build" in result.output and "skipping its 1 shape(s)" in result.output
    assert "requested but not available in this build, not run: masked (exit status 3)" in result.output
    assert "dgx did not run correctly" not in result.output
    recorded = json.loads(report.read_text())
    assert recorded["settings"]["not_available"] == {"masked": f"dgx.{MASKED_FN} does not exist in this build"}


# ---- CPU-checkable parts of the GPU path (torch CPU) ---------------------------------------------


SMALL = [
    ("dense", dict(m=64, n=256, k=512)),
    ("wgrad", dict(m=64, n=128, k=384)),
    ("contiguous", dict(m=100, n=256, k=256, groups=3)),
    ("masked", dict(m=50, n=128, k=256, groups=2, max_m=128)),
    ("k_grouped", dict(m=64, n=128, k=256, groups=2)),
]


@pytest.mark.parametrize("suite, kw", SMALL)
def test_problem_layouts_and_reference(suite, kw):
    torch = pytest.importorskip("torch")
    from dgx.bench.problems import build_problem, calc_diff, matmul_fp32
    from dgx.bench.suites import make_shape

    shape = make_shape(suite, **kw)
    p = build_problem(shape, seed=0, device="cpu")
    t = p.tensors
    rows = shape.valid_m if suite != "k_grouped" else shape.groups * shape.m
    assert tuple(p.ref.shape) == (rows, shape.n)
    # the reference from dequantised FP8 inputs is close to the product of the BF16 originals
    orig = torch.cat([matmul_fp32(pt.a16, pt.b16) for pt in p.parts])
    assert calc_diff(p.ref, orig) < 1e-3
    assert t["A"].dtype == torch.float8_e4m3fn and t["SFA"].dtype == torch.float32
    if suite == "dense":
        assert tuple(t["SFB"].shape) == (2, 4)
        assert t["D"].dtype == torch.bfloat16
    if suite == "wgrad":
        assert tuple(t["SFB"].shape) == (128, 3)  # 1×128 for B too
        assert t["D"].dtype == torch.float32 and torch.equal(t["D"], p.c)
    if suite == "contiguous":
        mi = t["m_indices"]
        assert mi.shape[0] == shape.padded_m == t["A"].shape[0]
        assert int((mi >= 0).sum()) == shape.valid_m
        assert tuple(t["B"].shape) == (3, 256, 256) and tuple(t["SFB"].shape) == (3, 2, 2)
    if suite == "masked":
        assert tuple(t["A"].shape) == (2, 128, 256)
        assert t["masked_m"].tolist() == list(shape.group_ms)
    if suite == "k_grouped":
        assert t["A"].dim() == 1 and t["A"].numel() == shape.m * shape.total_k
        assert tuple(t["SFA"].shape) == (64, shape.total_k // 128)
        assert t["ks"] == list(shape.group_ks) and tuple(t["D"].shape) == (2, 64, 128)
        # group 1's A is the second block of the flat buffer, K-contiguous
        a1 = t["A"][64 * 256 :].view(64, 256)
        assert torch.equal(a1.float(), p.parts[1].a.float())
    # valid_rows of an output laid out like D picks exactly the reference's rows
    out = torch.zeros_like(t["D"], dtype=torch.float32)
    assert tuple(p.valid_rows(out).shape) == tuple(p.ref.shape)


def test_quantizers_round_trip():
    torch = pytest.importorskip("torch")
    from dgx.bench.problems import calc_diff, dequant_block, dequant_token, per_block_cast, per_token_cast

    x = torch.randn(200, 300)
    q, s = per_token_cast(x)
    assert tuple(s.shape) == (200, 3) and q.dtype == torch.float8_e4m3fn
    assert calc_diff(dequant_token(q, s), x) < 1e-3
    q, s = per_block_cast(x)
    assert tuple(s.shape) == (2, 3)
    assert calc_diff(dequant_block(q, s), x) < 1e-3
    assert calc_diff(x, x) == pytest.approx(0.0, abs=1e-12)
    assert calc_diff(x, -x) == pytest.approx(2.0)


def test_first_passing_reports_every_candidate():
    torch = pytest.importorskip("torch")
    from dgx.bench.peers import Ctx, Outcome, Prepared, Unavailable
    from dgx.bench.problems import build_problem
    from dgx.bench.suites import make_shape

    p = build_problem(make_shape("dense", 64, 128, 256), device="cpu")
    ctx = Ctx(flush=None)
    good = lambda: Prepared(lambda: None, lambda: p.ref.clone(), note="good one")  # noqa: E731
    wrong = lambda: Prepared(lambda: None, lambda: -p.ref)  # noqa: E731
    nan = lambda: Prepared(lambda: None, lambda: torch.full_like(p.ref, float("nan")))  # noqa: E731

    def missing():
        raise Unavailable("no such API")

    def raises():
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")

    prep, diff, note = ctx.first_passing(p, [("a", missing), ("b", wrong), ("c", good)])
    assert diff == 0.0
    assert note == "good one"
    assert prep.tried == ["a: no such API", "b: calc_diff 2 >= 0.001"]

    with pytest.raises(Outcome) as e:
        ctx.first_passing(p, [("a", missing), ("b", raises)])
    assert e.value.status == "unavailable" and "CUBLAS_STATUS_NOT_SUPPORTED" in e.value.reason

    with pytest.raises(Outcome) as e:
        ctx.first_passing(p, [("b", wrong), ("n", nan)])
    assert e.value.status == "failed" and e.value.diff == float("inf")  # the worst one
    assert "b: calc_diff 2" in e.value.reason and "n: calc_diff inf" in e.value.reason

    # for dgx, an exception is a failure, not unavailability
    with pytest.raises(Outcome) as e:
        ctx.first_passing(p, [("dgx", raises)], errors_fail=True)
    assert e.value.status == "failed"


def test_bf16_peer_on_cpu():
    """The BF16 peer runs anywhere torch does: selection verifies it against its own reference."""
    pytest.importorskip("torch")
    from dgx.bench.peers import Bf16, Ctx
    from dgx.bench.problems import build_problem
    from dgx.bench.suites import make_shape

    for shape in (make_shape("dense", 64, 128, 256), make_shape("contiguous", 100, 128, 256, groups=2)):
        p = build_problem(shape, device="cpu")
        prep, diff, note = Bf16().select(p, Ctx(flush=None))
        assert diff < 1e-4
        assert "BF16" in note
        if shape.suite == "contiguous":
            assert "per-group loop (2 launches)" in note


def test_dgx_unavailable_is_reported_not_raised(monkeypatch):
    pytest.importorskip("torch")
    import types

    from dgx.bench.peers import Ctx, DgxImpl
    from dgx.bench.problems import build_problem
    from dgx.bench.suites import make_shape

    monkeypatch.setitem(sys.modules, "dgx", types.ModuleType("dgx"))  # a dgx without kernels
    p = build_problem(make_shape("masked", 50, 128, 256, groups=2, max_m=128), device="cpu")
    res = DgxImpl().measure(p, Ctx(flush=None))
    assert res.status == "unavailable"
    assert "m_grouped_fp8_gemm_nt_masked does not exist" in res.reason
