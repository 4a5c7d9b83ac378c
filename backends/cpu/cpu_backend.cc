// The built-in cpu backend, registered through the same acclBackend_v1 struct as plugins.
#include <algorithm>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "accl/backend.h"
#include "algorithms/algorithms.h"
#include "cpu_comm.h"
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

// ------------------------------------------------------------------ point to point

struct P2pOp {
  CpuComm* comm;
  bool send;
  int peer;
  char* buf;
  size_t bytes;
  uint64_t seq;
  size_t chunks, done;
};

std::string describe(const P2pOp& op) {
  return format("%s #%llu %s rank %d (%zu of %zu chunks %s)", op.send ? "acclSend" : "acclRecv",
                (unsigned long long)op.seq, op.send ? "to" : "from", op.peer, op.done, op.chunks,
                op.send ? "sent" : "received");
}

// Moves as many chunks of `op` as its channel allows without waiting; true if any moved.
bool progress(P2pOp& op) {
  CpuComm& c = *op.comm;
  const int me = c.rank();
  const size_t cb = c.p2pBytes();
  bool moved = false;
  if (op.send) {
    ChannelCtrl& ch = c.channel(me, op.peer);
    while (op.done < op.chunks) {
      uint64_t tail = ch.tail.load(std::memory_order_relaxed);  // written only by this rank
      if (tail - ch.head.load(std::memory_order_acquire) >= kP2pBufs) break;
      int i = tail % kP2pBufs;
      size_t off = op.done * cb;
      memcpy(c.channelBuf(me, op.peer, i), op.buf + off, std::min(cb, op.bytes - off));
      ch.msgBytes[i] = op.bytes;
      ch.tail.store(tail + 1, std::memory_order_release);
      ++op.done;
      moved = true;
    }
  } else {
    ChannelCtrl& ch = c.channel(op.peer, me);
    while (op.done < op.chunks) {
      uint64_t head = ch.head.load(std::memory_order_relaxed);  // written only by this rank
      if (head == ch.tail.load(std::memory_order_acquire)) break;
      int i = head % kP2pBufs;
      if (ch.msgBytes[i] != op.bytes)
        ACCL_THROW(acclRemoteError, "acclRecv #%llu expects %zu bytes from rank %d, which sent "
                   "a message of %llu bytes: sends and receives do not match",
                   (unsigned long long)op.seq, op.bytes, op.peer,
                   (unsigned long long)ch.msgBytes[i]);
      size_t off = op.done * cb;
      memcpy(op.buf + off, c.channelBuf(op.peer, me, i), std::min(cb, op.bytes - off));
      ch.head.store(head + 1, std::memory_order_release);
      ++op.done;
      moved = true;
    }
  }
  return moved;
}

// Progresses all operations together, so exchanges that would deadlock one by one complete.
// Operations on the same channel keep their order: only the oldest unfinished one moves.
void runP2p(std::vector<P2pOp>& ops) {
  double timeout = 0;
  long spinNs = 0;
  for (auto& op : ops) {
    timeout = std::max(timeout, op.comm->args().timeout);
    spinNs = std::max(spinNs, op.comm->spinNs());
  }
  auto checkAbort = [&] {
    for (auto& op : ops) {
      if (op.done == op.chunks) continue;
      // The peer is awaited while this operation cannot move: no data to take, no room to give.
      op.comm->checkAbort([&](int r) {
        if (r != op.peer) return false;
        int me = op.comm->rank();
        ChannelCtrl& ch = op.send ? op.comm->channel(me, r) : op.comm->channel(r, me);
        uint64_t head = ch.head.load(std::memory_order_acquire);
        uint64_t tail = ch.tail.load(std::memory_order_acquire);
        return op.send ? tail - head >= kP2pBufs : head == tail;
      });
    }
  };
  Backoff wait(timeout, spinNs, checkAbort);
  for (;;) {
    bool moved = false, pending = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      P2pOp& op = ops[i];
      if (op.done == op.chunks) continue;
      pending = true;
      bool blocked = false;
      for (size_t j = 0; j < i && !blocked; ++j)
        blocked = ops[j].done < ops[j].chunks && ops[j].comm == op.comm &&
                  ops[j].send == op.send && ops[j].peer == op.peer;
      if (!blocked) moved |= progress(op);
    }
    if (!pending) return;
    if (moved) {
      wait = Backoff(timeout, spinNs, checkAbort);  // the timeout bounds a wait without progress
      continue;
    }
    wait.pause([&] {
      std::string s;
      for (auto& op : ops)
        if (op.done < op.chunks) s += (s.empty() ? "" : "; ") + describe(op);
      return s;
    });
  }
}

// ------------------------------------------------------------------ groups

