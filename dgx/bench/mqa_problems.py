"""Inputs and float64 references for one MQA-logits case (torch; the GPU in the benchmark, the CPU in tests).

The inputs follow dgx.mqa's layouts (the benchmark's own builders, independent of the tests' helpers):

* prefill: ``q`` FP8 [S, H, D], ``kv`` FP8 [S_kv, D] with ``kv_scales`` FP32 [S_kv] (one per key, amax/448),
  ``weights`` FP32 [S, H], causal windows ``ks``, ``ke`` int32 [S].
* decode: ``q`` FP8 [B, next_n, H, D], ``kv_cache`` uint8 [blocks, 64, 1, D + 4] (each block's 64 × D FP8
  values, then its 64 FP32 scales; built a chunk of blocks at a time, so 9 GB of cache never needs 9 GB of
  float32), ``weights`` FP32 [B · next_n, H], ``context_lens`` int32 [B], ``block_table`` int32 [B, max
  blocks] (the blocks of all sequences shuffled over the cache; -1 past a sequence's last block).

The reference is float64 on a subset of the logits rows (:func:`check_rows`), so checking stays cheap on
the large cases: ``-inf`` where the query may not see the key; NaN (not compared) where the call may leave
the output as it was (decode, past the blocks a sequence uses).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .mqa_check import check_logits
from .mqa_suites import BLOCK_KV, MQA, SCALE_BYTES, MqaShape

FP8_MAX = 448.0
CHECK_ROWS = 64
"""Prefill rows checked against the float64 reference (evenly spaced, first and last included)."""
CHECK_SEQUENCES = 8
"""Decode sequences checked (evenly spaced, the shortest and longest included): all their next_n rows."""
CACHE_CHUNK_VALUES = 1 << 26
"""Float32 values drawn at a time while the KV cache is filled (256 MB)."""
REF_CHUNK_VALUES = 1 << 25
"""Float64 scores per reference chunk (256 MB)."""


def _torch():
    import torch

    return torch


def quantize_rows(x):
    """``x [..., D]`` → (FP8 values, FP32 scale per row): amax scaled to 448, like the indexer's KV cache."""
    torch = _torch()
    scale = x.abs().float().amax(dim=-1).clamp(min=1e-4) / FP8_MAX
    return (x.float() / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale


def check_rows(n: int, count: int) -> list[int]:
    """Up to ``count`` row indices in ``[0, n)``, evenly spaced, the first and the last included."""
    if n <= count:
        return list(range(n))
    return sorted({round(i * (n - 1) / (count - 1)) for i in range(count)})


def causal_windows(seq_len: int, seq_len_kv: int, device: str):
    """(ks, ke) int32 [S]: query i sees keys ``[0, S_kv - S + i + 1)`` (clamped to [0, S_kv])."""
    torch = _torch()
    i = torch.arange(seq_len, device=device)
    ke = (seq_len_kv - seq_len + i + 1).clamp(0, seq_len_kv)
    return torch.zeros(seq_len, dtype=torch.int32, device=device), ke.to(torch.int32)


@dataclasses.dataclass
class MqaProblem:
    """One MQA case: dgx's inputs (``tensors``), the checked rows and their float64 reference."""

    shape: MqaShape
    tensors: dict[str, Any]
    rows: list[int]
    ref: Any  # float64 [len(rows), width]
    context_lens: list[int] = dataclasses.field(default_factory=list)  # host copy (decode)

    def row_index(self):
        """``rows`` as an index tensor on the inputs' device."""
        torch = _torch()
        return torch.tensor(self.rows, dtype=torch.long, device=self.ref.device)

    def check(self, out_rows) -> float:
        """calc_diff of an implementation's checked rows (see :func:`dgx.bench.mqa_check.check_logits`)."""
        return check_logits(out_rows, self.ref, self.rows)

    def free(self) -> None:
        self.tensors.clear()
        self.ref = None


# --------------------------------------------------------------------------------------------------
# prefill


def ref_prefill_rows(q, kv, scales, weights, ks, ke, rows: list[int]):
    """float64 logits of ``rows`` [len(rows), S_kv], -inf outside each row's window."""
    torch = _torch()
    seq_len_kv = kv.shape[0]
    heads = q.shape[1]
    k = kv.double() * scales.double().unsqueeze(1)
    idx = torch.tensor(rows, dtype=torch.long, device=q.device)
    out = torch.empty(len(rows), seq_len_kv, dtype=torch.float64, device=q.device)
    cols = torch.arange(seq_len_kv, device=q.device)
    step = max(1, REF_CHUNK_VALUES // (heads * max(seq_len_kv, 1)))
    for s in range(0, len(rows), step):
        sel = idx[s:s + step]
        score = torch.einsum("qhd,jd->qhj", q[sel].double(), k).relu()
        logits = torch.einsum("qhj,qh->qj", score, weights[sel].double())
        lo, hi = ks[sel].long().clamp(0, seq_len_kv), ke[sel].long().clamp(0, seq_len_kv)
        inside = (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])
        out[s:s + step] = torch.where(inside, logits, torch.full_like(logits, float("-inf")))
    return out


def build_prefill(shape: MqaShape, seed: int = 0, device: str = "cuda") -> MqaProblem:
    torch = _torch()
    g = torch.Generator(device=device)
    g.manual_seed(seed * 7919 + 101)
    s, skv, h, d = shape.seq_len, shape.seq_len_kv, shape.heads, shape.dim
    q = torch.randn(s, h, d, device=device, generator=g).to(torch.float8_e4m3fn)
    kv, scales = quantize_rows(torch.randn(skv, d, device=device, generator=g))
    weights = torch.randn(s, h, device=device, generator=g)
    ks, ke = causal_windows(s, skv, device)
    rows = check_rows(s, CHECK_ROWS)
    ref = ref_prefill_rows(q, kv, scales, weights, ks, ke, rows)
    tensors = {"q": q, "kv": kv, "kv_scales": scales.contiguous(), "weights": weights, "ks": ks, "ke": ke}
    return MqaProblem(shape, tensors, rows, ref)


# --------------------------------------------------------------------------------------------------
# decode


def dequant_blocks(cache, ids, dtype):
    """The keys of cache blocks ``ids`` (int64 [..., n]) dequantised: ``dtype`` [..., n · 64, D].

    ``cache`` is uint8 [blocks, 64, 1, D + 4]: each block's 64 × D FP8 values, then its 64 FP32 scales."""
    torch = _torch()
    blocks, dim = cache.shape[0], cache.shape[3] - SCALE_BYTES
    raw = cache.reshape(blocks, BLOCK_KV * (dim + SCALE_BYTES))[ids]  # gathered: contiguous
    values = raw[..., : BLOCK_KV * dim].view(torch.float8_e4m3fn)
    values = values.reshape(*ids.shape, BLOCK_KV, dim)
    scales = raw[..., BLOCK_KV * dim:].contiguous().view(torch.float32)  # [..., n, 64]
    keys = values.to(torch.float64 if dtype == torch.float64 else torch.float32) * scales.unsqueeze(-1)
    return keys.to(dtype).reshape(*ids.shape[:-1], ids.shape[-1] * BLOCK_KV, dim)


def fill_cache(blocks: int, dim: int, gen, device: str):
    """uint8 [blocks, 64, 1, D + 4] of random quantised keys, filled a chunk of blocks at a time."""
    torch = _torch()
    block_bytes = BLOCK_KV * (dim + SCALE_BYTES)
    cache = torch.empty(blocks, block_bytes, dtype=torch.uint8, device=device)
    step = max(1, CACHE_CHUNK_VALUES // (BLOCK_KV * dim))
    for c in range(0, blocks, step):
        n = min(step, blocks - c)
        v, sc = quantize_rows(torch.randn(n, BLOCK_KV, dim, device=device, generator=gen))
        cache[c:c + n, : BLOCK_KV * dim] = v.view(torch.uint8).reshape(n, BLOCK_KV * dim)
        cache[c:c + n, BLOCK_KV * dim:] = sc.contiguous().view(torch.uint8).reshape(n, BLOCK_KV * SCALE_BYTES)
    return cache.view(blocks, BLOCK_KV, 1, dim + SCALE_BYTES)


def ref_paged_rows(q, cache, weights, lens: list[int], table, seqs: list[int], width: int):
    """float64 logits of every row of the sequences ``seqs`` [len(seqs) · next_n, width]: inside a sequence's
    blocks, -inf past each query's causal limit (query t sees keys ``j <= len - next_n + t``); NaN past its
    blocks (the call leaves those positions as they were)."""
    torch = _torch()
    next_n, dim = q.shape[1], q.shape[3]
    out = torch.full((len(seqs) * next_n, width), float("nan"), dtype=torch.float64, device=q.device)
    for i, b in enumerate(seqs):
        nb = (lens[b] + BLOCK_KV - 1) // BLOCK_KV
        if nb == 0:
            continue
        ids = table[b, :nb].long()
        k = dequant_blocks(cache, ids, torch.float64)
        score = torch.einsum("thd,jd->thj", q[b].double(), k).relu()
        logits = torch.einsum("thj,th->tj", score, weights[b * next_n:(b + 1) * next_n].double())
        j = torch.arange(nb * BLOCK_KV, device=q.device)
        limit = torch.tensor([lens[b] - next_n + t + 1 for t in range(next_n)], device=q.device)
        logits = torch.where(j[None, :] < limit[:, None], logits, torch.full_like(logits, float("-inf")))
        w = min(nb * BLOCK_KV, width)
        out[i * next_n:(i + 1) * next_n, :w] = logits[:, :w]
    return out


def check_sequences(lens: list[int], count: int) -> list[int]:
    """Evenly spaced sequences, plus the shortest and the longest."""
    picked = set(check_rows(len(lens), count))
    if lens:
        picked.add(min(range(len(lens)), key=lambda b: lens[b]))
        picked.add(max(range(len(lens)), key=lambda b: lens[b]))
    return sorted(picked)


def build_paged(shape: MqaShape, seed: int = 0, device: str = "cuda") -> MqaProblem:
    torch = _torch()
    g = torch.Generator(device=device)
    g.manual_seed(seed * 7919 + 211)
    batch, next_n, h, d = shape.batch, shape.next_n, shape.heads, shape.dim
    lens = list(shape.context_lens)
    per_seq = [(c + BLOCK_KV - 1) // BLOCK_KV for c in lens]
    blocks = sum(per_seq)
    q = torch.randn(batch, next_n, h, d, device=device, generator=g).to(torch.float8_e4m3fn)
    cache = fill_cache(blocks, d, g, device)
    perm = torch.randperm(blocks, device=device, generator=g).to(torch.int32)
    table = torch.full((batch, max(per_seq + [1])), -1, dtype=torch.int32, device=device)
    used = 0
    for b, nb in enumerate(per_seq):
        table[b, :nb] = perm[used:used + nb]
        used += nb
    weights = torch.randn(batch * next_n, h, device=device, generator=g)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    seqs = check_sequences(lens, CHECK_SEQUENCES)
    rows = [b * next_n + t for b in seqs for t in range(next_n)]
    ref = ref_paged_rows(q, cache, weights, lens, table, seqs, shape.max_context_len)
    tensors = {"q": q, "kv_cache": cache, "weights": weights, "context_lens": context_lens, "block_table": table}
    return MqaProblem(shape, tensors, rows, ref, lens)


def build_mqa_problem(shape: MqaShape, seed: int = 0, device: str = "cuda") -> MqaProblem:
    """Random inputs for ``shape`` (seeded), with the float64 reference of the checked rows."""
    if shape.suite == MQA:
        return build_prefill(shape, seed, device)
    return build_paged(shape, seed, device)
