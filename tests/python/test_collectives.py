"""Every collective, in place and out of place, against a numpy reference.

One spawn per rank count runs the whole matrix (numpy dtypes x counts x ops x roots) so that the
suite stays fast on a small machine.
"""

import os
import time

import numpy as np
import pytest

import accl
from accl_testing import check, check_array, expect_raises, run_ranks

DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64]
OPS = [accl.SUM, accl.PROD, accl.MAX, accl.MIN, accl.AVG]
COUNTS = [0, 1, 1031]
MOVE = None  # "op" of the data-movement collectives
RANKS = [1, 2, 3, 4, 5, 8]


def inputs(dtype, op, n, count, seed):
    """int64 values, one row per rank, whose reductions are exact in `dtype` (no overflow in
    int8, sums of float16 exact)."""
    i = np.arange(count)[None, :]
    r = np.arange(n)[:, None]
    signed = np.dtype(dtype).kind in "if"
    if op == accl.SUM:
        v = (i * 3 + r * 5 + seed) % 5 - (2 if signed else 0)
    elif op == accl.PROD:  # at most ceil(n/4) factors of 2 per element
        v = np.where((i + r + seed) % 4 == 0, 2, 1)
        if signed:
            v = np.where((i * 7 + r * 3 + seed) % 5 == 0, -v, v)
    elif op in (accl.MAX, accl.MIN):
        v = (i * 7 + r * 13 + seed) % 23 - (11 if signed else 0)
    elif op == accl.AVG:  # non-negative: integer AVG rounds toward zero, the same as floor
        v = (i * 3 + r * 5 + seed) % 7
    else:
        v = (i * 7 + r * 31 + seed) % 97
    if np.dtype(dtype) == np.bool_:
        v = v % 2
    return v.astype(np.int64)


def reference(v, op, dtype):
    """The reduction over ranks (axis 0) of inputs(), in `dtype`, and its tolerance."""
    n = v.shape[0]
    dt = np.dtype(dtype)
    if dt == np.bool_:
        red = v.max(0) if op in (accl.SUM, accl.MAX) else v.min(0)
        return red.astype(dt), 0.0
    if op == accl.SUM:
        red = v.sum(0)
    elif op == accl.PROD:
        red = v.prod(0)
    elif op == accl.MAX:
        red = v.max(0)
    elif op == accl.MIN:
        red = v.min(0)
    elif dt.kind == "f":
        # AVG of floats may be computed as sum / n or sum * (1 / n): allow for the rounding.
        return v.sum(0) / n, 2 * float(np.finfo(dt).eps)
    else:
        red = v.sum(0) // n
    return red.astype(dt), 0.0


class _Checked(np.ndarray):
    """An ndarray subclass: NCCL's collectives check it in Python, where they check plain numpy
    arrays in C++ (_accl.*_arrays); both paths must give the same result."""


