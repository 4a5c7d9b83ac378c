// Reduce-scatter, all-to-all, gather and scatter across nodes: every rank exchanges its blocks
// directly with every other in one batch of sends and receives (p2p.h progresses them together,
// so no order can deadlock): shared memory to peers on the node, TCP to the others. Each rank
// sends and receives what the collective's definition moves, (n-1) blocks, once.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void reduceScatterPairwise(CpuComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  char* in = c.scratch(bytes * n);
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    addP2p(ops, c, true, q, send + q * bytes, bytes);
    addP2p(ops, c, false, q, in + q * bytes, bytes);
  }
  runP2p(ops);
  if (a.count == 0) return;
  // Every rank reduces its block in rank order: the same order wherever the block lands.
  const void** srcs = c.sources();
  for (int q = 0; q < n; ++q) srcs[q] = q == me ? send + me * bytes : in + q * bytes;
  reduce(a.recv, srcs, n, a.count, a.type, a.op);
}

void alltoAllPairwise(CpuComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  if (send == recv && bytes) {  // in place: send from a copy, as the blocks arrive where they leave
    char* copy = c.scratch(bytes * n);
    memcpy(copy, send, bytes * n);
    send = copy;
  }
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    addP2p(ops, c, true, q, send + q * bytes, bytes);
    addP2p(ops, c, false, q, recv + q * bytes, bytes);
  }
  if (bytes && send + me * bytes != recv + me * bytes)
    copyOnce(recv + me * bytes, send + me * bytes, bytes);
  runP2p(ops);
}

void gatherPairwise(CpuComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  char* recv = static_cast<char*>(a.recv);
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  if (me == a.root) {
    if (bytes && a.send != recv + me * bytes) copyOnce(recv + me * bytes, a.send, bytes);
    for (int q = 0; q < n; ++q)
      if (q != me) addP2p(ops, c, false, q, recv + q * bytes, bytes);
  } else {
    addP2p(ops, c, true, a.root, a.send, bytes);
  }
  runP2p(ops);
}

void scatterPairwise(CpuComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  if (me == a.root) {
    if (bytes && a.recv != send + me * bytes) copyOnce(a.recv, send + me * bytes, bytes);
    for (int q = 0; q < n; ++q)
      if (q != me) addP2p(ops, c, true, q, send + q * bytes, bytes);
  } else {
    addP2p(ops, c, false, a.root, a.recv, bytes);
  }
  runP2p(ops);
}

// Barrier: inside the node, then a byte between every pair of leaders, then inside the node
// again, so that no rank leaves before every rank of every node has arrived.
void barrierHier(CpuComm& c, const CollArgs&) {
  c.shm().barrier();
  if (c.isLeader()) {
    char out = 0;
    char* in = c.scratch(c.nnodes());
    std::vector<P2pOp>& ops = c.ops();
    ops.clear();
    for (int node = 0; node < c.nnodes(); ++node) {
      if (node == c.node()) continue;
      addP2p(ops, c, true, c.leaders()[node], &out, 1);
      addP2p(ops, c, false, c.leaders()[node], in + node, 1);
    }
    runP2p(ops);
  }
  c.shm().barrier();
}

}  // namespace cpu
}  // namespace accl
