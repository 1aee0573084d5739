"""What a kernel family tells the tools: the kinds of problem it runs, each as one :class:`Kind`.

A kind is a shapes-file ``kind`` of ``dgx warmup`` and a ``dgx inspect --kind``. Its description says which
fields an entry holds and how they are checked (:attr:`Kind.parse`), how warm-up cuts the kernels an entry needs
into pieces of work (:attr:`Kind.pieces`, run in worker processes as :func:`dgx.enumeration.run_piece`), which
kernels a piece needs (:attr:`Kind.kernels`), which ``dgx inspect`` options it reads and the kernel they select
(:attr:`Kind.inspect`), and which shape-independent helper kernels its calls may launch (:attr:`Kind.helpers`).
The tools read these and name no family; a new family is its own modules plus one line in dgx/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import enumeration
from ..jit import KernelSource
from ..problems import ProblemError, default_label

Label = Callable[[str], str]


@dataclass(frozen=True)
class ShapeSpec:
    """One entry of a shapes file of a GEMM-like kind: N, K (and groups) fixed, M up to ``max_m`` (or ``m``)."""

    kind: str
    n: int
    k: int
    groups: int | None = None
    max_m: int | None = None
    note: str = ""
    m: int | None = None  # the benchmark's M (dgx bench --shapes); stands in for max_m when that is absent
    epilogue: str | None = None  # FP8 GEMMs: a fused epilogue's tag (dgx.kernels.fp8_epilogue), e.g. "fp8_swiglu"

    @property
    def label(self) -> str:
        out = f"{self.kind} n={self.n} k={self.k}"
        if self.groups is not None:
            out += f" groups={self.groups}"
        if self.max_m is not None:
            out += f" max_m={self.max_m}"
        elif self.m is not None:
            out += f" m={self.m}"
        if self.epilogue is not None:
            out += f" epilogue={self.epilogue}"
        return out

    def m_limit(self, default: int) -> int:
        """The largest M to warm for: max_m, else m, else ``default``."""
        return self.max_m or self.m or default


def bound_label(name: str, limit: int | None, single: int | None) -> str:
    """A spec label's row count: `` max_<name>=`` where the entry bounds it, else `` <name>=`` where it gives one,
    else nothing."""
    return f" max_{name}={limit}" if limit else (f" {name}={single}" if single else "")


@dataclass(frozen=True)
class HeadsSpec:
    """One per-head einsum entry of a shapes file: h heads of y [d, r], b up to ``max_b`` (or ``b``)."""

    kind: str
    h: int
    d: int
    r: int
    max_b: int | None
    b: int | None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} h={self.h} d={self.d} r={self.r}" + bound_label("b", self.max_b, self.b)


def heads_pieces(spec: HeadsSpec, default_max_m: int) -> list[tuple[Any, int]]:
    """Warm-up's pieces of a per-head entry: windows of b (as rows) up to its bound, else the default max M."""
    limit = spec.max_b or spec.b or default_max_m
    return [((limit, lo, hi), count) for lo, hi, count in enumeration.windows(enumeration.ROWS, None, limit)]


@dataclass(frozen=True)
class MqaSpec:
    """One MQA-logits entry of a shapes file: every kernel of `kind` for H heads of dimension D."""

    kind: str
    heads: int
    head_dim: int
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} heads={self.heads} head_dim={self.head_dim}"


@dataclass(frozen=True)
class InspectOption:
    """An option of ``dgx inspect`` a kind may read: its parameter name and how the user writes it."""

    name: str
    flag: str


#: Every option a kind may read (``dgx inspect`` refuses the ones the chosen kind does not).
INSPECT_OPTIONS: dict[str, InspectOption] = {
    o.name: o
    for o in (
        InspectOption("gemm", "--gemm"),
        InspectOption("groups", "--groups"),
        InspectOption("num_sms", "--num-sms"),
        InspectOption("heads", "--heads"),
        InspectOption("head_dim", "--head-dim"),
        InspectOption("next_n", "--next-n"),
        InspectOption("epilogue", "--epilogue"),
    )
}