def _reducing(comm, dt, count, op, seed, cases):
    n, r = comm.size, comm.rank
    name = f"{np.dtype(dt).name} {accl._types.OP_NAMES[op]} count {count}"
    v = inputs(dt, op, n, count, seed)
    want, rtol = reference(v, op, dt)
    fill = np.full(count, 99).astype(dt)

    x = v[r].astype(dt)
    res = comm.all_reduce(x, op=op)
    check(res is x, "all_reduce in place returns x")
    check_array(x, want, f"all_reduce in place {name}", rtol)

    x = v[r].astype(dt)
    out = fill.copy()
    res = comm.all_reduce(x, op=op, out=out)
    check(res is out, "all_reduce returns out")
    check_array(out, want, f"all_reduce {name}", rtol)
    check_array(x, v[r].astype(dt), f"all_reduce {name} leaves x alone")

    x = v[r].astype(dt).view(_Checked)
    res = comm.all_reduce(x, op=op)
    check(res is x, "all_reduce in place returns x (checked in Python)")
    check_array(x, want, f"all_reduce in place {name} (checked in Python)", rtol)

    root = seed % n
    x = v[r].astype(dt)
    res = comm.reduce(x, root=root, op=op)
    if r == root:
        check(res is x, "reduce in place returns x at root")
        check_array(x, want, f"reduce in place {name} root {root}", rtol)
    else:
        check(res is None, "reduce returns None off the root")
        check_array(x, v[r].astype(dt), f"reduce in place {name} leaves non-root x alone")

    root = (seed + 1) % n
    x = v[r].astype(dt)
    out = fill.copy()
    res = comm.reduce(x, root=root, op=op, out=out)
    if r == root:
        check(res is out, "reduce returns out at root")
        check_array(out, want, f"reduce {name} root {root}", rtol)
    else:
        check(res is None and (out == fill).all(), "reduce leaves out alone off the root")
    out = fill.copy().view(_Checked)
    res = comm.reduce(v[r].astype(dt).view(_Checked), root=root, op=op, out=out)
    if r == root:
        check(res is out, "reduce returns out at root (checked in Python)")
        check_array(out, want, f"reduce {name} root {root} (checked in Python)", rtol)

    vs = inputs(dt, op, n, n * count, seed)
    want_all, rtol = reference(vs, op, dt)
    want = want_all[r * count:(r + 1) * count]
    x = vs[r].astype(dt)
    res = comm.reduce_scatter(x, op=op)
    check(res.size == count, "reduce_scatter in place returns one block")
    if count:
        check(res.__array_interface__["data"][0] == x[r * count:].__array_interface__["data"][0],
              "reduce_scatter in place returns a view of block `rank` of x")
    check_array(res, want, f"reduce_scatter in place {name}", rtol)
    res = comm.reduce_scatter(vs[r].astype(dt).view(_Checked), op=op)
    check_array(res, want, f"reduce_scatter in place {name} (checked in Python)", rtol)

    x = vs[r].astype(dt)
    out = fill.copy()
    res = comm.reduce_scatter(x, op=op, out=out)
    check(res is out, "reduce_scatter returns out")
    check_array(out, want, f"reduce_scatter {name}", rtol)
    cases[0] += 9


def _moving(comm, dt, count, seed, cases):
    n, r = comm.size, comm.rank
    name = f"{np.dtype(dt).name} count {count}"
    v = inputs(dt, MOVE, n, n * count, seed).astype(dt)  # row r: rank r's n blocks of count
    blocks = v.reshape(n, n, count)  # [rank, block]
    sentinel = np.ones(1, dt)[0] if np.dtype(dt) == np.bool_ else 99

    root = seed % n
    x = v[r, :count].copy()
    check(comm.broadcast(x, root=root) is x, "broadcast in place returns x")
    check_array(x, v[root, :count], f"broadcast in place {name} root {root}")
    out = np.full(count, sentinel, dt)
    src = v[r, :count].copy()
    # Off the root x is not read: pass None on some ranks, a buffer on others.
    res = comm.broadcast(src if r == root or r % 2 else None, root=root, out=out)
    check(res is out, "broadcast returns out")
    check_array(out, v[root, :count], f"broadcast {name} root {root}")
    check_array(src, v[r, :count], f"broadcast {name} leaves x alone")
    out = np.full(count, sentinel, dt).view(_Checked)
    check(comm.broadcast(src.view(_Checked), root=root, out=out) is out,
          "broadcast returns out (checked in Python)")
    check_array(out, v[root, :count], f"broadcast {name} root {root} (checked in Python)")

    buf = np.full(n * count, sentinel, dt)
    buf[r * count:(r + 1) * count] = blocks[r, 0]
    check(comm.all_gather(buf) is buf, "all_gather in place returns x")
    check_array(buf, blocks[:, 0], f"all_gather in place {name}")
    x = blocks[r, 0].copy()
    out = np.full(n * count, sentinel, dt)
    check(comm.all_gather(x, out=out) is out, "all_gather returns out")
    check_array(out, blocks[:, 0], f"all_gather {name}")
    buf = np.full(n * count, sentinel, dt).view(_Checked)
    buf[r * count:(r + 1) * count] = blocks[r, 0]
    check(comm.all_gather(buf) is buf, "all_gather in place returns x (checked in Python)")
    check_array(buf, blocks[:, 0], f"all_gather in place {name} (checked in Python)")

    x = v[r].copy()
    check(comm.all_to_all(x) is x, "all_to_all in place returns x")
    check_array(x, blocks[:, r], f"all_to_all in place {name}")
    x = v[r].copy()
    out = np.full(n * count, sentinel, dt)
    check(comm.all_to_all(x, out=out) is out, "all_to_all returns out")
    check_array(out, blocks[:, r], f"all_to_all {name}")
    check_array(x, v[r], f"all_to_all {name} leaves x alone")

    root = (seed + 1) % n
    if r == root:
        buf = np.full(n * count, sentinel, dt)
        buf[root * count:(root + 1) * count] = blocks[root, 0]
        check(comm.gather(buf, root=root) is buf, "gather in place returns x at root")
        check_array(buf, blocks[:, 0], f"gather in place {name} root {root}")
    else:
        check(comm.gather(blocks[r, 0].copy(), root=root) is None, "gather: None off the root")
    out = np.full(n * count, sentinel, dt)
    res = comm.gather(blocks[r, 0].copy(), root=root, out=out)
    if r == root:
        check(res is out, "gather returns out at root")
        check_array(out, blocks[:, 0], f"gather {name} root {root}")
    else:
        check(res is None and (out == sentinel).all(), "gather leaves out alone off the root")

    root = (seed + 2) % n
    if r == root:
        x = v[root].copy()
        res = comm.scatter(x, root=root)
        check(res.size == count and (count == 0 or np.shares_memory(res, x[root * count:])),
              "scatter in place returns a view of block `root` of x")
    else:
        x = np.full(count, sentinel, dt)
        res = comm.scatter(x, root=root)
        check(res is x, "scatter off the root returns x")
    check_array(res, blocks[root, r], f"scatter in place {name} root {root}")
    out = np.full(count, sentinel, dt)
    res = comm.scatter(v[root].copy() if r == root else None, root=root, out=out)
    check(res is out, "scatter returns out")
    check_array(out, blocks[root, r], f"scatter {name} root {root}")
    cases[0] += 12


