"""Device experiment: split-K tiles on the memory-bound dense decode shapes (M <= 128), against the
heuristic's choice, each config checked correct first, then timed in alternating rounds with CUDA events
(cold L2, docs/METHOD.md) and kernel-only (dgx bench's kernel timer: the kernel's own duration from the profiler).

    python split_k_sweep.py [--precompile] [--json FILE] [M,N,K ...]       (from tests/device/)

--precompile builds every candidate's cubin into the kernel cache and exits (no GPU needed; run it with the
NVRTC of the target machine and carry the cache there with DGX_CACHE_DIR). PERF_ROUNDS (environment,
default 2) sets the alternating rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dgx.bench.suites import DENSE_MNK  # noqa: E402
from dgx.heuristics import choose_dense, max_stages, pipeline_stages  # noqa: E402
from dgx.intmath import ceil_div  # noqa: E402
from dgx.kernels.fp8_gemm import GemmConfig, MAX_SPLIT_K  # noqa: E402

NUM_SMS = 132
HBM_GBPS = 3350.0
ROUNDS = int(os.environ.get("PERF_ROUNDS", "2"))
DECODE = [s for s in DENSE_MNK if s[0] <= 128]  # the dense suite's decode shapes (docs/PEERS.md)


def candidates(m: int, n: int, k: int) -> list[tuple[str, GemmConfig]]:
    """The heuristic's config, then per tile (64 or 128 rows; 64, 128 or 192 columns) the split-K configs
    whose clusters give between half of the SMs and all of them work (and the unsplit wide tile where its
    tiles alone fit one wave)."""
    out = [("heuristic", choose_dense(m, n, k, NUM_SMS).config)]
    k_blocks = ceil_div(k, 128)
    for bm in (64,) if m <= 64 else (128, 64):
        for bn in (64, 128, 192) if bm == 64 else (64, 128):
            tiles = ceil_div(m, bm) * ceil_div(n, bn)
            for split in range(1, MAX_SPLIT_K + 1):
                if k_blocks % split or not NUM_SMS // 2 <= tiles * split <= NUM_SMS:
                    continue
                if split == 1 and bn == 64:
                    continue
                stages = min(max_stages(bm, bn, False, split), 8) if split > 1 else pipeline_stages(bm, bn)
                try:
                    cfg = GemmConfig(n, k, bm, bn, stages, split_k=split)
                except ValueError:
                    continue
                out.append((f"{bm}x{bn} split {split}", cfg))
    return out


# Clusters of this many CTAs that fit on the H100 at once (measured: 66 of 2, 30 of 4, 15 of 8).
RESIDENT_CLUSTERS = {1: NUM_SMS, 2: 66, 4: 30, 8: 15}


def narrow_candidates(m: int, n: int, k: int) -> list[tuple[str, GemmConfig]]:
    """The heuristic's config, then one row of M tiles at every width from 16 to 256 columns: unsplit in one or two
    waves, and split 2, 4 or 8 where the clusters all fit at once; with deferred promotion where it is valid, and with
    and without B evict-first."""
    from dgx.kernels.fp8_gemm import validate_blocks

    out = [("heuristic", choose_dense(m, n, k, NUM_SMS).config)]
    k_blocks = ceil_div(k, 128)
    bm = 64 if m <= 64 else 128
    for bn in (16, 24, 32, 48, 64, 96, 128, 160, 192, 256):
        tiles = ceil_div(m, bm) * ceil_div(n, bn)
        for split in (1, 2, 4, 8):
            ctas = tiles * split
            if k_blocks % split or ctas < NUM_SMS // 2:
                continue
            if split == 1 and ctas > 2 * NUM_SMS or split > 1 and (ctas > NUM_SMS or tiles > RESIDENT_CLUSTERS[split]):
                continue
            if validate_blocks(bm, bn) or max_stages(bm, bn, False, split) < 3:
                continue
            stages = min(max_stages(bm, bn, False, split), 16) if split > 1 else pipeline_stages(bm, bn)
            defer = not validate_blocks(bm, bn, defer=True)
            for stream_b in (False, True):
                try:
                    cfg = GemmConfig(n, k, bm, bn, stages, split_k=split, defer=defer, stream_b=stream_b)
                except ValueError:
                    continue
                label = f"{bm}x{bn}{f' split {split}' if split > 1 else ''}"
                out.append((label + (" sb" if stream_b else ""), cfg))
    return out


MASKED = [(16, 64, 4096, 7168), (32, 32, 7168, 2048)]  # groups, rows per group, N, K: the decode MoE sizes


def masked_candidates(groups: int, rows: int, n: int, k: int) -> list[tuple[str, GemmConfig]]:
    from dgx.heuristics import choose_grouped
    from dgx.kernels.fp8_gemm import LAYOUT_MASKED

    out = [("heuristic", choose_grouped(LAYOUT_MASKED, rows, n, k, groups, NUM_SMS).config)]
    for bn in (64, 128, 192):
        for split in (1, 2):
            if ceil_div(k, 128) % split:
                continue
            stages = min(max_stages(64, bn, False, split), 8) if split > 1 else pipeline_stages(64, bn)
            out.append((f"64x{bn} split {split}", GemmConfig(n, k, 64, bn, stages, layout=LAYOUT_MASKED, split_k=split)))
    return out


def precompile(shapes) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from dgx import jit

    configs = {cfg for shape in shapes for _, cfg in candidates(*shape)}
    configs |= {choose_dense(64, 2112, k, NUM_SMS).config for k in (128, 512, 1024, 2048, 4096, 7168)}
    configs |= {cfg for shape in MASKED for _, cfg in masked_candidates(*shape)}
    print(f"building {len(configs)} kernels into {jit.kernel_cache().root}", flush=True)
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(_build, sorted(configs, key=lambda c: c.kernel_name)))


def _build(cfg) -> None:
    from dgx import jit

    jit.get_cubin(cfg.render(), "sm_90a")


def kernel_only_us(fn) -> float:
    """Median of the GEMM kernel's own duration over 30 calls, each after an L2 flush (dgx bench's kernel timer)."""
    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import L2Flusher

    return time_kernels(fn, L2Flusher()).median_us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--narrow", action="store_true", help="every tile width on one row of M tiles (narrow_candidates)")
    ap.add_argument("--calibrate", action="store_true", help="first the heuristic on 64 x 2112 x K, K from 128 up")
    ap.add_argument("--json", default="")
    ap.add_argument("shapes", nargs="*")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] or DECODE
    global candidates
    if args.narrow:
        candidates = narrow_candidates
    if args.precompile:
        precompile(shapes)
        return 0

    import torch

    import dgx
    from gpu_gemm_utils import bench_cold_l2, check_dense, make_dense, round_order

    results = []
    if args.calibrate:
        results += calibrate()
    for m, n, k in shapes:
        a, b, a_fp8, b_fp8, d = make_dense(m, n, k, seed=1)
        a_fp8 = (a_fp8[0], dgx.get_mn_major_tma_aligned_tensor(a_fp8[1]))
        ok = []
        for label, cfg in candidates(m, n, k):
            try:
                d.fill_(float("nan"))
                dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
                torch.cuda.synchronize()
                check_dense(d, a, b, a_fp8, b_fp8)
                ok.append((label, cfg))
            except Exception as exc:  # report and go on with the others
                print(f"{m}x{n}x{k} {label}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        events = {i: [] for i in range(len(ok))}
        kernel = {i: [] for i in range(len(ok))}
        for r in range(ROUNDS):
            for i in round_order(len(ok), r):
                cfg = ok[i][1]
                call = lambda cfg=cfg: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)  # noqa: E731
                events[i].append(bench_cold_l2(call))
                kernel[i].append(kernel_only_us(call))
        nbytes = m * k + n * k + 2 * m * n + 4 * (m * ceil_div(k, 128) + ceil_div(n, 128) * ceil_div(k, 128))
        for i, (label, cfg) in enumerate(ok):
            ev, ko = statistics.median(events[i]), statistics.median(kernel[i])
            row = {"shape": [m, n, k], "label": label, "config": cfg.kernel_name, "events_us": ev, "kernel_us": ko,
                   "kernel_gbps": nbytes / ko / 1e3, "events_rounds": events[i], "kernel_rounds": kernel[i]}
            results.append(row)
            print(f"{m}x{n}x{k} {label:18s} {cfg.block_m}x{cfg.block_n}s{cfg.stages}k{cfg.split_k}: events {ev:6.1f} us"
                  f"  kernel {ko:6.1f} us {row['kernel_gbps']:6.0f} GB/s ({row['kernel_gbps'] / HBM_GBPS:4.0%})"
                  f"  rounds {[round(x, 1) for x in kernel[i]]}", flush=True)
        del a, b, a_fp8, b_fp8, d
    if not args.shapes and not args.narrow:
        results += sweep_masked()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def calibrate() -> list[dict]:
    """The heuristic's kernel on 64 x 2112 x K, K from 128 to 7168, kernel-only: the intercept of time against K is
    what a decode GEMM costs besides its stream (launch, prologue, first loads, epilogue, the flush's write-backs)."""
    import dgx
    from gpu_gemm_utils import check_dense, make_dense

    out = []
    for k in (128, 512, 1024, 2048, 4096, 7168):
        a, b, a_fp8, b_fp8, d = make_dense(64, 2112, k, seed=1)
        a_fp8 = (a_fp8[0], dgx.get_mn_major_tma_aligned_tensor(a_fp8[1]))
        cfg = choose_dense(64, 2112, k, NUM_SMS).config
        dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
        check_dense(d, a, b, a_fp8, b_fp8)
        us = statistics.median(kernel_only_us(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)) for _ in range(3))
        out.append({"calibrate": [64, 2112, k], "config": cfg.kernel_name, "kernel_us": us})
        print(f"calibrate 64x2112x{k}: {cfg.block_m}x{cfg.block_n}: kernel {us:6.2f} us", flush=True)
    return out


