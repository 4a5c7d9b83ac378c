// A stand-in for an NCCL-shaped library, for tests only: it exports NCCL's functions (under the
// prefix FAKE_PREFIX: nccl or pccl) and implements them on host memory with accl's own C API and
// its cpu backend. With it, the nccl adapter's whole path (loading, symbols, type and op
// mapping, groups, non-blocking communicators, errors) runs end to end on a CPU-only machine.
//
// Build-time switches:
//   FAKE_PREFIX   symbol prefix (nccl, pccl)
//   FAKE_OLD      1: pretend to be NCCL 2.12, without the symbols later releases added
//                 (ncclGetLastError, ncclCommInitRankConfig, ncclCommFinalize, ncclAlltoAll,
//                 ncclGather, ncclScatter) and without the fp8 types
// Run-time switches (environment):
//   FAKE_NCCL_VERSION       the version code ncclGetVersion reports (default 22907, or 21212)
//   FAKE_NCCL_REJECT_COUNT  a collective or send/recv with this count fails ...
//   FAKE_NCCL_REJECT_CODE   ... with this ncclResult_t (default 4, ncclInvalidArgument)
//   FAKE_NCCL_BUSY_POLLS    polls of ncclCommGetAsyncError that answer ncclInProgress after
//                           each non-blocking call (default 3), as NCCL's progress thread would
//   FAKE_NCCL_HANG_INIT     1: a non-blocking init never completes (until ncclCommAbort)
//   FAKE_NCCL_LOG           a file to which ncclCommDestroy and ncclCommAbort append a line
//   FAKE_NCCL_TIMEOUT       timeout (s) of the inner accl communicators (default 30)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "accl/accl.h"

#define FAKE_CAT2(a, b) a##b
#define FAKE_CAT(a, b) FAKE_CAT2(a, b)
#define FN(name) FAKE_CAT(FAKE_PREFIX, name)
#define FAKE_STR2(x) #x
#define FAKE_STR(x) FAKE_STR2(x)
#define EXPORT extern "C" __attribute__((visibility("default")))

#ifndef FAKE_OLD
#define FAKE_OLD 0
#endif

namespace {

using Result = int;  // ncclResult_t: 0 success, 4 invalid argument, 7 in progress, ...
constexpr Result kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5, kInProgress = 7;
constexpr int kDefaultVersion = FAKE_OLD ? 21212 : 22907;

struct Config {  // the leading fields of ncclConfig_t
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
};

struct FakeComm {
  acclComm_t comm = nullptr;
  bool nonBlocking = false;
  bool hang = false;
  int busyPolls = 0;
  // As NCCL (seen with 2.28.9 on a GPU): a call that fails its checks on a non-blocking
  // communicator leaves that error on the communicator, and every later call fails with it.
  Result sticky = kSuccess;
};

thread_local std::string tlsLastError;
thread_local int tlsDepth = 0;
thread_local std::vector<FakeComm*> tlsTouched;

long env(const char* name, long def) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : def;
}

int version() { return (int)env("FAKE_NCCL_VERSION", kDefaultVersion); }

Result fail(Result r, const std::string& msg) {
  tlsLastError = FAKE_STR(FAKE_PREFIX) "-fake: " + msg;
  return r;
}

// accl's codes 0..8 are NCCL's; the cpu backend never answers acclNotSupported.
Result fromAccl(acclResult_t r, const char* call) {
  if (r == acclSuccess || r == acclInProgress) return r;
  return fail(r == acclNotSupported ? kInvalidUsage : (Result)r,
              std::string(call) + ": " + acclGetLastError(nullptr));
}

void note(const char* what) {
  const char* path = getenv("FAKE_NCCL_LOG");
  if (!path || !*path) return;
  if (FILE* f = fopen(path, "a")) {
    fprintf(f, "%s\n", what);
    fclose(f);
  }
}

// Marks a non-blocking communicator busy for a few polls, as NCCL is while its progress thread
// finishes the work of a call that returned ncclInProgress.
Result busy(FakeComm* c) {
  c->busyPolls = (int)env("FAKE_NCCL_BUSY_POLLS", 3);
  return kInProgress;
}

