"""Several "hosts" on this machine: network namespaces joined by veth pairs through a bridge (in
a namespace of its own, so the host's network is untouched; accl._netns, shared with
perf/multinode.py), with netem adding latency where the kernel has it. Each
namespace runs 2 ranks under its own torchrun (--nnodes/--node-rank/--rdzv-endpoint) and its
own ACCL_HOSTID, so ranks share memory inside a namespace and use TCP across. The ranks check
every collective against numpy (multinode_worker.py); then one namespace's link is cut and every
rank must fail within the timeout with an error naming ranks on the other side. Then the same
checks under one mpirun across 2 namespaces (host names, not ACCL_HOSTID, tell the nodes apart),
and examples/ddp.py (DDP on accl, then gloo, compared) under torchrun across 2 namespaces.

Needs root and `ip netns`; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from accl_testing import PYTHON_DIR, shm_segments
from accl import _netns as netns

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "multinode_worker.py")
DDP_EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "ddp.py")
RANKS_PER_NODE = 2

_WHY_NOT = netns.unusable()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))


@pytest.fixture
def net3():
    net = netns.Net(3, delay_ms=1.0)
    try:
        yield net
    finally:
        net.close()


def _launch_torchrun(net: netns.Net, out: str, phases: str, cut_timeout: float,
                     script: tuple[str, ...] = (WORKER,)) -> list[subprocess.Popen]:
    port = 20000 + int(uuid.uuid4().hex[:4], 16) % 10000
    procs = []
    for i, ns in enumerate(net.ns):
        env = dict(os.environ)
        env.update(
            PYTHONPATH=PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", ""),
            ACCL_HOSTID=f"node{i}",
            ACCL_MN_OUT=out,
            ACCL_MN_PHASES=phases,
            ACCL_MN_CUT_TIMEOUT=str(cut_timeout),
            OMP_NUM_THREADS="1",
            GLOO_SOCKET_IFNAME=net.dev[i],  # the host name resolves to nothing here
        )
        for var in ("ACCL_SOCKET_IFNAME", "ACCL_SOCKET_FAMILY", "ACCL_COMM_ID", "ACCL_ALGO"):
            env.pop(var, None)  # the defaults must find the namespace's own interface
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               f"--nnodes={len(net.ns)}", f"--node-rank={i}",
               f"--nproc-per-node={RANKS_PER_NODE}", "--rdzv-backend=static",
               f"--rdzv-endpoint={net.ip[0]}:{port}", f"--master-addr={net.ip[0]}",
               f"--master-port={port}", *script]
        log = open(os.path.join(out, f"torchrun{i}.log"), "w")
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def _wait_files(out: str, names: list[str], procs: list[subprocess.Popen], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        missing = [n for n in names if not os.path.exists(os.path.join(out, n))]
        if not missing:
            return
        # A rank that failed early reports instead of getting ready.
        for f in sorted(os.listdir(out)):
            if f.startswith("rank") and f.endswith(".json"):
                rep = json.load(open(os.path.join(out, f)))
                if rep.get("failure"):
                    raise AssertionError(f"{f}: {rep['failure']}\n{_logs(out)}")
        if all(p.poll() is not None for p in procs):
            raise AssertionError(f"every torchrun exited; missing {missing}\n{_logs(out)}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds:g} s waiting for {missing}\n{_logs(out)}")


def _logs(out: str) -> str:
    text = ""
    for f in sorted(os.listdir(out)):
        if f.startswith("torchrun"):
            text += f"--- {f}\n" + open(os.path.join(out, f)).read()[-3000:]
    return text


def _stop(procs: list[subprocess.Popen], seconds: float) -> list[int | None]:
    deadline = time.monotonic() + seconds
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    codes = [p.poll() for p in procs]
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return codes


def test_torchrun_three_namespaces_then_cut_link(net3, tmp_path):
    """Every collective over 3 namespaces x 2 ranks, both all-reduce algorithms; then node 2's
    link goes down and every rank fails in time, naming ranks it cannot reach."""
    out = str(tmp_path)
    nranks = len(net3.ns) * RANKS_PER_NODE
    cut_timeout = 4.0
    before = shm_segments()
    procs = _launch_torchrun(net3, out, "check,ring,cut", cut_timeout)
    try:
        _wait_files(out, [f"ready{r}" for r in range(nranks)], procs, 200)
        net3.link(2, False)
        t0 = time.monotonic()
        open(os.path.join(out, "go"), "w").close()
        _wait_files(out, [f"rank{r}.json" for r in range(nranks)], procs, cut_timeout + 30)
        elapsed = time.monotonic() - t0
        # Back up, so that the torchrun agents can finish their exit barrier.
        net3.link(2, True)
        codes = _stop(procs, 60)
    finally:
        _stop(procs, 0)
    reports = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(nranks)]
    for rep in reports:
        assert not rep.get("failure"), rep["failure"]
    assert codes == [0] * len(procs), f"torchrun exit codes {codes}\n{_logs(out)}"
    assert [rep["host"] for rep in reports] == [f"node{r // RANKS_PER_NODE}" for r in range(nranks)]
    for rep in reports:
        assert rep["phases"]["check"] > 100 and rep["phases"]["ring"] > 10, rep
    cut_side = {r for r in range(nranks) if r // RANKS_PER_NODE == 2}
    for r, rep in enumerate(reports):
        cut = rep["phases"]["cut"]
        assert cut["error"] in ("TimeoutError", "RemoteError"), (r, cut)
        assert cut["seconds"] < cut_timeout + 5, (r, cut)
        others = set(range(nranks)) - cut_side if r in cut_side else cut_side
        named = {q for q in others if f"rank {q} " in cut["message"] + " "}
        assert named, f"rank {r}'s error names none of the unreachable ranks {sorted(others)}: " \
                      f"{cut['message']}"
    assert elapsed < cut_timeout + 30
    assert not (shm_segments() - before), "shared memory left behind"


def _mpi_missing() -> str | None:
    from accl import perf_compare

    why = perf_compare.unavailable("mpi")
    if why is None and not shutil.which("unshare"):
        why = "unshare (util-linux) is not installed"
    return why


def test_mpirun_two_namespaces(tmp_path):
    """Every collective over 2 namespaces x 2 ranks under one mpirun (its daemons reach the
    other namespace through `ip netns exec`); no ACCL_HOSTID: each namespace's host name tells
    the nodes apart."""
    why = _mpi_missing()
    if why:
        pytest.skip(f"cannot run Open MPI: {why}")
    from accl import perf_compare

    out = str(tmp_path)
    before = shm_segments()
    with netns.Net(2) as net:
        env = dict(os.environ, ACCL_MN_OUT=out, ACCL_MN_PHASES="check", OMP_NUM_THREADS="1",
                   PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for var in ("ACCL_HOSTID", "ACCL_SOCKET_IFNAME", "ACCL_COMM_ID", "ACCL_ALGO"):
            env.pop(var, None)
        cmd = net.mpirun(perf_compare._mpirun() or "mpirun", RANKS_PER_NODE, out, [
            "--mca", "pml", "ob1", "--mca", "btl", "self,sm,tcp", "--mca",
            "mpi_yield_when_idle", "1", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x",
            "ACCL_MN_OUT", "-x", "ACCL_MN_PHASES", sys.executable, WORKER])
        with open(os.path.join(out, "torchrun0.log"), "w") as log:  # _logs() shows it
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            code = _stop([proc], 240)[0]
    nranks = 2 * RANKS_PER_NODE
    assert code == 0, f"mpirun exited with {code}\n{_logs(out)}"
    reports = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(nranks)]
    for rep in reports:
        assert not rep.get("failure"), rep["failure"]
        assert rep["phases"]["check"] > 90, rep  # 95 checks at 4 ranks
    assert [rep["hostname"] for rep in reports] == [f"node{r // RANKS_PER_NODE}"
                                                     for r in range(nranks)]
    assert not (shm_segments() - before), "shared memory left behind"


def test_ddp_example_two_namespaces(tmp_path):
    """examples/ddp.py (DDP on accl, then on gloo, compared) over 2 namespaces x 2 ranks."""
    pytest.importorskip("torch")
    out = str(tmp_path)
    with netns.Net(2) as net:
        procs = _launch_torchrun(net, out, "", 0, (DDP_EXAMPLE, "--compare", "gloo"))
        codes = _stop(procs, 180)
    assert codes == [0, 0], f"torchrun exit codes {codes}\n{_logs(out)}"
    assert "max |accl - gloo|" in open(os.path.join(out, "torchrun0.log")).read(), _logs(out)
