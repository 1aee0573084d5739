"""The MoE suite: one DeepSeek-V3 expert block, its fixed cases and what each computes and moves.

Pure Python (no torch): CPU-testable. The block, per expert e and for its rows x (hidden 7168, intermediate 2048):

    gate_up = x . W1[e]^T         W1 [2I, H]: gate rows, then up rows
    h       = silu(gate) * up     [rows, I]
    out     = h . W2[e]^T         W2 [H, I]

Cases
-----
``masked``      decode: E local experts (8-32) x about T tokens each (16-256), the masked layout (G = E, Mmax
                = 1.3 T rounded up to 64, ``masked_m`` = T x U(0.7, 1.3), seeded).
``contiguous``  prefill: E experts (4-8) x about T rows each (2048-8192), each expert's rows T x U(0.7, 1.3) in a
                segment padded to 128 rows (``m_indices`` -1 on the padding).

Each case is timed as a whole (both GEMMs and what runs between them) per implementation. TFLOPS count
``6 · rows · H · I`` on the valid rows; the bytes are the FP8 weights read once, the FP8 input and the BF16
output (the intermediate is not counted: it is what a fused block saves).
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from typing import Any

MOE = "moe"
MOE_SUITES = (MOE,)
"""Suite names, in the order ``--suite all`` runs them (after the MQA suites)."""

HIDDEN = 7168
INTER = 2048
MASKED_CASES = ((8, 16), (8, 128), (16, 64), (32, 16), (32, 64), (32, 256))
"""(local experts, expected tokens per expert) of the masked decode cases."""
CONTIGUOUS_CASES = ((4, 2048), (8, 2048), (4, 8192), (8, 4096))
"""(experts, expected rows per expert) of the contiguous prefill cases."""
LAYOUTS = ("masked", "contiguous")
RANDOM_LOW, RANDOM_HIGH = 0.7, 1.3
SEGMENT_ALIGN = 128
"""Rows of a contiguous segment are padded to this (dgx.get_mk_alignment_for_contiguous_layout())."""
MMAX_ALIGN = 64
DEFAULT_SEED = 0


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclasses.dataclass(frozen=True)
class MoeShape:
    """One expert-block case: ``experts`` groups of about ``tokens`` rows, ``group_ms`` the actual rows of each;
    ``max_m`` the masked layout's Mmax."""

    suite: str
    layout: str
    experts: int
    tokens: int
    group_ms: tuple[int, ...]
    max_m: int | None = None
    hidden: int = HIDDEN
    inter: int = INTER

    def __post_init__(self) -> None:
        if self.suite != MOE or self.layout not in LAYOUTS:
            raise ValueError(f"MoeShape: expected suite {MOE!r} and a layout in {LAYOUTS}; got {self.suite!r}, "
                             f"{self.layout!r}")
        if len(self.group_ms) != self.experts:
            raise ValueError(f"MoeShape: {len(self.group_ms)} group sizes for {self.experts} experts")
        if self.layout == "masked" and (self.max_m is None or max(self.group_ms) > self.max_m):
            raise ValueError(f"MoeShape: masked counts {self.group_ms} must fit Mmax {self.max_m}")
        if self.inter % 128 or self.hidden % 128:
            raise ValueError(f"MoeShape: hidden and intermediate sizes are multiples of 128; got {self.hidden}, "
                             f"{self.inter}")

    # ---- identity --------------------------------------------------------------------------------

    @property
    def label(self) -> str:
        return f"{self.layout} {self.experts}e·{self.tokens}"

    # the GEMM suites' names for the sizes (reports read them): rows, hidden, intermediate
    @property
    def m(self) -> int:
        return self.valid_m

    @property
    def n(self) -> int:
        return self.hidden

    @property
    def k(self) -> int:
        return self.inter

    @property
    def groups(self) -> int:
        return self.experts

    @property
    def group_ks(self) -> tuple[int, ...]:
        return ()

    # ---- sizes -----------------------------------------------------------------------------------

    @property
    def valid_m(self) -> int:
        return sum(self.group_ms)

    @property
    def padded_m(self) -> int:
        """Rows of the input tensor: the masked layout's G x Mmax, or the 128-aligned segments."""
        if self.layout == "masked":
            return self.experts * (self.max_m or 0)
        return sum(_align(m, SEGMENT_ALIGN) for m in self.group_ms)

    @property
    def flops(self) -> int:
        """``2·rows·2I·H`` (gate and up) plus ``2·rows·I·H`` (down) on the valid rows."""
        return 6 * self.valid_m * self.hidden * self.inter

    @property
    def weight_bytes(self) -> int:
        """Both GEMMs' FP8 weights, every expert's read once."""
        return self.experts * 3 * self.hidden * self.inter

    @property
    def bytes_moved(self) -> int:
        """The FP8 weights, the FP8 input rows and the BF16 output rows (scales not counted)."""
        return self.weight_bytes + self.valid_m * self.hidden * (1 + 2)

    @property
    def intermediate_bytes(self) -> int:
        """What the unfused block moves between its GEMMs and a fused one does not: the BF16 [rows, 2I] written
        and read back (the FP8 [rows, I] and its scales are written and read either way)."""
        return self.valid_m * 2 * self.inter * 2 * 2

    # ---- records ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["group_ms"] = list(self.group_ms)
        d.update(label=self.label, valid_m=self.valid_m, flops=self.flops, bytes=self.bytes_moved,
                 weight_bytes=self.weight_bytes, intermediate_bytes=self.intermediate_bytes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MoeShape":
        return cls(suite=d["suite"], layout=d["layout"], experts=int(d["experts"]), tokens=int(d["tokens"]),
                   group_ms=tuple(int(x) for x in d["group_ms"]), max_m=d.get("max_m"),
                   hidden=int(d.get("hidden", HIDDEN)), inter=int(d.get("inter", INTER)))


def group_sizes(layout: str, experts: int, tokens: int, seed: int = DEFAULT_SEED) -> tuple[int, ...]:
    """Each expert's rows: ``tokens x U(0.7, 1.3)``, at least 1, seeded by the case (the same on every machine)."""
    rng = random.Random((seed * 1_000_003) ^ zlib.crc32(f"{MOE}/{layout}/{experts}/{tokens}".encode()))
    return tuple(max(1, round(tokens * rng.uniform(RANDOM_LOW, RANDOM_HIGH))) for _ in range(experts))


def moe_case(layout: str, experts: int, tokens: int, seed: int = DEFAULT_SEED) -> MoeShape:
    sizes = group_sizes(layout, experts, tokens, seed)
    max_m = _align(-(-tokens * 13 // 10), MMAX_ALIGN) if layout == "masked" else None
    return MoeShape(MOE, layout, experts, tokens, sizes, max_m)


def builtin_moe_suite(suite: str = MOE, seed: int = DEFAULT_SEED) -> list[MoeShape]:
    """The fixed cases of the ``moe`` suite: the masked decode cases, then the contiguous prefill ones."""
    if suite != MOE:
        raise ValueError(f"unknown MoE suite {suite!r}; expected {MOE}")
    return ([moe_case("masked", e, t, seed) for e, t in MASKED_CASES]
            + [moe_case("contiguous", e, t, seed) for e, t in CONTIGUOUS_CASES])


def is_moe(shape: object) -> bool:
    """Whether a case belongs to the MoE suite."""
    return isinstance(shape, MoeShape)
