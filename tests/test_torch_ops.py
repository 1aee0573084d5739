"""dgx's ops as torch operators without a GPU: registration and schemas (the written argument marked), the fake
implementations under FakeTensorMode, tracing (make_fx, torch.compile with fullgraph=True: one graph, no break)
with the GPU functions replaced by CPU stand-ins, and the host cost of the operator layer."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import dgx  # noqa: E402
import dgx.torch_ops as T  # noqa: E402
from dgx import gemm, grouped, mqa, wgrad  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

FP8 = torch.float8_e4m3fn
I32 = torch.int32
GEMM_HEAD = "Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d"
EXPECTED = {
    "fp8_gemm_nt": f"({GEMM_HEAD}, Tensor? c=None) -> ()",
    "m_grouped_fp8_gemm_nt_contiguous": f"({GEMM_HEAD}, Tensor m_indices) -> ()",
    "m_grouped_fp8_gemm_nt_masked": f"({GEMM_HEAD}, Tensor masked_m, int expected_m) -> ()",
    "k_grouped_fp8_gemm_nt_contiguous": f"({GEMM_HEAD}, int[] ks, Tensor? ks_tensor=None) -> ()",
    "fp8_mqa_logits": "(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_seq_len_k_start, "
                      "Tensor cu_seq_len_k_end, bool clean_logits=True, int max_seqlen_k=0, "
                      "ScalarType? logits_dtype=None) -> Tensor",
    "get_paged_mqa_logits_metadata": "(Tensor context_lens, int block_kv, int num_sms) -> Tensor",
    "fp8_paged_mqa_logits": "(Tensor q, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, "
                            "Tensor schedule_meta, int max_context_len, bool clean_logits=False, "
                            "ScalarType? logits_dtype=None) -> Tensor",
}
BF16_HEAD = "Tensor a, Tensor b, Tensor(a!) d"
EXPECTED.update({
    **{f"bf16_gemm_{form}": f"({BF16_HEAD}, Tensor? c=None) -> ()" for form in ("nt", "nn", "tn", "tt")},
    **{f"m_grouped_bf16_gemm_{form}_contiguous": f"({BF16_HEAD}, Tensor grouped_layout, bool use_psum_layout=False) -> ()"
       for form in ("nt", "nn")},
    "m_grouped_bf16_gemm_nt_masked": f"({BF16_HEAD}, Tensor masked_m, int expected_m) -> ()",
    "k_grouped_bf16_gemm_tn_contiguous": f"({BF16_HEAD}, int[] ks, Tensor? ks_tensor=None, Tensor? c=None) -> ()",
})
EXPECTED.update({
    "tf32_hc_prenorm_gemm": "(Tensor a, Tensor b, Tensor(a!) d, Tensor(b!) s, int? num_splits=None) -> ()",
    "fp8_gemm_nt_skip_head_mid": f"({GEMM_HEAD}, int[] head_splits) -> ()",
    "fp8_einsum": "(str expr, Tensor x, Tensor sfx, Tensor y, Tensor sfy, Tensor(a!) z) -> ()",
    "einsum": "(str expr, Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None) -> ()",
    "silu_mul_quant": "(Tensor x, Tensor? masked_m=None, float? swiglu_limit=None, bool use_ue8m0=False, "
                      "bool packed_ue8m0=False) -> (Tensor, Tensor)",
})
# what each in-place operator writes, where not only d (or not a GEMM's name)
WRITTEN = {"tf32_hc_prenorm_gemm": ["d", "s"], "fp8_einsum": ["z"], "einsum": ["d"]}
GEMMS = [name for name in EXPECTED if "gemm" in name]
# _all_ops's; tests/test_bf16_torch_ops.py traces BF16's; the GPU tests run the other families' operators
TRACED = [name for name in EXPECTED if "bf16" not in name and name not in (
    "tf32_hc_prenorm_gemm", "fp8_gemm_nt_skip_head_mid", "fp8_einsum", "einsum", "silu_mul_quant")]


def _op(name):
    return getattr(torch.ops.dgx, name).default


# --- registration ------------------------------------------------------------------------------------


def test_import_dgx_does_not_import_torch_and_torch_ops_registers():
    code = ("import sys, dgx; assert 'torch' not in sys.modules; ops = dgx.torch_ops; import torch; "
            "assert ops.fp8_gemm_nt and torch.ops.dgx.fp8_gemm_nt.default; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_every_public_op_is_an_operator_with_its_schema():
    assert set(T.SCHEMAS) == set(EXPECTED)
    for name, schema in EXPECTED.items():
        assert str(_op(name)._schema) == f"dgx::{name}{schema}"
        assert torch.Tag.needs_exact_strides in _op(name).tags
        assert callable(getattr(dgx, name)) and callable(getattr(T, name)), name
        assert getattr(T, name).__name__ == name


def test_every_kernel_entry_point_of_dgx_has_a_torch_ops_function():
    helpers = {"get_mk_alignment_for_contiguous_layout", "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor",
               "transform_sf_into_required_layout", "set_num_sms", "get_num_sms", "jit_stats", "reset_jit_stats", "set_pdl", "get_pdl",
               "sfx_for_kernel", "prepare_gate_up"}
    entry_points = {n for n in dgx.__all__ if n not in helpers and callable(getattr(dgx, n))
                    and not isinstance(getattr(dgx, n), type)}
    assert entry_points == set(EXPECTED) | set(T.LEGACY)
    for name in entry_points:
        assert getattr(T, name).__name__ == name


def test_legacy_names_call_the_operators(cpu_stand_ins):
    args = _inputs("cpu")
    a = dgx.per_token_cast_to_fp8(args[0])
    d = torch.zeros(128, 64)
    T.wgrad_gemm_fp8_fp8_fp32_nt(a, args[1], d)
    T.gemm_fp8_fp8_bf16_nt(a, args[1], d)
    T.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, args[2], d, args[3])
    T.m_grouped_gemm_fp8_fp8_bf16_nt_masked(args[4], args[2], torch.zeros(2, 128, 64), args[5], 7)
    T.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(args[6], args[7], torch.zeros(2, 128, 64), (128, 256))
    assert cpu_stand_ins == ["dense_c_is_d", "dense", "contiguous", "masked", "k_grouped"]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_only_d_is_marked_written(name):
    schema = _op(name)._schema
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == WRITTEN.get(name, ["d"] if name in GEMMS else [])
    assert schema.is_mutable == (name in GEMMS or name in WRITTEN)


def test_wrappers_refuse_what_is_not_a_pair():
    t = torch.empty(1)
    with pytest.raises(TypeError, match="a: expected a"):
        T.fp8_gemm_nt(t, (t, t), t)
    with pytest.raises(TypeError, match="b: expected a"):
        T.m_grouped_fp8_gemm_nt_masked((t, t), [t], t, t, 1)
    with pytest.raises(TypeError, match="kv: expected a"):
        T.fp8_mqa_logits(t, t, t, t, t)
    with pytest.raises(ValueError, match="per-token Q scales"):
        T.fp8_paged_mqa_logits((t, t), t, t, t, t, t, 1)


def test_real_implementation_is_dgx_with_its_errors():
    # CPU tensors reach dgx's own checks, which name the argument.
    t = torch.empty(4, 4)
    with pytest.raises(ValueError, match="A: expected a tensor in CUDA device memory"):
        T.fp8_gemm_nt((t, t), (t, t), t)


# --- fake implementations ----------------------------------------------------------------------------


def _cuda(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="cuda")


def _prefill(s=10, skv=300, heads=64, dim=128):
    return (_cuda((s, heads, dim), FP8), (_cuda((skv, dim), FP8), _cuda((skv,))), _cuda((s, heads)),
            _cuda((s,), I32), _cuda((s,), I32))


@pytest.mark.parametrize("max_seqlen_k,width", [(0, 300), (64, 64), (1000, 1000)])
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16])
def test_fake_mqa_logits(max_seqlen_k, width, dtype):
    with FakeTensorMode():
        q, kv, w, ks, ke = _prefill()
        out = T.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=max_seqlen_k, logits_dtype=dtype)
        pair = T.fp8_mqa_logits((q, None), kv, w, ks, ke, False, max_seqlen_k, dtype)
    for o in (out, pair):
        assert o.shape == (10, width) and o.dtype == (dtype or torch.float32) and o.device.type == "cuda"


@pytest.mark.parametrize("next_n,lens_2d", [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_fake_paged_mqa_logits_and_metadata(next_n, lens_2d, dtype):
    batch, heads, dim = 3, 32, 64
    with FakeTensorMode():
        lens = _cuda((batch, next_n) if lens_2d else (batch,), I32)
        meta = T.get_paged_mqa_logits_metadata(lens, 64, 132)
        out = T.fp8_paged_mqa_logits(_cuda((batch, next_n, heads, dim), FP8), _cuda((50, 64, 1, dim + 4), torch.uint8),
                                     _cuda((batch * next_n, heads)), lens, _cuda((batch, 8), I32), meta, 500,
                                     logits_dtype=dtype)
    assert meta.shape == (133, 2) and meta.dtype == I32 and meta.device.type == "cuda"
    assert out.shape == (batch * next_n, 500) and out.dtype == (dtype or torch.float32) and out.device.type == "cuda"


def test_fakes_refuse_bad_arguments():
    with FakeTensorMode():
        q, kv, w, ks, ke = _prefill()
        with pytest.raises(ValueError, match="logits_dtype"):
            T.fp8_mqa_logits(q, kv, w, ks, ke, logits_dtype=torch.float16)
        with pytest.raises(ValueError, match="q: expected a 3-D"):
            T.fp8_mqa_logits(_cuda((10, 8192), FP8), kv, w, ks, ke)
        with pytest.raises(ValueError, match="block_kv"):
            T.get_paged_mqa_logits_metadata(ks, 32, 132)
        with pytest.raises(ValueError, match="num_sms"):
            T.get_paged_mqa_logits_metadata(ks, 64, 0)


def _gemm_inputs(m=256, n=64, k=256, groups=2):
    a = (_cuda((m, k), FP8), _cuda((m, k // 128)))
    b = (_cuda((n, k), FP8), _cuda((1, k // 128)))
    bg = (_cuda((groups, n, k), FP8), _cuda((groups, 1, k // 128)))
    am = (_cuda((groups, m, k), FP8), _cuda((groups, m, k // 128)))
    return a, b, bg, am


def test_fake_gemms_write_d_and_return_nothing():
    with FakeTensorMode():
        a, b, bg, am = _gemm_inputs()
        d, dm, dk = _cuda((256, 64), torch.bfloat16), _cuda((2, 256, 64), torch.bfloat16), _cuda((2, 64, 32))
        assert T.fp8_gemm_nt(a, b, d) is None
        assert T.fp8_gemm_nt(a, b, _cuda((256, 64)), c=_cuda((256, 64))) is None
        assert T.m_grouped_fp8_gemm_nt_contiguous(a, bg, d, _cuda((256,), I32)) is None
        assert T.m_grouped_fp8_gemm_nt_masked(am, bg, dm, _cuda((2,), I32), 128) is None
        kg = (_cuda((64 * 256,), FP8), _cuda((64, 2)))
        assert T.k_grouped_fp8_gemm_nt_contiguous(kg, (_cuda((32 * 256,), FP8), _cuda((32, 2))), dk, [128, 128]) is None


# --- tracing -----------------------------------------------------------------------------------------


def _all_ops(x, w, bg, m_indices, am, masked_m, kg_a, kg_b, q, kv, weights, ks, ke, lens, cache, table):
    """Every op once, outputs made inside (as a model's forward does)."""
    a = dgx.per_token_cast_to_fp8(x)
    d = torch.empty(x.shape[0], w[0].shape[0], dtype=torch.bfloat16, device=x.device)
    T.fp8_gemm_nt(a, w, d)
    dg = torch.empty_like(d)
    T.m_grouped_fp8_gemm_nt_contiguous(a, bg, dg, m_indices)
    dm = torch.empty(am[0].shape[0], am[0].shape[1], bg[0].shape[1], dtype=torch.bfloat16, device=x.device)
    T.m_grouped_fp8_gemm_nt_masked(am, bg, dm, masked_m, 64)
    dk = torch.zeros(2, 128, 64, device=x.device)
    T.k_grouped_fp8_gemm_nt_contiguous(kg_a, kg_b, dk, [128, 256])
    full = T.fp8_mqa_logits(q, kv, weights, ks, ke)
    compressed = T.fp8_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k=32, logits_dtype=torch.bfloat16)
    meta = T.get_paged_mqa_logits_metadata(lens, 64, 8)
    paged = T.fp8_paged_mqa_logits(q.view(2, 2, 64, 128), cache, weights, lens, table, meta, 256, True)
    return d, dg, dm, dk, full, compressed, meta, paged


