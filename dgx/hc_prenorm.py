"""dgx.hc_prenorm.tf32_hc_prenorm_gemm: the HyperConnection pre-norm GEMM of DeepSeek-V4 (DeepGEMM's name and
arguments).

    d = a . b^T  (TF32 tensor cores, FP32 out)      s[m] = sum_k a[m, k]^2  (FP32)

for BF16 a [M, K] and FP32 b [N, K], N small. With ``num_splits`` the kernel writes partial sums over K ranges,
d [splits, M, N] and s [splits, M], which the caller sums (more CTAs at small M). Deterministic: every sum is taken
in a fixed order, so a call repeated on the same inputs gives the same bits.
"""

from __future__ import annotations

from . import runtime
from .checks import expect_dtype, expect_ndim, expect_shape, views_on_one_device
from .device import get_num_sms
from .intmath import round_up
from .kernels.hc_prenorm import (INTERFACE, MAX_N, MAX_SPLITS, PORTABLE_CLUSTER, HcPrenormConfig, choose_config,
                                 cluster_fits, launcher, tensor_maps)
from .streams import resolve_stream
from .tensors import TensorView
from . import caches

__all__ = ["tf32_hc_prenorm_gemm"]

_INT32_LIMIT = 2**31 - 1
_params: dict[tuple, runtime.ParamPack] = caches.per_process({})


def _operand(v: TensorView, name: str, dtype: str) -> int:
    """The row stride (elements) of a 2-D TMA operand: contiguous rows, 16-byte aligned rows and base."""
    expect_ndim(v, name, 2)
    expect_dtype(v, name, dtype)
    rows, cols = v.shape
    if cols > 1 and v.strides[1] != 1:
        raise ValueError(f"{name}: expected contiguous rows (last stride 1); got strides {v.strides}")
    stride = v.strides[0] if rows > 1 else round_up(cols, 16 // v.itemsize)
    if stride < cols or (stride * v.itemsize) % 16:
        raise ValueError(f"{name}: expected a row stride that is at least K and a multiple of 16 bytes (TMA); got "
                         f"{v.strides[0]} elements of {v.itemsize} bytes")
    if v.ptr % 16:
        raise ValueError(f"{name}: expected a 16-byte aligned base address (TMA); got 0x{v.ptr:x}")
    return stride


def _output(v: TensorView, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a float32 output of `shape` whose last dimension is contiguous."""
    expect_dtype(v, name, "float32")
    expect_shape(v, name, shape)
    if shape[-1] > 1 and v.strides[-1] != 1:
        raise ValueError(f"{name}: expected its last dimension contiguous (stride 1); got strides {v.strides}")
    if any(s < 0 for s in v.strides):
        raise ValueError(f"{name}: negative strides are not supported; got {v.strides}")
    if v.ptr % 4:
        raise ValueError(f"{name}: expected a 4-byte aligned address; got 0x{v.ptr:x}")
    return v.strides


def tf32_hc_prenorm_gemm(a, b, d, s, num_splits: int | None = None, *, stream=None,
                         config: HcPrenormConfig | None = None) -> None:
    """d = a . b^T in TF32 and s = the rows' sums of squares of a, or their partial sums over `num_splits` K ranges.

    Args:
        a: bfloat16 [M, K], contiguous rows, 16-byte aligned rows (a row stride that is a multiple of 8).
        b: float32 [N, K] with 1 <= N <= 64, contiguous 16-byte aligned rows. Its values enter the tensor cores
            rounded to TF32 (to nearest even, as torch's TF32 matmul through cuBLAS takes them); a's BF16 values are
            exact in TF32.
        d: float32 [M, N], or [num_splits, M, N] with num_splits: written (split i holds the sum over the i-th
            range of K). Its last dimension contiguous.
        s: float32 [M], or [num_splits, M]: sum_k a[m, k]^2 in FP32 (partial per split). Last dimension contiguous.
        num_splits: None, or the number of K ranges (1..1024; ranges past K's 64-wide blocks hold zeros).
        stream: the stream to launch on (default: torch's current stream).
        config: an HcPrenormConfig to use instead of the heuristic's (tuning and tests); its n, k and splits must
            be this call's. The heuristic may take a cluster of 16 CTAs at small M; on a device whose GPCs cannot
            hold one it takes its best portable config instead.

    Raises TypeError/ValueError naming the argument before anything is launched. M = 0 is a no-op.
    """
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)
                                   or not 1 <= num_splits <= MAX_SPLITS):
        raise ValueError(f"num_splits: expected None or an int in 1..{MAX_SPLITS}; got {num_splits!r}")
    av, bv, dv, sv = views_on_one_device(((a, "a"), (b, "b"), (d, "d"), (s, "s")))
    lda = _operand(av, "a", "bfloat16")
    ldb = _operand(bv, "b", "float32")
    m, k = av.shape
    n, kb = bv.shape
    if kb != k:
        raise ValueError(f"b: expected K = {k} columns like a; got shape {bv.shape}")
    if k == 0:
        raise ValueError("a: K must be positive; got K = 0")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"b: expected 1 to {MAX_N} rows (N); got N = {n}")
    splits = 1 if num_splits is None else num_splits
    lead = () if num_splits is None else (num_splits,)
    d_strides = _output(dv, "d", lead + (m, n))
    s_strides = _output(sv, "s", lead + (m,))
    if m > _INT32_LIMIT // 2:
        raise ValueError(f"a: M must be below 2**30; got {m}")
    if config is not None:
        if not isinstance(config, HcPrenormConfig):
            raise TypeError(f"config: expected an HcPrenormConfig; got {type(config).__name__}")
        if (config.n, config.k, config.splits) != (n, k, splits):
            raise ValueError(f"config {config} does not fit this call: it is for N={config.n}, K={config.k}, "
                             f"splits={config.splits}; the call has N={n}, K={k}, splits={splits}")
    if m == 0:
        return
    device = av.device
    if config is None:
        num_sms = get_num_sms(device)
        config = choose_config(m, n, k, splits, num_sms)
        if config.cluster > PORTABLE_CLUSTER and not cluster_fits(config, device):
            config = choose_config(m, n, k, splits, num_sms, PORTABLE_CLUSTER)
    elif not cluster_fits(config, device):
        raise ValueError(f"config {config}: no cluster of {config.cluster} CTAs fits on device {device}")
    if config.grid(m) > _INT32_LIMIT:
        raise ValueError(f"a, num_splits: {config.grid(m)} CTAs for M={m} and {splits} splits exceed the grid's limit")
    row_stride = d_strides[-2] if m > 1 else n
    d_split = d_strides[0] if num_splits is not None else 0
    s_split = s_strides[0] if num_splits is not None else 0
    key = (config, device, av.ptr, lda, m, bv.ptr, ldb, dv.ptr, row_stride, d_split, sv.ptr, s_split)
    params = _params.get(key)
    if params is None:
        tmap_a, tmap_b = tensor_maps(config, av.ptr, lda, bv.ptr, ldb, m)
        params = INTERFACE.pack(tmap_a=tmap_a, tmap_b=tmap_b, d=dv.ptr, s=sv.ptr, d_row_stride=row_stride,
                                d_split_stride=d_split, s_split_stride=s_split, m=m)
        if len(_params) >= 512:
            _params.clear()
        _params[key] = params
    launcher(config, device, m).launch(resolve_stream(stream, device), params)
