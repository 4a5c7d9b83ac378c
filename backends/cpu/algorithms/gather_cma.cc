// Gather, single copy: every other rank writes its block straight into the root's output
// (process_vm_writev), all at once, while the root copies its own block. A root in place has no
// block of its own to copy, so it reads the last rootShare bytes of every peer's block itself
// (process_vm_readv) while the peers write the rest. At 2 ranks that took 0.47-0.69 of the time
// at outputs of 256 KiB-16 MiB and 0.37-0.41 at 32-64 MiB, where the root had read the whole
// block; 4 ranks on the 2 cores 0.7-0.9 at 2-64 MiB (docs/algorithms.md, "A root that helps").
// The writers wait for the root's buffers, the root at the end for every write (rootPublished,
// rootCopied).
#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void gatherCma(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  char* recv = static_cast<char*>(a.recv);
  const size_t share = rootPublished(c, a, bytes, [&](const RankCtrl& r) {
    return r.sendAddr == r.recvAddr + a.root * bytes;
  });
  const RankCtrl& root = c.peer(a.root);
  const size_t head = bytes - share;
  if (me != a.root) {
    c.cmaWrite(a.root, root.recvAddr + me * bytes, a.send, head);
  } else if (a.send != recv + me * bytes) {
    copyOnce(recv + me * bytes, a.send, bytes);
  } else if (share) {
    for (int q = 0; q < n; ++q)
      if (q != me) c.cmaRead(q, recv + q * bytes + head, c.peer(q).sendAddr + head, share);
  }
  rootCopied(c, a.root, share);  // the root's output is complete, and it read its share
}

}  // namespace cpu
}  // namespace accl
