"""The FP8 GEMM family (ptx/fp8_gemm.cuh, dgx/kernels/fp8_gemm.py): its six kinds of problem, each with the one
heuristic the launch layer, warm-up and ``dgx inspect`` all use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import enumeration, heuristics, jit
from ..kinds import M_GROUPED_CONTIGUOUS_PSUM, GemmKind, Layout
from ..kernels.fp8_epilogue import Epilogue, parse_epilogue
from ..problems import GROUPED_KINDS, ProblemError, check_problem
from .base import Family, Inspected, Kind, Label, ShapeSpec, positive_field, sources_of

GEMM_FIELDS = ("n", "k", "groups", "max_m", "m", "epilogue")
#: The kinds that take a fused epilogue (an "epilogue" field; dgx inspect --epilogue): the BF16-output GEMMs.
FUSED_KINDS = (GemmKind.DENSE.value, GemmKind.M_GROUPED_CONTIGUOUS.value, GemmKind.M_GROUPED_MASKED.value,
               M_GROUPED_CONTIGUOUS_PSUM)

Chooser = Callable[[int, int, int, "int | None", int], heuristics.Choice]

#: The heuristic of each kind: (M, N, K, groups, SM count) -> Choice. M is the rows of one problem (masked: the
#: expected rows per group; contiguous and its prefix-sum variant: the rows of all groups; K-grouped: K is one
#: group's).
CHOOSERS: dict[str, Chooser] = {
    GemmKind.DENSE.value: lambda m, n, k, g, sms: heuristics.choose_dense(m, n, k, sms),
    GemmKind.M_GROUPED_CONTIGUOUS.value: lambda m, n, k, g, sms: heuristics.choose_grouped(
        Layout.CONTIGUOUS, m, n, k, g or 1, sms),
    GemmKind.M_GROUPED_MASKED.value: lambda m, n, k, g, sms: heuristics.choose_grouped(
        Layout.MASKED, m, n, k, g or 1, sms),
    GemmKind.WGRAD.value: lambda m, n, k, g, sms: heuristics.choose_wgrad(m, n, k, sms, Layout.DENSE, 1),
    GemmKind.K_GROUPED.value: lambda m, n, k, g, sms: heuristics.choose_wgrad(
        m, n, k, sms, Layout.K_GROUPED, g or 1),
    # as dgx.grouped_psum chooses, for the default alignment (128 rows)
    M_GROUPED_CONTIGUOUS_PSUM: lambda m, n, k, g, sms: heuristics.choose_contiguous_psum(m, n, k, g or 1, sms),
}

_M_SPACES = {
    GemmKind.M_GROUPED_CONTIGUOUS.value: enumeration.CONTIGUOUS_SUM,
    M_GROUPED_CONTIGUOUS_PSUM: enumeration.PSUM,
}


def _parse(kind: str) -> Callable[[Mapping[str, Any], Label], ShapeSpec]:
    def parse(entry: Mapping[str, Any], label: Label) -> ShapeSpec:
        n = positive_field(entry, "n", label)
        k = positive_field(entry, "k", label)
        groups = positive_field(entry, "groups", label, required=False)
        max_m = positive_field(entry, "max_m", label, required=False)
        m = positive_field(entry, "m", label, required=False)
        check_problem(kind, n=n, k=k, groups=groups, m=max_m, m_field="max_m", label=label)
        if m is not None:
            check_problem(kind, n=n, k=k, groups=groups, m=m, m_field="m", label=label)
        tag = None
        if "epilogue" in entry:
            tag = entry["epilogue"]
            _epilogue(kind, tag, n, label("epilogue"))
        return ShapeSpec(kind, n, k, groups, max_m, entry.get("note", ""), m, tag)

    return parse


def _epilogue(kind: str, tag, n: int, field: str) -> Epilogue:
    """The fused epilogue `tag` names, for a `kind` GEMM with N = n; ProblemError naming `field` if it cannot run."""
    if kind not in FUSED_KINDS:
        raise ProblemError(field, f"kind {kind} has no fused epilogues (they are for {', '.join(FUSED_KINDS)})")
    try:
        epilogue = parse_epilogue(tag)
    except (TypeError, ValueError) as exc:
        raise ProblemError(field, str(exc)) from None
    if n % epilogue.n_multiple:
        raise ProblemError(field, f"the {epilogue.tag} epilogue needs N a multiple of {epilogue.n_multiple}; got {n}")
    return epilogue


def _chooser(kind: str, epilogue: Epilogue | None) -> Chooser:
    """The kind's heuristic, or with a fused epilogue the fused one."""
    if epilogue is None:
        return CHOOSERS[kind]
    return lambda m, n, k, g, sms: heuristics.choose_fused(kind, m, n, k, g or 1, sms, epilogue)


