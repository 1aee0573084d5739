"""The SASS of every family's representative kernels equals the reviewed manifest for this NVRTC (CPU only).

A change meant to change no kernel (a refactor of device code, of rendering, of the JIT) must leave every
representative byte-identical; a deliberate change is one update of tests/sass_manifest.json
(``python tests/device/sass_identity.py --update-manifest``), with the old and new kernels timed on a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sass_identity", ROOT / "tests" / "device" / "sass_identity.py")
identity = importlib.util.module_from_spec(_spec)
sys.modules["sass_identity"] = identity  # the worker processes find its measure() by this name
_spec.loader.exec_module(identity)


def test_every_representative_matches_the_manifest():
    pytest.importorskip("cuda.bindings.nvrtc")
    manifest = json.loads(identity.MANIFEST.read_text())
    recorded = manifest.get(identity.nvrtc_label())
    if recorded is None:
        pytest.skip(f"the manifest records {', '.join(sorted(manifest))}, not {identity.nvrtc_label()}: record it with "
                    "tests/device/sass_identity.py --update-manifest on a tree whose kernels were timed")
    table = identity.measure_all(identity.representatives(), jobs=min(2, os.cpu_count() or 1))
    lines = identity.differences(table, recorded)
    assert not lines, "kernels differ from tests/sass_manifest.json:\n" + "\n".join(lines)


def test_differences_name_what_changed():
    row = {"kernel": "k", "sha256": "a" * 64, "registers": 168, "frame_bytes": 0, "instructions": 10}
    assert identity.differences({"x": row}, {"x": dict(row)}) == []
    changed = identity.differences({"x": dict(row, sha256="b" * 64)}, {"x": row})
    assert len(changed) == 1 and changed[0].startswith("x: k bbbbbbbbbbbbbbbb") and "was k aaaaaaaaaaaaaaaa" in changed[0]
    assert identity.differences({}, {"x": row}) == ["x: not in this tree"]
    assert identity.differences({"x": row}, {}) == ["x: not in the manifest"]
