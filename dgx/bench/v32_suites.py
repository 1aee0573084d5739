"""The suites of issue 39's families: their fixed cases, shared with the device scripts tests/device/einsum_bench.py,
fp8_einsum_bench.py and v32_bench.py.

Pure Python (no torch): CPU-testable.

Suites
------
``einsum``         ``dgx.einsum``'s three BF16 forms (DeepGEMM's test_einsum.py shapes): ``bmk,bnk->mn`` (S 129 /
                   4096 / 8192 × (M, N, K), FP32 ``d = c + Σ`` and BF16 ``d``), ``bhr,hdr->bhd`` and
                   ``bhd,hdr->bhr`` ((h, r, d) (128, 512, 128), the DeepSeek-V3.2 preset's MLA einsums, and
                   (8, 4096, 1024), × b 4 … 8192).
``fp8_einsum``     ``dgx.fp8_einsum('bhr,hdr->bhd')`` on DeepSeek's MLA projections h × d × r = 8 × 1024 × 4096 and
                   128 × 128 × 512, b 1 … 8192 with the odd 17 and 4097.
``hc_prenorm``     ``dgx.tf32_hc_prenorm_gemm`` on DeepGEMM's shapes: M 13 … 8192, N 24, K 7168 … 28672, without
                   splits or with 16.
``skip_head_mid``  ``dgx.fp8_gemm_nt_skip_head_mid`` on DeepGEMM's shapes, heads of (left, mid, right) =
                   (128, 64, 128).
"""

from __future__ import annotations

from .op_shape import BF16_CEILING, FP8_CEILING, OpShape

EINSUM = "einsum"
FP8_EINSUM = "fp8_einsum"
HC_PRENORM = "hc_prenorm"
SKIP_HEAD_MID = "skip_head_mid"
V32_SUITES = (EINSUM, FP8_EINSUM, HC_PRENORM, SKIP_HEAD_MID)
"""Suite names, in the order ``--suite all`` runs them."""

# ---- einsum (BF16) -------------------------------------------------------------------------------------------------

SUM_EXPR, BHR_EXPR, BHD_EXPR = "bmk,bnk->mn", "bhr,hdr->bhd", "bhd,hdr->bhr"
EINSUM_FORMS = {"bmk": SUM_EXPR, "bhr": BHR_EXPR, "bhd": BHD_EXPR}
"""The einsum device script's suite names -> the expression."""
SUM_SHAPES = ((128, 384, 128), (256, 256, 256), (384, 128, 384))
"""(M, N, K) of ``bmk,bnk->mn``."""
SUM_S = (129, 4096, 8192)
HEAD_SHAPES = ((128, 512, 128), (8, 4096, 1024))
"""(h, r, d) of the per-head forms."""
HEAD_B = (4, 32, 128, 4096, 8192)


def sum_case(s: int, m: int, n: int, k: int, out_dtype: str) -> OpShape:
    out_bytes = 4 * 3 if out_dtype == "float32" else 2  # FP32: c read, d read-modify-written as the device script counts
    return OpShape(EINSUM, SUM_EXPR, (("s", s), ("m", m), ("n", n), ("k", k)), 2 * s * m * n * k,
                   2 * s * (m + n) * k + out_bytes * m * n, BF16_CEILING, out_dtype=out_dtype)


def head_case(expr: str, b: int, h: int, r: int, d: int) -> OpShape:
    if expr not in (BHR_EXPR, BHD_EXPR):
        raise ValueError(f"expected {BHR_EXPR!r} or {BHD_EXPR!r}, got {expr!r}")
    x, z = (r, d) if expr == BHR_EXPR else (d, r)
    return OpShape(EINSUM, expr, (("b", b), ("h", h), ("r", r), ("d", d)), 2 * b * h * r * d,
                   2 * (b * h * x + h * d * r + b * h * z), BF16_CEILING)


