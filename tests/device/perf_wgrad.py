"""Device experiment: time dense weight-gradient configs (FP32 D += A . B^T, both operands scaled per 1 x 128)
against each other, and against DeepGEMM's kernel where the `deep_gemm` package is importable, in one process,
in alternating rounds. Every run is checked against the float64 product and for a bitwise repeat first.

    python perf_wgrad.py RUN[,RUN...] [M,N,K ...]      (from tests/device/)

RUN is `heur` (dgx's choice), `deepgemm` (DeepGEMM's wgrad_gemm_fp8_fp8_fp32_nt) or BMxBN[sS][pP][gG][d][kK]
(S stages, default as many as fit; P 2: B shared along M by 2-CTA clusters; G: units per raster band along N;
d: deferred promotion; K: split-K clusters of K CTAs), each optionally followed by @VARIANT: compiled with the
header overlay VARIANT of tests/gpu_gemm_utils.variant_headers (../.dev/hdr_VARIANT/*.cuh over this tree's
headers). Shapes default to DeepGEMM's 7168,2112,4096 and 16384,7168,8192. PERF_ROUNDS (environment, default 3)
sets the number of alternating rounds; PERF_NO_CHECK=1 times runs that fail the checks too (diagnostic variants).
D accumulates in place (C = D), as DeepGEMM's call does; the scales are in the TMA-aligned M-major layout both
kernels read as they are.
"""

import os
import re
import statistics
import sys
from pathlib import Path

import torch

import dgx
from dgx.heuristics import choose_wgrad, max_stages
from dgx.kernels.fp8_gemm import GemmConfig
from dgx.torch_utils import dequantize, per_token_cast_to_fp8

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import bench_cold_l2, parse_run, round_order, use_headers, variant_headers

ROUNDS = int(os.environ.get("PERF_ROUNDS", "3"))
NO_CHECK = os.environ.get("PERF_NO_CHECK", "") == "1"  # diagnostic variants that compute wrong results on purpose
MAX_REL = 5e-4


def label_config(text: str, m: int, n: int, k: int):
    """(label, GemmConfig or the string 'deepgemm')."""
    if text == "deepgemm":
        return text, text
    if text == "heur":
        c = choose_wgrad(m, n, k, dgx.get_num_sms()).config
        return f"heur={c.block_m}x{c.block_n}s{c.stages}p{c.pair}{'d' if c.defer else ''}", c
    split = re.search(r"k(\d+)$", text)
    _, (bm, bn, stages, pair, group_n), flags = parse_run(text[: split.start()] if split else text, "d")
    stages = stages or max_stages(bm, bn, wgrad=True)
    return text, GemmConfig(n, k, bm, bn, stages, group_n=group_n, pair=pair, wgrad=True, defer="d" in flags,
                            split_k=int(split.group(1)) if split else 1)


def caller(config, a, b, d, variant: str = "current"):
    if config == "deepgemm":
        import deep_gemm

        return lambda: deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt(a, b, d)
    headers = variant_headers(variant)

    def call():
        if _active[0] != variant:  # switching clears dgx's plans; the kernels stay loaded per header set
            use_headers(headers)
            _active[0] = variant
        return dgx.fp8_gemm_nt(a, b, d, c=d, config=config)

    return call


_active = ["current"]


def main() -> int:
    texts = sys.argv[1].split(",")
    shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[2:]] or [(7168, 2112, 4096), (16384, 7168, 8192)]
    for m, n, k in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g))
        b = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g))
        a = (a[0], dgx.get_mn_major_tma_aligned_tensor(a[1]))
        b = (b[0], dgx.get_mn_major_tma_aligned_tensor(b[1]))
        ref = dequantize(*a, 1).double() @ dequantize(*b, 1).double().T
        c = torch.randn(m, n, device="cuda")
        runs = []
        for spec in texts:
            text, _, variant = spec.partition("@")
            variant = variant or "current"
            label, config = label_config(text, m, n, k)
            label += "" if variant == "current" else f"@{variant}"
            d = c.clone()
            caller(config, a, b, d, variant)()
            torch.cuda.synchronize()
            rel = float((d.double() - ref - c.double()).norm() / (ref + c.double()).norm())
            if not rel <= MAX_REL and not NO_CHECK:
                print(f"{m}x{n}x{k} {label}: WRONG (rel {rel:.2e}), not timed", flush=True)
                continue
            again = c.clone()
            caller(config, a, b, again, variant)()
            torch.cuda.synchronize()
            if not torch.equal(again, d) and not NO_CHECK:
                print(f"{m}x{n}x{k} {label}: NOT BITWISE REPEATABLE, not timed", flush=True)
                continue
            runs.append((label, caller(config, a, b, d, variant)))
        times = {label: [] for label, _ in runs}
        for r in range(ROUNDS):
            for i in round_order(len(runs), r):
                label, fn = runs[i]
                times[label].append(bench_cold_l2(fn))
        flops = 2 * m * n * k
        for label, ts in times.items():
            t = statistics.median(ts)
            print(f"{m}x{n}x{k} {label:28s} {t:8.1f} us {flops / t / 1e6:7.0f} TFLOPS  rounds "
                  + " ".join(f"{x:.1f}" for x in ts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
