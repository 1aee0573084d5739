"""dgx warmup: shapes files, presets, enumeration, parallel compiles, strict mode, portable keys (CPU only)."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from dgx import families, jit, warmup
from dgx.errors import JitStrictError
from dgx.heuristics import choose_dense
from dgx.kernels.fp8_gemm import GemmConfig
from dgx.kernels import scale_layout, ue8m0
from dgx.kinds import KIND_NAMES, GemmKind, Layout
from dgx.families.fp8_gemm import SFA_LAYOUT_HELPER, UE8M0_HELPER

ROOT = Path(__file__).resolve().parents[1]

# Two kernels (block_m 64 and 128) for M in 1..1024, each compiling in well under a second.
TINY = {"kind": "dense", "n": 256, "k": 256, "max_m": 1024}
# Every plan with a GEMM entry also holds the two shape-independent helpers (SFA layout conversion, UE8M0 unpack).
HELPERS = 2


# --- shapes files ---------------------------------------------------------------------------------

GOOD = {"kind": "dense", "n": 2112, "k": 7168}


@pytest.mark.parametrize(
    "data, where",
    [
        ({"kind": "dense"}, "top level"),
        ([], "empty list"),
        ([GOOD, 7], "entry 1"),
        ([GOOD, {"n": 8, "k": 16}], "entry 1: field 'kind'"),
        ([GOOD, {"kind": "sparse", "n": 8, "k": 16}], "entry 1: field 'kind'"),
        ([GOOD, {"kind": "dense", "k": 16}], "entry 1: field 'n'"),
        ([GOOD, GOOD, {"kind": "dense", "n": "2112", "k": 16}], "entry 2: field 'n'"),
        ([GOOD, {"kind": "dense", "n": -8, "k": 16}], "entry 1: field 'n'"),
        ([GOOD, {"kind": "dense", "n": True, "k": 16}], "entry 1: field 'n'"),
        ([GOOD, {"kind": "dense", "n": 100, "k": 16}], "entry 1: field 'n'"),
        ([GOOD, {"kind": "dense", "n": 8, "k": 20}], "entry 1: field 'k'"),
        ([GOOD, {"kind": "dense", "n": 8, "k": 16.0}], "entry 1: field 'k'"),
        ([GOOD, {"kind": "m_grouped_masked", "n": 8, "k": 16}], "entry 1: field 'groups'"),
        ([GOOD, {"kind": "dense", "n": 8, "k": 16, "groups": 4}], "entry 1: field 'groups'"),
        ([GOOD, {"kind": "dense", "n": 8, "k": 16, "max_m": 0}], "entry 1: field 'max_m'"),
        ([GOOD, {"kind": "dense", "n": 8, "k": 16, "max-m": 64}], "entry 1: field 'max-m'"),
        ([GOOD, {"kind": "dense", "n": 8, "k": 16, "note": 3}], "entry 1: field 'note'"),
    ],
)
def test_malformed_shapes_name_entry_and_field(data, where):
    with pytest.raises(warmup.ShapesFileError, match=re.escape(where)) as info:
        warmup.parse_shapes(data)
    assert "expected" in str(info.value)


def test_shapes_file_errors_name_the_file(tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text('[{"kind": "dense", "n": 2112, "k": 7168},\n {"kind": "dense", "n": 2112 "k": 1}]')
    with pytest.raises(warmup.ShapesFileError, match=r"shapes\.json.*line 2"):
        warmup.load_shapes_file(path)
    path.write_text(json.dumps([GOOD, {"kind": "dense", "n": 2112}]))
    with pytest.raises(warmup.ShapesFileError, match=r"shapes\.json: entry 1: field 'k'"):
        warmup.load_shapes_file(path)
    with pytest.raises(warmup.ShapesFileError, match="missing.json"):
        warmup.load_shapes_file(tmp_path / "missing.json")


def test_unknown_fields_reported_when_asked(tmp_path):
    """With on_unknown_field (dgx bench), an unknown field is reported, naming entry and field, and ignored."""
    data = [GOOD, {"kind": "dense", "n": 8, "k": 16, "max-m": 64, "zz": 1}]
    with pytest.raises(warmup.ShapesFileError, match=re.escape("entry 1: field 'max-m'")):
        warmup.parse_shapes(data)
    seen: list[str] = []
    specs = warmup.parse_shapes(data, on_unknown_field=seen.append)
    assert specs[1] == warmup.ShapeSpec("dense", 8, 16)
    assert len(seen) == 2 and "entry 1: field 'max-m'" in seen[0] and "entry 1: field 'zz'" in seen[1]
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps(data))
    seen.clear()
    assert warmup.load_shapes_file(path, on_unknown_field=seen.append) == specs and len(seen) == 2
    # the hook does not relax anything else
    with pytest.raises(warmup.ShapesFileError, match=re.escape("entry 1: field 'k'")):
        warmup.parse_shapes([GOOD, {"kind": "dense", "n": 8, "k": 20, "zz": 1}], on_unknown_field=seen.append)


def test_good_shapes_parse():
    specs = warmup.parse_shapes(
        [
            GOOD,
            {"kind": "m_grouped_contiguous", "n": 4096, "k": 7168, "groups": 8, "max_m": 4096, "note": "x"},
            {"kind": "wgrad", "n": 2112, "k": 4096, "m": 7168},
        ]
    )
    assert specs[0] == warmup.ShapeSpec("dense", 2112, 7168)
    assert specs[1].groups == 8 and specs[1].max_m == 4096 and specs[1].note == "x"
    assert specs[0].m_limit(8192) == 8192 and specs[1].m_limit(8192) == 4096 and specs[2].m_limit(8192) == 7168


# --- presets --------------------------------------------------------------------------------------

ANCHOR_DENSE_NK = {(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)}


def test_presets_are_valid_and_cover_every_kind():
    names = warmup.preset_names()
    assert "deepseek-v3" in names and len(names) >= 2
    for name in names:
        specs = warmup.load_preset(name)
        # Every GEMM kind; not the prefix-sum variant: the presets do not claim DeepGEMM 2.x's use_psum_layout.
        # (The einsum family's kinds are its own, listed where a model has them.)
        gemms = [s for s in specs if not isinstance(s, warmup.MqaSpec) and not s.kind.startswith("einsum_")]
        assert {s.kind for s in gemms} == set(KIND_NAMES), name
        ids = [(s.kind, s.heads, s.head_dim) if isinstance(s, warmup.MqaSpec)
               else s.label if s.kind.startswith("einsum_") else (s.kind, s.n, s.k, s.groups, s.max_m) for s in specs]
        assert len(ids) == len(set(ids)), f"{name} lists an entry twice"
        assert all(s.note for s in specs), f"{name}: every entry says where it comes from"
    dense = {(s.n, s.k) for s in warmup.load_preset("deepseek-v3") if s.kind == "dense"}
    assert ANCHOR_DENSE_NK <= dense


def test_presets_are_documented():
    readme = (ROOT / "dgx" / "presets" / "README.md").read_text()
    for name in warmup.preset_names():
        assert f"`{name}`" in readme
        for s in warmup.load_preset(name):
            if isinstance(s, warmup.MqaSpec):
                row = f"| {s.kind} | {s.heads} | {s.head_dim} |"
            elif s.kind.startswith("einsum_"):
                row = f"| {s.kind} | {s.h} | {s.d} | {s.r} | {s.max_b or ''} |"
            else:
                row = f"| {s.kind} | {s.n} | {s.k} | {s.groups if s.groups is not None else ''} |"
            assert row in readme, f"{name}: {row} is not in dgx/presets/README.md"


def test_unknown_preset():
    with pytest.raises(ValueError, match="expected one of .*deepseek-v3"):
        warmup.load_preset("gpt-5")


def test_every_package_is_shipped():
    """pyproject.toml must list every package (dgx.presets, dgx.bench, ...) and ship the preset data."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    found = {
        ".".join(("dgx",) * (top != "dgx") + p.parent.relative_to(ROOT).parts)  # the leaves install under dgx
        for top in ("dgx", "ptx", "cache", "sass_tools")
        for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found <= listed, f"not listed in pyproject.toml: {sorted(found - listed)}"
    data = project["tool"]["setuptools"].get("package-data", {})
    assert any(pattern.endswith(".json") for pattern in data.get("dgx.presets", [])), "presets' JSON not shipped"


