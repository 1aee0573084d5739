"""Redraw the reports of recorded ``dgx bench`` runs from their JSON, on any machine (no GPU, no torch).

    python -m dgx.bench.replot [--markdown] [PATH ...]        (default PATH: docs/bench)

For each JSON file given (or found in a folder given), one PNG per suite beside it, by the code ``dgx bench
--plot`` uses (:func:`dgx.bench.report.write_plots`): ``RUN.png`` for a run of one suite, ``RUN-SUITE.png``
for each suite of a run of several. ``--markdown`` rewrites ``RUN.md`` from the same JSON too, so a committed
table and its plot always come from one record. Prints each file written; exit status 1 when a path holds no
JSON or a file is not a recorded run (one ``replot:`` line says which).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .report import load_json, write_markdown, write_plots

DEFAULT_FOLDER = os.path.join("docs", "bench")


def recorded_runs(paths: Sequence[str]) -> list[str]:
    """The JSON files among ``paths``, a folder standing for the ``*.json`` files directly in it, sorted."""
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
        elif path.endswith(".json") and os.path.isfile(path):
            found.append(path)
        else:
            raise ValueError(f"{path}: expected a recorded run (a .json file of dgx bench --json) or a folder of them")
    if not found:
        raise ValueError(f"no recorded runs (.json) in {', '.join(paths)}")
    return found


def replot(path: str, markdown: bool = False) -> list[str]:
    """Write the PNGs (and with ``markdown`` the Markdown) of the run recorded in ``path``; return what was written."""
    try:
        results = load_json(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a recorded dgx bench run ({type(exc).__name__}: {exc})") from None
    stem = path[: -len(".json")]
    written = write_plots(results, stem + ".png")
    if markdown:
        write_markdown(results, stem + ".md")
        written.append(stem + ".md")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dgx.bench.replot", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[DEFAULT_FOLDER], help="recorded runs (.json) or folders of them")
    parser.add_argument("--markdown", action="store_true", help="rewrite RUN.md from the JSON too")
    args = parser.parse_args(argv)
    try:
        for path in recorded_runs(args.paths):
            for written in replot(path, args.markdown):
                print(f"wrote {written}")
    except ValueError as exc:
        print(f"replot: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
