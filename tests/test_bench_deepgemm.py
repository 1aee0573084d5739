"""dgx bench's DeepGEMM peer on the CPU, with a stand-in deep_gemm module (tests/deep_gemm_stand_in.py): a real
DeepGEMM is told from dgx's own alias, its version and commit reach the run's metadata, the benchmark's tensors
reach DeepGEMM's calls in the layouts its API takes, dgx and DeepGEMM swap which goes first from one repeat to the
next, and the same-run ratio is a column of the reports."""

from __future__ import annotations

import json
import math
import sys

import pytest

torch = pytest.importorskip("torch")

from dgx.bench import deepgemm, peers  # noqa: E402
from dgx.bench.peers import Ctx, DeepGemm, DgxImpl, impl_order, make_impls  # noqa: E402
from dgx.bench.problems import build_problem  # noqa: E402
from dgx.bench.report import render_markdown, render_table, to_json  # noqa: E402
from dgx.bench.results import BenchResults, CaseResult, ImplResult, RepeatResult, summarize  # noqa: E402
from dgx.bench.suites import make_shape  # noqa: E402
from dgx.bench.timing import Timing  # noqa: E402
from deep_gemm_stand_in import StandInDeepGemm  # noqa: E402

SMALL = [
    ("dense", dict(m=64, n=256, k=512)),
    ("wgrad", dict(m=64, n=128, k=384)),
    ("contiguous", dict(m=100, n=256, k=256, groups=3)),
    ("masked", dict(m=50, n=128, k=256, groups=2, max_m=128)),
    ("k_grouped", dict(m=64, n=128, k=256, groups=2)),
]


class CpuCtx(Ctx):
    """Verification as on the GPU; a stand-in clock (every call 'takes' the given µs)."""

    def __init__(self, us: float = 100.0):
        super().__init__(flush=None)
        self.us = us

    def time(self, fn, warmup=None, iters=None):
        fn()
        return Timing(self.us, self.us, self.us, [self.us])


def found(module=None) -> deepgemm.DeepGemmInfo:
    return deepgemm.describe(module or StandInDeepGemm())


# ---- detection and metadata ---------------------------------------------------------------------


def test_a_real_deep_gemm_is_found_and_described():
    info = deepgemm.find_deep_gemm(lambda name: StandInDeepGemm())
    assert info.found and info.version == "2.6.1"
    assert (info.commit, info.commit_from) == ("54e2261", "the commit of release 2.6.1 (the package does not say its own)")
    assert info.env() == {"deep_gemm": "2.6.1", "deep_gemm_commit": "54e2261",
                          "deep_gemm_commit_from": info.commit_from}


def test_dgx_alias_is_never_a_peer():
    import dgx.deep_gemm

    info = deepgemm.find_deep_gemm(lambda name: dgx.deep_gemm)
    assert not info.found and "DGX_AS_DEEP_GEMM" in info.reason and "never timed against itself" in info.reason
    assert info.env() == {"deep_gemm": f"not timed: {info.reason}"}
    # a module whose file lies inside the dgx package, whatever its name
    inside = StandInDeepGemm(origin=str(__import__("pathlib").Path(dgx.deep_gemm.__file__).parent / "x.py"))
    assert deepgemm.is_dgx_module(inside) and not deepgemm.is_dgx_module(StandInDeepGemm())
    assert [i.name for i in make_impls(True, info)][:2] == ["dgx", "cublaslt"]


def test_import_failure_is_the_reason(monkeypatch):
    def fail(name):
        raise ImportError("libcuda.so.1: cannot open shared object file")

    info = deepgemm.find_deep_gemm(fail)
    assert not info.found and info.reason.startswith("import deep_gemm failed: ImportError: libcuda.so.1")
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # no deep_gemm at all: the default importer
    assert not deepgemm.find_deep_gemm().found


def test_commit_from_the_package_or_its_checkout(tmp_path):
    m = StandInDeepGemm(version="2.7.0")
    assert deepgemm.describe(m).commit is None and "unknown" in deepgemm.describe(m).commit_from
    m.__commit__ = "0123abc"
    assert (deepgemm.describe(m).commit, deepgemm.describe(m).commit_from) == ("0123abc", "the package's __commit__")
    repo = tmp_path / "DeepGEMM"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text("54e2261aaaabbbbccccddddeeeeffff00001111\n")
    (repo / "deep_gemm").mkdir()
    checkout = StandInDeepGemm(version="2.7.0", origin=str(repo / "deep_gemm" / "__init__.py"))
    assert deepgemm.describe(checkout).commit == "54e2261aaaab"


