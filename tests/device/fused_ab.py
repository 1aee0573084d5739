"""Device A/B: the first GEMM of a DeepSeek-V3 expert (hidden 7168, intermediate 2048: gate-up N 4096, K 7168) with the
fused SwiGLU + FP8 epilogue against dgx's GEMM to BF16 followed by silu(gate) * up and the per-token FP8
quantisation in torch (FP32), on the MoE decode (masked) and prefill (contiguous) shapes.

    python tests/device/fused_ab.py [--precompile] [--json FILE] [--timer kernel|events] [--quick]

Per case it checks the fused output against the unfused one (decoded, normwise), then times, after docs/METHOD.md's
L2 flush, kernel-only (CUPTI, default) or with events around a CUDA-graph replay:
- `fused`: the one fused GEMM (FP8 [M, 2048] + scales out), the heuristic's config;
- `fused_alt`: the same with the best config of the other tile height (64 <-> 128 rows), what the heuristic chose
  before it counted whole SwiGLU units and the masked counts' spread (for 8-32 experts x 64 tokens);
- `gemm_bf16`: dgx's GEMM to BF16 [M, 4096] alone (what the unfused path pays before its activation kernel);
- `unfused_torch`: that GEMM plus torch's silu * up and quantisation (several kernels);
- `bound_unfused`: gemm_bf16 plus a memory-bound activation kernel at 3.0 TB/s (read [M, 4096] BF16, write
  [M, 2048] FP8 and its scales), the best any standalone silu_mul_quant could do.
--precompile builds every kernel the run needs into the kernel cache and exits (no GPU needed). JSON goes to FILE
(default $OUT/fused_ab.json when OUT is set).
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

HIDDEN, INTER = 7168, 2048
N, K = 2 * INTER, HIDDEN
NUM_SMS = 132
COPY_BW = 3.0e12  # bytes/s: the H100's measured copy bandwidth (docs/METHOD.md)
# (experts, expected tokens per expert): masked decode
MASKED = [(e, t) for e in (8, 16, 32) for t in (16, 64, 128, 256)]
# (experts, rows per expert): contiguous prefill
CONTIGUOUS = [(4, 2048), (4, 8192), (8, 2048), (8, 4096)]


def _epilogue():
    from dgx.kernels.fp8_epilogue import Epilogue

    return Epilogue(swiglu=True)


def masked_m_max(tokens: int) -> int:
    return -(-int(tokens * 1.3) // 16) * 16


def fused_configs(layout: str, experts: int, size: int, num_sms: int):
    """(the heuristic's fused config, the best one of the other tile height or None) of a case."""
    from dgx import heuristics

    kind, m = ("m_grouped_masked", size) if layout == "masked" else ("m_grouped_contiguous", experts * size)
    chosen = heuristics.choose_fused(kind, m, N, K, experts, num_sms, _epilogue()).config
    try:
        alt = heuristics.choose_fused(kind, m, N, K, experts, num_sms, _epilogue(),
                                      block_m=64 if chosen.block_m == 128 else 128).config
    except ValueError:
        alt = None
    return chosen, alt


def precompile(num_sms: int) -> int:
    """Every kernel of the run, compiled into the kernel cache (no GPU)."""
    from dgx import families, jit

    configs = set()
    for experts, tokens in MASKED:
        configs.update(c for c in fused_configs("masked", experts, tokens, num_sms) if c is not None)
        configs.add(families.kind("m_grouped_masked").choose(tokens, N, K, experts, num_sms).config)
    for experts, rows in CONTIGUOUS:
        configs.update(c for c in fused_configs("contiguous", experts, rows, num_sms) if c is not None)
        configs.add(families.kind("m_grouped_contiguous").choose(experts * rows, N, K, experts, num_sms).config)
    for c in sorted(configs, key=lambda c: c.kernel_name):
        jit.get_cubin(c.render(), "sm_90a")
        print("built", c.kernel_name, flush=True)
    return len(configs)


def quantise(h):
    """torch's per-token FP8 quantisation of FP32 h [rows, C] (dgx.per_token_cast_to_fp8's math, M-major scales)."""
    import torch

    rows, cols = h.shape
    x = h.view(rows, cols // 128, 128)
    amax = x.abs().amax(dim=2).clamp(min=1e-4)
    q = (x * (448.0 / amax).unsqueeze(2)).to(torch.float8_e4m3fn).view(rows, cols)
    return q, amax / 448.0


def make_case(layout: str, experts: int, size: int, num_sms: int, seed: int = 0):
    import torch

    import dgx
    from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    ws = [per_block_cast_to_fp8(torch.randn(N, K, device="cuda", generator=g) / 16) for _ in range(experts)]
    b = (torch.stack([w for w, _ in ws]), torch.stack([s for _, s in ws]))
    prepared = dgx.prepare_gate_up(*b)
    if layout == "masked":
        m_max = masked_m_max(size)
        counts = (size * (0.7 + 0.6 * torch.rand(experts, generator=torch.Generator().manual_seed(seed)))).int()
        counts = counts.clamp(1, m_max)
        a_q, a_s = per_token_cast_to_fp8(torch.randn(experts * m_max, K, device="cuda", generator=g),
                                         mn_major=False)
        a = (a_q.view(experts, m_max, K),
             dgx.get_mn_major_tma_aligned_tensor(a_s.view(experts, m_max, -1)))
        lead, valid_rows = (experts, m_max), int(counts.sum())
        layout_arg = counts.to(device="cuda", dtype=torch.int32)
    else:
        rows = experts * size
        a = per_token_cast_to_fp8(torch.randn(rows, K, device="cuda", generator=g))
        lead, valid_rows = (rows,), rows
        layout_arg = torch.arange(experts, device="cuda", dtype=torch.int32).repeat_interleave(size)
    rows_total = lead[0] * (lead[1] if len(lead) == 2 else 1)
    aligned = -(-lead[-1] // 4) * 4
    d_fp8 = torch.empty(lead + (INTER,), device="cuda", dtype=torch.float8_e4m3fn)
    groups = lead[0] if len(lead) == 2 else 1
    d_sf = torch.empty(groups, INTER // 128, aligned, device="cuda").transpose(1, 2)[:, : lead[-1]]
    if len(lead) == 1:
        d_sf = d_sf[0]
    d_bf16 = torch.empty(lead + (N,), device="cuda", dtype=torch.bfloat16)

    def gemm(b_arg, d, **kw):
        if layout == "masked":
            dgx.m_grouped_fp8_gemm_nt_masked(a, b_arg, d, layout_arg, size, **kw)
        else:
            dgx.m_grouped_fp8_gemm_nt_contiguous(a, b_arg, d, layout_arg, **kw)

    def fused():
        gemm(prepared, (d_fp8, d_sf), swiglu=True)

    alt = fused_configs(layout, experts, size, num_sms)[1]

    def fused_alt():
        gemm(prepared, (d_fp8, d_sf), swiglu=True, config=alt)

    def gemm_bf16():
        gemm(b, d_bf16)

    def unfused():
        gemm(b, d_bf16)
        h = d_bf16.view(rows_total, N)
        gate, up = h[:, :INTER].float(), h[:, INTER:].float()
        return quantise(torch.nn.functional.silu(gate) * up)

    return dict(fused=fused, fused_alt=fused_alt if alt is not None else None, gemm_bf16=gemm_bf16, unfused=unfused,
                d_fp8=d_fp8, d_sf=d_sf, lead=lead, rows_total=rows_total, valid_rows=valid_rows,
                layout_arg=layout_arg, configs=(fused_configs(layout, experts, size, num_sms)[0], alt))


def check(case, which: str = "fused") -> float:
    """Normwise difference of the decoded fused and unfused outputs on the valid rows (both FP8: ~3% is rounding)."""
    import torch

    case["d_fp8"].view(torch.uint8).fill_(0x7F)  # e4m3 NaN: rows the fused call misses fail the check
    case[which]()
    q, sf = case["unfused"]()
    torch.cuda.synchronize()
    rows = case["rows_total"]
    fused = case["d_fp8"].reshape(rows, INTER).float() * case["d_sf"].reshape(rows, -1).repeat_interleave(128, 1)
    unfused = q.float() * sf.repeat_interleave(128, 1)
    if len(case["lead"]) == 2:  # masked: only each group's first counts rows
        experts, m_max = case["lead"]
        counts = case["layout_arg"].tolist()
        keep = torch.cat([torch.arange(m_max) < c for c in counts]).cuda()
        fused, unfused = fused[keep], unfused[keep]
    diff = float((fused - unfused).norm() / unfused.norm())
    if not diff < 0.08:
        raise AssertionError(f"fused output differs from the unfused one by {diff:.3e} (normwise)")
    return diff


def time_call(fn, timer: str, flush) -> float:
    import torch

    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import time_gpu

    if timer == "kernel":
        return time_kernels(fn, flush).median_us
    fn()  # compile, plan, allocate outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_gpu(graph.replay, flush).median_us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--json", default=os.path.join(os.environ["OUT"], "fused_ab.json") if os.environ.get("OUT") else None)
    ap.add_argument("--timer", choices=("kernel", "events"), default="kernel")
    ap.add_argument("--quick", action="store_true", help="two cases only")
    ap.add_argument("--num-sms", type=int, default=NUM_SMS)
    args = ap.parse_args()
    if args.precompile:
        print(f"{precompile(args.num_sms)} kernels built")
        return
    import torch

    from dgx.bench.timing import L2Flusher

    flush = L2Flusher()
    cases = [("masked", e, t) for e, t in MASKED] + [("contiguous", e, r) for e, r in CONTIGUOUS]
    if args.quick:
        cases = [cases[0], cases[len(MASKED)]]
    rows = []
    for layout, experts, size in cases:
        case = make_case(layout, experts, size, args.num_sms)
        diff = check(case)
        names = ("fused", "gemm_bf16", "unfused")
        if case["fused_alt"] is not None:
            check(case, "fused_alt")
            names += ("fused_alt",)
        t = {name: time_call(case[name], args.timer, flush) for name in names}
        t.setdefault("fused_alt", float("nan"))
        tiles = [f"{c.block_m}x{c.block_n}" if c is not None else "-" for c in case["configs"]]
        inter_bytes = case["rows_total"] * (N * 2 + INTER + INTER // 128 * 4)
        weight_bytes = experts * N * K
        bound = t["gemm_bf16"] + inter_bytes / COPY_BW * 1e6
        row = dict(layout=layout, experts=experts, tokens_or_rows=size, valid_rows=case["valid_rows"],
                   fused_us=t["fused"], gemm_bf16_us=t["gemm_bf16"], unfused_torch_us=t["unfused"],
                   bound_unfused_us=bound, speedup_vs_unfused_torch=t["unfused"] / t["fused"],
                   speedup_vs_bound_unfused=bound / t["fused"], fused_over_gemm_bf16=t["fused"] / t["gemm_bf16"],
                   intermediate_bytes=inter_bytes, weight_bytes=weight_bytes, fused_vs_unfused_diff=diff,
                   timer=args.timer, fused_tile=tiles[0], fused_alt_tile=tiles[1], fused_alt_us=t["fused_alt"],
                   fused_alt_over_fused=t["fused_alt"] / t["fused"])
        rows.append(row)
        print(f"{layout:10s} {experts:3d} x {size:5d}: fused {tiles[0]} {t['fused']:8.1f} us (other tile {tiles[1]} "
              f"{t['fused_alt']:8.1f})  gemm_bf16 {t['gemm_bf16']:8.1f}  "
              f"unfused(torch) {t['unfused']:8.1f}  bound(unfused) {bound:8.1f}  -> x{bound / t['fused']:.3f} vs "
              f"bound, x{t['unfused'] / t['fused']:.2f} vs torch; diff {diff:.2e}", flush=True)
        del case
        torch.cuda.empty_cache()
    gm = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
    summary = dict(
        device=torch.cuda.get_device_name(), timer=args.timer,
        geomean_speedup_vs_bound_unfused=gm([r["speedup_vs_bound_unfused"] for r in rows]),
        geomean_speedup_vs_unfused_torch=gm([r["speedup_vs_unfused_torch"] for r in rows]),
        geomean_fused_over_gemm_bf16=gm([r["fused_over_gemm_bf16"] for r in rows]),
        worst_speedup_vs_bound_unfused=min(r["speedup_vs_bound_unfused"] for r in rows))
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(summary=summary, rows=rows), indent=1))
        print("wrote", args.json)


if __name__ == "__main__":
    main()