def _inputs(device):
    def t(shape, dtype=torch.float32):
        return torch.randn(shape, device=device).to(dtype)

    kg_a = (t(128 * 384, FP8), t((128, 3)))
    kg_b = (t(64 * 384, FP8), t((64, 3)))
    return (t((128, 256)), (t((64, 256), FP8), t((1, 2))), (t((2, 64, 256), FP8), t((2, 1, 2))),
            torch.zeros(128, dtype=I32, device=device), (t((2, 128, 256), FP8), t((2, 128, 2))),
            torch.tensor([100, 3], dtype=I32, device=device), kg_a, kg_b,
            t((4, 64, 128), FP8), (t((200, 128), FP8), t(200).abs()), t((4, 64)),
            torch.zeros(4, dtype=I32, device=device), torch.full((4,), 200, dtype=I32, device=device),
            torch.tensor([100, 200], dtype=I32, device=device), torch.zeros(10, 64, 1, 132, dtype=torch.uint8,
                                                                           device=device),
            torch.zeros(2, 4, dtype=I32, device=device))


def test_make_fx_fake_records_every_op():
    # Real CPU inputs, traced with fake copies of them: nothing runs, the fake implementations give the outputs.
    graph = make_fx(_all_ops, tracing_mode="fake")(*_inputs("cpu")).graph
    targets = [n.target for n in graph.nodes if n.op == "call_function"]
    for name in TRACED:
        assert targets.count(_op(name)) == (2 if name == "fp8_mqa_logits" else 1), name
    (output,) = [n for n in graph.nodes if n.op == "output"]
    outputs = [arg.meta["val"] for arg in output.args[0]]
    shapes = [(tuple(o.shape), o.dtype) for o in outputs]
    assert shapes == [((128, 64), torch.bfloat16)] * 2 + [((2, 128, 64), torch.bfloat16), ((2, 128, 64), torch.float32),
                      ((4, 200), torch.float32), ((4, 32), torch.bfloat16), ((9, 2), I32), ((4, 256), torch.float32)]


