"""Small runs of every fused-epilogue variant for compute-sanitizer (racecheck, memcheck, synccheck), each checked
against float64 as tests/test_gpu_fused_epilogue.py checks it: dense, contiguous (m_indices, prefix sums) and masked
(a group with no rows, one with one row, one partial block), FP8 output with FP32 / UE8M0 / packed scales, SwiGLU
with its clamp, row weights, alpha; and BF16 with alpha.

    compute-sanitizer --tool racecheck python tests/device/fused_sanitize.py [--only LAYOUT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import test_gpu_fused_epilogue as t

    done = 0
    for layout in t.LAYOUTS:
        if args.only and args.only != layout:
            continue
        for fmt in t.FORMATS:
            for name in t.EPILOGUES:
                t.test_fused_output_decodes_to_the_float64_result(layout, fmt, name)
                done += 1
        t.test_bf16_output_with_alpha(layout)
        done += 1
        print(layout, "ok", flush=True)
    print(f"{done} runs checked")


if __name__ == "__main__":
    main()
