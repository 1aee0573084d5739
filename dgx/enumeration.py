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

# Every M up to here is asked of the heuristics; beyond it, only the M at which some block count
# changes (see m_samples).
EXHAUSTIVE_BELOW = 512
#: Largest M_sum (rows of all groups) warmed for the contiguous layout.
CONTIGUOUS_WARM_LIMIT = 65536
#: Consecutive M values per enumeration piece (about a thousand heuristic calls above EXHAUSTIVE_BELOW).
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
    ms = set(range(lo, min(hi, EXHAUSTIVE_BELOW + 1)))
    for bm in _block_ms(block_ms):
        for edge in range((lo - 1) // bm * bm, hi, bm):
            for m in (edge, edge + 1):
                if lo <= m < hi and 0 < m <= max_m and edge > 0:
                    ms.add(m)
    if lo <= max_m < hi:
        ms.add(max_m)
    return sorted(ms)


def m_samples(max_m: int, block_ms: Sequence[int] | None = None) -> list[int]:
    """The M values whose heuristic choices cover every M in 1..max_m.

    The dense heuristic sees M only through block counts ceil(M / block_m) (and comparisons of M with
    block sizes), so its choice is constant between consecutive multiples of the block sizes. Every M
    up to EXHAUSTIVE_BELOW is taken anyway; above it, each multiple j*block_m and j*block_m + 1 of every
    candidate block_m, and max_m itself. tests/test_warmup.py checks this against asking for every M.
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
