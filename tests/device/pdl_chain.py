"""Programmatic dependent launch (dgx.set_pdl) on the chain serving runs back to back: the four GEMMs of one
DeepSeek-V3 decode layer at M = 64 (N x K: 2112 x 7168, 24576 x 1536, 7168 x 16384, 4096 x 7168).

- graph: the chain repeated --repeat times in one CUDA graph, captured with PDL off and with PDL on; each graph
  replayed --replays times per round (CUDA events around every replay, replays queued back to back), --rounds
  rounds alternating which mode goes first; µs per chain = median replay time / repeat.
- eager: the same chain launched from Python (--repeat chains between two events), off and on alike; the host's
  time per chain is printed too, since at M = 64 the launches can be what the GPU waits for.
- each GEMM alone in a graph of 40 launches, off and on: µs per GEMM.
Outputs are checked: bitwise equal between PDL off and on (graph and eager), and the first chain's against the
float64 reference of the dequantised inputs.

    python pdl_chain.py [--m 64] [--repeat 10] [--replays 200] [--rounds 6] [--json FILE]
    (from tests/device/, repository on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
import dgx  # noqa: E402
from dgx import launch  # noqa: E402
from gpu_gemm_utils import check_dense, make_dense  # noqa: E402

# N x K: the fused q_a/kv_a projection, q_b, o_proj and the shared expert's gate/up, each reading the hidden state
# (or the LoRA rank, or the heads' outputs) of 64 tokens.
SHAPES = [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168)]
PER_GEMM_LAUNCHES = 40


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


def run_chain(gemms, repeat: int) -> None:
    for _ in range(repeat):
        for a, b, d in gemms:
            dgx.fp8_gemm_nt(a, b, d)


def capture(fn, pdl: bool, stream) -> torch.cuda.CUDAGraph:
    dgx.set_pdl(pdl)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    dgx.set_pdl(False)
    return graph


def time_replays(graph, replays: int, stream) -> list[float]:
    """µs of each of `replays` back-to-back replays (events around each)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    with torch.cuda.stream(stream):
        for start, end in events:
            start.record(stream)
            graph.replay()
            end.record(stream)
    stream.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in events]


def time_eager(fn, reps: int, stream) -> tuple[list[float], list[float]]:
    """(GPU µs, host µs) of each of `reps` calls of fn, events around each, calls queued back to back."""
    gpu, host = [], []
    events = []
    with torch.cuda.stream(stream):
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record(stream)
            fn()
            end.record(stream)
            host.append((time.perf_counter() - t0) * 1e6)
            events.append((start, end))
    stream.synchronize()
    gpu = [s.elapsed_time(e) * 1e3 for s, e in events]
    return gpu, host


