"""Reports of benchmark results: terminal table, Markdown, JSON and PNG plots (one per suite).

Everything here works from recorded results (:class:`~dgx.bench.results.BenchResults`), with no GPU
and no torch: ``load_json`` reads a recorded run back, so reports can be re-rendered anywhere.
matplotlib is imported only by :func:`write_plot` and :func:`write_plots` (a clear error if it is missing).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from .fmt import STATUS_SHORT, micros, num, percent, spread_percent, times, vs_deepgemm_cell
from .mqa_report import MQA_SUITE_TITLES, mqa_suite_lines, mqa_suite_rows, plot_metric
from .mqa_suites import HBM_PEAK_GBPS, MQA_SUITES, PAGED_MQA, is_mqa
from .results import (
    DEEPGEMM,
    DGX,
    IMPL_LABELS,
    IMPL_SHORT,
    OK,
    BenchResults,
    CaseSummary,
    Spread,
    Summary,
    SuiteSummary,
    peer_names,
    summarize,
)
from .suites import ANCHOR_CEILINGS, ANCHOR_DEVICE, HOST_ANCHOR
from .timers import TIMER_METHOD

SUITE_TITLES = {
    "dense": "Dense GEMM (fp8_gemm_nt, BF16 out)",
    "contiguous": "M-grouped contiguous (m_grouped_fp8_gemm_nt_contiguous)",
    "masked": "M-grouped masked (m_grouped_fp8_gemm_nt_masked)",
    "wgrad": "Weight gradient (fp8_gemm_nt, FP32 d = c + a·bᵀ, 1×128 both)",
    "k_grouped": "K-grouped weight gradient (k_grouped_fp8_gemm_nt_contiguous)",
    **MQA_SUITE_TITLES,
    "moe": "MoE expert block (DeepSeek-V3: GEMM1, SwiGLU + FP8 quantisation, GEMM2; fused vs unfused)",
    "bf16": "BF16 GEMM (bf16_gemm_nt: the dense anchor shapes and the presets' BF16 layers)",
    "bf16_masked": "BF16 M-grouped masked (m_grouped_bf16_gemm_nt_masked)",
    "bf16_contiguous": "BF16 M-grouped contiguous (m_grouped_bf16_gemm_nt_contiguous)",
    "bf16_k_grouped": "BF16 K-grouped weight gradient (k_grouped_bf16_gemm_tn_contiguous, FP32 out)",
    "einsum": "BF16 einsums (dgx.einsum: bmk,bnk->mn, bhr,hdr->bhd, bhd,hdr->bhr)",
    "fp8_einsum": "FP8 einsum (dgx.fp8_einsum bhr,hdr->bhd)",
    "hc_prenorm": "HC pre-norm GEMM (tf32_hc_prenorm_gemm, memory-bound)",
    "skip_head_mid": "Skip-head-mid FP8 GEMM (fp8_gemm_nt_skip_head_mid)",
}


class PlotUnavailable(RuntimeError):
    """matplotlib is missing."""


# --------------------------------------------------------------------------------------------------
# formatting

_f, _us, _pct, _x, _spread_pct = num, micros, percent, times, spread_percent


def _peer_cell(case: CaseSummary, name: str) -> str:
    s = case.impls.get(name)
    if s is None:
        return ""
    if s.status != OK:
        return STATUS_SHORT.get(s.status, s.status)
    sp = case.speedups.get(name)
    return f"{_f(s.tflops)} ({_x(sp)})" if sp is not None else _f(s.tflops)


def _has_anchor(suite: SuiteSummary) -> bool:
    return any(c.anchor for c in suite.cases)


def has_deepgemm(suite: SuiteSummary) -> bool:
    """Whether DeepGEMM ran (or was tried) in this run on the suite."""
    return any(DEEPGEMM in c.impls for c in suite.cases)


VS_DEEPGEMM = "vs DeepGEMM"
"""The column of DeepGEMM's time over dgx's, both from this run."""
ANCHOR_HEADERS = ("DeepGEMM TF (H100, other run)", "vs DeepGEMM (other run)")
"""The columns of DeepGEMM's reference figures (docs/PEERS.md: another run, another card) and dgx's ratio to them."""


def _suite_rows(
    suite: SuiteSummary, repeats: int, hbm: bool = False, timer: str = "events"
) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, rows and the geomean row of one suite's table; ``hbm``: with the share of the HBM peak
    (memory-bound rows; the device's peak is known); ``timer``: the clock of the DeepGEMM anchors."""
    if suite.suite in MQA_SUITES:
        return mqa_suite_rows(suite, repeats)
    peers = peer_names(suite)
    anchor = _has_anchor(suite)
    header = ["shape", "dgx µs"]
    if repeats > 1:
        header.append("spread")
    header += ["TFLOPS", "GB/s", "bound", "of ceiling"]
    if hbm:
        header.append("of HBM peak")
    floors = any(c.read_floor_us for c in suite.cases)
    if floors:
        header.append("of read floor")
    dg = has_deepgemm(suite)
    if dg:
        header.append(VS_DEEPGEMM)
    if anchor:
        tf, vs = ANCHOR_HEADERS
        header += [tf.replace("H100", "H100, kernel-only") if timer == "kernel" else tf, vs]
    header += [f"{IMPL_SHORT.get(p, p)} TF (dgx ×)" for p in peers]
    rows = []
    for c in suite.cases:
        d = c.impls.get(DGX)
        dgx_ok = d is not None and d.status == OK
        row = [c.shape.label, _us(d.us) if dgx_ok else (STATUS_SHORT.get(d.status, d.status) if d else "-")]
        if repeats > 1:
            row.append(_spread_pct(d.us, d.us_spread) if dgx_ok else "-")
        row += [
            _f(d.tflops) if dgx_ok else "-",
            _f(d.gbps) if dgx_ok else "-",
            c.bound,
            _pct(d.fraction) if dgx_ok else "-",
        ]
        if hbm:
            row.append(_pct(d.hbm_share) if dgx_ok else "-")
        if floors:
            row.append(_pct(d.floor_share) if dgx_ok and d.floor_share is not None else "-")
        if dg:
            row.append(vs_deepgemm_cell(c))
        if anchor:
            row += [_f(c.anchor["tflops"]) if c.anchor else "-", _x(c.vs_anchor)]
        row += [_peer_cell(c, p) for p in peers]
        rows.append(row)
    gm = ["geomean", "", *([""] if repeats > 1 else []), _f(suite.geomean_tflops.get(DGX)), "", "", _pct(suite.geomean_fraction)]
    if hbm:
        gm.append("")
    if floors:
        gm.append("")
    if dg:
        gm.append(_x(suite.geomean_vs_deepgemm))
    if anchor:
        gm += ["", _x(suite.geomean_vs_anchor)]
    for p in peers:
        t = suite.geomean_tflops.get(p)
        sp = suite.geomean_speedup.get(p)
        gm.append(f"{_f(t)} ({_x(sp)})" if t is not None else "-")
    return header, rows, gm