@pytest.fixture
def cpu_stand_ins(monkeypatch):
    """The plain dgx functions replaced by CPU computations of the same shapes (deterministic, input dependent),
    so that the operators run on CPU tensors; each call is counted."""
    calls = []

    def dense(a, b, d, c=None):
        calls.append("dense" if c is None else "dense_c_is_d" if c is d else "dense_c")
        d.copy_(a[0].float() @ b[0].float().T * a[1][:, :1] + (0 if c is None else c))

    def contiguous(a, b, d, m_indices):
        calls.append("contiguous")
        d.copy_(a[0].float() @ b[0][1].float().T + m_indices[:, None])

    def masked(a, b, d, masked_m, expected_m):
        calls.append("masked")
        d.copy_(torch.bmm(a[0].float(), b[0].float().transpose(1, 2)) + masked_m[:, None, None] + expected_m)

    def k_grouped(a, b, d, ks, ks_tensor=None):
        calls.append("k_grouped")
        d.add_(float(sum(ks)))

    def logits(q, kv, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
        calls.append("logits")
        full = torch.einsum("shd,kd->sk", q.float(), kv[0].float()) * kv[1] + ks[:, None] + weights.sum()
        return (full[:, :max_seqlen_k] if max_seqlen_k else full).to(logits_dtype or torch.float32)

    def metadata(context_lens, block_kv, num_sms):
        calls.append("metadata")
        return torch.arange((num_sms + 1) * 2, dtype=I32).view(-1, 2) + context_lens.sum()

    def paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits=False,
              logits_dtype=None):
        calls.append("paged")
        rows = q.shape[0] * q.shape[1]
        return torch.full((rows, max_context_len), float(schedule_meta.sum()), dtype=logits_dtype or torch.float32)

    for module, name, fn in ((gemm, "fp8_gemm_nt", dense), (grouped, "m_grouped_fp8_gemm_nt_contiguous", contiguous),
                             (grouped, "m_grouped_fp8_gemm_nt_masked", masked),
                             (wgrad, "k_grouped_fp8_gemm_nt_contiguous", k_grouped), (mqa, "fp8_mqa_logits", logits),
                             (mqa, "get_paged_mqa_logits_metadata", metadata), (mqa, "fp8_paged_mqa_logits", paged)):
        monkeypatch.setattr(module, name, fn)
    return calls


