// Data kernels: the reductions for every accl type and op, and the copy for large blocks.
#pragma once

#include <cstddef>
#include <cstring>

#include "accl/accl.h"

namespace accl {
namespace cpu {

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count. dst may be one of the sources
// (same address), not a partial overlap. Half and fp8 types accumulate in float and round once.
// Avg divides by `avgDivisor`, or by `n` when it is 0 (integer division for integer types).
void reduce(void* dst, const void* const* srcs, int n, size_t count, acclDataType_t type,
            acclRedOp_t op, int avgDivisor = 0);

// The types whose reduction over several inputs rounds once; reduced two at a time they would
// round at every step.
inline bool roundsOnce(acclDataType_t type) {
  return type == acclFloat16 || type == acclBfloat16 || type == acclFloat8e4m3 ||
         type == acclFloat8e5m2;
}

// buf[i] /= n: the end of an average whose sum was computed in stages.
inline void divide(void* buf, size_t count, acclDataType_t type, int n) {
  const void* src = buf;
  reduce(buf, &src, 1, count, type, acclAvg, n);
}

// memcpy, from `from` bytes on with streaming stores: the copy neither reads the destination
// first nor evicts from the caches what the next copy needs.
void copyUncached(void* dst, const void* src, size_t bytes, size_t from);

// The copy of a block that nobody reads again in this call (a rank's own block of an
// all-gather, the root's copy of a broadcast). From kMovsbCopyBytes `rep movsb`, which does not
// read the destination first either: glibc's memcpy does above the L2 size on this AMD VM, 3x
// slower into a destination out of the cache. At 1 MiB memcpy was still faster (the 2-rank
// all-gather of 2 MiB: 0.96-0.99 of the time). From kUncachedCopyBytes streaming stores, which
// beat `rep movsb` once the blocks outgrow the L3 (docs/algorithms.md, "Zeros stream faster").
constexpr size_t kMovsbCopyBytes = size_t(2) << 20;
constexpr size_t kUncachedCopyBytes = size_t(8) << 20;
void copyOnce(void* dst, const void* src, size_t bytes);

// Copy into a staging slot that the peers read next. From kSlotUncachedBytes it streams too,
// so the readers fetch the lines from memory instead of out of this core's cache: where the
// cores have separate L3s that is 2-4x faster, where they share one up to 2x slower
// (docs/algorithms.md, "Staging around the caches"; perf/slot_handoff.cc).
constexpr size_t kSlotUncachedBytes = 8192;
inline void copyToSlot(void* slot, const void* src, size_t bytes) {
  copyUncached(slot, src, bytes, kSlotUncachedBytes);
}

// Copy into a box (ShmComm::nextBox) that every other rank reads next: a broadcast's or
// scatter's root. From kBoxUncachedBytes it streams, so the root's write does not first take
// each line out of the cache of the other core, whose readers read the box's last use: with
// more ranks than cores (the only time boxes hold more than 1 KiB), at 4 ranks on the 2 cores,
// that write took 3-11x the time of the streamed one at 2-32 KiB in this VM's slow minutes
// (32 KiB broadcast in place: 27-32 us against 6.2-6.8) and 1.4-1.9x at 8-32 KiB in its fast
// ones; below 2 KiB the streamed copy was slower (docs/algorithms.md, "Steps"). A gather's or
// reduce's box has one reader and its writers copy with memcpy: streamed, the root's read of
// 8 KiB blocks from memory took 2-3x as long.
constexpr size_t kBoxUncachedBytes = 2048;
inline void copyToBox(void* box, const void* src, size_t bytes) {
  if (bytes < kBoxUncachedBytes) memcpy(box, src, bytes);  // no call for the small ones
  else copyUncached(box, src, bytes, kBoxUncachedBytes);
}

}  // namespace cpu
}  // namespace accl