def _spread_line(suite: SuiteSummary, repeats: int) -> str | None:
    if repeats < 2 or suite.spread_tflops.median is None:
        return None
    bits = []

    def fmt(sp: Spread, unit: str = "×") -> str:
        if sp.median is None:
            return "-"
        d = 2 if unit == "×" else 0
        return f"{sp.min:.{d}f} / {sp.median:.{d}f} / {sp.max:.{d}f}{unit}"

    if suite.suite == PAGED_MQA:
        bits.append(f"dgx geomean GB/s {fmt(suite.spread_gbps, '')}")
    else:
        bits.append(f"dgx geomean TFLOPS {fmt(suite.spread_tflops, '')}")
    if suite.spread_vs_anchor.median is not None:
        bits.append(f"vs DeepGEMM (other run) {fmt(suite.spread_vs_anchor)}")
    for p, sp in suite.spread_speedup.items():
        if sp.median is not None:
            bits.append(f"over {IMPL_SHORT.get(p, p)} {fmt(sp)}")
    return f"over {repeats} repeats (min / median / max): " + "; ".join(bits)


def _not_timed(suite: SuiteSummary) -> list[str]:
    """'impl status: reason (shapes)' lines, identical reasons merged."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for c in suite.cases:
        for n, s in c.impls.items():
            if s.status != OK:
                key = (n, s.status, s.reason)
                extra = f" (calc_diff {s.diff:.3g})" if s.diff is not None else ""
                groups.setdefault(key, []).append(c.shape.label + extra)
    out = []
    for (n, st, reason), labels in groups.items():
        shapes = ", ".join(labels) if len(labels) <= 4 else f"{len(labels)} shapes"
        out.append(f"{IMPL_LABELS.get(n, n)} {st} on {shapes}: {reason}")
    return out


def _impl_notes(suite: SuiteSummary) -> list[str]:
    notes: dict[str, list[str]] = {}
    for c in suite.cases:
        for n, s in c.impls.items():
            if s.status == OK and s.note:
                notes.setdefault(n, [])
                if s.note not in notes[n]:
                    notes[n].append(s.note)
    out = []
    for n, ns in notes.items():
        if len(ns) > 3:
            out.append(f"{IMPL_LABELS.get(n, n)}: {ns[0]} (and {len(ns) - 1} other variants, see JSON)")
        else:
            out.append(f"{IMPL_LABELS.get(n, n)}: " + " | ".join(ns))
    return out


def _configs(suite: SuiteSummary) -> list[str]:
    """'impl: shape → config' lines for implementations with a tuned configuration (Triton)."""
    by_impl: dict[str, list[str]] = {}
    for c in suite.cases:
        for n, s in c.impls.items():
            if s.status == OK and s.config:
                by_impl.setdefault(n, []).append(f"{c.shape.label}: {s.config.split(' (')[0]}")
    return [f"{IMPL_LABELS.get(n, n)} configs: " + "; ".join(v) for n, v in by_impl.items()]


def _ceiling_rows(summary: Summary) -> list[list[str]]:
    rows = []
    labels = {
        "fp8_tflops": ("FP8 per-tensor cuBLASLt 8192³", "TFLOPS", ANCHOR_CEILINGS["fp8_tflops"]),
        "bf16_tflops": ("BF16 cuBLAS 8192³", "TFLOPS", ANCHOR_CEILINGS["bf16_tflops"]),
        "copy_gbps": ("device-to-device copy (read + write)", "GB/s", ANCHOR_CEILINGS["copy_gbps"]),
    }
    for key, (label, unit, anchor) in labels.items():
        v = summary.ceilings.get(key)
        sp = summary.ceilings_spread.get(key)
        spread = f"{sp.min:.0f}–{sp.max:.0f}" if (sp and sp.min is not None and summary.repeats > 1) else ""
        rows.append([label, f"{_f(v)} {unit}", spread, f"{anchor:.0f}"])
    if summary.hbm_peak_gbps:
        copy = summary.ceilings.get("copy_gbps")
        share = f" (copy: {_pct(copy / summary.hbm_peak_gbps)})" if copy else ""
        rows.append(
            [f"HBM peak, datasheet ({summary.device})", f"{_f(summary.hbm_peak_gbps)} GB/s{share}", "", f"{HBM_PEAK_GBPS:.0f}"]
        )
    return rows


def timer_line(summary: Summary) -> str:
    """What the µs figures (and the ceilings) measure."""
    return f"Timer: {summary.timer} — {TIMER_METHOD.get(summary.timer, summary.timer)}."


def hbm_line(summary: Summary) -> str | None:
    """How the GEMM tables' share of the HBM peak is computed, or why there is none; None without GEMM suites."""
    if not any(suite.suite not in MQA_SUITES for suite in summary.suites):
        return None
    floors = any(c.read_floor_us for suite in summary.suites for c in suite.cases)
    floor = (
        " 'of read floor': the time of a kernel that only reads the row's bytes (dgx/bench/read_floor.py, same timer "
        "and flush) over the row's time: what any kernel could reach there (100% = as fast as reading alone)."
        if floors else ""
    )
    if summary.hbm_peak_gbps:
        return (
            f"of HBM peak: GB/s over the {_f(summary.hbm_peak_gbps)} GB/s datasheet HBM bandwidth of the "
            f"{summary.device}, on memory-bound rows; 'of ceiling' there is the share of the copy bandwidth "
            f"measured in this run.{floor}"
        )
    return (
        f"No HBM peak is known for {summary.device or 'this device'} (dgx/bench/hbm.py): memory-bound rows show only "
        f"'of ceiling', the share of the copy bandwidth measured in this run.{floor}"
    )


