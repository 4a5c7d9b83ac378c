// Gather, single copy: every other rank writes its block straight into the root's output
// (process_vm_writev), all at once, while the root copies its own block; a root in place with one
// peer reads a large block from it instead (process_vm_readv). A barrier first
// publishes the buffers; the one at the end says the root's output is complete.
#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void gatherCma(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  char* recv = static_cast<char*>(a.recv);
  c.publish(a.send, a.recv);
  c.barrier();
  // A root in place with a single peer has no block of its own to copy: it reads a block of
  // 4 MiB and more itself (2 ranks, 32 MiB: 0.4 of the time of its peer writing). With more
  // peers they keep writing, all at once, where the root would read one after another (4 ranks
  // on the 2 cores, in place, 16-32 MiB: 0.33-0.57 of the time of the root reading, 5 alternating
  // launches, 2026-12-02).
  const RankCtrl& root = c.peer(a.root);
  const bool pulled =
      n == 2 && root.sendAddr == root.recvAddr + a.root * bytes && c.pulls(a.root, bytes);
  if (me != a.root) {
    if (!pulled) c.cmaWrite(a.root, root.recvAddr + me * bytes, a.send, bytes);
  } else if (pulled) {
    for (int q = 0; q < n; ++q)
      if (q != me) c.cmaRead(q, recv + q * bytes, c.peer(q).sendAddr, bytes);
  } else if (a.send != recv + me * bytes) {
    copyOnce(recv + me * bytes, a.send, bytes);
  }
  c.barrier();
}

}  // namespace cpu
}  // namespace accl
