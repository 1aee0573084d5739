"""Run the comparison: ceilings, every case × implementation, host cost; repeated ``repeat`` times."""

from __future__ import annotations

import datetime
import gc
import platform
from typing import Callable, Iterable

from .results import (
    DGX,
    IMPL_SHORT,
    OK,
    BenchResults,
    CaseResult,
    HostCost,
    RepeatResult,
    bound_of,
    gbps,
    tflops,
)
from .moe_suites import MOE_SUITES, is_moe
from .op_shape import is_op
from .op_suites import OP_SUITES
from .mqa_suites import MQA, MQA_SUITES, PAGED_MQA, is_mqa
from .read_floor import ReadFloor
from .suites import (
    DEFAULT_SEED,
    GEMM_SUITES,
    HOST_ANCHOR,
    Shape,
    load_shapes_file,
    make_shape,
    select_shapes,
    suite_names,
)
from .timers import EVENTS, TIMER_METHOD, check_timer, timer_function
from .timing import HOST_CALLS, ITERS, WARMUP

NO_GPU_PREFIX = "dgx bench needs an NVIDIA GPU: "


class NoGpu(RuntimeError):
    """No usable GPU (torch missing, no CUDA device, …)."""


class TimerUnavailable(RuntimeError):
    """The chosen timer cannot run here (the kernel timer without CUPTI)."""