// The checks NCCL makes before it enqueues, plus the test's injected failure.
Result check(FakeComm* c, size_t count, int type) {
  if (!c || (!c->comm && !c->hang)) return fail(kInvalidArgument, "comm is not a communicator");
  if (c->sticky != kSuccess) return fail(c->sticky, "the communicator failed earlier");
  long reject = env("FAKE_NCCL_REJECT_COUNT", -1);
  if (reject >= 0 && count == (size_t)reject)
    return fail((Result)env("FAKE_NCCL_REJECT_CODE", kInvalidArgument),
                "count " + std::to_string(count) + " rejected (FAKE_NCCL_REJECT_COUNT)");
  int types = version() >= 22400 ? 12 : 10;  // the fp8 types came with NCCL 2.24
  if (type < 0 || type >= types)
    return fail(kInvalidArgument, "datatype " + std::to_string(type) + " is not a type of " +
                                      std::to_string(version()));
  return kSuccess;
}

// Runs an operation now, or queues it in the current group (accl's group semantics are NCCL's).
template <class F>
Result op(const char* name, FakeComm* c, size_t count, int type, F&& f) {
  Result r = check(c, count, type);
  if (r != kSuccess) {
    if (c && c->nonBlocking) c->sticky = r;
    return r;
  }
  r = fromAccl(f(c->comm), name);
  if (r != kSuccess) return r;
  if (tlsDepth > 0) {
    tlsTouched.push_back(c);
    return kSuccess;
  }
  return c->nonBlocking ? busy(c) : kSuccess;
}

Result initRank(FakeComm** out, int nranks, const acclUniqueId& id, int rank, bool nonBlocking) {
  *out = nullptr;
  auto* c = new FakeComm;
  c->nonBlocking = nonBlocking;
  if (nonBlocking && env("FAKE_NCCL_HANG_INIT", 0)) {
    c->hang = true;
    *out = c;
    return kInProgress;
  }
  // The inner communicator is always made blocking; a non-blocking one then reports
  // ncclInProgress for a few polls, which is all an NCCL user can observe of it.
  acclConfig_t config = ACCL_CONFIG_INITIALIZER;
  config.backend = "cpu";
  config.timeout = (double)env("FAKE_NCCL_TIMEOUT", 30);
  Result r = fromAccl(acclCommInitRankConfig(&c->comm, nranks, id, rank, &config), "init");
  if (r != kSuccess) {
    delete c;
    return r;
  }
  *out = c;
  return nonBlocking ? busy(c) : kSuccess;
}

}  // namespace

EXPORT Result FN(GetVersion)(int* v) {
  if (!v) return fail(kInvalidArgument, "version is NULL");
  *v = version();
  return kSuccess;
}

EXPORT const char* FN(GetErrorString)(Result r) {
  static const char* const kStrings[] = {
      "no error", "unhandled cuda error", "unhandled system error", "internal error",
      "invalid argument", "invalid usage", "remote process exited or there was a network error",
      "operation in progress", "timeout"};
  return r >= 0 && r < 9 ? kStrings[r] : "unknown result code";
}

EXPORT Result FN(GetUniqueId)(acclUniqueId* id) { return fromAccl(acclGetUniqueId(id), "id"); }

EXPORT Result FN(CommInitRank)(FakeComm** c, int nranks, acclUniqueId id, int rank) {
  return initRank(c, nranks, id, rank, false);
}

EXPORT Result FN(CommGetAsyncError)(FakeComm* c, Result* state) {
  if (!c || !state) return fail(kInvalidArgument, "NULL argument");
  if (c->sticky != kSuccess) {
    *state = c->sticky;
    return kSuccess;
  }
  if (c->hang || c->busyPolls > 0) {
    c->busyPolls -= c->busyPolls > 0;
    *state = kInProgress;
    return kSuccess;
  }
  acclResult_t r;
  Result e = fromAccl(acclCommGetAsyncError(c->comm, &r), "async error");
  if (e != kSuccess) return e;
  *state = fromAccl(r, "the communicator");
  return kSuccess;
}

EXPORT Result FN(CommDestroy)(FakeComm* c) {
  if (!c) return kSuccess;
  note("destroy");
  Result r = c->comm ? fromAccl(acclCommDestroy(c->comm), "destroy") : kSuccess;
  delete c;
  return r;
}

EXPORT Result FN(CommAbort)(FakeComm* c) {
  if (!c) return kSuccess;
  note("abort");
  Result r = c->comm ? fromAccl(acclCommAbort(c->comm), "abort") : kSuccess;
  delete c;
  return r;
}

// NCCL has no average of fp8 values (ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11, ncclAvg = 4).
Result checkOp(FakeComm* c, int type, int redop) {
  if (redop == 4 && (type == 10 || type == 11)) {
    if (c && c->nonBlocking) c->sticky = kInvalidArgument;
    return fail(kInvalidArgument, "ncclAvg is not supported for fp8 types");
  }
  return kSuccess;
}

