"""The BF16 GEMM suites: their fixed cases (issue 38), shared with tests/device/bf16_bench.py.

Pure Python (no torch): CPU-testable.

Suites
------
``bf16``             dense ``bf16_gemm_nt``: the 18 dense FP8 anchor shapes (docs/PEERS.md) run in BF16, then the
                     BF16 layers the presets name but do not list (:data:`PRESET_BF16_NK`) at M 64 and 4096.
``bf16_masked``      ``m_grouped_bf16_gemm_nt_masked``: docs/PEERS.md's masked shapes, M_max 4096 per group, counts
                     ``expected × U(0.7, 1.3)``.
``bf16_contiguous``  ``m_grouped_bf16_gemm_nt_contiguous``: docs/PEERS.md's contiguous shapes, each group's
                     ``expected × U(0.7, 1.3)`` rows in a segment padded to 128 rows.
``bf16_k_grouped``   ``k_grouped_bf16_gemm_tn_contiguous``: per group ``d[g] += a_gᵀ b_g`` in FP32, each group's k
                     ``base × U(0.7, 1.3)`` rounded up to 128.

The group sizes are drawn as the device script always drew them (:func:`group_counts`), so its figures and the
suites' compare.
"""

from __future__ import annotations

import random

from .op_shape import BF16_CEILING, OpShape
from .anchor_shapes import CONTIGUOUS_GMNK, DENSE_MNK, MASKED_GMNK

BF16 = "bf16"
BF16_MASKED = "bf16_masked"
BF16_CONTIGUOUS = "bf16_contiguous"
BF16_K_GROUPED = "bf16_k_grouped"
BF16_SUITES = (BF16, BF16_MASKED, BF16_CONTIGUOUS, BF16_K_GROUPED)
"""Suite names, in the order ``--suite all`` runs them."""

DENSE = [tuple(x) for x in DENSE_MNK]
"""(M, N, K) of the dense FP8 anchor shapes."""
PRESET_BF16_NK: tuple[tuple[int, int, str], ...] = (
    (7168, 14336, "DeepSeek-V3/V3.2 MTP eh_proj (2 x 7168 -> 7168), a BF16 linear"),
    (256, 7168, "DeepSeek-V3/V3.2 MoE router (mlp.gate, 256 experts), BF16"),
    (64, 7168, "DeepSeek-V3.2 indexer weights_proj (hidden -> 64 head weights), BF16"),
    (128, 4096, "Qwen3-235B-A22B MoE router (mlp.gate, 128 experts), BF16"),
)
"""(N, K, what) of the BF16 layers the presets' README names as not FP8 (so not listed in the presets)."""
PRESET_MS = (64, 4096)
MASKED = [tuple(x) for x in MASKED_GMNK]
"""(groups, expected rows, N, K) of the masked cases."""
MASKED_M_MAX = 4096
CONTIGUOUS = [tuple(x) for x in CONTIGUOUS_GMNK]
"""(groups, expected rows, N, K) of the contiguous cases."""
K_GROUPED = [(4, 7168, 4096, 4096), (4, 2048, 7168, 4096), (8, 7168, 4096, 4096), (8, 2048, 7168, 4096)]
"""(groups, M, N, base k) of the K-grouped cases."""
FORM_MAJORS = {"nt": ("k", "k"), "nn": ("k", "mn"), "tn": ("mn", "mn"), "tt": ("mn", "k")}
"""A dense form -> the major-ness of a and b (``k``: K-contiguous)."""
SEGMENT_ALIGN = 128
SEED = 0

# the seeds' offsets of each layout's group sizes (as the device script has always drawn them)
_MASKED_KEY, _CONTIGUOUS_KEY, _K_GROUPED_KEY = 50, 0, 100


def align(x: int, a: int) -> int:
    return -(-x // a) * a


def group_counts(groups: int, expected: int, key: int, alignment: int = 1) -> list[int]:
    """Each group's size: ``expected × U(0.7, 1.3)`` rounded up to ``alignment``, seeded by ``key``."""
    rng = random.Random(SEED * 1000003 + key)
    return [align(int(expected * rng.uniform(0.7, 1.3)), alignment) for _ in range(groups)]


def masked_counts(i: int) -> list[int]:
    g, expected, _, _ = MASKED[i]
    return group_counts(g, expected, _MASKED_KEY + i)


def contiguous_counts(i: int) -> list[int]:
    g, expected, _, _ = CONTIGUOUS[i]
    return group_counts(g, expected, _CONTIGUOUS_KEY + i)


def k_grouped_typical(g: int, k: int, i: int) -> tuple[list[int], int]:
    """(each group's k, their mean rounded up to 128: the k the heuristic plans for) of K-grouped case ``i``."""
    ks = group_counts(g, k, _K_GROUPED_KEY + i, 128)
    return ks, align(sum(ks) // len(ks), 128)


def dense_case(m: int, n: int, k: int, form: str = "nt") -> OpShape:
    if form not in FORM_MAJORS:
        raise ValueError(f"unknown dense form {form!r}; expected one of {', '.join(FORM_MAJORS)}")
    return OpShape(BF16, form, (("m", m), ("n", n), ("k", k)), 2 * m * n * k, 2 * (m * k + n * k + m * n),
                   BF16_CEILING)


def masked_case(i: int) -> OpShape:
    g, expected, n, k = MASKED[i]
    counts = tuple(masked_counts(i))
    valid = sum(counts)
    return OpShape(BF16_MASKED, "masked", (("groups", g), ("m", expected), ("n", n), ("k", k)), 2 * valid * n * k,
                   2 * (valid * k + g * n * k + valid * n), BF16_CEILING, counts, (), MASKED_M_MAX)


def contiguous_case(i: int) -> OpShape:
    g, expected, n, k = CONTIGUOUS[i]
    counts = tuple(contiguous_counts(i))
    valid = sum(counts)
    return OpShape(BF16_CONTIGUOUS, "contiguous", (("groups", g), ("m", expected), ("n", n), ("k", k)),
                   2 * valid * n * k, 2 * (valid * k + g * n * k + valid * n), BF16_CEILING, counts)


def k_grouped_case(i: int) -> OpShape:
    g, m, n, k = K_GROUPED[i]
    ks, _ = k_grouped_typical(g, k, i)
    total = sum(ks)
    # a and b read once, d read (c) and written in FP32
    return OpShape(BF16_K_GROUPED, "k_grouped", (("groups", g), ("m", m), ("n", n), ("k", k)), 2 * m * n * total,
                   2 * total * (m + n) + 8 * g * m * n, BF16_CEILING, (), tuple(ks), out_dtype="float32")


def padded_rows(shape: OpShape) -> int:
    """Rows of a contiguous case's A: its groups' segments padded to 128."""
    return sum(align(m, SEGMENT_ALIGN) for m in shape.group_ms)


def builtin_bf16_suite(suite: str) -> list[OpShape]:
    """The fixed cases of one BF16 suite."""
    if suite == BF16:
        return ([dense_case(m, n, k) for m, n, k in DENSE]
                + [dense_case(m, n, k) for n, k, _ in PRESET_BF16_NK for m in PRESET_MS])
    if suite == BF16_MASKED:
        return [masked_case(i) for i in range(len(MASKED))]
    if suite == BF16_CONTIGUOUS:
        return [contiguous_case(i) for i in range(len(CONTIGUOUS))]
    if suite == BF16_K_GROUPED:
        return [k_grouped_case(i) for i in range(len(K_GROUPED))]
    raise ValueError(f"unknown BF16 suite {suite!r}; expected one of {', '.join(BF16_SUITES)}")
