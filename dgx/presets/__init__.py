"""Warmup presets: the GEMM shapes of widely used FP8 block-scaled models, one JSON file per model.

Each ``<name>.json`` in this folder is a shapes file in the format ``dgx warmup --shapes FILE`` takes
(a JSON list of ``{"kind", "n", "k", "groups", "max_m", "note"}``), so a preset can be copied and
edited into a custom shapes file. README.md beside this file says where every entry comes from.
The data lives only in those files; this module only finds and reads them.
"""

from __future__ import annotations

import json
from importlib import resources

__all__ = ["names", "load"]

_SUFFIX = ".json"


def names() -> list[str]:
    """The preset names, sorted (``deepseek-v3``, ...)."""
    folder = resources.files(__name__)
    return sorted(p.name[: -len(_SUFFIX)] for p in folder.iterdir() if p.name.endswith(_SUFFIX))


def load(name: str) -> list:
    """The decoded JSON of preset ``name`` (validate it with dgx.warmup.parse_shapes)."""
    available = names()
    if name not in available:
        raise ValueError(f"unknown preset: expected one of {', '.join(available)}, got {name!r}")
    text = resources.files(__name__).joinpath(name + _SUFFIX).read_text(encoding="utf-8")
    return json.loads(text)
