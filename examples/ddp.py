"""DDP training on the torch.distributed backend "accl" (cpu tensors).

    python -m accl.launch -n 2 examples/ddp.py                  # or: torchrun --nproc-per-node 2
    python -m accl.launch -n 2 examples/ddp.py --compare gloo   # same run on gloo, then compare

A tiny MLP trains for a few steps on data that differs per rank, so the gradients must be
averaged across ranks to keep the replicas equal. With --compare, the same run repeats on the
other backend and rank 0 prints the largest difference between the final parameters. The two
backends may add the ranks' gradients in a different order, so they agree to float32 rounding
(a tolerance of 1e-5 relative), not necessarily bit for bit.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import accl.distributed  # noqa: F401  (registers "accl"; automatic when accl is pip-installed)

STEPS = 5
TOLERANCE = 1e-5


def train(backend: str, store: dist.Store | None = None) -> list[torch.Tensor]:
    if store is None:
        dist.init_process_group(backend)  # env://: torchrun or accl.launch set the variables
    else:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group(backend, store=dist.PrefixStore(backend, store), rank=rank,
                                world_size=size)
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    # A small bucket size, so that several buckets are reduced while backward still runs.
    ddp = DDP(model, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1 + rank)  # each rank sees its own batches
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=data)
        y = torch.randn(8, 4, generator=data)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    params = [p.detach().clone() for p in model.parameters()]
    # The replicas must still be equal: compare each with rank 0's.
    for p in params:
        ref = p.clone()
        dist.broadcast(ref, src=0)
        if not torch.equal(ref, p):
            raise SystemExit(f"rank {rank}: replicas diverged on {backend}")
    dist.destroy_process_group()
    # Freeing the model frees DDP's Reducer and with it the process group. gloo's destructor
    # joins its worker threads while holding the GIL, and hangs if one of them still waits for
    # the GIL to free a finished op (a torch issue; accl lets go of the GIL there). A short
    # sleep lets them finish first.
    time.sleep(0.2)
    del ddp, model, ref
    return params


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
    params = train(args.backend, store)
    if rank == 0:
        print(f"{args.backend}: trained {STEPS} steps, first parameters "
              f"{params[0].flatten()[:3].tolist()}")
    if not args.compare:
        return 0
    other = train(args.compare, store)
    gc.collect()  # frees the gloo group before exit: see examples/fsdp.py
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
