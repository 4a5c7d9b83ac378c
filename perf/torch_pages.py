"""dist.all_reduce over backend "accl" of tensors from torch's own allocator (as DDP's
buckets), 1-64 MiB float32: median us of 7 loops of 20 calls, the slowest rank's. Run it with
and without THP_MEM_ALLOC_ENABLE=1 (torch's allocator then advises huge pages) to see what the
pages of the buffers cost the kernel's copy (docs/torch.md, "Speed"):

    PYTHONPATH=python python -m accl.launch -n 2 python perf/torch_pages.py
    THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=python python -m accl.launch -n 2 python perf/torch_pages.py
"""

import os
import statistics
import time

import torch
import torch.distributed as dist

import accl.distributed  # noqa: F401  (registers "accl")


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("accl")
    line = []
    for mib in (1, 4, 16, 64):
        t = torch.ones(mib << 18)
        for _ in range(3):
            dist.all_reduce(t)
        loops = []
        for _ in range(7):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(20):
                dist.all_reduce(t)
            loops.append((time.perf_counter() - t0) / 20 * 1e6)
        m = torch.tensor([statistics.median(loops)], dtype=torch.float64)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        line.append(f"{mib} MiB {m.item():.0f} us")
    if dist.get_rank() == 0:
        print("  ".join(line), f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', '')}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
