"""Benchmark suites: the shapes, their random group sizes, and DeepGEMM's anchor figures.

Pure Python (no torch): CPU-testable. A :class:`Shape` says everything needed to build the inputs of
one benchmark case, including the (seeded) random group sizes, so a run is reproducible and a
recorded result says exactly what was measured.

Suites
------
``dense``       the 18 shapes of docs/PEERS.md's dense table (``fp8_gemm_nt``, BF16 out).
``contiguous``  docs/PEERS.md's M-grouped contiguous shapes: per group ``m × U(0.7, 1.3)`` rows, each
                segment padded to 128 rows with ``m_indices = -1``.
``masked``      docs/PEERS.md's M-grouped masked shapes: ``M_max = 4096`` rows per group,
                ``masked_m = expected × U(0.7, 1.3)``.
``wgrad``       dense weight gradient (FP32 ``d = c + a·bᵀ``, both operands scaled per 1×128).
``k_grouped``   MoE weight gradient: per group ``d[g] += A_g·B_gᵀ``, ``A_g [M, k]``, ``B_g [N, k]``.
``mqa``         MQA logits, prefill (fixed cases: :mod:`dgx.bench.mqa_suites`).
``paged_mqa``   MQA logits, decode over a paged KV cache (fixed cases: :mod:`dgx.bench.mqa_suites`).

Shapes file
-----------
``--shapes FILE`` takes the warmup shapes format: a JSON list of objects with ``kind`` (one of
:data:`KINDS`), ``n``, ``k``, ``groups`` (grouped kinds) and optional ``max_m``; for the benchmark an
entry may also carry ``m``. Meaning of ``m`` per kind (``max_m`` stands in when ``m`` is absent):

* ``dense``, ``wgrad``: M.
* ``m_grouped_contiguous``: expected rows per group (each group gets ``m × U(0.7, 1.3)``).
* ``m_grouped_masked``: expected rows per group; ``max_m`` is M_max per group (default: ``m × 1.3``
  rounded up to 128).
* ``k_grouped``: M of the output (``k`` is the K of each group).

The entries are parsed and validated by :func:`dgx.warmup.parse_shapes` (one implementation of the
format; its errors name the entry and the field), then checked for what only the benchmark needs: an
``m`` (or ``max_m``), ``m <= max_m`` for dense kinds, and ``k`` a multiple of 128 for ``k_grouped``.
Unknown fields are ignored with a warning rather than refused. The MQA suites have fixed problems: an entry
of kind ``mqa_logits`` or ``paged_mqa_logits`` is refused with a message saying so, as is one of the warmup-only
kind ``m_grouped_contiguous_psum``.
"""

from __future__ import annotations

import dataclasses
import math
import random
import zlib
from typing import Any, Iterable

from .. import warmup as _warmup
from ..kinds import LAYOUT_VARIANTS, SHORT_NAMES, GemmKind
from ..warmup import ShapesFileError, ShapeSpec
from .anchor_shapes import CONTIGUOUS_GMNK, DENSE_MNK, MASKED_GMNK
from .moe_suites import MOE_SUITES, MoeShape, builtin_moe_suite
from .mqa_suites import MQA_SUITES, MqaShape, builtin_mqa_suite
from .op_shape import OpShape
from .op_suites import OP_SUITES, builtin_op_suite

# --------------------------------------------------------------------------------------------------
# names

GEMM_SUITES = SHORT_NAMES
"""The GEMM suites: the kinds' short names (dgx.kinds.GemmKind.short_name)."""

SUITES = GEMM_SUITES + MQA_SUITES + MOE_SUITES + OP_SUITES
"""Suite names, in the order ``--suite all`` runs them: the GEMM suites, the MQA-logits suites, the MoE block, the
single-operation suites (BF16 GEMMs, einsums, HC pre-norm GEMM, skip-head-mid)."""

FIXED_SUITES = MQA_SUITES + MOE_SUITES + OP_SUITES
"""Suites with fixed problems: a shapes file does not describe them."""

MQA_FILE_KINDS = {"mqa_logits": "mqa", "paged_mqa_logits": "paged_mqa"}
"""Shapes-file kinds one might write for the fixed suites (refused with a message naming the suite)."""

KINDS = tuple(k for k in _warmup.KINDS if k not in LAYOUT_VARIANTS)
"""Shape-file kinds the benchmark takes: the warmup format's names but its layout variants (those only warm and
inspect kernels: ``m_grouped_contiguous_psum``)."""

