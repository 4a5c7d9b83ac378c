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

# The selection in backends/cpu/algorithms/all_reduce_hier.cc (kChunk, kPipeMaxNodes, pick) and
# broadcast_hier.cc (useTree), in bytes at the link rate: R a round, M one more message.
CHUNK = 4 << 20
PIPE_MAX_NODES = 256
R, M = 24 << 10, 2 << 10


def doubling_rounds(N: int) -> int:
    p = 1 << (N.bit_length() - 1)
    return p.bit_length() - 1 + (2 if p < N else 0)


def pick(N: int, S: float) -> str:
    """The leaders' phase of hier: direct, doubling, pieces (pipelined) or ring."""
    if S > CHUNK:
        return "ring" if N > PIPE_MAX_NODES else "pieces"
    direct = R + (N - 1) * (M + S)
    doubling = doubling_rounds(N) * (R + M + S)
    pieces = 2 * R + 2 * (N - 1) * (M + S / N)
    if direct <= doubling and direct <= pieces:
        return "direct"
    return "doubling" if doubling < pieces else "pieces"


def pick_broadcast(N: int, S: float) -> str:
    """Between node speakers: direct, tree or scatter (+ ring all-gather)."""
    direct = R + (N - 1) * (M + S)
    tree = math.ceil(math.log2(N)) * (R + M + S)
    scatter = R + (N - 1) * (M + S / N) + (N - 1) * (R + M + S / N)
    if direct <= tree and direct <= scatter:
        return "direct"
    return "tree" if tree <= scatter else "scatter"


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
    """The default: the leaders' phase by pick()."""
    how = pick(N, S)
    if how == "direct":
        return _phases(p, L, S, p.a_net + (N - 1) * (p.o + S * p.b_net) + N * S * p.g)
    if how == "doubling":
        return hierdoubling(p, N, L, S)
    if how == "ring":
        return hierring(p, N, L, S)
    k = math.ceil(S / CHUNK)
    c = S / k
    half = p.a_net + (N - 1) * (p.o + c / N * p.b_net)  # a direct reduce-scatter or all-gather
    both = p.a_net + 2 * (N - 1) * (p.o + c / N * p.b_net)  # all-gather i + reduce-scatter i+1
    red, bc = _shm(p, p.b_red, c), _shm(p, p.b_bc, c)
    return (red + max(half, red) + c * p.g  # R(0); reduce-scatter 0 while R(1)
            + (k - 1) * (max(both, bc + red) + c * p.g)  # steps 0..k-2 while B(i-1), R(i+2)
            + max(half, bc) + bc)  # the last all-gather while B(k-2); B(k-1)


def _phases(p: Params, L: int, S: float, leaders: float) -> float:
    """Reduce inside the node, the leaders' phase, broadcast inside the node, in turn."""
    return _shm(p, p.b_red, S) + leaders + _shm(p, p.b_bc, S)


def hierring(p: Params, N: int, L: int, S: float) -> float:
    if pick(N, S) == "direct":
        return hier(p, N, L, S)
    return _phases(p, L, S, 2 * (N - 1) * (p.a_net + p.o + S / N * p.b_net)
                   + (N - 1) * S / N * p.g)


def hierdoubling(p: Params, N: int, L: int, S: float) -> float:
    k = doubling_rounds(N)
    return _phases(p, L, S, k * (p.a_net + p.o + S * p.b_net + S * p.g))


def ring(p: Params, N: int, L: int, S: float) -> float:
    """Flat ring over n ranks: every step waits for the slowest hop, a TCP one."""
    n = N * L
    return 2 * (n - 1) * (p.a_net + p.o + S / n * p.b_net) + (n - 1) * S / n * p.g


def all_gather_ring(p: Params, N: int, L: int, m: float) -> float:
    n = N * L
    return (n - 1) * (p.a_net + p.o + m * p.b_net)


def all_gather_hier(p: Params, N: int, L: int, m: float) -> float:
    """Gather L blocks to the leader, leaders exchange L·m with every other leader at once,
    broadcast the n blocks inside the node."""
    n = N * L
    return (_shm(p, p.b_bc, L * m) + p.a_net + (N - 1) * (p.o + L * m * p.b_net)
            + _shm(p, p.b_bc, n * m))


def pairwise(p: Params, N: int, L: int, m: float) -> float:
    """reduce_scatter / alltoall: every rank sends a block of m to every other rank at once; a
    node's link carries L·L·(N-1) blocks each way."""
    n = N * L
    return p.a_net + (n - 1) * p.o + L * L * (N - 1) * m * p.b_net


