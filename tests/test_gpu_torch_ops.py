"""dgx's torch operators on the GPU: a module whose forward quantises its activations and calls the dense GEMM, both
M-grouped GEMMs and the MQA logits through dgx.torch_ops, compiled with fullgraph=True (one graph, bitwise the
eager results) and with mode="reduce-overhead" (CUDA-graph replays follow new input values written in place)."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import dgx  # noqa: E402
import dgx.torch_ops as T  # noqa: E402
from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402

DEVICE = "cuda"  # a name, so that the module can be dry-run on CPU stand-ins
M, N, K, GROUPS, M_MAX = 128, 256, 512, 2, 128
S, S_KV, HEADS, DIM = 128, 1024, 64, 128


def _blocks(w):
    """[G, N, K] BF16 -> (FP8 [G, N, K], scales [G, N/128, K/128]), per 128x128 block."""
    parts = [per_block_cast_to_fp8(w[g]) for g in range(w.shape[0])]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])


class Layer(torch.nn.Module):
    """FP8 weights made once; the forward quantises its inputs per token and runs every GEMM kind and the
    indexer's logits. Outputs that an op may leave unwritten start as zeros, so eager and compiled compare."""

    def __init__(self):
        super().__init__()
        g = torch.Generator(device=DEVICE).manual_seed(0)
        w = per_block_cast_to_fp8(torch.randn(N, K, device=DEVICE, dtype=torch.bfloat16, generator=g))
        wg = _blocks(torch.randn(GROUPS, N, K, device=DEVICE, dtype=torch.bfloat16, generator=g))
        for name, t in (("w", w[0]), ("w_sf", w[1]), ("wg", wg[0]), ("wg_sf", wg[1])):
            self.register_buffer(name, t)

    def quantise(self, x, xg, xm):
        a = per_token_cast_to_fp8(x)
        ag = per_token_cast_to_fp8(xg)
        am, am_sf = per_token_cast_to_fp8(xm.view(GROUPS * M_MAX, K), mn_major=False)
        am_sf = dgx.get_mn_major_tma_aligned_tensor(am_sf.view(GROUPS, M_MAX, -1))
        return a, ag, (am.view(GROUPS, M_MAX, K), am_sf)

    def ops(self, a, ag, am, m_indices, masked_m, q, kv, kv_scales, weights, ks, ke):
        d = torch.empty(M, N, device=DEVICE, dtype=torch.bfloat16)
        T.fp8_gemm_nt(a, (self.w, self.w_sf), d)
        dg = torch.zeros(ag[0].shape[0], N, device=DEVICE, dtype=torch.bfloat16)
        T.m_grouped_fp8_gemm_nt_contiguous(ag, (self.wg, self.wg_sf), dg, m_indices)
        dm = torch.zeros(GROUPS, M_MAX, N, device=DEVICE, dtype=torch.bfloat16)
        T.m_grouped_fp8_gemm_nt_masked(am, (self.wg, self.wg_sf), dm, masked_m, 64)
        logits = T.fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke)
        compressed = T.fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke, max_seqlen_k=256,
                                      logits_dtype=torch.bfloat16)
        return d, dg, dm, logits, compressed

    def forward(self, x, xg, xm, m_indices, masked_m, q, kv, kv_scales, weights, ks, ke):
        a, ag, am = self.quantise(x, xg, xm)
        return self.ops(a, ag, am, m_indices, masked_m, q, kv, kv_scales, weights, ks, ke), (a, ag, am)


def _inputs(seed):
    g = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=DEVICE, dtype=dtype, generator=g)

    m_indices = torch.arange(GROUPS * 128, device=DEVICE, dtype=torch.int32) // 128
    masked_m = torch.randint(0, M_MAX + 1, (GROUPS,), device=DEVICE, dtype=torch.int32, generator=g)
    kv = randn(S_KV, DIM, dtype=torch.float32)
    amax = kv.abs().amax(dim=1).clamp(min=1e-4)
    ke = torch.arange(S, device=DEVICE, dtype=torch.int32) + (S_KV - S + 1)
    ks = torch.randint(0, S_KV - S, (S,), device=DEVICE, dtype=torch.int32, generator=g)
    return (randn(M, K), randn(GROUPS * 128, K), randn(GROUPS, M_MAX, K), m_indices, masked_m,
            randn(S, HEADS, DIM, dtype=torch.float32).to(torch.float8_e4m3fn),
            (kv * (448.0 / amax)[:, None]).to(torch.float8_e4m3fn), amax / 448.0, randn(S, HEADS, dtype=torch.float32),
            ks, ke)