KIND_TO_SUITE = {kind.value: kind.short_name for kind in GemmKind}
SUITE_TO_KIND = {kind.short_name: kind.value for kind in GemmKind}

GROUPED_KINDS = _warmup.GROUPED_KINDS

MK_ALIGNMENT = 128
"""Row alignment of contiguous-layout segments (``dgx.get_mk_alignment_for_contiguous_layout()``)."""

DEFAULT_SEED = 0
RANDOM_LOW, RANDOM_HIGH = 0.7, 1.3
MASKED_M_MAX = 4096


def align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


# --------------------------------------------------------------------------------------------------
# shapes


@dataclasses.dataclass(frozen=True)
class Shape:
    """One benchmark case.

    ``m`` is the dense M, the expected rows per group (M-grouped), or the output M (k_grouped).
    ``group_ms`` holds the actual rows of each group (contiguous: before padding to 128; masked: the
    ``masked_m`` values); ``group_ks`` the K of each group (k_grouped). ``max_m`` is M_max (masked).
    """

    suite: str
    m: int
    n: int
    k: int
    groups: int = 1
    max_m: int | None = None
    group_ms: tuple[int, ...] = ()
    group_ks: tuple[int, ...] = ()

    # ---- derived sizes ---------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        return SUITE_TO_KIND[self.suite]

    @property
    def label(self) -> str:
        """Readable label: ``M×N×K`` for dense/wgrad, ``Gg·m×N×K`` for grouped suites."""
        if self.suite in ("dense", "wgrad"):
            return f"{self.m}×{self.n}×{self.k}"
        return f"{self.groups}g·{self.m}×{self.n}×{self.k}"

    @property
    def valid_m(self) -> int:
        """Rows that carry results (sum over groups for M-grouped)."""
        if self.suite in ("contiguous", "masked"):
            return sum(self.group_ms)
        return self.m

    @property
    def total_k(self) -> int:
        """Sum of K over groups (k_grouped), else K."""
        if self.suite == "k_grouped":
            return sum(self.group_ks)
        return self.k

    @property
    def padded_m(self) -> int:
        """Rows of the A tensor: contiguous = sum of 128-aligned segments; masked = G × M_max."""
        if self.suite == "contiguous":
            return sum(align(x, MK_ALIGNMENT) for x in self.group_ms)
        if self.suite == "masked":
            return self.groups * (self.max_m or 0)
        return self.m

    @property
    def out_bytes(self) -> int:
        return 4 if self.suite in ("wgrad", "k_grouped") else 2

    @property
    def accumulates(self) -> bool:
        """FP32 suites read ``c`` (= ``d``) as well as writing ``d``."""
        return self.suite in ("wgrad", "k_grouped")

    @property
    def flops(self) -> int:
        """2·M·N·K over valid rows (grouped: summed over groups)."""
        if self.suite == "k_grouped":
            return 2 * self.m * self.n * self.total_k
        return 2 * self.valid_m * self.n * self.k

    @property
    def bytes_moved(self) -> int:
        """Bytes the GEMM must move at least, as docs/METHOD.md counts them.

        ``M·K + K·N + 2·M·N`` for FP8 inputs and BF16 output (grouped: valid rows only, B counted
        once per group). FP32-output suites count 4 bytes per output element, twice (``c`` read,
        ``d`` written). k_grouped: each group reads its ``A_g``, ``B_g`` once and updates its own
        ``d[g]``. Scale factors are not counted (under 1% of the traffic).
        """
        out = self.out_bytes * (2 if self.accumulates else 1)
        if self.suite == "k_grouped":
            return (self.m + self.n) * self.total_k + self.groups * out * self.m * self.n
        if self.suite in ("contiguous", "masked"):
            vm = self.valid_m
            return vm * self.k + self.groups * self.n * self.k + out * vm * self.n
        return self.m * self.k + self.k * self.n + out * self.m * self.n

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["group_ms"] = list(self.group_ms)
        d["group_ks"] = list(self.group_ks)
        d["label"] = self.label
        d["valid_m"] = self.valid_m
        d["flops"] = self.flops
        d["bytes"] = self.bytes_moved
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Shape | MqaShape":
        """The case a :meth:`to_dict` record describes (an :class:`MqaShape` for the MQA suites' records)."""
        if d.get("suite") in MQA_SUITES:
            return MqaShape.from_dict(d)
        if d.get("suite") in MOE_SUITES:
            return MoeShape.from_dict(d)
        if d.get("suite") in OP_SUITES:
            return OpShape.from_dict(d)
        return cls(
            suite=d["suite"],
            m=int(d["m"]),
            n=int(d["n"]),
            k=int(d["k"]),
            groups=int(d.get("groups", 1)),
            max_m=d.get("max_m"),
            group_ms=tuple(int(x) for x in d.get("group_ms", ())),
            group_ks=tuple(int(x) for x in d.get("group_ks", ())),
        )


