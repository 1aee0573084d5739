"""Programmatic dependent launch on the GPU: every kernel family with PDL off and on, each chained after kernels that
write its inputs (torch ops, and dgx kernels: the weight gradient accumulating into the D another one wrote, the
paged schedule the decode logits read, a GEMM overwriting the D the previous one wrote), outputs bitwise equal to
the PDL-off run, eagerly and under CUDA-graph capture and replay (graphs captured with PDL off and on)."""

import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from gpu_gemm_utils import check_dense, make_dense  # noqa: E402

NAN = float("nan")


@pytest.fixture(autouse=True)
def pdl_restored():
    import dgx

    before = dgx.get_pdl()
    yield
    dgx.set_pdl(before)


def _bits(t):
    """The bytes of `t`: NaN poison left in place compares equal, and -0.0 differs from 0.0."""
    return t.contiguous().view(-1).view(torch.uint8)


def _expect_same(ref, outs, what):
    for i, (r, o) in enumerate(zip(ref, outs)):
        assert torch.equal(_bits(r), _bits(o)), f"{what}: output {i} differs from the eager PDL-off run"


def _check_chain(chain, rounds: int = 3):
    """`chain()` enqueues its kernels on the current stream (the writes of its inputs and the poison of its outputs
    first) and returns its outputs, the same tensors every call. The reference is an eager run with PDL off (it also
    compiles and loads every kernel, outside any capture); then eager runs alternate PDL on and off, `rounds` each;
    then the chain is captured in a CUDA graph with PDL off and with PDL on, each replayed twice with the switch
    set the other way (a replay keeps the edges it was captured with). Every output bitwise the reference's."""
    import dgx

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        dgx.set_pdl(False)
        ref = [t.clone() for t in chain()]
        stream.synchronize()
        for i in range(2 * rounds):
            pdl = i % 2 == 0
            dgx.set_pdl(pdl)
            outs = chain()
            stream.synchronize()
            _expect_same(ref, outs, f"eager run {i}, PDL {'on' if pdl else 'off'}")
        for pdl in (False, True):
            dgx.set_pdl(pdl)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                outs = chain()
            dgx.set_pdl(not pdl)
            for replay in range(2):
                for t in outs:
                    t.fill_(NAN if t.is_floating_point() else -1)  # the replay must write them again
                graph.replay()
                stream.synchronize()
                _expect_same(ref, outs, f"graph captured with PDL {'on' if pdl else 'off'}, replay {replay}")
            del graph
    torch.cuda.current_stream().wait_stream(stream)
    return ref


def _writer(*pairs):
    """Torch copies that write the kernels' inputs (dst, src pairs), as a predecessor in the stream would."""

    def write():
        for dst, src in pairs:
            dst.copy_(src)

    return write


@pytest.mark.parametrize("m, n, k", [(64, 2112, 7168), (64, 7168, 16384), (1000, 4096, 7168)])
def test_dense_chain(m, n, k):
    """A written by torch, then four GEMMs: two into the same D (the second must win: write after write), one forced
    onto a 2-CTA multicast cluster and one onto a split-K cluster of 4 (the cluster and PDL launch attributes
    together)."""
    import dgx
    from dgx.heuristics import max_stages
    from dgx.kernels.fp8_gemm import PAIR_M, GemmConfig

    a, b, (aq, sfa), b_fp8, d = make_dense(m, n, k, seed=1)
    _, b2, _, b2_fp8, _ = make_dense(1, n, k, seed=2)
    write = _writer((aq, aq.clone()), (sfa, sfa.clone()))
    d_pair, d_split = torch.empty_like(d), torch.empty_like(d)
    pair = GemmConfig(n, k, 128, 128, min(max_stages(128, 128), 4), pair=PAIR_M)
    split = GemmConfig(n, k, 64, 128, min(max_stages(64, 128, False, 4), 4), split_k=4)

    def chain():
        write()
        d.fill_(NAN)
        d_pair.fill_(NAN)
        d_split.fill_(NAN)
        dgx.fp8_gemm_nt((aq, sfa), b_fp8, d)
        dgx.fp8_gemm_nt((aq, sfa), b2_fp8, d)
        dgx.fp8_gemm_nt((aq, sfa), b_fp8, d_pair, config=pair)
        dgx.fp8_gemm_nt((aq, sfa), b_fp8, d_split, config=split)
        return d, d_pair, d_split

    ref_d, ref_pair, ref_split = _check_chain(chain)
    check_dense(ref_d, a, b2, (aq, sfa), b2_fp8)
    check_dense(ref_pair, a, b, (aq, sfa), b_fp8)
    check_dense(ref_split, a, b, (aq, sfa), b_fp8)


