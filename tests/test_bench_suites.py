"""dgx bench: suites, anchors and shapes-file validation (pure Python, no GPU)."""

import json

import pytest

from dgx.bench import suites as S


def test_dense_suite_is_the_18_anchor_shapes():
    shapes = S.builtin_suite("dense")
    assert len(shapes) == 18
    assert [(s.m, s.n, s.k) for s in shapes] == list(S.DENSE_ANCHORS)
    assert all(S.anchor_for(s) is not None for s in shapes)
    assert shapes[15].label == "4096×7168×16384"


def test_dense_bytes_formula_matches_anchor_gbps():
    # docs/PEERS.md's GB/s column is (M·K + K·N + 2·M·N) / t: the same formula must give the same figure
    for s in S.builtin_suite("dense"):
        a = S.DENSE_ANCHORS[(s.m, s.n, s.k)]
        assert s.bytes_moved == s.m * s.k + s.k * s.n + 2 * s.m * s.n
        gbps = s.bytes_moved / (a["us"] * 1e-6) / 1e9
        assert gbps == pytest.approx(a["gbps"], rel=0.01)
        tflops = s.flops / (a["us"] * 1e-6) / 1e12
        assert tflops == pytest.approx(a["tflops"], rel=0.01)


def test_contiguous_groups_random_aligned_and_seeded():
    shapes = S.builtin_suite("contiguous")
    assert [(s.groups, s.m, s.n, s.k) for s in shapes] == list(S.CONTIGUOUS_GMNK)
    for s in shapes:
        assert len(s.group_ms) == s.groups
        assert all(0.7 * s.m <= g <= 1.3 * s.m for g in s.group_ms)
        assert s.valid_m == sum(s.group_ms)
        assert s.padded_m == sum(S.align(g, 128) for g in s.group_ms)
        assert s.padded_m % 128 == 0
        # B counted once per group, valid rows only
        assert s.bytes_moved == s.valid_m * s.k + s.groups * s.n * s.k + 2 * s.valid_m * s.n
        assert s.flops == 2 * s.valid_m * s.n * s.k
        assert S.anchor_for(s) is not None
    # same seed: same sizes; other seed: other sizes
    assert S.builtin_suite("contiguous") == shapes
    assert S.builtin_suite("contiguous", seed=1) != shapes


def test_masked_counts_within_max_m():
    shapes = S.builtin_suite("masked")
    assert len(shapes) == 6
    for s in shapes:
        assert s.max_m == 4096
        assert all(0 < g <= s.max_m for g in s.group_ms)
        assert all(0.7 * s.m <= g <= 1.3 * s.m for g in s.group_ms)
        assert s.padded_m == s.groups * 4096
        assert S.anchor_for(s) is not None


def test_wgrad_and_k_grouped_suites():
    w = S.builtin_suite("wgrad")
    assert len(w) == 12
    assert {(s.m, s.n) for s in w} == set(S.WGRAD_MN)
    assert {s.k for s in w} == {4096, 8192}
    s = w[0]
    # FP32 d: c read + d written, 4 bytes each
    assert s.bytes_moved == s.m * s.k + s.k * s.n + 8 * s.m * s.n
    kg = S.builtin_suite("k_grouped")
    assert len(kg) == 6
    for s in kg:
        assert s.group_ks == (s.k,) * s.groups
        assert s.flops == 2 * s.m * s.n * s.k * s.groups


def test_weight_gradient_anchors_cover_their_suites():
    """docs/PEERS.md's weight-gradient tables: one row per built-in shape, keyed the way the suites define M, N, K."""
    wgrad = S.builtin_suite("wgrad")
    assert {(s.m, s.n, s.k) for s in wgrad} == set(S.WGRAD_ANCHORS)
    kg = S.builtin_suite("k_grouped")
    assert {(s.groups, s.m, s.n, s.k) for s in kg} == set(S.K_GROUPED_ANCHORS)
    for s in wgrad + kg:
        a = S.anchor_for(s)
        assert a is not None, s.label
        # docs/PEERS.md's µs and TFLOPS agree through the suite's own FLOP count (k_grouped: the base k per group)
        assert s.flops / (a["us"] * 1e-6) / 1e12 == pytest.approx(a["tflops"], rel=0.01), s.label
        assert S.anchor_for(s, "kernel") is None  # measured with CUDA events: no kernel-only figure


