"""dgx bench: the MQA-logits suites (mqa, paged_mqa) without a GPU.

The fixed cases and their FLOP and byte counts (checked by hand for one case each), suite selection, the
shapes-file refusal, the no-GPU exit, reports from fabricated results, and (torch CPU) the inputs, the float64
reference on a subset of rows, the -inf check, the torch peer and the dgx adapter's calls against dgx's own
signatures.
"""

import inspect
import json
import sys
import types

import pytest

import dgx.bench as bench
from dgx.bench import EXIT_NO_GPU, EXIT_USAGE, render_markdown, render_table, summarize, write_json
from dgx.bench import suites as S
from dgx.bench.mqa_suites import (
    HBM_PEAK_GBPS,
    MqaShape,
    builtin_mqa_suite,
    paged_case,
    prefill_case,
    ragged_case,
    ragged_lens,
)
from dgx.bench.results import BenchResults, CaseResult, ImplResult, RepeatResult
from bench_echo import Echo


# ---- the fixed cases ----------------------------------------------------------------------------


def test_prefill_cases_and_counts_by_hand():
    cases = S.builtin_suite("mqa")
    assert [c.label for c in cases] == ["S=4096 S_kv=8192", "S=4096 S_kv=65536"]
    assert all((c.heads, c.dim, c.seq_len) == (64, 128, 4096) for c in cases)
    c = cases[0]
    # query i sees S_kv - S + i + 1 keys: 4097 .. 8192, i.e. 4096 * 4096 + (1 + ... + 4096)
    assert c.pairs == 4096 * 4096 + 4096 * 4097 // 2 == 25_167_872
    assert c.flops == 2 * 64 * 128 * 25_167_872 == 412_350_414_848
    # q + keys with scales + weights + FP32 logits
    assert c.bytes_moved == 4096 * 64 * 128 + 8192 * 132 + 4096 * 64 * 4 + 4096 * 8192 * 4 == 169_902_080
    big = cases[1]
    assert big.pairs == 4096 * (65536 - 4096) + 4096 * 4097 // 2
    bound, floor = c.floor()
    assert bound == "compute" and floor == pytest.approx(412_350_414_848 / 1e15 * 1e6)  # µs at 1000 TFLOPS


def test_paged_cases_and_counts_by_hand():
    cases = S.builtin_suite("paged_mqa")
    assert len(cases) == 2 * 3 * 2 + 2
    equal = [c for c in cases if not c.ragged]
    assert {(c.batch, c.next_n, c.context_len) for c in equal} == {
        (b, n, ctx) for b in (64, 256, 1024) for n in (1, 2) for ctx in (8192, 65536)
    }
    assert equal[0].label == "B=64 next_n=1 ctx=8192"
    c = equal[0]
    assert c.blocks == 64 * 128 == 8192
    # KV blocks × 64 × (D + 4) + logits B·next_n·max_len·4 + q B·next_n·H·D + weights B·next_n·H·4
    assert c.bytes_moved == 8192 * 64 * 132 + 64 * 8192 * 4 + 64 * 64 * 128 + 64 * 64 * 4 == 71_843_840
    assert c.floor() == ("memory", pytest.approx(71_843_840 / 3350e9 * 1e6))
    two = paged_case(64, 2, 8192)
    # query t sees 8192 - 2 + t + 1 keys: 8191 and 8192
    assert two.pairs == 64 * (8191 + 8192)
    assert two.bytes_moved == 8192 * 64 * 132 + 128 * 8192 * 4 + 128 * 64 * 128 + 128 * 64 * 4
    big = paged_case(1024, 2, 65536)
    assert big.blocks * 64 * 132 == 8_858_370_048  # the 9 GB of cache the builder fills chunk by chunk


