"""The FP8 MQA logits of the DeepSeek-V3.2 indexer: prefill (contiguous KV) and decode (paged KV cache).

    logits[i, j] = sum_h weights[i, h] * relu(scale[j] * (q[i, h, :] . kv[j, :]))

for the key tokens j that query token i may see. Names, arguments and layouts follow DeepGEMM's
``fp8_mqa_logits`` / ``get_paged_mqa_logits_metadata`` / ``fp8_paged_mqa_logits`` and their current names
``fp8_fp4_mqa_logits`` / ``fp8_fp4_paged_mqa_logits`` (FP8 operands on sm_90; FP4 ones are sm_100's), so a caller
switches by changing the import. Beyond DeepGEMM's sm_90 kernels: 16 heads, next_n up to 4, and ``indices=`` (a
query row per token, each with its own sequence) on the paged call. Outputs are allocated with torch unless
``out=`` gives one (any DLPack tensor).
"""

from __future__ import annotations

import sys

from . import jit, runtime
from .checks import expect_contiguous, expect_dtype, expect_ndim, expect_shape, views_on_one_device
from .intmath import ceil_div
from .device import get_num_sms
from .kernels.mqa_logits import (
    CLEAN_INTERFACE,
    HEAD_DIMS,
    HEADS,
    MQA_INTERFACE,
    NEXT_NS,
    PAGED_BLOCK_KV,
    MqaCleanConfig,
    MqaLogitsConfig,
    PagedScheduleConfig,
    paged_config,
    prefill_config,
    varlen_config,
)
from .runtime import Swizzle
from .streams import resolve_stream
from .tensors import TensorView, as_view
from . import caches

INT32_LIMIT = 2**31 - 1


_launchers: dict[tuple, runtime.Launcher] = caches.per_process({})


def _launcher(config, device: int, grid: int) -> runtime.Launcher:
    """The loaded kernel of `config` (an MQA-family config: render(), threads, smem_bytes) with `grid` CTAs."""
    key = (config, device, grid)
    launcher = _launchers.get(key)
    if launcher is None:
        kernel = jit.get_kernel(config.render(), device)
        shape = runtime.LaunchShape((grid, 1, 1), (config.threads, 1, 1), (1, 1, 1), config.smem_bytes)
        launcher = runtime.Launcher(kernel, shape)
        if len(_launchers) >= 1024:
            _launchers.clear()
        _launchers[key] = launcher
    return launcher


def _logits_dtype(logits_dtype) -> str:
    """'float32' or 'bfloat16' from a torch dtype, a string or None (float32)."""
    if logits_dtype is None:
        return "float32"
    name = str(logits_dtype).removeprefix("torch.")
    if name not in ("float32", "bfloat16"):
        raise ValueError(f"logits_dtype: expected torch.float32 or torch.bfloat16; got {logits_dtype!r}")
    return name


def _output(out, shape: tuple[int, int], dtype: str, device: int, name: str = "out"):
    """`out` checked (shape, dtype, device, rows contiguous), or a new torch tensor; and its view."""
    if out is None:
        torch = sys.modules.get("torch")
        if torch is None:
            raise ValueError(f"{name}: pass an output tensor (torch is not loaded, so dgx cannot allocate one)")
        out = torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{device}")
    ov = as_view(out, name)
    if ov.device_kind != "cuda" or ov.device != device:
        raise ValueError(f"{name}: expected a tensor on cuda:{device}; got {ov.device_kind}:{ov.device}")
    expect_dtype(ov, name, dtype)
    expect_shape(ov, name, shape)
    if shape[1] > 1 and ov.strides[1] != 1:
        raise ValueError(f"{name}: expected contiguous rows (last stride 1); got strides {ov.strides}")
    if shape[0] > 1 and ov.strides[0] < shape[1]:
        raise ValueError(f"{name}: rows overlap (row stride {ov.strides[0]} < {shape[1]})")
    return out, ov


