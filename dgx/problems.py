"""The rules a GEMM problem (kind, N, K, groups, M) must follow before any kernel is chosen or compiled.

One implementation for every entry point: the shapes-file parser (``dgx warmup``, ``dgx bench --shapes``),
:func:`dgx.warmup.plan` and ``dgx inspect --gemm``. Each rule says where it comes from (:mod:`dgx.limits`),
and a violation raises :class:`ProblemError` naming the field, what was expected and what came.
"""

from __future__ import annotations

from typing import Callable

from . import limits
from .kinds import KIND_NAMES, VARIANT_KIND_NAMES, GemmKind, base_kind

#: The shapes-file kinds: dgx.kinds.GemmKind values, then the layout variants (m_grouped_contiguous_psum).
KINDS = KIND_NAMES + VARIANT_KIND_NAMES
GROUPED_KINDS = frozenset(k.value for k in GemmKind if k.grouped) | frozenset(
    v for v in VARIANT_KIND_NAMES if GemmKind(base_kind(v)).grouped
)


class ProblemError(ValueError):
    """A problem no kernel can run. ``field`` is the offending field's label, ``reason`` the rest."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class ArchError(ValueError):
    """An architecture the kernels are not written for."""


def default_label(field: str) -> str:
    """How a field is named in messages by default (as in a shapes file)."""
    return f"field {field!r}"


def _positive(value: object, field: str, label: Callable[[str], str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProblemError(label(field), f"expected a positive integer, got {value!r}")
    return value


def _at_most(value: int, field: str, label: Callable[[str], str], what: str, shown: str | None = None) -> None:
    if value > limits.MAX_DIM:
        raise ProblemError(
            label(field),
            f"expected {what} <= {limits.MAX_DIM} (2**31 - {limits.MAX_TILE}: the kernels' 32-bit index math "
            f"rounds it up to whole tiles), got {shown or value}",
        )


def check_problem(
    kind: str,
    *,
    n: int,
    k: int,
    groups: int | None = None,
    m: int | None = None,
    m_field: str = "max_m",
    m_is_sum: bool = False,
    label: Callable[[str], str] = default_label,
) -> None:
    """Raise ProblemError unless some dgx kernel can run this problem.

    ``m`` is the largest M (``m_field`` names it in messages); for ``m_grouped_contiguous`` (and its prefix-sum
    variant ``m_grouped_contiguous_psum``, which follows the same rules) it counts the rows of one group, or of
    all groups together with ``m_is_sum`` (``dgx inspect`` takes M_sum).
    ``groups`` is required for the grouped kinds and refused for the others. ``label`` turns a field
    name into how the caller's user knows it (``field 'n'`` in a shapes file, ``--gemm N`` on the CLI).
    """
    if kind not in KINDS:
        raise ProblemError(label("kind"), f"expected one of {', '.join(KINDS)}, got {kind!r}")
    named, kind = kind, base_kind(kind)  # a layout variant follows the rules of the kind it computes
    n = _positive(n, "n", label)
    k = _positive(k, "k", label)
    if n % limits.N_ALIGN:
        raise ProblemError(
            label("n"), f"expected a multiple of {limits.N_ALIGN} (16-byte rows of the BF16 output for TMA), got {n}"
        )
    _at_most(n, "n", label, "N")
    if kind == "k_grouped":
        if k % limits.K_GROUP_ALIGN:
            raise ProblemError(
                label("k"),
                f"expected a multiple of {limits.K_GROUP_ALIGN} for k_grouped (K per group), got {k}",
            )
    elif k % limits.K_ALIGN:
        raise ProblemError(
            label("k"), f"expected a multiple of {limits.K_ALIGN} (16-byte FP8 rows for TMA), got {k}"
        )
    _at_most(k, "k", label, "K")
    grouped = kind in GROUPED_KINDS
    if grouped:
        if groups is None:
            raise ProblemError(label("groups"), f"expected a positive integer for kind {named}, got nothing (missing)")
        groups = _positive(groups, "groups", label)
        if kind in (GemmKind.M_GROUPED_CONTIGUOUS, GemmKind.M_GROUPED_MASKED):
            _at_most(groups * n, "groups", label, "groups x N (B of all groups is one [groups x N, K] tensor map)",
                     f"{groups} x {n}")
        else:
            _at_most(groups * k, "groups", label, "groups x K (the groups' A and B lie one after another along K)",
                     f"{groups} x {k}")
    elif groups is not None:
        raise ProblemError(
            label("groups"),
            f"expected no groups for kind {named!r} (only {', '.join(sorted(GROUPED_KINDS))} take them), got {groups}",
        )
    if m is None:
        return
    m = _positive(m, m_field, label)
    _at_most(m, m_field, label, "M")
    if groups is not None and not (kind == "m_grouped_contiguous" and m_is_sum):
        what = {
            "m_grouped_contiguous": "groups x max_m (the rows of all groups, M_sum)",
            "m_grouped_masked": "groups x M (A and D of all groups are [groups x M_max, ...])",
            "k_grouped": "groups x M (D of all groups is [groups x M, N])",
        }[kind]
        _at_most(groups * m, m_field, label, what, f"{groups} x {m}")


def check_num_sms(value: object, label: str = "num_sms") -> int:
    """Return ``value`` if kernels can be planned for that many SMs (1 to :data:`dgx.limits.MAX_NUM_SMS`), else
    raise ProblemError naming ``label`` (``--num-sms`` on the CLI)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limits.MAX_NUM_SMS:
        raise ProblemError(
            label,
            f"expected an SM count from 1 to {limits.MAX_NUM_SMS} (the most a Hopper GPU has; 132 on H100 SXM), "
            f"got {value!r}",
        )
    return value


def check_arch(arch: object) -> str:
    """Return ``arch`` if the kernels can be compiled for it (sm_90a only), else raise ArchError."""
    if arch != limits.SUPPORTED_ARCH:
        raise ArchError(
            f"arch: expected {limits.SUPPORTED_ARCH}, got {arch!r}: only {limits.SUPPORTED_ARCH} is supported "
            "(the kernels use wgmma, setmaxnreg and TMA multicast, which exist on Hopper's sm_90a alone)"
        )
    return arch
