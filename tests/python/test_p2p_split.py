"""send/recv (plain and grouped), group() with collectives, barrier and split."""

import threading

import numpy as np
import pytest

import accl
from accl_testing import check, check_array, run_ranks

RANKS = [1, 2, 3, 4, 5, 8]
DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64, np.bool_]
COUNTS = [0, 1, 1031, 70001]  # 70001 * 8 bytes spans many p2p buffers


def payload(dt, count, src, dst, tag=0):
    v = (np.arange(count) * 7 + src * 31 + dst * 5 + tag) % 97
    return (v % 2 if np.dtype(dt) == np.bool_ else v).astype(dt)


def p2p_worker(comm):
    n, r = comm.size, comm.rank
    right, left = (r + 1) % n, (r - 1) % n
    cases = 0
    for dt in DTYPES:
        for count in COUNTS:
            # A ring in one group: every rank sends and receives at once without deadlock.
            got = np.zeros(count, dt)
            with accl.group():
                comm.send(payload(dt, count, r, right), right)  # a temporary: the group keeps it
                res = comm.recv(got, left)
            check(res is got, "recv returns x")
            check_array(got, payload(dt, count, left, r), f"ring {np.dtype(dt).name} {count}")
            # Pairs (0,1), (2,3), ... one call at a time; two messages arrive in order.
            peer = r ^ 1
            if peer < n:
                a, b = np.zeros(count, dt), np.zeros(count, dt)
                if r % 2 == 0:
                    comm.send(payload(dt, count, r, peer, 1), peer)
                    comm.send(payload(dt, count, r, peer, 2), peer)
                    comm.recv(a, peer)
                else:
                    comm.recv(a, peer)
                    comm.recv(b, peer)
                    comm.send(payload(dt, count, r, peer, 1), peer)
                    check_array(b, payload(dt, count, peer, r, 2), "second message")
                check_array(a, payload(dt, count, peer, r, 1), f"pair {np.dtype(dt).name} {count}")
            cases += 1
    # Everyone exchanges with everyone (itself included) in one group.
    bufs = [np.zeros(1031, np.float32) for _ in range(n)]
    with accl.group():
        for p in range(n):
            comm.send(payload(np.float32, 1031, r, p), p)
            comm.recv(bufs[p], p)
    for p in range(n):
        check_array(bufs[p], payload(np.float32, 1031, p, r), f"all-pairs from {p}")
    # Collectives in a group run in call order at its end.
    xs = [np.full(100 + i, r + i, np.int64) for i in range(3)]
    with accl.group():
        with accl.group():  # groups nest
            comm.all_reduce(xs[0])
        comm.all_reduce(xs[1], op=accl.MAX)
        comm.broadcast(xs[2], root=n - 1)
    check_array(xs[0], np.full(100, n * (n - 1) // 2, np.int64), "grouped all_reduce")
    check_array(xs[1], np.full(101, n, np.int64), "grouped max")
    check_array(xs[2], np.full(102, n - 1 + 2, np.int64), "grouped broadcast")
    return cases


@pytest.mark.parametrize("nranks", RANKS)
def test_p2p_and_group(nranks):
    run_ranks(nranks, p2p_worker)


def split_worker(comm):
    n, r = comm.size, comm.rank
    for _ in range(3):
        comm.barrier()
    # By parity, in reverse order of rank.
    sub = comm.split(r % 2, key=-r)
    mates = [p for p in range(n) if p % 2 == r % 2][::-1]
    check(sub is not None and sub.size == len(mates), f"split size {sub and sub.size}")
    check(sub.rank == mates.index(r), f"split rank {sub.rank}, expected {mates.index(r)}")
    x = np.array([r], np.int64)
    sub.all_reduce(x)
    check(int(x[0]) == sum(mates), f"sum over the split: {x[0]}, expected {sum(mates)}")
    x = np.zeros(sub.size, np.int64)
    x[sub.rank] = r
    sub.all_gather(x)
    check_array(x, mates, "all_gather in the split, in key order")
    sub.barrier()
    # A split of a split, and the parent keeps working meanwhile.
    subsub = sub.split(0)
    check(subsub.size == sub.size and subsub.rank == sub.rank, "split with one color, default key")
    y = np.ones(3, np.float32)
    comm.all_reduce(y)
    subsub.all_reduce(x[:1].copy())
    check_array(y, np.full(3, n, np.float32), "parent after split")
    subsub.destroy()
    sub.destroy()
    # Rank 0 opts out.
    rest = comm.split(None if r == 0 else 7)
    if r == 0:
        check(rest is None, "color None gives None")
    else:
        check(rest.size == n - 1 and rest.rank == r - 1, f"split without rank 0: {rest}")
        z = np.array([1.0])
        rest.all_reduce(z)
        check(z[0] == n - 1, "all_reduce without rank 0")
        rest.destroy()
    comm.barrier()
    return True


@pytest.mark.parametrize("nranks", RANKS)
def test_split_and_barrier(nranks):
    run_ranks(nranks, split_worker)


def threads_worker(comm):
    """Two communicators of the same ranks, each driven by its own thread at the same time."""
    comms = [comm.split(0), comm.split(0)]
    errors = []

    def loop(c, value):
        try:
            for _ in range(200):
                x = np.full(1000, value)
                c.all_reduce(x)
                check_array(x, np.full(1000, value * c.size), f"all_reduce of {value}")
                c.barrier()
        except BaseException as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=loop, args=(c, i + 1.0)) for i, c in enumerate(comms)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for c in comms:
        c.destroy()
    check(not errors, f"thread errors: {errors}")
    return True


@pytest.mark.parametrize("nranks", [2, 3])
def test_communicators_on_threads(nranks):
    run_ranks(nranks, threads_worker)
