"""Inputs and float64 references for the MQA-logits GPU tests and benchmarks (needs torch with CUDA)."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (FP8 values, float32 scale per row): amax scaled to 448, like the indexer's KV cache."""
    amax = x.abs().float().amax(dim=-1).clamp(min=1e-4)
    scale = amax / 448.0
    return (x.float() / scale.unsqueeze(-1)).to(FP8), scale


def make_prefill(seq_len: int, seq_len_kv: int, heads: int = 64, dim: int = 128, seed: int = 0):
    """(q fp8 [S, H, D], kv fp8 [S_kv, D], kv scales [S_kv], weights [S, H]) on the GPU, fresh random data."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(seq_len, heads, dim, device="cuda", generator=g).to(FP8)
    kv, scales = quantize_rows(torch.randn(seq_len_kv, dim, device="cuda", generator=g))
    weights = torch.randn(seq_len, heads, device="cuda", generator=g)
    return q, kv, scales, weights


def windows(kind: str, seq_len: int, seq_len_kv: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(ks, ke) int32 [S]: causal (the queries are the last S keys), empty, full or random windows."""
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    i = torch.arange(seq_len, device="cuda")
    if kind == "causal":
        ks = torch.zeros(seq_len, device="cuda", dtype=torch.int64)
        ke = (seq_len_kv - seq_len + i + 1).clamp(0, seq_len_kv)
    elif kind == "empty":
        ks = torch.randint(0, seq_len_kv + 1, (seq_len,), device="cuda", generator=g)
        ke = ks.clone()
    elif kind == "full":
        ks = torch.zeros(seq_len, device="cuda", dtype=torch.int64)
        ke = torch.full((seq_len,), seq_len_kv, device="cuda")
    elif kind == "random":
        a = torch.randint(0, seq_len_kv + 1, (seq_len,), device="cuda", generator=g)
        b = torch.randint(0, seq_len_kv + 1, (seq_len,), device="cuda", generator=g)
        ks, ke = torch.minimum(a, b), torch.maximum(a, b)
    else:
        raise ValueError(kind)
    return ks.to(torch.int32), ke.to(torch.int32)


def causal_anchor(seq_len: int, seq_len_kv: int, heads: int = 64, dim: int = 128):
    """A prefill benchmark case (DeepGEMM's and dgx bench's): inputs, causal windows, a logits buffer, and the FLOPs
    inside the windows (2 H D per query-key pair). Returns (q, kv, scales, weights, ks, ke, out, flops)."""
    q, kv, sc, w = make_prefill(seq_len, seq_len_kv, heads, dim)
    ks, ke = windows("causal", seq_len, seq_len_kv)
    flops = 2 * heads * dim * (ke.long() - ks.long()).sum().item()
    return q, kv, sc, w, ks, ke, torch.empty(seq_len, seq_len_kv, device="cuda"), flops


def ref_prefill(q, kv, scales, weights, ks, ke, max_seqlen_k: int = 0, chunk: int = 32) -> torch.Tensor:
    """float64 logits [S, S_kv] (or compressed [S, max_seqlen_k]) with -inf outside the windows."""
    seq_len, seq_len_kv = q.shape[0], kv.shape[0]
    k = kv.double() * scales.double().unsqueeze(1)
    width = max_seqlen_k or seq_len_kv
    out = torch.full((seq_len, width), float("-inf"), dtype=torch.float64, device="cuda")
    cols = torch.arange(seq_len_kv, device="cuda")
    for s in range(0, seq_len, chunk):
        qs = q[s:s + chunk].double()
        score = torch.einsum("qhd,jd->qhj", qs, k).relu()
        logits = torch.einsum("qhj,qh->qj", score, weights[s:s + chunk].double())
        lo, hi = ks[s:s + chunk].long().clamp(0, seq_len_kv), ke[s:s + chunk].long().clamp(0, seq_len_kv)
        inside = (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])
        if max_seqlen_k:
            pos = cols[None, :] - lo[:, None]
            keep = inside & (pos < max_seqlen_k)
            rows = torch.arange(logits.shape[0], device="cuda")[:, None].expand_as(keep)
            out[s:s + chunk][rows[keep], pos[keep]] = logits[keep]
        else:
            out[s:s + chunk] = torch.where(inside, logits, torch.full_like(logits, float("-inf")))
    return out


