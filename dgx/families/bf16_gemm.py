"""The BF16 GEMM family (ptx/bf16_gemm*.cuh, dgx/kernels/bf16_gemm*.py, entry points in dgx/bf16.py): its kinds of
problem for warm-up and ``dgx inspect``, its representative kernels, torch operators, public functions and DeepGEMM
names. A shapes-file entry may name the operand form (``form``: nt, nn, tn, tt), the output dtype (``out_dtype``)
and whether C is added (``with_c``); by default each kind's usual one (nt with a BF16 D; K-grouped: tn, FP32 D += ...)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import enumeration, jit
from ..kernels import bf16_gemm as kernels_module
from ..limits import MAX_DIM
from ..problems import ProblemError
from .base import Family, Inspected, Kind, Label, bound_label, positive_field, sources_of

#: shapes-file kind -> the BF16 kernels' kind (dgx.kernels.bf16_gemm.KIND_LAYOUTS)
KINDS = {
    "bf16_gemm": "dense",
    "bf16_m_grouped_contiguous": "m_grouped_contiguous",
    "bf16_m_grouped_contiguous_psum": "m_grouped_contiguous_psum",
    "bf16_m_grouped_masked": "m_grouped_masked",
    "bf16_k_grouped": "k_grouped",
}
_GROUPED = ("m_grouped_contiguous", "m_grouped_contiguous_psum", "m_grouped_masked", "k_grouped")
_SPACES = {"m_grouped_contiguous": enumeration.CONTIGUOUS_SUM, "m_grouped_contiguous_psum": enumeration.PSUM}
_MAJORS = {form: majors for majors, form in kernels_module.FORMS.items()}
FIELDS = ("n", "k", "groups", "max_m", "m", "form", "out_dtype", "with_c")


@dataclass(frozen=True)
class Bf16Spec:
    """One BF16 GEMM entry of a shapes file: N, K (and groups), M up to ``max_m`` (or ``m``), the operand form."""

    kind: str
    n: int
    k: int
    groups: int | None
    max_m: int | None
    m: int | None
    form: str
    out_dtype: str
    with_c: bool
    note: str = ""

    @property
    def label(self) -> str:
        out = f"{self.kind} n={self.n} k={self.k}" + (f" groups={self.groups}" if self.groups else "")
        out += bound_label("m", self.max_m, self.m)
        return out + f" {self.form} {self.out_dtype}" + (" +c" if self.with_c else "")

    def m_limit(self, default: int) -> int:
        return self.max_m or self.m or default

    def choose_kwargs(self) -> dict[str, Any]:
        major_a, major_b = _MAJORS[self.form]
        return {"major_a": major_a, "major_b": major_b, "out_dtype": self.out_dtype, "with_c": self.with_c}


def _parse(name: str) -> Callable[[Mapping[str, Any], Label], Bf16Spec]:
    kind = KINDS[name]
    k_grouped = kind == "k_grouped"

    def parse(entry: Mapping[str, Any], label: Label) -> Bf16Spec:
        n = positive_field(entry, "n", label)
        k = positive_field(entry, "k", label)
        groups = positive_field(entry, "groups", label, required=kind in _GROUPED)
        if groups is not None and kind not in _GROUPED:
            raise ProblemError(label("groups"), f"expected no groups for kind {name!r}, got {groups}")
        max_m = positive_field(entry, "max_m", label, required=False)
        m = positive_field(entry, "m", label, required=False)
        for field, value in (("n", n), ("k", k)):
            if value % 8:
                raise ProblemError(label(field), f"expected a multiple of 8 (16-byte BF16 rows for TMA), got {value}")
            if value > MAX_DIM:
                raise ProblemError(label(field), f"expected at most {MAX_DIM}, got {value}")
        if k_grouped and k % 128:
            raise ProblemError(label("k"), f"expected a multiple of 128 for {name} (K per group), got {k}")
        for field, value in (("max_m", max_m), ("m", m)):
            if value is not None and value * (groups or 1) > MAX_DIM:
                raise ProblemError(label(field), f"expected (groups x) M at most {MAX_DIM}, got {value}")
        form = entry.get("form", "tn" if k_grouped else "nt")
        if form not in _MAJORS:
            raise ProblemError(label("form"), f"expected one of {', '.join(_MAJORS)}, got {form!r}")
        out_dtype = entry.get("out_dtype", "float32" if k_grouped else "bfloat16")
        if out_dtype not in kernels_module.OUT_DTYPES:
            raise ProblemError(label("out_dtype"), f"expected one of {', '.join(kernels_module.OUT_DTYPES)}, "
                                                   f"got {out_dtype!r}")
        with_c = entry.get("with_c", k_grouped)
        if not isinstance(with_c, bool):
            raise ProblemError(label("with_c"), f"expected true or false, got {with_c!r}")
        return Bf16Spec(name, n, k, groups, max_m, m, form, out_dtype, with_c, entry.get("note", ""))

    return parse


def _pieces(spec: Bf16Spec, default_max_m: int) -> list[tuple[Any, int]]:
    limit = spec.m_limit(default_max_m)
    space = _SPACES.get(KINDS[spec.kind], enumeration.ROWS)
    return [((limit, lo, hi), count) for lo, hi, count in enumeration.windows(space, spec.groups, limit)]


def _kernels(spec: Bf16Spec, piece: tuple[int, int, int], num_sms: int) -> list[jit.KernelSource]:
    limit, lo, hi = piece
    kind = KINDS[spec.kind]
    ms = enumeration.m_values(_SPACES.get(kind, enumeration.ROWS), spec.groups, limit, lo, hi)
    configs = dict.fromkeys(kernels_module.choose(kind, m, spec.n, spec.k, spec.groups or 1, num_sms,
                                                  **spec.choose_kwargs()) for m in ms)
    return sources_of(list(configs))


def _chooser(name: str):
    kind, k_grouped = KINDS[name], KINDS[name] == "k_grouped"

    def choose(m: int, n: int, k: int, groups: int | None, num_sms: int):
        major = "mn" if k_grouped else "k"
        config = kernels_module.choose(kind, m, n, k, groups or 1, num_sms, major_a=major, major_b=major,
                                       out_dtype="float32" if k_grouped else "bfloat16", with_c=k_grouped)
        return _Choice(config)

    return choose


@dataclass(frozen=True)
class _Choice:
    config: Any


def _inspect(name: str) -> Callable[[Mapping[str, Any], int, str], Inspected]:
    choose = _chooser(name)

    def inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
        m, n, k = options["gemm"]
        groups = options.get("groups") or 1
        entry = {"n": n, "k": k, "m": m} | ({"groups": groups} if KINDS[name] in _GROUPED else {})
        flags = {"m": "--gemm M", "n": "--gemm N", "k": "--gemm K"}
        _parse(name)(entry, lambda f: flags.get(f, f"--{f.replace('_', '-')}"))
        c = choose(m, n, k, groups, num_sms).config
        src = c.render()
        return Inspected(src, f"{name} ({c.form}, D {c.out_dtype}) M={m} N={n} K={k} on {num_sms} SMs ({arch}): "
                              f"{src.name}, {src.dynamic_smem} bytes of dynamic shared memory; "
                              f"key {jit.kernel_key(src, arch)[:16]}")

    return inspect


def _kind(name: str) -> Kind:
    grouped = KINDS[name] in _GROUPED
    return Kind(
        name=name,
        family="bf16_gemm",
        fields=FIELDS if grouped else tuple(f for f in FIELDS if f != "groups"),
        parse=_parse(name),
        pieces=_pieces,
        kernels=_kernels,
        inspect_options=("gemm", "groups", "num_sms") if grouped else ("gemm", "num_sms"),
        inspect=_inspect(name),
        choose=_chooser(name),
        m_space=_SPACES.get(KINDS[name], enumeration.ROWS),
    )


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    """(label, config) pairs: every form, both output dtypes, C, each layout, multicast, the one-warpgroup tiles, the
    ping-pong schedule. The heuristic's choices without ping-pong tiles, whatever DGX_BF16_PINGPONG says."""
    choose = functools.partial(kernels_module.choose, pingpong=False)
    out = []
    for form, (ma, mb) in ((f, _MAJORS[f]) for f in ("nt", "nn", "tn", "tt")):
        out.append((f"dense {form} 4096x7168x16384", choose("dense", 4096, 7168, 16384, 1, num_sms, major_a=ma,
                                                            major_b=mb)))
    out += [
        ("dense nt decode 64x2112x7168", choose("dense", 64, 2112, 7168, 1, num_sms)),
        ("dense nt FP32 +c 128x4096x7168", choose("dense", 128, 4096, 7168, 1, num_sms, out_dtype="float32",
                                                  with_c=True)),
        ("contiguous 8192x4096x7168 8g", choose("m_grouped_contiguous", 8192, 4096, 7168, 8, num_sms)),
        ("psum 8192x4096x7168 8g", choose("m_grouped_contiguous_psum", 8192, 4096, 7168, 8, num_sms)),
        ("masked 256x7168x2048 4g", choose("m_grouped_masked", 256, 7168, 2048, 4, num_sms)),
        ("k_grouped tn 4096x7168 4g", choose("k_grouped", 4096, 7168, 4096, 4, num_sms, major_a="mn", major_b="mn",
                                             out_dtype="float32", with_c=True)),
        ("dense nt ping-pong 4096x32768x512", choose("dense", 4096, 32768, 512, 1, num_sms, pingpong=True)),
    ]
    return out


FAMILY = Family("bf16_gemm", tuple(_kind(name) for name in KINDS), representatives,
                torch_ops="dgx.families.bf16_gemm_torch", api="dgx.bf16", deep_gemm="dgx.families.bf16_gemm_torch")