HOST_HEADER = ["pattern", "implementation", "CPU µs/call", "plain loop µs/call", "goal µs", "note"]


def _host_rows(summary: Summary) -> list[list[str]]:
    rows = []
    for h in summary.host:
        name = IMPL_LABELS.get(h["name"], h["name"])
        pattern = h.get("pattern", "dense/same")
        goal = h.get("goal_us")
        goal_cell = _f(goal, 0) if goal is not None and h["name"] == DGX else ""
        if h.get("status") == OK:
            notes = []
            if h.get("prep_us"):
                notes.append(f"building the call's tensors ({h['prep_us']:.1f} µs) taken off")
            if not h.get("held", True):
                notes.append("GPU not held (no torch.cuda._sleep): may include waiting on the GPU")
            if h.get("saturated"):
                notes.append("launch queue may have filled: includes waiting on the GPU")
            rows.append([pattern, name, _f(h.get("cpu_us"), 1), _f(h.get("plain_us"), 1), goal_cell, "; ".join(notes)])
        else:
            rows.append([pattern, name, h.get("status", "-"), "-", goal_cell, h.get("reason", "")])
    return rows


def _host_patterns(summary: Summary) -> list[str]:
    """What each pattern of the host table does, in order of first appearance."""
    seen: dict[str, str] = {}
    for h in summary.host:
        seen.setdefault(h.get("pattern", "dense/same"), h.get("label") or "")
    return [f"{p}: {label}" for p, label in seen.items() if label]