@dataclass(frozen=True)
class Inspected:
    """The kernel ``dgx inspect`` options select, with a header line that says why it is that kernel."""

    source: KernelSource
    header: str


@dataclass(frozen=True)
class Kind:
    """One kind of problem a family runs (see the module docstring)."""

    name: str  # the shapes-file kind
    family: str
    fields: tuple[str, ...]  # the entry's fields beside `kind` and `note`
    parse: Callable[[Mapping[str, Any], Label], Any]  # entry -> spec; ProblemError naming the field through Label
    pieces: Callable[[Any, int], list[tuple[Any, int]]]  # (spec, default max M) -> [(piece, heuristic calls)]
    kernels: Callable[[Any, Any, int], list[KernelSource]]  # (spec, piece, SM count) -> kernels (in workers too)
    inspect_options: tuple[str, ...]  # names in INSPECT_OPTIONS
    inspect: Callable[[Mapping[str, Any], int, str], Inspected]  # (options, SM count, arch)
    aliases: tuple[str, ...] = ()  # other names `dgx inspect --kind` takes (the benchmark suites' names)
    helpers: tuple[tuple[str, Callable[[], KernelSource]], ...] = ()  # (why, source) launched beside its kernels
    # GEMM-like kinds: the heuristic, (m, n, k, groups, SM count) -> a choice with `.config`, and how warm-up
    # counts their M (a dgx.enumeration M space).
    choose: Callable[[int, int, int, int | None, int], Any] | None = None
    m_space: str | None = None

    def __post_init__(self) -> None:
        unknown = [o for o in self.inspect_options if o not in INSPECT_OPTIONS]
        if unknown:
            raise ValueError(f"kind {self.name}: inspect options {unknown} are not among {sorted(INSPECT_OPTIONS)}")


@dataclass(frozen=True)
class Family:
    """A kernel family: its name, the kinds of problem it runs, and its representative kernels: (label, config)
    pairs covering its variants and feature flags, whose SASS CI compares with a reviewed manifest
    (tests/test_sass_manifest.py), so a change that was meant to change no kernel cannot change one silently."""

    name: str
    kinds: tuple[Kind, ...] = field(default=())
    representatives: Callable[[], list[tuple[str, Any]]] = field(default=lambda: [])
    # The module (imported only by dgx.torch_ops, with torch) that lists the family's torch operators as TORCH_OPS
    # and defines the functions of the plain signatures that call them (its __all__, its LEGACY names).
    torch_ops: str = ""
    # The module whose __all__ dgx exports as its own public functions (dgx.<name>), imported with dgx.
    api: str = ""
    # The module (imported only by dgx.deep_gemm, with torch) whose DEEP_GEMM dict maps DeepGEMM's names to the
    # family's functions with DeepGEMM's signatures (and DEEP_GEMM_LEGACY those of deep_gemm.legacy).
    deep_gemm: str = ""


@dataclass(frozen=True)
class TorchOp:
    """One operator ``torch.ops.dgx.<name>``: its schema (arguments and returns, without the name; ``Tensor(a!)``
    marks an argument written in place), the real implementation on the schema's arguments, and the fake one
    (the outputs' shapes, dtypes and devices from the inputs' alone, for torch.compile)."""

    name: str
    schema: str
    real: Callable[..., Any]
    fake: Callable[..., Any]


def fake_inplace(*args: Any) -> None:
    """The fake implementation of an operator that only writes an argument in place."""
    return None


def bump_version(result: Any, written: Any) -> Any:
    """Tell autograd that the tensor `written` was written (what torch's own in-place ops do); returns `result`."""
    import torch

    torch._C._increment_version((written,))
    return result


def positive_field(entry: Mapping[str, Any], name: str, label: Label = default_label, required: bool = True) -> int | None:
    """The positive integer `entry[name]`, or None if absent and not `required` (else ProblemError)."""
    if name not in entry:
        if required:
            raise ProblemError(label(name), "expected a positive integer, got nothing (missing)")
        return None
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProblemError(label(name), f"expected a positive integer, got {value!r}")
    return value


def sources_of(configs: Sequence[Any]) -> list[KernelSource]:
    """The rendered kernels of `configs`, in order."""
    return [c.render() for c in configs]