# ---- layouts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_converter", [True, False])
@pytest.mark.parametrize("shape", [(130, 5), (3, 130, 5), (64, 1)])
def test_mn_major_scales(with_converter, shape):
    sf = torch.randn(*shape)
    out = deepgemm.mn_major_scales(StandInDeepGemm(with_converter=with_converter), sf)
    mn = shape[-2]
    assert tuple(out.shape) == shape and torch.equal(out, sf)
    assert out.stride()[-2:] == (1, deepgemm.tma_aligned_rows(mn))
    if len(shape) == 3:
        assert out.stride(0) == deepgemm.tma_aligned_rows(mn) * shape[-1]


def test_k_grouped_scales_as_deepgemms_test_passes_them():
    sf = torch.randn(64, 6)  # dgx's [M, Σk/128]
    out = deepgemm.k_grouped_scales(sf)
    assert tuple(out.shape) == (64, 6) and out.stride() == (1, 64) and torch.equal(out, sf)
    assert out.t().is_contiguous()  # [Σk/128, M] contiguous underneath


def test_paged_context_lens_give_dgx_windows():
    lens = torch.tensor([130, 64, 1], dtype=torch.int32)
    two_d = deepgemm.paged_context_lens(lens, 2)
    assert two_d.dtype == torch.int32 and two_d.is_contiguous()
    assert two_d.tolist() == [[129, 130], [63, 64], [0, 1]]  # query t sees keys j < len - next_n + t + 1
    assert deepgemm.paged_context_lens(lens, 1).tolist() == [[130], [64], [1]]


# ---- the calls ----------------------------------------------------------------------------------


@pytest.mark.parametrize("suite, kw", SMALL, ids=[s for s, _ in SMALL])
def test_each_gemm_suite_verifies_through_deepgemms_api(suite, kw):
    dg = StandInDeepGemm(with_converter=suite != "wgrad")
    problem = build_problem(make_shape(suite, **kw), seed=1, device="cpu")
    res = DeepGemm(found(dg)).measure(problem, CpuCtx())
    assert res.status == "ok", res.reason
    assert res.diff < 1e-5 and res.name == "deepgemm"
    (name, args, kwargs), *_ = [c for c in dg.calls if not c[0].startswith("set_")]
    t = problem.tensors
    assert args[0][0] is t["A"] and args[1][0] is t["B"] and args[2] is t["D"]  # the same tensors as dgx
    if suite == "k_grouped":
        assert name == "k_grouped_fp8_gemm_nt_contiguous" and kwargs["recipe"] == (1, 1, 128)
        assert args[3] == list(problem.shape.group_ks) and args[4] is t["ks_tensor"]
    else:
        assert kwargs["disable_ue8m0_cast"] is True
    if suite == "wgrad":
        assert kwargs["c"] is t["D"] and kwargs["recipe"] == (1, 1, 128)


def test_contiguous_alignment_is_set_to_128_once_outside_the_call():
    dg = StandInDeepGemm()
    dg.alignment = 224
    problem = build_problem(make_shape("contiguous", m=100, n=256, k=256, groups=2), device="cpu")
    res = DeepGemm(found(dg)).measure(problem, CpuCtx())
    assert res.status == "ok" and "alignment set from 224 to 128 rows" in res.note
    assert [c[0] for c in dg.calls].count("set_mk_alignment_for_contiguous_layout") == 1


def test_a_deepgemm_error_is_failed_not_timed():
    dg = StandInDeepGemm()

    def broken(*a, **k):
        raise RuntimeError("CUDA driver error: CUDA_ERROR_INVALID_VALUE")

    dg.k_grouped_fp8_gemm_nt_contiguous = broken
    problem = build_problem(make_shape("k_grouped", m=64, n=128, k=256, groups=2), device="cpu")
    res = DeepGemm(found(dg)).measure(problem, CpuCtx())
    assert res.status == "failed" and "CUDA_ERROR_INVALID_VALUE" in res.reason and res.us is None