# --- enumeration ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n, k, num_sms", [(4096, 7168, 132), (2112, 7168, 78), (576, 7168, 132)])
def test_sampled_m_finds_every_config(n, k, num_sms):
    """The M sampling must find exactly the configs that asking for every M finds."""
    max_m = 1600
    sampled = warmup.dense_configs(n, k, max_m, num_sms)
    exhaustive = warmup.dense_configs(n, k, max_m, num_sms, exhaustive=True)
    assert set(sampled) == set(exhaustive)
    assert len(sampled) == len(set(sampled))


@pytest.mark.parametrize(
    "kind, n, k, groups, max_m",
    [
        ("wgrad", 2112, 4096, None, 1600),  # M >= 256 takes the plain 128x128 tile: a threshold inside a range
        ("wgrad", 7168, 8192, None, 700),
        ("k_grouped", 4096, 4096, 4, 1600),
        ("m_grouped_masked", 4096, 7168, 4, 1100),
        ("m_grouped_masked", 7168, 2048, 256, 300),
        ("bf16_gemm", 2112, 7168, None, 700),  # the BF16 family's heuristic (split-K for small M) too
        ("bf16_gemm", 7168, 2048, None, 1100),
        ("bf16_m_grouped_masked", 4096, 7168, 4, 600),
        ("bf16_k_grouped", 4096, 4096, 4, 700),
    ],
)
def test_ranges_find_every_config_of_every_kind(kind, n, k, groups, max_m):
    """M by ranges finds exactly the configs that asking for every M finds, for the kinds whose M is any integer
    (the contiguous kind asks every M_sum anyway; the prefix-sum kind: test_psum_kind_enumerates_...)."""
    from dgx import enumeration

    sampled = families.configs_for(kind, n, k, groups, warmup.m_samples(max_m), 132)
    exhaustive = families.configs_for(kind, n, k, groups, range(1, max_m + 1), 132)
    assert set(sampled) == set(exhaustive) and len(exhaustive) >= 2