HOST_EXPLAIN = (
    "plain loop: perf_counter around 1000 back-to-back calls (no synchronisation inside, one after); "
    "where the kernel is longer than the host path the host waits and this measures the GPU. "
    "CPU µs/call: the smaller of that and the same calls issued in chunks of 100 while the GPU is "
    "held busy (torch.cuda._sleep), so that the host never waits on the GPU. Where a pattern builds fresh "
    "tensors for every call, the same loop building them alone is timed too and taken off. The peers are timed "
    "with the same tensors and with M changing (one prepared call per M, in turn); they allocate their outputs "
    "on every call."
)


def _host_title(summary: Summary) -> str:
    m, n, k = HOST_ANCHOR["shape"]
    return (f"Host cost per call (cached kernel; DeepGEMM's Python path: {HOST_ANCHOR['deepgemm_cpu_us_per_call']:.0f} µs "
            f"on {m}×{n}×{k} with the same tensors)")


# --------------------------------------------------------------------------------------------------
# terminal


def _ascii_table(header: list[str], rows: list[list[str]], footer: list[str] | None = None) -> str:
    allrows = [header] + rows + ([footer] if footer else [])
    widths = [max(len(r[i]) if i < len(r) else 0 for r in allrows) for i in range(len(header))]

    def line(r: list[str]) -> str:
        cells = []
        for i, w in enumerate(widths):
            v = r[i] if i < len(r) else ""
            cells.append(v.ljust(w) if i == 0 else v.rjust(w))
        return "  ".join(cells).rstrip()

    sep = "  ".join("-" * w for w in widths)
    out = [line(header), sep] + [line(r) for r in rows]
    if footer:
        out += [sep, line(footer)]
    return "\n".join(out)


def _env_line(env: dict[str, Any]) -> str:
    keys = [("device", ""), ("driver", "driver "), ("driver_cuda", "CUDA "), ("torch", "torch "), ("dgx", "dgx "), ("cuda_bindings", "cuda-bindings "), ("nvrtc", "NVRTC "), ("triton", "triton ")]
    return ", ".join(f"{p}{env[k]}" for k, p in keys if env.get(k))


def render_table(results: BenchResults, summary: Summary | None = None) -> str:
    """The terminal report."""
    s = summary or summarize(results)
    out = [f"dgx bench — {_env_line(results.env)} — {results.env.get('date', '')}"]
    out.append(timer_line(s))
    if s.repeats > 1:
        out.append(f"{s.repeats} repeats; µs is the median over repeats of each repeat's median")
    out.append("")
    out.append(f"Ceilings (measured in this run, {s.timer} timer; docs/PEERS.md's H100 run for reference)")
    out.append(_ascii_table(["ceiling", "measured", "spread", "H100 anchor"], _ceiling_rows(s)))
    line = hbm_line(s)
    if line:
        out.append(f"  · {line}")
    for suite in s.suites:
        out.append("")
        out.append(f"{SUITE_TITLES.get(suite.suite, suite.suite)} — {len(suite.cases)} shapes")
        header, rows, gm = _suite_rows(suite, s.repeats, bool(s.hbm_peak_gbps), s.timer)
        out.append(_ascii_table(header, rows, gm))
        line = _spread_line(suite, s.repeats)
        if line:
            out.append(line)
        if suite.suite in MQA_SUITES:
            out += [f"  · {n}" for n in mqa_suite_lines(suite)]
        for n in _impl_notes(suite):
            out.append(f"  · {n}")
        for n in _not_timed(suite):
            out.append(f"  ! {n}")
    if s.host:
        out.append("")
        out.append(_host_title(s))
        out.append(_ascii_table(HOST_HEADER, _host_rows(s)))
        out += [f"  · {line}" for line in _host_patterns(s)]
        out.append("  · " + HOST_EXPLAIN)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# markdown


