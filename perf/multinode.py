"""A collective across nodes over a rate-limited link: accl, gloo and Open MPI in the same run.

Builds `--nodes` network namespaces (accl._netns, the same code the multi-node test uses) whose
links are limited to each `--rates` value in turn (tc tbf on both ends of each node's veth:
`rate` bits/s each way per node), runs the accl.perf all_reduce sweep on `--ranks-per-node`
ranks per node for every library, interleaved pass by pass (`--op`: all_reduce, all_gather or
reduce_scatter or broadcast), and prints per size the median time and busbw of each library and
their ratio to the link-limited optimum, the same for the first three (broadcast's is B):

    busbw_opt = B · N(n-1) / ((N-1) n)      B: link rate in bytes/s, N nodes, n = N·k ranks

(docs/performance.md, "Across nodes", derives it). Every rank is started directly with the
variables torchrun would give it (RANK, WORLD_SIZE, MASTER_ADDR, ...) inside its node's
namespace, ACCL_HOSTID naming the node; Open MPI runs under one mpirun in node 0's namespace
that reaches the other nodes through an "ssh" agent which is `ip netns exec` (plm_ssh_agent,
see accl._netns), with btl self,sm,tcp (shared memory inside a node, TCP across, as accl).

Needs root. Run from a built tree:
    PYTHONPATH=python .venv/bin/python perf/multinode.py [-J out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

from accl import _netns as netns
from accl import perf_compare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYDIR = os.path.join(ROOT, "python")


def optimum_busbw(rate_bits: int, nodes: int, nranks: int, op: str = "all_reduce") -> float:
    """GB/s: the busbw of an all-reduce whose inter-node traffic runs at the link rate. An
    all-gather or reduce-scatter of the same size gets the same: each node's link must carry the
    other nodes' (N-1)k blocks of m = size/n, so time = (N-1)·size/(N·B), and busbw is
    size/time·(n-1)/n. A broadcast's root node must send the S bytes out at least once:
    time = S/B, and busbw = algbw = B."""
    b = rate_bits / 8 / 1e9
    if op == "broadcast":
        return b
    return b * nodes * (nranks - 1) / ((nodes - 1) * nranks)


def _env(net: netns.Net, node: int, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("ACCL_SOCKET_IFNAME", "ACCL_COMM_ID", "ACCL_UNIQUE_ID", "ACCL_ALGO"):
        env.pop(var, None)  # the defaults must find the namespace's own interface
    env.update(PYTHONPATH=PYDIR + os.pathsep + env.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               ACCL_HOSTID=net.hosts[node], GLOO_SOCKET_IFNAME=net.dev[node],
               PYTHONUNBUFFERED="1", **extra)
    return env


def run_direct(net: netns.Net, k: int, lib: str, sweep: list[str], out: str, log,
               timeout: float) -> None:
    # sweep[0] is the collective; "accl:ALGO" forces ACCL_ALGO=<collective>:ALGO
    """Every rank as torchrun would start it, each in its node's namespace."""
    n = len(net.ns) * k
    port = str(20000 + int(uuid.uuid4().hex[:4], 16) % 10000)
    procs = []
    for r in range(n):
        node = r // k
        env = _env(net, node, dict(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r % k),
                                   LOCAL_WORLD_SIZE=str(k), MASTER_ADDR=net.ip[0],
                                   MASTER_PORT=port, GROUP_RANK=str(node)))
        if lib.startswith("accl:"):
            env["ACCL_ALGO"] = sweep[0].replace("_", "") + ":" + lib.split(":", 1)[1]
        cmd = [*net.exec(node), sys.executable, "-m", "accl.perf", *sweep, "--library",
               lib.split(":")[0]]
        if r == 0:
            cmd += ["-J", out]
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    _wait(procs, timeout, lib)


def run_mpi(net: netns.Net, k: int, sweep: list[str], out: str, log, tmp: str,
            timeout: float) -> None:
    """One mpirun in node 0's namespace (netns.Net.mpirun), shared memory inside a node and TCP
    across, as accl."""
    mpirun = perf_compare._mpirun() or "mpirun"
    cmd = net.mpirun(mpirun, k, tmp, [
        "--mca", "pml", "ob1", "--mca", "btl", "self,sm,tcp",
        "--mca", "mpi_yield_when_idle", "1",  # 4 ranks on 2 cores: spinning starves TCP
        "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "PATH",
        sys.executable, "-m", "accl.perf", *sweep, "--library", "mpi", "-J", out])
    proc = subprocess.Popen(cmd, env=_env(net, 0, {}), stdout=log, stderr=subprocess.STDOUT)
    _wait([proc], timeout, "mpi")