def test_ragged_cases_have_a_balanced_twin_with_the_same_total():
    cases = S.builtin_suite("paged_mqa")
    ragged = [c for c in cases if c.ragged]
    assert [(c.batch, c.context_len, c.next_n) for c in ragged] == [(256, 8192, 1), (64, 65536, 1)]
    for c in ragged:
        lens = c.context_lens
        assert len(lens) == c.batch and sum(lens) == c.batch * c.context_len
        assert 9.0 <= max(lens) / min(lens) <= 10.5  # lengths vary 10× within the batch
        assert c.max_context_len == max(lens)
        assert c.balanced() in cases and not c.balanced().ragged
        assert c.label.endswith("ragged") and c.label != c.balanced().label
    assert ragged_lens(256, 8192) == ragged[0].ragged_lens  # seeded: the same lengths every time
    assert ragged_lens(256, 8192, seed=1) != ragged[0].ragged_lens
    with pytest.raises(ValueError, match="ragged_lens"):
        ragged_lens(1, 8192)
    with pytest.raises(ValueError, match="unknown suite"):
        MqaShape("nope")


def test_mqa_shapes_round_trip_through_json():
    for suite in ("mqa", "paged_mqa"):
        for s in S.builtin_suite(suite):
            d = json.loads(json.dumps(s.to_dict()))
            assert S.Shape.from_dict(d) == s  # the recorded form comes back as an MqaShape
    d = ragged_case(256, 8192).to_dict()
    assert d["label"] == "B=256 next_n=1 ctx≈8192 ragged" and len(d["ragged_lens"]) == 256
    assert d["bytes"] == ragged_case(256, 8192).bytes_moved and "blocks" in d


# ---- selection, shapes files, the command --------------------------------------------------------


def test_suite_selection():
    assert S.suite_names("mqa") == ["mqa"] and S.suite_names("paged_mqa") == ["paged_mqa"]
    assert S.suite_names("all")[5:8] == ["mqa", "paged_mqa", "moe"]  # then the MoE block (tests/test_bench_moe.py)
    assert S.suite_names("all")[:5] == ["dense", "contiguous", "masked", "wgrad", "k_grouped"]
    assert [s.suite for s in S.select_shapes("mqa")] == ["mqa", "mqa"]
    assert len(S.select_shapes("paged_mqa")) == 14
    everything = S.select_shapes("all")
    assert sum(s.suite == "mqa" for s in everything) == 2 and sum(s.suite == "paged_mqa" for s in everything) == 14
    # and the single-operation suites (tests/test_bench_ops.py)
    assert len(everything) == 18 + 4 + 6 + 12 + 6 + 16 + 10 + 26 + 6 + 4 + 4 + 38 + 16 + 24 + 6
    assert everything[:18] == S.builtin_suite("dense")  # the GEMM suites first, unchanged
    with pytest.raises(ValueError, match="unknown GEMM suite 'mqa'"):
        S.make_shape("mqa", 64, 64, 128)


def test_cli_suite_choices_are_the_bench_suites():
    from dgx import cli
    assert tuple(cli.BENCH_SUITES) == tuple(bench.SUITES) + ("all",)


@pytest.mark.parametrize("kind, suite", [("mqa_logits", "mqa"), ("paged_mqa_logits", "paged_mqa")])
def test_shapes_file_with_an_mqa_kind_is_refused(tmp_path, kind, suite):
    data = [{"kind": "dense", "m": 64, "n": 2112, "k": 7168}, {"kind": kind, "n": 128, "k": 128}]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(data))
    message = f"entry 1: field 'kind': '{kind}' cannot be benchmarked from a shapes file: the {suite} suite has fixed problems"
    with pytest.raises(S.ShapesFileError) as e:
        S.load_shapes_file(str(p))
    assert str(e.value).startswith(f"shapes file {p}: {message}")
    with pytest.raises(S.ShapesFileError, match="fixed problems"):
        S.parse_shapes(data)
    echo = Echo()
    assert bench.main("all", str(p), echo=echo) == EXIT_USAGE
    assert message in echo.text and f"--suite {suite}` without --shapes" in echo.text