def _md_table(header: list[str], rows: list[list[str]], footer: list[str] | None = None) -> str:
    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |"]
    lines.append("|" + "|".join(":---" if i == 0 else "---:" for i in range(len(header))) + "|")
    for r in rows:
        lines.append("| " + " | ".join(esc(v) for v in r) + " |")
    if footer:
        lines.append("| " + " | ".join(f"**{esc(v)}**" if v not in ("", "-") else v for v in footer) + " |")
    return "\n".join(lines)


def render_markdown(results: BenchResults, summary: Summary | None = None) -> str:
    """The Markdown report (tables per suite, ceilings, host cost, environment)."""
    s = summary or summarize(results)
    env = results.env
    out = [f"# dgx bench: {env.get('device', '?')}, {env.get('date', '?')}", ""]
    out.append(_md_table(["environment", ""], [[k, str(v)] for k, v in env.items() if v is not None]))
    out.append("")
    st = results.settings
    out.append(
        f"Method: {s.timer} timer, {TIMER_METHOD.get(s.timer, s.timer)}; 1 GB zeroed before each call (cold L2), "
        f"{st.get('warmup', 5)} warm-ups, "
        f"{st.get('iters', 30)} timed calls, median; {s.repeats} repeat(s). Every implementation was checked "
        f"(calc_diff < {st.get('diff_tolerance', 1e-3):g}) before it was timed. 'vs DeepGEMM' is DeepGEMM's time "
        f"over dgx's, both measured in this run (where a real DeepGEMM was importable); the '(other run)' DeepGEMM "
        f"figures are the H100 reference lines of docs/PEERS.md ({ANCHOR_DEVICE}), not measured in this run"
        + (
            ": its kernel-only times, on the clock of this run (the dense decode shapes it has them for)."
            if s.timer == "kernel"
            else "."
        )
    )
    out.append("")
    for note in results.notes:
        out.append(f"- {note}")
    out.append("")
    out.append("## Ceilings")
    out.append("")
    out.append(f"Measured in this run with the {s.timer} timer, the clock of every table below.")
    out.append("")
    out.append(_md_table(["ceiling", "measured", "spread over repeats", "H100 anchor"], _ceiling_rows(s)))
    line = hbm_line(s)
    if line:
        out += ["", line]
    for suite in s.suites:
        out.append("")
        out.append(f"## {SUITE_TITLES.get(suite.suite, suite.suite)}")
        out.append("")
        header, rows, gm = _suite_rows(suite, s.repeats, bool(s.hbm_peak_gbps), s.timer)
        out.append(_md_table(header, rows, gm))
        line = _spread_line(suite, s.repeats)
        if line:
            out += ["", line]
        if suite.suite in MQA_SUITES:
            out.append("")
            out += [f"- {n}" for n in mqa_suite_lines(suite)]
        notes = _impl_notes(suite) + _configs(suite)
        bad = _not_timed(suite)
        if notes or bad:
            out.append("")
            out += [f"- {n}" for n in notes]
            out += [f"- **{n}**" for n in bad]
        grouped = [c for c in suite.cases if not is_mqa(c.shape) and (c.shape.group_ms or c.shape.group_ks)]
        if grouped:
            out.append("")
            out.append("Group sizes: " + "; ".join(
                f"{c.shape.label}: " + ",".join(str(x) for x in (c.shape.group_ms or c.shape.group_ks)) for c in grouped
            ))
    if s.host:
        out.append("")
        out.append("## " + _host_title(s))
        out.append("")
        out.append(f"{s.host[0].get('calls', 1000)} calls per pattern. {HOST_EXPLAIN}")
        out.append("")
        out.append(_md_table(HOST_HEADER, _host_rows(s)))
        patterns = _host_patterns(s)
        if patterns:
            out.append("")
            out += [f"- {line}" for line in patterns]
    out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# JSON


