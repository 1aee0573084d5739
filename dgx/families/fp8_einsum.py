"""The FP8 einsum family (dgx/fp8_einsum.py): DeepGEMM's fp8_einsum('bhr,hdr->bhd') on the FP8 GEMM kernel's batched
layout. Warm-up kind ``fp8_einsum_bhr_hdr_bhd`` (h heads, d, r, max_b), ``dgx inspect --kind`` with --gemm B D R and
--groups H, its representative kernels, torch operator and DeepGEMM's name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import enumeration, heuristics, jit
from ..kinds import FP8_EINSUM_BHR_HDR_BHD as KIND
from ..problems import ProblemError
from .base import Family, HeadsSpec, Inspected, Kind, Label, heads_pieces, positive_field, sources_of
from .fp8_gemm import HELPERS

MAX_HEADS = 65535  # the scale-layout kernel converts one head per CTA row of its grid (grid z)


def check_dims(h: int, d: int, r: int, label: Label) -> None:
    """What the kernel needs of the dimensions alone (the entry point checks the same of its tensors)."""
    if h > MAX_HEADS:
        raise ProblemError(label("h"), f"expected at most {MAX_HEADS} heads, got {h}")
    if d % 8:
        raise ProblemError(label("d"), f"expected a multiple of 8 (16-byte rows of the BF16 z for TMA), got {d}")
    if r % 16:
        raise ProblemError(label("r"), f"expected a multiple of 16 (16-byte head strides of the FP8 x for TMA), got {r}")
    if h * d >= 2**31:
        raise ProblemError(label("d"), f"expected h x d below 2**31, got {h} x {d}")


def _parse(entry: Mapping[str, Any], label: Label) -> HeadsSpec:
    h = positive_field(entry, "h", label)
    d = positive_field(entry, "d", label)
    r = positive_field(entry, "r", label)
    check_dims(h, d, r, label)
    max_b = positive_field(entry, "max_b", label, required=False)
    b = positive_field(entry, "b", label, required=False)
    for name, value in (("max_b", max_b), ("b", b)):
        if value is not None and value >= 2**31:
            raise ProblemError(label(name), f"expected below 2**31, got {value}")
    return HeadsSpec(KIND, h, d, r, max_b, b, entry.get("note", ""))


def _choose(m: int, n: int, k: int, groups: int | None, num_sms: int) -> heuristics.Choice:
    return heuristics.choose_batched(m, n, k, groups or 1, num_sms)


def _kernels(spec: HeadsSpec, piece: tuple[int, int, int], num_sms: int) -> list[jit.KernelSource]:
    limit, lo, hi = piece
    bs = enumeration.m_values(enumeration.ROWS, None, limit, lo, hi)
    return sources_of(list(dict.fromkeys(_choose(b, spec.d, spec.r, spec.h, num_sms).config for b in bs)))


def _inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
    b, d, r = options["gemm"]
    h = options.get("groups") or 1
    flags = {"h": "--groups", "d": "--gemm N (d)", "r": "--gemm K (r)"}
    check_dims(h, d, r, lambda f: flags.get(f, f))
    choice = _choose(b, d, r, h, num_sms)
    c = choice.config
    src = c.render()
    header = (f"fp8_einsum 'bhr,hdr->bhd' b={b} h={h} d={d} r={r} on {num_sms} SMs ({arch}): block "
              f"{c.block_m}x{c.block_n}, {c.stages} stages, {'deferred promotion, ' if c.defer else ''}"
              f"{src.dynamic_smem} bytes of dynamic shared memory; {choice.num_tiles} tiles in {choice.waves} wave(s); "
              f"key {jit.kernel_key(src, arch)[:16]}")
    return Inspected(src, header)


def representatives(num_sms: int = 132) -> list[tuple[str, Any]]:
    """The heuristic's kernels for DeepSeek's two MLA shapes at a decode and a prefill b (64-row deferred, 128-row
    deferred, and 256-row tiles with the A scales times the B scale in the stage)."""
    choose = heuristics.choose_batched
    return [
        ("h8 d1024 r4096 b32", choose(32, 1024, 4096, 8, num_sms).config),
        ("h8 d1024 r4096 b4096", choose(4096, 1024, 4096, 8, num_sms).config),
        ("h128 d128 r512 b128", choose(128, 128, 512, 128, num_sms).config),
        ("h128 d128 r512 b4096", choose(4096, 128, 512, 128, num_sms).config),
    ]


FAMILY = Family(
    "fp8_einsum",
    (Kind(KIND, "fp8_einsum", ("h", "d", "r", "max_b", "b"), _parse, heads_pieces, _kernels,
          ("gemm", "groups", "num_sms"), _inspect, helpers=HELPERS[:1], choose=_choose, m_space=enumeration.ROWS),),
    representatives, torch_ops="dgx.families.fp8_einsum_torch", api="dgx.fp8_einsum",
    deep_gemm="dgx.families.fp8_einsum_torch",
)
