// Broadcast, single copy: every rank reads the root's input straight from the root's memory.
// In place the root has no copy of its own to make, so it takes a share of the readers' copies:
// it writes the last 1/n of the message into each of the n-1 readers while they read the rest.
// Each process then copies (n-1)/n of the message instead of the readers copying all of it while
// the root waits. That halves the time at 2 ranks, and with more ranks than cores it still
// helps (4 ranks on 2 cores: 0.74-0.82 of the time from 1 MiB), as the work is the same.
#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void broadcastCma(ShmComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  // Only the root's buffers say whether it is in place (a reader's send is not used).
  const size_t share =
      rootPublished(c, a, bytes, [](const RankCtrl& r) { return r.sendAddr == r.recvAddr; });
  const RankCtrl& root = c.peer(a.root);
  const size_t head = bytes - share;
  if (c.rank() != a.root) {
    c.cmaRead(a.root, a.recv, root.sendAddr, head);
  } else if (a.send != a.recv) {
    copyOnce(a.recv, a.send, bytes);
  } else if (share) {
    const char* tail = static_cast<const char*>(a.send) + head;
    for (int r = 0; r < c.nranks(); ++r)
      if (r != a.root) c.cmaWrite(r, c.peer(r).recvAddr + head, tail, share);
  }
  rootCopied(c, a.root, share);  // the root's input is read by all, and it wrote its share
}

}  // namespace cpu
}  // namespace accl