def collectives_worker(comm, dtypes=DTYPES, counts=COUNTS):
    cases = [0]
    seed = 0
    for dt in dtypes:
        for count in counts:
            for op in OPS:
                seed += 1
                _reducing(comm, dt, count, op, seed, cases)
            seed += 1
            _moving(comm, dt, count, seed, cases)
    # bool travels as uint8; SUM is "or" and PROD "and", as in torch.distributed.
    for count in counts:
        for op in (accl.SUM, accl.PROD, accl.MAX, accl.MIN):
            seed += 1
            _reducing(comm, np.bool_, count, op, seed, cases)
        seed += 1
        _moving(comm, np.bool_, count, seed, cases)
    expect_raises(accl.InvalidArgumentError, "bool", comm.all_reduce, np.ones(3, bool),
                  op=accl.AVG)
    return cases[0]


@pytest.mark.parametrize("nranks", RANKS)
def test_collectives(nranks):
    cases = run_ranks(nranks, collectives_worker)
    assert cases[0] > 1000 and len(set(cases)) == 1


# Small staging buffers and no direct all-reduce: every message takes many chunks and the
# reduce-scatter + all-gather all-reduce path.
SMALL_SLOTS = {"ACCL_SHM_SLOT_BYTES": "4096", "ACCL_SHM_P2P_BYTES": "4096",
               "ACCL_ALLREDUCE_DIRECT_MAX": "0"}


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_collectives_small_slots(nranks):
    dtypes = [np.int8, np.float16, np.int32, np.float64]
    run_ranks(nranks, collectives_worker, dtypes, [1031, 5003], env=SMALL_SLOTS)


@pytest.mark.parametrize("nranks", [3])
def test_collectives_beyond_one_slot(nranks):
    """Messages larger than a 1 MiB staging slot, with odd counts."""
    run_ranks(nranks, collectives_worker, [np.float32, np.int8], [300001],
              env={"ACCL_SHM_SLOT_BYTES": "1048576"})


