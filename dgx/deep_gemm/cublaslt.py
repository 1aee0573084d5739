"""DeepGEMM's cuBLASLt wrappers, run through torch (cuBLAS/cuBLASLt on the GPU, torch's own matmul on the CPU).

``cublaslt_gemm_nt(a, b, d, c=None)``: d = a . b^T, plus c when c is given (c may be d itself: accumulate in place),
with FP32 accumulation. a [M, K] and b [N, K] of one dtype: bfloat16, float16, float32, or unscaled FP8 (e4m3/e5m2,
through torch._scaled_mm with unit scales where it takes the shape, else a float32 matmul); d [M, N] bfloat16 or
float32, any strides torch takes. ``nn``/``tn``/``tt`` take b as [K, N] and/or a as [K, M], as DeepGEMM does.
M = 0 or N = 0 does nothing; K = 0 sets d = c (or 0).
"""

from __future__ import annotations

import torch

__all__ = ["cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt"]

_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
_INPUTS = (torch.bfloat16, torch.float16, torch.float32) + _FP8
_OUTPUTS = (torch.bfloat16, torch.float32)


def _check(fn: str, a, b, d, c) -> tuple[int, int, int]:
    for name, t in (("a", a), ("b", b), ("d", d)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            got = f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{fn}: {name}: expected a 2-D torch tensor; got {got}")
    (m, k), (n, k_b), (m_d, n_d) = a.shape, b.shape, d.shape
    if k != k_b or (m, n) != (m_d, n_d):
        raise ValueError(f"{fn}: expected a [M, K], b [N, K] and d [M, N] (after the form's transpositions); got a "
                         f"{tuple(a.shape)}, b {tuple(b.shape)}, d {tuple(d.shape)}")
    if a.dtype not in _INPUTS or b.dtype != a.dtype:
        raise TypeError(f"{fn}: a and b: expected one dtype of {[str(t) for t in _INPUTS]}; got {a.dtype} and {b.dtype}")
    if d.dtype not in _OUTPUTS:
        raise TypeError(f"{fn}: d: expected bfloat16 or float32; got {d.dtype}")
    if c is not None and (not isinstance(c, torch.Tensor) or c.shape != d.shape or c.dtype != d.dtype):
        got = f"{c.dtype} {tuple(c.shape)}" if isinstance(c, torch.Tensor) else type(c).__name__
        raise ValueError(f"{fn}: c: expected None or a tensor of d's shape {tuple(d.shape)} and dtype {d.dtype}; got {got}")
    if len({t.device for t in (a, b, d) + ((c,) if c is not None else ())}) != 1:
        raise ValueError(f"{fn}: a, b, d (and c) must be on one device")
    return m, n, k


def _product_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a . b^T in float32 (FP32 accumulation, no rounding to a narrower type)."""
    if a.dtype in _FP8:
        one = torch.ones((), dtype=torch.float32, device=a.device)
        try:  # cuBLASLt's FP8 GEMM: a row-major, b^T column-major
            return torch._scaled_mm(a.contiguous(), b.contiguous().t(), scale_a=one, scale_b=one,
                                    out_dtype=torch.float32)
        except (RuntimeError, NotImplementedError):  # shapes or devices _scaled_mm does not take
            return (a.double() @ b.double().t()).float()  # exact products (not TF32 where a caller enabled it)
    if a.dtype != torch.float32 and a.is_cuda:
        try:
            return torch.mm(a, b.t(), out_dtype=torch.float32)
        except (RuntimeError, TypeError, NotImplementedError):  # a torch without mm's out_dtype
            pass
    return a.float() @ b.float().t()


def _reduced_reduction(dtype: torch.dtype) -> bool:
    """Whether torch lets cuBLAS reduce in `dtype` itself (split-K partial sums rounded to BF16/FP16), which is not
    DeepGEMM's FP32 accumulation: then the product is formed in FP32 first."""
    flags = torch.backends.cuda.matmul
    if dtype == torch.bfloat16:
        return bool(getattr(flags, "allow_bf16_reduced_precision_reduction", False))
    return dtype == torch.float16 and bool(getattr(flags, "allow_fp16_reduced_precision_reduction", False))


def cublaslt_gemm_nt(a, b, d, c=None) -> None:
    """d = a . b^T (+ c), FP32 accumulation; a [M, K], b [N, K], d [M, N]. See the module."""
    m, n, k = _check("cublaslt_gemm_nt", a, b, d, c)
    if m == 0 or n == 0:
        return
    accumulate = c is not None
    if accumulate and c.data_ptr() != d.data_ptr():
        d.copy_(c)
    if k == 0:
        if not accumulate:
            d.zero_()
        return
    if a.dtype == d.dtype and a.dtype != torch.float32 and a.dtype not in _FP8 and not _reduced_reduction(a.dtype):
        # one cuBLAS GEMM, FP32 accumulation and epilogue (beta = 1 adds d), one rounding into d
        if accumulate:
            d.addmm_(a, b.t())
        else:
            torch.mm(a, b.t(), out=d)
        return
    product = _product_fp32(a, b)
    if not accumulate:
        d.copy_(product)
    elif d.dtype == torch.float32:
        d.add_(product)
    else:
        d.copy_(d.float() + product)  # one rounding into d


def cublaslt_gemm_nn(a, b, d, c=None) -> None:
    """d = a . b (+ c); a [M, K], b [K, N]."""
    cublaslt_gemm_nt(a, b.transpose(0, 1) if isinstance(b, torch.Tensor) else b, d, c)


def cublaslt_gemm_tn(a, b, d, c=None) -> None:
    """d = a^T . b (+ c); a [K, M], b [K, N]."""
    cublaslt_gemm_nt(a.transpose(0, 1) if isinstance(a, torch.Tensor) else a,
                     b.transpose(0, 1) if isinstance(b, torch.Tensor) else b, d, c)


def cublaslt_gemm_tt(a, b, d, c=None) -> None:
    """d = a^T . b^T (+ c); a [K, M], b [N, K]."""
    cublaslt_gemm_nt(a.transpose(0, 1) if isinstance(a, torch.Tensor) else a, b, d, c)