def _pieces(space: str) -> Callable[[ShapeSpec, int], list[tuple[Any, int]]]:
    def pieces(spec: ShapeSpec, default_max_m: int) -> list[tuple[Any, int]]:
        limit = spec.m_limit(default_max_m)
        check_problem(spec.kind, n=spec.n, k=spec.k, groups=spec.groups, m=limit, m_field="max_m")
        return [((limit, lo, hi), count) for lo, hi, count in enumeration.windows(space, spec.groups, limit)]

    return pieces


def _kernels(kind: str, space: str) -> Callable[[ShapeSpec, Any, int], list[jit.KernelSource]]:
    def kernels(spec: ShapeSpec, piece: tuple[int, int, int], num_sms: int) -> list[jit.KernelSource]:
        limit, lo, hi = piece
        ms = enumeration.m_values(space, spec.groups, limit, lo, hi)
        choose = _chooser(kind, None if spec.epilogue is None else parse_epilogue(spec.epilogue))
        configs = dict.fromkeys(choose(m, spec.n, spec.k, spec.groups, num_sms).config for m in ms)
        return sources_of(list(configs))

    return kernels


def _inspect(kind: str) -> Callable[[Mapping[str, Any], int, str], Inspected]:
    def inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
        m, n, k = options["gemm"]
        groups = options.get("groups") or 1
        check_problem(kind, n=n, k=k, groups=groups if kind in GROUPED_KINDS else None, m=m, m_field="m",
                      m_is_sum=True, label=lambda f: {"m": "--gemm M", "n": "--gemm N", "k": "--gemm K"}.get(
                          f, f"--{f.replace('_', '-')}"))
        epilogue = None
        if options.get("epilogue") is not None:
            epilogue = _epilogue(kind, options["epilogue"], n, "--epilogue")
        choice = _chooser(kind, epilogue)(m, n, k, groups, num_sms)
        c = choice.config
        src = c.render()
        if kind == M_GROUPED_CONTIGUOUS_PSUM:
            what = f"contiguous_psum ({groups} groups, alignment {heuristics.CONTIGUOUS_ALIGNMENT})"
        else:
            what = {GemmKind.DENSE.value: "fp8_gemm_nt", GemmKind.WGRAD.value: "weight gradient"}.get(
                kind) or f"{GemmKind(kind).short_name} ({groups} groups)"
        header = (
            f"{what} M={m} N={n} K={k} on {num_sms} SMs ({arch}): block {c.block_m}x{c.block_n}, "
            f"{c.stages} stages, pair {c.pair}, {'deferred promotion, ' if c.defer else ''}"
            f"{f'epilogue {c.epilogue.tag}, ' if c.epilogue is not None else ''}"
            f"{'B evict-first, ' if c.stream_b else ''}{src.dynamic_smem} bytes of dynamic shared memory; "
            f"{choice.num_tiles} units in {choice.waves} wave(s); key {jit.kernel_key(src, arch)[:16]}"
        )
        return Inspected(src, header)

    return inspect


def _scale_layout_helper() -> jit.KernelSource:
    return _scale_layout_config().render()


def _ue8m0_helper() -> jit.KernelSource:
    return _ue8m0_config().render()


#: Why a warm-up plan holds each helper kernel (its ``used_by``): every GEMM call can launch them.
SFA_LAYOUT_HELPER = "helper for every GEMM entry: SFA layout conversion (an SFA not in the TMA-aligned M-major layout)"
UE8M0_HELPER = "helper for every GEMM entry: UE8M0 unpack (dgx.deep_gemm with packed int32 scales)"
HELPERS = ((SFA_LAYOUT_HELPER, _scale_layout_helper), (UE8M0_HELPER, _ue8m0_helper))


