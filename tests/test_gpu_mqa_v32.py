"""The indexer's new cases on the GPU against float64 references, outputs poisoned first: 16 heads (prefill and
paged), paged next_n 3 and 4, indices= (variable tokens per sequence), DeepGEMM's current names; determinism and
CUDA-graph replay with new lengths, tables and indices."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from mqa_utils import compare, make_paged, make_prefill, make_varlen, ref_paged, ref_prefill, windows  # noqa: E402


def _poisoned(shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def _lens(batch: int, low: int, high: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(batch)]


@pytest.mark.parametrize("dim", [32, 64, 128])
@pytest.mark.parametrize("kind", ["causal", "random", "empty"])
def test_prefill_16_heads(dim, kind):
    import dgx.mqa as mqa

    s, skv = 1001, 4099
    q, kv, scales, w = make_prefill(s, skv, 16, dim, seed=dim)
    ks, ke = windows(kind, s, skv, seed=dim)
    out = _poisoned((s, skv))
    mqa.fp8_fp4_mqa_logits((q, None), (kv, scales), w, ks, ke, out=out)
    compare(out, ref_prefill(q, kv, scales, w, ks, ke))


@pytest.mark.parametrize("max_seqlen_k", [1, 700])
def test_prefill_16_heads_compressed_bf16(max_seqlen_k):
    import dgx.mqa as mqa

    s, skv = 300, 2000
    q, kv, scales, w = make_prefill(s, skv, 16, 128, seed=max_seqlen_k)
    ks, ke = windows("random", s, skv, seed=4)
    out = _poisoned((s, max_seqlen_k), torch.bfloat16)
    mqa.fp8_mqa_logits(q, (kv, scales), w, ks, ke, clean_logits=False, max_seqlen_k=max_seqlen_k,
                       logits_dtype=torch.bfloat16, out=out)
    ref = ref_prefill(q, kv, scales, w, ks, ke, max_seqlen_k)
    compare(out.float().masked_fill(torch.isneginf(ref), float("-inf")), ref, tol=1e-2)


PAGED_CASES = [(h, n, b) for h in (16, 32, 64) for n in (1, 2, 3, 4) for b in (7, 300)]


@pytest.mark.parametrize("heads,next_n,batch", PAGED_CASES, ids=[f"h{c[0]}-n{c[1]}-b{c[2]}" for c in PAGED_CASES])
@pytest.mark.parametrize("clean", [False, True])
def test_paged_heads_and_next_n(heads, next_n, batch, clean):
    import dgx.mqa as mqa

    lens = _lens(batch, next_n, 9000 if batch < 100 else 3000, heads + next_n)
    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, heads, 128, seed=heads * next_n)
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 132)
    max_len = max(lens) + 70
    out = _poisoned((batch * next_n, max_len))
    mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, ctx, table, sched, max_len, clean_logits=clean, out=out)
    compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, clean))


@pytest.mark.parametrize("heads,dim,next_n", [(16, 32, 3), (16, 64, 1), (64, 32, 4), (32, 64, 3)])
def test_paged_2d_lens_bf16(heads, dim, next_n):
    import dgx.mqa as mqa

    batch = 33
    lens = _lens(batch, next_n + 1, 3000, dim)
    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, heads, dim, seed=dim + next_n)
    ctx2 = torch.stack([ctx - next_n + 1 + t for t in range(next_n)], dim=1).contiguous()
    sched = mqa.get_paged_mqa_logits_metadata(ctx2, 64, 100)
    out = mqa.fp8_paged_mqa_logits(q, cache, w, ctx2, table, sched, max(lens), clean_logits=True,
                                   logits_dtype=torch.bfloat16)
    compare(out, ref_paged(q, values, scales, w, ctx2, table, max(lens), True), tol=1e-2)


@pytest.mark.parametrize("dim,next_n", [(128, 3), (128, 4), (64, 4), (32, 3)])
def test_paged_two_passes_match_one_pass_on_two_warpgroups(dim, next_n):
    """64 heads x next_n 3/4 in two passes on three warpgroups (the default) against the whole tile on two (the
    earlier kernel, still a valid config): -inf at the same places, the finite logits within FP32 rounding (the quad
    reductions add in another order), both against float64."""
    import dgx.mqa as mqa
    from dgx.kernels.mqa_logits import MqaLogitsConfig, paged_config

    batch = 37
    lens = _lens(batch, next_n, 4000, dim + next_n)
    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, 64, dim, seed=dim * next_n)
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 132)
    max_len = max(lens) + 64
    new = paged_config(64, dim, next_n, False)
    assert new.pass_queries == 2 and new.math_wgs == 3
    old = MqaLogitsConfig(64, dim, next_n, 16, True, math_wgs=2, stream_kv=True)
    outs = []
    for config in (new, old):
        out = _poisoned((batch * next_n, max_len))
        mqa.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, out=out, config=config)
        outs.append(out)
    ref = ref_paged(q, values, scales, w, ctx, table, max_len, True)
    compare(outs[0], ref)
    compare(outs[1], ref)
    compare(outs[0], outs[1].double(), tol=1e-5)


def _varlen_case(num_seqs: int, max_tokens: int, low: int, high: int, heads: int, seed: int):
    rng = random.Random(seed)
    tokens = [rng.randint(1, max_tokens) for _ in range(num_seqs)]
    return make_varlen(tokens, [rng.randint(low, high) for _ in range(num_seqs)], heads, 128, seed)


VARLEN_CASES = [(64, 6, 100, 9000, 64), (256, 10, 1, 3000, 64), (50, 6, 64, 5000, 32), (50, 10, 1, 4000, 16),
                (3, 45, 1, 2000, 64), (1, 1, 7000, 7000, 64)]


@pytest.mark.parametrize("case", VARLEN_CASES, ids=[f"s{c[0]}-t{c[1]}-h{c[4]}" for c in VARLEN_CASES])
@pytest.mark.parametrize("clean", [False, True])
def test_paged_indices(case, clean):
    """Each token against its own sequence's keys j < its own context length; runs longer than a group (45 tokens:
    more than 32 as well, the run scan's step) are split."""
    import dgx.mqa as mqa

    num_seqs, max_tokens, low, high, heads = case
    q, cache, w, ctx, table, indices, values, scales = _varlen_case(num_seqs, max_tokens, low, high, heads, sum(case))
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 132, indices=indices)
    max_len = int(ctx.max()) + 65
    out = _poisoned((q.shape[0], max_len))
    mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, ctx, table, sched, max_len, clean_logits=clean,
                                 indices=indices, out=out)
    compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, clean))