def large_worker(comm):
    n, r = comm.size, comm.rank
    count = (64 << 20) // 4  # 64 MiB of float32
    i = np.arange(count, dtype=np.int64)
    want = sum(((i + j) % 7).astype(np.float32) for j in range(n))
    x = ((i + r) % 7).astype(np.float32)
    comm.all_reduce(x)
    check_array(x, want, "64 MiB all_reduce in place")
    x = ((i + r) % 7).astype(np.float32)
    out = np.empty_like(x)
    comm.all_reduce(x, out=out, op=accl.MAX)
    check_array(out, np.minimum(i % 7 + n - 1, 6), "64 MiB all_reduce MAX")
    # A gather in place of 5 MiB blocks: the root reads them from its peers.
    block = (5 << 20) // 4
    root = n - 1
    g = np.zeros(n * block, np.float32)
    base = (i[:block] % 1009).astype(np.float32)
    g[r * block:(r + 1) * block] = base + r
    comm.gather(g if r == root else g[r * block:(r + 1) * block], root=root)
    if r == root:
        check_array(g, np.concatenate([base + q for q in range(n)]), "5 MiB-block gather in place")
    return True


@pytest.mark.parametrize("nranks", [2, 4])
def test_all_reduce_64mib(nranks):
    run_ranks(nranks, large_worker)


@pytest.mark.parametrize("nranks", [2, 3])
def test_collectives_single_copy(nranks):
    # ACCL_CMA_MIN=1: every collective copies straight between the ranks at every size but the
    # rooted ones that fit a box (all-reduce and reduce in several chunks from 1000003 float32;
    # test_forced_algorithms forces theirs at every size). float16 takes the
    # single-copy reductions' one pass over all inputs from 3 ranks on.
    run_ranks(nranks, collectives_worker, [np.int8, np.float16, np.float32],
              [0, 1, 1031, 300001, 1000003],
              env={"ACCL_CMA_MIN": "1", "ACCL_ALLREDUCE_DIRECT_MAX": "0"})


def rounds_once_worker(comm):
    # 1 + 3 * 2**-11 in float16 is a tie between 1 + 2**-10 and 1 + 2**-9, and rounds to the
    # latter (even); added two at a time from the 1.0, each 2**-11 would round away.
    x = np.full(300001, 1.0 if comm.rank == 0 else 2.0**-11, np.float16)
    want = np.full_like(x, np.float16(1 + (comm.size - 1) * 2.0**-11))
    check_array(comm.all_reduce(x), want, "float16 single-copy all_reduce, rounded once")
    return True


def test_single_copy_half_sum_rounds_once():
    run_ranks(4, rounds_once_worker, env={"ACCL_CMA_MIN": "1", "ACCL_ALLREDUCE_DIRECT_MAX": "0"})


# ACCL_ALGO forces an algorithm per collective; every one-node algorithm gives the reference
# result, out of place and in place.
@pytest.mark.parametrize("algo", [
    "allreduce:direct;allgather:direct;broadcast:direct;reducescatter:direct;alltoall:direct;"
    "gather:direct;scatter:direct;reduce:direct", "allreduce:split;reduce:split", "reduce:pull",
    "allreduce:cma;allgather:cma;broadcast:cma;reducescatter:cma;reduce:cma;alltoall:cma;"
    "gather:cma;scatter:cma"])
@pytest.mark.parametrize("nranks", [1, 2])
def test_forced_algorithms(algo, nranks):
    run_ranks(nranks, collectives_worker, [np.float32, np.int32], [1, 1031, 300001],
              env={"ACCL_ALGO": algo})


def bad_algo_worker(uid, rank, size, algo, host, message):
    os.environ["ACCL_ALGO"] = algo
    if host:
        os.environ["ACCL_HOSTID"] = f"node{rank}"
    expect_raises(accl.InvalidArgumentError, message, accl.Communicator, uid, rank, size)


@pytest.mark.parametrize("algo,host,message", [
    ("allreduce:split;allgather:bogus", False, "unknown item 'allgather:bogus' (known: "),
    ("allreduce:cma", True, "allreduce:cma works inside one node; this communicator spans 2"),
])
def test_forced_algorithm_errors(algo, host, message):
    run_ranks(2, bad_algo_worker, algo, host, message, make_comm=False)