def _expect_int(value, name: str, low: int, high: int = INT32_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}: expected an int in [{low}, {high}]; got {value!r}")
    return value


def _expect_aligned(v: TensorView, name: str, align: int = 16) -> None:
    if v.ptr % align:
        raise ValueError(f"{name}: expected a {align}-byte aligned base address; got 0x{v.ptr:x}")


FP4_ON_SM100 = ("FP4 operands (packed e2m1 values with UE8M0 scales) run on sm_100 (Blackwell) only; on sm_90 "
                "pass FP8: q float8_e4m3fn as (q, None), and float8_e4m3fn KV with float32 scales")


def _q_tensor(q):
    """q, or the q of a (q, None) pair (DeepGEMM passes Q with an optional scale that FP8 Q never has)."""
    if isinstance(q, (tuple, list)):
        if len(q) != 2 or q[1] is not None:
            raise ValueError("q: expected a tensor or a (tensor, None) pair (per-token Q scales are FP4 Q's, which "
                             "needs sm_100)")
        return q[0]
    return q


def _dtype_name(t) -> str:
    return str(getattr(t, "dtype", "")).removeprefix("torch.")


def refuse_fp4(q, kv_scales=None, values=None) -> None:
    """Raises ValueError naming sm_100 where DeepGEMM's FP4 form is passed: Q with per-token scales (q, sf), a packed
    FP4 dtype, or int32 (packed UE8M0) KV scales."""
    if isinstance(q, (tuple, list)) and len(q) == 2 and q[1] is not None:
        raise ValueError(f"q: got per-token Q scales: {FP4_ON_SM100}")
    for t, name in ((q[0] if isinstance(q, (tuple, list)) and q else q, "q"), (values, "kv")):
        if "float4" in _dtype_name(t):
            raise ValueError(f"{name}: got {_dtype_name(t)}: {FP4_ON_SM100}")
    if kv_scales is not None and _dtype_name(kv_scales) == "int32":
        raise ValueError(f"kv scales: got int32 (packed UE8M0) scales: {FP4_ON_SM100}")


def _check_q(qv: TensorView, name: str = "q") -> tuple[int, int]:
    """The (H, D) of an FP8 Q whose last two dims are [H, D], contiguous, 16-byte aligned."""
    expect_dtype(qv, name, "float8_e4m3fn")
    expect_contiguous(qv, name)
    _expect_aligned(qv, name)
    heads, dim = qv.shape[-2], qv.shape[-1]
    if heads not in HEADS:
        allowed = f"{', '.join(map(str, HEADS[:-1]))} or {HEADS[-1]}"
        raise ValueError(f"{name}: expected {allowed} heads (dim -2); got {heads}")
    if dim not in HEAD_DIMS:
        raise ValueError(f"{name}: expected a head dim of {', '.join(map(str, HEAD_DIMS))} (dim -1); got {dim}")
    return heads, dim


def _check_weights(wv: TensorView, rows: int, heads: int) -> int:
    """The row stride of FP32 weights [rows, H]: contiguous rows, 16-byte aligned (TMA loads a group's rows)."""
    expect_dtype(wv, "weights", "float32")
    expect_shape(wv, "weights", (rows, heads))
    stride = wv.strides[0] if rows > 1 else heads
    if wv.strides[1] != 1 or stride < heads or stride % 4:
        raise ValueError(f"weights: expected contiguous rows of {heads} floats, 16-byte aligned (a row stride that is a "
                         f"multiple of 4); got strides {wv.strides}")
    _expect_aligned(wv, "weights")
    if rows * stride > INT32_LIMIT:
        raise ValueError(f"weights: expected fewer than 2**31 elements; got shape {wv.shape}")
    return stride


def _weights_map(wv: TensorView, stride: int, rows: int, heads: int, block_q: int):
    return runtime.encode_tensor_map_2d("float32", wv.ptr, heads, rows, stride * 4, heads, block_q)


