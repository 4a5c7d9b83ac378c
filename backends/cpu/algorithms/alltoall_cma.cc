// All-to-all, single copy: every rank writes block q of its input straight into rank q's output,
// at block `rank` (process_vm_writev), all ranks at once, and copies its own block itself; from
// an output of 4 MiB rank q reads those blocks from the peers' inputs instead
// (ShmComm::pulls). A rank in place first copies the blocks for its peers out of its buffer,
// into which the peers write while it may still be sending: into its staging slot where they
// fit, for the peers to read with plain loads as the staged all-to-all's, else into a buffer
// aside that they read with the kernel's copy.
#include <cstring>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

// Blocks under 1 MiB that go aside (many ranks, or small slots) are copied through the cache:
// at 2 ranks, 8-32 KiB, that took 0.6-0.9 of the streamed copy's time, level from 64 to
// 512 KiB (3 alternating launches, 2026-12-05, before such blocks went into the slot).
constexpr size_t kAsideUncachedBytes = size_t(1) << 20;

void alltoAllCma(ShmComm& c, const CollArgs& a) {
  const int n = c.nranks(), me = c.rank();
  const size_t bytes = a.count * typeSize(a.type);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  const bool inPlace = send == recv;
  // Every rank takes a slot set where the blocks fit a slot, whether or not it is in place, so
  // that the ranks' steps stay in line.
  const int set = n * bytes <= c.slotBytes() ? c.nextSet() : -1;
  uint32_t copy = kNoCopy;
  if (inPlace && set >= 0) {  // this rank's own block stays where it is
    copy = kCopyInSlot;
    for (int q = 0; q < n; ++q)
      if (q != me) copyToSlot(c.slot(set, me) + q * bytes, send + q * bytes, bytes);
  } else if (inPlace) {
    copy = kCopyAside;
    char* aside = c.aside(n * bytes);
    for (int q = 0; q < n; ++q)
      if (q != me) copyUncached(aside + q * bytes, send + q * bytes, bytes, kAsideUncachedBytes);
    send = aside;
  } else {
    copyOnce(recv + me * bytes, send + me * bytes, bytes);
  }
  // A copy aside from 1 MiB is streamed to memory and the peers read it into outputs in their
  // own caches (in place they have just copied them aside too): no line moves between the
  // cores' caches. In some launches on this VM every line that does is slow, and writing the
  // blocks from the copy into the peers' outputs took 4-6x the time (2 ranks, 1-16 MiB; 4 ranks
  // on the 2 cores, 1-4 MiB; the two toggled loop by loop within each launch, 2026-12-02:
  // 2 ranks, 1 MiB 57-77 us against 277-343); in the other launches it is level but at 4 MiB
  // (2 ranks, 1.35-1.55x) and 1 MiB (4 ranks, 1.2-1.3x). Out of place, large outputs are pulled
  // as the all-gather's (0.65-0.94 of the time at 4 ranks on the 2 cores).
  c.publish(send, recv, copy);
  c.barrier();
  auto staged = [&](int r) { return c.peer(r).sendCopy == kCopyInSlot; };
  auto pulled = [&](int src, int dst) {  // whether dst reads its block from src
    return staged(src) || c.pulls(dst, n * bytes) ||
           (c.peer(src).sendCopy == kCopyAside && !c.peer(dst).recvRegion.id);
  };
  for (int i = 1; i < n; ++i) {
    const int q = (me + i) % n;  // each rank starts with a different peer
    if (staged(q)) memcpy(recv + q * bytes, c.slot(set, q) + me * bytes, bytes);
    else if (pulled(q, me)) c.cmaRead(q, recv + q * bytes, c.peer(q).sendAddr + me * bytes, bytes);
    if (!pulled(me, q)) c.cmaWrite(q, c.peer(q).recvAddr + me * bytes, send + q * bytes, bytes);
  }
  c.barrier();  // every block has arrived
}

}  // namespace cpu
}  // namespace accl