def _grouped_weights(groups, n, k):
    q = [per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(groups)]
    return torch.stack([x for x, _ in q]), torch.stack([s for _, s in q])


def test_contiguous_chain():
    """m_indices and A written by torch, then the contiguous GEMM (the heuristic takes 2-CTA clusters here)."""
    import dgx

    groups, rows, n, k = 4, 512, 4096, 7168
    m_sum = groups * rows
    aq, sfa = per_token_cast_to_fp8(torch.randn(m_sum, k, device="cuda", dtype=torch.bfloat16))
    b = _grouped_weights(groups, n, k)
    idx = torch.arange(m_sum, device="cuda", dtype=torch.int32) // rows
    idx[rows - 100 : rows] = -1  # padding in group 0's segment
    m_indices = torch.empty_like(idx)
    d = torch.empty(m_sum, n, device="cuda", dtype=torch.bfloat16)
    write = _writer((m_indices, idx), (aq, aq.clone()))

    def chain():
        write()
        d.fill_(NAN)
        dgx.m_grouped_fp8_gemm_nt_contiguous((aq, sfa), b, d, m_indices)
        return (d,)

    (ref,) = _check_chain(chain)
    assert not ref[:rows - 100].isnan().any()


def test_masked_chain():
    """masked_m written by torch (the schedulers read it in their constructors), then two masked GEMMs."""
    import dgx

    groups, m_max, n, k = 8, 128, 4096, 7168
    a16 = torch.randn(groups, m_max, k, device="cuda", dtype=torch.bfloat16)
    q = [per_token_cast_to_fp8(a16[g]) for g in range(groups)]
    aq = torch.stack([x for x, _ in q])
    sfa = dgx.get_mn_major_tma_aligned_tensor(torch.stack([s.contiguous() for _, s in q]))
    b = _grouped_weights(groups, n, k)
    counts = torch.tensor([64, 0, 128, 1, 77, 64, 100, 33], device="cuda", dtype=torch.int32)
    masked_m = torch.zeros_like(counts)
    d, d2 = (torch.empty(groups, m_max, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    write = _writer((masked_m, counts))

    def chain():
        masked_m.zero_()
        write()
        d.fill_(NAN)
        d2.fill_(NAN)
        dgx.m_grouped_fp8_gemm_nt_masked((aq, sfa), b, d, masked_m, expected_m=64)
        dgx.m_grouped_fp8_gemm_nt_masked((aq, sfa), b, d2, masked_m, expected_m=64)
        return d, d2

    ref, _ = _check_chain(chain)
    assert not ref[0, :64].isnan().any() and ref[1].isnan().all() and ref[2].isfinite().all()


def test_weight_gradient_chain():
    """D written by torch (C), then two weight gradients accumulating into it: the second reads what the first
    wrote (TMA reduce-adds), a dgx kernel's output as a dgx kernel's input."""
    import dgx

    m, n, k = 1536, 2112, 4096
    a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    b2 = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    c = torch.randn(m, n, device="cuda")
    d = torch.empty(m, n, device="cuda")

    def chain():
        d.copy_(c)
        dgx.fp8_gemm_nt(a, b, d, c=d)
        dgx.fp8_gemm_nt(a, b2, d, c=d)
        return (d,)

    (ref,) = _check_chain(chain)
    assert ref.isfinite().all()


def test_k_grouped_chain():
    """ks written by torch, D written by torch, then two K-grouped weight gradients accumulating into D (their group
    tensor maps are copied to the device on the stream before each)."""
    import dgx

    m, n, ks = 512, 1024, [1024, 0, 384, 2048]
    total = sum(ks)
    aq, sfa = per_token_cast_to_fp8(torch.randn(m, total, device="cuda", dtype=torch.bfloat16))
    bq, sfb = per_token_cast_to_fp8(torch.randn(n, total, device="cuda", dtype=torch.bfloat16))
    a_flat = torch.empty(m * total, dtype=aq.dtype, device="cuda")
    b_flat = torch.empty(n * total, dtype=bq.dtype, device="cuda")
    off = 0
    for kg in ks:
        a_flat[m * off : m * (off + kg)].view(m, kg).copy_(aq[:, off : off + kg])
        b_flat[n * off : n * (off + kg)].view(n, kg).copy_(bq[:, off : off + kg])
        off += kg
    ks_src = torch.tensor(ks, dtype=torch.int32, device="cuda")
    ks_tensor = torch.empty_like(ks_src)
    c = torch.randn(len(ks), m, n, device="cuda")
    d = torch.empty_like(c)

    def chain():
        ks_tensor.copy_(ks_src)
        d.copy_(c)
        dgx.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, ks, ks_tensor)
        dgx.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, ks, ks_tensor)
        return (d,)

    (ref,) = _check_chain(chain)
    assert torch.equal(ref[1], c[1]), "a group without K is left as it was"


