"""The registry of kernel families: one line per family. ``dgx warmup``, ``dgx inspect``, the enumeration of
warm-up work and the launch layer's heuristic dispatch read the kinds of problem from here and name no family
(dgx/families/base.py says what a family describes)."""

from __future__ import annotations

from .. import jit
from ..jit import KernelSource
from .base import Family, Inspected, Kind, MqaSpec, ShapeSpec
from . import bf16_gemm, einsum, fp8_gemm, hc_prenorm, mqa_logits, silu_mul_quant, skip_head_mid
from . import fp8_einsum

FAMILIES: tuple[Family, ...] = (
    fp8_gemm.FAMILY,
    mqa_logits.FAMILY,
    bf16_gemm.FAMILY,
    hc_prenorm.FAMILY,
    skip_head_mid.FAMILY,
    fp8_einsum.FAMILY,
    einsum.FAMILY,
    silu_mul_quant.FAMILY,
)

__all__ = ["FAMILIES", "Family", "Inspected", "Kind", "MqaSpec", "ShapeSpec", "all_kinds", "configs_for", "kind",
           "kind_names", "inspect_names", "run_piece"]


def all_kinds() -> tuple[Kind, ...]:
    """Every kind of every family, in registry order."""
    return tuple(k for family in FAMILIES for k in family.kinds)


def _by_name() -> dict[str, Kind]:
    table: dict[str, Kind] = {}
    for k in all_kinds():
        for name in (k.name, *k.aliases):
            if name in table:
                raise RuntimeError(f"kind name {name!r} is claimed by {table[name].family} and {k.family}")
            table[name] = k
    return table


_KINDS = _by_name()


def kind_names() -> tuple[str, ...]:
    """The shapes-file kinds, in registry order."""
    return tuple(k.name for k in all_kinds())


def inspect_names() -> tuple[str, ...]:
    """What ``dgx inspect --kind`` takes: each kind's aliases (the benchmark suites' names) first, then the
    shapes-file names not already listed."""
    aliases = [a for k in all_kinds() for a in k.aliases]
    return tuple(aliases + [n for n in kind_names() if n not in aliases])


def kind(name: str) -> Kind:
    """The kind called `name` (a shapes-file kind or an alias); ValueError listing them otherwise."""
    found = _KINDS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"kind: expected one of {', '.join(kind_names())}; got {name!r}")
    return found


def configs_for(kind_name: str, n: int, k: int, groups: int | None, ms, num_sms: int) -> list:
    """The distinct configs the heuristic of the GEMM-like kind `kind_name` picks for the M in ``ms``, in order of
    first appearance."""
    choose = kind(kind_name).choose
    seen: dict = {}
    for m in ms:
        seen.setdefault(choose(m, n, k, groups, num_sms).config, m)
    return list(seen)


def run_piece(kind_name: str, spec, piece, num_sms: int, arch: str) -> list[tuple[str, KernelSource]]:
    """(cache key, source) of each kernel one piece of a warm-up entry of `kind_name` needs (runs in worker
    processes: the kind is looked up by name there)."""
    return [(jit.kernel_key(src, arch), src) for src in kind(kind_name).kernels(spec, piece, num_sms)]
