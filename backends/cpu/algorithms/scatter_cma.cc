// Scatter, single copy: every other rank reads its block straight from the root's input
// (process_vm_readv), all at once, while the root copies its own block. A root in place has no
// block of its own to copy, so it writes the last rootShare bytes of every reader's block itself
// (process_vm_writev) while they read the rest, as the broadcast's root does: at 2 ranks 0.47-0.54
// of the time at inputs of 1-16 MiB, 0.38-0.40 at 32-64 MiB; 4 ranks on the 2 cores 0.7-0.9 at
// 16-64 MiB (docs/algorithms.md, "A root that helps"). The readers wait for the root's buffers,
// the root at the end for every read (rootPublished, rootCopied).
#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void scatterCma(ShmComm& c, const CollArgs& a) {
  const int me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  const size_t share = rootPublished(c, a, bytes, [&](const RankCtrl& r) {
    return r.recvAddr == r.sendAddr + a.root * bytes;
  });
  const RankCtrl& root = c.peer(a.root);
  const size_t head = bytes - share;
  if (me != a.root) {
    c.cmaRead(a.root, a.recv, root.sendAddr + me * bytes, head);
  } else if (a.recv != send + me * bytes) {
    copyOnce(a.recv, send + me * bytes, bytes);
  } else if (share) {
    for (int r = 0; r < c.nranks(); ++r)
      if (r != me) c.cmaWrite(r, c.peer(r).recvAddr + head, send + r * bytes + head, share);
  }
  rootCopied(c, a.root, share);  // the root's input is read by all, and it wrote its share
}

}  // namespace cpu
}  // namespace accl
