"""dgx.kinds: one vocabulary of GEMM kinds for the API, warmup, inspect and bench, and the names users
already write (shapes-file kinds, `--kind` and suite names) mapping onto it."""

from __future__ import annotations

import json

import pytest

from dgx import warmup
from dgx.bench import suites
from dgx.kernels.fp8_gemm import (
    LAYOUT_BATCHED,
    LAYOUT_CONTIGUOUS,
    LAYOUT_CONTIGUOUS_PSUM,
    LAYOUT_DENSE,
    LAYOUT_K_GROUPED,
    LAYOUT_MASKED,
    GemmConfig,
)
from dgx.kinds import KIND_NAMES, LAYOUT_VARIANTS, SHORT_NAMES, VARIANT_KIND_NAMES, GemmKind, Layout, base_kind

SHAPES_FILE_KINDS = ("dense", "m_grouped_contiguous", "m_grouped_masked", "wgrad", "k_grouped")
SHORT = ("dense", "contiguous", "masked", "wgrad", "k_grouped")


def test_the_names_users_write_are_the_kinds():
    assert KIND_NAMES == SHAPES_FILE_KINDS == suites.KINDS
    # warmup (and inspect) also take the prefix-sum layout, a variant of the contiguous kind with kernels of its own
    assert warmup.KINDS == SHAPES_FILE_KINDS + ("m_grouped_contiguous_psum",) == KIND_NAMES + VARIANT_KIND_NAMES
    assert LAYOUT_VARIANTS == {"m_grouped_contiguous_psum": (GemmKind.M_GROUPED_CONTIGUOUS, Layout.CONTIGUOUS_PSUM)}
    assert base_kind("m_grouped_contiguous_psum") == "m_grouped_contiguous" and base_kind("dense") == "dense"
    assert SHORT_NAMES == SHORT == suites.GEMM_SUITES
    # the FP8 GEMM suites, the MQA-logits suites, the MoE block, then the single-operation suites of the other families
    assert suites.SUITES == SHORT + ("mqa", "paged_mqa", "moe") + suites.OP_SUITES
    assert suites.OP_SUITES == ("bf16", "bf16_masked", "bf16_contiguous", "bf16_k_grouped", "einsum", "fp8_einsum",
                                "hc_prenorm", "skip_head_mid")
    for value, short in zip(SHAPES_FILE_KINDS, SHORT):
        kind = GemmKind(value)
        assert GemmKind.parse(value) is GemmKind.parse(short) is kind
        assert kind.value == str(kind) == f"{kind}" == value and kind.short_name == short
        assert kind == value and hash(kind) == hash(value) and {value: 1}[kind] == 1  # a str where one was
        assert json.loads(json.dumps({"kind": kind})) == {"kind": value}
        assert suites.KIND_TO_SUITE[value] == short and suites.SUITE_TO_KIND[short] == value


def test_parse_refuses_other_names():
    with pytest.raises(ValueError, match="GEMM kind: expected one of dense, m_grouped_contiguous.*got 'sparse'"):
        GemmKind.parse("sparse")
    with pytest.raises(ValueError, match="got 3"):
        GemmKind.parse(3)


def test_layouts_and_the_kernel_side():
    assert [int(v) for v in Layout][:5] == [LAYOUT_DENSE, LAYOUT_CONTIGUOUS, LAYOUT_MASKED, LAYOUT_K_GROUPED,
                                            LAYOUT_CONTIGUOUS_PSUM] == [0, 1, 2, 3, 4]
    # The batched layout runs on both kernels (dgx.einsum's per-head forms, dgx.fp8_einsum), batch-sum on BF16 only
    assert [int(Layout.BATCHED), int(Layout.BATCH_SUM)] == [LAYOUT_BATCHED, 6] == [5, 6]
    # The batched layout (dgx.fp8_einsum) computes masked groups with every row valid
    assert GemmKind.of(Layout.BATCHED, False) is GemmKind.M_GROUPED_MASKED
    # The prefix-sum layout computes the contiguous kind (DeepGEMM's use_psum_layout=True)
    assert GemmKind.of(Layout.CONTIGUOUS_PSUM, False) is GemmKind.M_GROUPED_CONTIGUOUS
    expect = {
        GemmKind.DENSE: (Layout.DENSE, False, False),
        GemmKind.M_GROUPED_CONTIGUOUS: (Layout.CONTIGUOUS, False, True),
        GemmKind.M_GROUPED_MASKED: (Layout.MASKED, False, True),
        GemmKind.WGRAD: (Layout.DENSE, True, False),
        GemmKind.K_GROUPED: (Layout.K_GROUPED, True, True),
    }
    for kind, (layout, wgrad, grouped) in expect.items():
        assert (kind.layout, kind.wgrad, kind.grouped) == (layout, wgrad, grouped)
        assert GemmKind.of(layout, wgrad) is kind
    assert warmup.GROUPED_KINDS == {"m_grouped_contiguous", "m_grouped_masked", "k_grouped", "m_grouped_contiguous_psum"}
    with pytest.raises(ValueError, match="no GEMM kind has layout 2 with wgrad=True"):
        GemmKind.of(2, True)


