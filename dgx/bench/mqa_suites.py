"""The MQA-logits suites (the DeepSeek-V3.2 indexer): their fixed cases and what each must compute and move.

Pure Python (no torch): CPU-testable. An :class:`MqaShape` says everything needed to build the inputs of one
case (the ragged context lengths included, drawn from a seeded generator), and counts the work and the bytes
the metrics are computed on.

Suites
------
``mqa``        prefill, ``fp8_mqa_logits``: H = 64, D = 128, S = 4096 queries, S_kv in {8192, 65536}, causal
               windows (query i sees keys ``[0, S_kv - S + i + 1)``), FP32 logits, ``clean_logits=True``.
               Metric: TFLOPS on the in-window work, ``2·H·D`` per query-key pair inside a window.
``paged_mqa``  decode, ``fp8_paged_mqa_logits``: H = 64, D = 128, next_n in {1, 2}, B in {64, 256, 1024},
               every context 8192 or 65536 tokens; plus two ragged batches (lengths varying 10x within the
               batch, the same total as a balanced batch, which is also in the suite). Metric: GB/s on the bytes
               that must move (the used blocks of the KV cache, the logits, q and the weights) and their share
               of the HBM peak.

These suites have fixed problems: a shapes file does not describe them.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from typing import Any

MQA = "mqa"
PAGED_MQA = "paged_mqa"
MQA_SUITES = (MQA, PAGED_MQA)
"""Suite names, in the order ``--suite all`` runs them (after the GEMM suites)."""

HEADS = 64
HEAD_DIM = 128
PREFILL_SEQ_LEN = 4096
PREFILL_SEQ_LEN_KV = (8192, 65536)
PAGED_BATCHES = (64, 256, 1024)
PAGED_NEXT_NS = (1, 2)
PAGED_CONTEXTS = (8192, 65536)
RAGGED_CASES = ((256, 8192), (64, 65536))
"""(B, average context) of the ragged batches (next_n = 1)."""
RAGGED_SPREAD = 10
"""Longest / shortest context of a ragged batch."""

BLOCK_KV = 64
"""Tokens per block of the paged KV cache."""
SCALE_BYTES = 4
"""One FP32 scale per key token, stored after the block's FP8 values."""

MQA_GOAL_TFLOPS = 1000.0
"""The prefill goal (issue #25): 1000 TFLOPS on the in-window work."""
HBM_PEAK_GBPS = 3350.0
"""H100 SXM HBM3 datasheet bandwidth (3.35 TB/s): the decode's share is reported against it."""
PAGED_GOAL_SHARE = 0.8
"""The decode goal: 80% of the HBM peak."""

DEFAULT_SEED = 0


def _blocks(context_len: int) -> int:
    return (context_len + BLOCK_KV - 1) // BLOCK_KV