def test_m_samples():
    """M by ranges: 1, both ends of every range between consecutive multiples of a block size, and max_m."""
    ms = warmup.m_samples(2000, (64, 128, 256))
    assert ms[0] == 1 and ms[-1] == 2000
    edges = range(64, 2000, 64)
    assert ms == sorted({1, 2000, *edges, *(e + 1 for e in edges)})
    assert 63 not in ms and 600 not in ms and len(ms) == 64
    assert warmup.m_samples(1) == [1] and warmup.m_samples(64) == [1, 64] and warmup.m_samples(65) == [1, 64, 65]
    assert len(warmup.m_samples(8192)) == 256  # instead of 8192 heuristic calls per entry
    with pytest.raises(ValueError, match="max_m"):
        warmup.m_samples(0)


@pytest.mark.parametrize("max_m", [1, 64, 1000, 70_000])
def test_windows_cut_the_samples_without_losing_any(max_m, monkeypatch):
    """The enumeration asks M window by window; the windows together ask exactly m_samples, each once."""
    from dgx import enumeration

    monkeypatch.setattr(enumeration, "WINDOW", 100)
    asked = [m for lo, hi, _ in enumeration.windows(enumeration.ROWS, None, max_m)
             for m in enumeration.m_values(enumeration.ROWS, None, max_m, lo, hi)]
    assert asked == warmup.m_samples(max_m)


