"""The BF16 GEMM family's torch operators: registered with their schemas, traced by make_fx through their fake
implementations, compiled into one graph with torch.compile(fullgraph=True) and run there with the same results as
eagerly (CPU stand-ins for the kernels; the GPU tests run the real ones)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import dgx  # noqa: E402
from dgx import bf16  # noqa: E402

T = dgx.torch_ops
OPS = ["bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
       "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous"]
BF16, I32 = torch.bfloat16, torch.int32


def _all_ops(a, b_nt, b_nn, a_t, bg, bg_nn, m_indices, am, masked_m, ka, kb):
    out = []
    for name, (x, y) in (("nt", (a, b_nt)), ("nn", (a, b_nn)), ("tn", (a_t, b_nn)), ("tt", (a_t, b_nt))):
        d = torch.empty(64, 32, dtype=BF16)
        getattr(T, f"bf16_gemm_{name}")(x, y, d)
        out.append(d)
    for name, b in (("nt", bg), ("nn", bg_nn)):
        d = torch.empty(128, 32, dtype=BF16)
        getattr(T, f"m_grouped_bf16_gemm_{name}_contiguous")(a.repeat(2, 1), b, d, m_indices)
        out.append(d)
    dm = torch.empty(2, 16, 32, dtype=BF16)
    T.m_grouped_bf16_gemm_nt_masked(am, bg, dm, masked_m, 8)
    dk = torch.zeros(2, 16, 32)
    T.k_grouped_bf16_gemm_tn_contiguous(ka, kb, dk, [128, 128], None, dk)
    return (*out, dm, dk)


def _inputs():
    g = torch.Generator().manual_seed(0)

    def t(*shape, dtype=BF16):
        return torch.randn(*shape, generator=g).to(dtype)

    return (t(64, 128), t(32, 128), t(128, 32), t(128, 64), t(2, 32, 128), t(2, 128, 32),
            torch.cat([torch.zeros(64, dtype=I32), torch.ones(64, dtype=I32)]), t(2, 16, 128),
            torch.tensor([16, 5], dtype=I32), t(256, 16), t(256, 32))


@pytest.fixture
def stand_ins(monkeypatch):
    """dgx.bf16's functions replaced by CPU computations of the same shapes; each call is counted."""
    calls = []

    def dense(form):
        def run(a, b, d, c=None, compiled_dims="nk", **_):
            calls.append(form)
            x = a.float() if form[0] == "n" else a.float().T
            y = b.float().T if form[1] == "t" else b.float()
            d.copy_(x @ y + (0 if c is None else c.float()))
        return run

    def contiguous(form):
        def run(a, b, d, grouped_layout, *args, **_):
            calls.append("contiguous")
            w = b[0].float().T if form == "nt" else b[0].float()
            d.copy_(a.float() @ w + grouped_layout[:, None])
        return run

    def masked(a, b, d, masked_m, expected_m, *args, **_):
        calls.append("masked")
        d.copy_(torch.bmm(a.float(), b.float().transpose(1, 2)) + masked_m[:, None, None] + expected_m)

    def k_grouped(a, b, d, ks, ks_tensor=None, c=None, *args, **_):
        calls.append("k_grouped")
        d.add_(a[:128].float().T @ b[:128].float() + float(sum(ks)))

    for form in ("nt", "nn", "tn", "tt"):
        monkeypatch.setattr(bf16, f"bf16_gemm_{form}", dense(form))
    monkeypatch.setattr(bf16, "m_grouped_bf16_gemm_nt_contiguous", contiguous("nt"))
    monkeypatch.setattr(bf16, "m_grouped_bf16_gemm_nn_contiguous", contiguous("nn"))
    monkeypatch.setattr(bf16, "m_grouped_bf16_gemm_nt_masked", masked)
    monkeypatch.setattr(bf16, "k_grouped_bf16_gemm_tn_contiguous", k_grouped)
    return calls


def test_operators_are_registered_and_write_only_d():
    for name in OPS:
        schema = getattr(torch.ops.dgx, name).default._schema
        assert [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == ["d"]
        assert callable(getattr(T, name)) and callable(getattr(dgx, name))


def test_make_fx_fake_records_every_op():
    graph = make_fx(_all_ops, tracing_mode="fake")(*_inputs()).graph
    targets = [n.target for n in graph.nodes if n.op == "call_function"]
    for name in OPS:
        assert targets.count(getattr(torch.ops.dgx, name).default) == 1, name


def test_compile_fullgraph_one_graph_same_results(stand_ins):
    torch._dynamo.reset()
    args = _inputs()
    eager = _all_ops(*args)
    assert len(stand_ins) == len(OPS)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    got = torch.compile(_all_ops, fullgraph=True, backend=backend)(*args)
    assert len(graphs) == 1 and len(stand_ins) == 2 * len(OPS)
    for e, g in zip(eager, got):
        assert e.dtype == g.dtype and torch.equal(e, g)
