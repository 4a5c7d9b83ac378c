// The built-in cpu backend, registered through the same acclBackend_v1 struct as plugins.
#include <algorithm>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "accl/backend.h"
#include "algorithms/algorithms.h"
#include "cpu_comm.h"
#include "p2p.h"
#include "errors.h"
#include "params.h"
#include "types.h"

namespace accl {
namespace cpu {
namespace {

const acclBackendHost_v1* gHost = nullptr;

// Nothing may throw across the ABI: errors become a code plus host->setError's text.
template <class F>
acclResult_t guard(F&& f) {
  try {
    f();
    return acclSuccess;
  } catch (const Error& e) {
    gHost->setError("%s", e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    gHost->setError("out of host memory");
    return acclSystemError;
  } catch (const std::exception& e) {
    gHost->setError("internal error: %s", e.what());
    return acclInternalError;
  }
}

CpuComm& asComm(void* b) { return *static_cast<CpuComm*>(b); }

void checkStream(void* stream) {
  if (stream)
    ACCL_THROW(acclInvalidArgument, "the cpu backend works on host memory and takes stream NULL");
}

// ------------------------------------------------------------------ groups

struct GroupState {
  int depth = 0;
  std::vector<std::function<void()>> colls;  // collectives, run in call order
  std::vector<P2pOp> p2p;                    // then all point-to-point operations together
};

// A failure on a communicator that spans nodes is shown to the ranks of this node and to this
// rank's peers on other nodes, which may be waiting for this rank while it waited for another:
// they fail at once, naming the cause, instead of timing out on a rank that is alive.
void announceFailure(CpuComm& c, const Error& e) {
  if (c.singleNode()) return;
  c.shm().fail(e.what());
  if (c.net()) c.net()->announceFailure(e.what());
}
thread_local GroupState tlsGroup;

acclResult_t groupStart() {
  ++tlsGroup.depth;
  return acclSuccess;
}

acclResult_t groupEnd() {
  return guard([] {
    if (tlsGroup.depth == 0) ACCL_THROW(acclInvalidUsage, "group end without group start");
    if (--tlsGroup.depth > 0) return;
    // Emptied however the group ends, keeping their memory for the next group.
    struct Clear {
      ~Clear() {
        tlsGroup.colls.clear();
        tlsGroup.p2p.clear();
      }
    } clear;
    for (auto& f : tlsGroup.colls) f();
    try {
      runP2p(tlsGroup.p2p);
    } catch (const Error& e) {
      for (auto& op : tlsGroup.p2p) announceFailure(*op.comm, e);
      throw;
    }
  });
}

acclResult_t p2p(bool send, const void* buf, size_t count, acclDataType_t type, int peer,
                 void* bcomm, void* stream) {
  return guard([&] {
    checkStream(stream);
    CpuComm& c = asComm(bcomm);
    size_t bytes = count * typeSize(type);
    if (tlsGroup.depth > 0) return addP2p(tlsGroup.p2p, c, send, peer, buf, bytes, false);
    std::vector<P2pOp>& ops = c.ops();
    ops.clear();
    addP2p(ops, c, send, peer, buf, bytes, false);
    try {
      runP2p(ops);
    } catch (const Error& e) {
      announceFailure(c, e);
      throw;
    }
  });
}

// ------------------------------------------------------------------ collectives

// Runs a collective now, or at group end inside a group (then errors name the call).
acclResult_t collective(const char* name, void* bcomm, void* stream, const CollArgs& a,
                        Coll coll) {
  return guard([&] {
    checkStream(stream);
    CpuComm& c = asComm(bcomm);
    Algo algo = c.algo[coll];
    if (tlsGroup.depth == 0) {
      if (c.singleNode()) return algo(c, a);
      try {
        return algo(c, a);
      } catch (const Error& e) {
        announceFailure(c, e);
        throw;
      }
    }
    uint64_t seq = c.args().seq;
    tlsGroup.colls.push_back([&c, a, algo, name, seq] {
      try {
        algo(c, a);
      } catch (const Error& e) {
        announceFailure(c, e);
        ACCL_THROW(e.code(), "%s #%llu: %s", name, (unsigned long long)seq, e.what());
      }
    });
  });
}

// ------------------------------------------------------------------ the ABI table

acclResult_t init(const acclBackendHost_v1* host) {
  gHost = host;
  return acclSuccess;
}

acclResult_t getVersion(int* version, const char** versionString) {
  *version = ACCL_VERSION_CODE;
  static const std::string s =
      std::to_string(ACCL_MAJOR) + "." + std::to_string(ACCL_MINOR) + "." + std::to_string(ACCL_PATCH);
  *versionString = s.c_str();
  return acclSuccess;
}

acclResult_t commInit(const acclBackendCommArgs_v1* args, void** bcomm) {
  return guard([&] { *bcomm = new CpuComm(args); });
}

acclResult_t commFinalize(void*) { return acclSuccess; }  // every call completes before it returns

acclResult_t commDestroy(void* bcomm) {
  return guard([&] {
    CpuComm* c = static_cast<CpuComm*>(bcomm);
    // Peers on other nodes see the connections close.
    if (__atomic_load_n(c->args().abortFlag, __ATOMIC_ACQUIRE)) c->shm().announceAbort();
    delete c;
  });
}

acclResult_t allReduce(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                       void* b, void* st) {
  return collective("acclAllReduce", b, st, {s, r, n, t, op, 0}, kAllReduce);
}
acclResult_t broadcast(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                       void* st) {
  return collective("acclBroadcast", b, st, {s, r, n, t, acclSum, root}, kBroadcast);
}
acclResult_t reduceColl(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                        int root, void* b, void* st) {
  return collective("acclReduce", b, st, {s, r, n, t, op, root}, kReduce);
}
acclResult_t allGather(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return collective("acclAllGather", b, st, {s, r, n, t, acclSum, 0}, kAllGather);
}
acclResult_t reduceScatter(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                           void* b, void* st) {
  return collective("acclReduceScatter", b, st, {s, r, n, t, op, 0}, kReduceScatter);
}
acclResult_t alltoAll(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return collective("acclAlltoAll", b, st, {s, r, n, t, acclSum, 0}, kAlltoAll);
}
acclResult_t gather(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                    void* st) {
  return collective("acclGather", b, st, {s, r, n, t, acclSum, root}, kGather);
}
acclResult_t scatter(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                     void* st) {
  return collective("acclScatter", b, st, {s, r, n, t, acclSum, root}, kScatter);
}
acclResult_t barrier(void* b, void* st) {
  return collective("acclBarrier", b, st, {nullptr, nullptr, 0, acclUint8, acclSum, 0},
                    kBarrier);
}
acclResult_t send(const void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return p2p(true, buf, n, t, peer, b, st);
}
acclResult_t recv(void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return p2p(false, buf, n, t, peer, b, st);
}

}  // namespace

// Algorithm choice by size on one node; every rank computes the same.
namespace {
bool useCma(const ShmComm& c, const CollArgs& a, Coll k) {
  return c.cma() && c.nranks() > 1 && a.count * typeSize(a.type) >= c.cmaMin(k);
}

// Whether `blocks` blocks of the call fit a box (ShmComm::nextBox). Rooted collectives that fit
// take one whatever ACCL_CMA_MIN says: the ranks that only write run ahead there, which no
// single copy, whose root waits for every rank, can do (docs/algorithms.md, "Steps").
bool fitsBox(const ShmComm& c, const CollArgs& a, int blocks) {
  return c.fitsBox(blocks * a.count * typeSize(a.type));
}
}  // namespace

void allReduceAuto(ShmComm& c, const CollArgs& a) {
  if (a.count * typeSize(a.type) <= c.allReduceDirectMax) allReduceDirect(c, a);
  else if (useCma(c, a, kAllReduce)) allReduceCma(c, a);
  else allReduceSplit(c, a);
}

void allGatherAuto(ShmComm& c, const CollArgs& a) {
  if (useCma(c, a, kAllGather)) allGatherCma(c, a);
  else allGatherDirect(c, a);
}

void broadcastAuto(ShmComm& c, const CollArgs& a) {
  if (!fitsBox(c, a, 1) && useCma(c, a, kBroadcast)) broadcastCma(c, a);
  else broadcastDirect(c, a);
}

void reduceScatterAuto(ShmComm& c, const CollArgs& a) {
  if (useCma(c, a, kReduceScatter)) reduceScatterCma(c, a);
  else reduceScatterDirect(c, a);
}

// A reduce that fits a box runs direct; otherwise single copy from its threshold (ACCL_CMA_MIN):
// the root alone reads and reduces (pull) below 128 KiB (256 KiB with more ranks than cores),
// every rank a part of it (cma) from there. Below the threshold (or without single copy) direct
// up to 128 KiB (16 KiB with more ranks than cores), then split: docs/algorithms.md, "Reduce".
void reduceAuto(ShmComm& c, const CollArgs& a) {
  const size_t bytes = a.count * typeSize(a.type);
  if (!fitsBox(c, a, c.nranks()) && useCma(c, a, kReduce)) {
    if (bytes < size_t(c.oversubscribed() ? 256 : 128) << 10) reducePull(c, a);
    else reduceCma(c, a);
  } else if (bytes <= size_t(c.oversubscribed() ? 16 : 128) << 10) {
    reduceDirect(c, a);
  } else {
    reduceSplit(c, a);
  }
}

// By size alone, as every choice here: ranks need not agree on working in place, and they must
// on the algorithm. Until 2026-12-05 a rank in place went single copy from 128 KiB only, so
// one in place and one not took different algorithms at 16-128 KiB.
void alltoAllAuto(ShmComm& c, const CollArgs& a) {
  if (useCma(c, a, kAlltoAll)) alltoAllCma(c, a);
  else alltoAllDirect(c, a);
}

void gatherAuto(ShmComm& c, const CollArgs& a) {
  if (!fitsBox(c, a, c.nranks()) && useCma(c, a, kGather)) gatherCma(c, a);
  else gatherDirect(c, a);
}

void scatterAuto(ShmComm& c, const CollArgs& a) {
  if (!fitsBox(c, a, c.nranks()) && useCma(c, a, kScatter)) scatterCma(c, a);
  else scatterDirect(c, a);
}

// With more ranks than cores, the barrier releases everyone through rank 0: ranks wait for all
// to arrive, then for rank 0 to arrive once more, so rank 0 (the usual root) runs on first and
// a rank sharing its core waits before its next call, not in it, for rank 0 to be scheduled.
// Otherwise the last to arrive runs on first (docs/algorithms.md, "Barrier").
void barrierShm(ShmComm& c, const CollArgs&) {
  c.barrier();
  if (!c.oversubscribed()) return;
  c.arrive();
  if (c.rank() != 0) c.waitFor(0);
}

}  // namespace cpu
}  // namespace accl

extern "C" const acclBackend_v1 acclCpuBackend = {
    "cpu",
    ACCL_BACKEND_ABI_VERSION,
    accl::cpu::init,
    accl::cpu::getVersion,
    accl::cpu::commInit,
    accl::cpu::commFinalize,
    accl::cpu::commDestroy,
    accl::cpu::allReduce,
    accl::cpu::broadcast,
    accl::cpu::reduceColl,
    accl::cpu::allGather,
    accl::cpu::reduceScatter,
    accl::cpu::alltoAll,
    accl::cpu::gather,
    accl::cpu::scatter,
    accl::cpu::barrier,
    accl::cpu::send,
    accl::cpu::recv,
    accl::cpu::groupStart,
    accl::cpu::groupEnd,
};
