"""dgx's BF16 GEMMs against cuBLAS (torch.matmul) and the grouped peer (torch._grouped_mm, else a loop of cuBLAS
calls), in one process, each implementation checked against a float64 reference before it is timed.

Method (docs/METHOD.md): before each call a 1 GB buffer is zeroed (cold L2), 5 warm-ups, 30 timed calls, median; CUDA
events around each call (``--timer kernel``: kernel-only, CUPTI through torch.profiler). Within a problem the
implementations run in alternating order per round (``--rounds``, default 2): the figure is the median of the
rounds' medians.

Problems: the 18 dense FP8 anchor shapes of docs/PEERS.md run in BF16 (M 64, 128, 4096 x (N, K)), in every form of
``--forms`` (default nt); masked (docs/PEERS.md's: M_max 4096 per group, counts expected x U(0.7, 1.3)); contiguous
(docs/PEERS.md's: groups x expected rows x U(0.7, 1.3), aligned to 128); K-grouped (groups x (M, N), k per group
base x U(0.7, 1.3) rounded to 128, FP32 D += a^T b). ``--suite``: a comma-separated list of dense, masked,
contiguous, k_grouped, or all; ``--shapes`` restricts the dense suite (MxNxK items, or ``decode`` for M <= 128).

Prints a table per suite and the geometric means the goals are stated in (dense >= 1.05x cuBLAS, M <= 128 >= 1.1x,
large shapes >= 75% of the card's BF16 dense peak, grouped >= 1.2x the grouped peer); writes JSON to $OUT/bf16.json
when OUT is set (or --json PATH).

Calibration and A/B:
- ``--baseline``: also times the config the heuristic chose before its latest recalibration (tests/device/
  bf16_prior_choices.py) where it differs from today's choice, as implementation ``old``; the summary gives the
  geometric mean of old / new per suite (> 1: the change is faster).
- ``--sweep N``: also times, per dense shape (with ``--sweep-max-m``: only M up to that), the N configs the model
  ranks best among distinct kinds of tile (tile height, operand shared or not, split-K count), each checked first:
  the data to calibrate the model (dgx.kernels.bf16_gemm_heuristics).
- ``--peers``: which peers run (cublas, the grouped peer ``grouped``, ``deepgemm`` where it imports; default all);
  DeepGEMM compiles each of its kernels on first use, which dominates a short run.

``--precompile`` (no GPU needed): builds every kernel the run would use (the heuristic's configs for ``--num-sms``
SMs, baseline and sweep configs included) into DGX_CACHE_DIR in parallel processes, so the GPU run compiles nothing.

Run from the repository root with it on PYTHONPATH:
    python tests/device/bf16_bench.py [--suite all] [--forms nt,nn,tn,tt] [--sweep 6] [--timer events|kernel]
    python tests/device/bf16_bench.py --precompile [--num-sms 132] [same options]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# The problems (shapes, group sizes) are the `dgx bench` BF16 suites' (dgx.bench.bf16_suites): one definition.
from dgx.bench.bf16_suites import (  # noqa: E402
    CONTIGUOUS,
    DENSE,
    FORM_MAJORS,
    K_GROUPED,
    MASKED,
    MASKED_M_MAX,
    group_counts,
    k_grouped_typical,
)

BF16_DENSE_PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0}


# --- what each problem runs (shared by the GPU run and --precompile) ---------------------------------------------------


SUITES = ("dense", "masked", "contiguous", "k_grouped")


def dense_problems(forms, shapes=None):
    """("dense", form, M, N, K) of every form and anchor shape, restricted to `shapes` (a set of (M, N, K), or
    "decode" for M <= 128) when given."""
    for form in forms:
        for m, n, k in DENSE:
            if shapes == "decode" and m > 128 or isinstance(shapes, set) and (m, n, k) not in shapes:
                continue
            yield ("dense", form, m, n, k)


def prior_config(suite: str, key: tuple, n: int, k: int, **fields):
    """The config the heuristic chose before its latest recalibration (bf16_prior_choices), or None where the table
    has none."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bf16_prior_choices as prior
    from dgx.kernels.bf16_gemm import Bf16GemmConfig

    found = getattr(prior, suite.upper()).get(key)
    if found is None:
        return None
    bm, bn, stages, pair, k_atoms, split_k = found
    return Bf16GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, pair=pair, k_atoms=k_atoms,
                          split_k=split_k, **fields)