def _kind(name: str) -> Kind:
    space = _M_SPACES.get(name, enumeration.ROWS)
    aliases = () if name == M_GROUPED_CONTIGUOUS_PSUM else tuple({GemmKind(name).short_name} - {name})
    return Kind(
        name=name,
        family="fp8_gemm",
        fields=GEMM_FIELDS,
        parse=_parse(name),
        pieces=_pieces(space),
        kernels=_kernels(name, space),
        inspect_options=(("gemm", "groups", "num_sms") if name in GROUPED_KINDS else ("gemm", "num_sms"))
        + (("epilogue",) if name in FUSED_KINDS else ()),
        inspect=_inspect(name),
        aliases=aliases,
        helpers=HELPERS,
        choose=CHOOSERS[name],
        m_space=space,
    )


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    """(label, GemmConfig) pairs covering every k-loop variant and feature flag of the kernel."""
    from ..kernels.fp8_gemm import PAIR_M, PAIR_N, PAIR_NONE, GemmConfig

    stages, contiguous, masked, k_grouped = heuristics.pipeline_stages, Layout.CONTIGUOUS, Layout.MASKED, Layout.K_GROUPED
    s256 = stages(256, 128)
    return [
        ("256x128 N7168 K16384 pair none", GemmConfig(7168, 16384, 256, 128, s256, pair=PAIR_NONE)),
        ("256x128 N7168 K16384 pair N", GemmConfig(7168, 16384, 256, 128, s256, pair=PAIR_N)),
        ("256x128 N7168 K16384 pair M", GemmConfig(7168, 16384, 256, 128, s256, pair=PAIR_M)),
        ("dense N24576 K1536", heuristics.choose_dense(4096, 24576, 1536, num_sms).config),
        ("256x128 N7168 K2048", GemmConfig(7168, 2048, 256, 128, s256)),
        ("contiguous 128x160 pair M", GemmConfig(7168, 2048, 128, 160, 4, pair=PAIR_M, layout=contiguous)),
        ("contiguous (heuristic)", heuristics.choose_grouped(contiguous, 32768, 4096, 7168, 8, num_sms).config),
        ("masked 128x128", GemmConfig(4096, 7168, 128, 128, stages(128, 128), layout=masked)),
        ("deferred 64x56", GemmConfig(7168, 2048, 64, 56, stages(64, 56), defer=True)),
        ("wgrad dense (heuristic)", heuristics.choose_wgrad(7168, 2112, 4096, num_sms).config),
        ("wgrad dense plain 128x128", GemmConfig(2112, 4096, 128, 128, 4, wgrad=True)),
        ("wgrad K-grouped (heuristic)", heuristics.choose_wgrad(4096, 7168, 2048, num_sms, k_grouped, 8).config),
        ("wgrad K-grouped plain 128x128", GemmConfig(7168, 0, 128, 128, 4, layout=k_grouped, wgrad=True)),
        ("256x96", GemmConfig(7168, 4096, 256, 96, stages(256, 96))),
        ("128x144", GemmConfig(7168, 4096, 128, 144, stages(128, 144))),
        ("64x128 B scales in stage", GemmConfig(7168, 4096, 64, 128, stages(64, 128))),
        ("64x128 rounds", GemmConfig(7168, 4096, 64, 128, 4)),
        ("decode 64x2112x7168 (heuristic)", heuristics.choose_dense(64, 2112, 7168, num_sms).config),
        ("split-K 4 64x128", GemmConfig(7168, 16384, 64, 128, heuristics.max_stages(64, 128, split_k=4), split_k=4)),
        ("psum (heuristic)", heuristics.choose_contiguous_psum(8192, 4096, 7168, 8, num_sms).config),
        # Fused epilogues (ptx/fp8_gemm_fused.cuh): FP8 output, its scale formats, SwiGLU units, alpha on BF16.
        ("fused fp8 128x128", GemmConfig(4096, 7168, 128, 128, stages(128, 128), epilogue=Epilogue())),
        ("fused fp8 contiguous 128x128 pair M rw alpha ue8m0", GemmConfig(
            7168, 2048, 128, 128, 4, pair=PAIR_M, layout=contiguous,
            epilogue=Epilogue(row_weight=True, alpha=True, scale_format="ue8m0"))),
        ("fused swiglu masked 64x128 deferred, all", GemmConfig(
            4096, 7168, 64, 128, 6, layout=Layout.MASKED, defer=True,
            epilogue=Epilogue(swiglu=True, clamp=True, row_weight=True, alpha=True, scale_format="packed"))),
        ("fused swiglu masked (heuristic)", heuristics.choose_fused(
            "m_grouped_masked", 64, 4096, 7168, 8, num_sms, Epilogue(swiglu=True)).config),
        ("fused swiglu contiguous (heuristic)", heuristics.choose_fused(
            "m_grouped_contiguous", 32768, 4096, 7168, 8, num_sms, Epilogue(swiglu=True)).config),
        ("fused swiglu psum 64x128 ue8m0", GemmConfig(4096, 7168, 64, 128, 6, layout=Layout.CONTIGUOUS_PSUM,
                                                      epilogue=Epilogue(swiglu=True, scale_format="ue8m0"))),
        ("fused bf16 alpha (heuristic)", heuristics.choose_fused(
            "dense", 4096, 7168, 2048, 1, num_sms, Epilogue(fp8=False, alpha=True)).config),
        ("scale-layout helper", _scale_layout_config()),
        ("UE8M0 unpack helper", _ue8m0_config()),
    ]


def _scale_layout_config():
    from ..kernels import scale_layout

    return scale_layout.CONFIG


def _ue8m0_config():
    from ..kernels import ue8m0

    return ue8m0.Ue8m0UnpackConfig()


FAMILY = Family("fp8_gemm", tuple(_kind(name) for name in CHOOSERS), representatives,
                torch_ops="dgx.families.fp8_gemm_torch")
