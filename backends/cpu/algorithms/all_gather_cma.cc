// All-gather, single copy: every rank writes its block straight into each peer's output
// (process_vm_writev). Pushing rather than reading the peers' blocks matters when the blocks
// were just written, as in training: a rank's own fresh block is in its own cache, while a
// peer's is in the peer's, and on this VM lines another core has just written are the slow
// ones to read (2 ranks, inputs written before each call: 64 KiB-1 MiB blocks took 0.42-0.64 of
// the time; 4 ranks on the 2 cores, 256 KiB-4 MiB: 0.48-0.94). Part of that moves to whoever
// reads the output next, from the writer's cache: with a sum over the output after each call,
// 0.64-1.01 at 64 KiB-1 MiB. On inputs written long before, as in accl-perf, the two are level
// (0.99-1.03 at 2-32 MiB). perf/fresh_inputs.py times fresh against stale inputs.

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
  // The own block first; copying it after the pushes measured level (0.91-1.07 at 256 KiB-64 MiB).
  if (a.send != recv + me * bytes) copyUncached(recv + me * bytes, a.send, bytes);
  for (int q = 0; q < n; ++q)
    if (q != me) c.cmaWrite(q, c.peer(q).recvAddr + me * bytes, a.send, bytes);
  c.barrier();  // every block has arrived
}

}  // namespace cpu
}  // namespace accl
