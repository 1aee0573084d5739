"""Inputs and float64 references of issue 39's suites (torch; the GPU in the benchmark, the CPU in tests).

* ``einsum``: BF16 operands as DeepGEMM's test_einsum.py builds them (``y`` a strided slice for the per-head forms),
  FP32 ``c`` for ``bmk,bnk->mn`` with FP32 out; reference the float64 einsum (plus ``c``).
* ``fp8_einsum``: BF16 ``x`` [b, h, r], ``y`` [h, d, r] and their FP8 casts (per token per 128; per 128x128 block,
  FP32 scales); references: the float64 einsum of the dequantised operands (``main``) and of the BF16 originals
  (``bf16``, for the BF16 peer).
* ``hc_prenorm``: BF16 ``a`` [M, K], FP32 ``b`` [N, K]; reference (``a bᵀ``, ``Σ a²``) in float64.
* ``skip_head_mid``: FP8 operands of a dense GEMM; references: the float64 product of the dequantised operands in
  the padded head layout (zeros in each head's mid columns, ``main``) and as it is (``plain``).
"""

from __future__ import annotations

from .op_problems import BF16_TOL, MAIN, OpProblem, default_tolerance
from .op_shape import OpShape
from .v32_suites import BHR_EXPR, EINSUM, FP8_EINSUM, HC_PRENORM, SKIP_HEAD_MID, SUM_EXPR

HC_TOL = 2e-3
"""The pre-norm GEMM's d is a TF32 product: normwise error against float64 within 2e-3 (s is exact to FP32)."""
BF16_REF = "bf16"
PLAIN_REF = "plain"
BF16_PRODUCT_REF = "bf16_product"


def _gen(device: str, seed: int):
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def _einsum(shape: OpShape, seed: int, device: str) -> OpProblem:
    import torch

    bf16 = torch.bfloat16
    gen = _gen(device, seed * 1000003 + sum(v for _, v in shape.dims))
    if shape.form == SUM_EXPR:
        s, m, n, k = (shape.dim(x) for x in "smnk")
        a = torch.randn(s, m, k, device=device, generator=gen).to(bf16)
        b = torch.randn(s, n, k, device=device, generator=gen).to(bf16)
        ref = torch.einsum(SUM_EXPR, a.double(), b.double())
        t = {"a": a, "b": b}
        if shape.out_dtype != "float32":
            return OpProblem(shape, t, {MAIN: ref}, default_tolerance(shape))
        t["c"] = torch.randn(m, n, device=device, generator=gen)
        ref = ref + t["c"].double()
        # torch's way rounds its product to BF16 before adding c: the same reference at the BF16 tolerance
        return OpProblem(shape, t, {MAIN: ref, BF16_PRODUCT_REF: ref}, default_tolerance(shape),
                         {BF16_PRODUCT_REF: BF16_TOL})
    b_, h, r, d = (shape.dim(x) for x in "bhrd")
    y = torch.randn(h, d, r + 128, device=device, generator=gen).to(bf16)[:, :, :r]  # a strided slice, as DeepGEMM's
    x = torch.randn((b_, h, r) if shape.form == BHR_EXPR else (b_, h, d), device=device, generator=gen).to(bf16)
    ref = torch.einsum(shape.form, x.double(), y.double())
    return OpProblem(shape, {"a": x, "b": y}, {MAIN: ref}, default_tolerance(shape))


