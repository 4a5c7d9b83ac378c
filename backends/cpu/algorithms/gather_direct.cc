// Gather, direct: every rank copies its chunk into its slot, one barrier, the root copies all
// slots out. When all n blocks fit in a box the others copy theirs there (or beside their
// stamps) and go on, and only the root waits, for each one's stamp: a rank writes a box again
// only after the root has left the step that read it (ShmComm::nextBox), up to 64 gathers on.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void gatherDirect(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es;
  const int n = c.nranks(), me = c.rank();
  char* recv = static_cast<char*>(a.recv);
  const bool root = me == a.root;
  if (root && a.send != recv + me * a.count * es)
    copyOnce(recv + me * a.count * es, a.send, a.count * es);
  if (c.fitsBox(n * a.count * es)) {
    const size_t m = a.count * es;
    c.nextBox(!root, m);
    if (!root) {
      memcpy(c.boxFor(me, me * m), a.send, m);
      c.stampBox();
    }
    c.arrive();
    if (!root) return;
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      c.waitBox(r);
      memcpy(recv + r * m, c.boxFor(r, r * m), m);
    }
    return;
  }
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    if (!root) copyToSlot(c.slot(set, me), static_cast<const char*>(a.send) + off * es, len * es);
    c.barrier();
    if (!root) continue;
    for (int r = 0; r < n; ++r)
      if (r != me) memcpy(recv + (r * a.count + off) * es, c.slot(set, r), len * es);
  }
}

}  // namespace cpu
}  // namespace accl