def rooted_stream_worker(comm, sizes):
    """Back-to-back broadcasts, scatters, gathers and reduces, from rotating roots mixed with
    all-reduces; then 300 of each kind in turn from rank 0, with one rank now and then asleep.
    Small ones go through a ring of 64 boxes, and a rank that only writes (a broadcast's or
    scatter's root, a gather's or reduce's other ranks) goes on without waiting for the
    readers; its next write to a box waits until every rank has left the step that read it.
    A writer that overwrote data still to be read shows here: in the second part the sleeper
    is a reader (the last rank, or the root of a gather or reduce) and the writers run past
    the last box meanwhile."""
    n, r = comm.size, comm.rank
    kinds = ["broadcast", "scatter", "gather", "reduce"]
    for i in range(1500):
        if i < 300:
            kind, root, count = kinds[i % 4], i % n, sizes[i % len(sizes)]
        else:  # only what fits a box (32 KiB) with more ranks than cores
            kind, root, count = kinds[(i - 300) // 300], 0, min(sizes[i % len(sizes)], 4000 // n)
            sleeper = n - 1 if kind in ("broadcast", "scatter") else 0
            if i % 100 == 0 and r == sleeper:
                time.sleep(0.002)
        what = f"{kind} {i} from {root}"
        mine = np.full(count, r * 1000 + i, np.int64)
        blocks = np.stack([np.full(count, q * 1000 + i, np.int64) for q in range(n)])
        if kind == "broadcast":
            comm.broadcast(mine, root=root)
            check_array(mine, blocks[root], what)
        elif kind == "scatter":
            got = comm.scatter(blocks.copy() if r == root else np.empty(count, np.int64),
                               root=root)
            check_array(got, blocks[r], what)
        elif kind == "gather":
            got = comm.gather(mine, root=root, out=np.empty((n, count), np.int64))
            if r == root:
                check_array(got, blocks, what)
        else:
            got = comm.reduce(mine, root=root)
            if r == root:
                check_array(got, blocks.sum(axis=0), what)
        if i < 300 and i % 7 == 0:
            s = comm.all_reduce(np.full(3, i, np.int64))
            check_array(s, np.full(3, i * n, np.int64), f"all_reduce after {what}")


@pytest.mark.parametrize("nranks", [1, 3, 4])
def test_rooted_stream(nranks):
    # Small slots make the larger sizes take several chunks: the writers run ahead chunk by
    # chunk.
    run_ranks(nranks, rooted_stream_worker, [1, 5, 300, 2000],
              env={"ACCL_SHM_SLOT_BYTES": "4096"})


@pytest.mark.parametrize("nranks", [2, 4])
def test_rooted_stream_single_copy(nranks):
    # What does not fit a box goes single copy, where the others wait for the root alone and
    # leave as soon as their copy is made, and only the root waits for them; 320 KB broadcasts
    # in place have the root write a share into every reader, which waits for it at the end.
    run_ranks(nranks, rooted_stream_worker, [1, 300, 9000, 40000], env={"ACCL_CMA_MIN": "1"})


def host_memory_worker(comm):
    """Arrays from accl.host_empty, which the peers map and copy without the kernel."""
    n, r = comm.size, comm.rank
    count = 300001  # 1.2 MB of float32: single copy
    base = np.arange(count, dtype=np.float32)
    x = accl.host_empty(count, np.float32)
    check_array(x, np.zeros(count, np.float32), "a new host_empty array")
    x[:] = base + r
    out = accl.host_empty((n, count), np.float32)
    comm.all_gather(x, out=out)
    check_array(out, np.stack([base + q for q in range(n)]), "all_gather into host memory")
    # From a 4 MiB output a rank reads its peers' blocks, unless its output is host memory,
    # into which they write theirs: both kinds of output in one call, in and out of place.
    big = 1 << 20
    want = np.stack([np.arange(big, dtype=np.float32) + q for q in range(n)])
    out = accl.host_empty((n, big), np.float32) if r % 2 else np.empty((n, big), np.float32)
    comm.all_gather(want[r].copy(), out=out)
    check_array(out, want, "4 MiB-block all_gather, shared and private outputs")
    out[:] = 0
    out[r] = want[r]
    comm.all_gather(out[r], out=out)
    check_array(out, want, "in-place 4 MiB-block all_gather, shared and private outputs")
    # all_to_all likewise, with rank 1 in place, whose peers read its blocks from its copy at
    # every size, and rank 2's output in host memory, which its peers write; 256 KiB blocks
    # are otherwise written, 4 MiB ones read.
    for block in (1 << 16, big):
        blocks = [np.arange(n * block, dtype=np.float32) + 1000 * q for q in range(n)]
        want = np.concatenate([b[r * block:(r + 1) * block] for b in blocks])
        out = (accl.host_empty(n * block, np.float32) if r == 2
               else np.empty(n * block, np.float32))
        if r == 1:
            out[:] = blocks[r]
            comm.all_to_all(out)
        else:
            comm.all_to_all(blocks[r], out=out)
        check_array(out, want, f"all_to_all of {block * 4 >> 10} KiB blocks, in and out of "
                    "place, shared and private")
    private = base + r  # a peer's private input meets this rank's shared output
    y = accl.host_empty(count, np.float32)
    comm.all_reduce(private if r % 2 else x, out=y)
    check_array(y, n * base + sum(range(n)), "all_reduce, shared and private inputs")
    comm.all_reduce(x)
    check_array(x, n * base + sum(range(n)), "in-place all_reduce of host memory")
    return True


def test_host_memory():
    a = accl.host_empty((3, 5), "float64")
    assert a.shape == (3, 5) and a.dtype == np.float64 and not a.any()
    assert a.ctypes.data % 4096 == 0 and accl.host_empty(0, np.int8).size == 0
    run_ranks(3, host_memory_worker)


def bound_worker(uid, rank, size, log):
    # Two ranks to a CPU, neighbours together, as accl.launch binds more ranks than cores.
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank * len(cpus) // size]})
    os.dup2(os.open(f"{log}.{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    comm = accl.Communicator(uid, rank, size)
    for root in range(size):
        x = np.full(64, rank, np.float32)
        check_array(comm.broadcast(x, root=root), np.full(64, root, np.float32), "broadcast")
    # A ring of exchanges: each rank waits for the one before it, and its CPU's other rank
    # waits for it in turn, so its waits poll instead of yielding where that rank has read all
    # it sent. Polling where the other could run would hold each wait until it sleeps (2 ms).
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    start = time.monotonic()
    for i in range(3000):
        got = np.empty(i % 3 + 1, np.int64)
        with accl.group():
            comm.send(np.full(i % 3 + 1, rank * 10000 + i, np.int64), nxt)
            comm.recv(got, prv)
        check_array(got, np.full(i % 3 + 1, prv * 10000 + i, np.int64), f"exchange {i}")
    took = time.monotonic() - start
    comm.destroy()
    return took


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or (os.cpu_count() or 1) > 4,
                    reason="needs 2-4 CPUs to run twice as many ranks as cores, bound in pairs")
def test_waits_spin_only_for_ranks_bound_elsewhere(tmp_path):
    """With more ranks than cores, a wait for a box's writer bound to other CPUs spins before it
    yields; one for a writer that shares this rank's CPU yields at once. A send/recv that waits
    for one peer only polls while the other ranks bound to its CPU wait for it (a ring of 3000
    exchanges took 0.13 s; polling while they could run, 3.7 s)."""
    size = 2 * os.cpu_count()
    cpus = sorted(os.sched_getaffinity(0))
    took = run_ranks(size, bound_worker, str(tmp_path / "log"), make_comm=False,
                     env={"ACCL_DEBUG": "INFO", "ACCL_DEBUG_SUBSYS": "SHM"})
    for r in range(size):
        mine = cpus[r * len(cpus) // size]
        apart = [q for q in range(size) if cpus[q * len(cpus) // size] != mine]
        mates = [q for q in range(size) if q != r and cpus[q * len(cpus) // size] == mine]
        text = (tmp_path / f"log.{r}").read_text()
        for want in (f"bound to other CPUs ({','.join(map(str, apart)) or 'none'}) spin",
                     f"others bound to its CPU ({','.join(map(str, mates)) or 'none'}) wait"):
            assert want in text, f"rank {r} bound to CPU {mine}: {want!r} not in {text!r}"
    assert max(took) < 1.5, f"3000 exchanges in a ring took {max(took):.2f} s"
