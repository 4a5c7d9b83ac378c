// All-to-all, single copy: every rank writes block q of its input straight into rank q's output,
// at block `rank` (process_vm_writev), all ranks at once, and copies its own block itself. In
// place, the blocks for the peers are first copied aside: peers write into this rank's buffer
// while it may still be sending from it.
#include <cstring>

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
    for (int q = 0; q < n; ++q)
      if (q != me) memcpy(aside + q * bytes, send + q * bytes, bytes);
    send = aside;
  } else {
    copyUncached(recv + me * bytes, send + me * bytes, bytes);
  }
  c.publish(send, recv);
  c.barrier();
  for (int i = 1; i < n; ++i) {
    const int q = (me + i) % n;  // each rank starts with a different peer
    c.cmaWrite(q, c.peer(q).recvAddr + me * bytes, send + q * bytes, bytes);
  }
  c.barrier();  // every block has arrived
}

}  // namespace cpu
}  // namespace accl