def fp8_einsum_operands(x, y, ue8m0: bool = False):
    """x [b, h, r] cast per token per 128 (scales [b, h, r/128] row-major), y [h, d, r] per 128x128 block:
    ((xq, sfx), (yq, sfy))."""
    import torch

    from ..deep_gemm.utils.math import per_block_cast_to_fp8, per_token_cast_to_fp8

    b, h, r = x.shape
    d = y.shape[1]
    kb = -(-r // 128)
    xq, sfx = per_token_cast_to_fp8(x.reshape(-1, r), use_ue8m0=ue8m0)
    yq = torch.empty_like(y, dtype=torch.float8_e4m3fn)
    sfy = torch.empty((h, -(-d // 128), kb), device=y.device, dtype=torch.float32)
    for i in range(h):
        yq[i], sfy[i] = per_block_cast_to_fp8(y[i], use_ue8m0=ue8m0)
    return (xq.view(b, h, r), sfx.view(b, h, kb)), (yq, sfy)


def fp8_einsum_reference(xs, ys):
    """The float64 ``bhr,hdr->bhd`` of the dequantised operands."""
    import torch

    (xq, sfx), (yq, sfy) = xs, ys
    r, d = xq.shape[-1], yq.shape[1]
    xd = xq.double() * sfx.double().repeat_interleave(128, -1)[..., :r]
    yd = yq.double() * sfy.double().repeat_interleave(128, 1)[:, :d].repeat_interleave(128, 2)[..., :r]
    return torch.einsum(BHR_EXPR, xd, yd)


def _fp8_einsum(shape: OpShape, seed: int, device: str) -> OpProblem:
    import torch

    b, h, d, r = (shape.dim(x) for x in "bhdr")
    gen = _gen(device, seed * 1000003 + b + d)
    x = torch.randn((b, h, r), device=device, dtype=torch.bfloat16, generator=gen)
    y = torch.randn((h, d, r), device=device, dtype=torch.bfloat16, generator=gen)
    xs, ys = fp8_einsum_operands(x, y)
    refs = {MAIN: fp8_einsum_reference(xs, ys), BF16_REF: torch.einsum(BHR_EXPR, x.double(), y.double())}
    return OpProblem(shape, {"x": x, "y": y, "xs": xs, "ys": ys}, refs, BF16_TOL)


def _hc(shape: OpShape, seed: int, device: str) -> OpProblem:
    import torch

    m, n, k = shape.m, shape.n, shape.k
    gen = _gen(device, seed * 1000003 + m + k)
    a = torch.randn(m, k, device=device, generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, device=device, generator=gen)
    ref = (a.double() @ w.double().T, a.double().square().sum(-1))
    return OpProblem(shape, {"a": a, "b": w}, {MAIN: ref}, HC_TOL)


def padded_heads(plain, head_splits):
    """[M, heads × (left + right)] -> [M, heads × (left + mid + right)] with zeros in each head's mid columns."""
    import torch

    left, mid, right = head_splits
    m = plain.shape[0]
    v = plain.reshape(m, -1, left + right)
    zeros = torch.zeros(m, v.shape[1], mid, device=plain.device, dtype=plain.dtype)
    return torch.cat([v[:, :, :left], zeros, v[:, :, left:]], dim=2).reshape(m, -1)


def _skip(shape: OpShape, seed: int, device: str) -> OpProblem:
    import torch

    from ..torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    m, n, k = shape.m, shape.n, shape.k
    hs = tuple(shape.dim(x) for x in ("left", "mid", "right"))
    gen = _gen(device, seed * 1000003 + m + n)
    a = torch.randn(m, k, device=device, generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, device=device, generator=gen).to(torch.bfloat16)
    (aq, sa), (bq, sb) = per_token_cast_to_fp8(a), per_block_cast_to_fp8(w)
    ad = (aq.double().unflatten(-1, (-1, 128)) * sa.double().unsqueeze(-1)).flatten(-2)
    bd = (bq.double().unflatten(0, (-1, 128)).unflatten(-1, (-1, 128)) * sb.double()[:, None, :, None]) \
        .flatten(2, 3).flatten(0, 1)
    plain = ad @ bd.T
    refs = {MAIN: padded_heads(plain, hs), PLAIN_REF: plain}
    return OpProblem(shape, {"a": (aq, sa), "b": (bq, sb), "head_splits": hs}, refs, BF16_TOL)


_BUILDERS = {EINSUM: _einsum, FP8_EINSUM: _fp8_einsum, HC_PRENORM: _hc, SKIP_HEAD_MID: _skip}


def build_v32_problem(shape: OpShape, seed: int = 0, device: str = "cuda") -> OpProblem:
    """The operands and references of one case of issue 39's suites."""
    if shape.suite not in _BUILDERS:
        raise ValueError(f"not a case of issue 39's suites: suite {shape.suite!r}")
    return _BUILDERS[shape.suite](shape, seed, device)
