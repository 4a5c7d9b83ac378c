// All-gather, single copy. Up to an output of 4 MiB every rank writes its block straight into
// each peer's output (process_vm_writev). Pushing rather than reading the peers' blocks matters
// when the blocks were just written, as in training: a rank's own fresh block is in its own
// cache, while a peer's is in the peer's, and on this VM lines another core has just written are
// the slow ones to read (2 ranks, inputs written before each call: 64 KiB-1 MiB blocks took
// 0.42-0.64 of the time; 4 ranks on the 2 cores, 256 KiB-4 MiB: 0.48-0.94). Part of that moves
// to whoever reads the output next, from the writer's cache: with a sum over the output after
// each call, 0.64-1.01 at 64 KiB-1 MiB. perf/fresh_inputs.py times fresh against stale inputs.
//
// From an output of 4 MiB, where fresh blocks no longer stay in the writer's cache, every rank
// reads the peers' blocks into its own output instead (ShmComm::pulls): that took the 2-rank
// in-place all-gather of 16-64 MiB from 0.6-0.9 of Open MPI's speed, which pulls, to level with
// it (docs/algorithms.md, "Pulling large blocks"). An output in shared host memory is still
// written by its peers, with streaming stores: 0.4-0.6 of the time of pulling it with memcpy at
// 16-64 MiB.
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
  // The own block before the pushes (after them: 1.01-1.02x the time at 256 KiB-2 MiB), after
  // the pulls (before them: the 2-rank 16 MiB out of place took 1.01-1.10x the time, 7 runs of
  // perf/ab_builds.cc; level at 8 and 32-64 MiB, at 4 ranks and on fresh inputs).
  const bool pulling = c.pulls(me, n * bytes);
  auto copyOwn = [&] {
    if (a.send != recv + me * bytes) copyOnce(recv + me * bytes, a.send, bytes);
  };
  if (!pulling) copyOwn();
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    if (pulling) c.cmaRead(q, recv + q * bytes, c.peer(q).sendAddr, bytes);
    if (!c.pulls(q, n * bytes)) c.cmaWrite(q, c.peer(q).recvAddr + me * bytes, a.send, bytes);
  }
  if (pulling) copyOwn();
  c.barrier();  // every block has arrived
}

}  // namespace cpu
}  // namespace accl
