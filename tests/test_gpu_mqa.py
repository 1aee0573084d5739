"""MQA logits on the GPU: prefill and paged decode against float64 references on fresh random inputs, with the
output poisoned first; determinism; CUDA-graph replay with new lengths and tables."""

import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from mqa_utils import compare, make_paged, make_prefill, ref_paged, ref_prefill, windows  # noqa: E402

# Every S and every S_kv of the issue, each window kind on several of them.
PREFILL_CASES = [
    (s, skv, kind)
    for i, (s, skv) in enumerate([(s, skv) for s in (1, 100, 2048, 4097) for skv in (1, 8192, 65536 + 37)])
    for kind in (("causal", "random") if i % 2 == 0 else ("empty", "full"))
]


def _poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("s,skv,kind", PREFILL_CASES)
def test_prefill(s, skv, kind):
    import dgx

    q, kv, scales, w = make_prefill(s, skv, seed=s + skv)
    ks, ke = windows(kind, s, skv, seed=s)
    out = _poisoned((s, skv), torch.float32)
    got = dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke, out=out)
    assert got is out
    compare(out, ref_prefill(q, kv, scales, w, ks, ke))


@pytest.mark.parametrize("heads,dim", [(32, 32), (32, 64), (32, 128), (64, 32), (64, 64), (64, 128)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_prefill_heads_dims_dtypes(heads, dim, dtype):
    import dgx

    s, skv = 333, 2111
    q, kv, scales, w = make_prefill(s, skv, heads, dim, seed=heads + dim)
    ks, ke = windows("random", s, skv, seed=dim)
    out = dgx.fp8_mqa_logits((q, None), (kv, scales), w, ks, ke, logits_dtype=getattr(torch, dtype))
    assert out.dtype == getattr(torch, dtype) and out.shape == (s, skv)
    compare(out, ref_prefill(q, kv, scales, w, ks, ke), tol=2e-3 if dtype == "float32" else 1e-2)


@pytest.mark.parametrize("max_seqlen_k", [1, 100, 3000])
@pytest.mark.parametrize("kind", ["causal", "random"])
def test_prefill_compressed(max_seqlen_k, kind):
    import dgx

    s, skv = 777, 4000
    q, kv, scales, w = make_prefill(s, skv, seed=max_seqlen_k)
    ks, ke = windows(kind, s, skv, seed=max_seqlen_k)
    out = _poisoned((s, max_seqlen_k), torch.float32)
    dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke, max_seqlen_k=max_seqlen_k, out=out)
    compare(out, ref_prefill(q, kv, scales, w, ks, ke, max_seqlen_k))


def test_prefill_unclean_leaves_outside_untouched():
    import dgx

    s, skv = 300, 5000
    q, kv, scales, w = make_prefill(s, skv, seed=3)
    ks, ke = windows("random", s, skv, seed=3)
    out = _poisoned((s, skv), torch.float32)
    dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke, clean_logits=False, out=out)
    ref = ref_prefill(q, kv, scales, w, ks, ke)
    outside = torch.isneginf(ref)
    assert out[outside].isnan().all(), "clean_logits=False wrote outside the windows"
    compare(out.masked_fill(outside, float("-inf")), ref)


def test_prefill_out_of_range_windows():
    """ks < 0, ke > S_kv and ks > ke are clamped / empty, never read or written out of bounds."""
    import dgx

    s, skv = 64, 1000
    q, kv, scales, w = make_prefill(s, skv, seed=5)
    ks = torch.randint(-3000, 3000, (s,), device="cuda", dtype=torch.int32)
    ke = torch.randint(-3000, 3000, (s,), device="cuda", dtype=torch.int32)
    out = dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke)
    compare(out, ref_prefill(q, kv, scales, w, ks, ke))


def test_prefill_deterministic():
    import dgx

    s, skv = 1024, 9000
    q, kv, scales, w = make_prefill(s, skv, seed=9)
    ks, ke = windows("causal", s, skv)
    first = dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke)
    for _ in range(3):
        assert torch.equal(dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ke), first)


def _lens(batch: int, low: int, high: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(batch)]


PAGED_CASES = [
    (1, 1, [65536]), (1, 2, [1]), (7, 1, _lens(7, 1, 65536, 1)), (7, 2, _lens(7, 1, 9000, 2)),
    (256, 1, _lens(256, 1, 8192, 3)), (256, 2, _lens(256, 1, 4000, 4)), (4096, 1, _lens(4096, 1, 700, 5)),
    (4096, 2, _lens(4096, 60, 300, 6)),
]


@pytest.mark.parametrize("batch,next_n,lens", PAGED_CASES, ids=[f"b{c[0]}-n{c[1]}" for c in PAGED_CASES])
@pytest.mark.parametrize("clean", [False, True])
def test_paged(batch, next_n, lens, clean):
    import dgx

    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, seed=batch + next_n)
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, dgx.get_num_sms())
    max_len = max(lens) + 5
    out = _poisoned((batch * next_n, max_len), torch.float32)
    dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=clean, out=out)
    compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, clean))


