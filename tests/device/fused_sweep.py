"""Device sweep of the fused SwiGLU GEMM1's configs on the MoE suite's rows (`dgx bench --suite moe`).

    python tests/device/fused_sweep.py --list [--cases 2,7] [--max-candidates 12]      # CPU: the plan, model only
    python tests/device/fused_sweep.py --precompile [--jobs N] [--cases ...]           # CPU: builds every kernel
    python tests/device/fused_sweep.py [--timer kernel|events] [--rounds 3] [--cases ...] [--skip TEXT] [--json F]

Cases: the moe suite's rows (dgx.bench.moe_suites.builtin_moe_suite, seed 0: the committed run's group sizes, Mmax
and segments), GEMM1 only (gate-up: N 2I = 4096, K H = 7168), operands from the suite's own builder
(dgx.bench.moe_problems.build_moe_problem). `--cases` picks rows by their 1-based position in the suite (`2`, `1-3`)
or by key (`masked8x128`, `contiguous4x2048`).

Per case, timed in alternating rounds:
- every candidate fused config (SwiGLU + FP8 output, B from dgx.prepare_gate_up), each passed through the call's
  `config=`: the heuristic's pick (heuristics.choose_fused) first, then the others ranked by the model's estimate
  (heuristics.estimate, the ranking choose_fused uses). The candidates are every valid config along the axes the
  heuristic weighs (block_m, block_n, stages, pairs sharing A or B, deferred promotion), not only those its
  generator (heuristics.fused_options) yields: `source` says which ('pick', 'heuristic', 'space'). The model cannot
  tell stage counts or deferral apart, so each tile and pair as the heuristic's rules make it comes first (`depth`
  0), then those departing from one rule, then two, each by estimate; `--max-candidates N` (default 12) keeps the
  pick and the N - 1 first;
- `unfused`: the bar the fused GEMM1 must beat, what the suite's dgx_unfused runs between its GEMMs: dgx GEMM1 to
  BF16 (the heuristic's config) and dgx.silu_mul_quant, as one timed callable;
- `gemm1_bf16`: that GEMM1 alone (for the record: what the fused one costs over it).

Checks, before anything is timed, on outputs poisoned first (FP8 bytes 0x7F, NaN scales): the pick's and the
unfused pair's outputs decoded against a float64 reference of silu(gate) * up from the FP8 operands on the suite's
checked rows (normwise, REF_TOL: FP8 rounding is about 2.3%); every other candidate against the pick's output on
every valid row, bitwise (FP8 bytes and scale bits: each element's accumulation order is the same for every tile,
pair and stage count), or where not bitwise, decoded against the reference and the pick (`check` says which), and
masked rows past the counts must keep their poison. A candidate that fails is reported and not timed.

Timing (docs/METHOD.md, dgx.bench.timing): 1 GiB zeroed before each call, 5 warm-ups, median of 30; kernel-only
(dgx.bench.kernel_timer.time_kernels, CUPTI: the unfused pair's two kernels summed) by default, `--timer events`
for CUDA events around a CUDA-graph replay; `--rounds` rounds (default 3) alternating the order; per row the median
of the rounds' medians. Ratios: `x unfused` = the unfused pair's us / the row's us, `x pick` = the pick's us / the
row's us (> 1: the row is faster). Prints a table per case, then per case the best config and its gain; JSON to
--json (default $OUT/fused_sweep.json when OUT is set), rewritten after every case.

--precompile builds every kernel the run launches (the candidates, the unfused GEMM1 and silu_mul_quant) into
DGX_CACHE_DIR in parallel processes (tests/device/parallel_build.py), no GPU needed; --list prints the plan (CPU).
Run from the repository root with it on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # parallel_build
sys.path.insert(0, str(HERE.parents[1]))  # the repository

from dgx import families, heuristics  # noqa: E402
from dgx.bench.moe_suites import DEFAULT_SEED, MoeShape, builtin_moe_suite  # noqa: E402
from dgx.kernels.fp8_epilogue import Epilogue  # noqa: E402
from dgx.kernels.fp8_gemm import SHARE_A, SHARE_B, SHARE_NONE, GemmConfig  # noqa: E402
from dgx.kinds import GemmKind  # noqa: E402

NUM_SMS = 132
MAX_CANDIDATES = 12
ROUNDS = 3
EPILOGUE = Epilogue(fp8=True, swiglu=True)
"""The suite's fused epilogue: SwiGLU, FP8 output with FP32 scales (no clamp, row weights or alpha)."""
REF_TOL = 0.05
"""Normwise difference of a decoded FP8 output from the float64 SwiGLU (e4m3 rounding alone: about 0.023)."""
MIN_STAGES = 3
UNFUSED, GEMM_ALONE = "unfused", "gemm1_bf16"
PAIR_NAMES = {SHARE_NONE: "", SHARE_A: " pA", SHARE_B: " pB"}