@pytest.mark.parametrize(
    "shape, tflops, us",
    [
        (S.make_shape("wgrad", 7168, 2112, 4096), 831.0, 149.0),
        (S.make_shape("wgrad", 512, 32768, 8192), 885.0, 311.0),
        (S.make_shape("wgrad", 16384, 7168, 8192), 921.0, 2089.0),
        (S.make_shape("k_grouped", 7168, 4096, 4096, groups=4), 856.0, 1123.0),
        (S.make_shape("k_grouped", 2048, 7168, 8192, groups=4), 868.0, 1109.0),
        (S.make_shape("k_grouped", 2048, 7168, 4096, groups=8), 751.0, 1281.0),
    ],
)
def test_weight_gradient_anchor_values(shape, tflops, us):
    assert S.anchor_for(shape) == {"tflops": tflops, "us": us}


def test_weight_gradient_shapes_without_an_anchor():
    assert S.anchor_for(S.make_shape("wgrad", 7168, 2112, 2048)) is None  # K not in docs/PEERS.md
    assert S.anchor_for(S.make_shape("wgrad", 2112, 7168, 4096)) is None  # M and N swapped: another output
    assert S.anchor_for(S.make_shape("k_grouped", 4096, 7168, 4096, groups=4)) is None  # M and N swapped
    assert S.anchor_for(S.make_shape("k_grouped", 7168, 4096, 4096, groups=2)) is None  # other group count
    # groups whose K vary around the base still match it; groups averaging another K do not
    base = S.make_shape("k_grouped", 7168, 4096, 4096, groups=4)
    around = S.Shape("k_grouped", 7168, 4096, 4096, 4, None, (), (3968, 4224, 4096, 4096))
    assert S.anchor_for(around) == S.anchor_for(base) == {"tflops": 856.0, "us": 1123.0}
    above = S.Shape("k_grouped", 7168, 4096, 4096, 4, None, (), (4224, 4224, 4224, 4224))
    assert S.anchor_for(above) is None


def test_suite_names():
    assert S.suite_names("all") == list(S.SUITES)
    assert S.suite_names("masked") == ["masked"]
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        S.suite_names("nope")


# ---- shapes file -------------------------------------------------------------------------------


def _write(tmp_path, data) -> str:
    p = tmp_path / "shapes.json"
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(p)


def test_shapes_file_valid(tmp_path):
    data = [
        {"kind": "dense", "m": 64, "n": 2112, "k": 7168},
        {"kind": "dense", "max_m": 128, "n": 4096, "k": 7168},
        {"kind": "m_grouped_contiguous", "groups": 4, "m": 8192, "n": 4096, "k": 7168},
        {"kind": "m_grouped_masked", "groups": 2, "m": 512, "max_m": 4096, "n": 7168, "k": 2048},
        {"kind": "wgrad", "m": 7168, "n": 2112, "k": 4096},
        {"kind": "k_grouped", "groups": 4, "m": 7168, "n": 4096, "k": 4096, "extra": 1, "note": "MoE"},
    ]
    shapes, warnings = S.load_shapes_file(_write(tmp_path, data))
    assert [s.suite for s in shapes] == ["dense", "dense", "contiguous", "masked", "wgrad", "k_grouped"]
    assert shapes[1].m == 128  # max_m stands in for m
    assert shapes[2] == S.builtin_suite("contiguous")[0]  # same seeded group sizes
    assert shapes[3].max_m == 4096 and S.anchor_for(shapes[3]) is not None
    assert S.anchor_for(shapes[4]) == {"tflops": 831.0, "us": 149.0}  # wgrad 7168×2112×4096
    assert S.anchor_for(shapes[5]) == {"tflops": 856.0, "us": 1123.0}  # k_grouped 4 × 7168×4096, k 4096
    # an unknown field is warned about (naming the entry and the field) and ignored, not refused
    assert len(warnings) == 1 and "entry 5: field 'extra'" in warnings[0] and "ignored" in warnings[0]
    # --suite filters a shapes file
    assert [s.suite for s in S.select_shapes("wgrad", shapes)] == ["wgrad"]


# The warmup format's own checks (top level, kinds, integers, alignment, groups, ...) are dgx.warmup's
# parse_shapes, tested in tests/test_warmup.py; here: that the bench goes through them, and its own checks.


