// All-gather across nodes, two levels: each node gathers its ranks' blocks to its leader (shared
// memory); the leaders exchange their nodes' blocks directly, each sending its node's L·m bytes
// to every other leader (a node's link carries (n-L)·m each way, the least any all-gather can);
// each leader puts every block in place and broadcasts the whole output inside its node.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "types.h"

namespace accl {
namespace cpu {

void allGatherHier(CpuComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  const int nn = c.nnodes(), me = c.node();
  char* recv = static_cast<char*>(a.recv);
  // The leader's blocks node after node, each node's ranks in local order.
  char* byNode = c.isLeader() ? c.scratch(bytes * c.nranks()) : nullptr;
  char* mine = byNode ? byNode + c.nodeStart(me) * bytes : nullptr;
  gatherDirect(c.shm(), {a.send, mine, a.count, a.type, acclSum, 0});
  if (c.isLeader()) {
    std::vector<P2pOp>& ops = c.ops();
    ops.clear();
    const size_t myBytes = c.nodeRanks(me).size() * bytes;
    for (int j = 0; j < nn; ++j) {
      if (j == me) continue;
      addP2p(ops, c, true, c.leaders()[j], mine, myBytes);
      addP2p(ops, c, false, c.leaders()[j], byNode + c.nodeStart(j) * bytes,
             c.nodeRanks(j).size() * bytes);
    }
    runP2p(ops);
    for (int j = 0; j < nn; ++j) {
      const std::vector<int>& ranks = c.nodeRanks(j);
      for (size_t i = 0; i < ranks.size() && bytes; ++i)
        memcpy(recv + ranks[i] * bytes, byNode + (c.nodeStart(j) + i) * bytes, bytes);
    }
  }
  broadcastAuto(c.shm(), {recv, recv, a.count * c.nranks(), a.type, acclSum, 0});
}

}  // namespace cpu
}  // namespace accl
