"""The MQA-logits family (ptx/mqa_logits.cuh, dgx/kernels/mqa_logits.py): the DeepSeek-V3.2 indexer's prefill and
paged-decode kinds. Their kernels depend on the heads and head dim alone, so warm-up builds all of an entry's
kernels in one piece."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import jit
from ..kernels import mqa_logits as kernels_module
from ..kinds import MqaKind
from ..problems import ProblemError
from .base import Family, Inspected, Kind, Label, MqaSpec, positive_field, sources_of

MQA_FIELDS = ("heads", "head_dim")


def _parse(kind: str) -> Callable[[Mapping[str, Any], Label], MqaSpec]:
    def parse(entry: Mapping[str, Any], label: Label) -> MqaSpec:
        heads = positive_field(entry, "heads", label)
        head_dim = positive_field(entry, "head_dim", label)
        try:
            kernels_module.check_shape(heads, head_dim, label=label)
        except ValueError as exc:  # the message names the field already
            field, _, reason = str(exc).partition(": ")
            raise ProblemError(field, reason) from None
        return MqaSpec(kind, heads, head_dim, entry.get("note", ""))

    return parse


def _pieces(spec: MqaSpec, default_max_m: int) -> list[tuple[Any, int]]:
    return [(None, 1)]


def _kernels(spec: MqaSpec, piece: Any, num_sms: int) -> list[jit.KernelSource]:
    configs = kernels_module.warmup_configs(spec.kind, spec.heads, spec.head_dim)
    if spec.kind == MqaKind.PAGED.value:  # next_n 3 and 4, and the calls with indices=
        configs += kernels_module.extended_paged_configs(spec.heads, spec.head_dim)
    return sources_of(configs)


def _inspect(kind: str) -> Callable[[Mapping[str, Any], int, str], Inspected]:
    paged = kind == MqaKind.PAGED.value

    def inspect(options: Mapping[str, Any], num_sms: int, arch: str) -> Inspected:
        heads, head_dim, next_n = options["heads"], options["head_dim"], options.get("next_n", 1)
        flags = {"heads": "--heads", "head_dim": "--head-dim", "next_n": "--next-n"}
        kernels_module.check_shape(heads, head_dim, next_n, label=flags.get)
        c = (kernels_module.paged_config(heads, head_dim, next_n, False) if paged
             else kernels_module.prefill_config(heads, head_dim, False, False))
        src = c.render()
        header = (
            f"{kind} H={heads} D={head_dim}" + (f" next_n={next_n}" if paged else "")
            + f" ({arch}): {c.block_q} query tokens x {heads} heads per wgmma (N={c.n}"
            + (f", in two passes of N={c.pass_n}" if c.pass_queries else "") + f"), {c.math_wgs} math "
            f"warpgroups, {c.kv_stages} KV stages, {src.dynamic_smem} bytes of dynamic shared memory; "
            f"key {jit.kernel_key(src, arch)[:16]}"
        )
        return Inspected(src, header)

    return inspect


def _kind(kind: MqaKind) -> Kind:
    paged = kind == MqaKind.PAGED
    return Kind(
        name=kind.value,
        family="mqa_logits",
        fields=MQA_FIELDS,
        parse=_parse(kind.value),
        pieces=_pieces,
        kernels=_kernels,
        inspect_options=("heads", "head_dim", "next_n") if paged else ("heads", "head_dim"),
        inspect=_inspect(kind.value),
    )


def representatives() -> list[tuple[str, Any]]:
    """(label, config) pairs: the prefill and paged kernels (both logits dtypes, compressed prefill, next_n 2),
    the clean kernel and the decode schedule kernel."""
    k = kernels_module
    return [
        ("prefill H64 D128", k.prefill_config(64, 128, False, False)),
        ("prefill H32 D64 compressed bf16", k.prefill_config(32, 64, True, True)),
        ("paged H64 D128 next_n 1", k.paged_config(64, 128, 1, False)),
        ("paged H64 D128 next_n 2 bf16", k.paged_config(64, 128, 2, True)),
        ("clean paged", k.MqaCleanConfig(True, False, False, 1)),
        ("paged schedule", k.PagedScheduleConfig()),
        ("prefill H16 D128", k.prefill_config(16, 128, False, False)),
        ("paged H64 D128 next_n 4", k.paged_config(64, 128, 4, False)),
        ("paged H16 D128 next_n 3", k.paged_config(16, 128, 3, False)),
        ("paged varlen H64 D128", k.varlen_config(64, 128, False)),
    ]


FAMILY = Family("mqa_logits", tuple(_kind(k) for k in MqaKind), representatives,
                torch_ops="dgx.families.mqa_logits_torch", deep_gemm="dgx.families.mqa_logits_torch")