def sweep_masked() -> list[dict]:
    import torch

    import dgx
    from gpu_gemm_utils import bench_cold_l2, round_order
    from test_gpu_grouped import _check_masked, _masked_inputs

    results = []
    for groups, rows, n, k in MASKED:
        torch.manual_seed(0)
        a, b, d = _masked_inputs(groups, rows, n, k)
        masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
        ok = []
        for label, cfg in masked_candidates(groups, rows, n, k):
            try:
                d.fill_(float("nan"))
                dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, rows, config=cfg)
                torch.cuda.synchronize()
                _check_masked(a, b, d, [rows] * groups, rows)
                ok.append((label, cfg))
            except Exception as exc:
                print(f"masked {groups}x{rows}x{n}x{k} {label}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
        events = {i: [] for i in range(len(ok))}
        kernel = {i: [] for i in range(len(ok))}
        for r in range(ROUNDS):
            for i in round_order(len(ok), r):
                cfg = ok[i][1]
                call = lambda cfg=cfg: dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, rows, config=cfg)  # noqa
                events[i].append(bench_cold_l2(call))
                kernel[i].append(kernel_only_us(call))
        nbytes = groups * (rows * k + n * k + 2 * rows * n)
        for i, (label, cfg) in enumerate(ok):
            ev, ko = statistics.median(events[i]), statistics.median(kernel[i])
            row = {"masked": [groups, rows, n, k], "label": label, "config": cfg.kernel_name, "events_us": ev,
                   "kernel_us": ko, "kernel_gbps": nbytes / ko / 1e3}
            results.append(row)
            print(f"masked {groups}x{rows}x{n}x{k} {label:14s} {cfg.block_m}x{cfg.block_n}s{cfg.stages}k{cfg.split_k}: "
                  f"events {ev:6.1f} us  kernel {ko:6.1f} us {row['kernel_gbps']:6.0f} GB/s "
                  f"({row['kernel_gbps'] / HBM_GBPS:4.0%})", flush=True)
        del a, b, d
    return results


if __name__ == "__main__":
    sys.exit(main())