def test_plan_dedupes_kernels_across_entries_of_every_kind():
    one = warmup.parse_shapes([TINY])
    p1 = warmup.plan(one, arch="sm_90a")
    expected = {c for c in warmup.dense_configs(256, 256, 1024, warmup.DEFAULT_NUM_SMS)}
    gemms = [pk for pk in p1.kernels if not pk.helper]
    assert len(gemms) == len(expected) == 2 and len(p1.kernels) == 2 + HELPERS
    assert {pk.source.name for pk in gemms} == {c.kernel_name for c in expected}

    many = warmup.parse_shapes(
        [
            TINY,
            dict(TINY),  # the same kernels again
            {"kind": "dense", "n": 256, "k": 256, "max_m": 64},  # a subset of them
            {"kind": "m_grouped_masked", "n": 256, "k": 256, "groups": 2, "max_m": 256},
            {"kind": "m_grouped_masked", "n": 256, "k": 256, "groups": 2, "max_m": 128},  # a subset
            {"kind": "k_grouped", "n": 256, "k": 256, "groups": 2, "max_m": 256},
            {"kind": "wgrad", "n": 256, "k": 256, "max_m": 256},
            {"kind": "m_grouped_contiguous", "n": 256, "k": 256, "groups": 2, "max_m": 256},
        ]
    )
    p2 = warmup.plan(many, arch="sm_90a")
    grouped = [
        *warmup.grouped_configs(Layout.MASKED, 256, 256, 2, 256, warmup.DEFAULT_NUM_SMS),
        *warmup.grouped_configs(Layout.CONTIGUOUS, 256, 256, 2, 256, warmup.DEFAULT_NUM_SMS),
        *warmup.wgrad_configs(256, 256, 2, 256, warmup.DEFAULT_NUM_SMS, True),
        *warmup.wgrad_configs(256, 256, 1, 256, warmup.DEFAULT_NUM_SMS, False),
    ]
    assert {pk.source.name for pk in p2.kernels if not pk.helper} == {c.kernel_name for c in [*expected, *grouped]}
    assert sum(pk.helper for pk in p2.kernels) == HELPERS  # once, however many entries
    assert len({pk.key for pk in p2.kernels}) == len(p2.kernels)
    small = next(pk for pk in p2.kernels if "bm64" in pk.source.name and pk.source.name.startswith("dgx_fp8_gemm_nt_n"))
    assert "dense n=256 k=256 max_m=64" in small.used_by
    masked = [pk for pk in p2.kernels if "masked" in pk.source.name]
    assert masked and all(pk.used_by[0] == "m_grouped_masked n=256 k=256 groups=2 max_m=256" for pk in masked)
    # Keys depend on the arch (plan() itself takes sm_90a only: see test_plan_argument_errors).
    assert not {jit.kernel_key(pk.source, "sm_90") for pk in p1.kernels} & {pk.key for pk in p1.kernels}


def test_plan_argument_errors():
    one = warmup.parse_shapes([TINY])
    with pytest.raises(ValueError, match="max_m: expected a positive integer, got 0"):
        warmup.plan(one, max_m=0)
    with pytest.raises(ValueError, match="num_sms"):
        warmup.plan(one, num_sms=-1)
    with pytest.raises(ValueError, match="arch: expected"):
        warmup.plan(one, arch="hopper")
    with pytest.raises(ValueError, match="only sm_90a is supported"):
        warmup.plan(one, arch="sm_80")


# --- helper kernels and the prefix-sum layout ----------------------------------------------------

_SMALL = {
    "dense": {"n": 256, "k": 256, "max_m": 64},
    "wgrad": {"n": 256, "k": 256, "max_m": 64},
    "m_grouped_contiguous": {"n": 256, "k": 256, "groups": 2, "max_m": 128},
    "m_grouped_contiguous_psum": {"n": 256, "k": 256, "groups": 2, "max_m": 128},
    "m_grouped_masked": {"n": 256, "k": 256, "groups": 2, "max_m": 64},
    "k_grouped": {"n": 256, "k": 256, "groups": 2, "max_m": 64},
}


