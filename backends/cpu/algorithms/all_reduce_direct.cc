// All-reduce, direct: per step, every rank copies its chunk into its slot; after one barrier
// every rank reduces the peers' slots and its own input into its output. Moves n reads per byte
// per rank, but needs a single barrier: the choice for small messages, where barriers dominate.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void allReduceDirect(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es;
  const int n = c.nranks(), me = c.rank();
  const void** srcs = c.sources();
  if (a.count * es <= ShmComm::kStampAt) {
    memcpy(c.nextLine(), a.send, a.count * es);
    c.stampLine();
    for (int r = 0; r < n; ++r) {
      if (r != me) c.waitLine(r);
      srcs[r] = c.lineOf(r);
    }
    srcs[me] = a.send;
    reduce(a.recv, srcs, n, a.count, a.type, a.op);
    return;
  }
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    const char* mine = static_cast<const char*>(a.send) + off * es;
    copyToSlot(c.slot(set, me), mine, len * es);
    c.barrier();
    for (int r = 0; r < n; ++r) srcs[r] = c.slot(set, r);
    srcs[me] = mine;  // the same values, without reading them back
    reduce(static_cast<char*>(a.recv) + off * es, srcs, n, len, a.type, a.op);
  }
}

}  // namespace cpu
}  // namespace accl