def test_configs_know_their_kind_and_render_the_same_for_an_enum_or_an_int():
    plain = GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=2)
    enum = GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=Layout.MASKED)
    assert plain == enum and hash(plain) == hash(enum) and type(enum.layout) is int
    assert plain.render().source == enum.render().source
    assert plain.kind is GemmKind.M_GROUPED_MASKED and plain.warmup_kind == "m_grouped_masked"
    wgrad = GemmConfig(n=4096, k=0, block_m=128, block_n=128, stages=4, layout=Layout.K_GROUPED, wgrad=True)
    assert wgrad.kind is GemmKind.K_GROUPED
    # The prefix-sum layout computes the contiguous kind, but only its own warmup kind builds it.
    psum = GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=Layout.CONTIGUOUS_PSUM)
    assert psum.kind is GemmKind.M_GROUPED_CONTIGUOUS and psum.warmup_kind == "m_grouped_contiguous_psum"
    assert '{"kind": "m_grouped_contiguous_psum", "n": 4096, "k": 7168}' in psum.render().warmup_hint


def test_shapes_files_round_trip_through_the_enum():
    entries = [{"kind": k, "n": 256, "k": 256} | ({"groups": 2} if k in warmup.GROUPED_KINDS else {})
               for k in SHAPES_FILE_KINDS]
    specs = warmup.parse_shapes(entries)
    assert [s.kind for s in specs] == list(GemmKind)
    assert [s.kind for s in specs] == list(SHAPES_FILE_KINDS)
    assert specs[2].label == "m_grouped_masked n=256 k=256 groups=2"
    assert json.loads(json.dumps([{"kind": s.kind} for s in specs])) == [{"kind": k} for k in SHAPES_FILE_KINDS]


@pytest.mark.parametrize("name", ["masked", "m_grouped_masked"])
def test_inspect_takes_the_short_and_the_shapes_file_name(name, tmp_cache, monkeypatch):
    from click.testing import CliRunner

    from dgx import cli
    from dgx import jit

    monkeypatch.setattr(jit, "_caches", {})
    result = CliRunner().invoke(cli.main, ["inspect", "--gemm", "64", "256", "256", "--kind", name, "--groups", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("masked (2 groups) M=64 N=256 K=256")


def test_inspect_takes_the_prefix_sum_kind(tmp_cache, monkeypatch):
    """`dgx inspect --kind m_grouped_contiguous_psum` builds the kernel dgx.grouped_psum picks (alignment 128)."""
    from click.testing import CliRunner

    from dgx import cli
    from dgx import jit
    from dgx.grouped_psum import psum_config

    monkeypatch.setattr(jit, "_caches", {})
    assert "m_grouped_contiguous_psum" in cli.INSPECT_KINDS
    args = ["inspect", "--gemm", "1000", "256", "256", "--kind", "m_grouped_contiguous_psum", "--groups", "4"]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 0, result.output
    expected = psum_config(1000, 256, 256, 4, 132, 128)
    assert expected.layout == Layout.CONTIGUOUS_PSUM
    assert result.output.startswith("contiguous_psum (4 groups, alignment 128) M=1000 N=256 K=256 on 132 SMs")
    assert f"key {jit.kernel_key(expected.render(), 'sm_90a')[:16]}" in result.output
    result = CliRunner().invoke(cli.main, args[:-2])  # a grouped kind: --groups defaults to 1, as for the others
    assert result.exit_code == 0, result.output


def test_a_config_must_compute_the_kind_it_is_given_for():
    """A weight-gradient config (FP32 stores) given to a BF16 dense call, or the reverse, is refused before launch."""
    from dgx.kernels.fp8_gemm import GemmConfig
    from dgx.launch import _expect_config_fits

    bf16 = GemmConfig(n=256, k=256, block_m=128, block_n=128, stages=4)
    fp32 = GemmConfig(n=256, k=256, block_m=128, block_n=128, stages=4, wgrad=True)
    _expect_config_fits(GemmKind.DENSE, bf16, 256, 256)
    _expect_config_fits(GemmKind.WGRAD, fp32, 256, 256)
    with pytest.raises(ValueError, match="does not fit a dense GEMM"):
        _expect_config_fits(GemmKind.DENSE, fp32, 256, 256)
    with pytest.raises(ValueError, match="does not fit a wgrad GEMM"):
        _expect_config_fits(GemmKind.WGRAD, bf16, 256, 256)
