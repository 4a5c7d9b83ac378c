// All-to-all, direct: every rank copies the step's chunk of its blocks for the peers into its
// slot, one barrier, every rank copies its block from each peer's slot and its own from its
// input. In place is safe: a step reads its chunk of every block into the slot before it
// overwrites that chunk.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void alltoAllDirect(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es / n;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    char* mine = c.slot(set, me);
    for (int q = 0; q < n; ++q)
      if (q != me) copyToSlot(mine + q * chunk * es, send + (q * a.count + off) * es, len * es);
    c.barrier();
    for (int q = 0; q < n; ++q)
      if (q != me) memcpy(recv + (q * a.count + off) * es, c.slot(set, q) + me * chunk * es, len * es);
    const size_t own = (me * a.count + off) * es;
    if (send != recv) memcpy(recv + own, send + own, len * es);  // in place it is where it belongs
  }
}

}  // namespace cpu
}  // namespace accl
