"""Device A/B of the follow-ups to issue 39's first device run: each changed kernel checked, then timed kernel-only
(dgx bench's kernel timer after docs/METHOD.md's flush, medians of its calls) against the kernel it replaces in
alternating rounds, in one process on one card.

- hc: tf32_hc_prenorm_gemm on DeepGEMM's 24 cases (M 13 .. 8192, N 24, K 7168 .. 28672, no splits or 16). New: this
  tree's kernel (b rounded to TF32, one stage's MMAs in flight) with this tree's heuristic. Old: the first run's
  kernel (tests/device/baselines/hc_prenorm_bf89928.cuh) with the config that run's heuristic chose. Checks: DeepGEMM's
  test (calc_diff < 1e-8 against torch's TF32 product and squared sum) and float64 (relative 2e-3) for the new
  kernel; the old kernel's calc_diff is reported (truncation: ~1.2e-7). Also per case: the read floor of its bytes
  (dgx.bench.read_floor: a kernel that only reads them), the HBM share, and the torch peer's events time (goal 3x at
  M <= 137). ``--sweep`` also times every candidate config of the new kernel per case (one round), to refit the
  heuristic's constants (dgx/kernels/hc_prenorm.py).
- mqa: the paged kernel at 64 heads, next_n 3 and 4 (two passes on three warpgroups against the whole tile on two)
  and with indices= (groups of four tokens against two at 64 heads, of eight against four at 16: both with this
  tree's header, whose runs of several groups share each chunk of blocks through L2; the first run's shares were
  0.54 and 0.65), beside the 64-head next_n 1 anchor of the same batch: GB/s and the share relative to the anchor
  (goal: the anchor's share). Every kernel's rows checked against float64 first.

Writes $OUT/v32fix.json (or --json PATH) and prints one line per measurement.

    python tests/device/v32fix_ab.py --precompile [--sweep]     # CPU only: builds every kernel into DGX_CACHE_DIR
    python tests/device/v32fix_ab.py [--only hc,mqa] [--sweep] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE))

from dgx import jit, ptx  # noqa: E402
from dgx.kernels import hc_prenorm as H  # noqa: E402
from dgx.kernels import mqa_logits as M  # noqa: E402

NUM_SMS = 132
BASELINE_HEADER = "hc_prenorm_bf89928.cuh"
HC_CASES = [(m, 24, k, s) for m in (13, 137, 4096, 8192) for k in (28672, 7680, 7168) for s in (None, 16)]
# The first device run's kernels (H200): (block_m, cluster, stages) by (M, K, splits), and their kernel-only µs.
OLD_HC = {
    (13, 28672, None): (64, 8, 7), (13, 28672, 16): (64, 4, 7), (13, 7680, None): (64, 8, 7),
    (13, 7680, 16): (64, 2, 7), (13, 7168, None): (64, 8, 7), (13, 7168, 16): (64, 2, 7),
    (137, 28672, None): (64, 8, 7), (137, 28672, 16): (128, 4, 9), (137, 7680, None): (64, 8, 7),
    (137, 7680, 16): (64, 2, 7), (137, 7168, None): (64, 8, 7), (137, 7168, 16): (64, 2, 7),
    (4096, 28672, None): (128, 4, 9), (4096, 28672, 16): (128, 1, 10), (4096, 7680, None): (64, 2, 7),
    (4096, 7680, 16): (128, 1, 10), (4096, 7168, None): (64, 2, 7), (4096, 7168, 16): (128, 1, 10),
    (8192, 28672, None): (128, 2, 9), (8192, 28672, 16): (128, 1, 10), (8192, 7680, None): (128, 2, 9),
    (8192, 7680, 16): (128, 1, 10), (8192, 7168, None): (128, 2, 9), (8192, 7168, 16): (128, 1, 10),
}


def old_paged(heads: int, next_n: int) -> M.MqaLogitsConfig:
    """The first run's paged kernel for a tile wider than 128: the whole tile on two math warpgroups."""
    return M.MqaLogitsConfig(heads, 128, next_n, 16, True, math_wgs=2, stream_kv=True)


