"""The DeepSeek-V3.2 indexer's MQA logits under DeepGEMM's names and parameters (dgx.mqa's kernels).

``fp8_mqa_logits`` is dgx.mqa.fp8_mqa_logits (DeepGEMM's parameters, plus ``logits_dtype`` and keyword-only
``out``/``stream``/``config``). ``get_paged_mqa_logits_metadata`` and ``fp8_paged_mqa_logits`` take DeepGEMM's
``indices`` (the varlen batch of its sm_100 kernels): None only, anything else raises Sm100OnlyError.
"""

from __future__ import annotations

from .. import mqa as _mqa
from ..errors import Sm100OnlyError
from ..mqa import fp8_mqa_logits

__all__ = ["fp8_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"]


def _no_indices(fn: str, indices) -> None:
    if indices is not None:
        raise Sm100OnlyError(f"{fn}: indices (the varlen paged batch) is sm_100 only, in DeepGEMM too; dgx's paged MQA "
                             f"kernel is sm_90: pass indices=None")


def get_paged_mqa_logits_metadata(context_lens, block_kv: int, num_sms: int, indices=None, *, out=None, stream=None):
    """The schedule fp8_paged_mqa_logits reads (dgx.mqa.get_paged_mqa_logits_metadata): int32 [num_sms + 1, 2].
    indices: None only (sm_100's varlen batch)."""
    _no_indices("get_paged_mqa_logits_metadata", indices)
    return _mqa.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, out=out, stream=stream)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len: int,
                         clean_logits: bool = False, indices=None, *, logits_dtype=None, out=None, stream=None,
                         config=None):
    """The indexer's logits for a decode step over a paged FP8 cache (dgx.mqa.fp8_paged_mqa_logits), with DeepGEMM's
    parameter order; logits_dtype (torch.float32 by default, or torch.bfloat16) is keyword-only here. indices: None
    only (sm_100's varlen batch)."""
    _no_indices("fp8_paged_mqa_logits", indices)
    return _mqa.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                                     clean_logits, logits_dtype, out=out, stream=stream, config=config)
