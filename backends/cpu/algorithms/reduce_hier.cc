// Reduce across nodes: each node reduces through shared memory to the rank that talks for it
// (the root on the root's node, the leader elsewhere); those send their node's result to the
// root over TCP, which reduces them in node order.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void reduceHier(CpuComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  const int rootNode = c.nodeOf(a.root), nn = c.nnodes();
  const int speaker = c.speaker(c.node(), a.root);
  const bool isRoot = c.rank() == a.root;
  // The root receives the other nodes' results after its own in the scratch buffer.
  char* tmp = c.scratch(bytes * (isRoot ? nn : 1));
  void* out = isRoot ? a.recv : tmp;
  reduceSplit(c.shm(), {a.send, out, a.count, a.type, op, c.localIndex(speaker)});
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  if (isRoot) {
    for (int node = 0; node < nn; ++node)
      if (node != rootNode) addP2p(ops, c, false, c.leaders()[node], tmp + node * bytes, bytes);
  } else if (c.rank() == speaker) {
    addP2p(ops, c, true, a.root, tmp, bytes);
  }
  runP2p(ops);
  if (!isRoot || a.count == 0) return;
  const void** srcs = c.sources();
  for (int node = 0; node < nn; ++node) srcs[node] = node == rootNode ? a.recv : tmp + node * bytes;
  reduce(a.recv, srcs, nn, a.count, a.type, op);
  if (a.op == acclAvg) divide(a.recv, a.count, a.type, c.nranks());
}

}  // namespace cpu
}  // namespace accl
