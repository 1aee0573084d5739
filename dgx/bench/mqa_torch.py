"""The MQA-logits peer: plain torch, the way a user writes it without dgx.

Dequantise the keys to BF16 once per call, then per chunk of queries (prefill) or of sequences (decode) one
BF16 matmul over the heads, ReLU, the weights, the sum over heads, and -inf where a query may not see the key.
Chunks are sized so the FP32 scores of one chunk stay near 1 GB, whatever the case.
"""

from __future__ import annotations

from .mqa_problems import dequant_blocks
from .mqa_suites import BLOCK_KV

CHUNK_BYTES = 1 << 30
"""FP32 scores (and dequantised keys) per chunk."""
PREFILL_MAX_CHUNK = 256
"""Queries per chunk at most (prefill)."""


def prefill_chunk(heads: int, seq_len_kv: int) -> int:
    """Queries per chunk: at most 256, and scores [chunk, H, S_kv] FP32 within :data:`CHUNK_BYTES`."""
    return max(1, min(PREFILL_MAX_CHUNK, CHUNK_BYTES // (heads * max(seq_len_kv, 1) * 4)))


def prefill_logits(q, kv, scales, weights, ks, ke, chunk: int | None = None):
    """FP32 logits [S, S_kv]: ``sum_h w[i, h] · relu(q[i, h] · k[j])`` inside ``[ks[i], ke[i])``, else -inf."""
    import torch

    k = (kv.float() * scales[:, None]).bfloat16()
    s, skv = q.shape[0], kv.shape[0]
    step = chunk or prefill_chunk(q.shape[1], skv)
    out = torch.empty(s, skv, dtype=torch.float32, device=q.device)
    cols = torch.arange(skv, device=q.device)
    for i in range(0, s, step):
        qc = q[i:i + step].bfloat16()
        score = torch.einsum("qhd,jd->qhj", qc, k).float().relu_()
        logit = torch.einsum("qhj,qh->qj", score, weights[i:i + step])
        inside = (cols[None] >= ks[i:i + step, None]) & (cols[None] < ke[i:i + step, None])
        out[i:i + step] = logit.masked_fill_(~inside, float("-inf"))
    return out


def paged_chunk(heads: int, next_n: int, dim: int, width: int) -> int:
    """Sequences per chunk: scores [chunk, next_n, H, width] and FP32 keys [chunk, width, D] within
    :data:`CHUNK_BYTES` each."""
    width = max(width, 1)
    return max(1, min(CHUNK_BYTES // (next_n * heads * width * 4), CHUNK_BYTES // (width * dim * 4)))


def paged_logits(q, kv_cache, weights, context_lens, block_table, lens: list[int], max_context_len: int,
                 chunk: int | None = None):
    """FP32 logits [B · next_n, max_context_len]: per chunk of sequences, gather their blocks through the
    block table, dequantise to BF16, score; -inf past each query's causal limit (query t of a sequence of
    length c sees keys ``j <= c - next_n + t``) and past the sequence. ``lens`` is the host copy of
    ``context_lens`` (the chunk widths are planned on the host)."""
    import torch

    batch, next_n, heads, dim = q.shape
    out = torch.full((batch * next_n, max_context_len), float("-inf"), dtype=torch.float32, device=q.device)
    step = chunk or paged_chunk(heads, next_n, dim, max(lens, default=0))
    t = torch.arange(next_n, device=q.device)
    w = weights.view(batch, next_n, heads)
    for b0 in range(0, batch, step):
        b1 = min(batch, b0 + step)
        nb = (max(lens[b0:b1]) + BLOCK_KV - 1) // BLOCK_KV
        if nb == 0:
            continue
        ids = block_table[b0:b1, :nb].long().clamp(min=0)  # past a sequence's blocks: masked below
        k = dequant_blocks(kv_cache, ids, torch.bfloat16)  # [c, nb · 64, D]
        score = torch.einsum("bthd,bjd->bthj", q[b0:b1].bfloat16(), k).float().relu_()
        logit = torch.einsum("bthj,bth->btj", score, w[b0:b1])  # [c, next_n, nb · 64]
        j = torch.arange(nb * BLOCK_KV, device=q.device)
        limit = context_lens[b0:b1].long()[:, None] - next_n + t[None, :] + 1  # [c, next_n]
        logit.masked_fill_(j[None, None, :] >= limit[:, :, None], float("-inf"))
        cols = min(nb * BLOCK_KV, max_context_len)
        out[b0 * next_n:b1 * next_n, :cols] = logit.reshape((b1 - b0) * next_n, -1)[:, :cols]
    return out
