"""torch.compile with functional collectives on the backend "accl" (cpu tensors).

    python -m accl.launch -n 2 examples/compile_functional.py                    # inductor
    python -m accl.launch -n 2 examples/compile_functional.py --compile-backend aot_eager

torch.distributed._functional_collectives returns new tensors instead of writing in place, so
torch.compile can trace them into its graph (as ops of torch.ops._c10d_functional). Those ops
find the process group by name and call its backend, here accl, so nothing accl-specific is
needed to compile them. The compiled function uses all_reduce, all_gather_tensor and
reduce_scatter_tensor, and every rank checks the results against values computed locally.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import accl.distributed  # noqa: F401  (registers "accl"; automatic when accl is pip-installed)


def step(x: torch.Tensor, group: dist.ProcessGroup) -> tuple[torch.Tensor, ...]:
    total = funcol.all_reduce(x * 2, "sum", group)                  # sum over ranks of 2x
    gathered = funcol.all_gather_tensor(x + 1, 0, group)            # ranks' x + 1, stacked
    scattered = funcol.reduce_scatter_tensor(gathered, "sum", 0, group)  # N * (x_r + 1) at r
    return total.relu(), gathered, scattered * 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="accl")
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile's backend")
    args = ap.parse_args()
    dist.init_process_group(args.backend)  # env://: torchrun or accl.launch set the variables
    rank, n = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    compiled = torch.compile(step, backend=args.compile_backend, fullgraph=True)

    xs = [torch.arange(8, dtype=torch.float32).reshape(4, 2) - 3 + r for r in range(n)]
    total, gathered, scattered = compiled(xs[rank], group)
    want_total = sum(2 * x for x in xs).relu()
    want_gathered = torch.cat([x + 1 for x in xs])
    want_scattered = 0.5 * n * (xs[rank] + 1)
    ok = (torch.equal(total, want_total) and torch.equal(gathered, want_gathered)
          and torch.equal(scattered, want_scattered))
    # A second call with the same shapes reuses the compiled graph.
    total2, _, _ = compiled(xs[rank] * 0, group)
    ok = ok and torch.equal(total2, torch.zeros(4, 2))
    dist.destroy_process_group()
    if not ok:
        print(f"rank {rank}: wrong results: {total}, {gathered}, {scattered}", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"{args.backend}: torch.compile(backend={args.compile_backend!r}) with functional "
              f"collectives on {n} ranks: results match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
