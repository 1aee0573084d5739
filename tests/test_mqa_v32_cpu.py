"""The indexer's current entry points without a GPU: fp8_fp4_mqa_logits / fp8_fp4_paged_mqa_logits (FP4 refused with
sm_100 named), 16 heads, next_n up to 4, and indices= on the paged call and its schedule: configs, NVRTC compiles
checked in the SASS, input checks, and the launches the per-call path makes (driver stood in)."""

from __future__ import annotations

import re
import struct

import pytest

import dgx.mqa as mqa
from dgx.kernels import mqa_logits as M
from fake_views import fake_view

torch = pytest.importorskip("torch")
sass_tools = pytest.importorskip("sass_tools")

from driver_stand_in import stand_in  # noqa: E402

FP8 = torch.float8_e4m3fn


# --- configs --------------------------------------------------------------------------------------------------


def test_paged_configs_for_every_next_n_and_16_heads():
    """Three math warpgroups everywhere; tiles wider than 128 (64 heads x next_n 3, 4) in two passes of 2 queries."""
    for heads in M.HEADS:
        for next_n in M.NEXT_NS:
            c = M.paged_config(heads, 128, next_n, False)
            assert c.math_wgs == 3 and c.kv_stages % c.math_wgs == 0
            assert c.pass_queries == (2 if c.n > 128 else 0) and c.pass_n <= 128
            assert c.smem_bytes <= M.SMEM_LIMIT
    c4 = M.paged_config(64, 128, 4, False)
    assert c4.kernel_name == "dgx_paged_mqa_logits_h64_d128_q4_s15_w3_skv_pq2" and c4.wgmma_ns == (128,)
    assert M.prefill_config(16, 128, False, False).block_q == 8
    assert [M.varlen_block_q(h) for h in (16, 32, 64)] == [4, 4, 2]  # measured: larger groups ran slower
    assert M.varlen_config(32, 128, False).pass_queries == 0 and M.varlen_config(16, 128, False).pass_queries == 0  # one pass (N <= 128)
    with pytest.raises(ValueError, match="varlen group takes 1..8"):
        M.MqaLogitsConfig(16, 128, 9, 15, True, stream_kv=True, varlen=True)
    vl = M.varlen_config(64, 128, True)
    assert vl.varlen and vl.block_q == 2 and vl.pass_queries == 0 and vl.kernel_name.endswith("_vl_bf16")
    assert vl.interface is M.MQA_VARLEN_INTERFACE
    with pytest.raises(ValueError, match="varlen .indices. is for the paged kernel"):
        M.MqaLogitsConfig(64, 128, 2, 15, varlen=True)


def test_pass_configs_are_checked():
    """Two passes: paged, the first the larger; the old two-warpgroup tiles stay constructible (the A/B baseline)."""
    for kwargs, match in [(dict(pass_queries=4), "pass_queries"), (dict(pass_queries=1), "pass_queries"),
                          (dict(paged=False, pass_queries=2), "pass_queries")]:
        with pytest.raises(ValueError, match=match):
            M.MqaLogitsConfig(**{**dict(heads=64, head_dim=128, block_q=4, kv_stages=15, paged=True,
                                        stream_kv=True), **kwargs})
    with pytest.raises(ValueError, match="registers"):
        M.MqaLogitsConfig(64, 128, 4, 15, True, stream_kv=True)  # N 256 in one pass on three warpgroups
    old = M.MqaLogitsConfig(64, 128, 4, 16, True, math_wgs=2, stream_kv=True)
    assert old.kernel_name == "dgx_paged_mqa_logits_h64_d128_q4_s16_w2_skv" and old.wgmma_ns == (256,)
    assert "pass_queries" not in dict(old.describe()) and dict(M.paged_config(64, 128, 3, False).describe())[
        "pass_queries"] == "2"


def test_warmup_sets_are_unchanged_and_the_rest_is_listed():
    names = [c.kernel_name for c in M.warmup_configs("paged_mqa_logits", 64, 128)]
    assert not any("_q3_" in n or "_q4_" in n or "_vl" in n for n in names)
    extra = [c.kernel_name for c in M.extended_paged_configs(64, 128)]
    assert len(set(extra)) == len(extra) and not set(extra) & set(names)
    assert any("_q3_" in n for n in extra) and any("_q4_" in n for n in extra)
    assert "dgx_paged_mqa_schedule_varlen" in extra and sum("_vl" in n for n in extra) == 2


NEW_KERNELS = [
    M.prefill_config(16, 128, False, False),
    M.prefill_config(16, 32, True, True),
    M.paged_config(16, 32, 1, False),  # wgmma N 16, 32-byte swizzled Q stages of 512 bytes
    M.paged_config(32, 128, 3, True),  # three queries: the quad reduction pads to four
    M.paged_config(64, 128, 4, False),  # N 256 in two passes of 128 on three math warpgroups
    M.paged_config(64, 128, 3, True),  # N 192: passes of 2 queries and of 1 (its MMA as wide as the first's)
    M.varlen_config(64, 128, False),  # four tokens a group, two passes
    M.varlen_config(16, 64, True),
]


