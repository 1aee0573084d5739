"""sass_tools.interleave: the FFMA yield/reuse pass changes only the bits it means to."""

from __future__ import annotations

import json
import struct

import pytest
from sass_fixtures import cubin, disasm_instructions, needs_nvdisasm

from dgx.sass_tools import PASS_VERSION, Cubin, CubinError, analyze_cubin, decode, ffma_runs, interleave_ffma
from dgx.sass_tools.codec import FFMA, HIGH_REUSE_MASK, HIGH_YIELD_MASK
from dgx.sass_tools.interleave import DEFAULT_MIN_RUN, looks_interleaved, selected_positions

ALLOWED_HIGH_BITS = HIGH_YIELD_MASK | HIGH_REUSE_MASK  # bit 109 and bits 122..125, in the high word


def changed_instructions(before: bytes, after: bytes) -> dict[str, list[tuple]]:
    a, b = Cubin(before), Cubin(after)
    out = {}
    for name in a.kernels:
        pairs = [(x, y) for x, y in zip(decode(a.text(name)), decode(b.text(name))) if x != y]
        if pairs:
            out[name] = pairs
    return out


@pytest.mark.parametrize("key", ["ffma", "wgmma_fp8", "multi"])
def test_only_yield_and_reuse_bits_change(key):
    blob = cubin(key)
    out, report = interleave_ffma(blob)
    assert report.changed > 0
    assert len(out) == len(blob)
    parsed = Cubin(blob)
    # Every differing byte lies inside the .text of a kernel, in a high word.
    texts = [(k.text_offset, k.text_offset + k.text_size) for k in parsed.kernels.values()]
    diff = [i for i in range(len(blob)) if blob[i] != out[i]]
    assert diff
    for i in diff:
        start = next(s for s, e in texts if s <= i < e)
        assert (i - start) % 16 >= 8
    # Instruction by instruction: same count, same low word, high word differs only in bit 109
    # (cleared: yield) and bits 122..125 (cleared: no reuse), and only on FFMA.
    changed = changed_instructions(blob, out)
    total = 0
    for name, pairs in changed.items():
        assert len(decode(Cubin(out).text(name))) == len(decode(parsed.text(name)))
        for x, y in pairs:
            assert x.op_class == FFMA and x.low == y.low
            assert (x.high ^ y.high) & ~ALLOWED_HIGH_BITS == 0
            assert y.high & x.high == y.high  # bits only cleared, never set
            assert y.control.yield_flag and y.control.reuse == 0
            total += 1
    assert total == report.changed


@pytest.mark.parametrize("key", ["ffma", "wgmma_fp8", "multi", "zoo", "ffma_forms"])
def test_idempotent(key):
    for kwargs in ({}, {"skip_interleaved": False}, {"fraction": 0.3, "min_run": 4}):
        once, _ = interleave_ffma(cubin(key), **kwargs)
        twice, _ = interleave_ffma(once, **kwargs)
        assert twice == once


def test_selection_follows_fraction():
    blob = cubin("wgmma_fp8")
    (run,) = ffma_runs(decode(Cubin(blob).text("wgmma_fp8")), DEFAULT_MIN_RUN)
    assert run.length == 32 and run.yield_set == 0  # the promotion FFMA run, no yields from ptxas
    out, report = interleave_ffma(blob, fraction=0.5)
    after = decode(Cubin(out).text("wgmma_fp8"))
    yields = [k for k in range(run.length) if after[run.start + k].control.yield_flag]
    assert yields == list(range(0, 32, 2))
    (kr,) = report.kernels
    (rr,) = kr.runs
    assert (rr.offset, rr.length, rr.changed, rr.interleaved_before, rr.skipped) == (run.offset, 32, 16, False, False)
    # After the pass, the run reads as interleaved (what dgx inspect shows).
    (again,) = ffma_runs(after, DEFAULT_MIN_RUN)
    assert again.interleaved and again.yield_set == 16


def test_fraction_and_min_run_bounds():
    blob = cubin("ffma")
    out, report = interleave_ffma(blob, fraction=0.0)
    assert out == blob and report.changed == 0
    out, report = interleave_ffma(blob, min_run=10_000)
    assert out == blob and report.kernels[0].runs == ()
    out, _ = interleave_ffma(blob, fraction=1.0)
    instrs = decode(Cubin(out).text("ffma_chain"))
    for run in ffma_runs(instrs, DEFAULT_MIN_RUN):
        assert all(instrs[run.start + k].control.yield_flag for k in range(run.length))
    for bad in ({"fraction": 1.5}, {"fraction": -0.1}, {"min_run": 0}, {"min_run": 2.5}):
        with pytest.raises(ValueError):
            interleave_ffma(blob, **bad)


def test_kernel_filter():
    blob = cubin("multi")
    out, report = interleave_ffma(blob, kernels=["ffma_chain"])
    assert set(changed_instructions(blob, out)) == {"ffma_chain"}
    assert [k.kernel for k in report.kernels] == ["ffma_chain"]
    out, report = interleave_ffma(blob, kernels=["local_array", "smem_static"])
    assert out == blob and report.changed == 0
    with pytest.raises(CubinError, match="no kernel 'nope'"):
        interleave_ffma(blob, kernels=["nope"])