def _helper_keys(arch: str = "sm_90a") -> dict[str, str]:
    return {
        jit.kernel_key(scale_layout.CONFIG.render(), arch): SFA_LAYOUT_HELPER,
        jit.kernel_key(ue8m0.Ue8m0UnpackConfig().render(), arch): UE8M0_HELPER,
    }


@pytest.mark.parametrize("kind", warmup.KINDS)
def test_every_gemm_plan_holds_the_helper_kernels(kind):
    """The scale-layout and UE8M0 unpack kernels are shape-independent and any GEMM call can launch them: a plan
    for any GEMM entry must hold both (labelled), or a strict-mode server would fail on its first such call."""
    assert set(_SMALL) == set(warmup.KINDS)  # a new kind gets an entry here
    plan = warmup.plan(warmup.parse_shapes([{"kind": kind, **_SMALL[kind]}]))
    helpers = {pk.key: pk for pk in plan.kernels if pk.helper}
    assert set(helpers) == set(_helper_keys()), kind
    for key, why in _helper_keys().items():
        assert helpers[key].used_by == (why,)
        assert "every GEMM entry" in why
    assert plan.kernels[-HELPERS:] == list(helpers.values())  # after the entries' own kernels
    assert any(not pk.helper for pk in plan.kernels)


def test_helpers_only_with_a_gemm_entry_and_their_hint_names_the_warmup(tmp_cache, monkeypatch, fresh_jit):
    mqa_only = warmup.plan(warmup.parse_shapes([{"kind": "mqa_logits", "heads": 64, "head_dim": 128}]))
    assert mqa_only.kernels and not any(pk.helper for pk in mqa_only.kernels)
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    for src in (scale_layout.CONFIG.render(), ue8m0.Ue8m0UnpackConfig().render()):
        with pytest.raises(JitStrictError, match=re.escape("build it with: dgx warmup --preset NAME, or --shapes FILE "
                                                           "with any GEMM entry")):
            jit.get_cubin(src, "sm_90a")


def test_psum_kind_enumerates_what_grouped_psum_picks():
    """m_grouped_contiguous_psum: the configs psum_config (dgx.grouped_psum, alignment 128) picks for every heuristic
    M up to groups x max_m (each group padded to 128 rows), found by the sampled M, not the contiguous kind's."""
    from dgx import enumeration

    n, k, groups, max_m, sms = 4096, 7168, 4, 1000, 132
    top = enumeration.psum_top(groups, max_m)
    assert top == 4 * 1024 and enumeration.m_range(enumeration.PSUM, groups, max_m) == top + 1
    sampled = warmup.psum_configs(n, k, groups, max_m, sms)
    exhaustive = families.configs_for("m_grouped_contiguous_psum", n, k, groups, range(1, top + 1), sms)
    assert set(sampled) == set(exhaustive) and len(sampled) == len(set(sampled)) >= 2
    assert all(c.layout == Layout.CONTIGUOUS_PSUM and c.block_m == 128 and c.pair == 0 for c in sampled)
    entry = {"kind": "m_grouped_contiguous_psum", "n": n, "k": k, "groups": groups, "max_m": max_m}
    plan = warmup.plan(warmup.parse_shapes([entry]))
    assert {pk.source.name for pk in plan.kernels if not pk.helper} == {c.kernel_name for c in sampled}
    contiguous = warmup.plan(warmup.parse_shapes([entry | {"kind": "m_grouped_contiguous"}]))
    assert not {pk.key for pk in plan.kernels if not pk.helper} & {pk.key for pk in contiguous.kernels}
    # A strict-mode miss of such a kernel names the entry that builds it, and that entry parses.
    hint = sampled[0].render().warmup_hint
    assert hint.startswith("--shapes FILE with ") and '"kind": "m_grouped_contiguous_psum"' in hint
    assert warmup.parse_shapes([json.loads(hint.removeprefix("--shapes FILE with ")) | {"groups": groups}])
    # The same rules as the contiguous kind.
    with pytest.raises(warmup.ShapesFileError, match="entry 0: field 'groups'"):
        warmup.parse_shapes([{"kind": "m_grouped_contiguous_psum", "n": n, "k": k}])


