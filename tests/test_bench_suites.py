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
    # ANCHORS.md's GB/s column is (M·K + K·N + 2·M·N) / t: the same formula must give the same figure
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
        assert S.anchor_for(s) is None


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
        {"kind": "k_grouped", "groups": 4, "m": 7168, "n": 4096, "k": 4096, "extra": 1},
    ]
    shapes, warnings = S.load_shapes_file(_write(tmp_path, data))
    assert [s.suite for s in shapes] == ["dense", "dense", "contiguous", "masked", "wgrad", "k_grouped"]
    assert shapes[1].m == 128  # max_m stands in for m
    assert shapes[2] == S.builtin_suite("contiguous")[0]  # same seeded group sizes
    assert shapes[3].max_m == 4096 and S.anchor_for(shapes[3]) is not None
    assert any("entry 5" in w and "'extra'" in w for w in warnings)
    # --suite filters a shapes file
    assert [s.suite for s in S.select_shapes("wgrad", shapes)] == ["wgrad"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"kind": "dense"}, "top level must be a JSON list"),
        ([], "empty"),
        ([{"kind": "dense", "m": 64, "n": 1, "k": 128}, 3], "entry 1: must be an object"),
        ([{"n": 1, "k": 128, "m": 1}], "entry 0: missing field 'kind'"),
        ([{"kind": "sparse", "n": 1, "k": 128, "m": 1}], "entry 0: field 'kind' must be one of"),
        ([{"kind": "dense", "m": 64, "k": 128}], "entry 0: missing field 'n'"),
        ([{"kind": "dense", "m": 64, "n": "4096", "k": 128}], "entry 0: field 'n' must be an integer"),
        ([{"kind": "dense", "m": 64, "n": True, "k": 128}], "entry 0: field 'n' must be an integer"),
        ([{"kind": "dense", "m": 64, "n": 0, "k": 128}], "entry 0: field 'n' must be >= 1"),
        ([{"kind": "dense", "n": 64, "k": 128}], "entry 0: needs field 'm'"),
        ([{"kind": "dense", "m": 256, "max_m": 128, "n": 64, "k": 128}], "entry 0: field 'm' (256) exceeds 'max_m'"),
        ([{"kind": "dense", "m": 64, "n": 64, "k": 128, "groups": 4}], "entry 0: field 'groups' is only for grouped"),
        (
            [{"kind": "dense", "m": 64, "n": 64, "k": 128}, {"kind": "m_grouped_masked", "m": 64, "n": 64, "k": 128}],
            "entry 1: missing field 'groups'",
        ),
        ([{"kind": "k_grouped", "groups": 2, "m": 64, "n": 64, "k": 100}], "entry 0: field 'k' (100) must be a multiple of 128"),
    ],
)
def test_shapes_file_errors_name_entry_and_field(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(S.ShapesFileError) as e:
        S.load_shapes_file(path)
    assert message in str(e.value)
    assert path in str(e.value)


def test_shapes_file_not_json_or_missing(tmp_path):
    with pytest.raises(S.ShapesFileError, match="not valid JSON"):
        S.load_shapes_file(_write(tmp_path, "[{"))
    with pytest.raises(S.ShapesFileError, match="cannot read it"):
        S.load_shapes_file(str(tmp_path / "absent.json"))


def test_shape_dict_round_trip():
    for suite in S.SUITES:
        for s in S.builtin_suite(suite):
            assert S.Shape.from_dict(json.loads(json.dumps(s.to_dict()))) == s