# --- the plan (CPU) --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """One row of the moe suite, as GEMM1 (gate-up) sees it."""

    index: int  # 1-based position in the suite
    shape: MoeShape

    @property
    def key(self) -> str:
        return f"{self.shape.layout}{self.shape.experts}x{self.shape.tokens}"

    @property
    def label(self) -> str:
        return self.shape.label

    @property
    def kind(self) -> str:
        return "m_grouped_masked" if self.shape.layout == "masked" else "m_grouped_contiguous"

    @property
    def m(self) -> int:
        """The M the heuristics take: the expected rows of a group (masked), every row of A (contiguous)."""
        return self.shape.tokens if self.shape.layout == "masked" else self.shape.padded_m

    @property
    def n(self) -> int:
        return 2 * self.shape.inter

    @property
    def k(self) -> int:
        return self.shape.hidden

    @property
    def groups(self) -> int:
        return self.shape.experts


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A fused config of a case with the model's estimate (heuristics.estimate) and where it comes from."""

    config: GemmConfig
    est_cycles: float
    units: int  # the model's scheduler units (masked: from the counts' spread, heuristics.masked_units)
    waves: int  # the model's tile rounds
    actual_units: int  # units of the case's own group sizes
    source: str  # 'pick' (choose_fused's), 'heuristic' (its generator yields it), 'space' (a valid config beside)
    depth: int = 0  # rules of the heuristic it departs from for its tile and pair (stages, deferred promotion)

    @property
    def label(self) -> str:
        c = self.config
        return f"{c.block_m}x{c.block_n} s{c.stages}{PAIR_NAMES[c.pair]}{' d' if c.defer else ''}"

    def to_dict(self, pick_cycles: float) -> dict:
        c = self.config
        return dict(label=self.label, kernel=c.kernel_name, block_m=c.block_m, block_n=c.block_n, stages=c.stages,
                    pair=c.pair, defer=c.defer, source=self.source, est_cycles=round(self.est_cycles, 1),
                    est_over_pick=round(self.est_cycles / pick_cycles, 4), units=self.units, waves=self.waves,
                    actual_units=self.actual_units, depth=self.depth)


def suite_cases() -> list[Case]:
    """The moe suite's rows in its order (the committed run's seed)."""
    return [Case(i, s) for i, s in enumerate(builtin_moe_suite(seed=DEFAULT_SEED), 1)]


def select_cases(spec: str | None) -> list[Case]:
    """The cases `spec` names (None or '': all): 1-based positions, ranges 'a-b', or keys like 'masked8x128'."""
    cases = suite_cases()
    if not spec:
        return cases
    by_key = {c.key: c for c in cases}
    picked: list[Case] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in by_key:
            found = [by_key[item]]
        else:
            lo, _, hi = item.partition("-")
            try:
                first, last = int(lo), int(hi or lo)
            except ValueError:
                raise ValueError(f"--cases: expected positions 1..{len(cases)}, ranges 'a-b' or keys "
                                 f"({', '.join(by_key)}); got {item!r}") from None
            if not 1 <= first <= last <= len(cases):
                raise ValueError(f"--cases: positions run 1..{len(cases)}; got {item!r}")
            found = cases[first - 1:last]
        picked += [c for c in found if c not in picked]
    return picked


def actual_units(case: Case, config: GemmConfig) -> int:
    """Scheduler units of `config` on the case's own rows: per masked group its count's blocks (pairs along M: block
    pairs), as the scheduler walks them; contiguous: every 128-aligned segment's blocks (a skipped padding block
    still takes its unit)."""
    if case.shape.layout == "masked":
        return sum(config.units(m) for m in case.shape.group_ms if m > 0)
    return config.units(case.shape.padded_m)


def fits_case(case: Case, config: GemmConfig) -> str:
    """'' if `config` is a kernel the case's fused call accepts as its `config=` (dgx.launch's own check, and the
    suite's epilogue), else why not. (GemmConfig itself refuses tiles, pairs and stage counts the kernel cannot
    run, or that do not fit shared memory.)"""
    from dgx import launch

    if config.epilogue != EPILOGUE:
        return f"epilogue {config.epilogue} is not the suite's {EPILOGUE}"
    try:
        launch._expect_config_fits(GemmKind(case.kind), config, case.n, case.k)
    except ValueError as e:
        return str(e)
    return ""


