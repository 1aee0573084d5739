"""The einsum family (the BF16 GEMM kernel's batched layouts and ptx/einsum_reduce.cuh; heuristics in
dgx/kernels/einsum.py, entry point dgx/bf16_einsum.py): DeepGEMM's three sm_90 BF16 einsums, for warm-up, ``dgx inspect``,
the SASS manifest, torch and DeepGEMM's ``einsum``.

Shapes-file kinds:

- ``einsum_bmk_bnk_mn``: ``m``, ``n``, ``k`` (a [S, M, K], b [S, N, K]); one GEMM kernel serves every S, and every
  entry also builds the three reduction kernels (FP32 d with and without c, BF16 d);
- ``einsum_bhr_hdr_bhd`` / ``einsum_bhd_hdr_bhr``: ``h``, ``d``, ``r`` (x [b, h, r] or [b, h, d], y [h, d, r]) and
  b up to ``max_b`` (or ``b``; else the warm-up's default max M): the kernels the heuristic picks for every b.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import enumeration, jit
from ..kernels import einsum as kernels_module
from ..limits import MAX_DIM
from ..problems import ProblemError
from .base import Family, HeadsSpec, Inspected, Kind, Label, heads_pieces, positive_field, sources_of

BMK = "einsum_bmk_bnk_mn"
BHR = "einsum_bhr_hdr_bhd"
BHD = "einsum_bhd_hdr_bhr"
#: shapes-file kind -> DeepGEMM's expression
EXPRS = {BMK: kernels_module.BMK_BNK_MN, BHR: kernels_module.BHR_HDR_BHD, BHD: kernels_module.BHD_HDR_BHR}


@dataclass(frozen=True)
class BatchSumSpec:
    """A 'bmk,bnk->mn' entry: M, N, K (any S)."""

    kind: str
    m: int
    n: int
    k: int
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} m={self.m} n={self.n} k={self.k}"


@dataclass(frozen=True)
class BatchedSpec(HeadsSpec):
    """A per-head entry: h heads, y [h, d, r], b up to ``max_b`` (or ``b``)."""

    @property
    def n_k(self) -> tuple[int, int]:
        """The GEMM's (N, K): (d, r) for 'bhr,hdr->bhd', (r, d) for 'bhd,hdr->bhr'."""
        return (self.d, self.r) if self.kind == BHR else (self.r, self.d)


def _dim(entry: Mapping[str, Any], name: str, label: Label, multiple: int, why: str) -> int:
    value = positive_field(entry, name, label)
    if value % multiple:
        raise ProblemError(label(name), f"expected a multiple of {multiple} ({why}), got {value}")
    if value > MAX_DIM:
        raise ProblemError(label(name), f"expected at most {MAX_DIM}, got {value}")
    return value


def _parse_bmk(entry: Mapping[str, Any], label: Label) -> BatchSumSpec:
    m = positive_field(entry, "m", label)
    n = _dim(entry, "n", label, 8, "16-byte rows of d")
    k = _dim(entry, "k", label, 8, "16-byte rows of a and b for TMA")
    if m > MAX_DIM:
        raise ProblemError(label("m"), f"expected at most {MAX_DIM}, got {m}")
    return BatchSumSpec(BMK, m, n, k, entry.get("note", ""))


def _parse_batched(name: str) -> Callable[[Mapping[str, Any], Label], BatchedSpec]:
    out_dim = "d" if name == BHR else "r"

    def parse(entry: Mapping[str, Any], label: Label) -> BatchedSpec:
        h = positive_field(entry, "h", label)
        d = _dim(entry, "d", label, 8, "16-byte rows" + (" of z" if out_dim == "d" else " of y"))
        r = _dim(entry, "r", label, 8, "16-byte rows" + (" of z" if out_dim == "r" else " of x and y"))
        max_b = positive_field(entry, "max_b", label, required=False)
        b = positive_field(entry, "b", label, required=False)
        for field, value in (("h", h), ("max_b", max_b), ("b", b)):
            if value is not None and value > MAX_DIM:
                raise ProblemError(label(field), f"expected at most {MAX_DIM}, got {value}")
        return BatchedSpec(name, h, d, r, max_b, b, entry.get("note", ""))

    return parse


def _pieces_bmk(spec: BatchSumSpec, default_max_m: int) -> list[tuple[Any, int]]:
    return [(spec.m, 1)]


def _kernels_bmk(spec: BatchSumSpec, piece: int, num_sms: int) -> list[jit.KernelSource]:
    return [kernels_module.choose_batch_sum(spec.m, spec.n, spec.k, num_sms).render()]


