// The cpu backend's collective algorithms over shared memory, one file each
// (algorithms/<collective>_<algorithm>.cc). docs/algorithms.md gives each one's steps and the
// bytes it moves; CpuComm explains the slot sets and barriers they share.
#pragma once

#include <cstddef>

#include "accl/accl.h"
#include "cpu_comm.h"

namespace accl {
namespace cpu {

struct CollArgs {
  const void* send;
  void* recv;
  size_t count;  // as in the C API: per rank for all-gather, reduce-scatter, gather, scatter
  acclDataType_t type;
  acclRedOp_t op;
  int root;
};

// All-reduce. direct: every rank reduces the whole message from all slots (one barrier per
// step; best for small messages). split: each rank reduces 1/n of it, then all copy the parts
// out (two barriers per step; each byte is reduced once).
void allReduceDirect(CpuComm& c, const CollArgs& a);
void allReduceSplit(CpuComm& c, const CollArgs& a);
void reduceSplit(CpuComm& c, const CollArgs& a);
// Single copy (cross-memory attach, CpuComm::cma): ranks read each other's buffers directly.
void allGatherCma(CpuComm& c, const CollArgs& a);
void broadcastCma(CpuComm& c, const CollArgs& a);
void broadcastDirect(CpuComm& c, const CollArgs& a);
void allGatherDirect(CpuComm& c, const CollArgs& a);
void reduceScatterDirect(CpuComm& c, const CollArgs& a);
void alltoAllDirect(CpuComm& c, const CollArgs& a);
void gatherDirect(CpuComm& c, const CollArgs& a);
void scatterDirect(CpuComm& c, const CollArgs& a);

// [begin, end) of part `i` of `n` parts of `len` elements; boundaries fall on cache lines so
// ranks writing neighbouring parts do not share one.
inline void partRange(size_t len, int i, int n, size_t elemSize, size_t* begin, size_t* end) {
  size_t align = elemSize >= 64 ? 1 : 64 / elemSize;
  auto bound = [&](int k) {
    size_t b = (len * k / n + align - 1) / align * align;
    return b < len ? b : len;
  };
  *begin = bound(i);
  *end = bound(i + 1);
}

}  // namespace cpu
}  // namespace accl