def reduce_scatter_hier(p: Params, N: int, L: int, m: float) -> float:
    """Reduce the n blocks to the leader, leaders exchange L·m with every other leader and
    reduce N copies of their L blocks, scatter inside the node."""
    n = N * L
    return (_shm(p, p.b_red, n * m) + p.a_net + (N - 1) * (p.o + L * m * p.b_net)
            + N * L * m * p.g + _shm(p, p.b_bc, L * m))


def broadcast_hier(p: Params, N: int, L: int, S: float) -> float:
    """The default: by pick_broadcast()."""
    return {"direct": broadcast_direct, "tree": broadcast_tree,
            "scatter": broadcast_scatter}[pick_broadcast(N, S)](p, N, L, S)


def broadcast_direct(p: Params, N: int, L: int, S: float) -> float:
    return p.a_net + (N - 1) * (p.o + S * p.b_net) + _shm(p, p.b_bc, S)


def broadcast_tree(p: Params, N: int, L: int, S: float) -> float:
    return math.ceil(math.log2(N)) * (p.a_net + p.o + S * p.b_net) + _shm(p, p.b_bc, S)


def broadcast_scatter(p: Params, N: int, L: int, S: float) -> float:
    """The root sends S/N to each speaker, then N-1 ring steps of S/N."""
    return (p.a_net + (N - 1) * (p.o + S / N * p.b_net)
            + (N - 1) * (p.a_net + p.o + S / N * p.b_net) + _shm(p, p.b_bc, S))


def fmt(t: float) -> str:
    return f"{t * 1e6:.0f} us" if t < 1e-3 else f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s"


def table(p: Params, L: int) -> str:
    cols = [("all_reduce hier (default)", hier), ("hierring", hierring),
            ("hierdoubling", hierdoubling), ("flat ring", ring),
            ("all_gather hier (default)", all_gather_hier), ("all_gather ring", all_gather_ring),
            ("reduce_scatter hier (default)", reduce_scatter_hier),
            ("reduce_scatter pairwise", pairwise), ("broadcast hier (default)", broadcast_hier),
            ("broadcast direct", broadcast_direct), ("broadcast tree", broadcast_tree)]
    per_block = {all_gather_hier, all_gather_ring, reduce_scatter_hier, pairwise}
    rows = ["| nodes | size | " + " | ".join(c for c, _ in cols)
            + " | all_reduce leaders | broadcast speakers |", "|---" * (len(cols) + 4) + "|"]
    for N in (2, 8, 64, 1024):
        for S in (64 << 10, 2 << 20, 64 << 20):
            n = N * L
            cells = [fmt(f(p, N, L, S / n if f in per_block else S)) for _, f in cols]
            rows.append(f"| {N} | {S >> 10} KiB | " + " | ".join(cells)
                        + f" | {pick(N, S)} | {pick_broadcast(N, S)} |")
    return "\n".join(rows)


# perf/multinode.py's library names, per collective; all_gather and reduce_scatter sizes are
# the whole buffer (n blocks of m).
MODELS = {"all_reduce": {"accl": hier, "accl:hier": hier, "accl:hierring": hierring,
                         "accl:hierdoubling": hierdoubling, "accl:ring": ring},
          "all_gather": {"accl": all_gather_hier, "accl:hier": all_gather_hier,
                         "accl:ring": all_gather_ring},
          "reduce_scatter": {"accl": reduce_scatter_hier, "accl:hier": reduce_scatter_hier,
                             "accl:pairwise": pairwise},
          "broadcast": {"accl": broadcast_hier, "accl:hier": broadcast_hier,
                        "accl:hiertree": broadcast_tree, "accl:hierscatter": broadcast_scatter}}


def check(paths: list[str], p: Params) -> str:
    rows = ["| nodes × ranks | link | collective | size | algorithm | predicted | measured | "
            "measured / predicted |",
            "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        run = json.load(open(path))
        N, L = run["nodes"], run["ranks_per_node"]
        op = run["sweep"][0]
        blocks = op in ("all_gather", "reduce_scatter")
        for rate, r in run["rates"].items():
            # The link's TCP payload rate as measured in that run (the probe).
            probe = sorted(r["tcp_probe"])[len(r["tcp_probe"]) // 2]
            q = Params(**{**p.__dict__, "b_net": 1 / (probe * 1e9)})
            for m in sorted(r["medians"], key=lambda m: (m["library"], m["size"])):
                f = MODELS[op].get(m["library"])
                if not f or m["mode"] != "out_of_place":
                    continue
                pred = f(q, N, L, m["size"] / (N * L) if blocks else m["size"])
                meas = m["time_us"] * 1e-6
                rows.append(f"| {N} × {L} | {rate} | {op} | {m['size'] >> 10} KiB | "
                            f"{m['library']} | "
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
