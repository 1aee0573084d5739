"""An expert-parallel DeepSeek-V3 MoE block on dgx inside a torch.distributed program.

Each rank holds ``experts / world`` experts. A layer takes the rank's tokens and their top-k routing, sends every
token to every rank (with its weights for that rank's experts), runs the rank's experts as dgx M-grouped masked FP8
GEMMs (GEMM1 -> SwiGLU + FP8 quantisation -> GEMM2), sums each token's weighted expert outputs on the expert's rank,
and sends the partial sums back (in BF16, as engines combine), where the ranks' parts are added in rank order. Both
exchanges are NCCL all-to-alls of fixed size, so the whole layer is captured in one CUDA graph per rank and replayed
with new tokens and routing.

Why every token goes to every rank: with DeepSeek-V3's top-8 of 256 experts a token reaches nearly every rank of a
small expert-parallel group (of 32 experts over 2 ranks, a token misses a rank with probability C(16,8)/C(32,8) =
0.1%; over 4 ranks, 7%), so a fixed-size broadcast sends almost only bytes that are needed and keeps every shape
static for graph capture. Large groups (dozens of ranks) want per-rank compaction instead, as dedicated dispatch
libraries do.

Run on a host with two (or four) GPUs::

    torchrun --nproc-per-node 2 -m dgx.examples.moe_expert_parallel --experts 32 --tokens 128

It checks that every rank's output equals the one-GPU block's bitwise (the same experts, tokens and kernel choices
on one GPU, no communication), then times the captured layer and the two all-to-alls alone, and rank 0 prints a
JSON line: time per layer, communication time and share. ``--json F`` also writes it to a file.

The routing, compaction and combination below are plain torch, device-agnostic, and take the expert computation as a
function, so they run on CPU processes too (the repository's tests run them over the gloo backend).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer as one rank sees it."""

    world: int
    experts: int
    tokens: int  # per rank
    topk: int = 8
    hidden: int = 7168
    intermediate: int = 2048

    def __post_init__(self) -> None:
        for name in ("world", "experts", "tokens", "topk", "hidden", "intermediate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int; got {value!r}")
        if self.experts % self.world:
            raise ValueError(f"experts: expected a multiple of world = {self.world}; got {self.experts}")
        if self.topk > self.experts:
            raise ValueError(f"topk: expected at most experts = {self.experts}; got {self.topk}")

    @property
    def local_experts(self) -> int:
        return self.experts // self.world

    @property
    def rows(self) -> int:
        """Rows of each local expert's buffer: every token of every rank, the most one expert can receive."""
        return self.world * self.tokens


