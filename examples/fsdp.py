"""FSDP2 (torch.distributed.fsdp.fully_shard) training on the backend "accl" (cpu tensors).

    python -m accl.launch -n 2 examples/fsdp.py                  # or: torchrun --nproc-per-node 2
    python -m accl.launch -n 2 examples/fsdp.py --compare gloo   # same run on gloo, then compare

Each layer of a small MLP, then the whole model, is sharded across the ranks with fully_shard:
every rank holds 1/N of each parameter, all-gathers the layer's parameters
(all_gather_into_tensor) before using it and reduce-scatters the gradients
(reduce_scatter_tensor) after backward. Each rank trains on its own batches; the loss, averaged
over the ranks, must go down. With --compare, the same run repeats on the other backend and the
full parameters are compared: the backends may add the ranks' gradients in a different order,
so they agree within float32 rounding (TOLERANCE relative to the largest parameter), not
necessarily bit for bit.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import accl.distributed  # noqa: F401  (registers "accl"; automatic when accl is pip-installed)

STEPS = 8
TOLERANCE = 1e-5


def train(backend: str, store: dist.Store | None = None) -> tuple[list[torch.Tensor], list[float]]:
    if store is None:
        dist.init_process_group(backend)  # env://: torchrun or accl.launch set the variables
    else:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group(backend, store=dist.PrefixStore(backend, store), rank=rank,
                                world_size=size)
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial model on every rank, before sharding
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 4))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(1 + rank)  # each rank sees its own batches
    w = torch.randn(16, 4, generator=torch.Generator().manual_seed(99))  # the function to learn
    losses = []
    for _ in range(STEPS):
        x = torch.randn(32, 16, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), x @ w)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        losses.append(avg.item())
    # Full parameters (DTensor shards gathered) to compare with another run.
    params = [p.full_tensor().detach().clone() for p in model.parameters()]
    dist.destroy_process_group()
    return params, losses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="accl")
    ap.add_argument("--compare", metavar="BACKEND", help="repeat on BACKEND and compare")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    store = None
    if args.compare:
        # One store for both runs: a second env:// rendezvous could find the port still taken.
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              int(os.environ["WORLD_SIZE"]), is_master=rank == 0)
    params, losses = train(args.backend, store)
    if rank == 0:
        print(f"{args.backend}: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {STEPS} steps")
    if not losses[-1] < 0.7 * losses[0]:
        print(f"rank {rank}: the loss did not go down: {losses}", file=sys.stderr)
        return 1
    if not args.compare:
        return 0
    other, _ = train(args.compare, store)
    # Frees the model, and with it the last reference to the group, before exit: gloo's worker
    # threads live as long as its group, and one that drops a finished op's tensors during
    # interpreter exit aborts the process ("terminate called without an active exception",
    # pytorch/pytorch#190489).
    gc.collect()
    diff = max((a - b).abs().max().item() for a, b in zip(params, other))
    scale = max(b.abs().max().item() for b in other)
    if rank == 0:
        print(f"max |{args.backend} - {args.compare}| = {diff:.3g} (largest parameter {scale:.3g})")
    if diff > TOLERANCE * scale:
        print(f"rank {rank}: parameters differ by {diff:.3g} > {TOLERANCE} * {scale:.3g}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
