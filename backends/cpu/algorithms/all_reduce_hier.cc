// All-reduce across nodes, hierarchical: reduce inside each node to its leader (shared memory),
// all-reduce among the leaders over TCP, broadcast inside each node. Only leaders use the
// network.
//
// Small messages: one round, direct (every leader sends its buffer to every other).
// Large messages on up to kPipeMaxNodes nodes: pipelined in chunks, so that the link is busy
// while the node reduces and broadcasts. Per chunk the leaders run a direct reduce-scatter
// (leader j gets piece j from every leader and reduces it) then a direct all-gather of the
// pieces: 2(m-1)/m of the chunk each way per leader, the bandwidth optimum. A step is started
// (its bytes handed to the kernel), the node's shared-memory work for the neighbouring chunks
// runs, then the step completes. Every rank of a node runs the same shared-memory sequence:
// R(0), then per chunk i R(i+1), B(i-1), and finally B(last).
// Larger node counts: the unpipelined ring among leaders (m-1 steps of 1/m; a direct exchange
// among many leaders would cut chunks into pieces too small to keep the link busy).
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

namespace {
constexpr size_t kDirectMax = 64 << 10;  // bytes: below, one round of latency beats the rest
constexpr size_t kChunk = 2 << 20;       // bytes per pipeline chunk
constexpr int kPipeMaxNodes = 16;        // above: ring among leaders (docs/scaling.md)

}  // namespace

// ACCL_ALGO=allreduce:hierring, and the choice above kPipeMaxNodes: the three phases one after
// the other, the leaders' phase direct when small, else a ring.
void allReduceHierRing(CpuComm& c, const CollArgs& a) {
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  reduceSplit(c.shm(), {a.send, a.recv, a.count, a.type, op, 0});
  if (c.isLeader()) {
    char* buf = static_cast<char*>(a.recv);
    if (a.count * typeSize(a.type) <= kDirectMax)
      directAllReduce(c, c.leaders(), c.node(), buf, a.count, a.type, op);
    else
      ringAllReduce(c, c.leaders(), c.node(), buf, a.count, a.type, op);
    if (a.op == acclAvg) divide(buf, a.count, a.type, c.nranks());
  }
  broadcastAuto(c.shm(), {a.recv, a.recv, a.count, a.type, acclSum, 0});
}

void allReduceHier(CpuComm& c, const CollArgs& a) {
  // An average is a sum until the end: the stages would otherwise divide by their own sizes.
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  const size_t es = typeSize(a.type), bytes = a.count * es;
  const int m = c.nnodes(), me = c.node();
  if (bytes <= kDirectMax || m > kPipeMaxNodes) return allReduceHierRing(c, a);

  const size_t per = std::max<size_t>(1, kChunk / es);  // elements per chunk
  const size_t chunks = (a.count + per - 1) / per;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  auto span = [&](size_t i, size_t* off, size_t* cnt) {
    *off = i * per;
    *cnt = std::min(per, a.count - *off);
  };
  auto localReduce = [&](size_t i) {
    size_t off, cnt;
    span(i, &off, &cnt);
    reduceSplit(c.shm(), {send + off * es, recv + off * es, cnt, a.type, op, 0});
  };
  auto localBcast = [&](size_t i) {
    size_t off, cnt;
    span(i, &off, &cnt);
    broadcastAuto(c.shm(), {recv + off * es, recv + off * es, cnt, a.type, acclSum, 0});
  };

  if (!c.isLeader()) {
    localReduce(0);
    for (size_t i = 0; i < chunks; ++i) {
      if (i + 1 < chunks) localReduce(i + 1);
      if (i > 0) localBcast(i - 1);
    }
    localBcast(chunks - 1);
    return;
  }

  const std::vector<int>& L = c.leaders();
  std::vector<P2pOp>& ops = c.ops();
  std::vector<const void*> srcs(m);
  // The other leaders' pieces of this leader's part (pieces differ by up to a cache line).
  char* in = c.scratch((per + m * 64) * es);
  localReduce(0);
  for (size_t i = 0; i < chunks; ++i) {
    size_t off, cnt;
    span(i, &off, &cnt);
    char* buf = recv + off * es;
    auto piece = [&](int j, size_t* b, size_t* e) { partRange(cnt, j, m, es, b, e); };
    size_t mb, mine;
    piece(me, &mb, &mine);
    // Reduce-scatter: piece j to leader j; this leader's piece from every other.
    ops.clear();
    for (int j = 0; j < m; ++j) {
      if (j == me) continue;
      size_t b, e;
      piece(j, &b, &e);
      addP2p(ops, c, true, L[j], buf + b * es, (e - b) * es);
      addP2p(ops, c, false, L[j], in + j * (mine - mb) * es, (mine - mb) * es);
    }
    kickP2p(ops);
    if (i + 1 < chunks) localReduce(i + 1);
    runP2p(ops);
    for (int j = 0; j < m; ++j) srcs[j] = j == me ? buf + mb * es : in + j * (mine - mb) * es;
    reduce(buf + mb * es, srcs.data(), m, mine - mb, a.type, op);
    if (a.op == acclAvg) divide(buf + mb * es, mine - mb, a.type, c.nranks());
    // All-gather: this leader's reduced piece to every other; theirs into place.
    ops.clear();
    for (int j = 0; j < m; ++j) {
      if (j == me) continue;
      size_t b, e;
      piece(j, &b, &e);
      addP2p(ops, c, true, L[j], buf + mb * es, (mine - mb) * es);
      addP2p(ops, c, false, L[j], buf + b * es, (e - b) * es);
    }
    kickP2p(ops);
    if (i > 0) localBcast(i - 1);
    runP2p(ops);
  }
  localBcast(chunks - 1);
}

}  // namespace cpu
}  // namespace accl