@pytest.mark.parametrize(
    "data, message",
    [
        # the warmup parser's errors, through the bench's loader
        ([{"kind": "dense", "m": 64, "n": 64, "k": 128}, {"kind": "wgrad", "m": 64, "k": 128}], "entry 1: field 'n'"),
        ([{"kind": "dense", "m": 64, "n": 100, "k": 128}], "entry 0: field 'n': expected a multiple of 8"),
        ([{"kind": "dense", "m": 64, "n": 64, "k": 128, "groups": 1}], "entry 0: field 'groups': expected no groups"),
        ([{"kind": "m_grouped_masked", "m": 64, "n": 64, "k": 128}], "entry 0: field 'groups'"),
        # the bench's own checks
        (
            [{"kind": "dense", "m": 64, "n": 64, "k": 128}, {"kind": "dense", "n": 64, "k": 128}],
            "entry 1: field 'm': expected a positive integer, the M to benchmark",
        ),
        ([{"kind": "dense", "m": 256, "max_m": 128, "n": 64, "k": 128}], "entry 0: field 'm': expected at most max_m (128)"),
        ([{"kind": "wgrad", "m": 256, "max_m": 128, "n": 64, "k": 128}], "entry 0: field 'm': expected at most max_m (128)"),
        (
            [{"kind": "k_grouped", "groups": 2, "m": 64, "n": 64, "k": 112}],
            "entry 0: field 'k': expected a multiple of 128 for k_grouped (K per group), got 112",
        ),
    ],
)
def test_shapes_file_errors_name_entry_and_field(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(S.ShapesFileError) as e:
        S.load_shapes_file(path)
    assert f"shapes file {path}: {message}" in str(e.value)
    with pytest.raises(S.ShapesFileError) as e:  # the decoded JSON, without a file
        S.parse_shapes(data)
    assert str(e.value).startswith(message)


def test_shapes_file_is_the_warmup_format():
    """One parser: the bench's errors are dgx.warmup's, and its cases come from warmup's entries."""
    from dgx import warmup

    assert S.ShapesFileError is warmup.ShapesFileError
    assert S.KINDS == tuple(k for k in warmup.KINDS if k != "m_grouped_contiguous_psum")  # a warmup-only variant
    data = [{"kind": "m_grouped_contiguous", "groups": 4, "m": 8192, "n": 4096, "k": 7168, "note": "x"}]
    shapes, warnings = S.parse_shapes(data)
    assert shapes == [S.builtin_suite("contiguous")[0]] and warnings == []  # 'note' is a format field
    bad = [{"kind": "dense", "m": 64, "n": 64, "k": 20}]
    with pytest.raises(warmup.ShapesFileError) as ours:
        S.parse_shapes(bad)
    with pytest.raises(warmup.ShapesFileError) as theirs:
        warmup.parse_shapes(bad)
    assert "entry 0: field 'k'" in str(ours.value) and str(ours.value) == str(theirs.value)
    psum = [{"kind": "m_grouped_contiguous_psum", "groups": 4, "m": 8192, "n": 4096, "k": 7168}]
    with pytest.raises(warmup.ShapesFileError, match="entry 0: field 'kind': 'm_grouped_contiguous_psum' cannot be "
                       "benchmarked.*contiguous suite"):
        S.parse_shapes(psum)


def test_masked_m_far_above_max_m_is_a_warning():
    data = [
        {"kind": "m_grouped_masked", "groups": 2, "m": 512, "max_m": 512, "n": 64, "k": 128},
        {"kind": "m_grouped_masked", "groups": 2, "m": 700, "max_m": 512, "n": 64, "k": 128},
    ]
    shapes, warnings = S.parse_shapes(data)
    assert warnings == ["entry 1: m=700 is well above max_m=512; masked counts are clamped to max_m"]
    assert all(g <= 512 for g in shapes[1].group_ms)


def test_shapes_file_not_json_or_missing(tmp_path):
    with pytest.raises(S.ShapesFileError, match=r"shapes\.json: expected JSON"):
        S.load_shapes_file(_write(tmp_path, "[{"))
    with pytest.raises(S.ShapesFileError, match=r"absent\.json: expected a readable file"):
        S.load_shapes_file(str(tmp_path / "absent.json"))


def test_shape_dict_round_trip():
    for suite in S.SUITES:
        for s in S.builtin_suite(suite):
            assert S.Shape.from_dict(json.loads(json.dumps(s.to_dict()))) == s
