// All-gather, single copy: every rank reads each peer's block straight from the peer's input.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void allGatherCma(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  char* recv = static_cast<char*>(a.recv);
  c.publish(a.send, a.recv);
  c.barrier();
  // The own block first: 5-10% faster than last for 8-32 MiB blocks (2 ranks, alternating runs;
  // level at 1 MiB), while the peers read this input.
  if (a.send != recv + me * bytes) copyUncached(recv + me * bytes, a.send, bytes);
  for (int q = 0; q < n; ++q)
    if (q != me) c.cmaRead(q, recv + q * bytes, c.peer(q).sendAddr, bytes);
  c.barrier();  // no peer reads this rank's input any more
}

}  // namespace cpu
}  // namespace accl
