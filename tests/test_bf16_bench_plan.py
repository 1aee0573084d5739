"""What tests/device/bf16_bench.py runs, decided on the CPU: the problems and their configs, the prior heuristic's
choices for --baseline, the sweep's distinct kinds of tile, --shapes (no GPU, no torch)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

DEVICE = Path(__file__).resolve().parent / "device"
_spec = importlib.util.spec_from_file_location("bf16_bench", DEVICE / "bf16_bench.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bf16_bench"] = bench  # (its dataclasses look their module up)
_spec.loader.exec_module(bench)


def _args(**over):
    args = dict(suites=list(bench.SUITES), forms=["nt", "nn", "tn", "tt"], shapes=None, sweep=0, sweep_max_m=0,
                baseline=False, num_sms=132)
    args.update(over)
    return argparse.Namespace(**args)


def test_every_problem_has_its_prior_choice():
    problems = bench.problem_configs(_args())
    assert len(problems) == 4 * 18 + 6 + 4 + 4
    assert all(prior is not None for _, _, _, prior in problems)
    # The prior configs are the kernels the H200 decode sweep timed as the heuristic's, split-K ones too.
    found = {(suite, key): prior for suite, key, _, prior in problems}
    assert found["dense", ("nt", 128, 2112, 7168)].kernel_name == \
        "dgx_bf16_gemm_nt_bf16_n2112_k7168_bm64_bn144_s6_g16_p0_sk4"
    assert found["dense", ("nt", 64, 2112, 7168)].kernel_name == \
        "dgx_bf16_gemm_nt_bf16_n2112_k7168_bm64_bn48_s12_g16_p0_sk2"
    assert found["k_grouped", (4, 7168, 4096, 4096)].kernel_name == \
        "dgx_bf16_gemm_tn_k_grouped_f32_c_n4096_k0_bm128_bn192_s3_g16_p0"
    # The decode recalibration moved only decode rows: these are what --baseline times.
    changed = sorted(key for suite, key, config, prior in problems if prior != config)
    assert all(suite == "dense" for suite, key, config, prior in problems if prior != config)
    assert changed == sorted([("nt", 64, 4096, 7168), ("nt", 128, 2112, 7168), ("nt", 128, 4096, 7168),
                              ("nt", 128, 7168, 2048), ("nn", 128, 2112, 7168), ("nn", 128, 4096, 7168),
                              ("nn", 128, 7168, 16384), ("nn", 128, 7168, 2048), ("tn", 128, 2112, 7168),
                              ("tn", 128, 4096, 7168), ("tn", 128, 7168, 2048), ("tt", 128, 2112, 7168),
                              ("tt", 128, 4096, 7168), ("tt", 128, 7168, 2048)])


def test_baseline_adds_the_prior_kernels_that_differ():
    plain = set(bench.configs_for_run(_args(suites=["dense"], forms=["nt"])))
    with_old = set(bench.configs_for_run(_args(suites=["dense"], forms=["nt"], baseline=True)))
    changed = {prior for suite, _, config, prior in bench.problem_configs(_args(suites=["dense"], forms=["nt"]))
               if prior != config}
    assert changed and with_old == plain | changed


def test_sweep_spans_distinct_kinds_with_the_choice_first():
    from dgx.kernels.bf16_gemm import choose

    configs = bench.sweep_configs(128, 2112, 7168, "k", "k", 6, 132)
    assert configs[0] == choose("dense", 128, 2112, 7168)
    kinds = [(c.block_m, c.pair, c.split_k) for c in configs]
    assert len(configs) == 6 and len(set(kinds)) == 6
    assert bench.sweep_configs(128, 2112, 7168, "k", "k", 0, 132) == []
    sweeps = bench.configs_for_run(_args(suites=["dense"], forms=["nt"], sweep=3, sweep_max_m=128))
    assert len(sweeps) > len(bench.configs_for_run(_args(suites=["dense"], forms=["nt"])))
    assert bench.wants_sweep(_args(sweep=3, sweep_max_m=128), 128) and not bench.wants_sweep(
        _args(sweep=3, sweep_max_m=128), 4096)


def test_shapes_select_dense_problems():
    assert bench.parse_shapes("") is None and bench.parse_shapes("decode") == "decode"
    assert bench.parse_shapes("128x2112x7168,4096X4096x7168") == {(128, 2112, 7168), (4096, 4096, 7168)}
    with pytest.raises(ValueError, match="is not one of the dense shapes"):
        bench.parse_shapes("1x2x3")
    with pytest.raises(ValueError, match="expected MxNxK items"):
        bench.parse_shapes("big")
    decode = list(bench.dense_problems(["nt"], "decode"))
    assert len(decode) == 12 and all(m <= 128 for _, _, m, _, _ in decode)


def _pp_ab():
    if "bf16_pp_ab" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bf16_pp_ab", DEVICE / "bf16_pp_ab.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bf16_pp_ab"] = module
        spec.loader.exec_module(module)
    return sys.modules["bf16_pp_ab"]


def test_pingpong_ab_plan():
    """tests/device/bf16_pp_ab.py: the 18 anchors in nt and the six large ones in nn and tn; per problem today's
    choice first, the flag's where it differs, ping-pong tiles forced (the model's best, and on the large rows the
    fixed alternatives valid for the form), every one a distinct valid kernel."""
    from dgx.kernels.bf16_gemm import choose

    ab = _pp_ab()
    problems = ab.problems(["nn", "tn"])
    assert len(problems) == 18 + 12 and problems[0] == ("nt", 64, 2112, 7168)
    for form, m, n, k in problems:
        ma, mb = bench.FORM_MAJORS[form]
        configs = ab.plan(form, m, n, k, 132)
        names = list(configs)
        assert names[0] == "today" and configs["today"] == choose("dense", m, n, k, major_a=ma, major_b=mb,
                                                                   pingpong=False)
        assert configs["today"].schedule == "cooperative"
        assert len(set(configs.values())) == len(configs)
        assert all(c.schedule == "pingpong" for name, c in configs.items() if name.startswith("pp "))
        assert all((c.major_a, c.major_b) == (ma, mb) for c in configs.values())
        if m >= 4096:
            assert sum(name.startswith("pp ") for name in names) >= 3, (form, m, n, k, names)
    assert ab.plan("nt", 4096, 32768, 512, 132)["flag"].schedule == "pingpong"
    assert 60 < len(ab.all_configs(argparse.Namespace(forms_large=["nn", "tn"], num_sms=132))) < 160


def test_pingpong_ab_summary_from_timed_rows():
    ab = _pp_ab()
    rows = []
    for label, us in (("nt 64x2112x7168", {"today": 10.0, "cublas": 11.0}),
                      ("nt 4096x32768x512", {"today": 200.0, "flag": 180.0, "pp 128x160s4p2": 180.0,
                                             "pp 64x256s4p0": 190.0, "cublas": 190.0}),
                      ("nn 4096x4096x7168", {"today": 300.0, "pp 64x256s4p0": 299.0, "cublas": 290.0})):
        row = bench.Row("dense", label, 2.0 * 4096 * 4096 * 7168, 1.0, "cfg")
        row.us = us
        rows.append(row)
        assert "today" in ab.fmt(row)
    s = ab.summary(rows, "NVIDIA H200")
    assert s["decode_today_x_cublas"] == pytest.approx(1.1)
    assert s["flag_changed_rows"] == 1 and s["flag_x_today_changed_rows"] == pytest.approx(200 / 180)
    assert list(s["pp_wins"]) == ["nt 4096x32768x512"]
    assert s["best_pp_x_today"] == pytest.approx(((200 / 180) * (300 / 299)) ** 0.5)
    assert "large_nt_today_share_of_peak" in s and s["large_nt_best_share_of_peak"] > s["large_nt_today_share_of_peak"]


def _choice_diff():
    if "bf16_choice_diff" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bf16_choice_diff", DEVICE / "bf16_choice_diff.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bf16_choice_diff"] = module
        spec.loader.exec_module(module)
    return sys.modules["bf16_choice_diff"]


def test_choice_diff_lists_what_the_decode_terms_move():
    """tests/device/bf16_choice_diff.py: the choices with and without the decode terms, changes as runs of M; the
    model is left as it was."""
    from dgx.kernels import bf16_gemm_heuristics as model

    diff = _choice_diff()
    assert diff.parse_ms("1-3,8,2") == [1, 2, 3, 8]
    for bad in ("", "0", "5-2", "x"):
        with pytest.raises(ValueError, match="--ms"):
            diff.parse_ms(bad)
    probs = [p for p in diff.problems(["nt"], ["dense"]) if p[3:] in ((4096, 7168), (7168, 16384))]
    ms = [63, 64, 65, 128, 129]
    with diff.decode_terms_off():
        assert model.RESTREAMED_B_HBM_SHARE == 0 and model.PAIR_FIXED_CLK == 0
        before = diff.choices(probs, ms, 132)
    assert model.RESTREAMED_B_HBM_SHARE > 0 and model.PAIR_FIXED_CLK > 0
    runs = diff.diff(before, diff.choices(probs, ms, 132))
    assert [(r["problem"][3:], r["m_first"], r["m_last"], r["old"], r["new"]) for r in runs] == [
        ((4096, 7168), 63, 64, "64x32 s14 p1", "64x48 s12 p0"),
        ((4096, 7168), 65, 128, "64x160 s6 p0 sk2", "128x80 s7 p0 sk2"),
    ]