def _counting_backend(graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    return backend


def test_compile_fullgraph_one_graph_same_results(cpu_stand_ins):
    torch._dynamo.reset()
    args = _inputs("cpu")
    eager = _all_ops(*args)
    assert len(cpu_stand_ins) == 8
    graphs = []
    compiled = torch.compile(_all_ops, fullgraph=True, backend=_counting_backend(graphs))
    got = compiled(*args)
    assert len(graphs) == 1
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    for name in TRACED:
        assert _op(name) in targets or getattr(torch.ops.dgx, name) in targets, name
    assert len(cpu_stand_ins) == 16  # the compiled graph ran every op once more
    for e, g in zip(eager, got):
        assert e.dtype == g.dtype and torch.equal(e, g)
    explain = torch._dynamo.explain(_all_ops)(*args)
    assert explain.graph_count == 1 and explain.graph_break_count == 0


def test_compile_writes_into_a_given_d(cpu_stand_ins):
    """A d passed in from outside is written by the compiled function too (the mutation is declared)."""
    torch._dynamo.reset()

    def step(a, b, d, dk, kg_a, kg_b):
        T.fp8_gemm_nt(a, b, d)
        T.k_grouped_fp8_gemm_nt_contiguous(kg_a, kg_b, dk, [128, 256])
        return d.sum()

    args = _inputs("cpu")
    a = dgx.per_token_cast_to_fp8(args[0])
    d, dk = torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(2, 128, 64)
    d_ref, dk_ref = d.clone(), dk.clone()
    step(a, args[1], d_ref, dk_ref, args[6], args[7])
    version = d._version
    total = torch.compile(step, fullgraph=True, backend="aot_eager")(a, args[1], d, dk, args[6], args[7])
    assert torch.equal(d, d_ref) and torch.equal(dk, dk_ref) and torch.equal(total, d_ref.sum())
    assert d._version > version
    assert dk.abs().sum() > 0


def test_compile_accumulates_when_c_is_d(cpu_stand_ins):
    """wgrad: d += a . b^T passes d as both the written d and the read c; compiled, d is read before it is written."""
    torch._dynamo.reset()

    def step(a, b, d):
        T.wgrad_gemm_fp8_fp8_fp32_nt(a, b, d)
        T.wgrad_gemm_fp8_fp8_fp32_nt(a, b, d)
        return d * 2

    args = _inputs("cpu")
    a = dgx.per_token_cast_to_fp8(args[0])
    d = torch.randn(128, 64)
    d_ref = d.clone()
    want = step(a, args[1], d_ref)
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(a, args[1], d)
    assert torch.equal(d, d_ref) and torch.equal(got, want)
    # Eager passes d itself as c; the functionalised graph may pass d's value before the write (a copy).
    assert cpu_stand_ins[:2] == ["dense_c_is_d"] * 2 and len(cpu_stand_ins) == 4


# --- host cost ---------------------------------------------------------------------------------------


def test_operator_layer_host_cost(capsys):
    """The dispatcher path dgx.torch_ops registers through costs far less than torch.library.custom_op's; the
    numbers (µs per call on this CPU) are printed for the record (pytest -s)."""
    from torch_op_timing import dispatch_overhead_us, wrapper_overhead_us

    costs = {**dispatch_overhead_us(5000), **wrapper_overhead_us(5000)}
    with capsys.disabled():
        print("\n" + "\n".join(f"  {name}: {us:.2f} us/call" for name, us in costs.items()))
    assert costs["Library op (dgx.torch_ops' way)"] < costs["torch.library.custom_op"] / 2
