"""The shapes of docs/PEERS.md's FP8 tables (DeepGEMM's anchors): the FP8 suites run them, the BF16 suites run the
same shapes in BF16. Pure Python, a leaf module (the suites' modules import it, it imports nothing)."""

from __future__ import annotations

DENSE_MNK: tuple[tuple[int, int, int], ...] = tuple(
    (m, n, k)
    for m in (64, 128, 4096)
    for (n, k) in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
)

CONTIGUOUS_GMNK: tuple[tuple[int, int, int, int], ...] = (
    (4, 8192, 4096, 7168),
    (4, 8192, 7168, 2048),
    (8, 4096, 4096, 7168),
    (8, 4096, 7168, 2048),
)

MASKED_GMNK: tuple[tuple[int, int, int, int], ...] = (
    (1, 1024, 4096, 7168),
    (1, 1024, 7168, 2048),
    (2, 512, 4096, 7168),
    (2, 512, 7168, 2048),
    (4, 256, 4096, 7168),
    (4, 256, 7168, 2048),
)
