"""``dgx bench``: dgx side by side with cuBLASLt, Triton and BF16 (GEMM suites) and with plain torch (MQA-logits
suites), with tables, JSON, Markdown and plots.

Entry points:

* :func:`main` — what the ``dgx bench`` command calls; returns the exit code.
* :func:`run_suite` — run and return a :class:`~dgx.bench.results.BenchResults` (for scripts).
* :func:`summarize`, :func:`render_table`, :func:`render_markdown`, :func:`write_json`,
  :func:`load_json`, :func:`write_plots` (one PNG per suite), :func:`write_plot` — reports from recorded results
  (no GPU needed); ``python -m dgx.bench.replot`` redraws them from recorded JSON.

Importing this package imports neither torch nor triton nor matplotlib.
"""

from __future__ import annotations

from typing import Callable

from .report import (
    PlotUnavailable,
    check_matplotlib,
    load_json,
    render_markdown,
    render_table,
    write_json,
    write_markdown,
    write_plot,
    write_plots,
)
from .results import BenchResults, summarize
from .runner import NO_GPU_PREFIX, NoGpu, TimerUnavailable, dgx_failures, gpu_problem, run_suite
from .subject import unavailable_reason
from .suites import FIXED_SUITES, SUITES, ShapesFileError, load_shapes_file, select_shapes, suite_names
from .timers import EVENTS, TIMERS, check_timer

__all__ = [
    "main",
    "run_suite",
    "summarize",
    "render_table",
    "render_markdown",
    "write_json",
    "write_markdown",
    "write_plot",
    "write_plots",
    "load_json",
    "BenchResults",
    "ShapesFileError",
    "load_shapes_file",
    "NoGpu",
    "SUITES",
    "TIMERS",
    "unavailable_reason",
    "EXIT_OK",
    "EXIT_NO_GPU",
    "EXIT_USAGE",
    "EXIT_DGX_FAILED",
]

EXIT_OK = 0
EXIT_NO_GPU = 1
EXIT_USAGE = 2
EXIT_DGX_FAILED = 3


def main(
    suite: str = "all",
    shapes_file: str | None = None,
    peers: bool = True,
    repeat: int = 1,
    json_path: str | None = None,
    markdown_path: str | None = None,
    plot_path: str | None = None,
    timer: str = EVENTS,
    echo: Callable[[str], None] = print,
) -> int:
    """Run ``dgx bench`` and write the requested reports; return the exit code.

    ``timer``: ``events`` (CUDA events around each call) or ``kernel`` (kernel-only GPU time through
    ``torch.profiler``), see :mod:`dgx.bench.timers`.

    0: done, dgx correct on every case. 1: no usable GPU (torch missing or no CUDA device), or the kernel
    timer cannot run here (no CUPTI). 2: bad arguments (suite, repeat, timer, shapes file, a shapes file with
    a fixed suite (``mqa``, ``paged_mqa``),
    matplotlib missing for ``--plot``, unwritable output). 3: dgx failed or was unavailable on some case (the reports say where), or a requested
    suite is not available in this build of dgx (see :func:`unavailable_reason`): the suites that are
    available still run (and need a GPU); the others are named and skipped.
    """
    try:
        suite_names(suite)
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"--repeat must be a positive integer, got {repeat!r}")
        check_timer(timer)
        shapes = None
        if shapes_file is not None and suite in FIXED_SUITES:
            raise ValueError(
                f"--shapes does not apply to suite {suite}: its problems are fixed; run `dgx bench --suite {suite}` "
                "without --shapes"
            )
        if shapes_file is not None:
            shapes, warnings = load_shapes_file(shapes_file)
            for w in warnings:
                echo(f"warning: shapes file {shapes_file}: {w}")
        if plot_path is not None:
            check_matplotlib()
    except (ValueError, PlotUnavailable) as e:
        echo(f"dgx bench: {e}")
        return EXIT_USAGE

    selected = select_shapes(suite, shapes)
    missing: dict[str, str] = {}  # requested suite -> why this build cannot run it
    for s in dict.fromkeys(shape.suite for shape in selected):
        why = unavailable_reason(s)
        if why is not None:
            missing[s] = why
            count = sum(shape.suite == s for shape in selected)
            echo(f"dgx bench: suite {s} is not available in this build: {why}; skipping its {count} shape(s)")
    runnable = [shape for shape in selected if shape.suite not in missing]
    if selected and not runnable:
        echo(
            f"dgx bench: none of the requested suites ({', '.join(missing)}) is available in this build; "
            "nothing to run"
        )
        return EXIT_DGX_FAILED

    why = gpu_problem()
    if why:
        echo(NO_GPU_PREFIX + why)
        return EXIT_NO_GPU

    try:
        results = run_suite(
            suite, shapes=runnable, shapes_file=shapes_file, peers=peers, repeat=repeat, echo=echo, timer=timer
        )
    except NoGpu as e:
        echo(str(e))
        return EXIT_NO_GPU
    except TimerUnavailable as e:
        echo(f"dgx bench: {e}")
        return EXIT_NO_GPU
    except ValueError as e:
        echo(f"dgx bench: {e}")
        return EXIT_USAGE

    if missing:
        results.settings["not_available"] = dict(missing)
        results.notes += [f"Suite {s} not run: not available in this build ({why})." for s, why in missing.items()]
    summary = summarize(results)
    echo("")
    echo(render_table(results, summary))
    try:
        if json_path:
            write_json(results, json_path)
            echo(f"wrote {json_path}")
        if markdown_path:
            write_markdown(results, markdown_path)
            echo(f"wrote {markdown_path}")
        if plot_path:
            for written in write_plots(results, plot_path, summary):
                echo(f"wrote {written}")
    except (OSError, PlotUnavailable) as e:
        echo(f"dgx bench: could not write a report: {e}")
        return EXIT_USAGE
    bad = dgx_failures(results)
    if bad:
        echo(f"dgx did not run correctly on {len(bad)} case(s):")
        for b in bad[:20]:
            echo(f"  {b}")
    if missing:
        echo(f"dgx bench: requested but not available in this build, not run: {', '.join(missing)} (exit status 3)")
    return EXIT_DGX_FAILED if bad or missing else EXIT_OK