@pytest.mark.parametrize("config", NEW_KERNELS, ids=lambda c: c.kernel_name)
def test_new_kernels_compile_with_qgmma_and_no_spills(config, tmp_cache):
    from dgx import jit

    cubin = jit.get_cubin(config.render(), "sm_90a")
    (report,) = sass_tools.analyze_cubin(cubin)
    assert report.local_bytes == 0 and report.spill_instructions == 0
    assert report.qgmma >= config.head_dim // 32
    text = sass_tools.disassemble(cubin)
    assert re.search(rf"\bQGMMA\.64x{config.pass_n}x32\.F32\.E4M3\.E4M3\b", text), "the (pass's) wgmma N"
    per_block = config.head_dim // 32 * (2 if config.pass_queries else 1)
    assert report.qgmma == per_block, "one block's MMAs: every pass's k32 steps"


def test_varlen_schedule_kernel_compiles(tmp_cache):
    from dgx import jit

    (report,) = sass_tools.analyze_cubin(jit.get_cubin(M.PagedScheduleConfig(True).render(), "sm_90a"))
    assert report.local_bytes == 0 and report.spill_instructions == 0
    assert M.PagedScheduleConfig().kernel_name == "dgx_paged_mqa_schedule"


# --- FP4 and input checks -------------------------------------------------------------------------------------


def fake(shape, dtype="float32", **kw):
    return fake_view(shape, dtype, **kw)


def _paged(b=8, n=1, h=64, d=128, blocks=40, width=9, sms=132, max_len=500):
    return dict(q=fake((b, n, h, d), "float8_e4m3fn"), kv_cache=fake((blocks, 64, 1, d + 4), "uint8"),
                weights=fake((b * n, h)), context_lens=fake((b,), "int32"), block_table=fake((b, width), "int32"),
                schedule_meta=fake((sms + 1, 2), "int32"), max_context_len=max_len, out=fake((b * n, max_len)))


def test_fp4_operands_name_sm100():
    q4 = torch.zeros(4, 64, 64, dtype=torch.uint8)
    sf = torch.zeros(4, 64, dtype=torch.int32)
    kv = (torch.zeros(10, 64, dtype=torch.uint8), torch.zeros(10, dtype=torch.int32))
    with pytest.raises(ValueError, match="q: got per-token Q scales: FP4 .* sm_100"):
        mqa.fp8_fp4_mqa_logits((q4, sf), kv, None, None, None)
    with pytest.raises(ValueError, match="kv scales: got int32 .* sm_100"):
        mqa.fp8_fp4_mqa_logits((torch.zeros(4, 64, 128, dtype=FP8), None), kv, None, None, None)
    with pytest.raises(ValueError, match="q: got per-token Q scales: FP4 .* sm_100"):
        mqa.fp8_fp4_paged_mqa_logits((q4, sf), None, None, None, None, None, 0)
    if hasattr(torch, "float4_e2m1fn_x2"):
        with pytest.raises(ValueError, match="float4_e2m1fn_x2: FP4 .* sm_100"):
            mqa.fp8_fp4_paged_mqa_logits(torch.empty(2, 1, 64, 64, dtype=torch.float4_e2m1fn_x2), None, None, None,
                                         None, None, 0)
    with pytest.raises(ValueError, match="per-token Q scales are FP4 Q's, which needs sm_100"):
        mqa.fp8_mqa_logits((q4, sf), kv, None, None, None)


def _call_paged(args, indices=None):
    mqa.fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"], args["block_table"],
                             args["schedule_meta"], args["max_context_len"], indices=indices, out=args["out"])


@pytest.mark.parametrize(
    "change,indices,error,match",
    [
        (dict(q=fake((8, 5, 64, 128), "float8_e4m3fn")), None, ValueError, "next_n \\(dim 1\\) in \\(1, 2, 3, 4\\)"),
        (dict(q=fake((8, 1, 48, 128), "float8_e4m3fn")), None, ValueError, "expected 16, 32 or 64 heads"),
        (dict(q=fake((4, 2, 64, 128), "float8_e4m3fn"), weights=fake((8, 64)), context_lens=fake((4,), "int32"),
              block_table=fake((4, 9), "int32"), out=fake((8, 500))), fake((4,), "int32"), ValueError,
         "with indices, expected one query per row"),
        ({}, fake((7,), "int32"), ValueError, "indices: expected shape \\(8,\\)"),
        ({}, fake((8,), "float32"), TypeError, "indices: expected dtype int32"),
        ({}, fake((8,), "int32", strides=(2,)), ValueError, "indices: expected a contiguous"),
        ({}, fake((8,), "int32", device=1), ValueError, "indices: expected a tensor on cuda:0"),
        (dict(block_table=fake((3, 9), "int32")), fake((8,), "int32"), ValueError, "8 rows \\(one per token"),
    ],
)
def test_paged_refuses_bad_inputs(change, indices, error, match):
    with pytest.raises(error, match=match):
        _call_paged({**_paged(), **change}, indices)


