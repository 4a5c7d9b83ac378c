// All-gather, direct: every rank copies its chunk into its slot, one barrier, every rank copies
// the peers' slots out (and its own chunk from its input).
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void allGatherDirect(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es;
  const int n = c.nranks(), me = c.rank();
  char* recv = static_cast<char*>(a.recv);
  const bool inPlace = a.send == recv + me * a.count * es;
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    const char* mine = static_cast<const char*>(a.send) + off * es;
    copyToSlot(c.slot(set, me), mine, len * es);
    c.barrier();
    for (int r = 0; r < n; ++r)
      if (r != me) memcpy(recv + (r * a.count + off) * es, c.slot(set, r), len * es);
    if (!inPlace) memcpy(recv + (me * a.count + off) * es, mine, len * es);
  }
}

}  // namespace cpu
}  // namespace accl
