// Broadcast, single copy: every rank reads the root's input straight from the root's memory.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void broadcastCma(ShmComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  c.publish(a.send, a.recv);
  c.barrier();
  if (c.rank() != a.root) c.cmaRead(a.root, a.recv, c.peer(a.root).sendAddr, bytes);
  else if (a.send != a.recv) copyUncached(a.recv, a.send, bytes);
  c.barrier();  // the root's input is read by all
}

}  // namespace cpu
}  // namespace accl
