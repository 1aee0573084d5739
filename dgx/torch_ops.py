"""dgx's public ops as torch operators, ``torch.ops.dgx.<name>``, for torch.compile and CUDA graphs.

Importing this module (``import dgx.torch_ops``, or touching ``dgx.torch_ops``) imports torch and registers
the operators once per process; ``import dgx`` alone never imports torch. Each operator takes flat tensors
(the ``(tensor, scales)`` pairs spelled out), declares in its schema the argument it writes (``Tensor(a!) d``),
and has a fake implementation giving the output's shape, dtype and device, so torch.compile traces it without
a graph break; its real implementation is the plain dgx function. This module's functions of the same names
take the plain functions' arguments (pairs included) and call the operators: use them in code that is compiled.

Registration goes through ``torch.library.Library`` (define + impl + register_fake) rather than the
``torch.library.custom_op`` decorator: the decorator's Python autograd and in-place kernels cost 13-31 µs per
call on a CPU where this path costs about 3 µs (tests/torch_op_timing.py measures both).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from . import gemm, grouped, mqa, wgrad
from .checks import unpack_pair
from .kernels.mqa_logits import PAGED_BLOCK_KV

NAMESPACE = "dgx"

# name -> schema (arguments and returns, without the name). `Tensor(a!)` marks the argument written in place.
SCHEMAS: dict[str, str] = {
    "fp8_gemm_nt": "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c=None) -> ()",
    "m_grouped_fp8_gemm_nt_contiguous":
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor m_indices) -> ()",
    "m_grouped_fp8_gemm_nt_masked":
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor masked_m, int expected_m) -> ()",
    "k_grouped_fp8_gemm_nt_contiguous":
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int[] ks, Tensor? ks_tensor=None) -> ()",
    "fp8_mqa_logits":
        "(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_seq_len_k_start, Tensor cu_seq_len_k_end, "
        "bool clean_logits=True, int max_seqlen_k=0, ScalarType? logits_dtype=None) -> Tensor",
    "get_paged_mqa_logits_metadata": "(Tensor context_lens, int block_kv, int num_sms) -> Tensor",
    "fp8_paged_mqa_logits":
        "(Tensor q, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, Tensor schedule_meta, "
        "int max_context_len, bool clean_logits=False, ScalarType? logits_dtype=None) -> Tensor",
}

# The kernels read the layouts they are given (scale layouts, row strides): compiled code must pass every
# tensor with the strides it has in eager mode.
TAGS = (torch.Tag.needs_exact_strides,)


# Real implementations: the plain dgx functions (which launch on torch's current stream).

def _fp8_gemm_nt(a, sfa, b, sfb, d, c=None) -> None:
    gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c)
    _bump(d)


def _m_grouped_contiguous(a, sfa, b, sfb, d, m_indices) -> None:
    grouped.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
    _bump(d)


def _m_grouped_masked(a, sfa, b, sfb, d, masked_m, expected_m) -> None:
    grouped.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    _bump(d)


def _k_grouped_contiguous(a, sfa, b, sfb, d, ks, ks_tensor=None) -> None:
    wgrad.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_tensor)
    _bump(d)


def _mqa_logits(q, kv, kv_scales, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    return mqa.fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype)


def _paged_metadata(context_lens, block_kv, num_sms):
    return mqa.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)


def _paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                      clean_logits=False, logits_dtype=None):
    return mqa.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                    max_context_len, clean_logits, logits_dtype)


def _bump(d: torch.Tensor) -> None:
    """Tell autograd that `d` was written (what torch's own in-place ops do)."""
    torch._C._increment_version((d,))


# Fake implementations: the outputs' shapes, dtypes and devices, from the inputs' alone.

def _fake_inplace(*args) -> None:
    return None


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


# name -> (real implementation, fake implementation)
_IMPLS: dict[str, tuple[Callable, Callable]] = {
    "fp8_gemm_nt": (_fp8_gemm_nt, _fake_inplace),
    "m_grouped_fp8_gemm_nt_contiguous": (_m_grouped_contiguous, _fake_inplace),
    "m_grouped_fp8_gemm_nt_masked": (_m_grouped_masked, _fake_inplace),
    "k_grouped_fp8_gemm_nt_contiguous": (_k_grouped_contiguous, _fake_inplace),
    "fp8_mqa_logits": (_mqa_logits, _fake_mqa_logits),
    "get_paged_mqa_logits_metadata": (_paged_metadata, _fake_paged_metadata),
    "fp8_paged_mqa_logits": (_paged_mqa_logits, _fake_paged_mqa_logits),
}


def _register() -> torch.library.Library:
    """Define every operator of SCHEMAS under NAMESPACE with its real and fake implementation. The library
    object must stay alive for the operators to stay registered."""
    lib = torch.library.Library(NAMESPACE, "DEF")
    for name, schema in SCHEMAS.items():
        real, fake = _IMPLS[name]
        lib.define(name + schema, tags=TAGS)
        # Every device: dgx's own checks then name a tensor on the wrong device, rather than the dispatcher.
        lib.impl(name, real, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
    return lib


_LIB = _register()
_ops = torch.ops.dgx


# The plain functions' signatures (pairs as pairs), calling the operators: what compiled code should call.

def fp8_gemm_nt(a, b, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """dgx.fp8_gemm_nt((A, SFA), (B, SFB), d, c) as the operator torch.ops.dgx.fp8_gemm_nt (see there)."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.fp8_gemm_nt.default(A, SFA, B, SFB, d, c)


def m_grouped_fp8_gemm_nt_contiguous(a, b, d: torch.Tensor, m_indices: torch.Tensor) -> None:
    """dgx.m_grouped_fp8_gemm_nt_contiguous as the operator torch.ops.dgx.m_grouped_fp8_gemm_nt_contiguous."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.m_grouped_fp8_gemm_nt_contiguous.default(A, SFA, B, SFB, d, m_indices)


def m_grouped_fp8_gemm_nt_masked(a, b, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int) -> None:
    """dgx.m_grouped_fp8_gemm_nt_masked as the operator torch.ops.dgx.m_grouped_fp8_gemm_nt_masked."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.m_grouped_fp8_gemm_nt_masked.default(A, SFA, B, SFB, d, masked_m, expected_m)


def k_grouped_fp8_gemm_nt_contiguous(a, b, d: torch.Tensor, ks: Sequence[int],
                                     ks_tensor: torch.Tensor | None = None) -> None:
    """dgx.k_grouped_fp8_gemm_nt_contiguous as the operator torch.ops.dgx.k_grouped_fp8_gemm_nt_contiguous
    (`ks` host ints: under torch.compile each distinct `ks` is a constant of the graph)."""
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    _ops.k_grouped_fp8_gemm_nt_contiguous.default(A, SFA, B, SFB, d, list(ks), ks_tensor)


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


# Legacy names, as in dgx.

def gemm_fp8_fp8_bf16_nt(lhs, rhs, out: torch.Tensor) -> None:
    """Legacy name of fp8_gemm_nt(lhs, rhs, out)."""
    fp8_gemm_nt(lhs, rhs, out)


def wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out: torch.Tensor) -> None:
    """Legacy name: out += lhs . rhs^T (fp8_gemm_nt(lhs, rhs, out, c=out) with a float32 out)."""
    fp8_gemm_nt(lhs, rhs, out, out)


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out: torch.Tensor, m_indices: torch.Tensor) -> None:
    """Legacy name of m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)."""
    m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out: torch.Tensor, masked_m: torch.Tensor,
                                          expected_m: int) -> None:
    """Legacy name of m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)."""
    m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)


def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out: torch.Tensor, batch_sizes: Sequence[int]) -> None:
    """Legacy name of k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes)."""
    k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes)


LEGACY = ("gemm_fp8_fp8_bf16_nt", "wgrad_gemm_fp8_fp8_fp32_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
          "m_grouped_gemm_fp8_fp8_bf16_nt_masked", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt")
__all__ = ["NAMESPACE", "SCHEMAS", *SCHEMAS, *LEGACY]