def candidate_space(case: Case) -> list[GemmConfig]:
    """Every valid fused config of the case along the axes the heuristic weighs: block_m x block_n (heuristics
    BLOCK_MS x BLOCK_NS; the epilogue takes 64 or 128 x 128), pairs sharing A or B, deferred promotion or not, and
    every stage count from MIN_STAGES to what fits beside the epilogue's output tile."""
    layout = GemmKind(case.kind).layout
    out = []
    for bm in heuristics.BLOCK_MS:
        for bn in heuristics.BLOCK_NS:
            if EPILOGUE.validate_tile(bm, bn, case.n):
                continue
            for pair in (SHARE_NONE, SHARE_A, SHARE_B):
                for defer in (False, True):
                    for stages in range(MIN_STAGES, heuristics.MAX_STAGES + 1):
                        try:
                            config = GemmConfig(case.n, case.k, bm, bn, stages, pair=pair, layout=int(layout),
                                                defer=defer, epilogue=EPILOGUE)
                        except ValueError:
                            continue  # the kernel cannot run it (registers, shared memory, pairs)
                        if not fits_case(case, config):
                            out.append(config)
    return out


def rule_config(case: Case, block_m: int, block_n: int, pair: int, num_sms: int = NUM_SMS) -> GemmConfig | None:
    """The fused config of this tile and pair as the heuristic's rules make one (heuristics.grouped_options: the
    stages pipeline_stages gives, in rounds on the contiguous layout, fewer where the epilogue's tile leaves less
    room; deferred promotion by with_deferred_promotion), whether or not its generator offers the tile; None where
    the rules give no valid config."""
    layout = int(GemmKind(case.kind).layout)
    try:
        base = GemmConfig(case.n, case.k, block_m, block_n, heuristics.pipeline_stages(block_m, block_n), pair=pair,
                          layout=layout)
        masked = case.shape.layout == "masked"
        base = heuristics.with_deferred_promotion(base, base.units(case.m) * (case.groups if masked else 1), num_sms)
        base = heuristics.with_stage_rounds(base)
        return dataclasses.replace(base, stages=heuristics.fused_stages(base, EPILOGUE), epilogue=EPILOGUE)
    except ValueError:
        return None


def variant_depth(config: GemmConfig, rule: GemmConfig | None) -> int:
    """How many of the heuristic's rules `config` departs from for its tile and pair: its stage count, its
    deferred promotion (0: the config the rules make)."""
    if rule is None:
        return 1
    return int(config.stages != rule.stages) + int(config.defer != rule.defer)


def plan_case(case: Case, max_candidates: int = MAX_CANDIDATES, num_sms: int = NUM_SMS) -> list[Candidate]:
    """The case's candidates: the heuristic's pick first, then at most `max_candidates` - 1 others: each tile and
    pair as the heuristic's rules make it (its generator's own where it offers them), by the model's estimate; then
    those that depart from one rule (stages, deferred promotion), then from two, each group by estimate (the model
    cannot tell stage counts apart: ranked by estimate alone, one tile's stage variants would fill the cap)."""
    if max_candidates < 1:
        raise ValueError(f"--max-candidates: expected at least 1 (the heuristic's pick); got {max_candidates}")
    per_unit = heuristics.fused_tiles_per_unit(EPILOGUE)
    pick = heuristics.choose_fused(case.kind, case.m, case.n, case.k, case.groups, num_sms, EPILOGUE)
    generated = {c for c, _ in heuristics.fused_options(case.kind, case.m, case.n, case.k, case.groups, num_sms,
                                                        EPILOGUE)}
    space = candidate_space(case)
    if pick.config not in space:
        raise RuntimeError(f"{case.label}: the heuristic's pick {pick.config.kernel_name} is not in the candidate "
                           f"space (the sweep's enumeration misses an axis the heuristic uses)")
    rules = {}
    for c in space:
        tile = (c.block_m, c.block_n, c.pair)
        if tile not in rules:
            rules[tile] = next((g for g in generated if (g.block_m, g.block_n, g.pair) == tile), None) \
                or rule_config(case, *tile, num_sms)

    def candidate(config: GemmConfig, source: str) -> Candidate:
        units = heuristics.fused_units(config, case.kind, case.m, case.groups)
        est = heuristics.estimate(config, units, case.k, num_sms, per_unit)
        depth = variant_depth(config, rules[config.block_m, config.block_n, config.pair])
        return Candidate(config, est.est_cycles, units, est.waves, actual_units(case, config), source, depth)

    def rank(c: Candidate) -> tuple:
        cfg = c.config
        rule = rules[cfg.block_m, cfg.block_n, cfg.pair]
        stages_off = abs(cfg.stages - rule.stages) if rule is not None else 0
        return (c.depth, round(c.est_cycles, 3), stages_off, -cfg.stages, cfg.pair, -cfg.block_m, cfg.defer)

    others = [candidate(c, "heuristic" if c in generated else "space") for c in space if c != pick.config]
    others.sort(key=rank)
    return [candidate(pick.config, "pick")] + others[:max_candidates - 1]


