// All-reduce across nodes, hierarchical: reduce inside each node to its leader (shared memory),
// all-reduce among the leaders over TCP, broadcast inside each node. Only leaders use the
// network.
//
// The leaders' phase, by the cost model of docs/scaling.md (useDirect, kPipeMaxNodes):
// - direct (one round, every leader sends its whole buffer to every other) while its extra bytes
//   cost less than the extra round of the alternative: always on 2 nodes up to one chunk, on
//   more nodes only for small messages;
// - else pipelined in chunks, so that the link is busy while the node reduces and broadcasts.
//   Per chunk the leaders run a direct reduce-scatter (leader j gets piece j from every leader
//   and reduces it) then a direct all-gather of the pieces: 2(m-1)/m of the chunk each way per
//   leader, the bandwidth optimum. Step i carries the all-gather of chunk i and, queued right
//   behind it on each connection, the reduce-scatter of chunk i+1: it is started (its bytes
//   handed to the kernel), the node's shared-memory work for the neighbouring chunks runs
//   (broadcast of chunk i-1, reduce of chunk i+2), then the step completes: the link waits
//   only for the reduction of one piece per chunk;
// - above kPipeMaxNodes nodes, for messages over a chunk: the unpipelined ring among leaders
//   (pieces of a chunk would be too small to carry each message's cost).
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
constexpr size_t kChunk = 4 << 20;  // bytes per pipeline chunk
constexpr int kPipeMaxNodes = 256;  // pieces of a chunk stay >= 16 KiB
// The model's link terms in bytes at the link rate: a round's latency (~20 us at 10 Gbit/s)
// and the CPU cost of one more message (~2 us).
constexpr double kRoundBytes = 24 << 10, kMessageBytes = 2 << 10;

// Direct costs a round plus (m-1) messages of S; reduce-scatter + all-gather two rounds plus
// 2(m-1) messages of S/m: direct wins while S(m-1)(m-2)/m < one round + (m-1) messages.
bool useDirect(int m, size_t bytes) {
  if (bytes > kChunk) return false;
  double s = static_cast<double>(bytes);
  return s * (m - 1) * (m - 2) / m < kRoundBytes + (m - 1) * kMessageBytes;
}

}  // namespace

// ACCL_ALGO=allreduce:hierring, the choice for direct, and above kPipeMaxNodes: the three
// phases one after the other, the leaders' phase direct (useDirect) or a ring.
void allReduceHierRing(CpuComm& c, const CollArgs& a) {
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  reduceSplit(c.shm(), {a.send, a.recv, a.count, a.type, op, 0});
  if (c.isLeader()) {
    char* buf = static_cast<char*>(a.recv);
    if (useDirect(c.nnodes(), a.count * typeSize(a.type)))
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
  if (useDirect(m, bytes) || (m > kPipeMaxNodes && bytes > kChunk))
    return allReduceHierRing(c, a);

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

  // The node's shared-memory sequence, the same on every rank: R(0), R(1), then per chunk i
  // B(i-1) and R(i+2), and B(last) at the end.
  auto nodeWork = [&](size_t i) {
    if (i > 0) localBcast(i - 1);
    if (i + 2 < chunks) localReduce(i + 2);
  };
  localReduce(0);
  if (!c.isLeader()) {
    if (chunks > 1) localReduce(1);
    for (size_t i = 0; i < chunks; ++i) nodeWork(i);
    localBcast(chunks - 1);
    return;
  }

  // Leaders: step i carries the all-gather of chunk i and the reduce-scatter of chunk i+1, in
  // that order on every channel (so the far side matches them), while the node works.
  const std::vector<int>& L = c.leaders();
  std::vector<P2pOp>& ops = c.ops();
  const void** srcs = c.sources();
  // The other leaders' pieces of this leader's part (pieces differ by up to a cache line).
  char* in = c.scratch((per + m * 64) * es);
  auto pieceOf = [&](size_t i, int j, char** at, size_t* bytes) {
    size_t off, cnt, b, e;
    span(i, &off, &cnt);
    partRange(cnt, j, m, es, &b, &e);
    *at = recv + (off + b) * es;
    *bytes = (e - b) * es;
  };
  // Chunk i with every other leader j. The scatter half sends j its piece of our part and takes
  // ours from j (into `in`); the gather half sends our reduced piece and takes j's into place.
  auto addExchange = [&](size_t i, bool gather) {
    char *mine, *theirs;
    size_t mineBytes, theirBytes;
    pieceOf(i, me, &mine, &mineBytes);
    for (int j = 0; j < m; ++j) {
      if (j == me) continue;
      pieceOf(i, j, &theirs, &theirBytes);
      addP2p(ops, c, true, L[j], gather ? mine : theirs, gather ? mineBytes : theirBytes);
      addP2p(ops, c, false, L[j], gather ? theirs : in + j * mineBytes,
             gather ? theirBytes : mineBytes);
    }
  };
  auto reducePiece = [&](size_t i) {
    char* mine;
    size_t bytes;
    pieceOf(i, me, &mine, &bytes);
    for (int j = 0; j < m; ++j) srcs[j] = j == me ? mine : in + j * bytes;
    reduce(mine, srcs, m, bytes / es, a.type, op);
    if (a.op == acclAvg) divide(mine, bytes / es, a.type, c.nranks());
  };
  ops.clear();
  addExchange(0, false);
  kickP2p(ops);
  if (chunks > 1) localReduce(1);
  runP2p(ops);
  reducePiece(0);
  for (size_t i = 0; i < chunks; ++i) {
    ops.clear();
    addExchange(i, true);
    if (i + 1 < chunks) addExchange(i + 1, false);
    kickP2p(ops);
    nodeWork(i);
    runP2p(ops);
    if (i + 1 < chunks) reducePiece(i + 1);
  }
  localBcast(chunks - 1);
}

}  // namespace cpu
}  // namespace accl