def to_json(results: BenchResults) -> str:
    return json.dumps(results.to_dict(with_summary=True), indent=1, ensure_ascii=False, allow_nan=False, default=_json_default)


def _json_default(o: Any):
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _sanitize(o: Any) -> Any:
    """inf/nan (e.g. a calc_diff of a non-finite output) become strings: valid JSON."""
    import math

    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, dict):
        return {k: _sanitize(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_sanitize(v) for v in o]
    return o


def write_json(results: BenchResults, path: str) -> None:
    data = _sanitize(results.to_dict(with_summary=True))
    _write_text(path, json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False))


def load_json(path: str) -> BenchResults:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return BenchResults.from_dict(data)


def write_markdown(results: BenchResults, path: str) -> None:
    _write_text(path, render_markdown(results))


def _write_text(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------------
# plot

_COLORS = {
    "dgx": "#d62728",
    "cublaslt": "#1f77b4",
    "triton": "#2ca02c",
    "bf16": "#7f7f7f",
    "fp8_tensor": "#bcbd22",
    "torch": "#ff7f0e",
    "deepgemm": "#9467bd",
}


def check_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except Exception as e:  # noqa: BLE001
        raise PlotUnavailable(
            f"--plot needs matplotlib ({type(e).__name__}: {e}); install it with `pip install matplotlib` "
            "or `pip install dgx[bench]`"
        ) from None


def plot_paths(path: str, suites: list[str]) -> dict[str, str]:
    """Where :func:`write_plots` puts each suite's PNG: ``path`` itself for one suite; for several, one file per
    suite beside it, ``<stem>-<suite><suffix>`` (``bench.png`` -> ``bench-dense.png``, ``bench-mqa.png``, ...)."""
    if len(suites) == 1:
        return {suites[0]: path}
    stem, suffix = os.path.splitext(path)
    return {suite: f"{stem}-{suite}{suffix or '.png'}" for suite in suites}


def write_plots(results: BenchResults, path: str, summary: Summary | None = None) -> list[str]:
    """One PNG per suite of ``results`` (:func:`write_plot` of that suite alone), at :func:`plot_paths`; returns
    the paths written, in the suites' order."""
    s = summary or summarize(results)
    if not s.suites:
        raise ValueError("no results to plot")
    paths = plot_paths(path, [suite.suite for suite in s.suites])
    for suite in s.suites:
        write_plot(results, paths[suite.suite], dataclasses.replace(s, suites=[suite]))
    return list(paths.values())


def write_plot(results: BenchResults, path: str, summary: Summary | None = None) -> None:
    """PNG: one panel per suite; per shape, grouped TFLOPS bars of dgx and the peers (dgx's value
    written on its bar, × where an implementation did not run or failed); the FP8 ceiling as a
    dashed line; each shape's roofline (the bound the measured ceilings allow) as a black tick;
    DeepGEMM's H100 reference figure (docs/PEERS.md) as a diamond where there is one."""
    check_matplotlib()
    import matplotlib

    matplotlib.use("Agg", force=True)  # headless: never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    s = summary or summarize(results)
    if not s.suites:
        raise ValueError("no results to plot")
    max_cases = max(len(x.cases) for x in s.suites)
    width = max(10.0, 0.8 * max_cases + 3)
    fig, axes = plt.subplots(len(s.suites), 1, figsize=(width, 4.2 * len(s.suites) + 1.0), squeeze=False)
    fp8 = s.ceilings.get("fp8_tflops")
    used: list[str] = []
    any_roof = any_anchor = any_missing = any_fp8 = False
    ref_lines: dict[str, str] = {}  # legend label -> line style (the MQA panels' goal and peak lines)
    for ax, suite in zip(axes[:, 0], s.suites):
        impls = ([DGX] if any(DGX in c.impls for c in suite.cases) else []) + peer_names(suite)
        n_impl = max(1, len(impls))
        bar_w = 0.8 / n_impl
        xs = list(range(len(suite.cases)))
        metric = plot_metric(suite)  # None: a GEMM panel (TFLOPS, FP8 ceiling, rooflines, anchors)
        top = (fp8 or 0.0) if metric is None else max(y for y, _, _ in metric.lines)
        for j, name in enumerate(impls):
            if name not in used:
                used.append(name)
            offs = [x - 0.4 + bar_w * (j + 0.5) for x in xs]
            vals = []
            for c in suite.cases:
                it = c.impls.get(name)
                if metric is not None:
                    vals.append(metric.value(it) or 0.0)
                else:
                    vals.append(it.tflops if (it and it.status == OK and it.tflops) else 0.0)
            top = max([top] + vals)
            ax.bar(offs, vals, bar_w, color=_COLORS.get(name), edgecolor="none")
            for c, o, v in zip(suite.cases, offs, vals):
                it = c.impls.get(name)
                if it is not None and it.status != OK:
                    any_missing = True
                    ax.text(o, 0, "×", ha="center", va="bottom", fontsize=9, color=_COLORS.get(name, "k"))
                elif name == DGX and v:
                    ax.text(o, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6.5, rotation=90)
        for x, c in zip(xs, suite.cases):
            if metric is not None:
                break
            if c.roofline_tflops:
                any_roof = True
                ax.hlines(c.roofline_tflops, x - 0.42, x + 0.42, colors="k", linewidth=1.6)
                top = max(top, c.roofline_tflops)
            if c.anchor:
                any_anchor = True
                ax.plot([x], [c.anchor["tflops"]], marker="D", color="#9467bd", markersize=5, linestyle="none")
                top = max(top, c.anchor["tflops"])
        if metric is not None:
            for y, label, style in metric.lines:
                ax.axhline(y, color="k", linestyle=style, linewidth=1)
                ref_lines.setdefault(label, style)
        elif fp8:
            any_fp8 = True
            ax.axhline(fp8, color="k", linestyle="--", linewidth=1)
        ax.set_ylim(0, top * 1.12 if top else 1)
        ax.set_xticks(xs)
        ax.set_xticklabels([c.shape.label for c in suite.cases], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(metric.ylabel if metric is not None else "TFLOPS")
        title = SUITE_TITLES.get(suite.suite, suite.suite)
        gm = suite.geomean_tflops.get(DGX)
        if metric is not None:
            paged = suite.suite == PAGED_MQA
            gm_mqa = suite.geomean_gbps.get(DGX) if paged else gm
            if gm_mqa:
                title += f" — dgx geomean {gm_mqa:.0f} {'GB/s' if paged else 'TFLOPS'}"
        elif gm:
            title += f" — dgx geomean {gm:.0f} TFLOPS"
            if suite.geomean_vs_deepgemm:
                title += f", {suite.geomean_vs_deepgemm:.3f}× DeepGEMM (this run)"
            elif suite.geomean_vs_anchor:
                title += f", {suite.geomean_vs_anchor:.2f}× DeepGEMM (H100 anchor, other run)"
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xlim(-0.6, len(xs) - 0.4)
    handles = [Patch(color=_COLORS.get(n), label=IMPL_LABELS.get(n, n)) for n in used]
    if fp8 and any_fp8:
        handles.append(Line2D([], [], color="k", linestyle="--", label=f"FP8 ceiling (per-tensor 8192³) {fp8:.0f} TFLOPS"))
    for label, style in ref_lines.items():
        handles.append(Line2D([], [], color="k", linestyle=style, label=label))
    if any_roof:
        handles.append(Line2D([], [], color="k", linewidth=1.6, label="roofline: FP8 ceiling / copy bandwidth"))
    if any_anchor:
        handles.append(Line2D([], [], color="#9467bd", marker="D", linestyle="none",
                              label="DeepGEMM, H100 reference run (docs/PEERS.md), not this run"))
    if any_missing:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="none", label="× not run / failed"))
    env = results.env
    height = fig.get_figheight()
    ncol = max(1, min(3 if ref_lines else 5, len(handles), int(width // 3.2)))  # about 3 inches a legend column
    legend_rows = -(-len(handles) // ncol)
    fig.suptitle(f"dgx bench — {env.get('device', '?')} — {env.get('date', '?')}", fontsize=12, y=1 - 0.08 / height)
    fig.legend(handles=handles, loc="upper center", ncol=ncol, fontsize=8, bbox_to_anchor=(0.5, 1 - 0.3 / height),
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.2 + 0.16 * legend_rows) / height))  # below the title and the legend
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