def test_metadata_refuses_bad_indices():
    with pytest.raises(ValueError, match="with indices, expected \\[B\\] or \\[B, 1\\]"):
        mqa.get_paged_mqa_logits_metadata(fake((8, 2), "int32"), 64, 132, fake((8,), "int32"),
                                          out=fake((133, 2), "int32"))
    with pytest.raises(ValueError, match="indices: expected shape \\(8,\\)"):
        mqa.get_paged_mqa_logits_metadata(fake((8,), "int32"), 64, 132, indices=fake((9,), "int32"),
                                          out=fake((133, 2), "int32"))


# --- launches (driver stood in) -------------------------------------------------------------------------------


def _member(launch, interface, name):
    offset = dict(zip((p.name for p in interface.params), interface.offsets))[name]
    return struct.unpack_from("<q", launch.params, offset)[0]


def _paged_tensors(batch, next_n, heads=64, dim=128, blocks=20, width=5):
    return (torch.zeros(batch, next_n, heads, dim, dtype=FP8), torch.zeros(blocks, 64, 1, dim + 4, dtype=torch.uint8),
            torch.zeros(batch * next_n, heads), torch.full((batch,), 100, dtype=torch.int32),
            torch.zeros(batch, width, dtype=torch.int32), torch.zeros(133, 2, dtype=torch.int32))


@pytest.mark.parametrize("heads,next_n", [(64, 3), (64, 4), (16, 1), (16, 4), (32, 3)])
def test_paged_call_runs_the_next_n_kernel(heads, next_n):
    q, cache, w, lens, table, sched = _paged_tensors(6, next_n, heads)
    with stand_in() as si:
        out = mqa.fp8_paged_mqa_logits(q, cache, w, lens, table, sched, 300, clean_logits=True,
                                       out=torch.zeros(6 * next_n, 300))
    assert out.shape == (6 * next_n, 300)
    clean, main = si.driver.launches
    assert clean.kernel == f"dgx_mqa_clean_paged_n{next_n}" and clean.grid == (6 * next_n, 1, 1)
    assert main.kernel == M.paged_config(heads, 128, next_n, False).kernel_name and main.grid == (132, 1, 1)


def test_indices_run_the_varlen_kernel_and_schedule():
    tokens = 10
    q, cache, w, lens, table, sched = _paged_tensors(tokens, 1)
    indices = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3, 3, 3], dtype=torch.int32)
    lens2 = lens.view(tokens, 1)
    with stand_in() as si:
        meta = mqa.get_paged_mqa_logits_metadata(lens2, 64, 132, indices=indices, out=torch.zeros(133, 2, dtype=torch.int32))
        out = mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, lens2, table, meta, 256, logits_dtype=torch.bfloat16,
                                           indices=indices, out=torch.zeros(tokens, 256, dtype=torch.bfloat16))
        mqa.get_paged_mqa_logits_metadata(lens2, 64, 132, out=torch.zeros(133, 2, dtype=torch.int32))
    assert meta.shape == (133, 2) and out.shape == (tokens, 256) and out.dtype == torch.bfloat16
    schedule, main, again = si.driver.launches
    assert schedule.kernel == "dgx_paged_mqa_schedule_varlen" and again.kernel == "dgx_paged_mqa_schedule"
    assert _member(schedule, M.SCHEDULE_VARLEN_INTERFACE, "indices") == indices.data_ptr()
    assert main.kernel == M.varlen_config(64, 128, True).kernel_name
    assert _member(main, M.MQA_VARLEN_INTERFACE, "indices") == indices.data_ptr()
    assert _member(main, M.MQA_VARLEN_INTERFACE, "schedule") == meta.data_ptr()


def test_prefill_with_16_heads_takes_groups_of_8_queries():
    s, skv = 50, 300
    args = (torch.zeros(s, 16, 64, dtype=FP8), (torch.zeros(skv, 64, dtype=FP8), torch.ones(skv)), torch.zeros(s, 16),
            torch.zeros(s, dtype=torch.int32), torch.full((s,), skv, dtype=torch.int32))
    with stand_in() as si:
        mqa.fp8_fp4_mqa_logits((args[0], None), *args[1:], out=torch.zeros(s, skv))
    (launch,) = si.driver.launches
    assert launch.kernel == M.prefill_config(16, 64, False, False).kernel_name and "_q8_" in launch.kernel
    assert launch.grid == (mqa.prefill_grid(-(-s // 8), 132), 1, 1)
