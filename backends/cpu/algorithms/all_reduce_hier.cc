// All-reduce across nodes, hierarchical: reduce inside each node to its leader (shared memory),
// all-reduce among the leaders over TCP, broadcast inside each node. Only leaders use the
// network.
//
// The leaders' phase, by the cost model of docs/scaling.md (pick, kPipeMaxNodes):
// - up to one chunk, the cheapest by the model of: direct (one round, every leader sends its
//   whole buffer to every other), recursive doubling (log2 m rounds of the whole buffer with one
//   partner), or reduce-scatter + all-gather (two rounds of pieces). Direct wins on 2 nodes and
//   for small messages, doubling for mid-size messages on hundreds of nodes, the two rounds of
//   pieces in between;
// - larger messages pipelined in chunks, so that the link is busy while the node reduces and
//   broadcasts. Per chunk the leaders run a direct reduce-scatter (leader j gets piece j from
//   every leader and reduces it) then a direct all-gather of the pieces: 2(m-1)/m of the chunk
//   each way per leader, the bandwidth optimum. Step i carries the all-gather of chunk i and,
//   queued right behind it on each connection, the reduce-scatter of chunk i+1: it is started
//   (its bytes handed to the kernel), the node's shared-memory work for the neighbouring chunks
//   runs (broadcast of chunk i-1, reduce of chunk i+2), then the step completes: the link waits
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

enum class Leaders { kDirect, kDoubling, kPieces, kRing };

// The model's costs in bytes at the link rate: R a round, M a message, S the buffer.
Leaders pick(int m, size_t bytes) {
  if (bytes > kChunk) return m > kPipeMaxNodes ? Leaders::kRing : Leaders::kPieces;
  const double s = static_cast<double>(bytes), R = kRoundBytes, M = kMessageBytes;
  int p = 1, rounds = 0;
  for (; p * 2 <= m; p *= 2) ++rounds;
  if (p < m) rounds += 2;  // fold and unfold
  const double direct = R + (m - 1) * (M + s);
  const double doubling = rounds * (R + M + s);
  const double pieces = 2 * R + 2 * (m - 1) * (M + s / m);
  if (direct <= doubling && direct <= pieces) return Leaders::kDirect;
  return doubling < pieces ? Leaders::kDoubling : Leaders::kPieces;
}

// The three phases one after the other; `how` runs the leaders' phase on the reduced buffer.
void phases(CpuComm& c, const CollArgs& a, Leaders how) {
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  reduceSplit(c.shm(), {a.send, a.recv, a.count, a.type, op, 0});
  if (c.isLeader()) {
    char* buf = static_cast<char*>(a.recv);
    auto leaders = how == Leaders::kDirect     ? directAllReduce
                   : how == Leaders::kDoubling ? doublingAllReduce
                                               : ringAllReduce;
    leaders(c, c.leaders(), c.node(), buf, a.count, a.type, op);
    if (a.op == acclAvg) divide(buf, a.count, a.type, c.nranks());
  }
  broadcastAuto(c.shm(), {a.recv, a.recv, a.count, a.type, acclSum, 0});
}

}  // namespace

// ACCL_ALGO=allreduce:hierring: the leaders' phase direct where the model picks it, else a
// ring; allreduce:hierdoubling: recursive doubling at every size.
void allReduceHierRing(CpuComm& c, const CollArgs& a) {
  bool direct = pick(c.nnodes(), a.count * typeSize(a.type)) == Leaders::kDirect;
  phases(c, a, direct ? Leaders::kDirect : Leaders::kRing);
}

void allReduceHierDoubling(CpuComm& c, const CollArgs& a) { phases(c, a, Leaders::kDoubling); }

void allReduceHier(CpuComm& c, const CollArgs& a) {
  // An average is a sum until the end: the stages would otherwise divide by their own sizes.
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  const size_t es = typeSize(a.type);
  const int m = c.nnodes(), me = c.node();
  const Leaders how = pick(m, a.count * es);
  if (how != Leaders::kPieces) return phases(c, a, how);

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