def einsum_cases(forms=tuple(EINSUM_FORMS)) -> list[OpShape]:
    """The einsum cases of ``forms`` (``bmk``, ``bhr``, ``bhd``), in the device script's order."""
    out = []
    if "bmk" in forms:
        out += [sum_case(s, m, n, k, dt) for s in SUM_S for m, n, k in SUM_SHAPES for dt in ("float32", "bfloat16")]
    for form in ("bhr", "bhd"):
        if form in forms:
            out += [head_case(EINSUM_FORMS[form], b, h, r, d) for h, r, d in HEAD_SHAPES for b in HEAD_B]
    return out


# ---- fp8_einsum ----------------------------------------------------------------------------------------------------

FP8_EINSUM_SHAPES = ((8, 1024, 4096), (128, 128, 512))
"""(h, d, r): DeepSeek's MLA projections."""
FP8_EINSUM_BS = (1, 4, 17, 32, 128, 4096, 4097, 8192)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def fp8_einsum_case(b: int, h: int, d: int, r: int) -> OpShape:
    # x, y in FP8, their FP32 scales (per token per 128, per 128x128 block), z in BF16
    scales = 4 * (b * h * _cdiv(r, 128) + h * _cdiv(d, 128) * _cdiv(r, 128))
    return OpShape(FP8_EINSUM, BHR_EXPR, (("b", b), ("h", h), ("d", d), ("r", r)), 2 * b * h * d * r,
                   b * h * r + h * d * r + scales + 2 * b * h * d, FP8_CEILING)


def fp8_einsum_cases() -> list[OpShape]:
    return [fp8_einsum_case(b, h, d, r) for h, d, r in FP8_EINSUM_SHAPES for b in FP8_EINSUM_BS]


# ---- the HC pre-norm GEMM ------------------------------------------------------------------------------------------

HC_CASES = tuple((m, 24, k, s) for m in (13, 137, 4096, 8192) for k in (28672, 7680, 7168) for s in (None, 16))
"""(M, N, K, splits or None)."""


def hc_case(m: int, n: int, k: int, splits: int | None) -> OpShape:
    # a in BF16, b in FP32 read once; d and s (FP32) written, once per split
    return OpShape(HC_PRENORM, "hc_prenorm", (("m", m), ("n", n), ("k", k), ("splits", splits or 0)),
                   2 * m * n * k + 2 * m * k, m * k * 2 + n * k * 4 + (splits or 1) * (m * n + m) * 4,
                   BF16_CEILING, out_dtype="float32")


def hc_cases() -> list[OpShape]:
    return [hc_case(*c) for c in HC_CASES]


# ---- skip-head-mid -------------------------------------------------------------------------------------------------

HEAD_SPLITS = (128, 64, 128)
SKIP_CASES = tuple([(m, n, 512, HEAD_SPLITS) for m in (128, 4096) for n in (32768, 8192)]
                   + [(64, 32768, 512, HEAD_SPLITS), (4096, 16384, 7168, HEAD_SPLITS)])
"""(M, N, K, (left, mid, right)): N counts the computed columns (heads × (left + right))."""


def skip_case(m: int, n: int, k: int, head_splits: tuple[int, int, int] = HEAD_SPLITS) -> OpShape:
    left, mid, right = head_splits
    if n % (left + right):
        raise ValueError(f"N = {n} is not a whole number of heads of {left + right} computed columns")
    # the mid columns are not written: the bytes are the FP8 GEMM's
    return OpShape(SKIP_HEAD_MID, "skip_head_mid",
                   (("m", m), ("n", n), ("k", k), ("left", left), ("mid", mid), ("right", right)),
                   2 * m * n * k, m * k + n * k + 2 * m * n, FP8_CEILING)


def skip_cases() -> list[OpShape]:
    return [skip_case(*c) for c in SKIP_CASES]


def builtin_v32_suite(suite: str) -> list[OpShape]:
    """The fixed cases of one of issue 39's suites."""
    if suite == EINSUM:
        return einsum_cases()
    if suite == FP8_EINSUM:
        return fp8_einsum_cases()
    if suite == HC_PRENORM:
        return hc_cases()
    if suite == SKIP_HEAD_MID:
        return skip_cases()
    raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(V32_SUITES)}")
