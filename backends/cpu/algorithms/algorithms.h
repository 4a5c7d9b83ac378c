// The cpu backend's collective algorithms, one file each (algorithms/<collective>_<algorithm>.cc).
// docs/algorithms.md gives each one's steps and the bytes it moves. Those on a ShmComm run inside
// one node (ShmComm explains the slot sets and barriers they share; ranks and roots are local
// indices); those on a CpuComm span nodes, over point-to-point messages (p2p.h).
#pragma once

#include <cstddef>
#include <vector>

#include "accl/accl.h"
#include "cpu_comm.h"
#include "shm_comm.h"

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
void allReduceDirect(ShmComm& c, const CollArgs& a);
void allReduceSplit(ShmComm& c, const CollArgs& a);
// split, with the parts copied out by `root` only (every rank when negative): reduce, split.
void reduceSplitTo(ShmComm& c, const CollArgs& a, int root);
// cma: each rank reduces 1/n, reading its part of the peers' inputs and writing the result into
// their outputs directly (single copy; ShmComm::cma).
void allReduceCma(ShmComm& c, const CollArgs& a);
void reduceSplit(ShmComm& c, const CollArgs& a);
// direct: the root reduces every rank's slot; the others only copy into theirs (half a barrier).
void reduceDirect(ShmComm& c, const CollArgs& a);
// cma: as all-reduce cma, each rank writing its reduced part into the root's output only.
void reduceCma(ShmComm& c, const CollArgs& a);
// pull: the root reads every peer's input and reduces it alone (single copy; ShmComm::cma).
void reducePull(ShmComm& c, const CollArgs& a);
// Single copy (cross-memory attach, ShmComm::cma): ranks read each other's buffers directly.
void allGatherCma(ShmComm& c, const CollArgs& a);
void broadcastCma(ShmComm& c, const CollArgs& a);
void broadcastDirect(ShmComm& c, const CollArgs& a);
void allGatherDirect(ShmComm& c, const CollArgs& a);
void reduceScatterDirect(ShmComm& c, const CollArgs& a);
// cma: rank r reads block r of every peer's input directly (single copy; ShmComm::cma).
void reduceScatterCma(ShmComm& c, const CollArgs& a);
void alltoAllDirect(ShmComm& c, const CollArgs& a);
void gatherDirect(ShmComm& c, const CollArgs& a);
void scatterDirect(ShmComm& c, const CollArgs& a);
// cma: ranks write their blocks straight into the peers' (the root's) outputs; scatter: ranks
// read theirs straight from the root's input (single copy; ShmComm::cma).
void alltoAllCma(ShmComm& c, const CollArgs& a);
void gatherCma(ShmComm& c, const CollArgs& a);
void scatterCma(ShmComm& c, const CollArgs& a);
// A root in place has no copy of its own to make in a single-copy broadcast, scatter or gather,
// so it copies the last rootShare bytes of every peer's part (the message, or the peer's block)
// itself while the peers copy the rest: 1/n of each, so that every process copies about as
// much. None below 32 KiB, where a share is not worth its system call (4 ranks on the 2 cores,
// 32 KiB broadcast in place: 1.13x its out-of-place time with 8 KiB shares, 1.00x without,
// medians of 10 runs), nor below 64 KiB with more ranks than cores: 32 KiB shares made a 512 KiB
// gather or scatter at 4 ranks on the 2 cores 1.1-1.15x slower than none, 64 KiB level, 128 KiB
// 0.93 (5 alternating launches each, 2026-12-06), and a 128 KiB broadcast in place 19.8-23.0 us
// against 15.8-18.7 without (4 launches, 2026-12-07). At 2 ranks 32 KiB shares took 0.8 of the
// time.
inline size_t rootShare(const ShmComm& c, size_t bytes) {
  const size_t share = bytes / c.nranks() / 64 * 64;
  return share < (c.oversubscribed() ? size_t(64) << 10 : size_t(32) << 10) ? 0 : share;
}
// The waits of a single-copy broadcast, scatter or gather, where every other rank copies from or
// into the root's buffers alone: after publishing its buffers, a rank other than the root waits
// for the root alone (rootPublished); at the end only the root waits, for every rank's copy
// (rootCopied). A root that takes a share (rootShare) copies into or out of the others' buffers
// too: it waits for all of them to publish first, and they wait for it at the end. Full barriers
// there had every rank wait for all the others twice a call, which with more ranks than cores
// means for each to be scheduled (docs/algorithms.md, "Steps").
// rootPublished publishes this rank's buffers, waits, and returns the root's share of each
// peer's `bytes`: 0 unless the root is in place, which `inPlace` tells from the root's published
// buffers.
template <class InPlace>
size_t rootPublished(ShmComm& c, const CollArgs& a, size_t bytes, InPlace inPlace) {
  c.publish(a.send, a.recv);
  c.arrive();
  if (c.rank() != a.root) c.waitFor(a.root);
  const size_t share = inPlace(c.peer(a.root)) ? rootShare(c, bytes) : 0;
  if (c.rank() == a.root && share) c.waitAll();  // the others' buffers are published
  return share;
}
inline void rootCopied(ShmComm& c, int root, bool share) {
  c.arrive();
  if (c.rank() == root) c.waitAll();
  else if (share) c.waitFor(root);
}
void barrierShm(ShmComm& c, const CollArgs& a);
// The choice by size on one node (cpu_backend.cc); every rank computes the same.
void allReduceAuto(ShmComm& c, const CollArgs& a);
void allGatherAuto(ShmComm& c, const CollArgs& a);
void broadcastAuto(ShmComm& c, const CollArgs& a);
void reduceScatterAuto(ShmComm& c, const CollArgs& a);
void reduceAuto(ShmComm& c, const CollArgs& a);
void alltoAllAuto(ShmComm& c, const CollArgs& a);
void gatherAuto(ShmComm& c, const CollArgs& a);
void scatterAuto(ShmComm& c, const CollArgs& a);