def make_paged(batch: int, next_n: int, context_lens: list[int], heads: int = 64, dim: int = 128, seed: int = 0,
               spare_blocks: int = 3):
    """(q, kv_cache uint8 [blocks, 64, 1, D + 4], weights, context_lens int32 [B], block_table int32 [B, W],
    kv values fp8 [blocks, 64, D], kv scales [blocks, 64]) with shuffled blocks."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    blocks_per_seq = [(c + 63) // 64 for c in context_lens]
    total = sum(blocks_per_seq) + spare_blocks
    width = max(blocks_per_seq + [1])
    q = torch.randn(batch, next_n, heads, dim, device="cuda", generator=g).to(FP8)
    cache = torch.empty(total, 64 * (dim + 4), dtype=torch.uint8, device="cuda")
    step = max(1, (1 << 28) // (64 * dim * 4))  # blocks per chunk: 1 GB of float32 at a time
    for c in range(0, total, step):
        v, sc = quantize_rows(torch.randn(min(step, total - c), 64, dim, device="cuda", generator=g))
        cache[c:c + step, : 64 * dim] = v.view(torch.uint8).reshape(-1, 64 * dim)
        cache[c:c + step, 64 * dim:] = sc.contiguous().view(torch.uint8).reshape(-1, 64 * 4)
    block = 64 * (dim + 4)
    values = cache.view(FP8).as_strided((total, 64, dim), (block, dim, 1))
    scales = cache.view(torch.float32).as_strided((total, 64), (block // 4, 1), 64 * dim // 4)
    perm = torch.randperm(total, device="cuda", generator=g).to(torch.int32)
    table = torch.full((batch, width), -1, dtype=torch.int32, device="cuda")
    used = 0
    for b, nb in enumerate(blocks_per_seq):
        table[b, :nb] = perm[used:used + nb]
        used += nb
    weights = torch.randn(batch * next_n, heads, device="cuda", generator=g)
    lens = torch.tensor(context_lens, dtype=torch.int32, device="cuda")
    return q, cache.view(total, 64, 1, dim + 4), weights, lens, table, values, scales


def ref_paged(q, values, scales, weights, context_lens, table, max_context_len: int, clean: bool):
    """float64 logits [B * next_n, max_context_len]: inside visited blocks -inf past each query's causal limit;
    past them -inf when `clean`, else NaN (= not compared). Block ids outside [0, blocks) read as zeros (logit 0),
    as the kernel documents (not Python's negative indexing: a -1 left in a table is no block)."""
    batch, next_n = q.shape[0], q.shape[1]
    out = torch.full((batch * next_n, max_context_len), float("-inf") if clean else float("nan"),
                     dtype=torch.float64, device="cuda")
    lens = context_lens.tolist()
    for b in range(batch):
        ctx = lens[b] if context_lens.ndim == 1 else max(lens[b])
        nb = (ctx + 63) // 64
        if nb == 0:
            continue
        ids = table[b, :nb].long()
        valid = ((ids >= 0) & (ids < values.shape[0])).double()
        ids = ids.clamp(0, values.shape[0] - 1)
        k = values[ids].double() * (scales[ids].double() * valid.unsqueeze(-1)).unsqueeze(-1)
        k = k.reshape(nb * 64, -1)
        score = torch.einsum("thd,jd->thj", q[b].double(), k).relu()
        logits = torch.einsum("thj,th->tj", score, weights[b * next_n:(b + 1) * next_n].double())
        j = torch.arange(nb * 64, device="cuda")
        if context_lens.ndim == 1:
            limit = torch.tensor([lens[b] - next_n + t + 1 for t in range(next_n)], device="cuda")
        else:
            limit = torch.tensor(lens[b], device="cuda")
        logits = torch.where(j[None, :] < limit[:, None], logits, torch.full_like(logits, float("-inf")))
        w = min(nb * 64, max_context_len)
        out[b * next_n:(b + 1) * next_n, :w] = logits[:, :w]
    return out


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float = 2e-3) -> None:
    """-inf exactly where the reference has it, finite elsewhere (NaN in ref = not compared); relative error
    ||out - ref|| / ||ref|| below `tol` over the finite entries."""
    o = out.double()
    checked = ~ref.isnan()
    neg = torch.isneginf(ref) & checked
    if not torch.equal(torch.isneginf(o) & checked, neg):
        bad = ((torch.isneginf(o) & checked) != neg).nonzero()[:5].tolist()
        raise AssertionError(f"-inf positions differ, e.g. at {bad}")
    fin = checked & ~neg
    if not torch.isfinite(o[fin]).all():
        raise AssertionError("non-finite logits where the reference is finite (unwritten output?)")
    if fin.any():
        err = (o[fin] - ref[fin]).norm() / ref[fin].norm().clamp(min=1e-30)
        if err > tol:
            raise AssertionError(f"relative error {err:.3e} > {tol}")


def graphed(fn):
    """`fn` captured in a CUDA graph after one eager call (which compiles and loads): a replay runs its kernels
    with no host work between them. Returns the replay function."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        fn()
    return graph.replay


def make_varlen(tokens_per_seq: list[int], base_lens: list[int], heads: int = 64, dim: int = 128, seed: int = 0):
    """A decode step with a variable number of query tokens per sequence, as DeepGEMM's `indices=` takes it: one
    row per token (B = sum of tokens_per_seq, next_n 1), token i of sequence b with context base_lens[b] + i
    (keys j < that), and the sequence's block-table row repeated for each of its tokens.

    Returns (q [T, 1, H, D], kv_cache, weights [T, H], context_lens int32 [T, 1], block_table [T, W],
    indices int32 [T], kv values, kv scales)."""
    ctx_max = [base + t - 1 for base, t in zip(base_lens, tokens_per_seq)]
    _, cache, _, _, seq_table, values, scales = make_paged(len(base_lens), 1, ctx_max, heads, dim, seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    total = sum(tokens_per_seq)
    q = torch.randn(total, 1, heads, dim, device="cuda", generator=g).to(FP8)
    weights = torch.randn(total, heads, device="cuda", generator=g)
    counts = torch.tensor(tokens_per_seq, device="cuda")
    indices = torch.arange(len(base_lens), device="cuda", dtype=torch.int32).repeat_interleave(counts)
    lens = torch.cat([torch.arange(t, device="cuda") + base for base, t in zip(base_lens, tokens_per_seq)])
    table = seq_table.repeat_interleave(counts, dim=0).contiguous()
    return q, cache, weights, lens.to(torch.int32).view(total, 1), table, indices, values, scales
