"""The expert-parallel example's routing, compaction and combination (dgx/examples/moe_expert_parallel.py) on CPU:
two gloo processes against the one-device block and a direct reference; the GPU run is on the device."""

from __future__ import annotations

import os
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist
import torch.multiprocessing as mp

from dgx.examples.moe_expert_parallel import ExpertParallelMoE, MoeShape, compaction, gather_rows, weighted_sum

HIDDEN, FFN = 16, 8


def _weights(experts: int) -> torch.Tensor:
    return torch.randn((experts, HIDDEN, HIDDEN), generator=torch.Generator().manual_seed(7))


def _experts_fn(weights: torch.Tensor):
    def run(parts, masked_m, first):
        (x,) = parts
        e_l = x.shape[0]
        y = torch.einsum("erh,eoh->ero", x, weights[first:first + e_l])
        for e in range(e_l):  # rows past masked_m hold garbage, as a kernel's untouched output would
            y[e, int(masked_m[e]):] = float("nan")
        return y
    return run


def _inputs(shape: MoeShape, rank: int):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn((shape.tokens, HIDDEN), generator=g)
    idx = torch.rand((shape.tokens, shape.experts), generator=g).topk(shape.topk, dim=1).indices.to(torch.int32)
    w = torch.softmax(torch.rand((shape.tokens, shape.topk), generator=g), dim=1)
    return x, idx, w


def _direct(shape: MoeShape, weights, x, idx, w) -> torch.Tensor:
    out = torch.zeros((shape.tokens, HIDDEN), dtype=torch.float64)
    for t in range(shape.tokens):
        for j in range(shape.topk):
            out[t] += float(w[t, j]) * (weights[int(idx[t, j])].double() @ x[t].double())
    return out


def _rank_main(rank: int, world: int, port: int, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shape = MoeShape(world=world, experts=8, tokens=12, topk=3, hidden=HIDDEN, intermediate=FFN)
    weights = _weights(shape.experts)
    fn = _experts_fn(weights)
    x, idx, w = _inputs(shape, rank)
    out = ExpertParallelMoE(shape, rank, fn, dist.group.WORLD).forward([x], idx, w)
    local = ExpertParallelMoE(shape, rank, fn, None).forward_local([x], idx, w)
    torch.save({"out": out, "local": local, "direct": _direct(shape, weights, x, idx, w)},
               os.path.join(result_dir, f"{rank}.pt"))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo")
def test_two_ranks_equal_the_one_device_block_bitwise(tmp_path):
    mp.spawn(_rank_main, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert torch.equal(got["out"], got["local"]), f"rank {rank}: the distributed layer differs from one device"
        assert not torch.isnan(got["out"]).any()
        # the ranks' partial sums cross as BF16: within BF16 rounding of a float64 reference
        err = (got["out"].double() - got["direct"]).abs().max()
        assert err <= 2e-2 * got["direct"].abs().max(), float(err)


def test_compaction_keeps_row_order_and_counts():
    valid = torch.tensor([[True, False, True, True], [False, False, False, False], [False, True, False, True]])
    source, slot, masked_m = compaction(valid)
    assert masked_m.tolist() == [3, 0, 2]
    end = 3 * 4
    assert slot.tolist() == [[0, end, 1, 2], [end] * 4, [end, 8, end, 9]]
    assert source[0, :3].tolist() == [0, 2, 3] and source[2, :2].tolist() == [1, 3]
    rows = torch.arange(4, dtype=torch.float32).unsqueeze(1) * torch.ones(1, 2)
    got = gather_rows(rows, source)
    assert got.shape == (3, 4, 2)
    assert got[0, :3, 0].tolist() == [0.0, 2.0, 3.0] and got[2, :2, 0].tolist() == [1.0, 3.0]
    fp8 = gather_rows(rows.to(torch.float8_e4m3fn), source)  # moved as bytes
    assert fp8.dtype == torch.float8_e4m3fn and fp8[0, :3, 1].float().tolist() == [0.0, 2.0, 3.0]


def test_weighted_sum_ignores_rows_past_the_counts():
    valid = torch.tensor([[True, True], [False, True]])
    _, slot, _ = compaction(valid)
    y = torch.full((2, 2, 3), float("nan"))
    y[0, 0], y[0, 1], y[1, 0] = 1.0, 2.0, 4.0
    weights = torch.tensor([[0.5, 0.25], [0.0, 1.0]])
    for fan_out in (1, 2, 8):
        out = weighted_sum(y, slot, weights, fan_out)
        second = [0.5] * 3 if fan_out == 1 else [0.5 + 4.0] * 3  # fan_out 1 keeps each row's first expert only
        assert out.tolist() == [[0.5] * 3, second]


@pytest.mark.parametrize("kwargs, needle", [
    (dict(world=2, experts=7, tokens=4), "multiple of world"),
    (dict(world=2, experts=4, tokens=4, topk=5), "topk"),
    (dict(world=0, experts=4, tokens=4), "world"),
])
def test_shape_errors_name_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        MoeShape(**kwargs)