def _config_for(config: MqaLogitsConfig | None, default: MqaLogitsConfig, tunable: tuple[str, ...] = ()) -> MqaLogitsConfig:
    """`default`, or the caller's `config` (tuning and tests) when it computes the same thing: only the KV stages,
    the math warpgroups and the fields in `tunable` may differ."""
    if config is None:
        return default
    free = {"kv_stages", "math_wgs", *tunable}
    wrong = [f for f in ("heads", "head_dim", "block_q", "paged", "compressed", "bf16", "varlen")
             if f not in free and getattr(config, f) != getattr(default, f)]
    if wrong:
        raise ValueError(f"config {config} does not fit this call: its {', '.join(wrong)} should be those of {default}")
    return config


def _swizzle(dim: int) -> Swizzle:
    return {32: Swizzle.B32, 64: Swizzle.B64, 128: Swizzle.B128}[dim]


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits: bool = True,
                   max_seqlen_k: int = 0, logits_dtype=None, *, out=None, stream=None,
                   config: MqaLogitsConfig | None = None):
    """The indexer's logits for a prefill: `logits[i, j]` for query token i and key token j.

    Args:
        q: float8_e4m3fn [S, H, D] (or the pair (q, None)), contiguous; H in (32, 64), D in (32, 64, 128).
        kv: (kv, scales): float8_e4m3fn [S_kv, D] with 16-byte aligned rows, and float32 [S_kv] (one positive
            scale per key token), contiguous and 16-byte aligned.
        weights: float32 [S, H], contiguous rows, 16-byte aligned.
        cu_seq_len_k_start, cu_seq_len_k_end: int32 [S]: query i sees keys ks[i] <= j < ke[i]. Both are clamped
            to [0, S_kv]; ks >= ke is an empty window.
        clean_logits: write -inf where a query sees no key (else those entries are left as they were).
        max_seqlen_k: 0 for the full form [S, S_kv]; > 0 for the compressed form [S, max_seqlen_k] holding
            logits[i, j - ks[i]] (keys past ks[i] + max_seqlen_k are not written).
        logits_dtype: torch.float32 (default) or torch.bfloat16.
        out: the output tensor (default: a new torch tensor).
        stream: the stream to launch on (default: torch's current stream).
        config: an MqaLogitsConfig to use instead of the default (tuning and tests).

    Returns the logits tensor. Raises TypeError/ValueError naming the argument before anything is launched.
    """
    dtype = _logits_dtype(logits_dtype)
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError(f"kv: expected a (kv, scales) pair; got {type(kv).__name__}")
    qv, kvv, sv, wv, ksv, kev = views_on_one_device(
        ((_q_tensor(q), "q"), (kv[0], "kv"), (kv[1], "kv scales"), (weights, "weights"),
         (cu_seq_len_k_start, "cu_seq_len_k_start"), (cu_seq_len_k_end, "cu_seq_len_k_end"))
    )
    expect_ndim(qv, "q", 3)
    heads, dim = _check_q(qv)
    seq_len = qv.shape[0]
    expect_ndim(kvv, "kv", 2)
    expect_dtype(kvv, "kv", "float8_e4m3fn")
    seq_len_kv = kvv.shape[0]
    expect_shape(kvv, "kv", (seq_len_kv, dim))
    if dim > 1 and kvv.strides[1] != 1 or (seq_len_kv > 1 and (kvv.strides[0] < dim or kvv.strides[0] % 16)):
        raise ValueError(f"kv: expected contiguous rows with a row stride that is a multiple of 16 bytes; got strides {kvv.strides}")
    _expect_aligned(kvv, "kv")
    expect_dtype(sv, "kv scales", "float32")
    expect_shape(sv, "kv scales", (seq_len_kv,))
    expect_contiguous(sv, "kv scales")
    _expect_aligned(sv, "kv scales")
    weights_stride = _check_weights(wv, seq_len, heads)
    for v, name in ((ksv, "cu_seq_len_k_start"), (kev, "cu_seq_len_k_end")):
        expect_dtype(v, name, "int32")
        expect_shape(v, name, (seq_len,))
        expect_contiguous(v, name)
        _expect_aligned(v, name, 4)
    _expect_int(max_seqlen_k, "max_seqlen_k", 0)
    if seq_len * heads > INT32_LIMIT or seq_len_kv > INT32_LIMIT - 64:
        raise ValueError(f"q, kv: expected S x H and S_kv below 2**31; got S={seq_len}, H={heads}, S_kv={seq_len_kv}")
    compressed = max_seqlen_k > 0
    width = max_seqlen_k if compressed else seq_len_kv
    bf16 = dtype == "bfloat16"
    config = _config_for(config, prefill_config(heads, dim, compressed, bf16), ("block_q",))
    device = qv.device
    out, ov = _output(out, (seq_len, width), dtype, device)
    if seq_len == 0 or width == 0:
        return out
    launch_stream = resolve_stream(stream, device)
    if seq_len_kv == 0:  # no key to see: only the compressed form has positions, all -inf
        if clean_logits:
            _launcher(MqaCleanConfig(False, compressed, bf16), device, seq_len).launch(launch_stream, CLEAN_INTERFACE.pack(
                logits=ov.ptr, logits_stride=ov.strides[0], ks=ksv.ptr, ke=kev.ptr, lens=0, seq_len_kv=seq_len_kv,
                width=width, context_2d=0))
        return out
    grid = prefill_grid(ceil_div(seq_len, config.block_q), get_num_sms(device))
    launcher = _launcher(config, device, grid)
    tmap_q = runtime.encode_tensor_map_2d("uint8", qv.ptr, dim, seq_len * heads, dim, dim, config.n, _swizzle(dim))
    tmap_kv = runtime.encode_tensor_map_2d("uint8", kvv.ptr, dim, seq_len_kv, kvv.strides[0], dim, 64, _swizzle(dim))
    row_bytes = ceil_div(seq_len_kv * 4, 16) * 16
    tmap_scales = runtime.encode_tensor_map_2d("float32", sv.ptr, seq_len_kv, 1, row_bytes, 64, 1)
    tmap_weights = _weights_map(wv, weights_stride, seq_len, heads, config.block_q)
    launcher.launch(launch_stream, MQA_INTERFACE.pack(
        tmap_q=tmap_q, tmap_kv=tmap_kv, tmap_scales=tmap_scales, tmap_weights=tmap_weights, ks=ksv.ptr, ke=kev.ptr,
        context_lens=0, block_table=0, schedule=0, logits=ov.ptr, logits_stride=ov.strides[0], table_stride=0,
        seq_len=seq_len, seq_len_kv=seq_len_kv, max_seqlen_k=max_seqlen_k, batch=0,
        table_width=0, context_2d=0, max_context_len=0, clean=int(bool(clean_logits))))
    return out