def problem_configs(args) -> list[tuple[str, tuple, object, object]]:
    """(suite, key, choice, prior choice or None) of every problem the run times (dgx.kernels.bf16_gemm)."""
    from dgx.kernels.bf16_gemm import LAYOUT_CONTIGUOUS, LAYOUT_K_GROUPED, LAYOUT_MASKED, choose

    sms = args.num_sms
    out = []
    if "dense" in args.suites:
        for _, form, m, n, k in dense_problems(args.forms, args.shapes):
            ma, mb = FORM_MAJORS[form]
            key = (form, m, n, k)
            out.append(("dense", key, choose("dense", m, n, k, 1, sms, major_a=ma, major_b=mb),
                        prior_config("dense", key, n, k, major_a=ma, major_b=mb)))
    if "masked" in args.suites:
        for g, e, n, k in MASKED:
            out.append(("masked", (g, e, n, k), choose("m_grouped_masked", min(e, MASKED_M_MAX), n, k, g, sms),
                        prior_config("masked", (g, e, n, k), n, k, layout=LAYOUT_MASKED)))
    if "contiguous" in args.suites:
        for i, (g, e, n, k) in enumerate(CONTIGUOUS):
            m_sum = sum(-(-c // 128) * 128 for c in group_counts(g, e, i))
            out.append(("contiguous", (g, e, n, k), choose("m_grouped_contiguous", m_sum, n, k, g, sms),
                        prior_config("contiguous", (g, e, n, k), n, k, layout=LAYOUT_CONTIGUOUS)))
    if "k_grouped" in args.suites:
        for i, (g, m, n, k) in enumerate(K_GROUPED):
            _, typical = k_grouped_typical(g, k, i)
            out.append(("k_grouped", (g, m, n, k),
                        choose("k_grouped", m, n, typical, g, sms, major_a="mn", major_b="mn", out_dtype="float32",
                               with_c=True),
                        prior_config("k_grouped", (g, m, n, k), n, 0, layout=LAYOUT_K_GROUPED, major_a="mn",
                                     major_b="mn", out_dtype="float32", with_c=True)))
    return out


def configs_for_run(args) -> list:
    """Every Bf16GemmConfig the run's dgx calls will use: the heuristic's for each problem, the baseline's and the
    sweep's."""
    out = []
    for suite, key, config, prior in problem_configs(args):
        out.append(config)
        if args.baseline and prior is not None:
            out.append(prior)
        if suite == "dense":
            form, m, n, k = key
            out += sweep_configs(m, n, k, *FORM_MAJORS[form], args.sweep if wants_sweep(args, m) else 0, args.num_sms)
    return list(dict.fromkeys(out))


def wants_sweep(args, m: int) -> bool:
    return args.sweep > 0 and (not args.sweep_max_m or m <= args.sweep_max_m)


def sweep_configs(m, n, k, major_a, major_b, count, sms) -> list:
    """`count` configs for a dense problem of distinct kinds of tile (tile height, shared operand, split-K count): the
    heuristic's choice first, then the model's best of each other kind (the heuristic's own comparison) in the order
    of their estimates - the sweep spans the choices the model weighs, not near-copies of its pick."""
    if count <= 0:
        return []
    from dgx.kernels.bf16_gemm_heuristics import _better, candidates, choose, estimate

    def kind(c):
        return (c.block_m, c.pair, c.split_k)

    chosen = choose("dense", m, n, k, 1, sms, major_a=major_a, major_b=major_b)
    best: dict[tuple, object] = {}
    for c in candidates("dense", m, n, k, 1, sms, major_a, major_b, "bfloat16", False):
        e = estimate(c, m, k, 1, sms)
        if kind(c) != kind(chosen) and (kind(c) not in best or _better(e, best[kind(c)], sms)):
            best[kind(c)] = e
    others = sorted(best.values(), key=lambda e: e.cycles)
    return [chosen] + [e.config for e in others][:count - 1]


def parse_shapes(text: str):
    """--shapes: None (every dense shape), "decode", or a set of (M, N, K) from "MxNxK,..." (each an anchor shape)."""
    if not text:
        return None
    if text == "decode":
        return "decode"
    shapes = set()
    for item in text.split(","):
        try:
            shape = tuple(int(v) for v in item.lower().split("x"))
        except ValueError:
            raise ValueError(f"expected MxNxK items or decode; got {item!r}") from None
        if shape not in DENSE:
            known = ", ".join("x".join(map(str, s)) for s in DENSE)
            raise ValueError(f"{item} is not one of the dense shapes ({known})")
        shapes.add(shape)
    return shapes


def precompile(args) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from parallel_build import build_all

    print(json.dumps(build_all(configs_for_run(args))))


# --- GPU run -------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    suite: str
    label: str
    flops: float
    bytes: float
    config: str
    us: dict[str, float] = field(default_factory=dict)  # implementation -> median µs
    errors: dict[str, float] = field(default_factory=dict)  # implementation -> normwise error vs float64
    notes: list[str] = field(default_factory=list)
    old_config: str = ""  # --baseline: the prior heuristic's config, timed as "old" where it differs

    def tflops(self, impl: str) -> float:
        us = self.us.get(impl, float("nan"))
        return self.flops / us / 1e6

    def ratio(self, peer: str) -> float:
        return self.us.get(peer, float("nan")) / self.us.get("dgx", float("nan"))


def rel_error(out, ref) -> float:
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


class Timer:
    def __init__(self, kind: str, rounds: int, warmup: int, iters: int):
        from dgx.bench.timing import L2Flusher

        self.flush = L2Flusher()
        self.kind = kind
        self.rounds = rounds
        self.warmup = warmup
        self.iters = iters

    def one(self, fn) -> float:
        if self.kind == "kernel":
            from dgx.bench.kernel_timer import time_kernels

            return time_kernels(fn, self.flush, warmup=self.warmup, iters=self.iters).median_us
        from dgx.bench.timing import time_gpu

        return time_gpu(fn, self.flush, warmup=self.warmup, iters=self.iters).median_us

    def compare(self, fns: dict) -> dict[str, float]:
        """Median over rounds of each implementation's median, the order reversed every other round."""
        names = list(fns)
        samples = {name: [] for name in names}
        for r in range(self.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                samples[name].append(self.one(fns[name]))
        return {name: statistics.median(v) for name, v in samples.items()}


def tol_for(dtype) -> float:
    import torch

    return 3e-3 if dtype == torch.bfloat16 else 1e-4


@dataclass
class Impl:
    """One implementation of a problem: `run` the call that is timed; `prepare` (untimed) sets its output up before
    the check run (poison, or C); `result` what to compare with the reference after it, given run's return value."""

    run: object
    prepare: object
    result: object


def checked(impls: dict, ref, dtype, row: Row) -> dict:
    """{name: run} of the implementations whose output, after one run, is within tolerance of `ref`; the others
    are noted in the row (wrong, or refused the problem)."""
    import torch

    ok = {}
    for name, impl in impls.items():
        try:
            impl.prepare()
            value = impl.run()
            torch.cuda.synchronize()
            err = rel_error(impl.result(value), ref)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run this problem is reported, not fatal
            row.notes.append(f"{name}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        row.errors[name] = err
        if err <= tol_for(dtype):
            ok[name] = impl.run
        else:
            row.notes.append(f"{name}: WRONG (normwise error {err:.2e})")
    return ok


def poisoned(t):
    return lambda: t.fill_(float("nan"))


def returned(value):
    return value


def deep_gemm_module():
    try:
        import deep_gemm  # noqa: F401  (DeepGEMM's current version, where built on the device)

        return deep_gemm if hasattr(deep_gemm, "bf16_gemm_nt") else None
    except Exception:  # noqa: BLE001
        return None


def config_label(c) -> str:
    return (f"{c.block_m}x{c.block_n} s{c.stages} p{c.pair}" + (f" ka{c.k_atoms}" if c.k_atoms > 1 else "")
            + (f" sk{c.split_k}" if c.split_k > 1 else ""))


def with_baseline(args, impls: dict, row: Row, suite: str, key: tuple, config, make) -> None:
    """Adds the prior heuristic's config as implementation "old" (`make(config)` gives its Impl) when --baseline asks
    and it differs from today's choice (then the row notes that they are the same)."""
    if not args.baseline:
        return
    prior = {k: p for s_, k, _, p in args.problems if s_ == suite}.get(key)
    if prior is None:
        return
    if prior == config:
        row.notes.append("old choice = new")
        return
    row.old_config = config_label(prior)
    impls["old"] = make(prior)


def run_dense(args, timer: Timer, rows: list) -> None:
    import torch

    from dgx import bf16
    from dgx.kernels.bf16_gemm import choose

    dg = deep_gemm_module() if "deepgemm" in args.peers else None
    for _, form, m, n, k in dense_problems(args.forms, args.shapes):
        ma, mb = FORM_MAJORS[form]
        gen = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
        if ma == "mn":
            a = a.T.contiguous().T
        if mb == "mn":
            b = b.T.contiguous().T
        ref = a.double() @ b.double().T
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        d_peer = torch.empty_like(d)
        d_dg = torch.empty_like(d)
        config = choose("dense", m, n, k, 1, args.num_sms, major_a=ma, major_b=mb)
        row = Row("dense", f"{form} {m}x{n}x{k}", 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n),
                  config_label(config))
        impls = {"dgx": Impl(lambda: bf16.bf16_gemm_nt(a, b, d), poisoned(d), lambda _: d)}
        if "cublas" in args.peers:
            impls["cublas"] = Impl(lambda: torch.mm(a, b.T, out=d_peer), poisoned(d_peer), lambda _: d_peer)
        if dg is not None:
            impls["deepgemm"] = Impl(lambda: dg.bf16_gemm_nt(a, b, d_dg), poisoned(d_dg), lambda _: d_dg)
        d_old = torch.empty_like(d)
        with_baseline(args, impls, row, "dense", (form, m, n, k), config, lambda cfg: Impl(
            lambda: bf16.bf16_gemm_nt(a, b, d_old, config=cfg), poisoned(d_old), lambda _: d_old))
        ok = checked(impls, ref, torch.bfloat16, row)
        row.us = timer.compare(ok)
        if wants_sweep(args, m):
            for cfg in sweep_configs(m, n, k, ma, mb, args.sweep, args.num_sms):
                name = "cfg " + config_label(cfg).replace(" ", "")
                fn = (lambda cfg=cfg: bf16.bf16_gemm_nt(a, b, d, config=cfg))
                if checked({name: Impl(fn, poisoned(d), lambda _: d)}, ref, torch.bfloat16, row):
                    row.us[name] = timer.one(fn)
        rows.append(row)
        print(fmt_row(row), flush=True)
        del a, b, d, d_peer, d_dg, d_old, ref


def grouped_peers(args, a_rows, b, offs, groups: list, out, row: Row) -> dict:
    """The grouped peer over the valid rows: torch._grouped_mm (a_rows [rows, K] packed, B [G, K, N] column-major
    per group, offs the int32 group ends) where this torch has it and takes the problem, else a loop of torch.mm
    (`groups`: (a rows of group j, j)) into `out`; none unless --peers names "grouped"."""
    from dgx.bench.bf16_impls import grouped_peer

    if "grouped" not in args.peers:
        return {}
    run, result, note = grouped_peer(a_rows, b, offs, groups, out)
    if not note.startswith("torch._grouped_mm,"):
        row.notes.append(note)
        return {"loop_mm": Impl(run, poisoned(out), result)}
    return {"grouped_mm": Impl(run, lambda: None, result)}


def run_masked(args, timer: Timer, rows: list) -> None:
    import torch

    from dgx import bf16
    from dgx.kernels.bf16_gemm import choose

    for i, (g, expected, n, k) in enumerate(MASKED):
        counts = group_counts(g, expected, 50 + i)
        gen = torch.Generator(device="cuda").manual_seed(1000 + i)
        a = torch.randn(g, MASKED_M_MAX, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(g, n, k, device="cuda", generator=gen).to(torch.bfloat16)
        d = torch.empty(g, MASKED_M_MAX, n, device="cuda", dtype=torch.bfloat16)
        masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
        valid = sum(counts)
        ref = torch.cat([a[j, :counts[j]].double() @ b[j].double().T for j in range(g)])
        a_rows = torch.cat([a[j, :counts[j]] for j in range(g)])  # the peer's input: valid rows packed
        offs = torch.tensor([sum(counts[:j + 1]) for j in range(g)], device="cuda", dtype=torch.int32)
        config = choose("m_grouped_masked", expected, n, k, g, args.num_sms)
        row = Row("masked", f"{g}g x {expected} x{n}x{k}", 2.0 * valid * n * k, 2.0 * (valid * k + g * n * k + valid * n),
                  config_label(config))
        d_peer = torch.empty(valid, n, device="cuda", dtype=torch.bfloat16)

        def masked_impl(out, cfg=None):
            return Impl(lambda: bf16.m_grouped_bf16_gemm_nt_masked(a, b, out, masked_m, expected, config=cfg),
                        poisoned(out), lambda _: torch.cat([out[j, :counts[j]] for j in range(g)]))

        impls = {"dgx": masked_impl(d)}
        impls.update(grouped_peers(args, a_rows, b, offs, [(a[j, :counts[j]], j) for j in range(g)], d_peer, row))
        with_baseline(args, impls, row, "masked", (g, expected, n, k), config,
                      lambda cfg: masked_impl(torch.empty_like(d), cfg))
        ok = checked(impls, ref, torch.bfloat16, row)
        row.us = timer.compare(ok)
        rows.append(row)
        print(fmt_row(row), flush=True)


def run_contiguous(args, timer: Timer, rows: list) -> None:
    import torch

    from dgx import bf16
    from dgx.kernels.bf16_gemm import choose

    for i, (g, expected, n, k) in enumerate(CONTIGUOUS):
        counts = group_counts(g, expected, i)
        segments = [-(-c // 128) * 128 for c in counts]
        m_sum = sum(segments)
        gen = torch.Generator(device="cuda").manual_seed(2000 + i)
        a = torch.randn(m_sum, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(g, n, k, device="cuda", generator=gen).to(torch.bfloat16)
        d = torch.empty(m_sum, n, device="cuda", dtype=torch.bfloat16)
        m_indices = torch.full((m_sum,), -1, device="cuda", dtype=torch.int32)
        starts = [sum(segments[:j]) for j in range(g)]
        for j in range(g):
            m_indices[starts[j]:starts[j] + counts[j]] = j
        valid = sum(counts)
        ref = torch.cat([a[starts[j]:starts[j] + counts[j]].double() @ b[j].double().T for j in range(g)])
        a_rows = torch.cat([a[starts[j]:starts[j] + counts[j]] for j in range(g)])
        offs = torch.tensor([sum(counts[:j + 1]) for j in range(g)], device="cuda", dtype=torch.int32)
        config = choose("m_grouped_contiguous", m_sum, n, k, g, args.num_sms)
        row = Row("contiguous", f"{g}g x {expected} x{n}x{k}", 2.0 * valid * n * k,
                  2.0 * (valid * k + g * n * k + valid * n), config_label(config))
        d_peer = torch.empty(valid, n, device="cuda", dtype=torch.bfloat16)

        def contiguous_impl(out, cfg=None):
            return Impl(lambda: bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, out, m_indices, config=cfg),
                        poisoned(out), lambda _: torch.cat([out[starts[j]:starts[j] + counts[j]] for j in range(g)]))

        impls = {"dgx": contiguous_impl(d)}
        impls.update(grouped_peers(args, a_rows, b, offs,
                                   [(a[starts[j]:starts[j] + counts[j]], j) for j in range(g)], d_peer, row))
        with_baseline(args, impls, row, "contiguous", (g, expected, n, k), config,
                      lambda cfg: contiguous_impl(torch.empty_like(d), cfg))
        ok = checked(impls, ref, torch.bfloat16, row)
        row.us = timer.compare(ok)
        rows.append(row)
        print(fmt_row(row), flush=True)


def run_k_grouped(args, timer: Timer, rows: list) -> None:
    import torch

    from dgx import bf16
    from dgx.bench.bf16_impls import k_grouped_loop
    from dgx.kernels.bf16_gemm import choose

    for i, (g, m, n, k) in enumerate(K_GROUPED):
        ks, typical = k_grouped_typical(g, k, i)
        total = sum(ks)
        gen = torch.Generator(device="cuda").manual_seed(3000 + i)
        a = torch.randn(total, m, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(total, n, device="cuda", generator=gen).to(torch.bfloat16)
        c = torch.randn(g, m, n, device="cuda", generator=gen)
        d = c.clone()
        ks_tensor = torch.tensor(ks, device="cuda", dtype=torch.int32)
        starts = [sum(ks[:j]) for j in range(g)]
        ref = torch.stack([c[j].double() + a[starts[j]:starts[j] + ks[j]].double().T @ b[starts[j]:starts[j] + ks[j]]
                           .double() for j in range(g)])
        config = choose("k_grouped", m, n, typical, g, args.num_sms, major_a="mn", major_b="mn", out_dtype="float32",
                        with_c=True)
        row = Row("k_grouped", f"{g}g {m}x{n} k~{k}", 2.0 * m * n * total, 2.0 * total * (m + n) + 8.0 * g * m * n,
                  config_label(config))

        # Both accumulate in place, as weight gradients do (d[g] += a_g^T b_g); each starts from c for the check.
        d_peer = torch.empty_like(d)

        run_loop = k_grouped_loop(a, b, d_peer, ks)

        def k_grouped_impl(out, cfg=None):
            return Impl(lambda: bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, out, ks, ks_tensor, out, config=cfg),
                        lambda: out.copy_(c), lambda _: out)

        impls = {"dgx": k_grouped_impl(d)}
        if "grouped" in args.peers:
            impls["loop_mm"] = Impl(run_loop, lambda: d_peer.copy_(c), lambda _: d_peer)
        with_baseline(args, impls, row, "k_grouped", (g, m, n, k), config,
                      lambda cfg: k_grouped_impl(torch.empty_like(d), cfg))
        ok = checked(impls, ref, torch.float32, row)
        row.us = timer.compare(ok)
        rows.append(row)
        print(fmt_row(row), flush=True)


def fmt_row(row: Row) -> str:
    peers = [p for p in ("cublas", "grouped_mm", "loop_mm", "deepgemm") if p in row.us]
    cells = [f"{row.suite:>10} {row.label:>26} {row.config:>20} dgx {row.us.get('dgx', float('nan')):8.1f} us "
             f"{row.tflops('dgx'):6.0f} TFLOPS"]
    for p in peers:
        cells.append(f"{p} {row.us[p]:8.1f} us ({row.ratio(p):.3f}x)")
    if "old" in row.us:
        cells.append(f"old {row.old_config} {row.us['old']:8.1f} us ({row.ratio('old'):.3f}x)")
    sweep = {k: v for k, v in row.us.items() if k.startswith("cfg ")}
    if sweep:
        ranked = sorted(sweep.items(), key=lambda item: item[1])
        cells.append("sweep " + " ".join(f"{name[4:]}={us:.1f}" for name, us in ranked))
    if row.notes:
        cells.append("; ".join(row.notes))
    return " | ".join(cells)


def geomean(values) -> float:
    values = [v for v in values if v and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows: list, device_name: str) -> dict:
    out = {}
    dense = [r for r in rows if r.suite == "dense"]
    if dense:
        out["dense_x_cublas"] = geomean(r.ratio("cublas") for r in dense)
        out["dense_min_x_cublas"] = min((r.ratio("cublas") for r in dense if math.isfinite(r.ratio("cublas"))),
                                        default=float("nan"))
        out["decode_x_cublas"] = geomean(r.ratio("cublas") for r in dense if int(r.label.split()[1].split("x")[0]) <= 128)
        peak = next((v for key, v in BF16_DENSE_PEAK_TFLOPS.items() if key in device_name), None)
        large = [r.tflops("dgx") for r in dense if int(r.label.split()[1].split("x")[0]) >= 4096]
        if peak and large:
            out["large_share_of_peak"] = geomean(t / peak for t in large)
        if any("deepgemm" in r.us for r in dense):
            out["dense_x_deepgemm"] = geomean(r.ratio("deepgemm") for r in dense)
    for suite in ("masked", "contiguous", "k_grouped"):
        sel = [r for r in rows if r.suite == suite]
        if sel:
            peer = [p for p in ("grouped_mm", "loop_mm") if p in sel[0].us]
            if peer:
                out[f"{suite}_x_{peer[0]}"] = geomean(r.ratio(peer[0]) for r in sel)
    for suite in SUITES:  # --baseline: old / new over the rows whose choice changed (> 1: the change is faster)
        changed = [r for r in rows if r.suite == suite and "old" in r.us]
        if changed:
            out[f"{suite}_new_x_old"] = geomean(r.ratio("old") for r in changed)
            out[f"{suite}_changed_rows"] = len(changed)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="all", help=f"comma-separated: {', '.join(SUITES)}, or all")
    p.add_argument("--forms", default="nt", help="dense forms, comma-separated: nt,nn,tn,tt")
    p.add_argument("--shapes", default="", help="dense shapes only: MxNxK,... or decode (M <= 128)")
    p.add_argument("--sweep", type=int, default=0, help="also time N configs of distinct kinds per dense shape")
    p.add_argument("--sweep-max-m", type=int, default=0, help="sweep only the dense shapes with M up to this")
    p.add_argument("--baseline", action="store_true", help="also time the prior heuristic's choice where it differs")
    p.add_argument("--peers", default="cublas,grouped,deepgemm", help="comma-separated: cublas, grouped, deepgemm")
    p.add_argument("--timer", default="events", choices=["events", "kernel"])
    p.add_argument("--rounds", type=int, default=1, help="rounds of alternating order per problem (median of them)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before each timing")
    p.add_argument("--iters", type=int, default=30, help="timed calls per timing (the median is reported)")
    p.add_argument("--num-sms", type=int, default=132, help="(--precompile) SMs to plan for")
    p.add_argument("--precompile", action="store_true", help="build the kernels into DGX_CACHE_DIR (no GPU)")
    p.add_argument("--json", default=None, help="where to write the results (default: $OUT/bf16.json if OUT is set)")
    args = p.parse_args()
    args.forms = [f for f in args.forms.split(",") if f]
    bad = [f for f in args.forms if f not in FORM_MAJORS]
    if bad:
        p.error(f"--forms: unknown {bad}; expected some of {list(FORM_MAJORS)}")
    args.suites = [x for x in args.suite.split(",") if x]
    args.suites = list(SUITES) if "all" in args.suites else args.suites
    bad = [x for x in args.suites if x not in SUITES]
    if bad or not args.suites:
        p.error(f"--suite: unknown {bad}; expected some of {', '.join(SUITES)} or all")
    args.peers = [x for x in args.peers.split(",") if x]
    bad = [x for x in args.peers if x not in ("cublas", "grouped", "deepgemm")]
    if bad:
        p.error(f"--peers: unknown {bad}; expected some of cublas, grouped, deepgemm")
    try:
        args.shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        p.error(f"--shapes: {exc}")
    for name in ("rounds", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: expected at least 1")
    if args.precompile:
        precompile(args)
        return

    import torch

    import dgx

    args.num_sms = dgx.get_num_sms()
    args.problems = problem_configs(args)
    device_name = torch.cuda.get_device_name()
    timer = Timer(args.timer, args.rounds, args.warmup, args.iters)
    rows: list[Row] = []
    t0 = time.time()
    target = args.json or (os.path.join(os.environ["OUT"], "bf16.json") if os.environ.get("OUT") else None)

    def result() -> dict:
        return {"device": device_name, "timer": args.timer, "rounds": args.rounds, "iters": args.iters,
                "warmup": args.warmup, "peers": args.peers, "seconds": round(time.time() - t0, 1),
                "jit": dgx.jit_stats(), "summary": summary(rows, device_name),
                "rows": [{"suite": r.suite, "label": r.label, "config": r.config, "old_config": r.old_config,
                          "flops": r.flops, "bytes": r.bytes, "us": r.us, "errors": r.errors, "notes": r.notes}
                         for r in rows]}

    suites = {"dense": run_dense, "masked": run_masked, "contiguous": run_contiguous, "k_grouped": run_k_grouped}
    for name, run in suites.items():
        if name in args.suites:
            run(args, timer, rows)
            torch.cuda.empty_cache()
            if target:  # after every suite: a run cut short keeps what it measured
                Path(target).write_text(json.dumps(result(), indent=1, default=str))
    final = result()
    print(json.dumps(final["summary"], indent=1))
    print(f"compiles during the run: {final['jit']['compiles']}; {final['seconds']} s")
    if target:
        Path(target).write_text(json.dumps(final, indent=1, default=str))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
