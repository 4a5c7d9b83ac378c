// The accl backend for NCCL-shaped libraries: NCCL, RCCL and pccl, one source built into one
// plugin per flavor (ACCL_NCCL_FLAVOR). The vendor library is opened at init (nccl_library.cc);
// this file maps accl's calls, types and errors onto it.
//
// Communicators are created non-blocking when the library can (ncclCommInitRankConfig, 2.14+),
// so that every wait on them is a poll of ncclCommGetAsyncError that honours the timeout and
// the abort flag; see docs/nccl.md for what is and is not bounded.
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "accl/backend.h"
#include "nccl_api.h"

namespace accl {
namespace nccl {
namespace {

const acclBackendHost_v1* gHost = nullptr;
const Library* gLib = nullptr;  // set by init, which the core calls before anything else

const Api& api() { return gLib->api; }
std::string sym(const char* fn) { return std::string(flavor().prefix) + fn; }
std::string libName() { return std::string(flavor().name) + " " + gLib->versionString; }

// What a call returns inside this file: the code and the message for host->setError. An empty
// message means that the core already set one (its bootstrap's failure).
struct Status {
  acclResult_t code = acclSuccess;
  std::string msg;
  explicit operator bool() const { return code != acclSuccess; }
};

acclResult_t report(const Status& s) {
  if (s.code != acclSuccess && !s.msg.empty()) gHost->setError("%s", s.msg.c_str());
  return s.code;
}

// ------------------------------------------------------------------ results

acclResult_t toAccl(Result r) {
  switch (r) {
    case kSuccess: return acclSuccess;
    case kUnhandledCudaError: return acclUnhandledDeviceError;
    case kSystemError: return acclSystemError;
    case kInternalError: return acclInternalError;
    case kInvalidArgument: return acclInvalidArgument;
    case kInvalidUsage: return acclInvalidUsage;
    case kRemoteError: return acclRemoteError;
    case kInProgress: return acclInProgress;
    case kTimeout: return acclTimeout;
  }
  return acclInternalError;
}

// Errors after which NCCL's communicator is unusable (argument errors leave it as it was).
bool breaksComm(Result r) { return r != kSuccess && r != kInvalidArgument && r != kInvalidUsage; }

// A failed vendor call, in the vendor's words: its error string and its last-error text.
Status vendorError(Result r, const std::string& call, Comm comm) {
  const char* what = api().GetErrorString(r);
  std::string msg = call + " failed: " + (what ? what : "unknown error");
  if (toAccl(r) == acclInternalError && r != kInternalError)
    msg += " (result code " + std::to_string((int)r) + ", unknown to accl)";
  const char* last = api().GetLastError ? api().GetLastError(comm) : nullptr;
  if (last && *last) msg += ": " + std::string(last);
  return {toAccl(r), msg};
}

Status notSupported(const std::string& msg) { return {acclNotSupported, msg}; }

// NCCL says "unhandled cuda error" both for a missing driver and for a missing device; the
// driver itself tells which.
std::string deviceHint() {
  if (std::string(flavor().name) != "nccl")
    return std::string(". Is a ") + flavor().device + " device available to this process?";
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return std::string(". No CUDA device: this machine has no CUDA driver (") + dlerror() + ")";
  auto cuInit = reinterpret_cast<int (*)(unsigned)>(dlsym(h, "cuInit"));
  auto cuCount = reinterpret_cast<int (*)(int*)>(dlsym(h, "cuDeviceGetCount"));
  int err = -1, n = 0;
  if (cuInit && cuCount && (err = cuInit(0)) == 0) err = cuCount(&n);
  if (err == 0 && n > 0) return "";
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  return ". No CUDA device is visible to this process (CUDA driver error " + std::to_string(err) +
         ", CUDA_VISIBLE_DEVICES=" + (visible ? visible : "(unset)") + ")";
}

// ------------------------------------------------------------------ types and ops

// Indexed by acclDataType_t / acclRedOp_t; `since` is the NCCL release that added it.
struct Mapped {
  int nccl;
  int since;
  const char* name;
};
constexpr Mapped kTypes[] = {
    {kInt8, 0, "int8"},
    {kUint8, 0, "uint8"},
    {kInt32, 0, "int32"},
    {kUint32, 0, "uint32"},
    {kInt64, 0, "int64"},
    {kUint64, 0, "uint64"},
    {kFloat16, 0, "float16"},
    {kFloat32, 0, "float32"},
    {kFloat64, 0, "float64"},
    {kBfloat16, version(2, 10, 0), "bfloat16"},
    {kFloat8e4m3, version(2, 24, 0), "float8_e4m3"},
    {kFloat8e5m2, version(2, 24, 0), "float8_e5m2"},
};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == acclNumTypes, "one row per acclDataType_t");
static_assert(acclBfloat16 == 9 && acclFloat8e4m3 == 10, "rows are in acclDataType_t order");
constexpr Mapped kOps[] = {
    {kSum, 0, "sum"}, {kProd, 0, "prod"}, {kMax, 0, "max"}, {kMin, 0, "min"},
    {kAvg, version(2, 10, 0), "avg"},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == acclNumOps, "one row per acclRedOp_t");

// The core has checked that the value is in range; the library may still be too old for it.
Status map(const Mapped& m, const char* what, int* out) {
  if (flavor().ncclVersions && gLib->code() < m.since)
    return notSupported(libName() + " has no " + what + " " + m.name + " (NCCL added it in " +
                        std::to_string(m.since / 10000) + "." +
                        std::to_string(m.since / 100 % 100) + ")");
  *out = m.nccl;
  return {};
}
Status mapType(acclDataType_t t, int* out) { return map(kTypes[t], "type", out); }
Status mapOp(acclRedOp_t op, int* out) { return map(kOps[op], "reduction", out); }

// ------------------------------------------------------------------ communicators and waiting

struct NcclComm {
  const acclBackendCommArgs_v1* args = nullptr;
  Comm comm = nullptr;       // null once aborted
  bool nonBlocking = false;  // created with config.blocking = 0: calls may return ncclInProgress
  bool finalized = false;
  bool failed = false;       // NCCL reported an error that leaves it unusable
  std::string failure;       // that error, for the calls refused after it
};

bool aborted(const NcclComm& c) { return __atomic_load_n(c.args->abortFlag, __ATOMIC_ACQUIRE); }

void abortComm(NcclComm& c) {
  if (c.comm) api().CommAbort(c.comm);  // bounded by design; its result changes nothing now
  c.comm = nullptr;
  c.failed = true;
}

using Clock = std::chrono::steady_clock;

// Waits until no communicator in `comms` is ncclInProgress, as non-blocking communicators
// require before their next call. The timeout (from `start`) and the abort flag bound the wait;
// on either, the communicators still busy are aborted, which is what unblocks NCCL.
Status settle(const std::vector<NcclComm*>& comms, const std::string& what,
              Clock::time_point start) {
  std::vector<NcclComm*> busy;
  for (NcclComm* c : comms)
    if (c->nonBlocking && c->comm) busy.push_back(c);
  for (int round = 0; !busy.empty(); ++round) {
    for (size_t i = 0; i < busy.size();) {
      NcclComm& c = *busy[i];
      Result state = kSuccess;
      Result r = api().CommGetAsyncError(c.comm, &state);
      if (r != kSuccess) return vendorError(r, sym("CommGetAsyncError"), c.comm);
      if (state == kInProgress) {
        ++i;
        continue;
      }
      if (state != kSuccess) {
        c.failed = c.failed || breaksComm(state);
        Status s = vendorError(state, what, c.comm);
        s.msg += " (reported by " + sym("CommGetAsyncError") + ")";
        return s;
      }
      busy.erase(busy.begin() + i);
    }
    if (busy.empty()) break;
    NcclComm& c = *busy[0];
    double waited = std::chrono::duration<double>(Clock::now() - start).count();
    bool abort = std::any_of(busy.begin(), busy.end(), [](NcclComm* b) { return aborted(*b); });
    if (abort || waited > c.args->timeout) {
      std::string aborts = "the " + std::to_string(busy.size()) + " busy " + flavor().name +
                           " communicator(s) were aborted with " + sym("CommAbort");
      for (NcclComm* b : busy) abortComm(*b);
      if (abort)
        return {acclRemoteError, what + " was interrupted by an abort of the communicator; " +
                                     aborts};
      char secs[32];
      snprintf(secs, sizeof(secs), "%g", c.args->timeout);
      return {acclTimeout, what + " did not complete within " + secs + " s (rank " +
                               std::to_string(c.args->rank) + " of " +
                               std::to_string(c.args->nranks) + "); " + aborts};
    }
    // Setup takes milliseconds to seconds: yield at first, then poll every millisecond.
    if (round < 100) sched_yield();
    else usleep(1000);
  }
  return {};
}

// ------------------------------------------------------------------ groups

// This thread's group: its depth and the communicators its calls touched, which the outermost
// group end waits for.
struct GroupState {
  int depth = 0;
  std::vector<NcclComm*> comms;
};
thread_local GroupState tlsGroup;

Status startGroup() {
  Result r = api().GroupStart();
  if (r != kSuccess) return vendorError(r, sym("GroupStart"), nullptr);
  ++tlsGroup.depth;
  return {};
}

Status endGroup() {
  if (tlsGroup.depth == 0)
    return {acclInvalidUsage, sym("GroupEnd") + " without a matching group start"};
  Clock::time_point start = Clock::now();
  Result r = api().GroupEnd();
  if (--tlsGroup.depth > 0)
    return r == kSuccess ? Status{} : vendorError(r, sym("GroupEnd"), nullptr);
  std::vector<NcclComm*> comms;
  comms.swap(tlsGroup.comms);
  if (r != kSuccess && r != kInProgress) {
    for (NcclComm* c : comms) c->failed = c->failed || breaksComm(r);
    return vendorError(r, sym("GroupEnd"), comms.empty() ? nullptr : comms[0]->comm);
  }
  return settle(comms, sym("GroupEnd"), start);
}

// Runs one call on `bcomm`. Outside a group it gets a group of its own: NCCL may return from a
// lone send or receive on a non-blocking communicator before it is enqueued (pytorch/pytorch
// #138860), and the group end is the one place that waits for that. NCCL puts the same bracket
// around every collective anyway.
template <class F>
Status run(void* bcomm, const char* fn, F&& call) {
  NcclComm& c = *static_cast<NcclComm*>(bcomm);
  if (!c.comm)
    return {acclInvalidUsage, std::string("the ") + flavor().name +
                                  " communicator was aborted after an earlier error"};
  if (c.failed)
    return {acclInvalidUsage, std::string("the ") + flavor().name + " communicator is " +
                                  "unusable after an earlier error; destroy it. The earlier " +
                                  "error: " + c.failure};
  bool own = tlsGroup.depth == 0;
  if (own) {
    Status s = startGroup();
    if (s) return s;
  }
  if (std::find(tlsGroup.comms.begin(), tlsGroup.comms.end(), &c) == tlsGroup.comms.end())
    tlsGroup.comms.push_back(&c);
  Result r = call(c.comm);
  Status s;
  if (r != kSuccess && r != kInProgress) {
    s = vendorError(r, sym(fn), c.comm);
    // NCCL keeps an argument error on a non-blocking communicator as its asynchronous error,
    // and fails every later call with it (seen with 2.28.9): say so now and later.
    if (c.nonBlocking && !breaksComm(r))
      s.msg += std::string("; ") + libName() + " keeps this error on a non-blocking " +
               "communicator, which is unusable now (ACCL_NCCL_BLOCKING=1 avoids that)";
    if (breaksComm(r) || c.nonBlocking) {
      c.failed = true;
      c.failure = s.msg;
    }
  }
  if (own) {
    Status e = endGroup();  // always: NCCL's group must be closed even after a failed call
    if (!s) s = e;
  }
  return s;
}

// ------------------------------------------------------------------ the ABI functions

acclResult_t init(const acclBackendHost_v1* host) {
  gHost = host;
  std::string why;
  const Library* lib = loadLibrary(host, &why);
  if (!lib) {
    host->setError("%s", why.c_str());
    return acclSystemError;
  }
  gLib = lib;
  return acclSuccess;
}

acclResult_t getVersion(int* version, const char** versionString) {
  *version = gLib->versionCode;
  *versionString = gLib->versionString.c_str();
  return acclSuccess;
}

// Rank 0's unique id, or why it has none, as every rank receives it.
struct IdSlot {
  int32_t code;
  char error[380];
  UniqueId id;
};

Status createComm(NcclComm& c) {
  const acclBackendCommArgs_v1& a = *c.args;
  std::vector<IdSlot> slots(a.nranks);
  if (a.rank == 0) {
    Result r = api().GetUniqueId(&slots[0].id);
    Status s = r == kSuccess ? Status{} : vendorError(r, sym("GetUniqueId"), nullptr);
    slots[0].code = s.code;
    snprintf(slots[0].error, sizeof(slots[0].error), "%s", s.msg.c_str());
    if (!s) gHost->log(acclLogInfo, "INIT", "rank 0 created the %s unique id", flavor().name);
  }
  // Every rank learns rank 0's outcome, so that no rank waits for an id that will not come.
  acclResult_t g = a.allGather(a.bootstrap, slots.data(), sizeof(IdSlot));
  if (g != acclSuccess) return {g, ""};
  if (slots[0].code != acclSuccess)
    return {(acclResult_t)slots[0].code,
            a.rank == 0 ? slots[0].error
                        : std::string("rank 0 could not create the unique id: ") + slots[0].error};

  Clock::time_point start = Clock::now();
  std::string fn;
  Result r;
  // Non-blocking costs NCCL a thread per group end; ACCL_NCCL_BLOCKING=1 trades the bounded
  // waits for that latency.
  const char* blocking = getenv("ACCL_NCCL_BLOCKING");
  if (api().CommInitRankConfig && !(blocking && std::string(blocking) == "1")) {
    ConfigV21400 config;
    config.blocking = 0;
    fn = sym("CommInitRankConfig");
    r = api().CommInitRankConfig(&c.comm, a.nranks, slots[0].id, a.rank, &config);
    c.nonBlocking = true;
  } else {
    fn = sym("CommInitRank");
    r = api().CommInitRank(&c.comm, a.nranks, slots[0].id, a.rank);
  }
  Status s;
  if (r == kInProgress && c.comm) s = settle({&c}, fn, start);
  else if (r != kSuccess) s = vendorError(r, fn, c.comm);
  if (!s) return {};
  if (s.code == acclUnhandledDeviceError) s.msg += deviceHint();
  // A non-blocking communicator whose init failed is NCCL's to free, when asked to. A blocking
  // one NCCL has freed already (or left half-made): leaking it beats a double free.
  if (c.nonBlocking) abortComm(c);
  c.comm = nullptr;
  return s;
}

acclResult_t commInit(const acclBackendCommArgs_v1* args, void** bcomm) {
  *bcomm = nullptr;
  std::unique_ptr<NcclComm> c(new (std::nothrow) NcclComm);
  if (!c) return report({acclSystemError, "out of host memory"});
  c->args = args;
  Status s = createComm(*c);
  if (s) return report(s);
  *bcomm = c.release();
  return acclSuccess;
}

Status finalize(NcclComm& c) {
  if (!api().CommFinalize || !c.comm || c.finalized) return {};
  Clock::time_point start = Clock::now();
  Result r = api().CommFinalize(c.comm);
  if (r != kSuccess && r != kInProgress) return vendorError(r, sym("CommFinalize"), c.comm);
  Status s = settle({&c}, sym("CommFinalize"), start);
  c.finalized = !s;
  return s;
}

acclResult_t commFinalize(void* bcomm) { return report(finalize(*static_cast<NcclComm*>(bcomm))); }

acclResult_t commDestroy(void* bcomm) {
  std::unique_ptr<NcclComm> c(static_cast<NcclComm*>(bcomm));
  if (!c->comm) return acclSuccess;
  // A communicator that is aborted, broken or still busy is aborted: NCCL's destroy would wait
  // for work that may never finish.
  Result state = kSuccess;
  bool abort = aborted(*c) || c->failed || api().CommGetAsyncError(c->comm, &state) != kSuccess ||
               state != kSuccess;
  // ncclCommDestroy finalizes implicitly, blocking; finalizing first bounds that by the timeout.
  if (!abort && finalize(*c)) abort = true;
  if (!c->comm) return acclSuccess;  // finalize timed out and aborted it
  Result r = abort ? api().CommAbort(c->comm) : api().CommDestroy(c->comm);
  c->comm = nullptr;
  if (r == kSuccess) return acclSuccess;
  return report(vendorError(r, sym(abort ? "CommAbort" : "CommDestroy"), nullptr));
}

// A call with a type: maps it, then runs call(comm, ncclType).
template <class F>
acclResult_t typed(void* b, const char* fn, acclDataType_t t, F&& call) {
  int nt;
  Status s = mapType(t, &nt);
  if (!s) s = run(b, fn, [&](Comm c) { return call(c, nt); });
  return report(s);
}

// A reduction: maps the op too, then runs call(comm, ncclType, ncclOp).
template <class F>
acclResult_t reducing(void* b, const char* fn, acclDataType_t t, acclRedOp_t op, F&& call) {
  // NCCL has no average of fp8 values and answers ncclInvalidArgument, which would leave a
  // non-blocking communicator unusable (see run): refuse it before NCCL sees it.
  if (op == acclAvg && (t == acclFloat8e4m3 || t == acclFloat8e5m2))
    return report(notSupported(libName() + " has no average of float8 values"));
  // One rank's average is its input. NCCL 2.28.9 got the last element of a 1-rank average of
  // 2^k + 1 elements wrong on an H200 (the GPU check); a sum is the same result, exactly.
  if (op == acclAvg && static_cast<NcclComm*>(b)->args->nranks == 1) op = acclSum;
  int no;
  Status s = mapOp(op, &no);
  if (s) return report(s);
  return typed(b, fn, t, [&](Comm c, int nt) { return call(c, nt, no); });
}

acclResult_t allReduce(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                       void* b, void* st) {
  return reducing(b, "AllReduce", t, op, [&](Comm c, int nt, int no) {
    return api().AllReduce(s, r, n, nt, no, c, st);
  });
}

acclResult_t broadcast(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                       void* st) {
  return typed(b, "Broadcast", t,
               [&](Comm c, int nt) { return api().Broadcast(s, r, n, nt, root, c, st); });
}

acclResult_t reduce(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op, int root,
                    void* b, void* st) {
  return reducing(b, "Reduce", t, op, [&](Comm c, int nt, int no) {
    return api().Reduce(s, r, n, nt, no, root, c, st);
  });
}

acclResult_t allGather(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return typed(b, "AllGather", t,
               [&](Comm c, int nt) { return api().AllGather(s, r, n, nt, c, st); });
}

acclResult_t reduceScatter(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                           void* b, void* st) {
  return reducing(b, "ReduceScatter", t, op, [&](Comm c, int nt, int no) {
    return api().ReduceScatter(s, r, n, nt, no, c, st);
  });
}

// The collectives NCCL added in 2.28; older libraries leave them to the core's composition.
acclResult_t missing(const char* fn) {
  return report(notSupported(libName() + " has no " + sym(fn) + " (NCCL added it in 2.28)"));
}

acclResult_t alltoAll(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  if (!api().AlltoAll) return missing("AlltoAll");
  return typed(b, "AlltoAll", t,
               [&](Comm c, int nt) { return api().AlltoAll(s, r, n, nt, c, st); });
}

acclResult_t gather(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                    void* st) {
  if (!api().Gather) return missing("Gather");
  return typed(b, "Gather", t,
               [&](Comm c, int nt) { return api().Gather(s, r, n, nt, root, c, st); });
}

acclResult_t scatter(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                     void* st) {
  if (!api().Scatter) return missing("Scatter");
  return typed(b, "Scatter", t,
               [&](Comm c, int nt) { return api().Scatter(s, r, n, nt, root, c, st); });
}

// NCCL-shaped libraries have no barrier; the core composes one from send/recv.
acclResult_t barrier(void*, void*) {
  return report(notSupported(std::string(flavor().name) + " has no barrier"));
}

acclResult_t send(const void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return typed(b, "Send", t, [&](Comm c, int nt) { return api().Send(buf, n, nt, peer, c, st); });
}

acclResult_t recv(void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return typed(b, "Recv", t, [&](Comm c, int nt) { return api().Recv(buf, n, nt, peer, c, st); });
}

acclResult_t groupStart() { return report(startGroup()); }
acclResult_t groupEnd() { return report(endGroup()); }

}  // namespace
}  // namespace nccl
}  // namespace accl

extern "C" __attribute__((visibility("default"))) const acclBackend_v1 acclBackendPlugin_v1 = {
    ACCL_NCCL_FLAVOR,
    ACCL_BACKEND_ABI_VERSION,
    accl::nccl::init,
    accl::nccl::getVersion,
    accl::nccl::commInit,
    accl::nccl::commFinalize,
    accl::nccl::commDestroy,
    accl::nccl::allReduce,
    accl::nccl::broadcast,
    accl::nccl::reduce,
    accl::nccl::allGather,
    accl::nccl::reduceScatter,
    accl::nccl::alltoAll,
    accl::nccl::gather,
    accl::nccl::scatter,
    accl::nccl::barrier,
    accl::nccl::send,
    accl::nccl::recv,
    accl::nccl::groupStart,
    accl::nccl::groupEnd,
};