def alternate(timers: dict, rounds: int) -> dict[str, list[float]]:
    """Runs each timer (mode -> callable returning a list of µs) once per round, the order reversed every other
    round; returns every sample per mode and prints the per-round medians."""
    samples: dict[str, list[float]] = {mode: [] for mode in timers}
    modes = list(timers)
    for r in range(rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        line = []
        for mode in order:
            got = timers[mode]()
            samples[mode] += got
            line.append(f"{mode} {statistics.median(got):8.2f}")
        print(f"    round {r}: " + "   ".join(line))
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=10, help="chains per graph replay (and per eager sample)")
    ap.add_argument("--replays", type=int, default=200, help="graph replays per mode per round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", help="write the results as JSON to this file")
    args = ap.parse_args()

    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; M = {args.m}, chain x{args.repeat} per sample")
    gemms, inputs = [], []
    for i, (n, k) in enumerate(SHAPES):
        a, b, a_fp8, b_fp8, d = make_dense(args.m, n, k, seed=i)
        gemms.append((a_fp8, b_fp8, d))
        inputs.append((a, b))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())

    # Compile, load and check outside any capture.
    with torch.cuda.stream(stream):
        dgx.set_pdl(False)
        run_chain(gemms, 1)
        stream.synchronize()
        for (a, b), (a_fp8, b_fp8, d) in zip(inputs, gemms):
            check_dense(d, a, b, a_fp8, b_fp8)
        reference = [d.clone() for _, _, d in gemms]
        for _, _, d in gemms:
            d.fill_(float("nan"))
        dgx.set_pdl(True)
        run_chain(gemms, 1)
        stream.synchronize()
        dgx.set_pdl(False)
    for (_, _, d), ref in zip(gemms, reference):
        assert torch.equal(bits(d), bits(ref)), "eager PDL on differs from PDL off"
    for plan in getattr(launch, "_plans", {}).values():  # the kernels the chain runs
        print(f"  {plan.config.kernel_name}: grid {plan.launcher.shape.grid[0]}, cluster {plan.launcher.shape.cluster[0]}")

    graphs = {pdl: capture(lambda: run_chain(gemms, args.repeat), pdl, stream) for pdl in (False, True)}
    for pdl, graph in graphs.items():
        with torch.cuda.stream(stream):
            for _, _, d in gemms:
                d.fill_(float("nan"))
            graph.replay()
        stream.synchronize()
        for (_, _, d), ref in zip(gemms, reference):
            assert torch.equal(bits(d), bits(ref)), f"graph with PDL {'on' if pdl else 'off'} differs from eager PDL off"
    print("outputs: bitwise equal (eager and graph, PDL off and on)")
    for graph in graphs.values():  # warm-up
        time_replays(graph, 20, stream)

    results = {"device": props.name, "m": args.m, "repeat": args.repeat}
    print(f"graph replays (µs per replay of {args.repeat} chains), median per round:")
    samples = alternate({"off": lambda: time_replays(graphs[False], args.replays, stream),
                         "on": lambda: time_replays(graphs[True], args.replays, stream)}, args.rounds)
    off, on = (statistics.median(samples[m]) / args.repeat for m in ("off", "on"))
    results["graph_us_per_chain"] = {"off": off, "on": on}
    print(f"graph: PDL off {off:7.2f} µs/chain   PDL on {on:7.2f} µs/chain   gain {off - on:6.2f} µs "
          f"({(off - on) / off * 100:5.2f}%, {off / on:.4f}x)")

    eager_host: dict[bool, list[float]] = {False: [], True: []}

    def eager(pdl: bool, record: bool = True):
        def run():
            dgx.set_pdl(pdl)
            gpu, host = time_eager(lambda: run_chain(gemms, args.repeat), max(10, args.replays // 10), stream)
            dgx.set_pdl(False)
            if record:
                eager_host[pdl] += host
            return gpu
        return run

    eager(False, record=False)()  # warm-up
    eager(True, record=False)()
    print(f"eager (µs per {args.repeat} chains launched from Python), median per round:")
    samples = alternate({"off": eager(False), "on": eager(True)}, args.rounds)
    e_off, e_on = (statistics.median(samples[m]) / args.repeat for m in ("off", "on"))
    h_off, h_on = (statistics.median(eager_host[p]) / args.repeat for p in (False, True))
    results["eager_us_per_chain"] = {"off": e_off, "on": e_on, "host_off": h_off, "host_on": h_on}
    print(f"eager: PDL off {e_off:7.2f} µs/chain   PDL on {e_on:7.2f} µs/chain   gain {e_off - e_on:6.2f} µs "
          f"({(e_off - e_on) / e_off * 100:5.2f}%); host {h_off:.1f} / {h_on:.1f} µs per chain")
    for (_, _, d), ref in zip(gemms, reference):
        assert torch.equal(bits(d), bits(ref)), "outputs changed during the timing runs"

    print(f"each GEMM alone, {PER_GEMM_LAUNCHES} launches per graph (µs per GEMM):")
    results["per_gemm_us"] = {}
    for (n, k), (a_fp8, b_fp8, d) in zip(SHAPES, gemms):
        def one(a_fp8=a_fp8, b_fp8=b_fp8, d=d):
            for _ in range(PER_GEMM_LAUNCHES):
                dgx.fp8_gemm_nt(a_fp8, b_fp8, d)
        g = {pdl: capture(one, pdl, stream) for pdl in (False, True)}
        for graph in g.values():
            time_replays(graph, 10, stream)
        per = {}
        for r in range(args.rounds):
            for pdl in ((False, True) if r % 2 == 0 else (True, False)):
                per.setdefault(pdl, []).extend(time_replays(g[pdl], max(10, args.replays // 4), stream))
        o, p = (statistics.median(per[x]) / PER_GEMM_LAUNCHES for x in (False, True))
        results["per_gemm_us"][f"{n}x{k}"] = {"off": o, "on": p}
        print(f"  {args.m}x{n}x{k}: PDL off {o:7.2f}   on {p:7.2f}   gain {o - p:5.2f} µs ({(o - p) / o * 100:5.2f}%)")
        del g
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
