"""The modules inside dgx/ import each other without a circle (function-level imports included), and the leaf
packages (cache, sass_tools, ptx; installed as dgx.cache, dgx.sass_tools, dgx.ptx) never import the rest of dgx."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that the file at `path` imports (a package's __init__ only where a name
    imported from it is not a submodule)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    found.add(sub)
                elif target in modules:
                    found.add(target)
    found.discard(name)
    return found


def _python_files(folder: Path) -> list[Path]:
    """Every .py file below `folder`, through the links inside dgx/ to the leaf packages too."""
    return [Path(top, name) for top, _, names in os.walk(folder, followlinks=True) for name in names
            if name.endswith(".py")]


def _graph(package: str) -> dict[str, set[str]]:
    files = _python_files(ROOT / package)
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_inside_dgx():
    # The package's __init__ is a node too: a module that imports it while __init__ imports that module
    # (directly or not) closes a circle.
    cycle = _cycle(_graph("dgx"))
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_api_modules_share_the_launch_layer_not_each_other():
    graph = _graph("dgx")
    for module in ("dgx.gemm", "dgx.grouped", "dgx.wgrad"):
        assert "dgx.launch" in graph[module]
    assert not graph["dgx.grouped"] & {"dgx.gemm", "dgx.wgrad"}
    assert not graph["dgx.wgrad"] & {"dgx.gemm", "dgx.grouped"}


def test_leaf_packages_do_not_import_dgx():
    for leaf in ("cache", "sass_tools", "ptx"):
        for path in (ROOT / leaf).rglob("*.py"):
            depth = len(path.relative_to(ROOT / leaf).parts)  # levels of relative import that stay inside the leaf
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                assert not any(n == "dgx" or n.startswith("dgx.") for n in names), f"{path} imports dgx"
                if isinstance(node, ast.ImportFrom):
                    assert node.level <= depth, f"{path} imports from outside its package"


def test_leaf_packages_are_reached_inside_dgx():
    # The installed distribution has only `dgx`: the leaves are dgx.ptx, dgx.cache, dgx.sass_tools and dgx.cli.
    for leaf in ("ptx", "cache", "sass_tools", "cli.py"):
        link = ROOT / "dgx" / leaf
        assert link.is_symlink() and link.resolve() == (ROOT / leaf).resolve(), link