def gpu_problem() -> str | None:
    """Why the benchmark cannot run here, or None if a CUDA device is usable."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return f"PyTorch is not importable ({type(e).__name__}: {e}); install dgx[bench] on a machine with an NVIDIA GPU"
    try:
        if not torch.cuda.is_available():
            return f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA {torch.version.cuda})"
    except Exception as e:  # noqa: BLE001
        return f"torch.cuda.is_available() raised {type(e).__name__}: {e}"
    return None


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001
        return None


def environment() -> dict:
    """Device, driver and software versions, and the date (UTC)."""
    import torch

    env: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    env["device"] = torch.cuda.get_device_name()
    env["sm_count"] = getattr(props, "multi_processor_count", None)
    env["compute_capability"] = f"{props.major}.{props.minor}"
    env["memory_gib"] = round(props.total_memory / 2**30, 1)
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        env["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:  # noqa: BLE001
        env["driver"] = None
    try:
        from cuda.bindings import driver as cu

        err, v = cu.cuDriverGetVersion()
        env["driver_cuda"] = f"{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001
        env["driver_cuda"] = None
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        env["nvrtc"] = f"{major}.{minor}"
    except Exception:  # noqa: BLE001
        env["nvrtc"] = None
    try:
        import dgx

        env["dgx"] = getattr(dgx, "__version__", None) or _version("dgx")
    except Exception as e:  # noqa: BLE001
        env["dgx"] = f"not importable: {type(e).__name__}"
    env["torch"] = torch.__version__
    env["torch_cuda"] = torch.version.cuda
    env["cuda_bindings"] = _version("cuda-bindings")
    env["nvidia_cuda_nvrtc"] = _version("nvidia-cuda-nvrtc")
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        env["triton"] = None
    env["python"] = platform.python_version()
    return env


# --------------------------------------------------------------------------------------------------
# ceilings


def measure_ceilings(
    flush, warmup: int = WARMUP, iters: int = ITERS, timer: str = EVENTS
) -> tuple[dict[str, float], dict[str, str]]:
    """FP8 per-tensor cuBLASLt 8192³ (best of with/without fast accumulation), BF16 8192³, D2D copy; each
    timed with ``timer`` (the run's timer, so the ceilings and the cases share one clock)."""
    import torch

    time_call = timer_function(timer)
    clock = f" ({timer} timer)"

    ceil: dict[str, float] = {}
    notes: dict[str, str] = {}
    n = 8192

    def operands():
        g = torch.Generator(device="cuda")
        g.manual_seed(1234)
        a = torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)
        b = torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)
        return a, b

    def fp8():
        a16, b16 = operands()
        a8, b8 = a16.to(torch.float8_e4m3fn), b16.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        best = {}
        for fast in (False, True):
            t = time_call(
                lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=fast),
                flush,
                warmup,
                iters,
            )
            best[fast] = tflops(2 * n**3, t.median_us)
        ceil["fp8_tflops"] = max(best.values())
        ceil["fp8_tflops_precise_accum"] = best[False]
        ceil["fp8_tflops_fast_accum"] = best[True]
        notes["fp8_tflops"] = (
            f"torch._scaled_mm per-tensor 8192³ BF16 out: {best[False]:.0f} TFLOPS, "
            f"{best[True]:.0f} with use_fast_accum; the larger is the ceiling{clock}"
        )

    def bf16():
        a16, b16 = operands()
        t = time_call(lambda: torch.matmul(a16, b16), flush, warmup, iters)
        ceil["bf16_tflops"] = tflops(2 * n**3, t.median_us)
        notes["bf16_tflops"] = "torch.matmul BF16 8192³" + clock

    def copy():
        nbytes = 1 << 30
        src = torch.empty(nbytes, dtype=torch.int8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        t = time_call(lambda: dst.copy_(src), None, warmup, iters)
        ceil["copy_gbps"] = gbps(2 * nbytes, t.median_us)
        notes["copy_gbps"] = "device-to-device copy of 1 GiB, bytes read + written" + clock

    for key, fn in (("fp8_tflops", fp8), ("bf16_tflops", bf16), ("copy_gbps", copy)):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - a missing ceiling is reported, the run goes on
            notes[key] = f"unavailable: {type(e).__name__}: {e}"
        torch.cuda.empty_cache()
    return ceil, notes


def probe_timer(ctx) -> None:
    """Time one small kernel with the run's timer before anything else, so that a timer that cannot run here
    (the kernel timer without CUPTI) stops the run with its reason instead of failing every case."""
    import torch

    from .kernel_timer import KernelTimerError

    x = torch.zeros(1 << 20, device="cuda")
    try:
        ctx.time(lambda: x.add_(1.0), warmup=1, iters=2)
    except KernelTimerError as e:
        raise TimerUnavailable(f"--timer {ctx.timer} cannot run here: {e}") from None


# --------------------------------------------------------------------------------------------------
# host cost


def measure_host(impls, ctx, seed: int, calls: int = HOST_CALLS) -> list[HostCost]:
    """CPU µs per call in the patterns engines produce (dgx.bench.host_patterns): dgx in every pattern, each peer
    with the same tensors and with M changing on the dense suite's first decode shape (64×2112×7168)."""
    from . import host_patterns

    out: list[HostCost] = []
    if any(impl.name == DGX for impl in impls):
        out += _dgx_host_costs(host_patterns, calls)
    for impl in impls:
        if impl.name != DGX and impl.runs_on("dense"):
            out += _peer_host_costs(impl, ctx, seed, host_patterns, calls)
    return out


def _host_figures(hc: HostCost, step, prep, calls: int) -> None:
    """Fills `hc` with dgx.bench.timing.pattern_cost of `step(i)` less `prep(i)` (the pattern's own tensor
    building) where there is one: the method of tests/device/host_cost.py too."""
    from .timing import pattern_cost

    pt = pattern_cost(step, prep, calls)
    hc.cpu_us, hc.plain_us, hc.wall_us = pt.cpu_us, pt.plain_us, pt.wall_us
    hc.held, hc.saturated, hc.prep_us = pt.held, pt.saturated, pt.prep_us
    hc.status = OK


def _dgx_host_costs(host_patterns, calls: int) -> list[HostCost]:
    import warnings

    m, n, k = HOST_ANCHOR["shape"]
    try:
        import dgx

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the row-major pattern's advice to convert ahead
            patterns = host_patterns.all_patterns(dgx, "cuda")
    except Exception as e:  # noqa: BLE001 - reported as the host section's only row
        return [HostCost(DGX, "unavailable", f"{type(e).__name__}: {e}", calls=calls, shape=f"{m}×{n}×{k}")]
    out = []
    for p in patterns:
        hc = HostCost(DGX, calls=calls, shape=f"{m}×{n}×{k}" if p.kind == "dense" else p.kind, pattern=p.key,
                      label=p.label, goal_us=host_patterns.GOALS_US.get(p.key))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _host_figures(hc, p.step, p.prep, calls)
        except Exception as e:  # noqa: BLE001
            hc.status, hc.reason = "failed", f"{type(e).__name__}: {e}"
        out.append(hc)
    return out


def _peer_host_costs(impl, ctx, seed: int, host_patterns, calls: int) -> list[HostCost]:
    from .peers import Outcome, Unavailable
    from .problems import build_problem

    m, n, k = HOST_ANCHOR["shape"]
    labels = {"dense/same": f"same tensors every call ({m}x{n}x{k})",
              "dense/m_changes": f"M changes every call ({len(host_patterns.M_SIZES)} sizes, tensors reused)"}
    out = []
    for pattern in host_patterns.PEER_PATTERNS:
        sizes = (m,) if pattern == "dense/same" else host_patterns.M_SIZES
        hc = HostCost(impl.name, calls=calls, shape=f"{m}×{n}×{k}", pattern=pattern, label=labels[pattern])
        problems = []
        try:
            runs = []
            for size in sizes:
                problems.append(build_problem(make_shape("dense", size, n, k), seed))
                prep, _, _ = impl.select(problems[-1], ctx)
                runs.append(prep.run)
            count = len(runs)
            _host_figures(hc, lambda i: runs[i % count](), None, calls)
        except Outcome as o:
            hc.status, hc.reason = o.status, o.reason
        except Unavailable as e:
            hc.status, hc.reason = "unavailable", str(e)
        except Exception as e:  # noqa: BLE001
            hc.status, hc.reason = "failed", f"{type(e).__name__}: {e}"
        finally:
            for problem in problems:
                problem.free()
        out.append(hc)
    return out


# --------------------------------------------------------------------------------------------------
# the run


def _progress_line(case: CaseResult) -> str:
    parts = []
    for name, r in case.impls.items():
        short = IMPL_SHORT.get(name, name)
        if r.ok and case.shape.suite == PAGED_MQA:
            parts.append(f"{short} {r.us:.1f} µs ({gbps(case.shape.bytes_moved, r.us):.0f} GB/s)")
        elif r.ok:
            parts.append(f"{short} {r.us:.1f} µs ({tflops(case.shape.flops, r.us):.0f} TF)")
        else:
            parts.append(f"{short} {r.status}")
    return f"  {case.shape.suite:<10} {case.shape.label:<24} " + " | ".join(parts)


MQA_NOTES = {
    MQA: [
        "MQA prefill: TFLOPS = 2·H·D per query-key pair inside the causal windows (query i sees keys "
        "[0, S_kv - S + i + 1)) over the time taken; the work outside the windows is not counted. FP32 logits, "
        "clean_logits=True. Goal: 1000 TFLOPS.",
    ],
    PAGED_MQA: [
        "MQA decode: GB/s = (used KV-cache blocks × 64 × (D + 4) + B·next_n·max_context_len·4 logits + q + weights) "
        "over the time taken; share of the 3.35 TB/s HBM3 peak (H100 SXM datasheet). Goal: 80% of the peak. "
        "FP32 logits, clean_logits=False (positions past a sequence's blocks are left as they were, and not "
        "checked). The schedule (get_paged_mqa_logits_metadata) is computed once, outside the timed call.",
        "MQA decode ragged cases: context lengths varying 10× within the batch with the same total as the "
        "balanced case of the same batch (also in the suite); 'vs balanced' = ragged µs / balanced µs.",
    ],
}
"""Method notes of the MQA suites (added to the report when the suite runs)."""

MQA_CHECK_NOTE = (
    "MQA suites: every implementation is checked before it is timed against a float64 reference on a subset of "
    "the logits rows (64 prefill rows; every row of 8 decode sequences, the shortest and longest included): "
    "-inf exactly where the reference has it, calc_diff below the tolerance over the finite positions. The "
    "torch reference is timed over 5 calls after 1 warm-up where one call takes over 5 ms, and is not run on "
    "decode cases of more than 32 M query-key pairs."
)


MOE_NOTES = [
    "MoE block (DeepSeek-V3 expert: hidden 7168, intermediate 2048): GEMM1 [rows, 7168] x [4096, 7168], SwiGLU and "
    "per-token FP8 quantisation, GEMM2 [rows, 2048] x [7168, 2048], timed as a whole per case. TFLOPS = "
    "6·rows·H·I on the valid rows; GB/s counts the FP8 weights once, the FP8 input and the BF16 output.",
    "MoE block: every implementation is checked before it is timed against a float64 reference of the same math on "
    "its own operands (the FP8 values dequantised; torch_bf16: the BF16 originals), on up to 4 rows of up to 8 "
    "experts: calc_diff below the tolerance. dgx = the fused GEMM1 (SwiGLU + FP8-output epilogue); 'x dgx_unfused' "
    "is what the fusion gains.",
]
"""Method notes of the MoE suite (added to the report when it runs)."""


OP_NOTES = {
    "bf16": "BF16 GEMM (bf16_gemm_nt): the 18 dense FP8 anchor shapes in BF16, then the presets' BF16 layers (MTP "
            "eh_proj, MoE routers, the indexer's weights_proj) at M 64 and 4096; peers: cuBLAS (torch.mm) and "
            "DeepGEMM's bf16_gemm_nt where a real DeepGEMM imports. Fraction of ceiling against the BF16 ceiling.",
    "bf16_masked": "BF16 masked (m_grouped_bf16_gemm_nt_masked), M_max 4096; peers: torch._grouped_mm over the valid "
                   "rows packed (a loop of torch.mm where it is missing or refuses), DeepGEMM's where it imports.",
    "bf16_contiguous": "BF16 contiguous (m_grouped_bf16_gemm_nt_contiguous), 128-row segments; peers: "
                       "torch._grouped_mm over the valid rows packed (else a loop of torch.mm), DeepGEMM's.",
    "bf16_k_grouped": "BF16 K-grouped (k_grouped_bf16_gemm_tn_contiguous, FP32 d[g] += a_gᵀ b_g in place); peers: "
                      "a loop of cuBLAS torch.addmm per group, DeepGEMM's where it imports. GB/s counts d read and "
                      "written in FP32.",
    "einsum": "einsum (dgx.einsum, BF16): bmk,bnk->mn (FP32 d = c + Σ, or BF16 d), bhr,hdr->bhd, bhd,hdr->bhr; peer: "
              "the plain torch way (S folded into K through one cuBLAS product; torch.einsum batched over the heads).",
    "fp8_einsum": "fp8_einsum (dgx.fp8_einsum bhr,hdr->bhd, its scale-layout kernel included); peers: dgx.fp8_gemm_nt "
                  "once per head on strided views, and torch.einsum on the BF16 originals (checked against their "
                  "own float64 reference).",
    "hc_prenorm": "HC pre-norm GEMM (tf32_hc_prenorm_gemm, N 24): memory-bound; 'of ceiling' is its share of the "
                  "copy bandwidth, 'of HBM peak' of the datasheet's. Peer: a.float() @ b.T (TF32 allowed) plus "
                  "a.float().square().sum(-1). With splits the partial sums are added outside the timed call.",
    "skip_head_mid": "skip-head-mid (fp8_gemm_nt_skip_head_mid, heads of (128, 64, 128)); peers: dgx.fp8_gemm_nt on "
                     "the same shape (unpadded; the goal: within 2%) and dgx.fp8_gemm_nt followed by the copies into "
                     "the padded layout.",
}
"""Method notes of the single-operation suites (added to the report for the suites that run)."""

OP_CHECK_NOTE = (
    "Single-operation suites: every implementation is checked before it is timed against a float64 reference of its "
    "own operands (fp8_einsum and skip-head-mid: the FP8 values dequantised; the BF16 peers: the BF16 originals) on "
    "a NaN-poisoned output: normwise relative error within 3e-3 (BF16 out), 1e-4 (FP32 out) or 2e-3 (the TF32 "
    "pre-norm GEMM); calc_diff is recorded."
)


def op_notes(suites: Iterable[str]) -> list[str]:
    """The method notes of the single-operation suites among ``suites``."""
    chosen = set(suites)
    names = [s for s in OP_SUITES if s in chosen]
    return [OP_NOTES[s] for s in names] + ([OP_CHECK_NOTE] if names else [])


def mqa_notes(suites: Iterable[str]) -> list[str]:
    """The method notes of the MQA suites among ``suites``."""
    names = [s for s in MQA_SUITES if s in set(suites)]
    out = [note for s in names for note in MQA_NOTES[s]]
    return out + [MQA_CHECK_NOTE] if names else out


def deep_gemm_note(info) -> str:
    """The run's note on DeepGEMM: timed in this run (which version, how), or why not."""
    if not info.found:
        return (f"DeepGEMM was not timed in this run ({info.reason}). 'vs DeepGEMM (other run)' compares with DeepGEMM "
                "figures of another run on another card (docs/PEERS.md), which is no same-run evidence.")
    commit = f", commit {info.commit} ({info.commit_from})" if info.commit else ""
    return (f"DeepGEMM {info.version}{commit} was timed in this run as a peer: its own API on the same input tensors "
            "(converted once, outside the timed call, where it takes another layout), checked against the "
            "reference before timing like every implementation; dgx and DeepGEMM swap which runs first on each "
            "case from one repeat to the next. 'vs DeepGEMM' = DeepGEMM µs / dgx µs from this run; "
            "'vs DeepGEMM (other run)' is a figure of another run on another card (docs/PEERS.md).")


def build_case(shape, seed: int):
    """The inputs and reference of one case (GEMM or MQA)."""
    if is_mqa(shape):
        from .mqa_problems import build_mqa_problem

        return build_mqa_problem(shape, seed)
    if is_moe(shape):
        from .moe_problems import build_moe_problem

        return build_moe_problem(shape, seed)
    if is_op(shape):
        from .op_build import build_op_problem

        return build_op_problem(shape, seed)
    from .problems import build_problem

    return build_problem(shape, seed)


def run_suite(
    suite: str = "all",
    shapes: Iterable[Shape] | None = None,
    shapes_file: str | None = None,
    peers: bool = True,
    repeat: int = 1,
    seed: int = DEFAULT_SEED,
    echo: Callable[[str], None] | None = None,
    warmup: int = WARMUP,
    iters: int = ITERS,
    host: bool = True,
    host_calls: int = HOST_CALLS,
    timer: str = EVENTS,
) -> BenchResults:
    """Run the benchmark and return the recorded results (see :mod:`dgx.bench.results`).

    ``shapes`` (or ``shapes_file``) replaces the built-in suites; ``suite`` filters either. ``timer``
    (``events`` or ``kernel``, :mod:`dgx.bench.timers`) times every case and the ceilings.
    Raises :class:`NoGpu` without a usable GPU and ``ValueError`` on bad arguments.
    """
    say = echo or (lambda s: None)
    suite_names(suite)  # validates
    check_timer(timer)
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if shapes is None and shapes_file is not None:
        shapes, warnings = load_shapes_file(shapes_file, seed)
        for w in warnings:
            say(f"warning: {w}")
    selected = select_shapes(suite, shapes, seed)
    if not selected:
        raise ValueError(f"no shapes to run for suite {suite!r}")
    why = gpu_problem()
    if why:
        raise NoGpu(NO_GPU_PREFIX + why)

    import torch

    from .deepgemm import DeepGemmInfo, find_deep_gemm
    from .moe_impls import moe_impls
    from .op_impls import op_impls
    from .peers import Ctx, impl_order, make_impls
    from .timing import L2Flusher

    deep_gemm = find_deep_gemm() if peers else DeepGemmInfo(reason="peers off (--no-peers)")

    results = BenchResults(
        env={**environment(), **deep_gemm.env()},
        settings={
            "suite": suite,
            "shapes_file": shapes_file,
            "peers": peers,
            "repeat": repeat,
            "seed": seed,
            "timer": timer,
            "warmup": warmup,
            "iters": iters,
            "l2_flush_bytes": 1 << 30,
            "host_calls": host_calls,
            "diff_tolerance": 1e-3,
        },
    )
    gemm = any(shape.suite in GEMM_SUITES for shape in selected)
    results.notes.append(
        f"µs: median of the timed calls ({timer} timer: {TIMER_METHOD[timer]}; L2 flushed by zeroing 1 GB before "
        "each call); with --repeat, the median over repeats of those medians. The ceilings are timed the same way."
    )
    if gemm:
        results.notes += [
            "TFLOPS = 2·M·N·K/t; GB/s = (M·K + K·N + out·M·N)/t with out = 2 bytes (BF16) or 8 (FP32 c read + d "
            "written); grouped: valid rows only, B counted once per group.",
            "Fraction of ceiling: the larger of (FLOPs / FP8 ceiling, bytes / copy bandwidth) over the time taken "
            "(memory-bound rows: the share of the copy bandwidth measured in this run).",
        ]
    results.notes.append("Speedup over a peer = peer µs / dgx µs (> 1: dgx is faster).")
    if gemm:
        results.notes.append("Grouped suites: looped peers make one launch per group on the valid rows (host-known counts).")
    results.notes += mqa_notes(shape.suite for shape in selected)
    results.notes.append(deep_gemm_note(deep_gemm))
    if any(shape.suite in MOE_SUITES for shape in selected):
        results.notes += MOE_NOTES
    results.notes += op_notes(shape.suite for shape in selected)
    say(
        f"dgx bench on {results.env.get('device')} (driver {results.env.get('driver')}, torch "
        f"{results.env.get('torch')}); {timer} timer"
    )
    flush = L2Flusher()
    ctx = Ctx(flush, warmup, iters, timer=timer)
    probe_timer(ctx)
    impls = make_impls(peers, deep_gemm) + moe_impls(peers) + op_impls(peers, deep_gemm)  # each runs on the suites its runs_on accepts
    floor_failed: list[str] = []
    for rep in range(repeat):
        say(f"repeat {rep + 1}/{repeat}: ceilings")
        rr = RepeatResult()
        rr.ceilings, rr.ceiling_notes = measure_ceilings(flush, warmup, iters, timer)
        read_floor = ReadFloor(timer_function(timer), flush, warmup, iters) if gemm else None
        say(
            "  "
            + ", ".join(f"{k} {v:.0f}" for k, v in rr.ceilings.items())
        )
        for shape in selected:
            problem = build_case(shape, seed)
            case = CaseResult(shape)
            try:
                for impl in impl_order(impls, rep):
                    if impl.runs_on(shape.suite):
                        case.order.append(impl.name)
                        case.impls[impl.name] = impl.measure(problem, ctx)
                if read_floor is not None and not floor_failed and shape.suite in GEMM_SUITES:
                    case.read_floor_us = _read_floor_us(read_floor, shape, rr.ceilings, floor_failed)
            finally:
                problem.free()
                del problem
                gc.collect()
                torch.cuda.empty_cache()
            rr.cases.append(case)
            say(_progress_line(case))
        if host and any(shape.suite in GEMM_SUITES for shape in selected):
            say(f"repeat {rep + 1}/{repeat}: host cost per call ({host_calls} calls)")
            rr.host = measure_host(impls, ctx, seed, host_calls)
            for h in rr.host:
                say(
                    f"  {h.pattern:<22} {h.name}: "
                    + (
                        f"{h.cpu_us:.1f} µs CPU/call (plain loop {h.plain_us:.1f})"
                        if h.status == OK
                        else f"{h.status}: {h.reason}"
                    )
                )
        results.repeats.append(rr)
    if floor_failed:
        results.notes.append(f"No read floor in this run: {floor_failed[0]}")
    return results


def _read_floor_us(read_floor: ReadFloor, shape: Shape, ceilings: dict[str, float], failed: list[str]) -> float | None:
    """The read floor of a memory-bound GEMM case (dgx.bench.read_floor), None for the others; a failure is recorded
    in `failed` (the run goes on without floors)."""
    if bound_of(shape, ceilings)[0] != "memory":
        return None
    try:
        return read_floor.us(shape.bytes_moved)
    except Exception as e:  # noqa: BLE001 - reported in the run's notes; the cases' own figures stand
        failed.append(f"{type(e).__name__}: {e}")
        return None


def dgx_failures(results: BenchResults) -> list[str]:
    """Cases where dgx did not run correctly (for the exit code)."""
    bad = []
    for r in results.repeats:
        for c in r.cases:
            it = c.impls.get(DGX)
            if it is not None and it.status != OK:
                bad.append(f"{c.shape.suite} {c.shape.label}: {it.status}: {it.reason}")
    return bad