EXPORT Result FN(AllReduce)(const void* s, void* r, size_t n, int t, int o, FakeComm* c,
                            void* st) {
  if (Result e = checkOp(c, t, o)) return e;
  return op("allreduce", c, n, t, [&](acclComm_t a) {
    return acclAllReduce(s, r, n, (acclDataType_t)t, (acclRedOp_t)o, a, st);
  });
}

EXPORT Result FN(Broadcast)(const void* s, void* r, size_t n, int t, int root, FakeComm* c,
                            void* st) {
  return op("broadcast", c, n, t, [&](acclComm_t a) {
    return acclBroadcast(s, r, n, (acclDataType_t)t, root, a, st);
  });
}

EXPORT Result FN(Reduce)(const void* s, void* r, size_t n, int t, int o, int root, FakeComm* c,
                         void* st) {
  if (Result e = checkOp(c, t, o)) return e;
  return op("reduce", c, n, t, [&](acclComm_t a) {
    return acclReduce(s, r, n, (acclDataType_t)t, (acclRedOp_t)o, root, a, st);
  });
}

EXPORT Result FN(AllGather)(const void* s, void* r, size_t n, int t, FakeComm* c, void* st) {
  return op("allgather", c, n, t,
            [&](acclComm_t a) { return acclAllGather(s, r, n, (acclDataType_t)t, a, st); });
}

EXPORT Result FN(ReduceScatter)(const void* s, void* r, size_t n, int t, int o, FakeComm* c,
                                void* st) {
  if (Result e = checkOp(c, t, o)) return e;
  return op("reducescatter", c, n, t, [&](acclComm_t a) {
    return acclReduceScatter(s, r, n, (acclDataType_t)t, (acclRedOp_t)o, a, st);
  });
}

EXPORT Result FN(Send)(const void* s, size_t n, int t, int peer, FakeComm* c, void* st) {
  return op("send", c, n, t,
            [&](acclComm_t a) { return acclSend(s, n, (acclDataType_t)t, peer, a, st); });
}

EXPORT Result FN(Recv)(void* r, size_t n, int t, int peer, FakeComm* c, void* st) {
  return op("recv", c, n, t,
            [&](acclComm_t a) { return acclRecv(r, n, (acclDataType_t)t, peer, a, st); });
}

EXPORT Result FN(GroupStart)() {
  ++tlsDepth;
  return fromAccl(acclGroupStart(), "group start");
}

EXPORT Result FN(GroupEnd)() {
  if (tlsDepth == 0) return fail(kInvalidUsage, "group end without group start");
  Result r = fromAccl(acclGroupEnd(), "group end");
  if (--tlsDepth > 0 || r != kSuccess) {
    if (tlsDepth == 0) tlsTouched.clear();
    return r;
  }
  std::vector<FakeComm*> touched;
  touched.swap(tlsTouched);
  for (FakeComm* c : touched)
    if (c->nonBlocking) r = busy(c);
  return r;
}

#if !FAKE_OLD

EXPORT const char* FN(GetLastError)(FakeComm*) { return tlsLastError.c_str(); }

EXPORT Result FN(CommInitRankConfig)(FakeComm** c, int nranks, acclUniqueId id, int rank,
                                     Config* config) {
  if (!config || config->magic != 0xcafebeef)
    return fail(kInvalidArgument, "config was not initialised with NCCL_CONFIG_INITIALIZER");
  bool nonBlocking = config->version >= 21400 && config->blocking == 0;
  return initRank(c, nranks, id, rank, nonBlocking);
}

// The cpu backend finishes every call before it returns: there is nothing to flush.
EXPORT Result FN(CommFinalize)(FakeComm* c) {
  if (!c || !c->comm) return fail(kInvalidArgument, "comm is not a communicator");
  return c->nonBlocking ? busy(c) : kSuccess;
}

EXPORT Result FN(AlltoAll)(const void* s, void* r, size_t n, int t, FakeComm* c, void* st) {
  return op("alltoall", c, n, t,
            [&](acclComm_t a) { return acclAlltoAll(s, r, n, (acclDataType_t)t, a, st); });
}

EXPORT Result FN(Gather)(const void* s, void* r, size_t n, int t, int root, FakeComm* c,
                         void* st) {
  return op("gather", c, n, t,
            [&](acclComm_t a) { return acclGather(s, r, n, (acclDataType_t)t, root, a, st); });
}

EXPORT Result FN(Scatter)(const void* s, void* r, size_t n, int t, int root, FakeComm* c,
                          void* st) {
  return op("scatter", c, n, t,
            [&](acclComm_t a) { return acclScatter(s, r, n, (acclDataType_t)t, root, a, st); });
}

#endif