def test_shapes_file_does_not_apply_to_fixed_suites(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    p = tmp_path / "s.json"
    p.write_text(json.dumps([{"kind": "dense", "m": 64, "n": 2112, "k": 7168}]))
    echo = Echo()
    assert bench.main("paged_mqa", str(p), echo=echo) == EXIT_USAGE
    assert "--shapes does not apply to suite paged_mqa: its problems are fixed" in echo.text
    assert "needs an NVIDIA GPU" not in echo.text  # refused before the GPU check


@pytest.mark.parametrize("suite", ["mqa", "paged_mqa"])
def test_cli_bench_mqa_without_gpu_exits_1(monkeypatch, suite):
    from dgx import cli
    from click.testing import CliRunner

    from dgx.bench.runner import NO_GPU_PREFIX

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails: no usable GPU
    result = CliRunner().invoke(cli.main, ["bench", "--suite", suite, "--repeat", "1"])
    assert result.exit_code == EXIT_NO_GPU == 1, result.output
    assert NO_GPU_PREFIX + "PyTorch is not importable" in result.output
    assert "not available in this build" not in result.output  # this build has the MQA functions


def test_no_cuda_device_exits_1(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    echo = Echo()
    assert bench.main("mqa", echo=echo) == EXIT_NO_GPU
    assert "dgx bench needs an NVIDIA GPU: torch.cuda.is_available() is False" in echo.text


def test_unavailable_mqa_functions(monkeypatch):
    assert bench.unavailable_reason("mqa") is None and bench.unavailable_reason("paged_mqa") is None
    fake = types.ModuleType("dgx")
    fake.fp8_paged_mqa_logits = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "dgx", fake)
    assert bench.unavailable_reason("mqa") == "dgx.fp8_mqa_logits does not exist in this build"
    assert bench.unavailable_reason("paged_mqa") == "dgx.get_paged_mqa_logits_metadata does not exist in this build"


def test_impls_per_suite():
    from dgx.bench.peers import make_impls

    impls = make_impls(True)
    assert [i.name for i in impls if i.runs_on("mqa")] == ["dgx", "torch"]
    assert [i.name for i in impls if i.runs_on("paged_mqa")] == ["dgx", "torch"]
    assert [i.name for i in impls if i.runs_on("dense")] == ["dgx", "cublaslt", "triton", "bf16", "fp8_tensor"]
    assert [i.name for i in make_impls(False) if i.runs_on("paged_mqa")] == ["dgx"]


def test_mqa_notes():
    from dgx.bench.runner import mqa_notes

    assert mqa_notes(["dense", "wgrad"]) == []
    notes = mqa_notes(["paged_mqa"])
    assert any("3.35 TB/s" in n and "80%" in n for n in notes) and not any("1000 TFLOPS" in n for n in notes)
    assert any("float64 reference on a subset" in n for n in notes)
    assert any("1000 TFLOPS" in n for n in mqa_notes(["mqa", "dense"]))


# ---- reports from fabricated results ------------------------------------------------------------

P8 = prefill_case(8192)
P64 = prefill_case(65536)
BAL = paged_case(256, 1, 8192)
RAG = ragged_case(256, 8192)
BIG = paged_case(1024, 2, 65536)
SMALL = paged_case(64, 1, 8192)

# per repeat: shape -> impl -> µs
MQA_TIMES = [
    {P8: {"dgx": 600.0, "torch": 9000.0}, P64: {"dgx": 4000.0, "torch": 150000.0},
     SMALL: {"dgx": 40.0, "torch": 900.0}, BAL: {"dgx": 120.0, "torch": 3000.0}, RAG: {"dgx": 150.0, "torch": 4000.0},
     BIG: {"dgx": 3300.0}},
    {P8: {"dgx": 620.0, "torch": 9100.0}, P64: {"dgx": 4100.0, "torch": 151000.0},
     SMALL: {"dgx": 42.0, "torch": 910.0}, BAL: {"dgx": 124.0, "torch": 3050.0}, RAG: {"dgx": 160.0, "torch": 4100.0},
     BIG: {"dgx": 3350.0}},
]


def make_mqa_results(repeats: int = 2) -> BenchResults:
    res = BenchResults(
        env={"device": "Fake H100", "torch": "2.11", "dgx": "0.1.0", "date": "2026-11-24T00:00:00+00:00"},
        settings={"suite": "all", "repeat": repeats, "warmup": 5, "iters": 30, "diff_tolerance": 1e-3},
        notes=["synthetic"],
    )
    for r in range(repeats):
        rr = RepeatResult(ceilings={"fp8_tflops": 1300.0, "copy_gbps": 3000.0, "bf16_tflops": 700.0})
        for shape, impls in MQA_TIMES[r].items():
            case = CaseResult(shape)
            for name, us in impls.items():
                case.impls[name] = ImplResult(name, "ok", us=us, us_min=us, us_max=us, diff=1e-6, note=f"{name} note")
            if shape is BIG:
                case.impls["torch"] = ImplResult("torch", "not run", "not timed: 128 M query-key pairs, over the 32 M")
            rr.cases.append(case)
        res.repeats.append(rr)
    return res


def test_mqa_summary_numbers():
    s = summarize(make_mqa_results())
    pre = s.suite("mqa")
    c8 = pre.cases[0]
    assert c8.impls["dgx"].us == pytest.approx(610.0)
    assert c8.impls["dgx"].tflops == pytest.approx(P8.flops / 610e-6 / 1e12)
    assert c8.bound == "compute"
    assert c8.impls["dgx"].fraction == pytest.approx(c8.impls["dgx"].tflops / 1000.0)  # share of the goal
    assert c8.speedups["torch"] == pytest.approx(9050.0 / 610.0)
    paged = s.suite("paged_mqa")
    by = {c.shape: c for c in paged.cases}
    small = by[SMALL].impls["dgx"]
    assert small.gbps == pytest.approx(71_843_840 / 41e-6 / 1e9)
    assert small.fraction == pytest.approx(small.gbps / HBM_PEAK_GBPS)
    assert by[RAG].balanced == {"label": BAL.label, "dgx_us": pytest.approx(122.0), "ratio": pytest.approx(155.0 / 122.0)}
    assert by[BAL].balanced is None
    assert by[BIG].impls["torch"].status == "not run" and by[BIG].speedups["torch"] is None
    assert paged.geomean_gbps["dgx"] is not None and paged.geomean_gbps["torch"] is not None


def test_mqa_markdown_tables_and_goal_lines():
    md = render_markdown(make_mqa_results())
    assert "## MQA logits, prefill (fp8_mqa_logits" in md and "## MQA logits, decode (fp8_paged_mqa_logits" in md
    pre = md.split("## MQA logits, prefill")[1].split("## MQA logits, decode")[0]
    header = next(l for l in pre.splitlines() if l.startswith("| case"))
    for col in ("dgx µs", "spread", "TFLOPS", "of goal (1000 TF)", "torch µs", "torch TF (dgx ×)"):
        assert f" {col} |" in header, col
    tf8 = P8.flops / 610e-6 / 1e12
    row = next(l for l in pre.splitlines() if l.startswith("| S=4096 S_kv=8192 |"))
    assert f"| {tf8:.0f} |" in row and f"| {100 * tf8 / 1000:.0f}% |" in row and f"({9050 / 610:.2f}×)" in row
    assert "Goal: 1000 TFLOPS on the in-window work" in pre
    dec = md.split("## MQA logits, decode")[1]
    header = next(l for l in dec.splitlines() if l.startswith("| case"))
    for col in ("dgx µs", "GB/s", "of HBM peak", "vs balanced", "torch µs", "torch GB/s (dgx ×)"):
        assert f" {col} |" in header, col
    rag = next(l for l in dec.splitlines() if l.startswith(f"| {RAG.label} |"))
    assert f"| {155 / 122:.2f}× |" in rag
    assert "Goal: 80% of the 3350 GB/s HBM peak (2680 GB/s)" in dec
    lens = RAG.context_lens
    assert f"{RAG.label}: 256 lengths from {min(lens)} to {max(lens)} tokens (sum 2097152 = 256 × 8192)" in dec
    assert f"dgx takes {155 / 122:.2f}× the time of {BAL.label}" in dec
    assert f"torch reference (BF16 matmul per chunk) not run on {BIG.label}: not timed" in dec
    assert "Group sizes" not in md
    assert "dgx geomean GB/s" in dec and "dgx geomean TFLOPS" not in dec  # the spread line speaks the metric
    assert "dgx geomean TFLOPS" in pre
    for block in md.split("\n\n"):  # every table row has the header's column count
        rows = [l for l in block.splitlines() if l.startswith("|")]
        if rows:
            assert len({r.count("|") - r.count("\\|") for r in rows}) == 1, block


def test_mqa_terminal_table_and_json(tmp_path):
    res = make_mqa_results(1)
    text = render_table(res)
    assert "MQA logits, decode" in text and "of HBM peak" in text and "Goal: 1000 TFLOPS" in text
    row = next(l for l in text.splitlines() if l.startswith(SMALL.label))
    assert f"{71_843_840 / 40e-6 / 1e9:.0f}" in row
    path = tmp_path / "r.json"
    write_json(res, str(path))
    data = json.loads(path.read_text())
    paged = next(s for s in data["summary"]["suites"] if s["suite"] == "paged_mqa")
    assert paged["geomean_gbps"]["dgx"] == pytest.approx(summarize(res).suite("paged_mqa").geomean_gbps["dgx"])
    rag = next(c for c in paged["cases"] if c["label"] == RAG.label)
    assert rag["vs_balanced"]["ratio"] == pytest.approx(150 / 120)
    assert rag["shape"]["ragged_lens"] == list(RAG.ragged_lens)
    back = bench.load_json(str(path))
    assert render_markdown(back) == render_markdown(res)


def test_gemm_reports_unchanged_by_the_mqa_columns():
    from test_bench_report import make_results

    data = make_results().to_dict()
    for suite in data["summary"]["suites"]:
        assert "geomean_gbps" not in suite
        assert all("vs_balanced" not in c for c in suite["cases"])


def test_mqa_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from dgx.bench import write_plot

    path = tmp_path / "mqa.png"
    write_plot(make_mqa_results(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- inputs, references, the check and the implementations (torch CPU) ---------------------------


def _ctx():
    from dgx.bench.peers import Ctx

    return Ctx(flush=None)


TINY = [
    MqaShape("mqa", seq_len=40, seq_len_kv=96),
    MqaShape("mqa", seq_len=70, seq_len_kv=50),  # more queries than keys: the first 20 see nothing
    MqaShape("paged_mqa", batch=5, next_n=2, context_len=130),
    MqaShape("paged_mqa", batch=12, next_n=1, context_len=100, ragged_lens=ragged_lens(12, 100)),
]


def test_check_logits():
    torch = pytest.importorskip("torch")
    from dgx.bench.mqa_check import LogitsMismatch, check_logits

    inf, nan = float("-inf"), float("nan")
    ref = torch.tensor([[1.0, 2.0, inf, nan], [3.0, inf, inf, nan]], dtype=torch.float64)
    good = torch.tensor([[1.0, 2.0, inf, 123.0], [3.0, inf, inf, inf]])  # NaN in ref: not compared
    assert check_logits(good, ref) == pytest.approx(0.0, abs=1e-12)
    close = good.clone()
    close[0, 0] = 1.001
    assert 0 < check_logits(close, ref) < 1e-6
    missing = good.clone()
    missing[1, 1] = 0.0
    with pytest.raises(LogitsMismatch, match=r"1 expected -inf not written as -inf, 0 unexpected.*\(row, column\) \[\(7, 1\)\]"):
        check_logits(missing, ref, rows=[5, 7])
    extra = good.clone()
    extra[0, 1] = inf
    with pytest.raises(LogitsMismatch, match="0 expected -inf not written as -inf, 1 unexpected -inf"):
        check_logits(extra, ref)
    unwritten = good.clone()
    unwritten[0, 0] = nan
    assert check_logits(unwritten, ref) == float("inf")
    with pytest.raises(LogitsMismatch, match="shape"):
        check_logits(good[:1], ref)


@pytest.mark.parametrize("shape", TINY, ids=lambda s: s.label)
def test_problem_inputs_and_reference(shape):
    torch = pytest.importorskip("torch")
    from dgx.bench.mqa_problems import build_mqa_problem, dequant_blocks

    p = build_mqa_problem(shape, seed=0, device="cpu")
    t = p.tensors
    assert tuple(p.ref.shape) == (len(p.rows), shape.width) and p.ref.dtype == torch.float64
    if shape.suite == "mqa":
        assert t["q"].dtype == torch.float8_e4m3fn and tuple(t["q"].shape) == (shape.seq_len, 64, 128)
        assert tuple(t["kv"].shape) == (shape.seq_len_kv, 128) and tuple(t["kv_scales"].shape) == (shape.seq_len_kv,)
        assert t["ke"].tolist() == [min(max(shape.seq_len_kv - shape.seq_len + i + 1, 0), shape.seq_len_kv)
                                    for i in range(shape.seq_len)]
        assert sum(t["ke"].tolist()) == shape.pairs
        assert p.rows[0] == 0 and p.rows[-1] == shape.seq_len - 1
        # -inf exactly outside the windows, finite inside
        for r, row in zip(p.rows, p.ref):
            hi = int(t["ke"][r])
            assert torch.isfinite(row[:hi]).all() and torch.isneginf(row[hi:]).all()
    else:
        cache, table = t["kv_cache"], t["block_table"]
        assert cache.dtype == torch.uint8 and tuple(cache.shape) == (shape.blocks, 64, 1, 132)
        assert t["context_lens"].tolist() == list(shape.context_lens) == p.context_lens
        # every block used once, each sequence's own blocks first, -1 past them
        ids = [int(x) for b in range(shape.batch) for x in table[b, : (shape.context_lens[b] + 63) // 64]]
        assert sorted(ids) == list(range(shape.blocks))
        assert int((table >= 0).sum()) == shape.blocks
        k = dequant_blocks(cache, table[0, :1].long(), torch.float64)
        assert tuple(k.shape) == (64, 128) and torch.isfinite(k).all() and k.abs().max() > 0
        lens = shape.context_lens
        for i, r in enumerate(p.rows):
            b, tq = divmod(r, shape.next_n)
            limit = lens[b] - shape.next_n + tq + 1
            visited = (lens[b] + 63) // 64 * 64
            row = p.ref[i]
            assert torch.isfinite(row[:limit]).all() and torch.isneginf(row[limit:visited]).all()
            assert torch.isnan(row[visited:]).all()  # past its blocks: not compared


@pytest.mark.parametrize("shape", TINY, ids=lambda s: s.label)
def test_torch_peer_passes_the_check(shape):
    pytest.importorskip("torch")
    from dgx.bench.mqa_problems import build_mqa_problem
    from dgx.bench.peers import TorchMqa

    p = build_mqa_problem(shape, seed=1, device="cpu")
    prep, diff, note = TorchMqa().select(p, _ctx())
    assert diff < 1e-5  # BF16 keys against the float64 reference
    assert "BF16" in note
    assert tuple(prep.output().shape) == tuple(p.ref.shape)


def test_torch_peer_chunks_agree():
    torch = pytest.importorskip("torch")
    from dgx.bench import mqa_torch
    from dgx.bench.mqa_problems import build_mqa_problem

    p = build_mqa_problem(TINY[3], device="cpu")
    t = p.tensors
    args = (t["q"], t["kv_cache"], t["weights"], t["context_lens"], t["block_table"], p.context_lens, TINY[3].max_context_len)
    assert torch.equal(mqa_torch.paged_logits(*args, chunk=1), mqa_torch.paged_logits(*args, chunk=5))
    assert mqa_torch.prefill_chunk(64, 65536) == 64 and mqa_torch.prefill_chunk(64, 8192) == 256
    assert mqa_torch.paged_chunk(64, 2, 128, 65536) == 32


def test_wrong_minus_inf_positions_fail_the_check():
    torch = pytest.importorskip("torch")
    from dgx.bench.mqa_problems import build_mqa_problem
    from dgx.bench.peers import Outcome, Prepared

    p = build_mqa_problem(TINY[0], device="cpu")
    good = p.ref.float()
    off = good.clone()
    off[0, -1] = 0.0  # row 0 sees keys [0, 57): its last key must be -inf
    with pytest.raises(Outcome) as e:
        _ctx().first_passing(p, [("x", lambda: Prepared(lambda: None, lambda: off))])
    assert e.value.status == "failed" and "-inf positions differ" in e.value.reason
    prep, diff, _ = _ctx().first_passing(p, [("x", lambda: Prepared(lambda: None, lambda: good))])
    assert diff < 1e-12
    assert torch.isneginf(good).any()


def test_torch_peer_not_run_on_the_largest_decode_cases():
    from dgx.bench.mqa_problems import MqaProblem
    from dgx.bench.peers import TorchMqa

    problem = MqaProblem(BIG, {}, [], None)  # nothing is built: the peer refuses first
    res = TorchMqa().measure(problem, _ctx())
    assert res.status == "not run" and res.reason.startswith("not timed: 128 M query-key pairs, over the 32 M")
    assert TorchMqa().runs_on("paged_mqa") and paged_case(256, 2, 65536).pairs <= 1 << 25  # the next largest runs


def test_slow_peer_is_timed_over_fewer_calls():
    from dgx.bench.peers import Prepared, TorchMqa
    from dgx.bench.timing import Timing

    class Ctx:
        warmup, iters = 5, 30

        def __init__(self, us):
            self.us = us

        def time(self, fn, warmup=None, iters=None):
            return Timing(self.us, self.us, self.us, [self.us])

    peer = TorchMqa()
    prep = Prepared(lambda: None, lambda: None)
    assert peer.timing_plan(prep, Ctx(800.0)) == (None, None, "")
    assert peer.timing_plan(prep, Ctx(25000.0)) == (1, 5, "timed over 5 calls after 1 warm-up (25 ms a call)")


class FakeDgx(types.ModuleType):
    """dgx's MQA functions computed by the torch peer; every call is bound to the real function's signature."""

    def __init__(self):
        super().__init__("dgx")
        import dgx

        self.real = dgx
        self.calls = []

    def _bind(self, name, *args, **kwargs):
        inspect.signature(getattr(self.real, name)).bind(*args, **kwargs)
        self.calls.append((name, args, kwargs))

    def fp8_mqa_logits(self, *args, **kwargs):
        from dgx.bench import mqa_torch

        self._bind("fp8_mqa_logits", *args, **kwargs)
        q, (kv, sc), w, ks, ke = args
        kwargs["out"].copy_(mqa_torch.prefill_logits(q, kv, sc, w, ks, ke))

    def get_paged_mqa_logits_metadata(self, *args, **kwargs):
        import torch

        self._bind("get_paged_mqa_logits_metadata", *args, **kwargs)
        return torch.zeros(args[2] + 1, 2, dtype=torch.int32)

    def get_num_sms(self, device=0):
        self._bind("get_num_sms", device)
        return 132

    def fp8_paged_mqa_logits(self, *args, **kwargs):
        from dgx.bench import mqa_torch

        self._bind("fp8_paged_mqa_logits", *args, **kwargs)
        q, cache, w, lens, table, sched, width = args
        out = kwargs["out"]
        full = mqa_torch.paged_logits(q, cache, w, lens, table, lens.tolist(), width)
        out.copy_(full)


@pytest.mark.parametrize("shape", TINY, ids=lambda s: s.label)
def test_dgx_adapter_calls_match_dgx_signatures(monkeypatch, shape):
    pytest.importorskip("torch")
    from dgx.bench.mqa_problems import build_mqa_problem
    from dgx.bench.peers import DgxImpl

    fake = FakeDgx()
    monkeypatch.setitem(sys.modules, "dgx", fake)
    p = build_mqa_problem(shape, device="cpu")
    prep, diff, note = DgxImpl().select(p, _ctx())
    assert diff < 1e-5
    names = [c[0] for c in fake.calls]
    if shape.suite == "mqa":
        assert names == ["fp8_mqa_logits"]
        assert fake.calls[0][2]["clean_logits"] is True
    else:
        # the schedule once, before (and outside) the call that is timed
        assert names == ["get_num_sms", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"]
        assert fake.calls[1][1][1:] == (64, 132)
        assert fake.calls[2][1][6] == shape.max_context_len and fake.calls[2][2]["clean_logits"] is False
        assert "computed once, outside the timed call" in note
        prep.run()
        assert [c[0] for c in fake.calls][-1] == "fp8_paged_mqa_logits" and len(fake.calls) == 4


def test_dgx_adapter_poisons_the_output(monkeypatch):
    """An output left unwritten is NaN, not stale data from an earlier run: it fails the check."""
    pytest.importorskip("torch")
    from dgx.bench.mqa_problems import build_mqa_problem
    from dgx.bench.peers import DgxImpl

    fake = FakeDgx()
    fake.fp8_mqa_logits = lambda *a, **k: None  # writes nothing
    monkeypatch.setitem(sys.modules, "dgx", fake)
    res = DgxImpl().measure(build_mqa_problem(TINY[0], device="cpu"), _ctx())
    assert res.status == "failed"


def test_measure_and_report_end_to_end_on_cpu(monkeypatch):
    """Both implementations measured on tiny cases (the fake dgx, a stand-in clock), then summarised and
    rendered: the path of a GPU run from the problem to the report, without CUDA."""
    pytest.importorskip("torch")
    from dgx.bench.mqa_problems import build_mqa_problem
    from dgx.bench.peers import Ctx, make_impls
    from dgx.bench.timing import Timing

    class CpuCtx(Ctx):
        def time(self, fn, warmup=None, iters=None):
            fn()
            us = 100.0 if iters is None else 20000.0
            return Timing(us, us, us, [us])

    monkeypatch.setitem(sys.modules, "dgx", FakeDgx())
    ragged = TINY[3]
    shapes = [TINY[0], ragged.balanced(), ragged]
    rr = RepeatResult(ceilings={"fp8_tflops": 1300.0, "copy_gbps": 3000.0})
    for shape in shapes:
        problem = build_mqa_problem(shape, device="cpu")
        case = CaseResult(shape)
        for impl in make_impls(True):
            if impl.runs_on(shape.suite):
                case.impls[impl.name] = impl.measure(problem, CpuCtx(flush=None))
        problem.free()
        rr.cases.append(case)
    res = BenchResults(env={"device": "cpu"}, settings={"repeat": 1}, repeats=[rr])
    for case in rr.cases:
        assert [(n, r.status) for n, r in case.impls.items()] == [("dgx", "ok"), ("torch", "ok")]
        assert case.impls["dgx"].diff < 1e-5 and case.impls["torch"].diff < 1e-5
    s = summarize(res)
    assert s.suite("paged_mqa").cases[1].balanced["ratio"] == pytest.approx(1.0)
    md = render_markdown(res)
    assert f"| {ragged.label} | 100 |" in md and "| 1.00× |" in md
