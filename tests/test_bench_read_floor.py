"""dgx bench's read floor: the read-only kernel (compiled here, no GPU) and the 'of read floor' figures derived from
recorded results."""

import re

import pytest

from dgx import compiler, runtime
from dgx.bench import load_json, render_markdown, render_table, summarize, write_json
from dgx.bench.read_floor import CONFIG, ReadFloor, ReadStreamConfig
from dgx.bench.results import BenchResults, CaseResult, ImplResult, RepeatResult
from dgx.bench.suites import make_shape
from dgx.sass_tools import disassemble

CEIL = {"fp8_tflops": 1000.0, "copy_gbps": 2000.0, "bf16_tflops": 700.0}
COMPUTE = make_shape("dense", 4096, 4096, 7168)
MEMORY = make_shape("dense", 64, 2112, 7168)


def test_read_stream_kernel_only_bulk_copies_after_the_wait():
    src = CONFIG.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a"))
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", disassemble(result.cubin))
    assert "UBLKCP" in ops, "the reads are 1-D bulk copies"
    assert ops.index("ACQBULK") < ops.index("UBLKCP"), "griddepcontrol.wait before the first read"
    for op in ("LDG", "STG", "LDL", "STL"):
        assert op not in ops, f"{op}: the kernel should neither touch global memory otherwise nor spill"
    assert runtime.waits_for_predecessor(result.cubin, src.name)
    assert src.dynamic_smem == CONFIG.stages * CONFIG.chunk + 8 * CONFIG.stages


@pytest.mark.parametrize("stages, chunk", [(1, 16384), (17, 16384), (8, 16390), (8, 512), (8, 65536)])
def test_read_stream_config_rejects_bad_rings(stages, chunk):
    with pytest.raises(ValueError, match="read-stream config"):
        ReadStreamConfig(stages, chunk)


def test_read_floor_rejects_an_empty_read_before_touching_the_gpu():
    floor = ReadFloor(lambda *a: None, None, 1, 1)
    with pytest.raises(ValueError, match="positive byte count, got 0"):
        floor.us(0)


def _results(floors: dict | None) -> BenchResults:
    res = BenchResults(env={"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T00:00:00+00:00"},
                       settings={"suite": "dense", "repeat": 2, "timer": "kernel"})
    for r, dgx_us in enumerate((10.0, 12.0)):
        rr = RepeatResult(ceilings=dict(CEIL))
        for shape, us in ((COMPUTE, 200.0), (MEMORY, dgx_us)):
            case = CaseResult(shape, read_floor_us=(floors or {}).get(shape, [None, None])[r])
            case.impls["dgx"] = ImplResult("dgx", "ok", us=us, diff=1e-5)
            case.impls["cublaslt"] = ImplResult("cublaslt", "ok", us=2 * us, diff=1e-5)
            rr.cases.append(case)
        res.repeats.append(rr)
    return res


def test_memory_bound_rows_report_their_share_of_the_read_floor(tmp_path):
    res = _results({MEMORY: [8.0, 9.0]})
    s = summarize(res)
    compute, memory = s.suite("dense").cases
    assert memory.bound == "memory" and memory.read_floor_us == pytest.approx(8.5)
    assert memory.impls["dgx"].floor_share == pytest.approx(8.5 / 11.0)
    assert memory.impls["cublaslt"].floor_share == pytest.approx(8.5 / 22.0)
    assert compute.read_floor_us is None and compute.impls["dgx"].floor_share is None
    md = render_markdown(res)
    header = next(line for line in md.splitlines() if line.startswith("| shape |"))
    assert "of read floor" in header
    row = next(line for line in md.splitlines() if line.startswith("| 64×2112×7168 |"))
    assert "77%" in row  # 8.5 / 11.0
    assert "'of read floor'" in md and "only reads" in md
    assert "of read floor" in render_table(res)
    path = tmp_path / "r.json"
    write_json(res, str(path))
    back = load_json(str(path))
    assert [c.read_floor_us for c in back.repeats[0].cases] == [None, 8.0]
    assert summarize(back).suite("dense").cases[1].read_floor_us == pytest.approx(8.5)


def test_without_floors_there_is_no_read_floor_column():
    md = render_markdown(_results(None))
    assert "of read floor" not in md