# (heads, next_n, batch, average context, tokens per sequence for indices= or None, the old config or None when the
# kernel did not change). The anchors (64 heads, next_n 1) come first for their batch.
PAGED_CASES = [
    (64, 1, 64, 8192, None, None),
    (64, 3, 64, 8192, None, old_paged(64, 3)),
    (64, 4, 64, 8192, None, old_paged(64, 4)),
    (64, 1, 256, 8192, None, None),
    (64, 4, 256, 8192, None, old_paged(64, 4)),
    (64, 1, 256, 8192, 6, M.MqaLogitsConfig(64, 128, 2, 15, True, stream_kv=True, varlen=True)),
    (16, 1, 256, 8192, 6, M.MqaLogitsConfig(16, 128, 4, 15, True, stream_kv=True, varlen=True)),
]


@dataclass(frozen=True)
class BaselineHc:
    """The first run's HC kernel for `config`: the baseline header's source, as that tree rendered it (threads: the
    math warpgroups and the producer warp; two barriers a stage)."""

    config: H.HcPrenormConfig

    @property
    def kernel_name(self) -> str:
        return self.config.kernel_name + "_bf89928"

    @property
    def threads(self) -> int:
        return 128 * (self.config.block_m // 64) + 32

    @property
    def smem_bytes(self) -> int:
        c = self.config
        return H.smem_bytes(c.n, c.block_m, c.cluster, c.stages) - c.stages * 8

    def render(self) -> jit.KernelSource:
        c = self.config
        traits = f"dgx::HcPrenormTraits<{c.n}, {c.k}, {c.block_m}, {c.splits}, {c.cluster}, {c.stages}>"
        source = (f'#include "{BASELINE_HEADER}"\n' + H.render_wgmma_tf32_rs(c.n_pad)
                  + H.INTERFACE.render_entry(self.kernel_name, self.threads, f"dgx::hc_prenorm_body<{traits}>")
                  + f'static_assert({traits}::kSmemBytes == {self.smem_bytes}, "baseline smem");\n')
        return jit.KernelSource(name=self.kernel_name, source=source, dynamic_smem=self.smem_bytes,
                                summary=(("family", "hc_prenorm_baseline"), ("config", c.kernel_name)))


def use_baseline_header() -> None:
    """The kernel compiler finds the baseline header beside dgx's own (a name no dgx kernel includes)."""
    headers = dict(ptx.headers())
    headers[BASELINE_HEADER] = (HERE / "baselines" / BASELINE_HEADER).read_bytes()
    ptx.headers = lambda: headers


def old_hc_config(m: int, k: int, splits) -> H.HcPrenormConfig:
    block_m, cluster, stages = OLD_HC[(m, k, splits)]
    return H.HcPrenormConfig(24, k, block_m, splits or 1, cluster, stages)


def new_hc_configs(m: int, n: int, k: int, splits: int) -> list[H.HcPrenormConfig]:
    """The heuristic's config, and where it takes a cluster of 16, the portable one a device without room for it
    runs."""
    first = H.choose_config(m, n, k, splits, NUM_SMS)
    out = [first]
    if first.cluster > H.PORTABLE_CLUSTER:
        out.append(H.choose_config(m, n, k, splits, NUM_SMS, H.PORTABLE_CLUSTER))
    return out


def mqa_configs() -> set:
    out = {M.PagedScheduleConfig(), M.PagedScheduleConfig(True)}
    for heads, next_n, _, _, tokens, old in PAGED_CASES:
        out.add(M.varlen_config(heads, 128, False) if tokens else M.paged_config(heads, 128, next_n, False))
        if old is not None:
            out.add(old)
    return out


def precompile(only: set[str], sweep: bool) -> None:
    import multiprocessing

    from dgx.bench.read_floor import CONFIG as READ_FLOOR
    from parallel_build import build_all

    use_baseline_header()
    configs: set = {READ_FLOOR}
    baselines: set = set()
    if "hc" in only:
        for m, n, k, s in HC_CASES:
            configs.update(new_hc_configs(m, n, k, s or 1))
            baselines.add(BaselineHc(old_hc_config(m, k, s)))
            if sweep:
                configs.update(H.candidates(m, n, k, s or 1))
    if "mqa" in only:
        configs |= mqa_configs()
    # Forked workers see the baseline header; other start methods would not, so those build it here.
    forked = multiprocessing.get_start_method() == "fork"
    todo = sorted(configs | (baselines if forked else set()), key=lambda c: c.kernel_name)
    print(f"built {build_all(todo)}", flush=True)
    if not forked:
        print(f"built {build_all(sorted(baselines, key=lambda c: c.kernel_name), jobs=1)}", flush=True)


# --- on the device ---------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, rounds: int):
        import torch

        from dgx.bench.hbm import hbm_peak_gbps
        from dgx.bench.kernel_timer import time_kernels
        from dgx.bench.read_floor import ReadFloor
        from dgx.bench.timing import L2Flusher

        self.torch, self.rounds = torch, rounds
        self.flush = L2Flusher()
        self.device = torch.cuda.get_device_name()
        self.peak_gbps = hbm_peak_gbps(self.device)
        self.floor = ReadFloor(time_kernels, self.flush, 5, 30)

    def kernel_us(self, fn, iters: int = 30) -> float:
        from dgx.bench.kernel_timer import time_kernels

        return time_kernels(fn, self.flush, iters=iters).median_us

    def events_us(self, fn) -> float:
        from dgx.bench.timing import time_gpu

        return time_gpu(fn, self.flush).median_us

    def ab(self, fns: dict) -> dict:
        """Kernel-only µs of each function in alternating rounds: {name: [µs per round]}."""
        from gpu_gemm_utils import kernel_rounds

        rounds = kernel_rounds(fns, {"dirty": self.flush}, self.rounds)
        return {name: rounds[(name, "dirty")] for name in fns}

    def share(self, nbytes: int, us: float) -> float:
        return nbytes / us / 1e3 / self.peak_gbps if self.peak_gbps else float("nan")


def _baseline_launch(config: H.HcPrenormConfig, a, w, d, s, splits):
    """A call of the baseline kernel on the same tensors (the same parameter struct as this tree's)."""
    import torch

    from dgx import runtime

    base = BaselineHc(config)
    kernel = jit.get_kernel(base.render(), torch.cuda.current_device())
    shape = runtime.LaunchShape((config.grid(a.shape[0]), 1, 1), (base.threads, 1, 1), (config.cluster, 1, 1),
                                base.smem_bytes)
    launcher = runtime.Launcher(kernel, shape)
    m = a.shape[0]
    tmap_a, tmap_b = H.tensor_maps(config, a.data_ptr(), a.stride(0), w.data_ptr(), w.stride(0), m)
    params = H.INTERFACE.pack(tmap_a=tmap_a, tmap_b=tmap_b, d=d.data_ptr(), s=s.data_ptr(), d_row_stride=d.stride(-2),
                              d_split_stride=d.stride(0) if splits else 0, s_split_stride=s.stride(0) if splits else 0,
                              m=m)
    return lambda: launcher.launch(torch.cuda.current_stream().cuda_stream, params)


def run_hc(b: Bench, sweep: bool) -> list[dict]:
    torch = b.torch
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm
    from dgx.torch_utils import calc_diff

    use_baseline_header()
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    for m, n, k, splits in HC_CASES:
        g = torch.Generator(device="cuda").manual_seed(m + k)
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=g)
        lead = () if splits is None else (splits,)
        outs = {name: (torch.full(lead + (m, n), float("nan"), device="cuda"),
                       torch.full(lead + (m,), float("nan"), device="cuda")) for name in ("new", "old")}
        old_config = old_hc_config(m, k, splits)
        calls = {"new": lambda: tf32_hc_prenorm_gemm(a, w, *outs["new"], num_splits=splits),
                 "old": _baseline_launch(old_config, a, w, *outs["old"], splits)}
        ref_d, ref_s = a.float() @ w.T, a.float().square().sum(-1)
        exact = a.double() @ w.double().T
        checks = {}
        for name, call in calls.items():
            call()
            torch.cuda.synchronize()
            d, s = outs[name]
            fd, fs = (d, s) if splits is None else (d.sum(0), s.sum(0))
            checks[name] = {"calc_diff_vs_torch_tf32": max(calc_diff(fd, ref_d), calc_diff(fs, ref_s)),
                            "rel_err_vs_float64": float((fd.double() - exact).norm() / exact.norm()),
                            "written": not bool(torch.isnan(d).any() or torch.isnan(s).any())}
        new = checks["new"]
        ok = new["written"] and new["calc_diff_vs_torch_tf32"] < 1e-8 and new["rel_err_vs_float64"] < 2e-3
        del exact
        times = b.ab(calls)
        t_new, t_old = statistics.median(times["new"]), statistics.median(times["old"])
        nbytes = m * k * 2 + n * k * 4 + (splits or 1) * (m * n + m) * 4
        floor = b.floor.us(nbytes)
        peer = b.events_us(lambda: (a.float() @ w.T, a.float().square().sum(-1)))
        mine_events = b.events_us(calls["new"])
        config = H.choose_config(m, n, k, splits or 1, NUM_SMS)
        row = {"m": m, "n": n, "k": k, "splits": splits, "config": config.kernel_name,
               "old_config": old_config.kernel_name, "check": ok, "checks": checks, "rounds_us": times,
               "new_us": t_new, "old_us": t_old, "old_over_new": t_old / t_new, "read_floor_us": floor,
               "of_read_floor": floor / t_new, "share_of_peak": b.share(nbytes, t_new),
               "old_share_of_peak": b.share(nbytes, t_old), "events_us": mine_events, "torch_events_us": peer,
               "speedup_events": peer / mine_events}
        if m >= 4096:
            row["goal"], row["goal_met"] = "kernel-only >= 80% of HBM", row["share_of_peak"] >= 0.8
        else:
            row["goal"], row["goal_met"] = ">= 3x torch (events)", row["speedup_events"] >= 3.0
        if sweep:  # every candidate that this device can place (a cluster of 16 needs a GPC with 16 free SMs)
            row["sweep_us"] = {c.kernel_name: b.kernel_us(
                lambda c=c: tf32_hc_prenorm_gemm(a, w, *outs["new"], num_splits=splits, config=c), iters=10)
                for c in H.candidates(m, n, k, splits or 1) if H.cluster_fits(c, torch.cuda.current_device())}
            best = min(row["sweep_us"], key=row["sweep_us"].get)
            row["sweep_best"] = [best, row["sweep_us"][best]]
        rows.append(row)
        print(f"hc m={m:5} k={k:5} splits={splits or 0:2}: {'ok ' if ok else 'BAD'} new {t_new:7.1f} us "
              f"({100 * row['share_of_peak']:3.0f}% of peak, {100 * row['of_read_floor']:3.0f}% of the read floor "
              f"{floor:.1f}), old {t_old:7.1f} ({row['old_over_new']:.2f}x), calc_diff new "
              f"{new['calc_diff_vs_torch_tf32']:.1e} old {checks['old']['calc_diff_vs_torch_tf32']:.1e}, events "
              f"{mine_events:.1f} vs torch {peer:.1f} ({row['speedup_events']:.1f}x)  {config.kernel_name}"
              + (f"  sweep best {row['sweep_best'][0]} {row['sweep_best'][1]:.1f}" if sweep else ""), flush=True)
        del a, w, outs, ref_d, ref_s
    return rows


