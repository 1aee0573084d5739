"""DeepGEMM's ``deep_gemm.utils.dist``: the torch.distributed helpers its multi-GPU tests use (one process per GPU,
NCCL), in plain torch."""

from __future__ import annotations

import inspect

import torch

__all__ = ["init_dist", "uneven_all_gather", "dist_print"]

_state = {"local_rank": None}


def init_dist(local_rank: int, num_local_ranks: int):
    """Joins the NCCL process group of num_local_ranks processes per node (MASTER_ADDR, MASTER_PORT, WORLD_SIZE =
    nodes, RANK = node rank, as DeepGEMM reads them), makes CUDA device local_rank current and the default device.
    Returns (rank, world size, a group of all ranks)."""
    import torch.distributed as dist

    from ...env import distributed_rendezvous

    ip, port, nodes, node_rank = distributed_rendezvous()
    _state["local_rank"] = local_rank
    kwargs = {"backend": "nccl", "init_method": f"tcp://{ip}:{port}", "world_size": nodes * num_local_ranks,
              "rank": node_rank * num_local_ranks + local_rank}
    if "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = torch.device(f"cuda:{local_rank}")
    dist.init_process_group(**kwargs)
    torch.set_default_device("cuda")
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), dist.new_group(list(range(num_local_ranks * nodes)))


def uneven_all_gather(tensor, dim: int = 0, group=None):
    """All ranks' tensors concatenated along `dim`, where their sizes along `dim` may differ."""
    import torch.distributed as dist

    size = torch.tensor([tensor.shape[dim]], device=tensor.device, dtype=torch.long)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, size, group=group)
    sizes = [int(s.item()) for s in sizes]
    longest = max(sizes)
    padded = tensor.contiguous()
    if tensor.shape[dim] < longest:
        shape = list(tensor.shape)
        shape[dim] = longest - tensor.shape[dim]
        padded = torch.cat([padded, torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)], dim=dim)
    gathered = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(gathered, padded, group=group)
    return torch.cat([g.narrow(dim, 0, n) for g, n in zip(gathered, sizes)], dim=dim)


def dist_print(s: str = "", once_in_node: bool = False) -> None:
    """Prints s (on local rank 0 only with once_in_node), then waits for every rank."""
    import torch.distributed as dist

    if _state["local_rank"] is None:
        raise RuntimeError("dist_print: call init_dist first")
    if not once_in_node or _state["local_rank"] == 0:
        print(s, flush=True)
    dist.barrier()