def unfused_configs(case: Case, num_sms: int = NUM_SMS):
    """(GEMM1's BF16 config, silu_mul_quant's config) of the suite's dgx_unfused for the case, as dgx picks them."""
    from dgx.kernels.silu_mul_quant import choose_config

    gemm = families.kind(case.kind).choose(case.m, case.n, case.k, case.groups, num_sms).config
    masked = case.shape.layout == "masked"
    rows, groups = (case.shape.max_m, case.groups) if masked else (case.shape.padded_m, 1)
    smq = choose_config(rows, case.shape.inter // 128, groups, num_sms, False, "fp32")
    return gemm, smq


def plan(cases: list[Case], max_candidates: int, num_sms: int) -> list[tuple[Case, list[Candidate]]]:
    return [(case, plan_case(case, max_candidates, num_sms)) for case in cases]


def list_plan(planned, num_sms: int) -> dict:
    """Prints the plan and returns it as the JSON's 'plan'."""
    out = []
    for case, cands in planned:
        gemm, smq = unfused_configs(case, num_sms)
        pick = cands[0]
        print(f"[{case.index}] {case.label} ({case.key}): M {case.m}, groups {case.groups}, "
              f"group sizes {','.join(map(str, case.shape.group_ms))}; unfused: {gemm.kernel_name} + "
              f"{smq.render().name}")
        print(f"    {'config':18s} {'source':9s} {'depth':>5s} {'est clk':>10s} {'x pick':>7s} {'units':>6s} "
              f"{'waves':>5s} {'actual':>6s}  kernel")
        for c in cands:
            print(f"    {c.label:18s} {c.source:9s} {c.depth:5d} {c.est_cycles:10.0f} "
                  f"{c.est_cycles / pick.est_cycles:7.3f} {c.units:6d} {c.waves:5d} {c.actual_units:6d}  "
                  f"{c.config.kernel_name}")
        out.append(dict(case=case.shape.to_dict() | dict(index=case.index, key=case.key),
                        candidates=[c.to_dict(pick.est_cycles) for c in cands],
                        unfused=dict(gemm=gemm.kernel_name, silu_mul_quant=smq.render().name)))
    return dict(num_sms=num_sms, plan=out)


def kernels_to_build(planned, num_sms: int) -> list:
    """Every config the run launches (each has render()): the candidates, the unfused GEMM1 and silu_mul_quant."""
    configs = []
    for case, cands in planned:
        configs += [c.config for c in cands]
        configs += list(unfused_configs(case, num_sms))
    return list({c.render().name: c for c in configs}.values())


# --- the device run -------------------------------------------------------------------------------------------

class CaseRun:
    """A case's operands (the suite's builder), its outputs and the timed callables."""

    def __init__(self, case: Case, seed: int = DEFAULT_SEED, device: str = "cuda"):
        import torch

        import dgx
        from dgx.bench.moe_impls import _gemms
        from dgx.bench.moe_problems import build_moe_problem
        from dgx.moe_activation import scale_layout

        self.case = case
        s = case.shape
        self.problem = build_moe_problem(s, seed, device)
        t = self.problem.tensors
        dev = t["x"].device
        self.masked = s.layout == "masked"
        lead = (s.experts, s.max_m) if self.masked else (s.padded_m,)
        self.b2 = dgx.prepare_gate_up(*t["w1_fp8"])
        # the fused GEMM1's FP8 output and scales, in the layout GEMM2 reads (as the suite's dgx allocates them)
        self.y = torch.empty(*lead, s.inter, device=dev, dtype=torch.float8_e4m3fn)
        shape, strides = scale_layout(s.experts if self.masked else None, lead[-1], s.inter // 128, False)
        self.sf = torch.empty_strided(shape, strides, device=dev, dtype=torch.float32)
        # the unfused pair's BF16 intermediate and its silu_mul_quant output (allocated once, as the suite does)
        self.gate_up = torch.empty(*lead, 2 * s.inter, device=dev, dtype=torch.bfloat16)
        self.masked_m = t.get("masked_m")
        self.y_u, self.sf_u = dgx.silu_mul_quant(self.gate_up, masked_m=self.masked_m)
        self.gemm1, _ = _gemms(dgx, self.problem)  # the suite's own GEMM1 call (BF16 out, heuristic config)
        if self.masked:
            keep = [torch.arange(s.max_m) < m for m in s.group_ms]
            self.valid = torch.cat(keep).to(dev)
        else:
            self.valid = t["m_indices"] >= 0

    def fused(self, config: GemmConfig):
        import dgx

        t, s = self.problem.tensors, self.case.shape
        if self.masked:
            return lambda: dgx.m_grouped_fp8_gemm_nt_masked(t["a"], self.b2, (self.y, self.sf), t["masked_m"],
                                                            s.tokens, swiglu=True, config=config)
        return lambda: dgx.m_grouped_fp8_gemm_nt_contiguous(t["a"], self.b2, (self.y, self.sf), t["m_indices"],
                                                            swiglu=True, config=config)

    def unfused(self):
        import dgx

        a = self.problem.tensors["a"]

        def run():
            self.gemm1(a, self.gate_up)
            dgx.silu_mul_quant(self.gate_up, masked_m=self.masked_m, out=self.y_u, out_scales=self.sf_u)

        return run

    def gemm_alone(self):
        a = self.problem.tensors["a"]
        return lambda: self.gemm1(a, self.gate_up)

    # ---- checks --------------------------------------------------------------------------------------------

    def sync(self) -> None:
        import torch

        if self.valid.is_cuda:
            torch.cuda.synchronize()

    def poison(self) -> None:
        import torch

        self.y.view(torch.uint8).fill_(0x7F)  # e4m3 NaN
        self.sf.fill_(float("nan"))
        self.y_u.view(torch.uint8).fill_(0x7F)
        self.sf_u.fill_(float("nan"))

    def flat(self, y, sf):
        """(FP8 bytes [rows, I], scale bits [rows, I/128]) of every row, flattened ([G x Mmax] or [padded M])."""
        import torch

        inter = self.case.shape.inter
        return y.reshape(-1, inter).view(torch.uint8), sf.reshape(-1, sf.shape[-1]).contiguous().view(torch.int32)

    def decoded(self, y, sf, rows: list[int]):
        """float64 [len(rows), I] of the FP8 output's rows (flat indices)."""
        import torch

        y8, bits = self.flat(y, sf)
        idx = torch.tensor(rows, device=y.device)
        q = y8.index_select(0, idx).view(torch.float8_e4m3fn).float().double()  # (FP8 is indexed as bytes)
        s = bits.index_select(0, idx).view(torch.float32).double()
        return q * s.repeat_interleave(128, dim=1)

    def reference(self):
        """float64 silu(gate) * up of the suite's checked rows, from the FP8 operands (A rows and each group's W1
        dequantised)."""
        import torch

        from dgx.bench.moe_problems import _dequant_block

        p, s = self.problem, self.case.shape
        t = p.tensors
        rows = p.flat_rows()
        idx = torch.tensor(rows, device=t["x"].device)
        qa, sa = t["a"]
        a_rows = qa.reshape(-1, s.hidden).index_select(0, idx).double()
        sa_rows = sa.reshape(-1, sa.shape[-1]).index_select(0, idx).double()
        a64 = (a_rows.unflatten(-1, (-1, 128)) * sa_rows.unsqueeze(-1)).flatten(-2)
        out = torch.empty(len(rows), s.inter, dtype=torch.float64, device=a64.device)
        for g in sorted({g for g, _ in p.rows}):
            sel = [i for i, (gg, _) in enumerate(p.rows) if gg == g]
            w1 = _dequant_block(t["w1_fp8"][0][g], t["w1_fp8"][1][g])
            gate_up = a64[sel] @ w1.T
            out[sel] = torch.nn.functional.silu(gate_up[:, :s.inter]) * gate_up[:, s.inter:]
            del w1
        return rows, out


def normwise(got, ref) -> float:
    import torch

    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp(min=1e-30))


def check_case(run: CaseRun, cands: list[Candidate]) -> tuple[dict, dict, list[Candidate]]:
    """({label: check record} of the candidates, the unfused pair's record, the candidates that passed). Raises
    AssertionError where the pick or the unfused pair is off the float64 reference (nothing of the case is timed
    then). Masked outputs are compared whole, the rows past the counts too (poisoned alike before each run: a
    config that writes them differs); contiguous ones on the valid rows (which padding rows a config writes
    depends on its tile height)."""
    import torch

    rows, ref = run.reference()
    run.poison()
    run.unfused()()
    run.fused(cands[0].config)()
    run.sync()
    unfused_diff = normwise(run.decoded(run.y_u, run.sf_u, rows), ref)
    pick_diff = normwise(run.decoded(run.y, run.sf, rows), ref)
    if not (unfused_diff < REF_TOL and pick_diff < REF_TOL):
        raise AssertionError(f"{run.case.label}: the float64 check failed: pick {cands[0].label} {pick_diff:.3e}, "
                             f"unfused {unfused_diff:.3e} (normwise; tolerance {REF_TOL})")
    compared = slice(None) if run.masked else run.valid
    pick_y, pick_sf = (x[compared].clone() for x in run.flat(run.y, run.sf))
    pick_record = dict(check="reference", ref_diff=pick_diff)
    if run.masked:
        pick_record["past_rows_untouched"] = _kept_poison(run, *run.flat(run.y, run.sf))
    records = {cands[0].label: pick_record}
    pick_all = None  # the pick's decoded valid rows, made when a candidate is not bitwise equal
    passed = [cands[0]]
    for c in cands[1:]:
        run.poison()
        try:
            run.fused(c.config)()
            run.sync()
        except Exception as e:  # noqa: BLE001 - a candidate dgx refuses is reported, the others still run
            records[c.label] = dict(check="error", error=f"{type(e).__name__}: {e}")
            print(f"    {c.label}: FAILED to run: {type(e).__name__}: {e}", flush=True)
            continue
        y, sf = (x[compared] for x in run.flat(run.y, run.sf))
        if torch.equal(y, pick_y) and torch.equal(sf, pick_sf):
            rec = dict(check="bitwise")
        else:
            if pick_all is None:
                pick_all = _decode_flat(run, pick_y, pick_sf)
            ref_diff = normwise(run.decoded(run.y, run.sf, rows), ref)
            pick_diff_all = normwise(_decode_flat(run, y, sf), pick_all)
            ok = ref_diff < REF_TOL and pick_diff_all < REF_TOL
            rec = dict(check="decoded" if ok else "failed", ref_diff=ref_diff, pick_diff=pick_diff_all,
                       differing_bytes=int((y != pick_y).sum()), differing_scales=int((sf != pick_sf).sum()))
            if run.masked:
                rec["past_rows_untouched"] = _kept_poison(run, *run.flat(run.y, run.sf))
                if rec["past_rows_untouched"] != pick_record["past_rows_untouched"]:
                    rec["check"] = "failed"  # it writes rows past the counts where the pick does not, or v.v.
        records[c.label] = rec
        if rec["check"] in ("bitwise", "decoded"):
            passed.append(c)
        else:
            print(f"    {c.label}: check FAILED: {rec}", flush=True)
    return records, dict(check="reference", ref_diff=unfused_diff), passed


def _decode_flat(run: CaseRun, y8, bits):
    """float32 values of the valid rows of compared rows given as FP8 bytes and scale bits (masked: every row,
    of which the valid ones are taken; contiguous: the valid rows already). A row left unwritten decodes to NaN."""
    import torch

    if run.masked:
        y8, bits = y8[run.valid], bits[run.valid]
    return y8.view(torch.float8_e4m3fn).float() * bits.view(torch.float32).repeat_interleave(128, dim=1)


def _kept_poison(run: CaseRun, y8, bits) -> bool:
    """Whether every masked row past its group's count still holds the poison (FP8 0x7F bytes, NaN scale bits)."""
    import torch

    past = ~run.valid
    nan_bits = int(torch.tensor([float("nan")], dtype=torch.float32).view(torch.int32))
    return bool((y8[past] == 0x7F).all()) and bool((bits[past] == nan_bits).all())


def time_call(fn, timer: str, flush) -> float:
    """Median µs of `fn` (docs/METHOD.md): kernel-only, or CUDA events around a replay of `fn` captured as a graph."""
    import torch

    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import time_gpu

    if timer == "kernel":
        return time_kernels(fn, flush).median_us
    fn()  # plan and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_gpu(graph.replay, flush).median_us


def run_case(case: Case, cands: list[Candidate], args, flush) -> dict:
    """Checks, then times the case's candidates, the unfused pair and GEMM1 alone in alternating rounds."""
    import torch

    t0 = time.time()
    run = CaseRun(case, args.seed)
    checks, unfused_check, passed = check_case(run, cands)
    calls = {c.label: run.fused(c.config) for c in passed}
    calls[UNFUSED] = run.unfused()
    calls[GEMM_ALONE] = run.gemm_alone()
    names = list(calls)
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            rounds[name].append(time_call(calls[name], args.timer, flush))
    us = {name: statistics.median(v) for name, v in rounds.items()}
    pick_us, unfused_us = us[cands[0].label], us[UNFUSED]
    rows = []
    for c in cands:
        row = c.to_dict(cands[0].est_cycles) | checks.get(c.label, {})
        if c.label in us:
            row.update(us=us[c.label], rounds_us=rounds[c.label], x_unfused=unfused_us / us[c.label],
                       x_pick=pick_us / us[c.label], spread=_spread(rounds[c.label]))
        rows.append(row)
    timed = [r for r in rows if "us" in r]
    best = min(timed, key=lambda r: r["us"])
    gemm_bf16, smq = unfused_configs(case, torch.cuda.get_device_properties(0).multi_processor_count)
    rec = dict(case=case.shape.to_dict() | dict(index=case.index, key=case.key), candidates=rows,
               unfused=dict(us=unfused_us, rounds_us=rounds[UNFUSED], spread=_spread(rounds[UNFUSED]),
                            gemm=gemm_bf16.kernel_name, silu_mul_quant=smq.render().name) | unfused_check,
               gemm1_bf16=dict(us=us[GEMM_ALONE], rounds_us=rounds[GEMM_ALONE]),
               pick=dict(label=cands[0].label, us=pick_us, x_unfused=unfused_us / pick_us),
               best=dict(label=best["label"], us=best["us"], x_unfused=best["x_unfused"], x_pick=best["x_pick"]),
               seconds=round(time.time() - t0, 1))
    run.problem.free()
    del run, calls
    torch.cuda.empty_cache()
    return rec


def _spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs) if xs else float("nan")


