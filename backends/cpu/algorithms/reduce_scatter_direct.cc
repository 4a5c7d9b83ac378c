// Reduce-scatter, direct: every rank copies the step's chunk of the peers' n-1 blocks into its
// slot, one barrier, rank r reduces block r's chunk across the peers' slots and its own input
// into its output.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void reduceScatterDirect(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es / n;
  const char* send = static_cast<const char*>(a.send);
  const void** srcs = c.sources();
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    char* mine = c.slot(set, me);
    for (int q = 0; q < n; ++q)
      if (q != me) copyToSlot(mine + q * chunk * es, send + (q * a.count + off) * es, len * es);
    c.barrier();
    for (int r = 0; r < n; ++r) srcs[r] = c.slot(set, r) + me * chunk * es;
    srcs[me] = send + (me * a.count + off) * es;  // its own block is not staged
    reduce(static_cast<char*>(a.recv) + off * es, srcs, n, len, a.type, a.op);
  }
}

}  // namespace cpu
}  // namespace accl
