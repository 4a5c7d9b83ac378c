// All-reduce, single copy (cross-memory attach). Rank r owns part r of the message. Chunk by
// chunk it reads part r of every peer's input straight from the peer's memory
// (process_vm_readv) into private buffers small enough to stay in cache, reduces them with its
// own input into its output, and writes the result straight into every peer's output
// (process_vm_writev). A barrier at the start publishes the buffers' addresses; one at the end
// says that every part has arrived and nobody reads this rank's input any more.
//
// Against the staged split this copies nothing into /dev/shm, and no rank reads memory another
// core has just written (its peers' inputs are the caller's, its own output is written by its
// peers' kernel calls on their cores): on this VM those core-to-core reads of fresh lines are
// what is slow. Part r of every buffer is read and written by rank r alone, each chunk read
// before it is written, so in place is safe. Each byte is reduced once, by one rank, so all
// ranks get the same bits.
#include <algorithm>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

void allReduceCma(ShmComm& c, const CollArgs& a) {
  const size_t es = typeSize(a.type);
  const int n = c.nranks(), me = c.rank();
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  const void** srcs = c.sources();
  char* scratch = c.cmaScratch();
  const size_t chunk = c.cmaChunkBytes() / es;
  size_t b, e;
  partRange(a.count, me, n, es, &b, &e);
  c.publish(a.send, a.recv);
  c.barrier();
  for (size_t off = b; off < e; off += chunk) {
    const size_t len = std::min(chunk, e - off);
    for (int q = 0; q < n; ++q) {
      if (q == me) {
        srcs[q] = send + off * es;
        continue;
      }
      char* buf = scratch + (q - (q > me)) * c.cmaChunkBytes();
      c.cmaRead(q, buf, c.peer(q).sendAddr + off * es, len * es);
      srcs[q] = buf;
    }
    reduce(recv + off * es, srcs, n, len, a.type, a.op);
    for (int q = 0; q < n; ++q)
      if (q != me) c.cmaWrite(q, c.peer(q).recvAddr + off * es, recv + off * es, len * es);
  }
  c.barrier();
}

}  // namespace cpu
}  // namespace accl