def _rng(seed: int, *key: object) -> random.Random:
    """A generator seeded by ``seed`` and the shape's identity (stable across runs and machines)."""
    tag = "/".join(str(x) for x in key).encode()
    return random.Random((seed * 1_000_003) ^ zlib.crc32(tag))


def make_shape(
    suite: str,
    m: int,
    n: int,
    k: int,
    groups: int = 1,
    max_m: int | None = None,
    seed: int = DEFAULT_SEED,
) -> Shape:
    """Build a :class:`Shape`, drawing the random group sizes (seeded) where the suite has them."""
    if suite not in GEMM_SUITES:
        raise ValueError(f"unknown GEMM suite {suite!r}; expected one of {', '.join(GEMM_SUITES)}")
    if suite in ("dense", "wgrad"):
        return Shape(suite, m, n, k)
    rng = _rng(seed, suite, groups, m, n, k, max_m)
    if suite == "contiguous":
        ms = tuple(int(m * rng.uniform(RANDOM_LOW, RANDOM_HIGH)) for _ in range(groups))
        return Shape(suite, m, n, k, groups, None, ms)
    if suite == "masked":
        mm = max_m if max_m is not None else align(math.ceil(m * RANDOM_HIGH), MK_ALIGNMENT)
        ms = tuple(min(mm, int(m * rng.uniform(RANDOM_LOW, RANDOM_HIGH))) for _ in range(groups))
        return Shape(suite, m, n, k, groups, mm, ms)
    # k_grouped: every group gets exactly k (the suite's K per group)
    return Shape(suite, m, n, k, groups, None, (), tuple([k] * groups))


# --------------------------------------------------------------------------------------------------
# the built-in suites (the shapes of docs/PEERS.md's tables)

WGRAD_MN: tuple[tuple[int, int], ...] = (
    (7168, 2112),
    (1536, 24576),
    (512, 32768),
    (16384, 7168),
    (7168, 4096),
    (2048, 7168),
)
WGRAD_K: tuple[int, ...] = (4096, 8192)

K_GROUPED_GK: tuple[tuple[int, int], ...] = ((4, 4096), (4, 8192), (8, 4096))
K_GROUPED_MN: tuple[tuple[int, int], ...] = ((7168, 4096), (2048, 7168))


def builtin_suite(suite: str, seed: int = DEFAULT_SEED) -> list[Shape | MqaShape]:
    """The built-in shapes of one suite."""
    if suite in MQA_SUITES:
        return list(builtin_mqa_suite(suite, seed))
    if suite in MOE_SUITES:
        return list(builtin_moe_suite(suite, seed))
    if suite in OP_SUITES:
        return list(builtin_op_suite(suite))
    if suite == "dense":
        return [make_shape("dense", m, n, k) for (m, n, k) in DENSE_MNK]
    if suite == "contiguous":
        return [make_shape("contiguous", m, n, k, g, seed=seed) for (g, m, n, k) in CONTIGUOUS_GMNK]
    if suite == "masked":
        return [
            make_shape("masked", m, n, k, g, max_m=MASKED_M_MAX, seed=seed) for (g, m, n, k) in MASKED_GMNK
        ]
    if suite == "wgrad":
        return [make_shape("wgrad", m, n, k) for (m, n) in WGRAD_MN for k in WGRAD_K]
    if suite == "k_grouped":
        return [
            make_shape("k_grouped", m, n, k, g, seed=seed) for (m, n) in K_GROUPED_MN for (g, k) in K_GROUPED_GK
        ]
    raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)} or 'all'")


def suite_names(suite: str) -> list[str]:
    """``'all'`` → every suite; a single name → ``[name]``; else ``ValueError``."""
    if suite == "all":
        return list(SUITES)
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)} or 'all'")
    return [suite]


