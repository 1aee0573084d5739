"""dgx bench's DeepGEMM peer against a real DeepGEMM on the GPU (skipped where none imports, or where
`import deep_gemm` is dgx's own alias): every suite's call, on small problems, verified against the benchmark's
reference like any implementation before it is timed, then timed with both timers."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.bench import deepgemm  # noqa: E402

INFO = deepgemm.find_deep_gemm()
needs_deepgemm = pytest.mark.skipif(not INFO.found, reason=f"no real DeepGEMM: {INFO.reason}")

GEMM_CASES = [
    ("dense", dict(m=128, n=2112, k=7168)),
    ("dense", dict(m=4096, n=4096, k=7168)),
    ("wgrad", dict(m=2048, n=7168, k=4096)),
    ("contiguous", dict(m=1024, n=4096, k=7168, groups=4)),
    ("masked", dict(m=256, n=7168, k=2048, groups=4, max_m=512)),
    ("k_grouped", dict(m=2048, n=7168, k=1024, groups=4)),
]


@needs_deepgemm
@pytest.mark.parametrize("timer", ["events", "kernel"])
@pytest.mark.parametrize("suite, kw", GEMM_CASES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(GEMM_CASES)])
def test_gemm_suites(suite, kw, timer):
    from dgx.bench.peers import Ctx, DeepGemm
    from dgx.bench.problems import build_problem
    from dgx.bench.suites import make_shape
    from dgx.bench.timing import L2Flusher

    problem = build_problem(make_shape(suite, **kw), seed=3)
    res = DeepGemm(INFO).measure(problem, Ctx(L2Flusher(), warmup=2, iters=5, timer=timer))
    assert res.status == "ok", res.reason
    assert res.diff < 1e-3 and res.us > 0


@needs_deepgemm
@pytest.mark.parametrize("index", range(4))
def test_mqa_suites(index):
    from dgx.bench.mqa_problems import build_mqa_problem
    from dgx.bench.mqa_suites import MqaShape
    from dgx.bench.peers import Ctx, DeepGemm
    from dgx.bench.timing import L2Flusher

    shape = [MqaShape("mqa", seq_len=2048, seq_len_kv=8192), MqaShape("mqa", seq_len=512, seq_len_kv=300),
             MqaShape("paged_mqa", batch=64, next_n=1, context_len=8192),
             MqaShape("paged_mqa", batch=32, next_n=2, context_len=5000)][index]
    res = DeepGemm(INFO).measure(build_mqa_problem(shape, seed=2), Ctx(L2Flusher(), warmup=2, iters=5, timer="kernel"))
    assert res.status == "ok", res.reason
    names = res.note
    assert any(k in names for k in deepgemm.KERNEL_NAMES[shape.suite]), names
