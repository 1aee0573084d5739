"""MQA logits without a GPU: configs, NVRTC compile and SASS of every warmup kernel, input checks (on fake device
tensors: every bad argument is refused before anything would launch), warmup entries, the preset, inspect."""

import json

import pytest
from click.testing import CliRunner

from dgx import cli
import dgx
from dgx import warmup
from dgx.kernels import mqa_logits as M
from fake_views import fake_view

sass_tools = pytest.importorskip("sass_tools")


def fake(shape, dtype, ptr=1 << 20, strides=None, device=0):
    """A TensorView on cuda:`device` that is never dereferenced (the checks run before any launch)."""
    return fake_view(shape, dtype, strides, ptr, device)


# --- configs and kernels ----------------------------------------------------------------------------


def test_config_rejects_what_the_kernel_cannot_do():
    with pytest.raises(ValueError, match="heads must be one of"):
        M.MqaLogitsConfig(48, 128, 2, 15)
    with pytest.raises(ValueError, match="multiple of math_wgs"):
        M.MqaLogitsConfig(64, 128, 2, 16, math_wgs=3)
    with pytest.raises(ValueError, match="do not fit"):
        M.MqaLogitsConfig(64, 128, 4, 15, math_wgs=3)  # N=256 needs two warpgroups
    with pytest.raises(ValueError, match="next_n"):
        M.MqaLogitsConfig(32, 128, 5, 15, True)
    with pytest.raises(ValueError, match="no compressed form"):
        M.MqaLogitsConfig(64, 128, 1, 15, True, True)
    assert M.prefill_config(64, 128, False, False).smem_bytes <= M.SMEM_LIMIT
    assert M.paged_config(32, 32, 2, True).kv_stages % 3 == 0


@pytest.mark.parametrize("kind", ["mqa_logits", "paged_mqa_logits"])
@pytest.mark.parametrize("heads,head_dim", [(64, 128), (32, 64), (32, 32)])
def test_warmup_kernels_compile_with_qgmma_and_no_spills(kind, heads, head_dim, tmp_cache):
    from dgx import jit

    configs = M.warmup_configs(kind, heads, head_dim)
    names = [c.render().name for c in configs]
    assert len(set(names)) == len(names)
    for c in configs:
        cubin = jit.get_cubin(c.render(), "sm_90a")
        (report,) = sass_tools.analyze_cubin(cubin)
        assert report.local_bytes == 0 and report.spill_instructions == 0, c
        if isinstance(c, M.MqaLogitsConfig):
            assert report.qgmma >= head_dim // 32, c  # one m64nNk32 per 32 of D, at least


def test_interface_names_every_kernel_parameter_once():
    names = [p.name for p in M.MQA_INTERFACE.params]
    assert len(set(names)) == len(names)
    source = M.prefill_config(64, 128, False, False).render().source
    assert "const __grid_constant__ dgx::TensorMap tmap_q" in source and "int clean" in source


# --- input checks -----------------------------------------------------------------------------------


def _prefill_args(s=100, skv=300, h=64, d=128):
    return dict(
        q=fake((s, h, d), "float8_e4m3fn"),
        kv=(fake((skv, d), "float8_e4m3fn"), fake((skv,), "float32")),
        weights=fake((s, h), "float32"),
        cu_seq_len_k_start=fake((s,), "int32"),
        cu_seq_len_k_end=fake((s,), "int32"),
        out=fake((s, skv), "float32"),
    )


@pytest.mark.parametrize(
    "change,error,match",
    [
        (dict(q=fake((100, 64, 128), "bfloat16")), TypeError, "q: expected dtype float8_e4m3fn"),
        (dict(q=fake((100, 48, 128), "float8_e4m3fn")), ValueError, "q: expected 16, 32 or 64 heads"),
        (dict(q=fake((100, 64, 96), "float8_e4m3fn")), ValueError, "q: expected a head dim"),
        (dict(q=fake((100, 64, 128), "float8_e4m3fn", strides=(1, 100, 6400))), ValueError, "q: expected a contiguous"),
        (dict(q=fake((100, 64, 128), "float8_e4m3fn", ptr=(1 << 20) + 8)), ValueError, "q: expected a 16-byte aligned"),
        (dict(q=(fake((100, 64, 128), "float8_e4m3fn"), fake((100,), "float32"))), ValueError, "per-token Q scales"),
        (dict(kv=fake((300, 128), "float8_e4m3fn")), TypeError, "kv: expected a .kv, scales. pair"),
        (dict(kv=(fake((300, 64), "float8_e4m3fn"), fake((300,), "float32"))), ValueError, "kv: expected shape"),
        (dict(kv=(fake((300, 128), "float8_e4m3fn"), fake((301,), "float32"))), ValueError, "kv scales: expected shape"),
        (dict(kv=(fake((300, 128), "float8_e4m3fn"), fake((300,), "float32", ptr=(1 << 20) + 4))), ValueError,
         "kv scales: expected a 16-byte aligned"),
        (dict(weights=fake((100, 32), "float32")), ValueError, "weights: expected shape"),
        (dict(weights=fake((100, 64), "float32", strides=(1, 100))), ValueError, "weights: expected contiguous rows"),
        (dict(weights=fake((100, 64), "float32", strides=(66, 1))), ValueError, "16-byte aligned"),
        (dict(cu_seq_len_k_start=fake((100,), "float32")), TypeError, "cu_seq_len_k_start: expected dtype int32"),
        (dict(cu_seq_len_k_end=fake((99,), "int32")), ValueError, "cu_seq_len_k_end: expected shape"),
        (dict(cu_seq_len_k_end=fake((100,), "int32", device=1)), ValueError, "cuda:0 like the others"),
        (dict(out=fake((100, 300), "bfloat16")), TypeError, "out: expected dtype float32"),
        (dict(out=fake((100, 299), "float32")), ValueError, "out: expected shape"),
    ],
)
def test_prefill_refuses_bad_inputs(change, error, match):
    args = {**_prefill_args(), **change}
    with pytest.raises(error, match=match):
        dgx.fp8_mqa_logits(args.pop("q"), args.pop("kv"), args.pop("weights"), args.pop("cu_seq_len_k_start"),
                           args.pop("cu_seq_len_k_end"), out=args.pop("out"))