def print_case(rec: dict) -> None:
    c, u = rec["case"], rec["unfused"]
    print(f"\n[{c['index']}] {c['label']}: unfused pair (GEMM1 BF16 + silu_mul_quant) {u['us']:.1f} us "
          f"(GEMM1 alone {rec['gemm1_bf16']['us']:.1f}); {rec['seconds']} s")
    print(f"    {'config':22s} {'source':9s} {'us':>9s} {'x unfused':>9s} {'x pick':>7s} {'spread':>7s} "
          f"{'model':>6s} {'waves':>5s}  check")
    for r in rec["candidates"]:
        if "us" in r:
            timing = f"{r['us']:9.1f} {r['x_unfused']:9.3f} {r['x_pick']:7.3f} {r['spread']:7.1%}"
        else:
            timing = f"{'-':>9s} {'-':>9s} {'-':>7s} {'-':>7s}"
        print(f"    {r['label']:22s} {r['source']:9s} {timing} {r['est_over_pick']:6.3f} {r['waves']:5d}  "
              f"{r.get('check', '?')}", flush=True)


def summarize(records: list[dict], device: str, args) -> dict:
    gm = lambda xs: statistics.geometric_mean(xs) if xs else float("nan")  # noqa: E731
    print(f"\nbest per case ({device}, timer {args.timer}, {args.rounds} rounds):")
    for rec in records:
        b, p = rec["best"], rec["pick"]
        tag = "the pick" if b["label"] == p["label"] else f"{b['x_pick']:.3f}x the pick ({p['label']})"
        print(f"  {rec['case']['label']:22s} best {b['label']:20s} {b['us']:9.1f} us, {b['x_unfused']:.3f}x unfused, "
              f"{tag}; pick {p['x_unfused']:.3f}x unfused")
    summary = dict(device=device, timer=args.timer, rounds=args.rounds, max_candidates=args.max_candidates,
                   geomean_pick_x_unfused=gm([r["pick"]["x_unfused"] for r in records]),
                   geomean_best_x_unfused=gm([r["best"]["x_unfused"] for r in records]),
                   worst_pick_x_unfused=min((r["pick"]["x_unfused"] for r in records), default=float("nan")),
                   worst_best_x_unfused=min((r["best"]["x_unfused"] for r in records), default=float("nan")))
    print(f"  geomean x unfused: pick {summary['geomean_pick_x_unfused']:.3f}, best "
          f"{summary['geomean_best_x_unfused']:.3f}; worst: pick {summary['worst_pick_x_unfused']:.3f}, best "
          f"{summary['worst_best_x_unfused']:.3f}")
    return summary


