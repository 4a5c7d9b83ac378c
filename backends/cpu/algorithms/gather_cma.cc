// Gather, single copy: every other rank writes its block straight into the root's output
// (process_vm_writev), all at once, while the root copies its own block. A barrier first
// publishes the buffers; the one at the end says the root's output is complete.
#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void gatherCma(ShmComm& c, const CollArgs& a) {
  const int me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  char* recv = static_cast<char*>(a.recv);
  c.publish(a.send, a.recv);
  c.barrier();
  if (me != a.root) c.cmaWrite(a.root, c.peer(a.root).recvAddr + me * bytes, a.send, bytes);
  else if (a.send != recv + me * bytes) copyUncached(recv + me * bytes, a.send, bytes);
  c.barrier();
}

}  // namespace cpu
}  // namespace accl