def prefill_grid(q_blocks: int, num_sms: int) -> int:
    """CTAs for `q_blocks` query blocks handed out zig-zag (ptx/mqa_logits.cuh): the fewest that keep the round
    count, so every round is full and, with an even count, every CTA gets whole (short, long) pairs of causal
    windows (2048 blocks: 128 CTAs in 16 rounds rather than 132 in 15.5; 1% faster, PERFLOG, MQA logits)."""
    rounds = ceil_div(q_blocks, num_sms)
    return ceil_div(q_blocks, rounds)


def _check_context_lens(cv: TensorView) -> tuple[int, int | None]:
    """(B, next_n or None) of int32 context lengths [B] or [B, next_n]."""
    expect_dtype(cv, "context_lens", "int32")
    if cv.ndim not in (1, 2):
        raise ValueError(f"context_lens: expected [B] or [B, next_n]; got shape {cv.shape}")
    expect_contiguous(cv, "context_lens")
    _expect_aligned(cv, "context_lens", 4)
    return cv.shape[0], (cv.shape[1] if cv.ndim == 2 else None)


def _check_indices(indices, batch: int, device: int) -> TensorView:
    """int32 [B] on `device`, contiguous: the sequence of each query token (its runs share their KV)."""
    (iv,) = views_on_one_device(((indices, "indices"),))
    if iv.device != device:
        raise ValueError(f"indices: expected a tensor on cuda:{device} like the others; got cuda:{iv.device}")
    expect_dtype(iv, "indices", "int32")
    expect_shape(iv, "indices", (batch,))
    expect_contiguous(iv, "indices")
    _expect_aligned(iv, "indices", 4)
    return iv