def test_prefill_refuses_bad_options():
    a = _prefill_args()
    call = (a["q"], a["kv"], a["weights"], a["cu_seq_len_k_start"], a["cu_seq_len_k_end"])
    with pytest.raises(ValueError, match="max_seqlen_k: expected an int"):
        dgx.fp8_mqa_logits(*call, max_seqlen_k=-1, out=a["out"])
    with pytest.raises(ValueError, match="logits_dtype: expected torch.float32 or torch.bfloat16"):
        dgx.fp8_mqa_logits(*call, logits_dtype="float16", out=a["out"])
    with pytest.raises(ValueError, match="does not fit this call: its heads"):
        dgx.fp8_mqa_logits(*call, out=a["out"], config=M.prefill_config(32, 128, False, False))


def _paged_args(b=8, n=2, h=64, d=128, blocks=40, width=9, sms=132, max_len=500):
    return dict(
        q=fake((b, n, h, d), "float8_e4m3fn"),
        kv_cache=fake((blocks, 64, 1, d + 4), "uint8"),
        weights=fake((b * n, h), "float32"),
        context_lens=fake((b,), "int32"),
        block_table=fake((b, width), "int32"),
        schedule_meta=fake((sms + 1, 2), "int32"),
        max_context_len=max_len,
        out=fake((b * n, max_len), "float32"),
    )


@pytest.mark.parametrize(
    "change,error,match",
    [
        (dict(q=fake((8, 5, 64, 128), "float8_e4m3fn")), ValueError, "next_n"),
        (dict(kv_cache=fake((40, 64, 1, 128), "uint8")), ValueError, "kv_cache: expected shape"),
        (dict(kv_cache=fake((40, 32, 1, 132), "uint8")), ValueError, "kv_cache: expected shape"),
        (dict(kv_cache=fake((40, 64, 1, 132), "float8_e4m3fn")), TypeError, "kv_cache: expected dtype uint8"),
        (dict(weights=fake((8, 64), "float32")), ValueError, "weights: expected shape"),
        (dict(context_lens=fake((7,), "int32")), ValueError, "context_lens: expected shape"),
        (dict(context_lens=fake((8, 3), "int32")), ValueError, "context_lens: expected shape"),
        (dict(block_table=fake((7, 9), "int32")), ValueError, "block_table: expected 8 rows"),
        (dict(block_table=fake((8, 9), "int32", strides=(1, 8))), ValueError, "block_table: expected contiguous rows"),
        (dict(schedule_meta=fake((133, 3), "int32")), ValueError, "schedule_meta: expected"),
        (dict(max_context_len=-5), ValueError, "max_context_len"),
    ],
)
def test_paged_refuses_bad_inputs(change, error, match):
    args = {**_paged_args(), **change}
    if "max_context_len" in change:
        args["out"] = fake((16, 1), "float32")
    with pytest.raises(error, match=match):
        dgx.fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                 args["block_table"], args["schedule_meta"], args["max_context_len"], out=args["out"])


def test_metadata_refuses_bad_inputs():
    with pytest.raises(ValueError, match="block_kv: expected 64"):
        dgx.get_paged_mqa_logits_metadata(fake((8,), "int32"), 128, 132, out=fake((133, 2), "int32"))
    with pytest.raises(ValueError, match="num_sms"):
        dgx.get_paged_mqa_logits_metadata(fake((8,), "int32"), 64, 0, out=fake((1, 2), "int32"))
    with pytest.raises(TypeError, match="context_lens: expected dtype int32"):
        dgx.get_paged_mqa_logits_metadata(fake((8,), "float32"), 64, 132, out=fake((133, 2), "int32"))
    with pytest.raises(ValueError, match="out: expected shape"):
        dgx.get_paged_mqa_logits_metadata(fake((8,), "int32"), 64, 132, out=fake((132, 2), "int32"))


