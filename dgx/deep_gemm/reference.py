"""DeepGEMM's public API as recorded in ``api_54e2261.json``: every public name of its package at that commit, and
each function's parameters and defaults. The drop-in's stand-ins for names dgx cannot run yet take their signatures
from here, and the CPU tests compare every name of dgx.deep_gemm against it."""

from __future__ import annotations

import ast
import functools
import inspect
import json
from pathlib import Path

RECORD = Path(__file__).with_name("api_54e2261.json")


@functools.lru_cache(maxsize=1)
def record() -> dict:
    """The parsed record: ``repository``, ``commit``, ``version`` and ``modules`` (module -> name -> entry)."""
    with open(RECORD, encoding="utf-8") as f:
        return json.load(f)


def commit() -> str:
    """The DeepGEMM commit the record was taken from (short form)."""
    return record()["commit"][:7]


def entry(name: str, module: str = "deep_gemm") -> str:
    """The recorded entry of `name` in `module`: a parameter list '(...)', 'class (...)' or 'module'."""
    try:
        return record()["modules"][module][name]
    except KeyError:
        raise KeyError(f"{module}.{name} is not in DeepGEMM {commit()}'s recorded API") from None


def _default(node: ast.expr):
    import torch  # defaults such as torch.float32

    return eval(compile(ast.Expression(node), "<default>", "eval"), {"torch": torch})  # noqa: S307 - our own record


def parse_signature(text: str) -> inspect.Signature:
    """An inspect.Signature from a recorded parameter list such as "(a, b, c=None, /, *, d=1)" ('class ' dropped)."""
    text = text.removeprefix("class ").strip()
    args = ast.parse(f"def f{text}: pass").body[0].args
    params: list[inspect.Parameter] = []
    P = inspect.Parameter
    positional = [(a, P.POSITIONAL_ONLY) for a in args.posonlyargs] + [(a, P.POSITIONAL_OR_KEYWORD) for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for (arg, kind), node in zip(positional, defaults):
        params.append(P(arg.arg, kind, default=P.empty if node is None else _default(node)))
    if args.vararg is not None:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, node in zip(args.kwonlyargs, args.kw_defaults):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if node is None else _default(node)))
    if args.kwarg is not None:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def signature(name: str, module: str = "deep_gemm") -> inspect.Signature:
    """DeepGEMM's signature of `module`.`name` (a function, or a class's constructor without self)."""
    text = entry(name, module)
    if text == "module":
        raise TypeError(f"{module}.{name} is a module, not a function")
    return parse_signature(text)