def test_mqa_prefill_chain():
    """The windows written by torch, the output poisoned by torch, then the prefill logits (cleaning included)."""
    import dgx
    from mqa_utils import make_prefill, windows

    s, skv = 700, 3000
    q, kv, scales, weights = make_prefill(s, skv, seed=3)
    ks_src, ke_src = windows("random", s, skv, seed=3)
    ks, ke = torch.empty_like(ks_src), torch.empty_like(ke_src)
    out = torch.empty(s, skv, device="cuda")
    out_c = torch.empty(s, 1024, device="cuda", dtype=torch.bfloat16)
    write = _writer((ks, ks_src), (ke, ke_src))

    def chain():
        write()
        out.fill_(NAN)
        out_c.fill_(NAN)
        dgx.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, clean_logits=True, out=out)
        dgx.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, clean_logits=True, max_seqlen_k=1024,
                           logits_dtype=torch.bfloat16, out=out_c)
        return out, out_c

    ref, _ = _check_chain(chain)
    assert not ref.isnan().any()


def test_paged_mqa_chain():
    """Context lengths written by torch, then the schedule kernel (dgx) and the decode logits reading its output
    (the cleaning kernel and the logits kernel, both dgx)."""
    import dgx
    from mqa_utils import make_paged

    rng = random.Random(5)
    batch, next_n = 96, 2
    lens = [rng.randint(1, 6000) for _ in range(batch)]
    q, cache, w, ctx_src, table, _, _ = make_paged(batch, next_n, lens, seed=5)
    ctx = torch.empty_like(ctx_src)
    sched = torch.empty(dgx.get_num_sms() + 1, 2, dtype=torch.int32, device="cuda")
    max_len = 6100
    out = torch.empty(batch * next_n, max_len, device="cuda")

    def chain():
        ctx.zero_()
        ctx.copy_(ctx_src)
        sched.fill_(-1)
        out.fill_(NAN)
        dgx.get_paged_mqa_logits_metadata(ctx, 64, dgx.get_num_sms(), out=sched)
        dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, out=out)
        return sched, out

    _, ref = _check_chain(chain)
    assert not ref.isnan().any()