// Across nodes. hier: reduce inside each node, all-reduce among node leaders over TCP, broadcast
// inside each node; the leaders' phase by the cost model (all_reduce_hier.cc): direct, recursive
// doubling, or direct reduce-scatter + all-gather pipelined in chunks (a ring beyond 256
// nodes). hierring: the three phases in turn, the leaders' phase direct when the model picks
// it, else a ring; hierdoubling: always recursive doubling. ring: one flat ring over all ranks
// (reduce-scatter then all-gather), shared memory between neighbours on a node, TCP otherwise.
void allReduceHier(CpuComm& c, const CollArgs& a);
void allReduceHierRing(CpuComm& c, const CollArgs& a);
void allReduceRing(CpuComm& c, const CollArgs& a);
void allReduceHierDoubling(CpuComm& c, const CollArgs& a);
// hier: the root sends to each node's leader directly, along a binomial tree, or by scatter +
// ring all-gather (by size and node count), then each node broadcasts in shared memory;
// hiertree, hierscatter: always that form.
void broadcastHier(CpuComm& c, const CollArgs& a);
void broadcastHierTree(CpuComm& c, const CollArgs& a);
void broadcastHierScatter(CpuComm& c, const CollArgs& a);
void reduceHier(CpuComm& c, const CollArgs& a);
void allGatherRing(CpuComm& c, const CollArgs& a);
void reduceScatterPairwise(CpuComm& c, const CollArgs& a);
// hier: gather (reduce) to each node's leader, leaders exchange their nodes' blocks, broadcast
// (scatter) inside each node; a node's link carries each block once.
void allGatherHier(CpuComm& c, const CollArgs& a);
void reduceScatterHier(CpuComm& c, const CollArgs& a);
void alltoAllPairwise(CpuComm& c, const CollArgs& a);
void gatherPairwise(CpuComm& c, const CollArgs& a);
void scatterPairwise(CpuComm& c, const CollArgs& a);
void barrierHier(CpuComm& c, const CollArgs& a);

// The cost model of docs/scaling.md, in bytes at the link rate: one round between nodes (~20 us
// at 10 Gbit/s) and the CPU cost of one more message in a step (~2 us).
constexpr double kRoundBytes = 24 << 10, kMessageBytes = 2 << 10;

// In-place all-reduce of `buf` among `group` (ranks of the communicator; this rank is
// group[me]) over point to point: ring (reduce-scatter, then all-gather; every block is reduced
// once, by one rank, so all ranks get the same bits) or direct (every rank sends the whole
// buffer to all and reduces the group's buffers in group order). avg must be done by the caller.
void ringAllReduce(CpuComm& c, const std::vector<int>& group, int me, char* buf, size_t count,
                   acclDataType_t type, acclRedOp_t op);
void directAllReduce(CpuComm& c, const std::vector<int>& group, int me, char* buf, size_t count,
                     acclDataType_t type, acclRedOp_t op);
// Recursive doubling: log2(p) rounds (p the largest power of two in the group), each exchanging
// the whole buffer with the partner at distance 1, 2, 4, ...; the m-p ranks beyond p first fold
// their buffer into rank me-p and get the result back (two more rounds).
void doublingAllReduce(CpuComm& c, const std::vector<int>& group, int me, char* buf,
                       size_t count, acclDataType_t type, acclRedOp_t op);

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
