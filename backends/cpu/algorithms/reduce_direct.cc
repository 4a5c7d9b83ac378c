// Reduce, direct: per step, every rank but the root copies its chunk into its slot and arrives;
// the root waits for them and reduces the slots, with its own input in place of its slot, into
// its output. The others do not wait: before a rank writes the same slot set again, two steps
// on, it waits until every rank has arrived at the step in between (ShmComm::nextSet), which the
// root does only after reading. Half a barrier per step: the choice for small messages. When all
// n inputs fit in a box they go there instead, and a non-root can run up to 64 reduces ahead of
// the root rather than one step (ShmComm::nextBox).
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void reduceDirect(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es;
  const int n = c.nranks(), me = c.rank();
  const void** srcs = c.sources();
  const size_t bytes = a.count * es;
  if (c.fitsBox(n * bytes)) {
    c.nextBox(me != a.root, bytes);
    if (me != a.root) {
      memcpy(c.boxFor(me, me * bytes), a.send, bytes);
      c.stampBox();
    }
    c.arrive();
    if (me != a.root) return;
    for (int r = 0; r < n; ++r) {
      if (r != me) c.waitBox(r);
      srcs[r] = c.boxFor(r, r * bytes);
    }
    srcs[me] = a.send;
    reduce(a.recv, srcs, n, a.count, a.type, a.op);
    return;
  }
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    const char* mine = static_cast<const char*>(a.send) + off * es;
    if (me != a.root) copyToSlot(c.slot(set, me), mine, len * es);
    c.arrive();
    if (me != a.root) continue;
    c.waitAll();
    for (int r = 0; r < n; ++r) srcs[r] = c.slot(set, r);
    srcs[me] = mine;
    reduce(static_cast<char*>(a.recv) + off * es, srcs, n, len, a.type, a.op);
  }
}

}  // namespace cpu
}  // namespace accl