# --- compiling, strict mode -----------------------------------------------------------------------


def test_warmup_twice_then_strict_mode(tmp_cache, monkeypatch, fresh_jit, tmp_path):
    specs = warmup.parse_shapes([TINY])
    seen = []
    first = warmup.warmup(specs, jobs=2, progress=seen.append)
    total = 2 + HELPERS
    assert first.to_json() | {"seconds": 0} == {"kernels": total, "compiled": total, "cached": 0, "failed": 0, "seconds": 0}
    assert [p.done for p in seen] == list(range(1, total + 1)) and all(p.total == total for p in seen)
    assert len(jit.kernel_cache().entries()) == total

    second = warmup.warmup(specs, jobs=2)
    assert (second.kernels, second.compiled, second.cached, second.failed) == (total, 0, total, 0)

    # Strict mode on the warmed cache: every M of the entry loads, and the helpers, nothing compiles.
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    for m in (1, 64, 65, 1000, 1024):
        assert jit.get_cubin(choose_dense(m, 256, 256, warmup.DEFAULT_NUM_SMS).config.render(), "sm_90a")
    assert jit.get_cubin(scale_layout.CONFIG.render(), "sm_90a")
    assert jit.get_cubin(ue8m0.Ue8m0UnpackConfig().render(), "sm_90a")
    assert jit.jit_stats()["compiles"] == 0

    # The cache copied elsewhere still hits (keys hold no paths).
    moved = tmp_path / "moved-cache"
    shutil.copytree(tmp_cache, moved, ignore=shutil.ignore_patterns("locks", "tmp"))
    monkeypatch.setenv("DGX_CACHE_DIR", str(moved))
    assert jit.get_cubin(choose_dense(1000, 256, 256, warmup.DEFAULT_NUM_SMS).config.render(), "sm_90a")
    assert jit.jit_stats()["compiles"] == 0


def test_strict_mode_finds_the_scale_layout_kernel_after_warmup(tmp_cache, monkeypatch, fresh_jit):
    """A GEMM warmup into a fresh cache builds the scale-layout kernel (an SFA in another layout) and the UE8M0
    unpack kernel: a DGX_JIT_STRICT=1 process then finds them in the cache and compiles nothing."""
    src = scale_layout.CONFIG.render()
    key = jit.kernel_key(src, "sm_90a")
    assert not jit.kernel_cache().contains(key)
    result = warmup.warmup(warmup.parse_shapes([{"kind": "dense", "n": 256, "k": 256, "max_m": 64}]), jobs=1)
    assert (result.kernels, result.failed) == (1 + HELPERS, 0)
    monkeypatch.setattr(jit, "_caches", {})  # a new process: nothing in memory
    jit.reset_jit_stats()
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    kc = jit.kernel_cache()
    assert kc.contains(key) and kc.contains(jit.kernel_key(ue8m0.Ue8m0UnpackConfig().render(), "sm_90a"))
    assert jit.get_cubin(src, "sm_90a") == kc.load(key)
    assert jit.jit_stats()["compiles"] == 0


def test_strict_mode_miss_names_kernel_and_warmup(tmp_cache, monkeypatch, fresh_jit):
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    config = GemmConfig(n=384, k=512, block_m=64, block_n=48, stages=4)
    with pytest.raises(JitStrictError) as info:
        jit.get_cubin(config.render(), "sm_90a")
    message = str(info.value)
    assert config.kernel_name in message
    assert "dgx warmup" in message and '"n": 384' in message and '"k": 512' in message
    assert jit.jit_stats()["compiles"] == 0
    assert jit.kernel_cache().entries() == []


