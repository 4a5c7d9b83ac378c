// Reduce-scatter across nodes, two levels: each node reduces the whole input to its leader
// (shared memory); each leader sends every other leader the blocks of that leader's ranks, and
// reduces the blocks of its own ranks that come from every node, in node order; then it
// scatters them inside its node. A node's link carries (n-L)·m each way, L times less than
// exchanging every block rank to rank (reduceScatterPairwise).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void reduceScatterHier(CpuComm& c, const CollArgs& a) {
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  const size_t bytes = a.count * typeSize(a.type), total = bytes * c.nranks();
  const int nn = c.nnodes(), me = c.node();
  const size_t mine = c.nodeRanks(me).size() * bytes;  // this node's blocks
  // Leader: [the node's sum, rank order][the same, node after node][each node's blocks for
  // this node, node order].
  char* sum = c.isLeader() ? c.scratch(2 * total + nn * mine) : nullptr;
  reduceSplit(c.shm(), {a.send, sum, a.count * c.nranks(), a.type, op, 0});
  char* out = nullptr;
  if (c.isLeader()) {
    char *byNode = sum + total, *in = byNode + total;
    for (int j = 0; j < nn; ++j) {
      const std::vector<int>& ranks = c.nodeRanks(j);
      for (size_t i = 0; i < ranks.size() && bytes; ++i)
        memcpy(byNode + (c.nodeStart(j) + i) * bytes, sum + ranks[i] * bytes, bytes);
    }
    std::vector<P2pOp>& ops = c.ops();
    ops.clear();
    for (int j = 0; j < nn; ++j) {
      if (j == me) continue;
      addP2p(ops, c, true, c.leaders()[j], byNode + c.nodeStart(j) * bytes,
             c.nodeRanks(j).size() * bytes);
      addP2p(ops, c, false, c.leaders()[j], in + j * mine, mine);
    }
    runP2p(ops);
    const void** srcs = c.sources();
    for (int j = 0; j < nn; ++j)
      srcs[j] = j == me ? byNode + c.nodeStart(me) * bytes : in + j * mine;
    out = in + me * mine;  // this node's slot of `in` is free
    const size_t count = mine / typeSize(a.type);
    if (count) reduce(out, srcs, nn, count, a.type, op);
    if (a.op == acclAvg) divide(out, count, a.type, c.nranks());
  }
  scatterDirect(c.shm(), {out, a.recv, a.count, a.type, acclSum, 0});
}

}  // namespace cpu
}  // namespace accl
