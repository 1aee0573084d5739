"""What tests/device/fused_sweep.py runs, decided on the CPU (its --list mode): the moe suite's rows, each row's
candidate fused configs (valid for the row, the heuristic's pick first, the cap honoured) and the unfused pair's
kernels (no GPU, no torch)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from dgx import families, heuristics
from dgx.bench.moe_suites import builtin_moe_suite

DEVICE = Path(__file__).resolve().parent / "device"
_spec = importlib.util.spec_from_file_location("fused_sweep", DEVICE / "fused_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules["fused_sweep"] = sweep  # (its dataclasses look their module up)
_spec.loader.exec_module(sweep)

CASES = sweep.suite_cases()
COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "bench" / "2026-11-27-h200-moe.json"


def test_cases_are_the_moe_suites_rows_of_the_committed_run():
    assert [c.shape for c in CASES] == builtin_moe_suite()
    committed = json.loads(COMMITTED.read_text())["repeats"][0]["cases"]
    assert [(c.label, list(c.shape.group_ms), c.shape.max_m) for c in CASES] == \
        [(r["shape"]["label"], r["shape"]["group_ms"], r["shape"]["max_m"]) for r in committed]
    masked_8x128 = next(c for c in CASES if c.key == "masked8x128")
    assert masked_8x128.shape.group_ms == (155, 106, 116, 111, 157, 136, 153, 94)
    assert (masked_8x128.m, masked_8x128.n, masked_8x128.k, masked_8x128.groups) == (128, 4096, 7168, 8)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_every_listed_candidate_is_a_valid_config_for_its_case(case):
    cands = sweep.plan_case(case, 1000)
    assert len({c.config for c in cands}) == len(cands)
    for c in cands:
        config = c.config
        assert sweep.fits_case(case, config) == ""
        dataclasses.replace(config)  # GemmConfig's own checks (tile, pair, registers, shared memory) run again
        assert config.epilogue == sweep.EPILOGUE and config.n == 4096 and config.k == 7168
        assert config.block_n == 128 and config.block_m in (64, 128) and config.split_k == 1
        assert c.units == heuristics.fused_units(config, case.kind, case.m, case.groups)
    # every config of the space is listed without a cap; the configs the heuristic's generator weighs among them
    assert {c.config for c in cands} == set(sweep.candidate_space(case))
    generated = {g for g, _ in heuristics.fused_options(case.kind, case.m, case.n, case.k, case.groups, 132,
                                                        sweep.EPILOGUE)}
    assert generated <= {c.config for c in cands}
    assert all(c.depth == 0 for c in cands if c.config in generated)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_the_heuristics_pick_comes_first(case):
    cands = sweep.plan_case(case, 12)
    pick = heuristics.choose_fused(case.kind, case.m, case.n, case.k, case.groups, 132, sweep.EPILOGUE)
    assert cands[0].config == pick.config and cands[0].source == "pick"
    assert cands[0].est_cycles == pick.est_cycles and cands[0].waves == pick.waves
    assert [c.source for c in cands[1:]].count("pick") == 0


@pytest.mark.parametrize("cap", [1, 2, 5, 12, 40])
def test_caps_are_honoured_and_keep_the_ranking(cap):
    for case in CASES:
        full = sweep.plan_case(case, 1000)
        capped = sweep.plan_case(case, cap)
        assert len(capped) == min(cap, len(full))
        assert capped == full[:cap]
        depths = [c.depth for c in capped[1:]]
        assert depths == sorted(depths)  # each tile and pair as the rules make it before their variants
    with pytest.raises(ValueError, match="at least 1"):
        sweep.plan_case(CASES[0], 0)


def test_the_alternatives_worth_timing_are_within_the_default_cap():
    """8 experts x 128 tokens: the 64-row tile the generator offers and both pairs of the pick's tile make the cut."""
    labels = [c.label for c in sweep.plan_case(next(c for c in CASES if c.key == "masked8x128"))]
    assert labels[0] == "128x128 s4"
    assert {"64x128 s6 d", "128x128 s4 pA", "128x128 s4 pB", "128x128 s4 d", "128x128 s3"} <= set(labels)


def test_unfused_configs_are_what_dgx_picks():
    for case in CASES:
        gemm, smq = sweep.unfused_configs(case)
        assert gemm == families.kind(case.kind).choose(case.m, case.n, case.k, case.groups, 132).config
        assert gemm.epilogue is None and not smq.clamp and smq.scale_mode == "fp32"


def test_kernels_to_build_cover_the_run_once():
    planned = sweep.plan(CASES[:2], 3, 132)
    names = [k.render().name for k in sweep.kernels_to_build(planned, 132)]
    want = {c.config.kernel_name for _, cands in planned for c in cands}
    want |= {k.render().name for case, _ in planned for k in sweep.unfused_configs(case)}
    assert len(names) == len(set(names)) and set(names) == want


def test_list_mode_prints_and_writes_the_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert sweep.main(["--list", "--cases", "2,masked32x16", "--max-candidates", "4", "--num-sms", "132",
                       "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "[2] masked 8e·128" in text and "[4] masked 32e·16" in text and "contiguous" not in text
    plan = json.loads(out.read_text())
    assert [p["case"]["key"] for p in plan["plan"]] == ["masked8x128", "masked32x16"]
    assert all(len(p["candidates"]) == 4 and p["candidates"][0]["source"] == "pick" for p in plan["plan"])
    assert plan["plan"][0]["unfused"]["gemm"] == "dgx_fp8_gemm_nt_masked_n4096_k7168_bm128_bn128_s5_g16_p0"


def test_skip_leaves_the_pick(capsys):
    args = sweep.parse_args(["--list", "--cases", "2", "--skip", "128x128", "--skip", " pA"])
    planned = sweep.planned_cases(args, 132)
    labels = [c.label for c in planned[0][1]]
    assert labels[0] == "128x128 s4" and not any("128x128" in x or " pA" in x for x in labels[1:])


@pytest.mark.parametrize("spec, keys", [
    ("1", ["masked8x16"]),
    ("2-3", ["masked8x128", "masked16x64"]),
    ("contiguous4x2048,1,1", ["contiguous4x2048", "masked8x16"]),
    (None, [c.key for c in CASES]),
])
def test_cases_are_picked_by_position_range_or_key(spec, keys):
    assert [c.key for c in sweep.select_cases(spec)] == keys


@pytest.mark.parametrize("spec", ["0", "11", "3-2", "masked8x129", "x"])
def test_bad_case_selections_say_what_was_expected(spec, capsys):
    with pytest.raises(SystemExit):
        sweep.parse_args(["--list", "--cases", spec])
    assert "--cases" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--max-candidates", "0"], ["--list", "--precompile"]])
def test_bad_options_are_refused(argv):
    with pytest.raises(SystemExit):
        sweep.parse_args(argv)
