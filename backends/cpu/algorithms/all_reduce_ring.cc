// All-reduce over point to point: a ring (reduce-scatter, then all-gather) for any group of
// ranks, the flat ring over all ranks (ACCL_ALGO=allreduce:ring), and the direct exchange and
// recursive doubling the hierarchical all-reduce uses among node leaders for small messages.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void ringAllReduce(CpuComm& c, const std::vector<int>& group, int me, char* buf, size_t count,
                   acclDataType_t type, acclRedOp_t op) {
  const int m = static_cast<int>(group.size());
  if (m == 1 || count == 0) return;
  const size_t es = typeSize(type);
  const int right = group[(me + 1) % m], left = group[(me + m - 1) % m];
  auto block = [&](int k, size_t* b, size_t* e) { partRange(count, (k % m + m) % m, m, es, b, e); };
  size_t most = 0;
  for (int k = 0; k < m; ++k) {
    size_t b, e;
    block(k, &b, &e);
    most = std::max(most, e - b);
  }
  char* in = c.scratch(most * es);
  std::vector<P2pOp>& ops = c.ops();
  // Reduce-scatter: step s sends block me-s and adds block me-s-1 from the left into its own;
  // after m-1 steps this rank holds block me+1 reduced over the whole group.
  for (int s = 0; s < m - 1; ++s) {
    size_t sb, se, rb, re;
    block(me - s, &sb, &se);
    block(me - s - 1, &rb, &re);
    ops.clear();
    addP2p(ops, c, true, right, buf + sb * es, (se - sb) * es);
    addP2p(ops, c, false, left, in, (re - rb) * es);
    runP2p(ops);
    const void* srcs[2] = {buf + rb * es, in};
    reduce(buf + rb * es, srcs, 2, re - rb, type, op);
  }
  // All-gather: step s passes on block me+1-s, which the left neighbour completed.
  for (int s = 0; s < m - 1; ++s) {
    size_t sb, se, rb, re;
    block(me + 1 - s, &sb, &se);
    block(me - s, &rb, &re);
    ops.clear();
    addP2p(ops, c, true, right, buf + sb * es, (se - sb) * es);
    addP2p(ops, c, false, left, buf + rb * es, (re - rb) * es);
    runP2p(ops);
  }
}

void directAllReduce(CpuComm& c, const std::vector<int>& group, int me, char* buf, size_t count,
                     acclDataType_t type, acclRedOp_t op) {
  const int m = static_cast<int>(group.size());
  if (m == 1 || count == 0) return;
  const size_t bytes = count * typeSize(type);
  char* in = c.scratch(bytes * m);
  std::vector<P2pOp>& ops = c.ops();
  ops.clear();
  for (int k = 0; k < m; ++k) {
    if (k == me) continue;
    addP2p(ops, c, true, group[k], buf, bytes);
    addP2p(ops, c, false, group[k], in + k * bytes, bytes);
  }
  runP2p(ops);
  const void** srcs = c.sources();
  for (int k = 0; k < m; ++k) srcs[k] = k == me ? buf : in + k * bytes;
  reduce(buf, srcs, m, count, type, op);
}

void doublingAllReduce(CpuComm& c, const std::vector<int>& group, int me, char* buf,
                       size_t count, acclDataType_t type, acclRedOp_t op) {
  const int m = static_cast<int>(group.size());
  if (m == 1 || count == 0) return;
  const size_t bytes = count * typeSize(type);
  int p = 1;  // the largest power of two <= m
  while (p * 2 <= m) p *= 2;
  char* in = c.scratch(bytes);
  std::vector<P2pOp>& ops = c.ops();
  auto transfer = [&](int to, int from) {  // group indices; -1: none
    ops.clear();
    if (to >= 0) addP2p(ops, c, true, group[to], buf, bytes);
    if (from >= 0) addP2p(ops, c, false, group[from], from == to ? in : buf, bytes);
    runP2p(ops);
  };
  // Both partners add in the same order (the lower index's value first): the same bits.
  auto combine = [&](bool mineFirst) {
    const void* srcs[2] = {mineFirst ? buf : in, mineFirst ? in : buf};
    reduce(buf, srcs, 2, count, type, op);
  };
  if (me >= p) {  // folded into me-p, which sends the result back
    transfer(me - p, -1);
    transfer(-1, me - p);
    return;
  }
  if (me + p < m) {
    ops.clear();
    addP2p(ops, c, false, group[me + p], in, bytes);
    runP2p(ops);
    combine(true);
  }
  for (int d = 1; d < p; d *= 2) {
    transfer(me ^ d, me ^ d);
    combine(me < (me ^ d));
  }
  if (me + p < m) transfer(me + p, -1);
}

void allReduceRing(CpuComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  if (bytes && a.send != a.recv) memcpy(a.recv, a.send, bytes);
  acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  ringAllReduce(c, c.allRanks(), c.rank(), static_cast<char*>(a.recv), a.count, a.type, op);
  if (a.op == acclAvg) divide(a.recv, a.count, a.type, c.nranks());
}

}  // namespace cpu
}  // namespace accl
