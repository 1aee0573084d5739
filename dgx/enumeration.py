"""Which kernels the heuristics can pick for a GEMM-like shape over a range of M, asked window by window.

The M values asked (:func:`m_samples`) are cut into windows of :data:`WINDOW` consecutive M, so a long
range is enumerated in pieces: pieces run in parallel, report progress as they end and can be
interrupted between them. Memory stays bounded whatever the range (nothing holds every M at once).
How a kind's M is counted is its *M space* (:data:`ROWS`, :data:`CONTIGUOUS_SUM`, :data:`PSUM`); the kinds
themselves (and their heuristics) are the families' (dgx/families), whose registry runs one piece of any kind's
warm-up in a worker process (dgx.families.run_piece).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


#: M spaces: the rows of one problem (dense, masked: per group; weight gradients), every M_sum of the contiguous
#: layout (multiples of the alignment), and the prefix-sum layout's heuristic M (any integer up to the groups' rows).
ROWS, CONTIGUOUS_SUM, PSUM = "rows", "contiguous_sum", "psum"

#: Largest M_sum (rows of all groups) warmed for the contiguous layout.
CONTIGUOUS_WARM_LIMIT = 65536
#: Consecutive M values per enumeration piece (about a thousand heuristic calls for the dense kinds).
WINDOW = 32768


def _block_ms(block_ms: Sequence[int] | None) -> Sequence[int]:
    if block_ms is not None:
        return block_ms
    from . import heuristics

    return heuristics.BLOCK_MS


def m_samples_between(max_m: int, lo: int, hi: int, block_ms: Sequence[int] | None = None) -> list[int]:
    """The values of :func:`m_samples` (``max_m``) that lie in [lo, hi), sorted."""
    lo, hi = max(lo, 1), min(hi, max_m + 1)
    if lo >= hi:
        return []
    ms = {1} if lo == 1 else set()
    for bm in _block_ms(block_ms):
        for edge in range(max((lo - 1) // bm, 1) * bm, hi, bm):  # both ends of every interval (edge - bm, edge]
            ms.update(m for m in (edge, edge + 1) if lo <= m < hi)
    if max_m < hi:
        ms.add(max_m)
    return sorted(ms)


def m_samples(max_m: int, block_ms: Sequence[int] | None = None) -> list[int]:
    """The M values whose heuristic choices cover every M in 1..max_m: M by ranges, two per range.

    The heuristics see M only through block counts ceil(M / block_m) of the candidate block sizes and through
    comparisons of M with multiples of them (M <= 64 drops 128-row tiles, M >= 256 takes the plain weight
    gradient). So between consecutive multiples j*b and (j+1)*b of a block size the block counts are constant,
    and a comparison splits such a range at most once, at one of its ends: asking both ends, j*b + 1 and
    (j+1)*b, of every range (and 1 and max_m) finds every choice. For max_m 8192 that is 257 M instead of 8192.
    tests/test_warmup.py checks this against asking for every M, for every kind and for every entry of the
    deepseek-v3 preset.
    """
    if max_m <= 0:
        raise ValueError(f"max_m: expected a positive integer, got {max_m}")
    return m_samples_between(max_m, 1, max_m + 1, block_ms)


def psum_top(groups: int | None, limit: int) -> int:
    """The largest heuristic M of the prefix-sum layout: the rows of all groups, each padded to the alignment
    (groups x limit rounded up), capped at CONTIGUOUS_WARM_LIMIT as for the contiguous layout."""
    from .heuristics import CONTIGUOUS_ALIGNMENT as align

    return max(min((groups or 1) * (-(-limit // align) * align), CONTIGUOUS_WARM_LIMIT), 1)


def m_values(space: str, groups: int | None, limit: int, lo: int, hi: int) -> list[int]:
    """The M asked of the heuristics for one shape, within [lo, hi): in :data:`CONTIGUOUS_SUM` every M_sum that is
    a multiple of the alignment up to groups x limit (capped at CONTIGUOUS_WARM_LIMIT: the choice settles on large
    tiles long before); in :data:`PSUM`, whose M (the rows of A, or groups x DeepGEMM's
    expected_m_for_psum_layout) is any integer, :func:`m_samples_between` of :func:`psum_top` (the same range);
    in :data:`ROWS` :func:`m_samples_between` of ``limit``."""
    if space == CONTIGUOUS_SUM:
        from .heuristics import CONTIGUOUS_ALIGNMENT as align

        top = max(min((groups or 1) * limit, CONTIGUOUS_WARM_LIMIT), align)
        start = -(-max(lo, align) // align) * align
        return list(range(start, min(hi, top + 1), align))
    if space == PSUM:
        return m_samples_between(psum_top(groups, limit), lo, hi)
    if space == ROWS:
        return m_samples_between(limit, lo, hi)
    raise ValueError(f"M space: expected one of {ROWS}, {CONTIGUOUS_SUM}, {PSUM}; got {space!r}")


def m_range(space: str, groups: int | None, limit: int) -> int:
    """One past the largest M :func:`m_values` can return for this shape."""
    if space == CONTIGUOUS_SUM:
        return CONTIGUOUS_WARM_LIMIT + 1
    if space == PSUM:
        return psum_top(groups, limit) + 1
    return limit + 1


def windows(space: str, groups: int | None, limit: int) -> Iterator[tuple[int, int, int]]:
    """(lo, hi, number of M asked) for each window of the shape's range that has some M to ask."""
    top = m_range(space, groups, limit)
    for lo in range(1, top, WINDOW):
        hi = min(lo + WINDOW, top)
        count = len(m_values(space, groups, limit, lo, hi))
        if count:
            yield lo, hi, count
