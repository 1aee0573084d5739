"""The correctness check of MQA logits against a float64 reference (torch; any device).

The reference marks what it expects: a finite logit, ``-inf`` (a position the query may not see) or NaN
(a position the call may leave as it was: not compared). The check demands ``-inf`` exactly where the
reference has it, a finite value everywhere else it compares, and returns ``calc_diff`` over the finite
positions (docs/METHOD.md's figure, compared with the benchmark's tolerance by the caller).
"""

from __future__ import annotations

import math
from typing import Sequence

from .problems import calc_diff


class LogitsMismatch(ValueError):
    """The logits disagree with the reference in a way no tolerance covers (shape, ``-inf`` positions)."""


def check_logits(out, ref, rows: Sequence[int] | None = None) -> float:
    """``calc_diff`` of ``out`` against ``ref`` over the positions where ``ref`` is finite.

    ``out``: the checked rows of an implementation's logits (any float dtype); ``ref``: float64 of the same
    shape; ``rows``: the logits rows they are (for messages). Raises :class:`LogitsMismatch` when the shapes or
    the ``-inf`` positions differ; returns ``inf`` when a compared finite position holds NaN or ±inf.
    """
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise LogitsMismatch(f"checked logits have shape {tuple(out.shape)}, the reference {tuple(ref.shape)}")
    o = out.double()
    checked = ~torch.isnan(ref)
    neg_ref = torch.isneginf(ref) & checked
    neg_out = torch.isneginf(o) & checked
    differ = neg_ref != neg_out
    if bool(differ.any()):
        where = differ.nonzero()[:3].tolist()
        named = [((rows[r] if rows is not None else r), c) for r, c in where]
        missing = int((neg_ref & ~neg_out).sum())
        extra = int((neg_out & ~neg_ref).sum())
        raise LogitsMismatch(
            f"-inf positions differ from the reference: {missing} expected -inf not written as -inf, {extra} "
            f"unexpected -inf, of {int(checked.sum())} checked positions; e.g. (row, column) {named}"
        )
    finite = checked & ~neg_ref
    x, y = o[finite], ref[finite]
    if x.numel() == 0:
        return 0.0
    if not bool(torch.isfinite(x).all()):
        return math.inf
    return calc_diff(x, y)
