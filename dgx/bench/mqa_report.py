"""The MQA suites' part of the reports: their table columns, goal lines and plot metric (pure Python).

Prefill (``mqa``): µs, TFLOPS on the in-window work and its share of the 1000 TFLOPS goal. Decode
(``paged_mqa``): µs, GB/s on the bytes that must move, the share of the HBM peak (goal 80%), and for the
ragged cases the ratio of their time to the balanced case's. Peers: µs and the same metric, with dgx's speedup.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .fmt import STATUS_SHORT, micros, num, percent, spread_percent, times, vs_deepgemm_cell
from .mqa_suites import HBM_PEAK_GBPS, MQA, MQA_GOAL_TFLOPS, PAGED_GOAL_SHARE, PAGED_MQA
from .results import DEEPGEMM, DGX, IMPL_SHORT, OK, CaseSummary, ImplSummary, SuiteSummary, peer_names

MQA_SUITE_TITLES = {
    MQA: "MQA logits, prefill (fp8_mqa_logits, H=64, D=128, causal windows, FP32 logits, clean_logits=True)",
    PAGED_MQA: "MQA logits, decode (fp8_paged_mqa_logits, paged FP8 KV cache, H=64, D=128, FP32 logits)",
}


def _value(suite: str, s: ImplSummary | None) -> float | None:
    """The suite's metric of one implementation: TFLOPS (prefill) or GB/s (decode)."""
    if s is None or s.status != OK:
        return None
    return s.tflops if suite == MQA else s.gbps


def _peer_cells(case: CaseSummary, name: str, suite: str) -> list[str]:
    s = case.impls.get(name)
    if s is None:
        return ["", ""]
    if s.status != OK:
        short = STATUS_SHORT.get(s.status, s.status)
        return [short, short]
    sp = case.speedups.get(name)
    value = num(_value(suite, s))
    return [micros(s.us), f"{value} ({times(sp)})" if sp is not None else value]


def mqa_suite_rows(suite: SuiteSummary, repeats: int) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, rows and the geomean row of an MQA suite's table."""
    name = suite.suite
    paged = name == PAGED_MQA
    unit = "GB/s" if paged else "TFLOPS"
    peers = peer_names(suite)
    header = ["case", "dgx µs"]
    if repeats > 1:
        header.append("spread")
    header += [unit, "of HBM peak" if paged else f"of goal ({MQA_GOAL_TFLOPS:.0f} TF)"]
    if paged:
        header.append("vs balanced")
    dg = any(DEEPGEMM in c.impls for c in suite.cases)
    if dg:
        header.append("vs DeepGEMM")
    for p in peers:
        short = IMPL_SHORT.get(p, p)
        header += [f"{short} µs", f"{short} {'GB/s' if paged else 'TF'} (dgx ×)"]
    rows = []
    for c in suite.cases:
        d = c.impls.get(DGX)
        ok = d is not None and d.status == OK
        row = [c.shape.label, micros(d.us) if ok else (STATUS_SHORT.get(d.status, d.status) if d else "-")]
        if repeats > 1:
            row.append(spread_percent(d.us, d.us_spread) if ok else "-")
        row += [num(_value(name, d)) if ok else "-", percent(d.fraction) if ok else "-"]
        if paged:
            row.append(times(c.balanced.get("ratio")) if c.balanced else "")
        if dg:
            row.append(vs_deepgemm_cell(c))
        for p in peers:
            row += _peer_cells(c, p, name)
        rows.append(row)
    gm_value = suite.geomean_gbps.get(DGX) if paged else suite.geomean_tflops.get(DGX)
    gm = ["geomean", "", *([""] if repeats > 1 else []), num(gm_value), percent(suite.geomean_fraction)]
    if paged:
        gm.append("")
    if dg:
        gm.append(times(suite.geomean_vs_deepgemm))
    for p in peers:
        v = suite.geomean_gbps.get(p) if paged else suite.geomean_tflops.get(p)
        sp = suite.geomean_speedup.get(p)
        gm += ["", f"{num(v)} ({times(sp)})" if v is not None else "-"]
    return header, rows, gm


