"""Several "hosts" on one machine, for the multi-node test and benchmark (root only).

`Net(k)` makes k network namespaces joined by veth pairs through a bridge that lives in a hub
namespace of its own, so the host's network is untouched. Each node namespace gets an address
10.<b>.<c>.<i+1>/24, a host name `node<i>` in its /etc/hosts (`ip netns exec` mounts
/etc/netns/<ns>/hosts over /etc/hosts), and optionally a rate limit: a token bucket (tc `tbf`)
on both ends of its veth pair, so the node sends and receives at most `rate` bits/s each way, as
a full-duplex NIC would. Latency needs netem (sch_netem), which some kernels lack; `delay` is
tried and `Net.netem` says whether it took.

Used by tests/python/test_multinode.py and perf/multinode.py; not part of the public API.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import uuid


def unusable() -> str | None:
    """Why namespaces cannot be made here, or None."""
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


def sh(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r


class Net:
    """`nodes` namespaces on veth v<tag><i>a, bridged in a hub namespace; see the module doc.

    rate: e.g. "1gbit" or "10gbit" (tc units), None for no limit. delay_ms: netem delay where
    the kernel has it. mtu: of every veth and the bridge.
    """

    def __init__(self, nodes: int, rate: str | None = None, delay_ms: float = 0.0,
                 mtu: int = 1500):
        self.tag = uuid.uuid4().hex[:5]  # interface names stay under 15 characters
        self.hub = f"accl-{self.tag}-hub"
        self.ns = [f"accl-{self.tag}-n{i}" for i in range(nodes)]
        self.dev = [f"v{self.tag}{i}a" for i in range(nodes)]
        self.hosts = [f"node{i}" for i in range(nodes)]
        b = int(self.tag[:2], 16) % 200 + 20
        c = int(self.tag[2:4], 16)
        self.ip = [f"10.{b}.{c}.{i + 1}" for i in range(nodes)]
        self.subnet = f"10.{b}.{c}.0/24"
        self.rate = rate
        self.netem = False
        try:
            sh("ip", "netns", "add", self.hub)
            sh("ip", "link", "add", "br0", "mtu", str(mtu), "type", "bridge", ns=self.hub)
            sh("ip", "link", "set", "br0", "up", ns=self.hub)
            hosts = "127.0.0.1 localhost\n" + "".join(
                f"{ip} {h}\n" for ip, h in zip(self.ip, self.hosts))
            for i, ns in enumerate(self.ns):
                sh("ip", "netns", "add", ns)
                os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
                with open(f"/etc/netns/{ns}/hosts", "w") as f:
                    f.write(hosts)
                peer = f"v{self.tag}{i}b"
                sh("ip", "link", "add", self.dev[i], "mtu", str(mtu), "netns", ns, "type", "veth",
                   "peer", "name", peer, "mtu", str(mtu), "netns", self.hub)
                sh("ip", "link", "set", peer, "master", "br0", ns=self.hub)
                sh("ip", "link", "set", peer, "up", ns=self.hub)
                sh("ip", "addr", "add", f"{self.ip[i]}/24", "dev", self.dev[i], ns=ns)
                sh("ip", "link", "set", self.dev[i], "up", ns=ns)
                sh("ip", "link", "set", "lo", "up", ns=ns)
                if rate:
                    # Out of the node on its end, into the node on the hub's end.
                    for dev, where in ((self.dev[i], ns), (peer, self.hub)):
                        sh("tc", "qdisc", "add", "dev", dev, "root", *self._tbf(rate), ns=where)
                if delay_ms and shutil.which("tc"):
                    r = sh("tc", "qdisc", "add", "dev", self.dev[i], "root", "netem", "delay",
                           f"{delay_ms}ms", ns=ns, check=False)
                    self.netem = r.returncode == 0
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _tbf(rate: str) -> list[str]:
        # A bucket of 1 ms at the rate (at least 64 KiB) lets the timer keep up at 10 Gbit/s;
        # a 20 ms queue keeps TCP from losing packets at the bucket.
        bps = rate_bits(rate)
        burst = max(64 << 10, bps // 8 // 1000)
        return ["tbf", "rate", rate, "burst", str(burst), "latency", "20ms"]

    def exec(self, i: int) -> list[str]:
        """The command prefix that runs a program on node i."""
        return ["ip", "netns", "exec", self.ns[i]]

    def mpirun(self, mpirun: str, k: int, workdir: str, args: list[str]) -> list[str]:
        """A command that runs Open MPI's `mpirun -n <nodes·k> ... args` from node 0 with k slots
        per node. mpirun reaches the other nodes through an "ssh" agent (plm_ssh_agent) that is
        `ip netns exec`; mpirun and each node's daemon run in a UTS namespace of their own named
        after the node, so Open MPI (and accl's host identity) see distinct hosts, which they
        would not otherwise: namespaces share the machine's host name. Out-of-band and TCP
        traffic stay on the nodes' subnet."""
        agent = os.path.join(workdir, "netns-agent")
        with open(agent, "w") as f:
            f.write("#!/bin/sh\n# plm_ssh_agent: $1 is the host, the rest the command\n"
                    'h=$1; shift\ncase "$h" in\n'
                    + "".join(f"{h}|{ip}) ns={ns} ;;\n"
                              for h, ip, ns in zip(self.hosts, self.ip, self.ns))
                    + '*) echo "netns-agent: unknown host $h" >&2; exit 1 ;;\nesac\n'
                    'exec ip netns exec "$ns" unshare --uts sh -c "hostname $h; $*"\n')
        os.chmod(agent, 0o755)
        hostfile = os.path.join(workdir, "hostfile")
        with open(hostfile, "w") as f:
            f.writelines(f"{h} slots={k}\n" for h in self.hosts)
        cmd = [mpirun, "-n", str(len(self.ns) * k), "--hostfile", hostfile,
               "--allow-run-as-root", "--prtemca", "plm_ssh_agent", agent,
               "--prtemca", "oob_tcp_if_include", self.subnet,
               "--mca", "btl_tcp_if_include", self.subnet, *args]
        inner = " ".join(shlex.quote(a) for a in cmd)
        return [*self.exec(0), "unshare", "--uts", "sh", "-c",
                f"hostname {self.hosts[0]}; exec {inner}"]

    def link(self, i: int, up: bool) -> None:
        sh("ip", "link", "set", self.dev[i], "up" if up else "down", ns=self.ns[i])

    def close(self) -> None:
        # Deleting a namespace deletes its veth ends; the peers go with them.
        for ns in self.ns + [self.hub]:
            sh("ip", "netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)

    def __enter__(self) -> "Net":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rate_bits(rate: str) -> int:
    """tc's "1gbit" / "10gbit" / "500mbit" as bits per second."""
    units = {"gbit": 10**9, "mbit": 10**6, "kbit": 10**3, "bit": 1}
    for u, f in units.items():
        if rate.endswith(u):
            return int(float(rate[: -len(u)]) * f)
    raise ValueError(f"rate {rate!r}: expected a number and gbit, mbit, kbit or bit")
