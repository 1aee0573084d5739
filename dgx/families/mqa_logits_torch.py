"""The MQA-logits family's torch operators (registered by dgx.torch_ops): schemas, real and fake implementations, and
the functions of the plain signatures that compiled code calls."""

from __future__ import annotations

import torch

from .. import mqa
from ..checks import unpack_pair
from ..kernels.mqa_logits import PAGED_BLOCK_KV
from .base import TorchOp


def _real_mqa_logits(q, kv, kv_scales, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    return mqa.fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype)


def _real_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                           clean_logits=False, logits_dtype=None):
    return mqa.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                    max_context_len, clean_logits, logits_dtype)


def _expect_ndim(t: torch.Tensor, name: str, ndims: tuple[int, ...]) -> None:
    if t.dim() not in ndims:
        raise ValueError(f"{name}: expected a {' or '.join(map(str, ndims))}-D tensor; got shape {tuple(t.shape)}")


def _logits_dtype(logits_dtype: torch.dtype | None) -> torch.dtype:
    return getattr(torch, mqa._logits_dtype(logits_dtype))  # raises ValueError for any other dtype


def _fake_mqa_logits(q, kv, kv_scales, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    _expect_ndim(q, "q", (3,))
    _expect_ndim(kv, "kv", (2,))
    if max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_k: expected an int >= 0; got {max_seqlen_k}")
    width = max_seqlen_k if max_seqlen_k > 0 else kv.shape[0]
    return q.new_empty((q.shape[0], width), dtype=_logits_dtype(logits_dtype))


def _fake_paged_metadata(context_lens, block_kv, num_sms):
    if block_kv != PAGED_BLOCK_KV:
        raise ValueError(f"block_kv: expected {PAGED_BLOCK_KV}; got {block_kv!r}")
    if num_sms < 1:
        raise ValueError(f"num_sms: expected an int >= 1; got {num_sms!r}")
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


def _fake_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                           clean_logits=False, logits_dtype=None):
    _expect_ndim(q, "q", (4,))
    if max_context_len < 0:
        raise ValueError(f"max_context_len: expected an int >= 0; got {max_context_len}")
    return q.new_empty((q.shape[0] * q.shape[1], max_context_len), dtype=_logits_dtype(logits_dtype))


TORCH_OPS = (
    TorchOp("fp8_mqa_logits",
            "(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_seq_len_k_start, "
            "Tensor cu_seq_len_k_end, bool clean_logits=True, int max_seqlen_k=0, ScalarType? logits_dtype=None) "
            "-> Tensor",
            _real_mqa_logits, _fake_mqa_logits),
    TorchOp("get_paged_mqa_logits_metadata", "(Tensor context_lens, int block_kv, int num_sms) -> Tensor",
            lambda context_lens, block_kv, num_sms: mqa.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms),
            _fake_paged_metadata),
    TorchOp("fp8_paged_mqa_logits",
            "(Tensor q, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, "
            "Tensor schedule_meta, int max_context_len, bool clean_logits=False, ScalarType? logits_dtype=None) "
            "-> Tensor",
            _real_paged_mqa_logits, _fake_paged_mqa_logits),
)

_ops = torch.ops.dgx


def fp8_mqa_logits(q, kv, weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor,
                   clean_logits: bool = True, max_seqlen_k: int = 0,
                   logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    """dgx.fp8_mqa_logits (q or (q, None), (kv, scales), ...) as the operator torch.ops.dgx.fp8_mqa_logits;
    returns a new logits tensor (no `out=`)."""
    KV, scales = unpack_pair(kv, "kv")
    return _ops.fp8_mqa_logits.default(mqa._q_tensor(q), KV, scales, weights, cu_seq_len_k_start,
                                       cu_seq_len_k_end, clean_logits, max_seqlen_k, logits_dtype)


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int) -> torch.Tensor:
    """dgx.get_paged_mqa_logits_metadata as the operator torch.ops.dgx.get_paged_mqa_logits_metadata."""
    return _ops.get_paged_mqa_logits_metadata.default(context_lens, block_kv, num_sms)


def fp8_paged_mqa_logits(q, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                         block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                         clean_logits: bool = False, logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    """dgx.fp8_paged_mqa_logits as the operator torch.ops.dgx.fp8_paged_mqa_logits; returns a new logits tensor."""
    return _ops.fp8_paged_mqa_logits.default(mqa._q_tensor(q), kv_cache, weights, context_lens, block_table,
                                             schedule_meta, max_context_len, clean_logits, logits_dtype)


LEGACY = ()
__all__ = ["TORCH_OPS", *(op.name for op in TORCH_OPS)]

# DeepGEMM's current names of the indexer, with its defaults (FP8 operands on sm_90; FP4 raises naming sm_100).

def _fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                        logits_dtype=torch.float32):
    """DeepGEMM's fp8_fp4_mqa_logits (dgx.fp8_fp4_mqa_logits)."""
    return mqa.fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k,
                                  logits_dtype)


def _fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                              clean_logits=False, logits_dtype=torch.float32, indices=None):
    """DeepGEMM's fp8_fp4_paged_mqa_logits (dgx.fp8_fp4_paged_mqa_logits)."""
    return mqa.fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                        max_context_len, clean_logits, logits_dtype, indices)


_fp8_fp4_mqa_logits.__name__ = _fp8_fp4_mqa_logits.__qualname__ = "fp8_fp4_mqa_logits"
_fp8_fp4_paged_mqa_logits.__name__ = _fp8_fp4_paged_mqa_logits.__qualname__ = "fp8_fp4_paged_mqa_logits"
DEEP_GEMM = {"fp8_fp4_mqa_logits": _fp8_fp4_mqa_logits, "fp8_fp4_paged_mqa_logits": _fp8_fp4_paged_mqa_logits}