def _kernels_batched(spec: BatchedSpec, piece: tuple[int, int, int], num_sms: int) -> list[jit.KernelSource]:
    limit, lo, hi = piece
    n, k = spec.n_k
    expr = EXPRS[spec.kind]
    configs = dict.fromkeys(kernels_module.choose_batched(expr, b, spec.h, n, k, num_sms)
                            for b in enumeration.m_values(enumeration.ROWS, None, limit, lo, hi))
    return sources_of(list(configs))


def _inspect_bmk(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
    m, n, k = options["gemm"]
    flags = {"m": "--gemm M", "n": "--gemm N", "k": "--gemm K"}
    spec = _parse_bmk({"m": m, "n": n, "k": k}, lambda f: flags.get(f, f))
    c = kernels_module.choose_batch_sum(spec.m, spec.n, spec.k, num_sms)
    src = c.render()
    return Inspected(src, f"{BMK} M={m} N={n} K={k} (any S) on {num_sms} SMs ({arch}): {src.name}, "
                          f"{src.dynamic_smem} bytes of dynamic shared memory, then the reduction kernel; "
                          f"key {jit.kernel_key(src, arch)[:16]}")


def _inspect_batched(name: str) -> Callable[[Mapping[str, Any], int, str], Inspected]:
    def inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
        b, n, k = options["gemm"]
        h = options.get("groups") or 1
        d, r = (n, k) if name == BHR else (k, n)
        flags = {"h": "--groups", "d": "--gemm N" if name == BHR else "--gemm K",
                 "r": "--gemm K" if name == BHR else "--gemm N", "b": "--gemm M"}
        spec = _parse_batched(name)({"h": h, "d": d, "r": r, "b": b}, lambda f: flags.get(f, f))
        c = kernels_module.choose_batched(EXPRS[name], b, spec.h, n, k, num_sms)
        src = c.render()
        return Inspected(src, f"{name} b={b} h={h} d={d} r={r} (GEMM per head: M=b N={n} K={k}) on {num_sms} SMs "
                              f"({arch}): {src.name}, {src.dynamic_smem} bytes of dynamic shared memory; "
                              f"key {jit.kernel_key(src, arch)[:16]}")

    return inspect


#: The reduction kernels every 'bmk,bnk->mn' call may launch, whatever the shape.
HELPERS = tuple((f"the 'bmk,bnk->mn' reduction ({c.out_dtype}{' + c' if c.with_c else ''})", c.render)
                for c in kernels_module.REDUCE_CONFIGS)


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    """(label, config) pairs: the batch-sum tiles of DeepGEMM's shapes, the per-head forms at decode and prefill
    sizes (one and two math warpgroups, K- and N-major y), and the reduction kernels."""
    sums = kernels_module.choose_batch_sum
    batched = kernels_module.choose_batched
    bhr, bhd = kernels_module.BHR_HDR_BHD, kernels_module.BHD_HDR_BHR
    return [
        ("bmk,bnk->mn 128x384x128", sums(128, 384, 128, num_sms)),
        ("bmk,bnk->mn 256x256x256", sums(256, 256, 256, num_sms)),
        ("bhr,hdr->bhd b4 h128 d128 r512", batched(bhr, 4, 128, 128, 512, num_sms)),
        ("bhr,hdr->bhd b4096 h8 d1024 r4096", batched(bhr, 4096, 8, 1024, 4096, num_sms)),
        ("bhd,hdr->bhr b4 h8 d1024 r4096", batched(bhd, 4, 8, 4096, 1024, num_sms)),
        ("bhd,hdr->bhr b4096 h128 d128 r512", batched(bhd, 4096, 128, 512, 128, num_sms)),
        *((f"bmk,bnk->mn reduction {c.out_dtype}{' +c' if c.with_c else ''}", c)
          for c in kernels_module.REDUCE_CONFIGS),
    ]


def _batched_kind(name: str) -> Kind:
    return Kind(name, "einsum", ("h", "d", "r", "max_b", "b"), _parse_batched(name), heads_pieces,
                _kernels_batched, ("gemm", "groups", "num_sms"), _inspect_batched(name))


FAMILY = Family(
    "einsum",
    (
        Kind(BMK, "einsum", ("m", "n", "k"), _parse_bmk, _pieces_bmk, _kernels_bmk, ("gemm", "num_sms"),
             _inspect_bmk, helpers=HELPERS),
        _batched_kind(BHR),
        _batched_kind(BHD),
    ),
    representatives, torch_ops="dgx.families.einsum_torch", api="dgx.bf16_einsum", deep_gemm="dgx.families.einsum_torch",
)