@pytest.mark.parametrize("heads", [16, 64])
@pytest.mark.parametrize("ctas", [3, 7])
def test_paged_indices_long_runs_in_chunks(heads, ctas):
    """Runs of several groups (19 and 9 tokens: groups of 8 or 4) over long contexts (chunks of 16 blocks, each
    group's piece after the other's), split over a few CTAs so that CTAs start and stop inside a run's blocks."""
    import dgx.mqa as mqa

    q, cache, w, ctx, table, indices, values, scales = make_varlen([19, 1, 9], [5000, 70, 3333], heads, 128, seed=ctas)
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, ctas, indices=indices)
    max_len = int(ctx.max()) + 65
    for clean in (False, True):
        out = _poisoned((q.shape[0], max_len))
        mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, ctx, table, sched, max_len, clean_logits=clean,
                                     indices=indices, out=out)
        compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, clean))


def test_paged_indices_schedule_starts_at_runs():
    import dgx.mqa as mqa

    q, cache, w, ctx, table, indices, *_ = _varlen_case(200, 8, 1, 6000, 64, 9)
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 132, indices=indices).tolist()
    idx = indices.tolist()
    assert sched[-1] == [len(idx), 0]
    starts = [t for t, _ in sched[:-1] if t < len(idx)]
    assert all(t == 0 or idx[t - 1] != idx[t] for t in starts), "a CTA starts inside a run"
    assert sched == sorted(sched), "CTAs walk the runs in order"


