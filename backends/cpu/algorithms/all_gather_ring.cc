// All-gather across nodes, a flat ring over all ranks: step s passes block me-s to the right and
// takes block me-s-1 from the left, straight into the output (n-1 steps, (n-1)·m bytes sent per
// rank; shared memory between neighbours on a node, TCP between nodes).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "p2p.h"
#include "types.h"

namespace accl {
namespace cpu {

void allGatherRing(CpuComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  char* recv = static_cast<char*>(a.recv);
  if (bytes && a.send != recv + me * bytes) memcpy(recv + me * bytes, a.send, bytes);
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  std::vector<P2pOp>& ops = c.ops();
  for (int s = 0; s < n - 1; ++s) {
    ops.clear();
    addP2p(ops, c, true, right, recv + ((me - s + n) % n) * bytes, bytes);
    addP2p(ops, c, false, left, recv + ((me - s - 1 + n) % n) * bytes, bytes);
    runP2p(ops);
  }
}

}  // namespace cpu
}  // namespace accl