def get_paged_mqa_logits_metadata(context_lens, block_kv: int, num_sms: int, indices=None, *, out=None, stream=None):
    """The decode schedule fp8_paged_mqa_logits reads: every sequence's KV blocks split evenly over `num_sms`
    CTAs, computed on the GPU (so it can be captured in a CUDA graph and follows new context lengths).

    Args:
        context_lens: int32 [B] or [B, next_n] on the GPU (as passed to fp8_paged_mqa_logits).
        block_kv: tokens per cache block; 64.
        num_sms: CTAs to split over (usually the device's SM count).
        indices: None, or int32 [B] with next_n = 1 (as passed to fp8_paged_mqa_logits): query token t belongs to
            sequence indices[t]; runs of equal indices are scheduled as one unit (their KV is shared).

    Returns int32 [num_sms + 1, 2]: row c is the (sequence, block) where CTA c starts (with indices: the first
    token of a run, block).
    """
    if block_kv != PAGED_BLOCK_KV:
        raise ValueError(f"block_kv: expected {PAGED_BLOCK_KV}; got {block_kv!r}")
    _expect_int(num_sms, "num_sms", 1, 1 << 16)
    (cv,) = views_on_one_device(((context_lens, "context_lens"),))
    batch, next_n = _check_context_lens(cv)
    device = cv.device
    iv = None
    if indices is not None:
        if next_n not in (None, 1):
            raise ValueError(f"context_lens: with indices, expected [B] or [B, 1] (one query per row); got {cv.shape}")
        iv = _check_indices(indices, batch, device)
    out, ov = _output(out, (num_sms + 1, 2), "int32", device)
    if ov.strides != (2, 1):
        raise ValueError(f"out: expected a contiguous [num_sms + 1, 2] tensor; got strides {ov.strides}")
    config = PagedScheduleConfig(varlen=iv is not None)
    values = dict(lens=cv.ptr, schedule=ov.ptr, batch=batch, next_n=next_n or 1, context_2d=int(next_n is not None),
                  num_ctas=num_sms)
    if iv is not None:
        values["indices"] = iv.ptr
    _launcher(config, device, 1).launch(resolve_stream(stream, device), config.interface.pack(**values))
    return out


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len: int,
                         clean_logits: bool = False, logits_dtype=None, indices=None, *, out=None, stream=None,
                         config: MqaLogitsConfig | None = None):
    """The indexer's logits for a decode step over a paged FP8 KV cache.

    Args:
        q: float8_e4m3fn [B, next_n, H, D], contiguous; next_n in 1..4, H in (16, 32, 64), D in (32, 64, 128).
        kv_cache: uint8 [num_blocks, 64, 1, D + 4], contiguous: each block holds its 64 x D FP8 values, then its
            64 float32 scales.
        weights: float32 [B * next_n, H], contiguous rows, 16-byte aligned.
        context_lens: int32 [B] (query t of sequence b sees keys j <= context_lens[b] - next_n + t) or
            [B, next_n] (query t sees keys j < context_lens[b, t]).
        block_table: int32 [B, max_blocks]: the cache block of each 64 tokens. Ids outside [0, num_blocks) read as
            zeros (their tokens' logits are 0); tokens past the table's width are not visited.
        schedule_meta: int32 [num_sms + 1, 2] from get_paged_mqa_logits_metadata(context_lens, 64, num_sms) (with the
            same indices).
        max_context_len: the output's width.
        clean_logits: write -inf at every position a query may not see (else only inside the blocks visited, as
            DeepGEMM does; positions past them are left as they were).
        logits_dtype: torch.float32 (default) or torch.bfloat16.
        indices: None, or int32 [B] with next_n = 1: one query row per token, token t of sequence indices[t] (a
            sequence's tokens consecutive, their block-table rows alike: the kernel reads the first one's), each
            with its own context length (keys j < context_lens[t]). A sequence's tokens share their KV reads, 8 of
            them at a time at 16 and 32 heads, 4 at 64.
        config: an MqaLogitsConfig to use instead of the default (tuning and tests): the same tile, or with
            indices any group size (block_q).

    Returns logits [B * next_n, max_context_len].
    """
    dtype = _logits_dtype(logits_dtype)
    qv, cachev, wv, cv, tv, sv = views_on_one_device(
        ((_q_tensor(q), "q"), (kv_cache, "kv_cache"), (weights, "weights"), (context_lens, "context_lens"),
         (block_table, "block_table"), (schedule_meta, "schedule_meta"))
    )
    expect_ndim(qv, "q", 4)
    heads, dim = _check_q(qv)
    batch, next_n = qv.shape[0], qv.shape[1]
    if next_n not in NEXT_NS:
        raise ValueError(f"q: expected next_n (dim 1) in {NEXT_NS}; got {next_n}")
    expect_ndim(cachev, "kv_cache", 4)
    expect_dtype(cachev, "kv_cache", "uint8")
    num_blocks = cachev.shape[0]
    expect_shape(cachev, "kv_cache", (num_blocks, PAGED_BLOCK_KV, 1, dim + 4))
    expect_contiguous(cachev, "kv_cache")
    _expect_aligned(cachev, "kv_cache")
    weights_stride = _check_weights(wv, batch * next_n, heads)
    lens_batch, lens_next_n = _check_context_lens(cv)
    if lens_batch != batch or lens_next_n not in (None, next_n):
        raise ValueError(f"context_lens: expected shape ({batch},) or ({batch}, {next_n}); got {cv.shape}")
    iv = None
    if indices is not None:
        if next_n != 1:
            raise ValueError(f"q: with indices, expected one query per row (next_n = 1, dim 1); got next_n {next_n}")
        iv = _check_indices(indices, batch, qv.device)
    expect_dtype(tv, "block_table", "int32")
    expect_ndim(tv, "block_table", 2)
    if tv.shape[0] != batch:
        what = "one per token, as indices gives" if iv is not None else "one per sequence"
        raise ValueError(f"block_table: expected {batch} rows ({what}); got shape {tv.shape}")
    if tv.shape[1] > 1 and tv.strides[1] != 1:
        raise ValueError(f"block_table: expected contiguous rows; got strides {tv.strides}")
    _expect_aligned(tv, "block_table", 4)
    expect_dtype(sv, "schedule_meta", "int32")
    expect_ndim(sv, "schedule_meta", 2)
    if sv.shape[0] < 2 or sv.shape[1] != 2:
        raise ValueError(f"schedule_meta: expected [num_sms + 1, 2] from get_paged_mqa_logits_metadata; got {sv.shape}")
    expect_contiguous(sv, "schedule_meta")
    _expect_int(max_context_len, "max_context_len", 0)
    if batch * next_n * heads > INT32_LIMIT or num_blocks > INT32_LIMIT or tv.shape[1] * PAGED_BLOCK_KV > INT32_LIMIT:
        raise ValueError(f"q, kv_cache, block_table: sizes must stay below 2**31 (B={batch}, blocks={num_blocks})")
    bf16 = dtype == "bfloat16"
    default = varlen_config(heads, dim, bf16) if iv is not None else paged_config(heads, dim, next_n, bf16)
    config = _config_for(config, default, ("block_q",) if iv is not None else ())  # indices: block_q is a group size
    device = qv.device
    rows = batch * next_n
    out, ov = _output(out, (rows, max_context_len), dtype, device)
    if rows == 0 or max_context_len == 0:
        return out
    launch_stream = resolve_stream(stream, device)
    if clean_logits:
        _launcher(MqaCleanConfig(True, False, bf16, next_n), device, rows).launch(launch_stream, CLEAN_INTERFACE.pack(
            logits=ov.ptr, logits_stride=ov.strides[0], ks=0, ke=0, lens=cv.ptr, seq_len_kv=0,
            width=max_context_len, context_2d=int(lens_next_n is not None)))
    if num_blocks == 0 or tv.shape[1] == 0:
        return out
    launcher = _launcher(config, device, sv.shape[0] - 1)
    block_bytes = PAGED_BLOCK_KV * (dim + 4)
    tmap_q = runtime.encode_tensor_map_2d("uint8", qv.ptr, dim, rows * heads, dim, dim, config.n, _swizzle(dim))
    tmap_kv = runtime.encode_tensor_map("uint8", cachev.ptr, (dim, PAGED_BLOCK_KV, num_blocks), (dim, block_bytes),
                                        (dim, PAGED_BLOCK_KV, 1), _swizzle(dim))
    tmap_scales = runtime.encode_tensor_map_2d("float32", cachev.ptr + PAGED_BLOCK_KV * dim, PAGED_BLOCK_KV, num_blocks,
                                               block_bytes, PAGED_BLOCK_KV, 1)
    tmap_weights = _weights_map(wv, weights_stride, rows, heads, config.block_q)
    values = dict(
        tmap_q=tmap_q, tmap_kv=tmap_kv, tmap_scales=tmap_scales, tmap_weights=tmap_weights, ks=0, ke=0,
        context_lens=cv.ptr, block_table=tv.ptr, schedule=sv.ptr, logits=ov.ptr, logits_stride=ov.strides[0],
        table_stride=tv.strides[0], seq_len=0, seq_len_kv=0, max_seqlen_k=0,
        batch=batch, table_width=tv.shape[1], context_2d=int(lens_next_n is not None),
        max_context_len=max_context_len, clean=0)
    if iv is not None:
        values["indices"] = iv.ptr
    launcher.launch(launch_stream, config.interface.pack(**values))
    return out


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits: bool = True,
                       max_seqlen_k: int = 0, logits_dtype=None, *, out=None, stream=None,
                       config: MqaLogitsConfig | None = None):
    """DeepGEMM's current name of fp8_mqa_logits, with its arguments: q is (q, q_scales) with q_scales None for FP8.
    FP4 operands (q_scales given, packed FP4 values, int32 UE8M0 KV scales) raise ValueError naming sm_100, where
    DeepGEMM runs them; everything else is fp8_mqa_logits."""
    if isinstance(kv, (tuple, list)) and len(kv) == 2:
        refuse_fp4(q, kv[1], kv[0])
    else:
        refuse_fp4(q)
    return fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k,
                          logits_dtype, out=out, stream=stream, config=config)


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len: int,
                             clean_logits: bool = False, logits_dtype=None, indices=None, *, out=None, stream=None,
                             config: MqaLogitsConfig | None = None):
    """DeepGEMM's current name of fp8_paged_mqa_logits, with its arguments (q as (q, None) for FP8, `indices=`). FP4
    Q (q_scales given, or a packed FP4 dtype) raises ValueError naming sm_100; everything else is
    fp8_paged_mqa_logits."""
    refuse_fp4(q)
    return fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                                clean_logits, logits_dtype, indices, out=out, stream=stream, config=config)