@pytest.mark.parametrize("heads,dim,dtype", [(32, 32, "bfloat16"), (32, 128, "float32"), (64, 64, "bfloat16")])
def test_paged_heads_dims_2d_lens(heads, dim, dtype):
    import dgx

    batch, next_n = 33, 2
    lens = _lens(batch, 2, 3000, 7)
    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, heads, dim, seed=heads)
    ctx2 = torch.stack([ctx - 1, ctx], dim=1).contiguous()  # per-token lengths [B, next_n]
    sched = dgx.get_paged_mqa_logits_metadata(ctx2, 64, 100)
    out = dgx.fp8_paged_mqa_logits(q, cache, w, ctx2, table, sched, max(lens), clean_logits=True,
                                   logits_dtype=getattr(torch, dtype))
    ref = ref_paged(q, values, scales, w, ctx2, table, max(lens), True)
    compare(out, ref, tol=2e-3 if dtype == "float32" else 1e-2)


def test_paged_bad_block_ids_stay_in_bounds():
    """Ids outside [0, num_blocks) read zeros (logit 0), never memory outside the cache."""
    import dgx

    batch, lens = 5, [100, 200, 64, 1, 500]
    q, cache, w, ctx, table, values, scales = make_paged(batch, 1, lens, seed=11)
    table[0, 0] = -7
    table[1, 1] = 1 << 30
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, 132)
    out = dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 600, clean_logits=True)
    assert (out[0, :64] == 0).all() and (out[1, 64:128][: 200 - 64] == 0).all()
    ref = ref_paged(q, values, scales, w, ctx, table.clamp(0, cache.shape[0] - 1), 600, True)
    keep = torch.ones_like(ref, dtype=torch.bool)
    keep[0, :64] = False
    keep[1, 64:128] = False
    compare(out.masked_fill(~keep, float("nan")), ref.masked_fill(~keep, float("nan")))


def test_paged_schedule_balanced():
    import dgx

    lens = _lens(300, 1, 20000, 13)
    ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, 132).tolist()
    blocks = [(c + 63) // 64 for c in lens]
    prefix = [0]
    for nb in blocks:
        prefix.append(prefix[-1] + nb)
    total = prefix[-1]
    starts = [prefix[b] + k for b, k in sched]
    assert sched[-1] == [300, 0] and starts[0] == 0 and starts[-1] == total
    sizes = [b - a for a, b in zip(starts, starts[1:])]
    assert max(sizes) - min(sizes) <= 1


def test_paged_graph_replay_follows_new_lengths():
    import dgx

    batch, next_n = 64, 2
    lens = _lens(batch, 100, 5000, 17)
    q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, lens, seed=17, spare_blocks=200)
    max_len = 6000
    sched = torch.empty(133, 2, dtype=torch.int32, device="cuda")
    out = torch.empty(batch * next_n, max_len, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dgx.get_paged_mqa_logits_metadata(ctx, 64, 132, out=sched)  # warm up (compile, load) outside the capture
        dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, out=out)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        dgx.get_paged_mqa_logits_metadata(ctx, 64, 132, out=sched)
        dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, max_len, clean_logits=True, out=out)
    for seed in (18, 19):
        new_lens = _lens(batch, 1, table.shape[1] * 64, seed)
        ctx.copy_(torch.tensor(new_lens, dtype=torch.int32, device="cuda"))
        table.copy_(torch.randint(0, cache.shape[0], table.shape, device="cuda", dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        compare(out, ref_paged(q, values, scales, w, ctx, table, max_len, True))


def test_paged_deterministic():
    import dgx

    lens = _lens(100, 1, 9000, 21)
    q, cache, w, ctx, table, *_ = make_paged(100, 2, lens, seed=21)
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, 132)
    first = dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 9000, clean_logits=True)
    for _ in range(3):
        assert torch.equal(dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 9000, clean_logits=True), first)


@pytest.mark.parametrize("math_wgs", [2, 3])
def test_paged_many_small_groups_repeatable(math_wgs):
    """Schedules mixing one-block sequences with long ones, replayed many times: a math warpgroup that skips many
    small groups must never take a stale KV stage (each warpgroup has its own stages; bitwise equal every run)."""
    import dgx
    from dgx.kernels.mqa_logits import MqaLogitsConfig

    rng = random.Random(23)
    lens = [rng.randint(1, 64) if rng.random() < 0.7 else rng.randint(3000, 9000) for _ in range(512)]
    q, cache, w, ctx, table, values, scales = make_paged(512, 1, lens, seed=23)
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, 132)
    cfg = MqaLogitsConfig(64, 128, 1, 15 if math_wgs == 3 else 16, True, math_wgs=math_wgs)
    first = dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 9000, clean_logits=True, config=cfg)
    compare(first, ref_paged(q, values, scales, w, ctx, table, 9000, True))
    flush = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    for _ in range(20):
        flush.zero_()
        again = dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, 9000, clean_logits=True, config=cfg)
        assert torch.equal(again, first)


def test_prefill_without_keys():
    """S_kv = 0: the full form has no columns; the compressed form is all -inf (clean) or untouched."""
    import dgx

    q, kv, scales, w = make_prefill(50, 0, seed=31)
    ks = torch.zeros(50, dtype=torch.int32, device="cuda")
    assert dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ks).shape == (50, 0)
    out = dgx.fp8_mqa_logits(q, (kv, scales), w, ks, ks, max_seqlen_k=7)
    assert out.shape == (50, 7) and torch.isneginf(out).all()