def write_json(path: str | None, payload: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=1))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print the plan (CPU only)")
    mode.add_argument("--precompile", action="store_true", help="build every kernel of the run (CPU only)")
    ap.add_argument("--cases", default=None, help="rows of the suite: positions '2,7', ranges '1-3', keys "
                                                  "'masked8x128' (default: all)")
    ap.add_argument("--max-candidates", type=int, default=MAX_CANDIDATES,
                    help="fused configs per case, the heuristic's pick included")
    ap.add_argument("--skip", action="append", default=[],
                    help="leave out candidates whose label contains this text (e.g. ' pA'); repeatable")
    ap.add_argument("--timer", choices=("kernel", "events"), default="kernel")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the operands' seed (the suite's)")
    ap.add_argument("--num-sms", type=int, default=None,
                    help="--list / --precompile: SMs the plan assumes (default: the GPU's where one is present, else "
                         "132); a timed run takes the GPU's")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="--precompile: compile processes")
    ap.add_argument("--json", default=os.path.join(os.environ["OUT"], "fused_sweep.json") if os.environ.get("OUT")
                    else None)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: expected at least 1; got {args.rounds}")
    if args.max_candidates < 1:
        ap.error(f"--max-candidates: expected at least 1 (the heuristic's pick); got {args.max_candidates}")
    try:
        args.selected = select_cases(args.cases)
    except ValueError as e:
        ap.error(str(e))
    return args