def goal_line(suite: SuiteSummary) -> str:
    """The goal and where dgx stands against it."""
    dgx = [c.impls[DGX] for c in suite.cases if DGX in c.impls and c.impls[DGX].status == OK]
    if suite.suite == MQA:
        line = (f"Goal: {MQA_GOAL_TFLOPS:.0f} TFLOPS on the in-window work (2·H·D per query-key pair inside the "
                "causal windows)")
        gm = suite.geomean_tflops.get(DGX)
        if gm is None:
            return line + "; dgx: no timed case."
        best = max(d.tflops for d in dgx)
        return line + f"; dgx: geomean {gm:.0f} TFLOPS ({percent(gm / MQA_GOAL_TFLOPS)} of the goal), best {best:.0f}."
    goal = PAGED_GOAL_SHARE * HBM_PEAK_GBPS
    line = (f"Goal: {percent(PAGED_GOAL_SHARE)} of the {HBM_PEAK_GBPS:.0f} GB/s HBM peak ({goal:.0f} GB/s) on the "
            "bytes that must move")
    gm = suite.geomean_gbps.get(DGX)
    if gm is None:
        return line + "; dgx: no timed case."
    best = max(d.gbps for d in dgx)
    return line + (f"; dgx: geomean {gm:.0f} GB/s ({percent(gm / HBM_PEAK_GBPS)} of the peak), best {best:.0f} "
                   f"({percent(best / HBM_PEAK_GBPS)}).")


def ragged_lines(suite: SuiteSummary) -> list[str]:
    """One line per ragged decode case: its lengths and its time against the balanced case's."""
    out = []
    for c in suite.cases:
        s = c.shape
        if s.suite != PAGED_MQA or not s.ragged:
            continue
        lens = s.context_lens
        line = (f"{s.label}: {s.batch} lengths from {min(lens)} to {max(lens)} tokens (sum {sum(lens)} = "
                f"{s.batch} × {s.context_len})")
        b = c.balanced or {}
        if b.get("ratio") is not None:
            line += f"; dgx takes {times(b['ratio'])} the time of {b['label']} ({micros(b['dgx_us'])} µs)"
        else:
            line += f"; no ratio: {b.get('label', 'the balanced case')} or this case was not timed"
        out.append(line)
    return out


def mqa_suite_lines(suite: SuiteSummary) -> list[str]:
    """The lines under an MQA suite's table: the goal, then the ragged cases."""
    return [goal_line(suite)] + ragged_lines(suite)


@dataclasses.dataclass(frozen=True)
class PlotMetric:
    """What an MQA suite's plot panel shows: the bar value, its axis label and horizontal reference lines."""

    ylabel: str
    value: Callable[[ImplSummary | None], float | None]
    lines: tuple[tuple[float, str, str], ...]  # (y, legend label, line style)


def plot_metric(suite: SuiteSummary) -> PlotMetric | None:
    """The panel metric of an MQA suite; None for the GEMM suites (TFLOPS with the FP8 ceiling)."""
    if suite.suite == MQA:
        return PlotMetric("TFLOPS (in-window)", lambda s: _value(MQA, s),
                          ((MQA_GOAL_TFLOPS, f"prefill goal {MQA_GOAL_TFLOPS:.0f} TFLOPS", ":"),))
    if suite.suite == PAGED_MQA:
        goal = PAGED_GOAL_SHARE * HBM_PEAK_GBPS
        return PlotMetric("GB/s", lambda s: _value(PAGED_MQA, s), (
            (HBM_PEAK_GBPS, f"HBM peak {HBM_PEAK_GBPS:.0f} GB/s", "--"),
            (goal, f"decode goal {percent(PAGED_GOAL_SHARE)} of HBM peak ({goal:.0f} GB/s)", ":"),
        ))
    return None
