// All-to-all, single copy: every rank writes block q of its input straight into rank q's output,
// at block `rank` (process_vm_writev), all ranks at once, and copies its own block itself; from
// an output of 4 MiB rank q reads those blocks from the peers' inputs instead
// (ShmComm::pulls). In place, the blocks for the peers are first copied aside: peers write into
// this rank's buffer while it may still be sending from it.
#include <cstdint>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void alltoAllCma(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  if (send == recv) {  // the blocks for the peers go aside; this rank's own stays where it is
    char* aside = c.aside(n * bytes);
    const size_t from = c.streamsAside((n - 1) * bytes) ? 0 : SIZE_MAX;
    for (int q = 0; q < n; ++q)
      if (q != me) copyUncached(aside + q * bytes, send + q * bytes, bytes, from);
    send = aside;
  } else {
    copyUncached(recv + me * bytes, send + me * bytes, bytes);
  }
  // Published as in place (send = recv), a rank writes its blocks from the copy aside itself:
  // its peers would read lines it has just written, on small pages (4 ranks on the 2 cores,
  // 4-64 MiB: 1.3-2.3x the time of pushing them). Out of place, large outputs are pulled as the
  // all-gather's (0.65-0.94 of the time at 4 ranks on the 2 cores).
  c.publish(a.send, recv);
  c.barrier();
  auto pulled = [&](int src, int dst) {  // whether dst reads its block from src
    return c.pulls(dst, n * bytes) && c.peer(src).sendAddr != c.peer(src).recvAddr;
  };
  for (int i = 1; i < n; ++i) {
    const int q = (me + i) % n;  // each rank starts with a different peer
    if (pulled(q, me)) c.cmaRead(q, recv + q * bytes, c.peer(q).sendAddr + me * bytes, bytes);
    if (!pulled(me, q)) c.cmaWrite(q, c.peer(q).recvAddr + me * bytes, send + q * bytes, bytes);
  }
  c.barrier();  // every block has arrived
}

}  // namespace cpu
}  // namespace accl