def test_a_wrong_answer_is_failed():
    dg = StandInDeepGemm()
    real = dg.fp8_gemm_nt
    dg.fp8_gemm_nt = lambda a, b, d, **k: (real(a, b, d, **k), d.mul_(-1))
    res = DeepGemm(found(dg)).measure(build_problem(make_shape("dense", 64, 256, 512), device="cpu"), CpuCtx())
    assert res.status == "failed" and res.diff > 1


@pytest.mark.parametrize("index", [0, 2, 3])
def test_mqa_suites_through_deepgemms_api(index):
    from dgx.bench.mqa_problems import build_mqa_problem
    from test_bench_mqa import TINY

    dg = StandInDeepGemm()
    shape = TINY[index]
    res = DeepGemm(found(dg)).measure(build_mqa_problem(shape, device="cpu"), CpuCtx())
    assert res.status == "ok", res.reason
    names = [c[0] for c in dg.calls]
    if shape.suite == "mqa":
        assert set(names) == {"fp8_fp4_mqa_logits"}
        assert dg.calls[0][2]["clean_logits"] is True
    else:  # the schedule once, on the [B, next_n] lengths, before the timed calls
        assert names[0] == "get_paged_mqa_logits_metadata" and names.count("get_paged_mqa_logits_metadata") == 1
        assert tuple(dg.calls[0][1][0].shape) == (shape.batch, shape.next_n)
        assert dg.calls[-1][2]["clean_logits"] is False
        assert "schedule from its get_paged_mqa_logits_metadata(132 SMs)" in res.note


def test_kernel_timer_names_deepgemms_kernels():
    note = DeepGemm(found()).kernel_note(["sm90_fp8_mqa_logits<...>", "clean_logits<...>"])
    assert note == "kernel timer: 2 GPU activities a call, summed (sm90_fp8_mqa_logits<...>, clean_logits<...>)"
    assert all(any(k in n for n in ("sm90_fp8_mqa_logits", "clean_logits")) for k in deepgemm.KERNEL_NAMES["mqa"])


# ---- order, results and reports -----------------------------------------------------------------


def test_dgx_and_deepgemm_swap_places_every_round():
    impls = make_impls(True, found())
    names = [i.name for i in impls]
    assert names[:3] == ["dgx", "deepgemm", "cublaslt"]
    for r in range(4):
        order = [i.name for i in impl_order(impls, r)]
        assert order[:2] == (["dgx", "deepgemm"] if r % 2 == 0 else ["deepgemm", "dgx"])
        assert order[2:] == names[2:]
    without = make_impls(True, deepgemm.DeepGemmInfo(reason="none"))
    assert [i.name for i in impl_order(without, 1)] == [i.name for i in without]


def _run_rounds(monkeypatch, rounds: int = 2):
    """A run of the benchmark's loop on the CPU: dgx 100 µs, DeepGEMM 110 µs, every case verified first."""
    seen = []

    class Timed(DgxImpl):
        def select(self, problem, ctx):
            return ctx.first_passing(problem, [("dgx", lambda: peers.Prepared(lambda: None, lambda: problem.ref.clone()))])

    dg = DeepGemm(found())
    rr_all = []
    for r in range(rounds):
        rr = RepeatResult(ceilings={"fp8_tflops": 1300.0, "copy_gbps": 3000.0})
        for suite, kw in SMALL[:2]:
            problem = build_problem(make_shape(suite, **kw), device="cpu")
            case = CaseResult(problem.shape)
            for impl in impl_order([Timed(), dg], r):
                case.order.append(impl.name)
                case.impls[impl.name] = impl.measure(problem, CpuCtx(100.0 if impl.name == "dgx" else 110.0))
                seen.append((r, impl.name))
            rr.cases.append(case)
        rr_all.append(rr)
    env = {"device": "cpu", **found().env()}
    return BenchResults(env=env, settings={"repeat": rounds}, repeats=rr_all), seen


