"""Number and cell formatting shared by the report modules (pure Python)."""

from __future__ import annotations

from .results import DEEPGEMM, OK, CaseSummary

STATUS_SHORT = {"failed": "FAILED", "unavailable": "n/a", "not run": "-"}
"""Table cell of an implementation that was not timed, by status."""


def num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}"


def micros(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 100:
        return f"{x:.1f}"
    return f"{x:.0f}"


def percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def times(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"


def spread_percent(us: float | None, spread: tuple[float, float] | None) -> str:
    if not us or not spread:
        return "-"
    return f"±{50 * (spread[1] - spread[0]) / us:.1f}%"


def vs_deepgemm_cell(case: CaseSummary) -> str:
    """The "vs DeepGEMM" cell of a case: empty where DeepGEMM was not tried, its status where it was not timed,
    else DeepGEMM's time over dgx's."""
    s = case.impls.get(DEEPGEMM)
    if s is None:
        return ""
    if s.status != OK:
        return STATUS_SHORT.get(s.status, s.status)
    return times(case.vs_deepgemm)