def dense_routing(topk_idx: torch.Tensor, topk_weights: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[T, k] expert ids and weights -> (mask [T, E] float 0/1, weights [T, E] float32): a token's weight per expert."""
    t = topk_idx.shape[0]
    mask = torch.zeros((t, experts), dtype=torch.float32, device=topk_idx.device)
    mask.scatter_(1, topk_idx.long(), 1.0)
    weights = torch.zeros((t, experts), dtype=torch.float32, device=topk_idx.device)
    weights.scatter_(1, topk_idx.long(), topk_weights.float())
    return mask, weights


def compaction(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """valid [E_l, R] bool -> (source [E_l, R] int64, slot [E_l, R] int64, masked_m [E_l] int32).

    Expert e's compacted row i is row ``source[e, i]`` (its valid rows first, in order; the rest repeat some row and
    lie past masked_m[e], where no kernel reads). Row r's place in the flat ``[E_l * R]`` compacted buffer is
    ``slot[e, r]`` = e * R + its rank among e's valid rows, or ``E_l * R`` (past the end) when it did not go to e.
    Rows keep their order, so the one-GPU block and the distributed one give each expert its rows alike."""
    e_l, r = valid.shape
    source = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    pos = torch.cumsum(valid.to(torch.int64), dim=1) - 1
    base = torch.arange(e_l, device=valid.device, dtype=torch.int64).unsqueeze(1) * r
    slot = torch.where(valid, base + pos, torch.full_like(pos, e_l * r))
    return source, slot, valid.sum(dim=1).to(torch.int32)


def gather_rows(rows: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """rows [R, ...], source [E_l, R] -> [E_l, R, ...]: each expert's rows in compacted order (one gather)."""
    flat = rows.reshape(rows.shape[0], -1)
    if flat.dtype.itemsize == 1 and flat.dtype != torch.uint8:  # no FP8 gather kernels: move bytes
        return flat.view(torch.uint8).index_select(0, source.reshape(-1)).view(rows.dtype).view(
            *source.shape, *rows.shape[1:])
    return flat.index_select(0, source.reshape(-1)).view(*source.shape, *rows.shape[1:])


def weighted_sum(y: torch.Tensor, slot: torch.Tensor, weights: torch.Tensor, fan_out: int) -> torch.Tensor:
    """y [E_l, R, H] (compacted expert outputs), slot [E_l, R] (from :func:`compaction`), weights [E_l, R], fan_out
    (the most local experts one row can go to) -> [R, H] float32: each row's weighted sum over its experts, added in
    expert order. Rows an expert did not get add nothing (its buffer past masked_m may hold anything, NaN included)."""
    e_l, r = slot.shape
    width = min(fan_out, e_l)
    got = slot.transpose(0, 1) < e_l * r  # [R, E_l]
    experts = torch.argsort((~got).to(torch.int8), dim=1, stable=True)[:, :width]  # a row's experts, in order
    where = slot.transpose(0, 1).gather(1, experts)  # [R, width]
    valid = where < e_l * r
    w = weights.transpose(0, 1).gather(1, experts)
    rows = y.reshape(e_l * r, -1).index_select(0, torch.where(valid, where, 0).reshape(-1)).view(r, width, -1)
    terms = torch.where(valid.unsqueeze(2), rows.float() * w.unsqueeze(2), 0.0)
    out = terms[:, 0].clone()
    for j in range(1, width):
        out += terms[:, j]
    return out


ExpertFn = Callable[[Sequence[torch.Tensor], torch.Tensor, int], torch.Tensor]
"""(compacted per-token parts, each [E_l, R, ...]; masked_m [E_l] int32; first local expert id) -> y [E_l, R, H]."""


class ExpertParallelMoE:
    """The dispatch -> experts -> combine layer of one rank, with fixed-size buffers (graph-capturable).

    ``parts`` are the per-token tensors the experts read (e.g. FP8 activations and their scales), each ``[T, ...]``.
    ``group`` is the torch.distributed process group, or None for the one-GPU block: ``forward_local`` computes the
    same layer for this rank's tokens with every rank's experts on this device and no communication."""

    def __init__(self, shape: MoeShape, rank: int, experts_fn: ExpertFn, group=None) -> None:
        if not 0 <= rank < shape.world:
            raise ValueError(f"rank: expected 0 <= rank < {shape.world}; got {rank}")
        self.shape, self.rank, self.experts_fn, self.group = shape, rank, experts_fn, group

    def _experts_of(self, rank: int, parts: Sequence[torch.Tensor], route: torch.Tensor) -> torch.Tensor:
        """parts [R, ...] and route [R, E_l, 2] (mask, weight) of rank's experts -> [R, H] BF16 partial sums."""
        s = self.shape
        valid = route[..., 0].transpose(0, 1) > 0  # [E_l, R]
        source, slot, masked_m = compaction(valid)
        y = self.experts_fn([gather_rows(p, source) for p in parts], masked_m, rank * s.local_experts)
        # BF16 partial sums cross the network (as engines combine); the one-GPU path rounds alike
        return weighted_sum(y, slot, route[..., 1].transpose(0, 1), s.topk).to(torch.bfloat16)

    def _routes(self, topk_idx: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """-> [W, T, E_l, 2]: for each rank, each token's (mask, weight) for that rank's experts."""
        s = self.shape
        mask, weights = dense_routing(topk_idx, topk_weights, s.experts)
        route = torch.stack((mask, weights), dim=-1).view(s.tokens, s.world, s.local_experts, 2)
        return route.transpose(0, 1).contiguous()

    def _check(self, parts: Sequence[torch.Tensor], topk_idx: torch.Tensor, topk_weights: torch.Tensor) -> None:
        s = self.shape
        for i, p in enumerate(parts):
            if p.shape[0] != s.tokens:
                raise ValueError(f"parts[{i}]: expected {s.tokens} rows (tokens per rank); got shape {tuple(p.shape)}")
        for name, t in (("topk_idx", topk_idx), ("topk_weights", topk_weights)):
            if tuple(t.shape) != (s.tokens, s.topk):
                raise ValueError(f"{name}: expected shape {(s.tokens, s.topk)}; got {tuple(t.shape)}")

    def forward(self, parts: Sequence[torch.Tensor], topk_idx: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """The layer across the group: this rank's tokens in, their combined outputs [T, H] float32 out."""
        self._check(parts, topk_idx, topk_weights)
        s = self.shape
        routes = self._routes(topk_idx, topk_weights)
        got_parts = [all_to_all(p.unsqueeze(0).expand(s.world, *p.shape).contiguous(), self.group) for p in parts]
        got_route = all_to_all(routes, self.group)  # [W (source rank), T, E_l, 2]
        partial = self._experts_of(self.rank, [p.view(s.rows, *p.shape[2:]) for p in got_parts],
                                   got_route.view(s.rows, s.local_experts, 2))
        back = all_to_all(partial.view(s.world, s.tokens, -1), self.group)  # [W (expert rank), T, H]
        return sum_in_order(back)

    def forward_local(self, parts: Sequence[torch.Tensor], topk_idx: torch.Tensor,
                      topk_weights: torch.Tensor) -> torch.Tensor:
        """The same layer on one device: every rank's experts here, this rank's tokens only (the others' rows
        empty), the ranks' partial sums added in the same order."""
        self._check(parts, topk_idx, topk_weights)
        s = self.shape
        routes = self._routes(topk_idx, topk_weights)
        partials = []
        for r in range(s.world):
            padded = []
            for p in parts:  # this rank's tokens at its own place among the rows, like after the all-to-all
                full = torch.zeros((s.world, *p.shape), dtype=p.dtype, device=p.device)
                full[self.rank] = p
                padded.append(full.view(s.rows, *p.shape[1:]))
            route = torch.zeros((s.world, *routes.shape[1:]), dtype=routes.dtype, device=routes.device)
            route[self.rank] = routes[r]
            part = self._experts_of(r, padded, route.view(s.rows, s.local_experts, 2))
            partials.append(part.view(s.world, s.tokens, -1)[self.rank])
        return sum_in_order(torch.stack(partials))


def all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """x [W, ...] -> [W, ...]: slice i goes to rank i; slice j of the result came from rank j."""
    if group is None:
        return x
    out = torch.empty_like(x)
    src, dst = (x.view(torch.uint8), out.view(torch.uint8)) if x.dtype.itemsize == 1 else (x, out)
    dist.all_to_all_single(dst, src, group=group)
    return out


def sum_in_order(parts: torch.Tensor) -> torch.Tensor:
    """[W, T, H] -> [T, H] float32, added in rank order (the same association on every path)."""
    out = parts[0].float().clone()
    for i in range(1, parts.shape[0]):
        out += parts[i].float()
    return out


# ----------------------------------------------------------------------------------------------------------------
# The experts on dgx's kernels (GPU)


class DgxExperts:
    """A rank's experts as dgx M-grouped masked FP8 GEMMs: GEMM1 [R, hidden] x [2I, hidden] -> SwiGLU and per-token
    FP8 quantisation -> GEMM2 [R, I] x [hidden, I]. Weights of every expert are made from one seed, so each rank can
    build the one-GPU reference with all of them."""

    def __init__(self, shape: MoeShape, device: torch.device, seed: int = 0) -> None:
        import dgx
        from dgx.torch_utils import per_block_cast_to_fp8

        self.dgx, self.shape = dgx, shape
        g = torch.Generator(device=device).manual_seed(seed)
        h, i = shape.hidden, shape.intermediate
        self.w1, self.w2 = [], []
        for _ in range(shape.experts):
            w1 = torch.randn((2 * i, h), device=device, generator=g, dtype=torch.bfloat16) / h**0.5
            w2 = torch.randn((h, i), device=device, generator=g, dtype=torch.bfloat16) / i**0.5
            self.w1.append(per_block_cast_to_fp8(w1))
            self.w2.append(per_block_cast_to_fp8(w2))
        self.expected_m = max(1, shape.rows * shape.topk // shape.experts)
        self._stacked: dict[int, tuple] = {}

    def _weights(self, first: int) -> tuple:
        if first not in self._stacked:
            sl = slice(first, first + self.shape.local_experts)
            stack = lambda ws: (torch.stack([w for w, _ in ws[sl]]), torch.stack([s for _, s in ws[sl]]))
            self._stacked[first] = (stack(self.w1), stack(self.w2))
        return self._stacked[first]

    def __call__(self, parts: Sequence[torch.Tensor], masked_m: torch.Tensor, first: int) -> torch.Tensor:
        x, sfx = parts
        s, dgx = self.shape, self.dgx
        (w1, sf1), (w2, sf2) = self._weights(first)
        e_l, r = s.local_experts, s.rows
        gate_up = torch.empty((e_l, r, 2 * s.intermediate), dtype=torch.bfloat16, device=x.device)
        dgx.m_grouped_fp8_gemm_nt_masked((x, sfx), (w1, sf1), gate_up, masked_m, self.expected_m)
        h, sfh = silu_mul_quant(gate_up, masked_m)
        y = torch.empty((e_l, r, s.hidden), dtype=torch.bfloat16, device=x.device)
        dgx.m_grouped_fp8_gemm_nt_masked((h, sfh), (w2, sf2), y, masked_m, self.expected_m)
        return y


def silu_mul_quant(gate_up: torch.Tensor, masked_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, R, 2I] BF16 -> (FP8 [E, R, I], FP32 scales [E, R, I/128]): dgx's kernel where this dgx has it, else the
    same math in torch."""
    import dgx

    if hasattr(dgx, "silu_mul_quant"):
        return dgx.silu_mul_quant(gate_up, masked_m=masked_m)
    i = gate_up.shape[-1] // 2
    act = torch.nn.functional.silu(gate_up[..., :i].float()) * gate_up[..., i:].float()
    blocks = act.view(*act.shape[:-1], i // 128, 128)
    sf = blocks.abs().amax(dim=-1).clamp(min=1e-4) / 448.0
    q = (blocks * (1.0 / sf).unsqueeze(-1)).to(torch.float8_e4m3fn).view(act.shape)
    return q, sf


def quantise_tokens(x: torch.Tensor) -> list[torch.Tensor]:
    """[T, hidden] BF16 -> [FP8 [T, hidden], FP32 scales [T, hidden/128] row-major] (what is dispatched)."""
    from dgx.torch_utils import per_token_cast_to_fp8

    q, sf = per_token_cast_to_fp8(x, mn_major=False)
    return [q, sf]


def _time_graph(graph: torch.cuda.CUDAGraph, group, replays: int) -> float:
    """Median µs of one replay, every rank starting together."""
    times = []
    for _ in range(replays):
        dist.barrier(group=group)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--tokens", type=int, default=128, help="tokens per rank")
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--intermediate", type=int, default=2048)
    p.add_argument("--replays", type=int, default=50)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    shape = MoeShape(world, args.experts, args.tokens, args.topk, args.hidden, args.intermediate)
    experts = DgxExperts(shape, device)
    group = dist.group.WORLD
    layer = ExpertParallelMoE(shape, rank, experts, group)
    one_gpu = ExpertParallelMoE(shape, rank, experts, None)

    gen = torch.Generator(device=device).manual_seed(1000 + rank)

    def new_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.randn((shape.tokens, shape.hidden), device=device, generator=gen, dtype=torch.bfloat16)
        scores = torch.rand((shape.tokens, shape.experts), device=device, generator=gen)
        w, idx = scores.topk(shape.topk, dim=1)
        return x, idx.to(torch.int32), torch.softmax(w, dim=1)

    # static inputs the graph reads; refilled before each replay
    x0, idx0, w0 = new_inputs()
    parts, idx, wts = quantise_tokens(x0), idx0.clone(), w0.clone()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer.forward(parts, idx, wts)  # warm-up: compiles, loads, NCCL's first call
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = layer.forward(parts, idx, wts)

    equal, diffs = True, []
    for _ in range(3):  # new tokens and routing each time, replayed in the same graph
        x, i_new, w_new = new_inputs()
        for dst, src in zip(parts, quantise_tokens(x)):
            dst.copy_(src)
        idx.copy_(i_new)
        wts.copy_(w_new)
        graph.replay()
        torch.cuda.synchronize()
        ref = one_gpu.forward_local(parts, idx, wts)
        equal = equal and torch.equal(out, ref)
        diffs.append(float((out - ref).abs().max()))
    verdict = torch.tensor([1 if equal else 0], device=device)
    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)

    # the two all-to-alls alone, on the same buffers
    routes = layer._routes(idx, wts)
    send = [q.unsqueeze(0).expand(world, *q.shape).contiguous() for q in parts]
    partial = torch.zeros((world, shape.tokens, shape.hidden), dtype=torch.bfloat16, device=device)
    comm = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for t in send:
            all_to_all(t, group)
        all_to_all(routes, group)
        all_to_all(partial, group)
    torch.cuda.synchronize()
    with torch.cuda.graph(comm, stream=stream):
        for t in send:
            all_to_all(t, group)
        all_to_all(routes, group)
        all_to_all(partial, group)
    layer_us = _time_graph(graph, group, args.replays)
    comm_us = _time_graph(comm, group, args.replays)
    times = torch.tensor([layer_us, comm_us], device=device)
    gathered = [torch.zeros_like(times) for _ in range(world)]
    dist.all_gather(gathered, times)
    if rank == 0:
        per_rank = [[round(float(v), 1) for v in t] for t in gathered]
        layer_max = max(t[0] for t in per_rank)
        comm_max = max(t[1] for t in per_rank)
        result = {
            "device": torch.cuda.get_device_name(device), "world": world, "experts": shape.experts,
            "tokens_per_rank": shape.tokens, "topk": shape.topk, "hidden": shape.hidden,
            "intermediate": shape.intermediate, "equal_to_one_gpu_bitwise": bool(verdict.item()),
            "max_abs_diff_rank0": max(diffs), "layer_us": layer_max, "comm_us": comm_max,
            "comm_share": round(comm_max / layer_max, 3), "per_rank_layer_comm_us": per_rank,
        }
        print(json.dumps(result))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    ok = bool(verdict.item())
    del graph, comm  # graphs that captured NCCL calls must go before the communicator, or teardown can hang
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
