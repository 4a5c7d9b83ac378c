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
  for (int q = 0; q < n; ++q)
    if (q != me) c.cmaRead(q, recv + q * bytes, c.peer(q).sendAddr, bytes);
  if (a.send != recv + me * bytes) memcpy(recv + me * bytes, a.send, bytes);
  c.barrier();  // no peer reads this rank's input any more
}

}  // namespace cpu
}  // namespace accl