def test_failing_kernel_does_not_stop_the_others(tmp_cache, monkeypatch, fresh_jit, tmp_path):
    monkeypatch.setenv("DGX_JIT_DUMP_DIR", str(tmp_path / "dump"))
    good = GemmConfig(n=256, k=256, block_m=64, block_n=16, stages=4).render()
    bad = jit.KernelSource(name="dgx_broken_kernel", source='extern "C" __global__ void dgx_broken_kernel() { nope; }')
    the_plan = warmup.Plan(
        "sm_90a",
        132,
        [warmup.PlannedKernel(jit.kernel_key(s, "sm_90a"), s, ("test",)) for s in (bad, good)],
    )
    result = warmup.run(the_plan, jobs=2)
    assert (result.kernels, result.compiled, result.cached, result.failed) == (2, 1, 0, 1)
    (name, error), = result.failures
    assert name == "dgx_broken_kernel" and "CompileError" in error and "nope" in error
    assert jit.kernel_cache().contains(jit.kernel_key(good, "sm_90a"))


def test_warmup_compiles_under_strict_mode(tmp_cache, monkeypatch, fresh_jit):
    """Warmup is how a strict server's cache gets built: DGX_JIT_STRICT=1 in its environment is no obstacle."""
    monkeypatch.setenv("DGX_JIT_STRICT", "1")
    result = warmup.warmup(warmup.parse_shapes([{"kind": "dense", "n": 256, "k": 256, "max_m": 64}]), jobs=1)
    assert (result.compiled, result.failed) == (1 + HELPERS, 0)


def _concurrent_worker(root, shapes, barrier, results):
    try:
        os.environ["DGX_CACHE_DIR"] = root
        from dgx import warmup as w

        specs = w.parse_shapes(shapes)
        barrier.wait()
        r = w.warmup(specs, jobs=1)
        results.put(("ok", r.to_json(), r.failures))
    except BaseException:
        results.put(("error", traceback.format_exc(), None))


def test_concurrent_warmups_compile_each_kernel_once(tmp_path):
    root = str(tmp_path / "shared-cache")
    shapes = [TINY]
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [ctx.Process(target=_concurrent_worker, args=(root, shapes, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        out = [results.get(timeout=240) for _ in procs]
    except queue.Empty:
        pytest.fail(f"warmup processes did not finish: exit codes {[p.exitcode for p in procs]}")
    finally:
        for p in procs:
            p.join(timeout=60)
    errors = [o[1] for o in out if o[0] == "error"]
    assert not errors, errors[0]
    summaries = [o[1] for o in out]
    total = 2 + HELPERS
    assert all(s["kernels"] == total and s["failed"] == 0 for s in summaries), summaries
    assert sum(s["compiled"] for s in summaries) == total, summaries  # each kernel compiled by exactly one
    assert all(s["compiled"] + s["cached"] == total for s in summaries), summaries
    from dgx.cache import KernelCache

    entries = KernelCache(root).entries()
    assert len(entries) == total


# --- portability ----------------------------------------------------------------------------------

_KEYS_SCRIPT = """
import json, dgx
from dgx import families, jit, warmup
specs = warmup.parse_shapes([{"kind": "dense", "n": 2112, "k": 7168, "max_m": 300}])
plan = warmup.plan(specs, arch="sm_90a")
print(json.dumps({"file": dgx.__file__, "keys": sorted(pk.key for pk in plan.kernels),
                  "record": warmup.plan_record_key(specs, arch="sm_90a")}))
"""


def test_package_copied_elsewhere_gives_the_same_keys(tmp_path):
    elsewhere = tmp_path / "another" / "install"
    for pkg in ("dgx", "ptx", "cache", "sass_tools"):
        shutil.copytree(ROOT / pkg, elsewhere / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DGX_")}
    environ["PYTHONPATH"] = str(elsewhere)
    environ["DGX_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", _KEYS_SCRIPT], cwd=elsewhere, env=environ, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(there["file"]).resolve().is_relative_to(elsewhere.resolve())
    specs = warmup.parse_shapes([{"kind": "dense", "n": 2112, "k": 7168, "max_m": 300}])
    here = sorted(pk.key for pk in warmup.plan(specs, arch="sm_90a").kernels)
    assert here and there["keys"] == here
    assert there["record"] == warmup.plan_record_key(specs, arch="sm_90a")  # the plan record too: no path in it
