// All-reduce, split: per step, every rank copies its chunk into its slot; after a barrier rank r
// reduces part r of the chunk across all slots, in place in its own slot; after a second barrier
// every rank copies all parts out. Each byte is reduced once, by one rank. Reduce, split, is the
// same but for the last step, which only its root takes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void reduceSplitTo(ShmComm& c, const CollArgs& a, int root) {
  const size_t es = typeSize(a.type), chunk = c.slotBytes() / es;
  const int n = c.nranks(), me = c.rank();
  const void** srcs = c.sources();
  size_t b, e;
  for (size_t off = 0; off < a.count; off += chunk) {
    size_t len = std::min(chunk, a.count - off);
    int set = c.nextSet();
    copyToSlot(c.slot(set, me), static_cast<const char*>(a.send) + off * es, len * es);
    c.barrier();
    partRange(len, me, n, es, &b, &e);
    for (int r = 0; r < n; ++r) srcs[r] = c.slot(set, r) + b * es;
    // Only this rank touches part `me` of any slot in this phase, so it may overwrite its own.
    reduce(c.slot(set, me) + b * es, srcs, n, e - b, a.type, a.op);
    c.barrier();
    if (root >= 0 && me != root) continue;
    char* out = static_cast<char*>(a.recv) + off * es;
    for (int r = 0; r < n; ++r) {
      partRange(len, r, n, es, &b, &e);
      memcpy(out + b * es, c.slot(set, r) + b * es, (e - b) * es);
    }
  }
}

void allReduceSplit(ShmComm& c, const CollArgs& a) { reduceSplitTo(c, a, -1); }

}  // namespace cpu
}  // namespace accl