def _wait(procs: list[subprocess.Popen], timeout: float, what: str) -> None:
    try:
        for p in procs:
            p.wait(timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"multinode: the {what} sweep did not finish within {timeout:g} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    if any(c not in (0, 1) for c in codes):  # 1: some results wrong, the rows still count
        raise SystemExit(f"multinode: the {what} sweep failed (exit codes {codes})")


_PROBE = r"""
import socket, sys, time
me, peer, port, nbytes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ls = socket.create_server(("", port)) if me == 1 else None
time.sleep(0.5)
s = ls.accept()[0] if ls else socket.create_connection((peer, port), timeout=10)
s.settimeout(60)
buf = bytearray(1 << 20)
import threading
def send():
    left = nbytes
    while left > 0:
        left -= s.send(memoryview(buf)[:min(left, len(buf))])
t0 = time.perf_counter()
th = threading.Thread(target=send)
th.start()
got = 0
while got < nbytes:
    got += s.recv_into(buf)
th.join()
print(nbytes / (time.perf_counter() - t0))
"""


def tcp_probe(net: netns.Net, seconds: float = 2.0) -> float:
    """GB/s each way that one plain TCP connection gets between nodes 0 and 1, both directions
    at once (as an all-reduce loads the link): what the link delivers to TCP payload here."""
    nbytes = int(netns.rate_bits(net.rate) / 8 * seconds) if net.rate else 2 << 30
    port = str(20000 + int(uuid.uuid4().hex[:4], 16) % 10000)
    procs = [subprocess.Popen([*net.exec(i), sys.executable, "-c", _PROBE, str(i),
                               net.ip[1 - i], port, str(nbytes)], stdout=subprocess.PIPE,
                              text=True) for i in (1, 0)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    return min(float(o) for o in outs) / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="1gbit,10gbit", help="tc rates, one run each")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--libraries", default="accl,gloo,mpi",
                    help="accl, accl:ALGO (ACCL_ALGO=<op>:ALGO), gloo, mpi")
    ap.add_argument("--op", default="all_reduce",
                    choices=["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-f", default="4")
    ap.add_argument("-n", default="5")
    ap.add_argument("-w", default="2")
    ap.add_argument("-J", dest="json_path", help="write every row and median as JSON")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per sweep")
    args = ap.parse_args(argv)
    why = netns.unusable()
    if why:
        raise SystemExit(f"multinode: {why}")
    libs = args.libraries.split(",")
    for lib in libs:
        why = perf_compare.unavailable(lib.split(":")[0])
        if why:
            raise SystemExit(f"multinode: cannot run {lib}: {why}")
    if "mpi" in libs and not shutil.which("unshare"):
        raise SystemExit("multinode: mpi needs unshare (util-linux)")
    k, nodes = args.ranks_per_node, args.nodes
    nranks = k * nodes
    sweep = [args.op, "-b", args.b, "-e", args.e, "-f", args.f, "-n", args.n, "-w", args.w,
             "-c", "1", "-d", "float32"]
    result = {"nodes": nodes, "ranks_per_node": k, "sweep": sweep, "rates": {}}
    for rate in args.rates.split(","):
        rows = []
        with tempfile.TemporaryDirectory(prefix="accl-mn-") as tmp, \
                netns.Net(nodes, rate=rate, mtu=args.mtu) as net:
            probes = []
            for p in range(1, args.passes + 1):
                probes.append(tcp_probe(net))
                for lib in libs:
                    out = os.path.join(tmp, f"{lib}-{p}.json")
                    logname = os.path.join(tmp, f"{lib}-{p}.log")
                    with open(logname, "w") as log:
                        try:
                            if lib == "mpi":
                                run_mpi(net, k, sweep, out, log, tmp, args.timeout)
                            else:
                                run_direct(net, k, lib, sweep, out, log, args.timeout)
                        except SystemExit:
                            sys.stderr.write(open(logname).read()[-4000:])
                            raise
                    with open(out) as f:
                        run = json.load(f)
                    for row in run["rows"]:
                        row["pass"], row["library"] = p, lib
                    rows += run["rows"]
                    print(f"# {rate}: pass {p} {lib} done", file=sys.stderr, flush=True)
        med = perf_compare.medians(rows, nranks)
        opt = optimum_busbw(netns.rate_bits(rate), nodes, nranks, args.op)
        probe = statistics.median(probes)
        print(table(args.op, rate, opt, libs, med, args.passes, nodes, k))
        print(f"# one TCP connection each way between two nodes, both directions at once: "
              f"{probe:.4f} GB/s = {probe / (netns.rate_bits(rate) / 8e9):.3f} of the link rate")
        wrong = sum((r[m] or {}).get("wrong") or 0 for r in rows for m in ("out_of_place",
                                                                          "in_place"))
        print(f"# wrong elements: {wrong}\n")
        result["rates"][rate] = {"optimum_busbw": opt, "tcp_probe": probes, "rows": rows,
                                 "medians": med, "wrong": wrong}
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def table(op: str, rate: str, opt: float, libs: list[str], med: list[dict], passes: int, nodes: int,
          k: int) -> str:
    at = {(m["library"], m["size"]): m for m in med if m["mode"] == "out_of_place"}
    sizes = sorted({s for (_, s) in at})
    lines = [f"# {op}, {nodes} nodes x {k} ranks, link {rate} each way per node, float32, "
             f"out of place, median of {passes} interleaved passes",
             f"# optimum busbw {opt:.4f} GB/s; ratio = busbw / optimum",
             f"# {'size':>10s}" + "".join(f"  {lib + ' time':>12s}  {'busbw':>7s}  {'ratio':>5s}"
                                          for lib in libs),
             f"# {'(B)':>10s}" + f"  {'(us)':>12s}  {'(GB/s)':>7s}  {'':>5s}" * len(libs)]
    for size in sizes:
        line = f"  {size:10d}"
        for lib in libs:
            m = at.get((lib, size))
            line += (f"  {m['time_us']:12.0f}  {m['busbw']:7.4f}  {m['busbw'] / opt:5.3f}" if m
                     else f"  {'N/A':>12s}  {'N/A':>7s}  {'':>5s}")
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
