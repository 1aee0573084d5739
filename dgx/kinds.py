"""The kinds of GEMM dgx runs, one vocabulary for the API, warmup, inspect and bench.

A :class:`GemmKind` is what a caller asks for (its value is the shapes-file ``kind``); a :class:`Layout` is
how the kernel's scheduler walks the tiles (the integer ``ptx/scheduler.cuh`` takes as ``GemmLayout``). The
dense and weight-gradient kinds share the dense layout; the weight gradient differs by its FP32 output and
per-row B scales.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class Layout(IntEnum):
    """ptx/scheduler.cuh GemmLayout: how tiles map onto rows and groups."""

    DENSE = 0
    CONTIGUOUS = 1  # MoE groups along M, one contiguous segment of rows each
    MASKED = 2  # MoE groups along M, one [M_max] slice each with a run-time row count
    K_GROUPED = 3  # groups along K (weight gradients: one output per group)
    CONTIGUOUS_PSUM = 4  # as CONTIGUOUS, the groups' row ranges given by prefix sums (one int per group)
    BATCHED = 5  # one full output per group (head) over strided 3-D views: dgx.einsum's per-head forms (BF16
    #              kernel) and dgx.fp8_einsum (FP8 kernel)
    BATCH_SUM = 6  # einsum 'bmk,bnk->mn': the S batch summed, its (s, k) reduction cut into ranges (BF16 only)


class ShareDim(IntEnum):
    """ptx/scheduler.cuh PairDim: what a 2-CTA cluster shares through TMA multicast."""

    NONE = 0
    A = 1  # the two CTAs take neighbouring N blocks of the same rows: A is loaded once for both
    B = 2  # the two CTAs take neighbouring M blocks of the same columns: B is loaded once for both


class GemmKind(str, Enum):
    """What a GEMM computes; the value is the shapes-file ``kind`` of ``dgx warmup`` and ``dgx bench``."""

    DENSE = "dense"
    M_GROUPED_CONTIGUOUS = "m_grouped_contiguous"
    M_GROUPED_MASKED = "m_grouped_masked"
    WGRAD = "wgrad"
    K_GROUPED = "k_grouped"

    def __str__(self) -> str:
        return self.value

    @property
    def layout(self) -> Layout:
        return _LAYOUTS[self]

    @property
    def wgrad(self) -> bool:
        """Whether it is a weight gradient (FP32 D = C + A.B^T, both operands scaled per row)."""
        return self in (GemmKind.WGRAD, GemmKind.K_GROUPED)

    @property
    def grouped(self) -> bool:
        """Whether its shapes carry a group count."""
        return self in (GemmKind.M_GROUPED_CONTIGUOUS, GemmKind.M_GROUPED_MASKED, GemmKind.K_GROUPED)

    @property
    def short_name(self) -> str:
        """The name of the benchmark suite and of ``dgx inspect --kind`` (``contiguous``, ``masked``, ...)."""
        return _SHORT[self]

    @classmethod
    def parse(cls, name: object) -> GemmKind:
        """The kind called `name`: its value (``m_grouped_masked``) or its short name (``masked``)."""
        if isinstance(name, cls):
            return name
        kind = _BY_NAME.get(name) if isinstance(name, str) else None
        if kind is None:
            raise ValueError(f"GEMM kind: expected one of {', '.join(_BY_NAME)}; got {name!r}")
        return kind

    @classmethod
    def of(cls, layout: int, wgrad: bool) -> GemmKind:
        """The kind a kernel of `layout` (and weight gradient or not) computes."""
        if layout == Layout.CONTIGUOUS_PSUM:
            layout = Layout.CONTIGUOUS  # the same GEMM; only how the groups' rows are given differs
        if layout == Layout.BATCHED:
            layout = Layout.MASKED  # the same batched GEMM with every group's rows valid (dgx.fp8_einsum's kernel)
        for kind, kind_layout in _LAYOUTS.items():
            if kind_layout == layout and kind.wgrad == bool(wgrad):
                return kind
        raise ValueError(f"no GEMM kind has layout {layout} with wgrad={wgrad}")


_LAYOUTS = {
    GemmKind.DENSE: Layout.DENSE,
    GemmKind.M_GROUPED_CONTIGUOUS: Layout.CONTIGUOUS,
    GemmKind.M_GROUPED_MASKED: Layout.MASKED,
    GemmKind.WGRAD: Layout.DENSE,
    GemmKind.K_GROUPED: Layout.K_GROUPED,
}
_SHORT = {
    GemmKind.DENSE: "dense",
    GemmKind.M_GROUPED_CONTIGUOUS: "contiguous",
    GemmKind.M_GROUPED_MASKED: "masked",
    GemmKind.WGRAD: "wgrad",
    GemmKind.K_GROUPED: "k_grouped",
}
_BY_NAME: dict[str, GemmKind] = {**{k.value: k for k in GemmKind}, **{s: k for k, s in _SHORT.items()}}

#: The shapes-file values, in order.
KIND_NAMES: tuple[str, ...] = tuple(k.value for k in GemmKind)
#: The short names (benchmark suites, ``dgx inspect --kind``), in order.
SHORT_NAMES: tuple[str, ...] = tuple(_SHORT[k] for k in GemmKind)

#: The shapes-file kind of the prefix-sum contiguous layout (DeepGEMM's ``use_psum_layout=True``,
#: dgx/grouped_psum.py): the ``m_grouped_contiguous`` GEMM with the groups' rows given by one prefix sum per
#: group. Its kernels differ from the contiguous kind's (layout and tile choice), so ``dgx warmup`` and
#: ``dgx inspect`` take it as a kind of its own; it is not a :class:`GemmKind` (it computes the contiguous kind,
#: and the benchmark has no suite for it).
M_GROUPED_CONTIGUOUS_PSUM = "m_grouped_contiguous_psum"

#: Shapes-file kinds that run a :class:`GemmKind` through another layout: name -> (the kind, the layout).
LAYOUT_VARIANTS: dict[str, tuple[GemmKind, Layout]] = {
    M_GROUPED_CONTIGUOUS_PSUM: (GemmKind.M_GROUPED_CONTIGUOUS, Layout.CONTIGUOUS_PSUM),
}
#: Their names, in order (shapes files of ``dgx warmup``, ``dgx inspect --kind``; not ``dgx bench``).
VARIANT_KIND_NAMES: tuple[str, ...] = tuple(LAYOUT_VARIANTS)


#: The shapes-file kind of dgx.fp8_einsum's 'bhr,hdr->bhd' (dgx/fp8_einsum.py): the FP8 GEMM kernel on the batched
#: layout, a kind of its own (family ``fp8_einsum``), not a :class:`GemmKind` nor a layout variant of one.
FP8_EINSUM_BHR_HDR_BHD = "fp8_einsum_bhr_hdr_bhd"


def base_kind(name: str) -> str:
    """The GemmKind value a shapes-file kind computes: itself, or the kind a layout variant runs."""
    variant = LAYOUT_VARIANTS.get(name)
    return variant[0].value if variant else name


class MqaKind(str, Enum):
    """The MQA-logits kernels of the DeepSeek-V3.2 indexer; the value is the shapes-file ``kind`` of ``dgx warmup``
    and the ``dgx inspect --kind``."""

    PREFILL = "mqa_logits"
    PAGED = "paged_mqa_logits"

    def __str__(self) -> str:
        return self.value


#: The MQA-logits kinds' shapes-file values, in order.
MQA_KIND_NAMES: tuple[str, ...] = tuple(k.value for k in MqaKind)
