// Broadcast, direct: the root copies a chunk into the whole slot set (n slots, so chunks are n
// times larger than other collectives') and arrives; every other rank arrives, waits for the
// root alone and copies the chunk out. Nobody waits for the readers here: the root's next write
// to a set waits for them (ShmComm::nextSet), so with more ranks than cores, non-roots need not
// all be scheduled for the root to go on, as after an eager send.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void broadcastDirect(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() * c.nranks() / es;
  const bool root = c.rank() == a.root;
  if (root && a.send != a.recv) copyOnce(a.recv, a.send, a.count * es);
  if (c.fitsBox(a.count * es)) {  // through the ring of small boxes
    c.nextBox(root, a.count * es);
    char* box = c.boxFor(a.root, 0);
    if (root) {
      copyToBox(box, a.send, a.count * es);
      c.stampBox();
    }
    c.arrive();
    if (!root) {
      c.waitBox(a.root);
      memcpy(a.recv, box, a.count * es);
    }
    return;
  }
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet(root);
    if (root) copyToSlot(c.slot(set, 0), static_cast<const char*>(a.send) + off * es, len * es);
    c.arrive();
    if (root) continue;
    c.waitFor(a.root);
    memcpy(static_cast<char*>(a.recv) + off * es, c.slot(set, 0), len * es);
  }
}

}  // namespace cpu
}  // namespace accl
