"""Soak: 10,000 random collectives (random op, size, dtype, reduction and root) across 4 ranks,
every result checked against numpy, while memory, file descriptors, threads and /dev/shm stay
flat."""

import os
import resource

import numpy as np

import accl
from accl_testing import check, run_ranks

DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64, np.float16]
COLLS = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
         "gather", "scatter", "barrier"]
OPS = [accl.SUM, accl.MAX, accl.MIN]


def usage():
    fds = len(os.listdir("/proc/self/fd"))
    threads = len(os.listdir("/proc/self/task"))
    shm = len([n for n in os.listdir("/dev/shm") if "accl" in n])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, fds, threads, shm


def soak_worker(comm, iterations):
    n, me = comm.size, comm.rank
    plan = np.random.default_rng(1234)  # the same plan on every rank
    baseline = None
    for it in range(iterations):
        coll = COLLS[plan.integers(len(COLLS))]
        dt = DTYPES[plan.integers(len(DTYPES))]
        count = int(plan.integers(0, 3000)) if plan.random() < 0.95 else int(plan.integers(0, 300000))
        op, root, seed = OPS[plan.integers(len(OPS))], int(plan.integers(n)), int(plan.integers(1 << 30))
        # Every rank's input is known everywhere, so each rank computes the reference itself;
        # small values keep float16 sums exact.
        data = np.random.default_rng(seed).integers(0, 8, size=(n, count * n)).astype(dt)
        mine = data[me].copy()
        what = f"iteration {it}: {coll} {np.dtype(dt).name} count {count} root {root}"
        if coll == "all_reduce":
            want = {accl.SUM: data.sum(0, dtype=dt), accl.MAX: data.max(0), accl.MIN: data.min(0)}[op]
            check(np.array_equal(comm.all_reduce(mine, op=op), want), what)
        elif coll == "broadcast":
            check(np.array_equal(comm.broadcast(mine, root=root), data[root]), what)
        elif coll == "reduce":
            res = comm.reduce(mine, root=root, op=op)
            if me == root:
                want = {accl.SUM: data.sum(0, dtype=dt), accl.MAX: data.max(0), accl.MIN: data.min(0)}[op]
                check(np.array_equal(res, want), what)
        elif coll == "all_gather":
            out = np.empty(count * n * n, dt)
            check(np.array_equal(comm.all_gather(mine, out=out), data.reshape(-1)), what)
        elif coll == "reduce_scatter":
            res = comm.reduce_scatter(mine, op=op)
            full = {accl.SUM: data.sum(0, dtype=dt), accl.MAX: data.max(0), accl.MIN: data.min(0)}[op]
            check(np.array_equal(res, full[me * count:(me + 1) * count]), what)
        elif coll == "all_to_all":
            want = data.reshape(n, n, count)[:, me, :].reshape(-1)
            check(np.array_equal(comm.all_to_all(mine), want), what)
        elif coll == "gather":
            block = mine[:count].copy()
            out = np.empty(count * n, dt) if me == root else None
            res = comm.gather(block, root=root, out=out)
            if me == root:
                check(np.array_equal(res, data[:, :count].reshape(-1)), what)
        elif coll == "scatter":
            src = data[root] if me == root else None
            out = np.empty(count, dt)
            res = comm.scatter(src.copy() if src is not None else None, root=root, out=out)
            check(np.array_equal(res, data[root][me * count:(me + 1) * count]), what)
        else:
            comm.barrier()
        if it == iterations // 10:
            baseline = usage()
    end = usage()
    rss0, fds0, th0, shm0 = baseline
    rss1, fds1, th1, shm1 = end
    check(fds1 <= fds0 and th1 <= th0 and shm1 <= shm0,
          f"resources grew: fds {fds0}->{fds1}, threads {th0}->{th1}, shm {shm0}->{shm1}")
    check(rss1 - rss0 < 64 * 1024, f"peak RSS grew by {(rss1 - rss0) // 1024} MiB")
    return end


def test_soak_10000_random_collectives():
    run_ranks(4, soak_worker, 10000, timeout=600)