def _bits(t):
    """`t` as integers of its element size: equal bits, not equal values (-0.0 differs from 0.0, NaN from NaN)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _assert_bitwise(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        assert torch.equal(_bits(g), _bits(w)), f"output {i} differs"


def _flat_quantised(quantised):
    a, ag, am = quantised
    return [*a, *ag, *am]


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_compile_fullgraph_bitwise_equals_eager(backend):
    torch._dynamo.reset()
    layer = Layer()
    args = _inputs(1)
    want, want_q = layer(*args)
    explain = torch._dynamo.explain(layer)(*args)
    assert explain.graph_count == 1 and explain.graph_break_count == 0, explain.break_reasons
    torch._dynamo.reset()
    got, got_q = torch.compile(layer, fullgraph=True, backend=backend)(*args)
    torch.cuda.synchronize()
    # The dgx ops of the compiled graph give bitwise what the eager ops give on the same quantised inputs.
    _assert_bitwise(got, layer.ops(*got_q, *args[3:]))
    # End to end too, wherever torch's own quantisation came out the same (aot_eager runs torch's eager kernels;
    # inductor may turn a division by a constant into a multiplication by its reciprocal).
    same_inputs = all(torch.equal(_bits(g), _bits(w)) for g, w in zip(_flat_quantised(got_q), _flat_quantised(want_q)))
    assert same_inputs or backend != "aot_eager", "aot_eager quantised differently from eager"
    if same_inputs:
        _assert_bitwise(got, want)


def test_compile_reduce_overhead_replays_follow_new_inputs():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    layer = Layer()
    args = _inputs(2)
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    # Call 1 warms up (eager), call 2 records the CUDA graph, calls 3-5 replay it; before each call every input
    # gets new values written in place.
    for step in range(5):
        for dst, src in zip(args, _inputs(10 + step)):
            dst.copy_(src)
        torch.compiler.cudagraph_mark_step_begin()
        got, got_q = compiled(*args)
        got = [t.clone() for t in got]
        got_q = tuple((p[0].clone(), p[1].clone()) for p in got_q)
        torch.cuda.synchronize()
        _assert_bitwise(got, layer.ops(*got_q, *args[3:]))
        assert not torch.isnan(got[3]).any()
    assert counters["inductor"]["cudagraph_skips"] == 0, "torch.compile did not use CUDA graphs"


def test_operators_called_directly_match_the_plain_functions():
    """torch.ops.dgx.* with flat arguments, eager, against dgx.* (including the paged decode ops)."""
    args = _inputs(3)
    layer = Layer()
    a, _, _ = layer.quantise(*args[:3])
    d1, d2 = (torch.empty(M, N, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    dgx.fp8_gemm_nt(a, (layer.w, layer.w_sf), d1)
    torch.ops.dgx.fp8_gemm_nt(a[0], a[1], layer.w, layer.w_sf, d2)
    torch.cuda.synchronize()
    assert torch.equal(d1, d2)

    from mqa_utils import make_paged

    batch, next_n = 4, 2
    q, cache, weights, lens, table, *_ = make_paged(batch, next_n, [300, 1000, 64, 777], seed=3)
    meta = torch.ops.dgx.get_paged_mqa_logits_metadata(lens, 64, dgx.get_num_sms())
    want_meta = dgx.get_paged_mqa_logits_metadata(lens, 64, dgx.get_num_sms())
    got = torch.ops.dgx.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, 1024, True)
    want = dgx.fp8_paged_mqa_logits(q, cache, weights, lens, table, want_meta, 1024, True)
    torch.cuda.synchronize()
    assert torch.equal(meta, want_meta) and torch.equal(got, want)