# --- warmup, preset, inspect ------------------------------------------------------------------------


def test_shapes_file_takes_mqa_entries_and_refuses_bad_ones():
    specs = warmup.parse_shapes([{"kind": "mqa_logits", "heads": 64, "head_dim": 128},
                                 {"kind": "paged_mqa_logits", "heads": 32, "head_dim": 64, "note": "x"}])
    assert [s.label for s in specs] == ["mqa_logits heads=64 head_dim=128", "paged_mqa_logits heads=32 head_dim=64"]
    bad = [
        ({"kind": "mqa_logits", "heads": 64}, "field 'head_dim'"),
        ({"kind": "mqa_logits", "heads": 48, "head_dim": 128}, "field 'heads': expected one of 16, 32, 64"),
        ({"kind": "paged_mqa_logits", "heads": 64, "head_dim": 128, "n": 4}, "takes heads and head_dim"),
        ({"kind": "dense", "n": 256, "k": 256, "heads": 64}, "kind 'dense' takes n, k, groups, max_m, m and epilogue, not heads"),
    ]
    for entry, match in bad:
        with pytest.raises(warmup.ShapesFileError, match=match):
            warmup.parse_shapes([entry])


def test_plan_holds_every_mqa_kernel_and_the_preset_has_them():
    specs = warmup.parse_shapes([{"kind": "mqa_logits", "heads": 64, "head_dim": 128},
                                 {"kind": "paged_mqa_logits", "heads": 64, "head_dim": 128}])
    plan = warmup.plan(specs)
    names = {pk.source.name for pk in plan.kernels}
    for c in M.warmup_configs("mqa_logits", 64, 128) + M.warmup_configs("paged_mqa_logits", 64, 128):
        assert c.render().name in names
    preset = warmup.load_preset("deepseek-v3.2")
    kinds = {s.kind for s in preset}
    assert {"mqa_logits", "paged_mqa_logits", "dense", "m_grouped_masked"} <= kinds
    assert len(preset) == len(warmup.load_preset("deepseek-v3")) + 6  # the indexer (4) and the MLA einsums (2)


def test_inspect_builds_the_mqa_kernels(tmp_cache):
    runner = CliRunner()
    result = runner.invoke(cli.main, ["inspect", "--kind", "paged_mqa_logits", "--next-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.output)
    assert report["kernel"].startswith("dgx_paged_mqa_logits_h64_d128_q2")
    assert report["qgmma"] > 0 and report["local_bytes"] == 0 and report["spill_instructions"] == 0
    result = runner.invoke(cli.main, ["inspect", "--kind", "mqa_logits", "--heads", "48"])
    assert result.exit_code == 1 and "Error: --heads: expected one of 16, 32, 64, got 48" in result.output
    result = runner.invoke(cli.main, ["inspect", "--kind", "mqa_logits", "--gemm", "1", "2", "3"])
    assert result.exit_code == 2 and "--kind mqa_logits reads --heads, --head-dim; got --gemm" in result.output


def test_prefill_grid_keeps_the_rounds_with_the_fewest_ctas():
    from dgx.mqa import prefill_grid

    assert prefill_grid(2048, 132) == 128  # 16 full rounds: 8 whole zig-zag pairs per CTA
    assert prefill_grid(50, 132) == 50 and prefill_grid(300, 132) == 100 and prefill_grid(2049, 132) == 129
    for blocks in range(1, 3000, 7):
        grid = prefill_grid(blocks, 132)
        assert grid <= 132 and -(-blocks // grid) == -(-blocks // 132)


def _hinted_tma_loads(config) -> tuple[int, int]:
    """(TMA loads with an L2 cache policy, TMA loads without) in the kernel's SASS."""
    from dgx import jit

    lines = [line for line in sass_tools.disassemble(jit.get_cubin(config.render(), "sm_90a")).splitlines()
             if "UTMALDG" in line]
    hinted = sum("desc[" in line for line in lines)
    return hinted, len(lines) - hinted


def test_the_decode_cache_streams_through_l2_as_evict_first(tmp_cache):
    """The paged kernel's KV values and scales carry the evict-first policy (read once per call); Q and the weights,
    and every prefill load (its KV is read by every query block), do not."""
    for next_n in M.NEXT_NS:
        config = M.paged_config(64, 128, next_n, False)
        assert config.stream_kv and "_skv" in config.kernel_name
        assert _hinted_tma_loads(config) == (2, 2), config
    prefill = M.prefill_config(64, 128, False, False)
    assert not prefill.stream_kv
    hinted, plain = _hinted_tma_loads(prefill)
    assert hinted == 0 and plain >= 4