def test_same_run_ratio_in_the_json_and_the_tables(monkeypatch):
    res, seen = _run_rounds(monkeypatch)
    assert [n for r, n in seen if r == 0][:2] == ["dgx", "deepgemm"] and [n for r, n in seen if r == 1][:2] == [
        "deepgemm", "dgx"]
    data = json.loads(to_json(res))
    assert data["env"]["deep_gemm"] == "2.6.1" and data["env"]["deep_gemm_commit"] == "54e2261"
    assert data["repeats"][1]["cases"][0]["order"] == ["deepgemm", "dgx"]
    for suite in data["summary"]["suites"]:
        assert suite["cases"][0]["vs_deepgemm"] == pytest.approx(1.1)
        assert suite["geomean_vs_deepgemm"] == pytest.approx(1.1)
        assert suite["spread_over_repeats"]["vs_deepgemm"]["median"] == pytest.approx(1.1)
    md = render_markdown(res)
    header = next(line for line in md.splitlines() if line.startswith("| shape |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    at = cells.index("vs DeepGEMM")
    row = next(line for line in md.splitlines() if line.startswith("| 64×256×512 |"))
    assert [c.strip() for c in row.strip("|").split("|")][at] == "1.10×"
    assert "DeepGEMM TF (dgx ×)" in cells
    assert "vs DeepGEMM" in render_table(res)
    s = summarize(res)
    assert math.isclose(s.suite("dense").geomean_vs_deepgemm, 1.1)


def test_failed_deepgemm_shows_in_its_column():
    shape = make_shape("dense", 64, 256, 512)
    case = CaseResult(shape, {"dgx": ImplResult("dgx", "ok", us=10.0),
                              "deepgemm": ImplResult("deepgemm", "failed", "CUDA_ERROR_INVALID_VALUE")})
    res = BenchResults(env={"device": "cpu"}, settings={"repeat": 1}, repeats=[RepeatResult(cases=[case])])
    md = render_markdown(res)
    assert "| vs DeepGEMM |" in md and "DeepGEMM (this run) failed on 64×256×512: CUDA_ERROR_INVALID_VALUE" in md
    assert summarize(res).suites[0].geomean_vs_deepgemm is None


def test_plot_has_the_deepgemm_series(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from dgx.bench.report import _COLORS, write_plot

    res, _ = _run_rounds(monkeypatch, rounds=1)
    path = tmp_path / "p.png"
    write_plot(res, str(path))
    assert path.stat().st_size > 1000 and "deepgemm" in _COLORS


def test_run_suite_finds_deepgemm_and_records_it(monkeypatch):
    """run_suite's wiring: DeepGEMM found once, its metadata and note in the results, the impls made with it."""
    import types

    from dgx.bench import runner, timing

    made = {}
    monkeypatch.setattr(runner, "gpu_problem", lambda: None)
    monkeypatch.setattr(runner, "environment", lambda: {"device": "NVIDIA H200"})
    monkeypatch.setattr(timing, "L2Flusher", lambda: None)
    monkeypatch.setattr(runner, "probe_timer", lambda ctx: None)
    monkeypatch.setattr(runner, "measure_ceilings", lambda *a: ({"fp8_tflops": 1.0}, {}))
    monkeypatch.setattr(runner, "build_case", lambda shape, seed: types.SimpleNamespace(free=lambda: None))
    monkeypatch.setattr(deepgemm, "find_deep_gemm", lambda: found())

    def fake_impls(with_peers, deep_gemm=None):
        made["deep_gemm"] = deep_gemm
        return []

    monkeypatch.setattr(peers, "make_impls", fake_impls)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: None)))
    res = runner.run_suite(shapes=[make_shape("dense", 64, 256, 512)], peers=True, host=False)
    assert made["deep_gemm"].found and res.env["deep_gemm"] == "2.6.1"
    assert any(n.startswith("DeepGEMM 2.6.1, commit 54e2261") for n in res.notes)
    monkeypatch.setattr(deepgemm, "find_deep_gemm", lambda: pytest.fail("looked for DeepGEMM with --no-peers"))
    res = runner.run_suite(shapes=[make_shape("dense", 64, 256, 512)], peers=False, host=False)
    assert res.env["deep_gemm"].startswith("not timed: peers off")


def test_the_deepgemm_peer_runs_on_the_gemm_and_mqa_suites_only():
    """The MoE block has its own DeepGEMM impl (deepgemm_unfused): the GEMM peer there would find no D to write."""
    from dgx.bench.peers import DeepGemm
    from dgx.bench.suites import GEMM_SUITES
    from dgx.bench.mqa_suites import MQA_SUITES

    peer = DeepGemm(info=None)
    assert all(peer.runs_on(s) for s in GEMM_SUITES + MQA_SUITES)
    assert not peer.runs_on("moe")
