"""Several "hosts" on this machine: network namespaces joined by veth pairs through a bridge (in
a namespace of its own, so the host's network is untouched), with netem adding latency. Each
namespace runs 2 ranks under its own torchrun (--nnodes/--node-rank/--rdzv-endpoint) and its
own ACCL_HOSTID, so ranks share memory inside a namespace and use TCP across. The ranks check
every collective against numpy (multinode_worker.py); then one namespace's link is cut and every
rank must fail within the timeout with an error naming ranks on the other side.

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

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "multinode_worker.py")
RANKS_PER_NODE = 2


def _netns_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if not shutil.which("ip"):
        return "the ip tool (iproute2) is not installed"
    name = f"acclprobe{uuid.uuid4().hex[:6]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


_WHY_NOT = _netns_usable()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))


def sh(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r


class Net:
    """`nodes` namespaces 10.<b>.<c>.<i+1>/24 on veth v<tag><i>a, bridged in a hub namespace."""

    def __init__(self, nodes: int, delay_ms: float = 1.0):
        self.tag = uuid.uuid4().hex[:5]  # interface names stay under 15 characters
        self.hub = f"accl-{self.tag}-hub"
        self.ns = [f"accl-{self.tag}-n{i}" for i in range(nodes)]
        self.dev = [f"v{self.tag}{i}a" for i in range(nodes)]
        b = int(self.tag[:2], 16) % 200 + 20
        c = int(self.tag[2:4], 16)
        self.ip = [f"10.{b}.{c}.{i + 1}" for i in range(nodes)]
        self.netem = False
        try:
            sh("ip", "netns", "add", self.hub)
            sh("ip", "link", "add", "br0", "type", "bridge", ns=self.hub)
            sh("ip", "link", "set", "br0", "up", ns=self.hub)
            for i, ns in enumerate(self.ns):
                sh("ip", "netns", "add", ns)
                peer = f"v{self.tag}{i}b"
                sh("ip", "link", "add", self.dev[i], "netns", ns, "type", "veth", "peer", "name",
                   peer, "netns", self.hub)
                sh("ip", "link", "set", peer, "master", "br0", ns=self.hub)
                sh("ip", "link", "set", peer, "up", ns=self.hub)
                sh("ip", "addr", "add", f"{self.ip[i]}/24", "dev", self.dev[i], ns=ns)
                sh("ip", "link", "set", self.dev[i], "up", ns=ns)
                sh("ip", "link", "set", "lo", "up", ns=ns)
                # Latency where the kernel has netem (sch_netem); without it the hop is
                # still a real one, through two veth pairs and a bridge.
                if delay_ms and shutil.which("tc"):
                    r = sh("tc", "qdisc", "add", "dev", self.dev[i], "root", "netem", "delay",
                           f"{delay_ms}ms", ns=ns, check=False)
                    self.netem = r.returncode == 0
        except BaseException:
            self.close()
            raise

    def link(self, i: int, up: bool) -> None:
        sh("ip", "link", "set", self.dev[i], "up" if up else "down", ns=self.ns[i])

    def close(self) -> None:
        # Deleting a namespace deletes its veth ends; the peers go with them.
        for ns in self.ns + [self.hub]:
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def net3():
    net = Net(3)
    try:
        yield net
    finally:
        net.close()


def _launch_torchrun(net: Net, out: str, phases: str, cut_timeout: float) -> list[subprocess.Popen]:
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
        )
        for var in ("ACCL_SOCKET_IFNAME", "ACCL_SOCKET_FAMILY", "ACCL_COMM_ID", "ACCL_ALGO"):
            env.pop(var, None)  # the defaults must find the namespace's own interface
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               f"--nnodes={len(net.ns)}", f"--node-rank={i}",
               f"--nproc-per-node={RANKS_PER_NODE}", "--rdzv-backend=static",
               f"--rdzv-endpoint={net.ip[0]}:{port}", f"--master-addr={net.ip[0]}",
               f"--master-port={port}", WORKER]
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
