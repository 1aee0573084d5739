"""SASS identity check for source-only changes to ptx/fp8_gemm*.cuh (CPU only: NVRTC builds sm_90a cubins
without a GPU).

Renders and compiles a fixed set of representative fp8_gemm_nt configs and prints, per kernel, the sha256 of
its .text section with its instruction count, registers and stack frame. A restructuring of the kernel source
that is meant to change nothing must leave every line of this table unchanged:

    python tests/device/sass_identity.py --save before.json     # on the old source
    python tests/device/sass_identity.py --compare before.json  # on the new source: exit 1 on any difference

Not a pytest module (no test_ prefix): a full run compiles 17 kernels, about a minute on two cores.
`--family mqa` does the same for the MQA-logits kernels (prefill and paged, both logits dtypes, the helpers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NUM_SMS = 132


def configs():
    """(label, GemmConfig) pairs covering every k-loop variant and feature flag of the kernel."""
    from dgx.heuristics import choose_dense, choose_grouped, choose_wgrad, pipeline_stages
    from dgx.kernels.fp8_gemm import (
        LAYOUT_CONTIGUOUS,
        LAYOUT_K_GROUPED,
        LAYOUT_MASKED,
        PAIR_M,
        PAIR_N,
        PAIR_NONE,
        GemmConfig,
    )

    s256 = pipeline_stages(256, 128)
    out = [
        ("256x128 N7168 K16384 pair none", GemmConfig(7168, 16384, 256, 128, s256, pair=PAIR_NONE)),
        ("256x128 N7168 K16384 pair N", GemmConfig(7168, 16384, 256, 128, s256, pair=PAIR_N)),
        ("256x128 N7168 K16384 pair M", GemmConfig(7168, 16384, 256, 128, s256, pair=PAIR_M)),
        ("dense N24576 K1536", choose_dense(4096, 24576, 1536, NUM_SMS).config),
        ("256x128 N7168 K2048", GemmConfig(7168, 2048, 256, 128, s256)),
        ("contiguous 128x160 pair M", GemmConfig(7168, 2048, 128, 160, 4, pair=PAIR_M, layout=LAYOUT_CONTIGUOUS)),
        ("contiguous (heuristic)", choose_grouped(LAYOUT_CONTIGUOUS, 32768, 4096, 7168, 8, NUM_SMS).config),
        ("masked 128x128", GemmConfig(4096, 7168, 128, 128, pipeline_stages(128, 128), layout=LAYOUT_MASKED)),
        ("deferred 64x56", GemmConfig(7168, 2048, 64, 56, pipeline_stages(64, 56), defer=True)),
        ("wgrad dense (heuristic)", choose_wgrad(7168, 2112, 4096, NUM_SMS).config),
        ("wgrad dense plain 128x128", GemmConfig(2112, 4096, 128, 128, 4, wgrad=True)),
        ("wgrad K-grouped (heuristic)", choose_wgrad(4096, 7168, 2048, NUM_SMS, LAYOUT_K_GROUPED, 8).config),
        ("wgrad K-grouped plain 128x128", GemmConfig(7168, 0, 128, 128, 4, layout=LAYOUT_K_GROUPED, wgrad=True)),
        ("256x96", GemmConfig(7168, 4096, 256, 96, pipeline_stages(256, 96))),
        ("128x144", GemmConfig(7168, 4096, 128, 144, pipeline_stages(128, 144))),
        ("64x128 B scales in stage", GemmConfig(7168, 4096, 64, 128, pipeline_stages(64, 128))),
        ("64x128 rounds", GemmConfig(7168, 4096, 64, 128, 4)),
    ]
    return out


def mqa_configs():
    """(label, config) pairs of the MQA-logits family: the warmup kernels of (64, 128), (32, 64) and (32, 32)."""
    from dgx.kernels.mqa_logits import warmup_configs

    out = {}
    for heads, dim in ((64, 128), (32, 64), (32, 32)):
        for kind in ("mqa_logits", "paged_mqa_logits"):
            for c in warmup_configs(kind, heads, dim):
                out.setdefault(c.kernel_name, c)
    return list(out.items())


def measure(item):
    label, config = item
    from dgx import jit
    from sass_tools.elf import Cubin

    src = config.render()
    cubin, _ = jit.build_cubin(src, "sm_90a", jit.SassPassSettings(False))
    k = Cubin(cubin).kernel(src.name)
    text = Cubin(cubin).text(src.name)
    return label, {
        "kernel": src.name,
        "sha256": hashlib.sha256(text).hexdigest(),
        "instructions": k.instruction_count,
        "registers": k.registers,
        "frame_bytes": k.local_bytes,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="write the table as JSON to this file")
    ap.add_argument("--compare", help="compare with a table saved earlier; exit 1 on any difference")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="only the configs whose label contains this text")
    ap.add_argument("--family", choices=("fp8_gemm", "mqa"), default="fp8_gemm")
    args = ap.parse_args()

    items = [c for c in (configs() if args.family == "fp8_gemm" else mqa_configs()) if args.only in c[0]]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        table = dict(pool.map(measure, items))
    base = json.load(open(args.compare)) if args.compare else {}
    differ = 0
    for label, row in table.items():
        mark = ""
        if args.compare:
            old = base.get(label)
            same = old is not None and all(old[f] == row[f] for f in ("kernel", "sha256", "registers", "frame_bytes"))
            mark = "same" if same else f"DIFFERS (was {old and old['sha256'][:16]}, {old and old['instructions']} instr)"
            differ += not same
        print(f"{label:30s} {row['sha256'][:16]} {row['instructions']:6d} instr {row['registers']:3d} regs "
              f"{row['frame_bytes']:3d} B stack  {row['kernel']} {mark}")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
    if args.compare:
        print(f"{len(table) - differ} of {len(table)} identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
