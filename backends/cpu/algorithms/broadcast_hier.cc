// Broadcast across nodes. One rank speaks for each node (the root on its node, the leader
// elsewhere); the message goes to every speaker over TCP, then each node broadcasts it through
// shared memory from its speaker. Between speakers, by the cost model of docs/scaling.md:
// direct (the root sends to all other speakers at once: one round, (nodes-1)·S through its
// link) or a binomial tree (ceil(log2 nodes) rounds; each speaker forwards to the speakers at
// distance 1, 2, 4, ... beyond its own, so no link carries more than log2(nodes)·S).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "types.h"

namespace accl {
namespace cpu {
namespace {

bool useTree(int nodes, size_t bytes) {
  int rounds = 0;
  for (int p = 1; p < nodes; p *= 2) ++rounds;
  const double s = static_cast<double>(bytes);
  const double tree = rounds * (kRoundBytes + kMessageBytes + s);
  return tree < kRoundBytes + (nodes - 1) * (kMessageBytes + s);
}

void broadcastSpeakers(CpuComm& c, const CollArgs& a, bool tree) {
  const size_t bytes = a.count * typeSize(a.type);
  const int nn = c.nnodes(), rootNode = c.nodeOf(a.root);
  // Node v places after the root's, and its speaker.
  const int v = (c.node() - rootNode + nn) % nn;
  auto speaker = [&](int u) {
    int node = (u + rootNode) % nn;
    return node == rootNode ? a.root : c.leaders()[node];
  };
  const int from = speaker(v);
  std::vector<P2pOp>& ops = c.ops();
  if (c.rank() == from) {
    auto step = [&](bool send, int peer) {
      ops.clear();
      addP2p(ops, c, send, peer, a.recv, bytes);
      runP2p(ops);
    };
    if (c.rank() == a.root && a.send != a.recv && bytes) memcpy(a.recv, a.send, bytes);
    if (!tree) {
      ops.clear();
      if (v == 0)
        for (int u = 1; u < nn; ++u) addP2p(ops, c, true, speaker(u), a.recv, bytes);
      else
        addP2p(ops, c, false, a.root, a.recv, bytes);
      runP2p(ops);
    } else {
      // v receives from v - 2^k (2^k its highest bit), then forwards to v + 2^j for j > k.
      int d = 1;
      if (v > 0) {
        while (d * 2 <= v) d *= 2;
        step(false, speaker(v - d));
        d *= 2;
      }
      for (; v + d < nn; d *= 2) step(true, speaker(v + d));
    }
  }
  broadcastAuto(c.shm(), {a.recv, a.recv, a.count, a.type, acclSum, c.localIndex(from)});
}

}  // namespace

void broadcastHier(CpuComm& c, const CollArgs& a) {
  broadcastSpeakers(c, a, useTree(c.nnodes(), a.count * typeSize(a.type)));
}

void broadcastHierTree(CpuComm& c, const CollArgs& a) { broadcastSpeakers(c, a, true); }

}  // namespace cpu
}  // namespace accl