def test_runs_the_compiler_interleaved_are_reported_and_skipped():
    """ptxas puts yield flags on most FFMA of the dependent chain in ffma_forms: reported as already
    interleaved, left alone unless skip_interleaved=False."""
    blob = cubin("ffma_forms")
    out, report = interleave_ffma(blob)
    runs = report.kernels[0].runs
    assert runs and all(r.interleaved_before and r.skipped and r.changed == 0 for r in runs)
    assert report.already_interleaved == len(runs)
    assert out == blob
    forced, report = interleave_ffma(blob, skip_interleaved=False)
    assert not any(r.skipped for r in report.kernels[0].runs)


def test_looks_interleaved():
    assert looks_interleaved([1, 3, 5, 7], 8)
    assert looks_interleaved([0, 2, 4, 6], 8)
    assert looks_interleaved([0, 4], 8)
    assert looks_interleaved([0, 1, 2], 3)
    assert looks_interleaved([2, 5, 9, 12], 14)  # gaps 3, 4, 3
    assert not looks_interleaved([5], 8)  # one yield is no pattern
    assert not looks_interleaved([0, 1, 7], 8)  # uneven gaps
    assert not looks_interleaved([10, 12, 14], 40)  # a yield cluster in a long run


def test_selected_positions():
    assert selected_positions(8, 0.5) == [0, 2, 4, 6]
    assert selected_positions(9, 0.5) == [0, 2, 4, 6, 8]
    assert selected_positions(8, 0.25) == [0, 4]
    assert selected_positions(5, 1.0) == [0, 1, 2, 3, 4]
    assert selected_positions(5, 1) == [0, 1, 2, 3, 4]
    assert selected_positions(5, 0.0) == []
    assert selected_positions(10, 0.3) == [0, 3, 6]  # not 9: 10 * 0.3 is 3 here, not 3.0000000000000004
    assert len(selected_positions(100, 0.3)) == 30


def test_pass_reproduces_ptxas_own_interleaving():
    """ptxas interleaves the 384-thread promotion run itself: yield on FFMA 0, 2, 4, ... and operand
    reuse only on the others. The pass applied to the 128-thread kernel, which ptxas left without any
    yield, gives the same (yield, reuse) sequence."""
    blob = cubin("wgmma_fp8_384")
    instrs = decode(Cubin(blob).text("wgmma_fp8_384"))
    (own,) = ffma_runs(instrs, DEFAULT_MIN_RUN)
    assert own.interleaved and own.yield_set == own.length // 2
    own_pattern = [(c.yield_flag, c.reuse) for c in (i.control for i in instrs[own.start : own.start + own.length])]
    out, report = interleave_ffma(blob)
    assert out == blob and report.already_interleaved == 1 and report.changed == 0

    ours_blob, _ = interleave_ffma(cubin("wgmma_fp8"))
    ours = decode(Cubin(ours_blob).text("wgmma_fp8"))
    (run,) = ffma_runs(ours, DEFAULT_MIN_RUN)
    pattern = [(c.yield_flag, c.reuse) for c in (i.control for i in ours[run.start : run.start + run.length])]
    assert pattern[:-1] == own_pattern[: run.length - 1]


def test_report_and_version():
    assert isinstance(PASS_VERSION, str) and PASS_VERSION
    _, report = interleave_ffma(cubin("multi"))
    data = json.loads(json.dumps(report.to_json()))
    assert data["pass_version"] == PASS_VERSION
    assert data["changed"] == report.changed
    assert {k["kernel"] for k in data["kernels"]} == {"ffma_chain", "local_array", "smem_static"}


def test_refuses_other_architectures():
    blob = bytearray(cubin("ffma"))
    flags = struct.unpack_from("<I", blob, 0x30)[0]
    struct.pack_into("<I", blob, 0x30, (flags & ~0xFF00) | (80 << 8))  # claim sm_80
    assert Cubin(bytes(blob)).arch == 80
    with pytest.raises(CubinError, match="sm_80"):
        interleave_ffma(bytes(blob))
    with pytest.raises(CubinError, match="sm_80"):
        analyze_cubin(bytes(blob))


@needs_nvdisasm
@pytest.mark.parametrize("key", ["ffma", "wgmma_fp8"])
def test_nvdisasm_reads_the_patched_cubin(key):
    """nvdisasm (which validates stall/yield combinations) decodes the patched cubin; the listing is
    the same instructions with some '.reuse' marks gone."""
    blob = cubin(key)
    out, report = interleave_ffma(blob)
    assert report.changed > 0
    before, after = disasm_instructions(blob), disasm_instructions(out)
    assert before.keys() == after.keys()
    dropped = 0
    for name in before:
        assert len(before[name]) == len(after[name])
        for x, y in zip(before[name], after[name]):
            assert (x.offset, x.predicate, x.opcode) == (y.offset, y.predicate, y.opcode)
            assert x.operands.replace(".reuse", "") == y.operands.replace(".reuse", "")
            dropped += x.operands.count(".reuse") - y.operands.count(".reuse")
    assert dropped > 0
