"""Runs DeepGEMM's own test files against dgx, unmodified: ``deep_gemm`` resolves to ``dgx.deep_gemm`` through
DGX_AS_DEEP_GEMM=1, as in any engine's process.

    python tests/device/run_deep_gemm_tests.py DIR/test_fp8_fp4.py [DIR/test_layout.py ...] [--only test_gemm]

The runner sets DGX_AS_DEEP_GEMM=1 and installs the ``import deep_gemm`` hook (dgx.deep_gemm_alias.install(), what
the dgx-as-deep-gemm.pth of an installed dgx does at interpreter start; here for a checkout on PYTHONPATH too), then
checks that ``import deep_gemm`` gives dgx.deep_gemm. Everything the test files import from ``deep_gemm``,
``deep_gemm.utils`` and ``deep_gemm.testing`` is dgx.deep_gemm's own; the only helper from outside the package is
their ``generators.py``, which must sit next to them.

Each test file's folder goes first on ``sys.path`` (its ``generators`` module), the file is imported under another
name, and the statements of its ``if __name__ == '__main__':`` block run in order (seeds, prints), except that
each call of a ``test_*`` function is run on its own: a failure is printed with its traceback and the next test
runs. A file without such a block has its ``test_*`` functions run in order. The last lines say which tests passed
and failed (``RESULT <file>::<test> PASS|FAIL <seconds>``) and count them; the exit status is 1 if any failed.
A test of a family dgx has not yet fails with FamilyMissingError naming the family; one that needs sm_100 is
filtered by the test file itself on sm_90.

``--bench-tests N`` makes every bench_kineto of dgx.deep_gemm.testing profile N calls instead of the test's count
(shorter runs). No GPU is touched before a test runs, so the runner is checked on the CPU too
(tests/test_deep_gemm_shim.py).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import sys
import time
import traceback
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def install() -> types.ModuleType:
    """Sets DGX_AS_DEEP_GEMM=1, installs the import hook and returns the ``deep_gemm`` module (dgx.deep_gemm);
    raises RuntimeError if ``import deep_gemm`` gives anything else (a real DeepGEMM imported before)."""
    os.environ["DGX_AS_DEEP_GEMM"] = "1"
    from dgx import deep_gemm_alias

    deep_gemm_alias.install()
    import dgx.deep_gemm

    deep_gemm = importlib.import_module("deep_gemm")
    if deep_gemm is not dgx.deep_gemm:
        raise RuntimeError(f"import deep_gemm gave {getattr(deep_gemm, '__file__', deep_gemm)!r}, not dgx.deep_gemm: "
                           f"a DeepGEMM was imported before the hook was installed")
    return deep_gemm


# --- running a test file ----------------------------------------------------------------------------------------------


def _main_block(tree: ast.Module) -> list[ast.stmt] | None:
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
                and node.test.left.id == "__name__" and len(node.test.comparators) == 1
                and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value == "__main__"):
            return node.body
    return None


def _test_call(stmt: ast.stmt) -> str | None:
    """The name of the test_* function a statement calls with no arguments, if that is all it does."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
        if stmt.value.func.id.startswith("test_") and not stmt.value.args and not stmt.value.keywords:
            return stmt.value.func.id
    return None


def _flatten(stmts: list[ast.stmt], namespace: dict, path: str):
    """The statements in order, an ``if`` that holds test calls (``if get_arch_major() >= 9:``) replaced by the
    branch its condition takes, evaluated in the module's namespace when reached, so those tests count one by one."""
    for stmt in stmts:
        if isinstance(stmt, ast.If) and any(_test_call(s) for s in ast.walk(stmt) if isinstance(s, ast.stmt)):
            condition = eval(compile(ast.Expression(stmt.test), path, "eval"), namespace)  # noqa: S307 - the test file's own
            yield from _flatten(stmt.body if condition else stmt.orelse, namespace, path)
        else:
            yield stmt


def run_file(path: str, only: set[str] | None = None) -> list[tuple[str, str, float]]:
    """Imports the test file at `path` with deep_gemm installed and runs it as described in the module; returns
    (test, "PASS" or "FAIL", seconds) per test run."""
    path = os.path.abspath(path)
    label = os.path.basename(path)
    install()
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    for stale in ("generators",):  # a previous file's helper module of the same name
        sys.modules.pop(stale, None)
    results: list[tuple[str, str, float]] = []
    t0 = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location(f"_deep_gemm_test_{len(sys.modules)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except BaseException:  # noqa: BLE001 - reported, then the next file
        traceback.print_exc()
        return [("<import>", "FAIL", time.perf_counter() - t0)]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    body = _main_block(tree)
    if body is None:
        body = [ast.parse(f"{name}()").body[0] for name in vars(module) if name.startswith("test_")
                and callable(getattr(module, name))]
    for stmt in _flatten(body, vars(module), path):
        name = _test_call(stmt)
        if name is None:
            code = compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec")
            exec(code, vars(module))  # setup: seeds, flags, prints
            continue
        if only and name not in only:
            continue
        print(f"=== {label}::{name}", flush=True)
        t = time.perf_counter()
        try:
            getattr(module, name)()
            status = "PASS"
        except BaseException as exc:  # noqa: BLE001 - reported, then the next test
            if isinstance(exc, KeyboardInterrupt):
                raise
            traceback.print_exc()
            status = "FAIL"
        seconds = time.perf_counter() - t
        print(f"=== {label}::{name} {status} ({seconds:.1f} s)", flush=True)
        results.append((name, status, seconds))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="DeepGEMM test files (test_fp8_fp4.py, test_layout.py, ...)")
    parser.add_argument("--only", action="append", default=None, help="run only this test function (repeatable)")
    parser.add_argument("--bench-tests", type=int, default=None, help="calls per bench_kineto (default: the test's)")
    args = parser.parse_args(argv)
    install()
    from dgx.deep_gemm.testing import bench

    bench.num_tests_override = args.bench_tests
    summary = []
    for path in args.files:
        for name, status, seconds in run_file(path, set(args.only) if args.only else None):
            summary.append((os.path.basename(path), name, status, seconds))
    print()
    for label, name, status, seconds in summary:
        print(f"RESULT {label}::{name} {status} {seconds:.1f}")
    failed = [s for s in summary if s[2] != "PASS"]
    print(f"deep_gemm tests on dgx: {len(summary) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or not summary else 0


if __name__ == "__main__":
    sys.exit(main())