struct GroupState {
  int depth = 0;
  std::vector<std::function<void()>> colls;  // collectives, run in call order
  std::vector<P2pOp> p2p;                    // then all point-to-point operations together
};
thread_local GroupState tlsGroup;

acclResult_t groupStart() {
  ++tlsGroup.depth;
  return acclSuccess;
}

acclResult_t groupEnd() {
  return guard([] {
    if (tlsGroup.depth == 0) ACCL_THROW(acclInvalidUsage, "group end without group start");
    if (--tlsGroup.depth > 0) return;
    GroupState g;
    std::swap(g, tlsGroup);
    for (auto& f : g.colls) f();
    runP2p(g.p2p);
  });
}

acclResult_t p2p(bool send, const void* buf, size_t count, acclDataType_t type, int peer,
                 void* bcomm, void* stream) {
  return guard([&] {
    checkStream(stream);
    CpuComm& c = asComm(bcomm);
    size_t bytes = count * typeSize(type);
    if (bytes == 0) return;
    P2pOp op{&c,    send, peer, const_cast<char*>(static_cast<const char*>(buf)), bytes,
             c.args().seq, (bytes + c.p2pBytes() - 1) / c.p2pBytes(), 0};
    if (tlsGroup.depth > 0) {
      tlsGroup.p2p.push_back(op);
      return;
    }
    std::vector<P2pOp> one{op};
    runP2p(one);
  });
}

// ------------------------------------------------------------------ collectives

// Runs a collective now, or at group end inside a group (then errors name the call).
acclResult_t collective(const char* name, void* bcomm, void* stream, const CollArgs& a,
                        void (*algo)(CpuComm&, const CollArgs&)) {
  return guard([&] {
    checkStream(stream);
    CpuComm& c = asComm(bcomm);
    if (tlsGroup.depth == 0) return algo(c, a);
    uint64_t seq = c.args().seq;
    tlsGroup.colls.push_back([&c, a, algo, name, seq] {
      try {
        algo(c, a);
      } catch (const Error& e) {
        ACCL_THROW(e.code(), "%s #%llu: %s", name, (unsigned long long)seq, e.what());
      }
    });
  });
}

// Algorithm choice by size; every rank computes the same.
bool useCma(const CpuComm& c, const CollArgs& a) {
  return c.cma() && c.nranks() > 1 && a.count * typeSize(a.type) >= c.cmaMin();
}

void allReduceAuto(CpuComm& c, const CollArgs& a) {
  if (a.count * typeSize(a.type) <= c.allReduceDirectMax) allReduceDirect(c, a);
  else allReduceSplit(c, a);
}

void allGatherAuto(CpuComm& c, const CollArgs& a) {
  if (useCma(c, a)) allGatherCma(c, a);
  else allGatherDirect(c, a);
}

void broadcastAuto(CpuComm& c, const CollArgs& a) {
  if (useCma(c, a)) broadcastCma(c, a);
  else broadcastDirect(c, a);
}

void barrierAlgo(CpuComm& c, const CollArgs&) { c.barrier(); }

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
    if (__atomic_load_n(c->args().abortFlag, __ATOMIC_ACQUIRE)) c->announceAbort();
    delete c;
  });
}

acclResult_t allReduce(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                       void* b, void* st) {
  return collective("acclAllReduce", b, st, {s, r, n, t, op, 0}, allReduceAuto);
}
acclResult_t broadcast(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                       void* st) {
  return collective("acclBroadcast", b, st, {s, r, n, t, acclSum, root}, broadcastAuto);
}
acclResult_t reduceColl(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                        int root, void* b, void* st) {
  return collective("acclReduce", b, st, {s, r, n, t, op, root}, reduceSplit);
}
acclResult_t allGather(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return collective("acclAllGather", b, st, {s, r, n, t, acclSum, 0}, allGatherAuto);
}
acclResult_t reduceScatter(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                           void* b, void* st) {
  return collective("acclReduceScatter", b, st, {s, r, n, t, op, 0}, reduceScatterDirect);
}
acclResult_t alltoAll(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return collective("acclAlltoAll", b, st, {s, r, n, t, acclSum, 0}, alltoAllDirect);
}
acclResult_t gather(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                    void* st) {
  return collective("acclGather", b, st, {s, r, n, t, acclSum, root}, gatherDirect);
}
acclResult_t scatter(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                     void* st) {
  return collective("acclScatter", b, st, {s, r, n, t, acclSum, root}, scatterDirect);
}
acclResult_t barrier(void* b, void* st) {
  return collective("acclBarrier", b, st, {nullptr, nullptr, 0, acclUint8, acclSum, 0},
                    barrierAlgo);
}
acclResult_t send(const void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return p2p(true, buf, n, t, peer, b, st);
}
acclResult_t recv(void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return p2p(false, buf, n, t, peer, b, st);
}

}  // namespace
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