def select_shapes(
    suite: str, shapes: Iterable[Shape] | None = None, seed: int = DEFAULT_SEED
) -> list[Shape | MqaShape]:
    """The shapes to run: the built-in suites, or ``shapes`` (from a file) filtered by ``suite``."""
    names = suite_names(suite)
    if shapes is None:
        out: list[Shape | MqaShape] = []
        for s in names:
            out.extend(builtin_suite(s, seed))
        return out
    return [s for s in shapes if s.suite in names]


# --------------------------------------------------------------------------------------------------
# shapes file


def _bench_shape(spec: ShapeSpec, idx: int, seed: int, warnings: list[str]) -> Shape:
    """The benchmark case of one validated shapes-file entry (``idx`` is its index, for messages).

    The warmup format's checks are done by :func:`dgx.warmup.parse_shapes`; these are the ones only
    the benchmark needs: an M to run, M within ``max_m`` for dense kinds, whole 128-column K blocks
    per group for k_grouped.
    """
    kind = spec.kind
    m = spec.m if spec.m is not None else spec.max_m
    if m is None:
        raise ShapesFileError(
            f"entry {idx}: field 'm': expected a positive integer, the M to benchmark ('max_m' stands in "
            f"when it is absent), got nothing (missing)"
        )
    max_m = spec.max_m
    if kind in ("dense", "wgrad") and max_m is not None and m > max_m:
        raise ShapesFileError(f"entry {idx}: field 'm': expected at most max_m ({max_m}), got {m}")
    if kind == "k_grouped" and spec.k % MK_ALIGNMENT:
        raise ShapesFileError(
            f"entry {idx}: field 'k': expected a multiple of {MK_ALIGNMENT} for k_grouped (K per group), got {spec.k}"
        )
    if kind == "m_grouped_masked" and max_m is not None and m > max_m * RANDOM_HIGH:
        warnings.append(f"entry {idx}: m={m} is well above max_m={max_m}; masked counts are clamped to max_m")
    return make_shape(
        KIND_TO_SUITE[kind],
        m,
        spec.n,
        spec.k,
        spec.groups or 1,
        max_m=max_m if kind == "m_grouped_masked" else None,
        seed=seed,
    )


def _bench_shapes(specs: list[ShapeSpec], seed: int, warnings: list[str]) -> list[Shape]:
    return [_bench_shape(spec, idx, seed, warnings) for idx, spec in enumerate(specs)]


def parse_shapes(data: Any, seed: int = DEFAULT_SEED) -> tuple[list[Shape], list[str]]:
    """Validate the decoded JSON of a shapes file; return ``(shapes, warnings)``.

    The entries are validated by :func:`dgx.warmup.parse_shapes` (unknown fields are warned about
    and ignored), then by the benchmark's own checks. Raises :class:`ShapesFileError` naming the
    entry index and field of the first problem.
    """
    warnings: list[str] = []
    _refuse_fixed_kinds(data)
    specs = _warmup.parse_shapes(data, on_unknown_field=warnings.append, m_with_max_m=True)
    return _bench_shapes(specs, seed, warnings), warnings


def _refuse_fixed_kinds(data: Any) -> None:
    """Raise :class:`ShapesFileError` at the first entry whose kind names an MQA suite (fixed problems) or a
    warmup-only layout variant (m_grouped_contiguous_psum: no suite times it)."""
    if not isinstance(data, list):
        return
    for idx, entry in enumerate(data):
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if isinstance(kind, str) and kind in LAYOUT_VARIANTS:
            base = LAYOUT_VARIANTS[kind][0]
            raise ShapesFileError(
                f"entry {idx}: field 'kind': {kind!r} cannot be benchmarked: it is a dgx warmup and dgx inspect kind; "
                f"the benchmark times the {base.short_name} suite (kind {base.value!r})"
            )
        if isinstance(kind, str) and kind in MQA_FILE_KINDS:
            suite = MQA_FILE_KINDS[kind]
            raise ShapesFileError(
                f"entry {idx}: field 'kind': {kind!r} cannot be benchmarked from a shapes file: the {suite} suite "
                f"has fixed problems; run `dgx bench --suite {suite}` without --shapes"
            )


