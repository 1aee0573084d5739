"""The DeepSeek-V3.2 indexer's MQA logits under DeepGEMM's names and parameters (dgx.mqa's kernels).

``fp8_mqa_logits`` is dgx.mqa.fp8_mqa_logits (DeepGEMM's parameters, plus ``logits_dtype`` and keyword-only
``out``/``stream``/``config``). ``get_paged_mqa_logits_metadata`` and ``fp8_paged_mqa_logits`` take DeepGEMM's
``indices`` (a query row per token with its own sequence: dgx runs it on sm_90 too). DeepGEMM's current names
``fp8_fp4_*`` come from the MQA family (dgx/families/mqa_logits_torch.py).
"""

from __future__ import annotations

from .. import mqa as _mqa
from ..mqa import fp8_mqa_logits

__all__ = ["fp8_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"]


def get_paged_mqa_logits_metadata(context_lens, block_kv: int, num_sms: int, indices=None, *, out=None, stream=None):
    """The schedule fp8_paged_mqa_logits reads (dgx.mqa.get_paged_mqa_logits_metadata): int32 [num_sms + 1, 2]."""
    return _mqa.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices, out=out, stream=stream)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len: int,
                         clean_logits: bool = False, indices=None, *, logits_dtype=None, out=None, stream=None,
                         config=None):
    """The indexer's logits for a decode step over a paged FP8 cache (dgx.mqa.fp8_paged_mqa_logits), with DeepGEMM's
    parameter order (its legacy name: `indices` before `logits_dtype`, which is keyword-only here)."""
    return _mqa.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                                     clean_logits, logits_dtype, indices, out=out, stream=stream, config=config)
