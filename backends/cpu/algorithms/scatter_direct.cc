// Scatter, direct: the root copies block r's chunk into slot r for every other rank r, one
// barrier, every rank copies its slot out. When all n blocks fit in a box the root copies them
// there and goes on, as a small broadcast's root does, and every other rank waits for it alone.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void scatterDirect(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es;
  const int n = c.nranks(), me = c.rank();
  const char* send = static_cast<const char*>(a.send);
  const bool root = me == a.root;
  if (root && a.recv != send + me * a.count * es)
    copyOnce(a.recv, send + me * a.count * es, a.count * es);
  if (c.fitsBox(n * a.count * es)) {
    c.nextBox(root, n * a.count * es);
    char* box = c.boxFor(a.root, 0);
    if (root) {
      copyToBox(box, send, n * a.count * es);
      c.stampBox();
    }
    c.arrive();
    if (!root) {
      c.waitBox(a.root);
      memcpy(a.recv, box + me * a.count * es, a.count * es);
    }
    return;
  }
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    if (root)
      for (int r = 0; r < n; ++r)
        if (r != me) copyToSlot(c.slot(set, r), send + (r * a.count + off) * es, len * es);
    c.barrier();
    if (!root) memcpy(static_cast<char*>(a.recv) + off * es, c.slot(set, me), len * es);
  }
}

}  // namespace cpu
}  // namespace accl
