// Broadcast across nodes: the root sends the message to the leader of every other node over TCP
// (nodes-1 sends), then each node broadcasts it through shared memory from the rank that has it.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "types.h"

namespace accl {
namespace cpu {

void broadcastHier(CpuComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  const int rootNode = c.nodeOf(a.root);
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  if (c.rank() == a.root) {
    if (a.send != a.recv) memcpy(a.recv, a.send, bytes);
    for (int node = 0; node < c.nnodes(); ++node)
      if (node != rootNode) addP2p(ops, c, true, c.leaders()[node], a.recv, bytes);
  } else if (c.isLeader() && c.node() != rootNode) {
    addP2p(ops, c, false, a.root, a.recv, bytes);
  }
  runP2p(ops);
  int from = c.node() == rootNode ? a.root : c.leaders()[c.node()];
  broadcastAuto(c.shm(), {a.recv, a.recv, a.count, a.type, acclSum, c.localIndex(from)});
}

}  // namespace cpu
}  // namespace accl