@dataclasses.dataclass(frozen=True)
class MqaShape:
    """One MQA-logits case.

    Prefill (``suite == "mqa"``): ``seq_len`` queries against ``seq_len_kv`` keys, causal windows.
    Decode (``suite == "paged_mqa"``): ``batch`` sequences of ``next_n`` queries each; every context is
    ``context_len`` tokens, or (ragged) ``ragged_lens`` holds each sequence's length and ``context_len`` is
    their average (exact: the lengths sum to ``batch * context_len``).
    """

    suite: str
    heads: int = HEADS
    dim: int = HEAD_DIM
    seq_len: int = 0
    seq_len_kv: int = 0
    batch: int = 0
    next_n: int = 0
    context_len: int = 0
    ragged_lens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.suite not in MQA_SUITES:
            raise ValueError(f"MqaShape: unknown suite {self.suite!r}; expected one of {', '.join(MQA_SUITES)}")
        if self.suite == PAGED_MQA and self.ragged_lens and len(self.ragged_lens) != self.batch:
            raise ValueError(f"MqaShape: {len(self.ragged_lens)} ragged lengths for a batch of {self.batch}")

    # ---- identity --------------------------------------------------------------------------------

    @property
    def ragged(self) -> bool:
        return bool(self.ragged_lens)

    @property
    def label(self) -> str:
        """``S=4096 S_kv=8192`` (prefill), ``B=64 next_n=1 ctx=8192`` or ``B=256 next_n=1 ctx≈8192 ragged``."""
        if self.suite == MQA:
            return f"S={self.seq_len} S_kv={self.seq_len_kv}"
        if self.ragged:
            return f"B={self.batch} next_n={self.next_n} ctx≈{self.context_len} ragged"
        return f"B={self.batch} next_n={self.next_n} ctx={self.context_len}"

    def balanced(self) -> "MqaShape":
        """The decode case with the same batch, next_n and total context, every length equal."""
        if self.suite != PAGED_MQA:
            raise ValueError(f"balanced(): only decode cases have one; this is {self.label}")
        return MqaShape(PAGED_MQA, self.heads, self.dim, batch=self.batch, next_n=self.next_n,
                        context_len=self.context_len)

    # ---- sizes -----------------------------------------------------------------------------------

    @property
    def context_lens(self) -> tuple[int, ...]:
        """Each sequence's context length (decode)."""
        return self.ragged_lens if self.ragged else (self.context_len,) * self.batch

    @property
    def max_context_len(self) -> int:
        """The logits' width (decode)."""
        return max(self.context_lens, default=0)

    @property
    def blocks(self) -> int:
        """KV-cache blocks the decode reads: ``sum(ceil(len / 64))``."""
        return sum(_blocks(c) for c in self.context_lens)

    @property
    def rows(self) -> int:
        """Logits rows: S (prefill), ``B · next_n`` (decode)."""
        return self.seq_len if self.suite == MQA else self.batch * self.next_n

    @property
    def width(self) -> int:
        """Logits columns: S_kv (prefill), the longest context (decode)."""
        return self.seq_len_kv if self.suite == MQA else self.max_context_len

    @property
    def pairs(self) -> int:
        """Query-key pairs inside the windows.

        Prefill: query i sees ``min(max(S_kv - S + i + 1, 0), S_kv)`` keys. Decode: query t of a sequence of
        length c sees ``c - next_n + t + 1`` keys.
        """
        if self.suite == MQA:
            s, skv = self.seq_len, self.seq_len_kv
            return sum(min(max(skv - s + i + 1, 0), skv) for i in range(s))
        n = self.next_n
        return sum(max(0, min(c - n + t + 1, c)) for c in self.context_lens for t in range(n))

    @property
    def flops(self) -> int:
        """``2 · H · D`` per query-key pair inside the windows (the work outside them is not counted)."""
        return 2 * self.heads * self.dim * self.pairs

    @property
    def bytes_moved(self) -> int:
        """Bytes the call must move at least.

        Decode: the KV cache of the used blocks (``blocks · 64 · (D + 4)``: FP8 values and FP32 scales), the
        logits written (``B · next_n · max_context_len · 4``), q (``B · next_n · H · D``) and the weights
        (``B · next_n · H · 4``). Prefill: q (``S · H · D``), the keys with their scales (``S_kv · (D + 4)``),
        the weights (``S · H · 4``) and the logits (``S · S_kv · 4``); window bounds and block tables are not
        counted.
        """
        h, d = self.heads, self.dim
        if self.suite == MQA:
            s, skv = self.seq_len, self.seq_len_kv
            return s * h * d + skv * (d + SCALE_BYTES) + s * h * 4 + s * skv * 4
        rows = self.rows
        return (self.blocks * BLOCK_KV * (d + SCALE_BYTES) + rows * self.max_context_len * 4
                + rows * h * d + rows * h * 4)

    def floor(self) -> tuple[str, float]:
        """(bound, µs) of the fixed reference the suite is measured against: the prefill's goal (1000 TFLOPS,
        compute) or the HBM peak (decode, memory)."""
        if self.suite == MQA:
            return "compute", self.flops / (MQA_GOAL_TFLOPS * 1e12) * 1e6
        return "memory", self.bytes_moved / (HBM_PEAK_GBPS * 1e9) * 1e6

    # ---- records ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ragged_lens"] = list(self.ragged_lens)
        d["label"] = self.label
        d["pairs"] = self.pairs
        d["flops"] = self.flops
        d["bytes"] = self.bytes_moved
        if self.suite == PAGED_MQA:
            d["blocks"] = self.blocks
            d["max_context_len"] = self.max_context_len
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MqaShape":
        return cls(
            suite=d["suite"],
            heads=int(d.get("heads", HEADS)),
            dim=int(d.get("dim", HEAD_DIM)),
            seq_len=int(d.get("seq_len", 0)),
            seq_len_kv=int(d.get("seq_len_kv", 0)),
            batch=int(d.get("batch", 0)),
            next_n=int(d.get("next_n", 0)),
            context_len=int(d.get("context_len", 0)),
            ragged_lens=tuple(int(x) for x in d.get("ragged_lens", ())),
        )