def _paged_inputs(heads, next_n, batch, avg, tokens):
    from mqa_utils import make_paged, make_varlen

    rng = random.Random(heads * 7 + next_n + batch)
    if tokens:
        per_seq = [rng.randint(1, tokens) for _ in range(batch)]
        base = [rng.randint(int(0.7 * avg), int(1.3 * avg)) for _ in range(batch)]
        q, cache, w, ctx, table, indices, values, scales = make_varlen(per_seq, base, heads, 128, seed=batch)
        seq_lens = [bb + t - 1 for bb, t in zip(base, per_seq)]
    else:
        seq_lens = [rng.randint(int(0.7 * avg), int(1.3 * avg)) for _ in range(batch)]
        q, cache, w, ctx, table, values, scales = make_paged(batch, next_n, seq_lens, heads, 128, seed=batch)
        indices = None
    return rng, q, cache, w, ctx, table, indices, values, scales, seq_lens


def run_mqa(b: Bench) -> list[dict]:
    torch = b.torch
    import dgx.mqa as mqa
    from mqa_utils import compare, ref_paged

    rows, anchor = [], {}
    for heads, next_n, batch, avg, tokens, old in PAGED_CASES:
        rng, q, cache, w, ctx, table, indices, values, scales, seq_lens = _paged_inputs(heads, next_n, batch, avg,
                                                                                       tokens)
        max_len = int(ctx.max()) + 64
        sched = mqa.get_paged_mqa_logits_metadata(ctx, 64, NUM_SMS, indices=indices)
        configs = {"new": None} | ({"old": old} if old is not None else {})
        outs = {name: torch.full((q.shape[0] * q.shape[1], max_len), float("nan"), device="cuda") for name in configs}
        calls = {name: (lambda name=name, cfg=cfg: mqa.fp8_paged_mqa_logits(
            q, cache, w, ctx, table, sched, max_len, False, indices=indices, out=outs[name], config=cfg))
            for name, cfg in configs.items()}
        check_rows = sorted(rng.sample(range(q.shape[0]), min(8, q.shape[0])))
        idx = torch.tensor(check_rows, device="cuda")
        w_rows = w.view(q.shape[0], q.shape[1], heads)[idx].reshape(-1, heads)
        ref = ref_paged(q[idx], values, scales, w_rows, ctx[idx], table[idx], max_len, False)
        for name, call in calls.items():
            call()
            torch.cuda.synchronize()
            compare(outs[name].view(q.shape[0], q.shape[1], -1)[idx].reshape(-1, max_len), ref)
        times = b.ab(calls)
        kv_bytes = sum((length + 63) // 64 for length in seq_lens) * 64 * (128 + 4)
        logit_bytes = sum(ctx.view(-1).tolist()) * 4 * (next_n if indices is None and ctx.ndim == 1 else 1)
        nbytes = q.numel() + w.numel() * 4 + kv_bytes + logit_bytes
        row = {"heads": heads, "next_n": next_n, "batch": batch, "avg_context": avg, "tokens_per_seq": tokens,
               "rounds_us": times}
        for name in calls:
            us = statistics.median(times[name])
            row[f"{name}_us"] = us
            row[f"{name}_gbps"] = nbytes / us / 1e3
        if heads == 64 and next_n == 1 and not tokens:
            anchor[batch] = row["new_gbps"]
        elif batch in anchor:
            for name in calls:
                row[f"{name}_vs_anchor"] = row[f"{name}_gbps"] / anchor[batch]
            row["goal"], row["goal_met"] = "the 64-head next_n 1 share", row["new_vs_anchor"] >= 0.95
        rows.append(row)
        line = ", ".join(f"{name} {row[f'{name}_us']:7.1f} us {row[f'{name}_gbps']:6.0f} GB/s"
                         + (f" ({row[f'{name}_vs_anchor']:.2f}x the anchor)" if f"{name}_vs_anchor" in row else "")
                         for name in calls)
        print(f"paged h={heads:2} n={next_n} b={batch:4} tok={tokens or 0}: {line}", flush=True)
        del q, cache, w, ctx, table, values, scales, outs, ref
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true", help="build the kernels (no GPU needed) and exit")
    ap.add_argument("--only", default="hc,mqa", help="comma-separated suites: hc, mqa")
    ap.add_argument("--sweep", action="store_true", help="hc: also time every candidate config of the new kernel")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the A/B timings")
    ap.add_argument("--json", default="", help="output path (default: $OUT/v32fix.json, else ./v32fix.json)")
    args = ap.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if only - {"hc", "mqa"}:
        ap.error(f"--only: unknown suites {sorted(only - {'hc', 'mqa'})}")
    if args.precompile:
        precompile(only, args.sweep)
        return 0
    b = Bench(args.rounds)
    print(f"{b.device}: datasheet {b.peak_gbps} GB/s", flush=True)
    result = {"device": b.device, "hbm_peak_gbps": b.peak_gbps}
    if "hc" in only:
        result["hc"] = run_hc(b, args.sweep)
    if "mqa" in only:
        result["mqa"] = run_mqa(b)
    rows = result.get("hc", []) + result.get("mqa", [])
    result["checks_failed"] = [r["config"] for r in result.get("hc", []) if not r["check"]]
    result["goals_missed"] = [{k: r[k] for k in ("m", "k", "splits", "heads", "next_n", "batch", "tokens_per_seq",
                                                  "goal") if k in r} for r in rows if r.get("goal_met") is False]
    path = Path(args.json) if args.json else Path(os.environ.get("OUT", ".")) / "v32fix.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}: {len(result['checks_failed'])} checks failed, {len(result['goals_missed'])} goals missed")
    return 1 if result["checks_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
