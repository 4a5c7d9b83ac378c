// Scatter, single copy: every other rank reads its block straight from the root's input
// (process_vm_readv), all at once, while the root copies its own block. A barrier first
// publishes the buffers; the one at the end says the root's input has been read.
#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void scatterCma(ShmComm& c, const CollArgs& a) {
  const int me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  c.publish(a.send, a.recv);
  c.barrier();
  if (me != a.root) c.cmaRead(a.root, a.recv, c.peer(a.root).sendAddr + me * bytes, bytes);
  else if (a.recv != send + me * bytes) copyOnce(a.recv, send + me * bytes, bytes);
  c.barrier();
}

}  // namespace cpu
}  // namespace accl
