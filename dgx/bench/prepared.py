"""What an implementation under test hands the benchmark: a ready-to-time call, or why it cannot run here.
Shared by the peers (dgx.bench.peers) and the adapters they select from (dgx.bench.subject, dgx.bench.triton_fp8)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


class Unavailable(Exception):
    """This implementation cannot run here (missing API, unsupported layout…)."""


@dataclasses.dataclass
class Prepared:
    """A ready-to-time call. ``output()`` gives the valid rows (float32, stacked like ``Problem.ref``)."""

    run: Callable[[], Any]
    output: Callable[[], Any]
    reset: Callable[[], None] = lambda: None
    includes_c: bool = False  # output = c + a·bᵀ (accumulating implementations)
    reference: Any = None  # own FP32 reference (else the problem's)
    note: str = ""
    config: str = ""  # the tuned configuration, where the implementation has one (Triton)
    tried: list = dataclasses.field(default_factory=list)  # variants refused before this one, with why
