"""SASS identity of every family's representative kernels (CPU only: NVRTC builds sm_90a cubins without a GPU).

Compiles each family's representative kernels (dgx/families: ``Family.representatives``) and prints, per kernel,
the sha256 of its .text section with its instruction count, registers and stack frame. A change that is meant to
change no kernel must leave every line unchanged:

    python tests/device/sass_identity.py --save before.json     # on the old source
    python tests/device/sass_identity.py --compare before.json  # on the new source: exit 1 on any difference
    python tests/device/sass_identity.py --update-manifest      # record this tree in tests/sass_manifest.json

CI compares the tree with tests/sass_manifest.json for the NVRTC it runs (tests/test_sass_manifest.py); a
deliberate change of a kernel is one reviewed update of that file (with the old and new cubins timed on a GPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MANIFEST = ROOT / "tests" / "sass_manifest.json"
FIELDS = ("kernel", "sha256", "registers", "frame_bytes")  # what must stay equal


def representatives() -> list[tuple[str, object]]:
    """("family: label", config) of every family's representative kernels, in registry order."""
    from dgx import families

    return [(f"{family.name}: {label}", config) for family in families.FAMILIES
            for label, config in family.representatives()]


def measure(item) -> tuple[str, dict]:
    label, config = item
    from dgx import jit
    from dgx.sass_tools.elf import Cubin

    src = config.render()
    cubin, _ = jit.build_cubin(src, "sm_90a", jit.SassPassSettings(False))
    elf = Cubin(cubin)
    k = elf.kernel(src.name)
    return label, {
        "kernel": src.name,
        "sha256": hashlib.sha256(elf.text(src.name)).hexdigest(),
        "instructions": k.instruction_count,
        "registers": k.registers,
        "frame_bytes": k.local_bytes,
    }


def measure_all(items, jobs: int) -> dict[str, dict]:
    if jobs <= 1:
        return dict(map(measure, items))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(measure, items))


def nvrtc_label() -> str:
    from dgx import compiler

    return "NVRTC {}.{}".format(*compiler.nvrtc_version())


def differences(table: dict[str, dict], base: dict[str, dict]) -> list[str]:
    """One line per representative whose kernel differs from `base` (or is missing on either side)."""
    lines = []
    for label in sorted(set(table) | set(base)):
        new, old = table.get(label), base.get(label)
        if new is None or old is None:
            lines.append(f"{label}: {'not in this tree' if new is None else 'not in the manifest'}")
        elif any(old[f] != new[f] for f in FIELDS):
            lines.append(f"{label}: {new['kernel']} {new['sha256'][:16]} ({new['instructions']} instr, "
                         f"{new['registers']} regs) was {old['kernel']} {old['sha256'][:16]} ({old['instructions']} "
                         f"instr, {old['registers']} regs)")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="write the table as JSON to this file")
    ap.add_argument("--compare", help="compare with a table saved earlier; exit 1 on any difference")
    ap.add_argument("--update-manifest", action="store_true", help=f"record the table in {MANIFEST.name}")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="only the representatives whose label contains this text")
    args = ap.parse_args()

    items = [c for c in representatives() if args.only in c[0]]
    table = measure_all(items, args.jobs)
    base = json.loads(Path(args.compare).read_text()) if args.compare else {}
    for label, row in table.items():
        print(f"{label:48s} {row['sha256'][:16]} {row['instructions']:6d} instr {row['registers']:3d} regs "
              f"{row['frame_bytes']:3d} B stack  {row['kernel']}")
    if args.save:
        Path(args.save).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    if args.update_manifest:
        manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
        manifest[nvrtc_label()] = {label: {f: row[f] for f in FIELDS + ("instructions",)}
                                   for label, row in sorted(table.items())}
        MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(table)} kernels for {nvrtc_label()} in {MANIFEST}")
    if args.compare:
        lines = differences(table, {k: v for k, v in base.items() if k in table or not args.only})
        print("\n".join(lines) or f"{len(table)} of {len(table)} identical")
        return 1 if lines else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