def planned_cases(args, num_sms: int):
    planned = plan(args.selected, args.max_candidates, num_sms)
    if args.skip:
        planned = [(case, [cands[0]] + [c for c in cands[1:] if not any(s in c.label for s in args.skip)])
                   for case, cands in planned]
    return planned


def _gpu_sms() -> int | None:
    """The first GPU's SM count where one is present (the plan is then the run's), else None."""
    try:
        from dgx import runtime
        from dgx.device import get_num_sms

        return get_num_sms(0) if runtime.device_count() > 0 else None
    except Exception:  # noqa: BLE001 - no driver, no GPU: the plan takes NUM_SMS
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list or args.precompile:
        num_sms = args.num_sms or _gpu_sms() or NUM_SMS
        planned = planned_cases(args, num_sms)
        if args.list:
            write_json(args.json, list_plan(planned, num_sms))
            return 0
        from parallel_build import build_all

        configs = kernels_to_build(planned, num_sms)
        print(f"{len(configs)} kernels for {len(planned)} cases", flush=True)
        print(json.dumps(build_all(configs, args.jobs)))
        return 0

    import torch

    from dgx.bench.timing import L2Flusher

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if args.num_sms and args.num_sms != num_sms:
        print(f"note: --num-sms {args.num_sms} ignored: the GPU has {num_sms} SMs (dgx's own picks use them)")
    device = torch.cuda.get_device_name()
    planned = planned_cases(args, num_sms)
    flush = L2Flusher()
    t0 = time.time()
    records: list[dict] = []
    payload: dict = dict(device=device, num_sms=num_sms, timer=args.timer, rounds=args.rounds, cases=records)
    failed: list[dict] = []
    payload["failed"] = failed
    for case, cands in planned:
        print(f"\n[{case.index}] {case.label}: {len(cands)} candidates", flush=True)
        try:
            records.append(run_case(case, cands, args, flush))
        except Exception as e:  # noqa: BLE001 - reported; the other cases still run (after a GPU fault they fail too)
            failed.append(dict(case=case.shape.to_dict() | dict(index=case.index, key=case.key),
                               error=f"{type(e).__name__}: {e}"))
            print(f"[{case.index}] {case.label} FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        finally:
            write_json(args.json, payload)
        print_case(records[-1])
    payload["summary"] = summarize(records, device, args)
    if failed:
        print(f"{len(failed)} case(s) failed: {', '.join(f['case']['label'] for f in failed)}")
    payload["seconds"] = round(time.time() - t0, 1)
    write_json(args.json, payload)
    print(f"{payload['seconds']} s" + (f"; wrote {args.json}" if args.json else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