def ragged_lens(batch: int, average: int, spread: int = RAGGED_SPREAD, seed: int = DEFAULT_SEED) -> tuple[int, ...]:
    """``batch`` context lengths whose longest is about ``spread`` times the shortest, summing to exactly
    ``batch * average`` (seeded: the same lengths on every machine)."""
    if batch < 2 or average < spread or spread < 1:
        raise ValueError(f"ragged_lens: expected batch >= 2 and average >= spread >= 1; got {batch}, {average}, {spread}")
    rng = random.Random((seed * 1_000_003) ^ zlib.crc32(f"{PAGED_MQA}/{batch}/{average}/{spread}".encode()))
    raw = [1.0, float(spread)] + [rng.uniform(1.0, spread) for _ in range(batch - 2)]
    rng.shuffle(raw)
    total = batch * average
    lens = [max(1, int(total * r / sum(raw))) for r in raw]
    short = total - sum(lens)
    order = sorted(range(batch), key=lambda i: raw[i])  # the remainder goes to the shortest, one token each
    for i in range(short):
        lens[order[i % batch]] += 1
    return tuple(lens)


def prefill_case(seq_len_kv: int, seq_len: int = PREFILL_SEQ_LEN) -> MqaShape:
    return MqaShape(MQA, seq_len=seq_len, seq_len_kv=seq_len_kv)


def paged_case(batch: int, next_n: int, context_len: int) -> MqaShape:
    return MqaShape(PAGED_MQA, batch=batch, next_n=next_n, context_len=context_len)


def ragged_case(batch: int, average: int, next_n: int = 1, seed: int = DEFAULT_SEED) -> MqaShape:
    return MqaShape(PAGED_MQA, batch=batch, next_n=next_n, context_len=average,
                    ragged_lens=ragged_lens(batch, average, seed=seed))


def builtin_mqa_suite(suite: str, seed: int = DEFAULT_SEED) -> list[MqaShape]:
    """The fixed cases of ``mqa`` or ``paged_mqa``."""
    if suite == MQA:
        return [prefill_case(skv) for skv in PREFILL_SEQ_LEN_KV]
    if suite == PAGED_MQA:
        cases = [paged_case(b, n, c) for c in PAGED_CONTEXTS for b in PAGED_BATCHES for n in PAGED_NEXT_NS]
        return cases + [ragged_case(b, avg, seed=seed) for b, avg in RAGGED_CASES]
    raise ValueError(f"unknown MQA suite {suite!r}; expected one of {', '.join(MQA_SUITES)}")


def is_mqa(shape: object) -> bool:
    """Whether a case belongs to an MQA suite."""
    return isinstance(shape, MqaShape)