def _raw_entries(path: str) -> Any:
    """The decoded JSON of a shapes file, or None where it cannot be read (the loader reports that)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_shapes_file(path: str, seed: int = DEFAULT_SEED) -> tuple[list[Shape], list[str]]:
    """Read and validate a shapes file (see :func:`parse_shapes`); errors name the file too."""
    warnings: list[str] = []
    try:
        specs = _warmup.load_shapes_file(path, on_unknown_field=warnings.append, m_with_max_m=True)
    except ShapesFileError:
        try:  # the clearer message where the file names an MQA suite's kind
            _refuse_fixed_kinds(_raw_entries(path))
        except ShapesFileError as e:
            raise ShapesFileError(f"shapes file {path}: {e}") from None
        raise
    try:
        return _bench_shapes(specs, seed, warnings), warnings
    except ShapesFileError as e:
        raise ShapesFileError(f"shapes file {path}: {e}") from None


# --------------------------------------------------------------------------------------------------
# anchors: DeepGEMM on an H100 (docs/PEERS.md, section 1; tests/test_docs.py checks the tables agree)

ANCHOR_DEVICE = "NVIDIA H100 80GB HBM3 (SXM, 132 SMs)"

ANCHOR_CEILINGS = {
    "bf16_tflops": 787.0,
    "fp8_tflops": 1443.0,
    "copy_gbps": 3024.0,
    "fp8_datasheet_tflops": 1979.0,
}

# (M, N, K) -> DeepGEMM TFLOPS, µs, GB/s; cuBLASLt blockwise, Triton blockwise, BF16 cuBLAS TFLOPS
_DENSE_ANCHORS_TABLE = """
64 2112 7168 129 15.1 1053 76 66 85
64 24576 1536 201 24.0 1708 189 195 117
64 32768 512 154 14.0 1502 144 152 93
64 7168 16384 271 55.5 2151 248 193 152
64 4096 7168 180 20.8 1455 134 110 105
64 7168 2048 148 12.7 1235 134 123 95
128 2112 7168 230 16.8 986 153 121 165
128 24576 1536 394 24.5 1802 374 304 230
128 32768 512 277 15.5 1627 274 227 180
128 7168 16384 501 60.0 2022 488 384 294
128 4096 7168 328 22.9 1368 264 211 216
128 7168 2048 272 13.8 1212 253 245 193
4096 2112 7168 1114 111.4 555 1073 626 779
4096 24576 1536 1251 247.2 992 1156 651 753
4096 32768 512 926 148.4 1936 821 428 621
4096 7168 16384 1463 657.5 370 1263 742 806
4096 4096 7168 1410 170.6 541 1275 714 802
4096 7168 2048 1189 101.2 808 1126 676 748
"""


def _parse_dense_anchors() -> dict[tuple[int, int, int], dict[str, float]]:
    out = {}
    for line in _DENSE_ANCHORS_TABLE.strip().splitlines():
        m, n, k, tf, us, gbps, lt, tr, bf = line.split()
        out[(int(m), int(n), int(k))] = {
            "tflops": float(tf),
            "us": float(us),
            "gbps": float(gbps),
            "cublaslt_blockwise_tflops": float(lt),
            "triton_blockwise_tflops": float(tr),
            "bf16_cublas_tflops": float(bf),
        }
    return out


DENSE_ANCHORS = _parse_dense_anchors()

# (groups, M per group, N, K) -> DeepGEMM TFLOPS, µs
CONTIGUOUS_ANCHORS = {
    (4, 8192, 4096, 7168): {"tflops": 1324.0, "us": 1515.0},
    (4, 8192, 7168, 2048): {"tflops": 1215.0, "us": 825.0},
    (8, 4096, 4096, 7168): {"tflops": 1247.0, "us": 1576.0},
    (8, 4096, 7168, 2048): {"tflops": 1192.0, "us": 824.0},
}

# (groups, expected M, N, K) -> DeepGEMM TFLOPS, µs (M_max 4096)
MASKED_ANCHORS = {
    (1, 1024, 4096, 7168): {"tflops": 728.0, "us": 100.0},
    (1, 1024, 7168, 2048): {"tflops": 714.0, "us": 51.0},
    (2, 512, 4096, 7168): {"tflops": 732.0, "us": 97.0},
    (2, 512, 7168, 2048): {"tflops": 694.0, "us": 51.0},
    (4, 256, 4096, 7168): {"tflops": 652.0, "us": 96.0},
    (4, 256, 7168, 2048): {"tflops": 627.0, "us": 50.0},
}

# Weight gradients: docs/PEERS.md, DeepGEMM 3fc6728, measured 2026-11-24 on the same card type with the same method
# (cold L2, CUDA events, median of 30).

# (M, N, K) -> DeepGEMM TFLOPS, µs: dense weight gradient d = c + a·bᵀ, d [M, N] FP32, both operands 1×128
WGRAD_ANCHORS = {
    (7168, 2112, 4096): {"tflops": 831.0, "us": 149.0},
    (1536, 24576, 4096): {"tflops": 911.0, "us": 339.0},
    (512, 32768, 4096): {"tflops": 762.0, "us": 180.0},
    (16384, 7168, 4096): {"tflops": 941.0, "us": 1023.0},
    (7168, 4096, 4096): {"tflops": 879.0, "us": 274.0},
    (2048, 7168, 4096): {"tflops": 820.0, "us": 147.0},
    (7168, 2112, 8192): {"tflops": 954.0, "us": 260.0},
    (1536, 24576, 8192): {"tflops": 995.0, "us": 622.0},
    (512, 32768, 8192): {"tflops": 885.0, "us": 311.0},
    (16384, 7168, 8192): {"tflops": 921.0, "us": 2089.0},
    (7168, 4096, 8192): {"tflops": 981.0, "us": 490.0},
    (2048, 7168, 8192): {"tflops": 907.0, "us": 265.0},
}

# (groups, M, N, base k) -> DeepGEMM TFLOPS, µs: K-grouped weight gradient, d[g] [M, N] FP32; DeepGEMM drew
# each group's k as base ±128 (random), so compare TFLOPS, not µs
K_GROUPED_ANCHORS = {
    (4, 7168, 4096, 4096): {"tflops": 856.0, "us": 1123.0},
    (4, 2048, 7168, 4096): {"tflops": 890.0, "us": 540.0},
    (4, 7168, 4096, 8192): {"tflops": 923.0, "us": 2085.0},
    (4, 2048, 7168, 8192): {"tflops": 868.0, "us": 1109.0},
    (8, 7168, 4096, 4096): {"tflops": 826.0, "us": 2330.0},
    (8, 2048, 7168, 4096): {"tflops": 751.0, "us": 1281.0},
}

HOST_ANCHOR = {"shape": (64, 2112, 7168), "deepgemm_cpu_us_per_call": 81.0, "goal_us": 10.0}

# (M, N, K) -> DeepGEMM kernel-only µs (CUPTI through torch.profiler; docs/PEERS.md, decode sizes)
DENSE_KERNEL_ANCHORS_US = {
    (64, 2112, 7168): 12.3,
    (64, 24576, 1536): 20.5,
    (64, 32768, 512): 11.0,
    (64, 7168, 16384): 52.1,
    (64, 4096, 7168): 17.8,
    (64, 7168, 2048): 9.4,
    (128, 2112, 7168): 13.4,
    (128, 4096, 7168): 20.0,
}
"""The anchors on the kernel timer's clock: with ``--timer kernel`` dgx is compared with these only (a figure
measured with CUDA events includes launch gaps, so the clocks would not match)."""


def anchor_for(shape: Shape, timer: str = "events") -> dict[str, float] | None:
    """DeepGEMM's figure for this shape (H100, docs/PEERS.md) on the clock of ``timer``, or None where there is
    none: with ``events`` the CUDA-events tables (dense, contiguous, masked, wgrad, k_grouped), with ``kernel``
    the kernel-only times (dense decode shapes).

    Grouped anchors were measured with DeepGEMM's own random group sizes (k_grouped: each group's k drawn as
    the base k ±128), so compare TFLOPS, not µs. A k_grouped shape matches the anchor of its base k where its
    groups' K average that base.
    """
    if timer == "kernel":
        us = DENSE_KERNEL_ANCHORS_US.get((shape.m, shape.n, shape.k)) if shape.suite == "dense" else None
        if us is None:
            return None
        t = us * 1e-6
        return {"tflops": shape.flops / t / 1e12, "us": us, "gbps": shape.bytes_moved / t / 1e9}
    if shape.suite == "dense":
        return DENSE_ANCHORS.get((shape.m, shape.n, shape.k))
    if shape.suite == "contiguous":
        return CONTIGUOUS_ANCHORS.get((shape.groups, shape.m, shape.n, shape.k))
    if shape.suite == "masked" and shape.max_m == MASKED_M_MAX:
        return MASKED_ANCHORS.get((shape.groups, shape.m, shape.n, shape.k))
    if shape.suite == "wgrad":
        return WGRAD_ANCHORS.get((shape.m, shape.n, shape.k))
    if shape.suite == "k_grouped" and shape.total_k == shape.groups * shape.k:
        return K_GROUPED_ANCHORS.get((shape.groups, shape.m, shape.n, shape.k))
    return None