def test_paged_indices_deterministic_and_matches_legacy_name():
    import dgx.mqa as mqa

    q, cache, w, ctx, table, indices, *_ = _varlen_case(100, 6, 100, 9000, 64, 5)
    sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, 132, indices=indices)
    first = mqa.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 9100, True, indices=indices)
    for _ in range(3):
        again = mqa.fp8_fp4_paged_mqa_logits((q, None), cache, w, ctx, table, sched, 9100, True, indices=indices)
        assert torch.equal(again, first)


def test_paged_indices_graph_replay_follows_new_lengths_and_indices():
    import dgx.mqa as mqa

    q, cache, w, ctx, table, indices, values, scales = _varlen_case(64, 6, 100, 4000, 64, 13)
    tokens, max_len = q.shape[0], 8000
    sched = torch.empty(133, 2, dtype=torch.int32, device="cuda")
    out = torch.empty(tokens, max_len, device="cuda")
    stream = torch.cuda.Stream()

    def step():
        mqa.get_paged_mqa_logits_metadata(ctx, 64, 132, indices=indices, out=sched)
        mqa.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, indices=indices, out=out)

    with torch.cuda.stream(stream):
        step()  # compile and load outside the capture
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()
    for seed in (14, 15):
        rng = random.Random(seed)
        # New runs over the same tokens (sequences of 1..6 tokens), their rows of the table alike, new lengths.
        runs, t = [], 0
        while t < tokens:
            runs.append(min(rng.randint(1, 6), tokens - t))
            t += runs[-1]
        new_idx = torch.arange(len(runs), device="cuda", dtype=torch.int32).repeat_interleave(
            torch.tensor(runs, device="cuda"))
        blocks = cache.shape[0]
        seq_rows = torch.randint(0, blocks, (len(runs), table.shape[1]), device="cuda", dtype=torch.int32)
        indices.copy_(new_idx)
        table.copy_(seq_rows.repeat_interleave(torch.tensor(runs, device="cuda"), dim=0))
        ctx.copy_(torch.randint(1, table.shape[1] * 64 + 1, ctx.shape, device="cuda", dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        # Each run reads its first token's row; the lengths here differ per token, which the kernel follows.
        compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, True))


def test_paged_next_n_4_graph_replay():
    """A captured schedule and logits call replayed with new context lengths up to the table's width (within
    max_context_len, the documented precondition): first over a table whose every entry is a block of the cache,
    then over the original table, whose entries past each sequence's first length are -1 (no block: those keys read
    as zeros, logit 0, as documented)."""
    import dgx.mqa as mqa

    batch, next_n, max_len = 40, 4, 6000
    lens = _lens(batch, 100, 5000, 31)
    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, 64, 128, seed=31, spare_blocks=100)
    assert table.shape[1] * 64 <= max_len
    original = table.clone()
    g = torch.Generator(device="cuda").manual_seed(33)
    spare = torch.randint(0, cache.shape[0], table.shape, device="cuda", generator=g, dtype=torch.int32)
    filled = torch.where(original < 0, spare, original)
    sched = torch.empty(133, 2, dtype=torch.int32, device="cuda")
    out = torch.empty(batch * next_n, max_len, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        mqa.get_paged_mqa_logits_metadata(ctx, 64, 132, out=sched)
        mqa.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, out=out)
    stream.synchronize()
    compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, True))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        mqa.get_paged_mqa_logits_metadata(ctx, 64, 132, out=sched)
        mqa.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, out=out)
    new_lens = torch.tensor(_lens(batch, next_n, table.shape[1] * 64, 32), dtype=torch.int32, device="cuda")
    assert bool((new_lens > ctx).any()), "some sequence grows past its first blocks"
    for tab in (filled, original):
        table.copy_(tab)
        ctx.copy_(new_lens)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, True))
