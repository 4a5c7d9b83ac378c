"""Reliability: the flight recorder and `python -m accl.trace`, and ACCL_CHECK's detection of
ranks that disagree on a collective."""

import json
import subprocess
import sys
import time

import numpy as np
import accl
from accl_testing import check, expect_raises, run_ranks


def hang_worker(comm, directory):
    x = np.ones(16, np.float32)
    comm.all_reduce(x)
    comm.broadcast(x, root=1)
    if comm.rank == 2:
        # Rank 2 never calls the next all-reduce: the others time out and dump their recorders.
        time.sleep(3)
        trace = comm.dump_trace(f"{directory}/accl-trace-{comm.dump_trace()['comm']}-rank2.json")
        check([o["op"] for o in trace["ops"]] == ["acclAllReduce", "acclBroadcast"],
              f"rank 2's recorder: {trace['ops']}")
        check(all(o["state"] == "done" for o in trace["ops"]), "rank 2's ops are done")
        return
    msg = expect_raises(accl.errors.TimeoutError, "acclAllReduce", comm.all_reduce, x)
    check("ranks 2 to arrive" in msg, f"the timeout names rank 2: {msg}")


def test_flight_recorder_names_the_rank_behind(tmp_path):
    run_ranks(3, hang_worker, str(tmp_path), comm_timeout=1.5,
              env={"ACCL_TRACE_DIR": str(tmp_path)})
    dumps = sorted(tmp_path.glob("accl-trace-*.json"))
    assert len(dumps) == 3, dumps
    rank0 = json.loads(dumps[0].read_text())
    assert rank0["rank"] == 0 and rank0["nranks"] == 3 and "timed out" in rank0["reason"]
    assert [o["state"] for o in rank0["ops"]] == ["done", "done", "failed"], rank0["ops"]
    # Times in microseconds since the communicator began: in order, and the failed all-reduce
    # lasted its 1.5 s timeout.
    for o in rank0["ops"]:
        assert 0 <= o["queued_us"] <= o["started_us"] <= o["done_us"], o
    failed = rank0["ops"][2]
    assert 1.4e6 < failed["done_us"] - failed["started_us"] < 3e6, failed
    out = subprocess.run([sys.executable, "-m", "accl.trace", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "=> behind: rank 2 (newest #2 acclBroadcast); the others wait in #3 acclAllReduce" \
        in out.stdout, out.stdout


def ring_worker(comm):
    x = np.ones(4, np.float32)
    for _ in range(5):
        comm.all_reduce(x)
    peer = 1 - comm.rank
    with accl.group():
        comm.send(np.full(4, comm.rank, np.float32), peer)
        got = comm.recv(np.empty(4, np.float32), peer)
    check(np.all(got == peer), f"the group's receive: {got}")
    # A collective that moves nothing takes no number and no place in the recorder.
    empty = np.empty(0, np.float32)
    comm.all_gather(empty, out=empty)
    for _ in range(5):
        comm.all_reduce(x)
    ops = comm.dump_trace()["ops"]
    # ACCL_TRACE_BUFFER=5 keeps the last 8 of the 12 operations: the capacity is rounded up to a
    # power of two.
    check([o["seq"] for o in ops] == list(range(5, 13)) and
          all(o["op"] != "acclAllGather" for o in ops), f"the recorder's ops: {ops}")
    check(all(o["state"] == "done" for o in ops), f"states: {ops}")
    for o in ops:
        check(0 <= o["queued_us"] <= o["started_us"] <= o["done_us"], f"times out of order: {o}")
    send, recv = ops[1], ops[2]
    check((send["op"], recv["op"]) == ("acclSend", "acclRecv"), f"the group: {send}, {recv}")
    # A group's operations are queued, start and end together.
    check(all(send[k] == recv[k] for k in ("queued_us", "started_us", "done_us")),
          f"the group's stamps: {send}, {recv}")


def test_flight_recorder_keeps_a_power_of_two_and_stamps_groups_once():
    run_ranks(2, ring_worker, env={"ACCL_TRACE_BUFFER": "5"})


def mismatch_worker(comm):
    x = np.ones(8, np.float32)
    # Rank 1 calls a different collective, then a different count; rank 2 a different root.
    if comm.rank == 1:
        msg = expect_raises(accl.InvalidUsageError, "ACCL_CHECK", comm.all_gather,
                            np.ones(8 * comm.size, np.float32))
    else:
        msg = expect_raises(accl.InvalidUsageError, "ACCL_CHECK", comm.all_reduce, x)
    check("rank 1 called acclAllGather" in msg and "rank 0 called acclAllReduce" in msg, msg)
    msg = expect_raises(accl.InvalidUsageError, "ACCL_CHECK", comm.all_reduce,
                        x[:4] if comm.rank == 1 else x)
    check("rank 1 called acclAllReduce #2 (count 4, float32, sum)" in msg, msg)
    msg = expect_raises(accl.InvalidUsageError, "ACCL_CHECK", comm.broadcast, x,
                        2 if comm.rank == 2 else 0)
    check("rank 2 called acclBroadcast" in msg and "root 2" in msg, msg)
    # A collective of nothing is compared too (it would leave the others waiting).
    msg = expect_raises(accl.InvalidUsageError, "ACCL_CHECK", comm.all_reduce,
                        x[:0] if comm.rank == 1 else x)
    check("rank 1 called acclAllReduce #4 (count 0, float32, sum)" in msg, msg)
    # Nothing moved: the communicator still works.
    y = np.full(8, comm.rank, np.float32)
    comm.all_reduce(y)
    check(np.all(y == sum(range(comm.size))), f"all_reduce after the mismatches: {y}")
    # Every rank numbered that all_reduce the same, the one that passed nothing too.
    last = np.array([comm.dump_trace()["ops"][-1]["seq"]], np.int64)
    seqs = comm.all_gather(last, out=np.empty(comm.size, np.int64))
    check(list(seqs) == [5] * comm.size, f"each rank's number of the last all_reduce: {seqs}")


def test_check_names_the_rank_that_disagrees():
    run_ranks(3, mismatch_worker, env={"ACCL_CHECK": "1"})
