"""The cost model of docs/scaling.md: predicted time of each multi-node algorithm.

    python perf/scaling_model.py                      # the table of docs/scaling.md
    python perf/scaling_model.py --check run.json ... # predicted vs measured (perf/multinode.py -J)

Terms (seconds, bytes): a_net: one TCP step between nodes (send, the far side's wake-up, the
reply's arrival); o: CPU cost per TCP message posted; b_net: seconds per byte on a node's link,
each way (1 / the TCP payload rate); a_shm, b_red, b_bc: a shared-memory phase inside a node
(start cost, then per byte of reduce-to-leader and of broadcast); g: per byte of a two-input
reduction. N nodes, L ranks per node, n = N·L, S bytes per rank.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

# The selection in backends/cpu/algorithms/all_reduce_hier.cc (kChunk, kPipeMaxNodes, useDirect).
CHUNK = 4 << 20
PIPE_MAX_NODES = 256


def use_direct(N: int, S: float) -> bool:
    return S <= CHUNK and S * (N - 1) * (N - 2) / N < (24 << 10) + (N - 1) * (2 << 10)


@dataclass
class Params:
    a_net: float
    o: float
    b_net: float
    a_shm: float
    b_red: float
    b_bc: float
    g: float


# A cluster: 10 Gbit/s Ethernet (1.18 GB/s of TCP payload), 20 us per TCP step, 8 ranks/node.
CLUSTER = Params(a_net=20e-6, o=2e-6, b_net=1 / 1.18e9, a_shm=3e-6, b_red=1 / 4e9,
                 b_bc=1 / 6e9, g=1 / 8e9)


def _shm(p: Params, b: float, s: float) -> float:
    return p.a_shm + s * b if s else 0.0


def hier(p: Params, N: int, L: int, S: float) -> float:
    """The default: direct when small, pipelined to 256 nodes, else hierring."""
    if use_direct(N, S) or (N > PIPE_MAX_NODES and S > CHUNK):
        return hierring(p, N, L, S)
    k = math.ceil(S / CHUNK)
    c = S / k
    half = p.a_net + (N - 1) * (p.o + c / N * p.b_net)  # a direct reduce-scatter or all-gather
    both = p.a_net + 2 * (N - 1) * (p.o + c / N * p.b_net)  # all-gather i + reduce-scatter i+1
    red, bc = _shm(p, p.b_red, c), _shm(p, p.b_bc, c)
    return (red + max(half, red) + c * p.g  # R(0); reduce-scatter 0 while R(1)
            + (k - 1) * (max(both, bc + red) + c * p.g)  # steps 0..k-2 while B(i-1), R(i+2)
            + max(half, bc) + bc)  # the last all-gather while B(k-2); B(k-1)


def hierring(p: Params, N: int, L: int, S: float) -> float:
    lead = (p.a_net + (N - 1) * (p.o + S * p.b_net) + N * S * p.g if use_direct(N, S)
            else 2 * (N - 1) * (p.a_net + p.o + S / N * p.b_net) + (N - 1) * S / N * p.g)
    return _shm(p, p.b_red, S) + lead + _shm(p, p.b_bc, S)


def ring(p: Params, N: int, L: int, S: float) -> float:
    """Flat ring over n ranks: every step waits for the slowest hop, a TCP one."""
    n = N * L
    return 2 * (n - 1) * (p.a_net + p.o + S / n * p.b_net) + (n - 1) * S / n * p.g


def all_gather_ring(p: Params, N: int, L: int, m: float) -> float:
    n = N * L
    return (n - 1) * (p.a_net + p.o + m * p.b_net)


def pairwise(p: Params, N: int, L: int, m: float) -> float:
    """reduce_scatter / alltoall: every rank sends a block of m to every other rank at once; a
    node's link carries L·L·(N-1) blocks each way."""
    n = N * L
    return p.a_net + (n - 1) * p.o + L * L * (N - 1) * m * p.b_net


def broadcast_hier(p: Params, N: int, L: int, S: float) -> float:
    return p.a_net + (N - 1) * (p.o + S * p.b_net) + _shm(p, p.b_bc, S)


def fmt(t: float) -> str:
    return f"{t * 1e6:.0f} us" if t < 1e-3 else f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s"


def table(p: Params, L: int) -> str:
    rows = ["| nodes | size | hier (default) | hierring | flat ring | all_gather ring (m = size/n) "
            "| reduce_scatter pairwise (m = size/n) | broadcast hier |", "|---" * 8 + "|"]
    for N in (2, 8, 64, 1024):
        for S in (64 << 10, 2 << 20, 64 << 20):
            n = N * L
            rows.append(f"| {N} | {S >> 10} KiB | {fmt(hier(p, N, L, S))} | "
                        f"{fmt(hierring(p, N, L, S))} | {fmt(ring(p, N, L, S))} | "
                        f"{fmt(all_gather_ring(p, N, L, S / n))} | "
                        f"{fmt(pairwise(p, N, L, S / n))} | {fmt(broadcast_hier(p, N, L, S))} |")
    return "\n".join(rows)


MODELS = {"accl": hier, "accl:hier": hier, "accl:hierring": hierring, "accl:ring": ring}


def check(paths: list[str], p: Params) -> str:
    rows = ["| nodes × ranks | link | size | algorithm | predicted | measured | measured / "
            "predicted |",
            "|---|---|---|---|---|---|---|"]
    for path in paths:
        run = json.load(open(path))
        N, L = run["nodes"], run["ranks_per_node"]
        for rate, r in run["rates"].items():
            # The link's TCP payload rate as measured in that run (the probe).
            probe = sorted(r["tcp_probe"])[len(r["tcp_probe"]) // 2]
            q = Params(**{**p.__dict__, "b_net": 1 / (probe * 1e9)})
            for m in sorted(r["medians"], key=lambda m: (m["library"], m["size"])):
                f = MODELS.get(m["library"])
                if not f or m["mode"] != "out_of_place":
                    continue
                pred = f(q, N, L, m["size"])
                meas = m["time_us"] * 1e-6
                rows.append(f"| {N} × {L} | {rate} | {m['size'] >> 10} KiB | {m['library']} | "
                            f"{fmt(pred)} | {fmt(meas)} | {meas / pred:.2f} |")
    return "\n".join(rows)


# Fitted to this machine's namespaces (docs/scaling.md says how); b_net comes from each run.
NAMESPACES = Params(a_net=110e-6, o=5e-6, b_net=0, a_shm=15e-6, b_red=1 / 2.0e9, b_bc=1 / 3.0e9,
                    g=1 / 4e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", nargs="*", help="perf/multinode.py -J files")
    ap.add_argument("--ranks-per-node", type=int, default=8)
    a = ap.parse_args()
    if a.check:
        print(check(a.check, NAMESPACES))
    else:
        print(table(CLUSTER, a.ranks_per_node))


if __name__ == "__main__":
    main()
