// Broadcast across nodes. One rank speaks for each node (the root on its node, the leader
// elsewhere); the message goes to every speaker over TCP, then each node broadcasts it through
// shared memory from its speaker. Between speakers, the cheapest by the cost model of
// docs/scaling.md: direct (the root sends to all other speakers at once: one round, (nodes-1)·S
// through its link), a binomial tree (ceil(log2 nodes) rounds; each speaker forwards to the
// speakers at distance 1, 2, 4, ... beyond its own, so no link carries more than log2(nodes)·S),
// or scatter + ring all-gather (the root sends piece u of nodes pieces to speaker u, then nodes-1
// ring steps of one piece: about 2·S through any link whatever the node count, for large
// messages).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "types.h"

namespace accl {
namespace cpu {
namespace {

enum class Speakers { kDirect, kTree, kScatter };

// The cheapest by the model (bytes at the link rate): direct R + (N-1)(M + S), the tree
// ceil(log2 N)(R + M + S), scatter + ring all-gather (N-1)(M + S/N) + R + (N-1)(R + M + S/N).
Speakers pick(int nodes, size_t bytes) {
  int rounds = 0;
  for (int p = 1; p < nodes; p *= 2) ++rounds;
  const double s = static_cast<double>(bytes), R = kRoundBytes, M = kMessageBytes;
  const double direct = R + (nodes - 1) * (M + s);
  const double tree = rounds * (R + M + s);
  const double scatter = R + (nodes - 1) * (M + s / nodes) + (nodes - 1) * (R + M + s / nodes);
  if (direct <= tree && direct <= scatter) return Speakers::kDirect;
  return tree <= scatter ? Speakers::kTree : Speakers::kScatter;
}

void broadcastSpeakers(CpuComm& c, const CollArgs& a, Speakers how) {
  const size_t es = typeSize(a.type), bytes = a.count * es;
  const int nn = c.nnodes(), rootNode = c.nodeOf(a.root);
  // Node v places after the root's, and its speaker.
  const int v = (c.node() - rootNode + nn) % nn;
  auto speaker = [&](int u) { return c.speaker((u + rootNode) % nn, a.root); };
  const int from = speaker(v);
  char* buf = static_cast<char*>(a.recv);
  std::vector<P2pOp>& ops = c.ops();
  auto step = [&](bool send, int peer) {
    ops.clear();
    addP2p(ops, c, send, peer, buf, bytes);
    runP2p(ops);
  };
  // Piece u of the scatter: elements [b, e) of the message.
  auto piece = [&](int u, char** at, size_t* len) {
    size_t b, e;
    partRange(a.count, (u % nn + nn) % nn, nn, es, &b, &e);
    *at = buf + b * es;
    *len = (e - b) * es;
  };
  if (c.rank() == from) {
    if (c.rank() == a.root && a.send != a.recv && bytes) memcpy(a.recv, a.send, bytes);
    char* at;
    size_t len;
    if (how == Speakers::kDirect) {
      ops.clear();
      if (v == 0)
        for (int u = 1; u < nn; ++u) addP2p(ops, c, true, speaker(u), buf, bytes);
      else
        addP2p(ops, c, false, a.root, buf, bytes);
      runP2p(ops);
    } else if (how == Speakers::kTree) {
      // v receives from v - 2^k (2^k its highest bit), then forwards to v + 2^j for j > k.
      int d = 1;
      if (v > 0) {
        while (d * 2 <= v) d *= 2;
        step(false, speaker(v - d));
        d *= 2;
      }
      for (; v + d < nn; d *= 2) step(true, speaker(v + d));
    } else {
      // The root sends piece u to speaker u, then the speakers pass pieces around a ring:
      // step s sends piece v-s to the right and takes piece v-s-1 from the left.
      ops.clear();
      for (int u = 1; u < nn && v == 0; ++u) {
        piece(u, &at, &len);
        addP2p(ops, c, true, speaker(u), at, len);
      }
      if (v > 0) {
        piece(v, &at, &len);
        addP2p(ops, c, false, a.root, at, len);
      }
      runP2p(ops);
      for (int s = 0; s < nn - 1; ++s) {
        ops.clear();
        piece(v - s, &at, &len);
        addP2p(ops, c, true, speaker((v + 1) % nn), at, len);
        piece(v - s - 1, &at, &len);
        addP2p(ops, c, false, speaker((v + nn - 1) % nn), at, len);
        runP2p(ops);
      }
    }
  }
  broadcastAuto(c.shm(), {a.recv, a.recv, a.count, a.type, acclSum, c.localIndex(from)});
}

}  // namespace

void broadcastHier(CpuComm& c, const CollArgs& a) {
  broadcastSpeakers(c, a, pick(c.nnodes(), a.count * typeSize(a.type)));
}

void broadcastHierTree(CpuComm& c, const CollArgs& a) { broadcastSpeakers(c, a, Speakers::kTree); }

void broadcastHierScatter(CpuComm& c, const CollArgs& a) {
  broadcastSpeakers(c, a, Speakers::kScatter);
}

}  // namespace cpu
}  // namespace accl
