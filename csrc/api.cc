// The C API: the one place where C++ exceptions become acclResult_t codes and messages.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

#include "accl/accl.h"
#include "comm.h"
#include "compose.h"
#include "errors.h"
#include "host_memory.h"
#include "logging.h"
#include "memory.h"
#include "params.h"
#include "types.h"

using namespace accl;

namespace {

// ------------------------------------------------------------------ error translation

template <class F>
acclResult_t api(const char* name, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    setLastError(format("%s: %s", name, e.what()));
    return e.code();
  } catch (const std::bad_alloc&) {
    setLastError(format("%s: out of host memory", name));
    return acclSystemError;
  } catch (const std::exception& e) {
    setLastError(format("%s: internal error: %s", name, e.what()));
    return acclInternalError;
  }
}

// Errors after which the ranks are out of step or a peer is gone: the communicator is unusable.
bool breaksComm(acclResult_t r) {
  return r == acclTimeout || r == acclRemoteError || r == acclSystemError ||
         r == acclInternalError || r == acclUnhandledDeviceError;
}

void markBroken(Comm& c, acclResult_t r, const std::string& msg) {
  c.handle->idleCalls.store(false);
  std::lock_guard<std::mutex> lock(c.asyncMutex);
  if (c.asyncError.load() != acclSuccess) return;  // keep the first cause
  c.asyncMessage = msg;
  c.asyncError.store(r);
}

// Announces a call on `comm` and checks the handle; the destructor ends the call. See
// acclComm::inflight for why the order matters.
class Entered {
 public:
  explicit Entered(acclComm_t comm, bool allowNotReady = false) : h_(comm) {
    if (!comm) ACCL_THROW(acclInvalidArgument, "comm is NULL");
    h_->inflight.fetch_add(1);
    try {
      check(allowNotReady);
    } catch (...) {
      h_->inflight.fetch_sub(1);  // a throwing constructor gets no destructor
      throw;
    }
  }
  Entered(Entered&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  ~Entered() {
    if (h_) h_->inflight.fetch_sub(1);
  }
  Comm& comm() { return *h_->impl; }
  acclComm_t handle() const { return h_; }

 private:
  void check(bool allowNotReady) {
    uint32_t m = h_->magic.load();
    if (m == acclComm::kDead) ACCL_THROW(acclInvalidUsage, "the communicator was destroyed");
    if (m != acclComm::kLive)
      ACCL_THROW(acclInvalidArgument, "comm does not point to an accl communicator");
    if (allowNotReady) return;
    Comm& c = *h_->impl;
    int st = c.asyncError.load();
    if (st == acclInProgress)
      ACCL_THROW(acclInProgress, "the communicator is still initialising (non-blocking init); "
                 "poll acclCommGetAsyncError");
    if (st != acclSuccess) {
      std::lock_guard<std::mutex> lock(c.asyncMutex);
      ACCL_THROW((acclResult_t)st, "rank %d: the communicator is unusable after an earlier "
                 "error; destroy or abort it. The earlier error: %s", c.rank,
                 c.asyncMessage.c_str());
    }
    if (c.finalized) ACCL_THROW(acclInvalidUsage, "the communicator was finalized");
  }

  acclComm_t h_;
};

std::string where(const Comm& c, uint64_t seq) {
  return format("rank %d/%d (%s) #%llu", c.rank, c.nranks, c.backendName.c_str(),
                (unsigned long long)seq);
}

std::string jsonEscape(const std::string& in) {
  std::string out;
  for (char ch : in) {
    if (ch == '"' || ch == '\\') out += '\\';
    if ((unsigned char)ch < 0x20) out += format("\\u%04x", ch);
    else out += ch;
  }
  return out;
}

std::string traceJson(const Comm& c, const std::string& reason) {
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  return c.trace->json(format(
      "\"version\": 1, \"comm\": \"%016llx\", \"rank\": %d, \"nranks\": %d, \"backend\": \"%s\", "
      "\"host\": \"%s\", \"pid\": %d, \"created_unix_us\": %lld, \"reason\": \"%s\"",
      (unsigned long long)c.args.commHash, c.rank, c.nranks, c.backendName.c_str(), host,
      getpid(), (long long)c.createdUnixUs, jsonEscape(reason).c_str()));
}

// On a timeout or a dead peer, the flight recorder goes to ACCL_TRACE_DIR, if set.
void dumpTrace(const Comm& c, const std::string& reason) {
  if (c.traceDir.empty() || !c.trace) return;
  std::string path = format("%s/accl-trace-%016llx-rank%d.json", c.traceDir.c_str(),
                            (unsigned long long)c.args.commHash, c.rank);
  FILE* f = fopen(path.c_str(), "w");
  if (!f) {
    ACCL_WARN("INIT", "cannot write the flight recorder to %s: %s", path.c_str(), strerror(errno));
    return;
  }
  std::string j = traceJson(c, reason);
  fwrite(j.data(), 1, j.size(), f);
  fclose(f);
  ACCL_WARN("INIT", "rank %d: flight recorder written to %s", c.rank, path.c_str());
}

void fail(Comm& c, acclResult_t r, const std::string& msg) {
  if (!breaksComm(r)) return;
  markBroken(c, r, msg);
  dumpTrace(c, msg);
}

// Calls into the backend for one operation and turns its failure into an Error. Inside a group
// (`groupStart`: the clock's reading when the group's operations started) the operation
// completes at group end, which records it done.
template <class Run>
acclResult_t runOnBackend(Comm& c, uint64_t seq, const Run& run,
                          const uint64_t* groupStart = nullptr) {
  if (__atomic_load_n(&c.abortFlag, __ATOMIC_ACQUIRE))
    ACCL_THROW(acclRemoteError, "%s: the communicator was aborted", where(c, seq).c_str());
  c.args.seq = seq;
  clearBackendMessage();
  if (groupStart) c.trace->update(seq, Trace::kStarted, acclSuccess, *groupStart);
  acclResult_t r = run(c);
  if (r == acclSuccess) {
    if (!groupStart) c.trace->update(seq, Trace::kDone);
    return r;
  }
  c.trace->update(seq, Trace::kFailed, r);
  std::string msg = format("%s: %s", where(c, seq).c_str(), takeBackendMessage().c_str());
  fail(c, r, msg);
  throw Error(r, msg);
}

// ACCL_CHECK: every rank shows the others its call; a disagreement fails on every rank before
// any data moves, naming the first rank that differs from rank 0 and how.
void checkAgreement(Comm& c, const OpDesc& d, uint64_t seq) {
  struct Wire {
    uint64_t seq, count;
    int32_t type, root, redop;
    char name[28];
  };
  std::vector<Wire> all(c.nranks);
  Wire& me = all[c.rank];
  me = {seq, d.count, d.type, d.root, d.redop, {}};
  snprintf(me.name, sizeof(me.name), "%s", d.name);
  try {
    c.bootstrap->allGather(all.data(), sizeof(Wire), c.args.timeout);
  } catch (const Error& e) {
    fail(c, e.code(), e.what());
    throw;
  }
  auto show = [](const Wire& w) {
    std::string s = format("%s #%llu (count %llu", w.name, (unsigned long long)w.seq,
                           (unsigned long long)w.count);
    if (w.type >= 0) s += format(", %s", typeName(acclDataType_t(w.type)));
    if (w.redop >= 0) s += format(", %s", opName(acclRedOp_t(w.redop)));
    if (w.root >= 0) s += format(", root %d", w.root);
    return s + ")";
  };
  const Wire& ref = all[0];
  for (int r = 1; r < c.nranks; ++r) {
    const Wire& w = all[r];
    if (strcmp(w.name, ref.name) || w.count != ref.count || w.type != ref.type ||
        w.root != ref.root || w.redop != ref.redop)
      ACCL_THROW(acclInvalidUsage, "ACCL_CHECK: rank %d called %s but rank 0 called %s",
                 r, show(w).c_str(), show(ref).c_str());
  }
}

// ------------------------------------------------------------------ groups

// A queued operation's call with its arguments, held inline: in a std::function, whose small
// buffer they outgrow, every call in a group cost an allocation.
class QueuedRun {
 public:
  template <class F>
  explicit QueuedRun(const F& f) : call_([](const void* p, Comm& c) {
      return (*static_cast<const F*>(p))(c);
    }) {
    static_assert(sizeof(F) <= sizeof(buf_) && alignof(F) <= alignof(std::max_align_t) &&
                      std::is_trivially_copyable_v<F>,
                  "a queued call captures plain values only");
    new (buf_) F(f);
  }
  acclResult_t operator()(Comm& c) const { return call_(buf_, c); }

 private:
  alignas(std::max_align_t) unsigned char buf_[64];
  acclResult_t (*call_)(const void*, Comm&);
};

struct QueuedOp {
  acclComm_t handle;
  uint64_t seq;
  QueuedRun run;
};
// What a group collects: its calls, then at group end the communicators it touches (each held
// once) and their backends. Kept from one group to the next, so that a group allocates nothing.
struct GroupLists {
  std::vector<QueuedOp> ops;
  std::vector<Entered> held;
  std::vector<const acclBackend_v1*> backends;
  void swap(GroupLists& o) {  // pointers only: std::swap would move each list three times
    ops.swap(o.ops);
    held.swap(o.held);
    backends.swap(o.backends);
  }
};
// One thread_local for all of a thread's group state: each costs a lookup per access here.
struct GroupState {
  int depth = 0;
  uint64_t queuedAt = 0;  // the clock when the first traced operation was queued (0: none yet)
  GroupLists lists;
};
thread_local GroupState tlsGroup;

void chooseBackend(Comm& c, const OpDesc& d);

// The full way of an operation on a communicator (see commOp), out of line so that a call of
// nothing does not pay for its stack frame. Taking its arguments by value instead made a 2-rank
// send/recv group slower (0.43 against 0.37 us, perf/ab_builds.cc).
template <class Check, class Run>
[[gnu::noinline]] acclResult_t commOpFull(const OpDesc& d, acclComm_t comm, const Check& check,
                                          const Run& run) {
  return api(d.name, [&] {
    Entered e(comm);
    Comm& c = e.comm();
    try {
      check(*comm);
    } catch (const Error& err) {
      ACCL_THROW(err.code(), "rank %d/%d: %s", c.rank, c.nranks, err.what());
    }
    if (d.count == 0 && d.type >= 0 && !d.p2p) {  // nothing: see commOp
      if (!c.checkArgs) return acclSuccess;
      try {
        checkAgreement(c, d, c.seq + 1);
      } catch (const Error&) {
        ++c.seq;
        throw;
      }
      return acclSuccess;
    }
    if (!c.backend) chooseBackend(c, d);
    uint64_t seq = ++c.seq;
    if (c.checkArgs && !d.p2p) checkAgreement(c, d, seq);
    GroupState& g = tlsGroup;
    if (g.depth == 0) {
      if (c.trace->on()) c.trace->record(d, seq, Trace::kStarted, Trace::ticks());
      return runOnBackend(c, seq, run);
    }
    if (c.trace->on()) {
      if (!g.queuedAt) g.queuedAt = Trace::ticks();
      c.trace->record(d, seq, Trace::kQueued, g.queuedAt);
    }
    g.lists.ops.push_back({comm, seq, QueuedRun(run)});
    return acclSuccess;
  });
}

// An operation on a communicator: `check` validates the arguments against the handle's rank and
// size (throwing acclInvalidArgument), then `run` calls the backend now, or at acclGroupEnd
// inside a group.
//
// A collective of count 0 (every rank passes the same) moves nothing: it is done at once, in or
// out of a group, and no backend sees it, as NCCL discards it. Whether a rank called it cannot
// matter to the others, so it takes no sequence number and no place in the flight recorder
// (whose stamp would cost as much as the rest of the call): ranks that disagree on it stay in
// step. Its arguments are checked here, inline, on the handle alone where the communicator is
// usable (idleCalls); a failed check, or any other state, takes the full way, which says why.
// ACCL_CHECK still compares it, as the next number, which a disagreement takes (as the others'
// calls did). A barrier has no type and no count; a send or a receive of nothing goes to the
// backend, as in NCCL.
// The arguments come by value and everything here inlines (flatten) but the full way, which gets
// copies made on its branch: a call of nothing then keeps them in registers (4 ns a call here
// against 10 with them stored for the full way before the test).
template <class Check, class Run>
[[gnu::flatten]] inline acclResult_t commOp(const OpDesc d, acclComm_t comm, const Check check,
                                            const Run run) {
  if (d.count == 0 && d.type >= 0 && !d.p2p && comm &&
      comm->magic.load(std::memory_order_relaxed) == acclComm::kLive &&
      comm->idleCalls.load(std::memory_order_acquire)) {
    try {
      check(*comm);
      return acclSuccess;
    } catch (...) {
    }
  }
  return commOpFull(OpDesc(d), comm, Check(check), Run(run));
}

// ------------------------------------------------------------------ argument checks

// Each check inlines into its call: a call of nothing (see commOp) is little more than these.
#define ACCL_CHECK_FN [[gnu::always_inline]] inline

struct Span {
  const char* name;
  const void* p;
  size_t bytes;
};

ACCL_CHECK_FN void checkBuffer(const Span& s, size_t count) {
  ACCL_ARG_CHECK(s.p || count == 0, "%s is NULL with count %zu", s.name, count);
}

ACCL_CHECK_FN void checkType(acclDataType_t t) {
  ACCL_ARG_CHECK(validType(t), "datatype %d is not an acclDataType_t", (int)t);
}

ACCL_CHECK_FN void checkOp(acclRedOp_t op) {
  ACCL_ARG_CHECK(validOp(op), "op %d is not an acclRedOp_t", (int)op);
}

ACCL_CHECK_FN void checkRank(const acclComm& c, int r, const char* what) {
  ACCL_ARG_CHECK(r >= 0 && r < c.nranks, "%s %d is out of range [0, %d)", what, r, c.nranks);
}

// Send and receive ranges may overlap only in the operation's in-place layout, where the send
// buffer starts exactly at `inPlaceOffset` bytes into the receive buffer (or the other way
// round when `recvInsideSend`).
ACCL_CHECK_FN void checkOverlap(const Span& send, const Span& recv, size_t inPlaceOffset,
                                bool recvInsideSend) {
  if (!send.p || !recv.p || !send.bytes || !recv.bytes) return;
  auto s = reinterpret_cast<uintptr_t>(send.p), r = reinterpret_cast<uintptr_t>(recv.p);
  bool overlap = s < r + recv.bytes && r < s + send.bytes;
  if (!overlap) return;
  bool inPlace = recvInsideSend ? r == s + inPlaceOffset : s == r + inPlaceOffset;
  ACCL_ARG_CHECK(inPlace, "sendbuff and recvbuff overlap but not in the in-place layout "
                 "(%s must start %zu bytes into %s)", recvInsideSend ? "recvbuff" : "sendbuff",
                 inPlaceOffset, recvInsideSend ? "sendbuff" : "recvbuff");
}

// ------------------------------------------------------------------ communicator creation

acclResult_t bootstrapAllGather(void* handle, void* data, size_t bytes);
acclResult_t bootstrapBarrier(void* handle);

// Creates the backend's communicator: a collective over the bootstrap.
void startBackend(Comm& c) {
  c.backend = findBackend(c.backendName).table;
  c.backendName = c.backend->name;
  clearBackendMessage();
  acclResult_t r = c.backend->commInit(&c.args, &c.bcomm);
  if (r != acclSuccess) {
    c.backend = nullptr;
    ACCL_THROW(r, "rank %d/%d: backend %s could not create its communicator: %s", c.rank,
               c.nranks, c.backendName.c_str(), takeBackendMessage().c_str());
  }
  ACCL_INFO("INIT", "rank %d/%d ready on backend %s", c.rank, c.nranks, c.backendName.c_str());
}

// A communicator whose backend follows its buffers' memory starts the backend at its first
// collective, from the memory of that collective's buffers, which every rank must agree on.
// Only a collective can start it: the backend's creation needs every rank.
void chooseBackend(Comm& c, const OpDesc& d) {
  if (d.p2p || !d.buf)
    ACCL_THROW(acclInvalidUsage, "rank %d/%d: %s cannot be this communicator's first operation: "
               "no backend was named and a process of it uses CUDA, so the memory of the first "
               "collective's buffers chooses the backend. Call a collective with buffers first "
               "(every rank), or name the backend (config->backend or ACCL_BACKEND)", c.rank,
               c.nranks, d.name);
  Memory m = memoryOf(d.buf);
  std::vector<int8_t> all(c.nranks);
  all[c.rank] = static_cast<int8_t>(m);
  c.bootstrap->allGather(all.data(), 1, c.args.timeout);
  for (int r = 1; r < c.nranks; ++r)
    if (all[r] != all[0])
      ACCL_THROW(acclInvalidUsage, "rank %d/%d: %s, the first collective, chooses the backend "
                 "by the buffers' memory, but rank 0 passed %s and rank %d %s", c.rank, c.nranks,
                 d.name, memoryName(Memory(all[0])), r, memoryName(Memory(all[r])));
  c.backendName = backendForMemory(m);
  ACCL_INFO("INIT", "rank %d/%d: %s on %s: backend %s", c.rank, c.nranks, d.name,
            memoryName(m), c.backendName.c_str());
  try {
    startBackend(c);
  } catch (const Error& e) {
    markBroken(c, e.code(), e.what());
    throw;
  }
}

void initComm(Comm& c, const acclUniqueId& id, double timeout) {
  c.checkArgs = paramInt(Param::Check) != 0;
  c.traceDir = paramString(Param::TraceDir);
  c.compose = paramString(Param::Compose);
  c.trace = std::make_unique<Trace>(std::max(0LL, paramInt(Param::TraceBuffer)));
  c.createdUnixUs = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  // A named backend is looked up before the rendezvous, so a bad name fails at once.
  if (!c.backendName.empty()) findBackend(c.backendName);
  c.bootstrap = std::make_unique<Bootstrap>(id, c.rank, c.nranks, timeout, &c.abortFlag);
  c.args = {sizeof(acclBackendCommArgs_v1),
            ACCL_BACKEND_ABI_VERSION,
            c.rank,
            c.nranks,
            timeout,
            &c.abortFlag,
            c.bootstrap->commHash(),
            0,
            &c,
            &bootstrapAllGather,
            &bootstrapBarrier};
  if (c.backendName.empty()) {
    // No backend named: it follows the buffers' memory. Where no rank's process has loaded
    // CUDA, that can only be host memory, and the cpu backend starts now; otherwise the first
    // collective chooses (chooseBackend).
    std::vector<uint8_t> cuda(c.nranks);
    cuda[c.rank] = cudaLoaded();
    c.bootstrap->allGather(cuda.data(), 1, timeout);
    if (std::find(cuda.begin(), cuda.end(), 1) != cuda.end()) {
      ACCL_INFO("INIT", "rank %d/%d: no backend named and CUDA is loaded: the first "
                "collective's buffers choose it", c.rank, c.nranks);
      return;
    }
    c.backendName = "cpu";
  }
  startBackend(c);
}

// The bootstrap as the backend sees it; a failure's text goes where the backend's would.
acclResult_t bootstrapAllGather(void* handle, void* data, size_t bytes) {
  Comm& c = *static_cast<Comm*>(handle);
  try {
    c.bootstrap->allGather(data, bytes, c.args.timeout);
    return acclSuccess;
  } catch (const Error& e) {
    setBackendMessage(e.what());
    return e.code();
  }
}

acclResult_t bootstrapBarrier(void* handle) {
  Comm& c = *static_cast<Comm*>(handle);
  try {
    c.bootstrap->barrier(c.args.timeout);
    return acclSuccess;
  } catch (const Error& e) {
    setBackendMessage(e.what());
    return e.code();
  }
}

struct Settings {
  double timeout;
  std::string backend;
  bool blocking;
};

Settings readConfig(const acclConfig_t* config, const Comm* parent) {
  std::string tuned = checkTuningFile();
  if (!tuned.empty())
    ACCL_INFO("INIT", "ACCL_* variables the environment does not set come from %s",
              tuned.c_str());
  Settings s{parent ? parent->args.timeout : 0.0, parent ? parent->backendName : "", true};
  if (config) {
    ACCL_ARG_CHECK(config->magic == ACCL_CONFIG_MAGIC,
                   "config was not initialised with ACCL_CONFIG_INITIALIZER (bad magic %#x)",
                   config->magic);
    ACCL_ARG_CHECK(config->size >= sizeof(acclConfig_t) && config->size < (1u << 16),
                   "config->size is %zu, expected sizeof(acclConfig_t) = %zu", config->size,
                   sizeof(acclConfig_t));
    ACCL_ARG_CHECK(config->blocking == 0 || config->blocking == 1,
                   "config->blocking is %d, expected 0 or 1", config->blocking);
    if (config->timeout > 0) s.timeout = config->timeout;
    if (config->backend) s.backend = config->backend;
    s.blocking = config->blocking;
  }
  if (s.timeout <= 0) s.timeout = paramDouble(Param::Timeout);
  ACCL_ARG_CHECK(s.timeout > 0, "the timeout must be positive, got %g s", s.timeout);
  if (s.backend.empty()) s.backend = paramString(Param::BackendPlugin);
  if (s.backend.empty()) s.backend = paramString(Param::Backend);
  return s;
}

// Creates the handle; a non-blocking init finishes on a thread and returns acclInProgress.
acclResult_t createComm(acclComm_t* out, int nranks, const acclUniqueId& id, int rank,
                        const Settings& s) {
  auto h = std::make_unique<acclComm>();
  h->impl = std::make_unique<Comm>();
  Comm& c = *h->impl;
  c.handle = h.get();
  c.rank = h->rank = rank;
  c.nranks = h->nranks = nranks;
  c.backendName = s.backend;
  if (s.blocking) {
    initComm(c, id, s.timeout);
    h->idleCalls.store(!c.checkArgs);
    *out = h.release();
    return acclSuccess;
  }
  c.asyncError.store(acclInProgress);
  c.initThread = std::thread([&c, id, timeout = s.timeout] {
    try {
      initComm(c, id, timeout);
      c.asyncError.store(acclSuccess);
      c.handle->idleCalls.store(!c.checkArgs);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(c.asyncMutex);
      c.asyncMessage = e.what();
      c.asyncError.store(e.code());
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(c.asyncMutex);
      c.asyncMessage = format("internal error: %s", e.what());
      c.asyncError.store(acclInternalError);
    }
  });
  *out = h.release();
  return acclInProgress;
}

// Frees the communicator behind a handle: marks it dead, stops and waits for running calls,
// then releases the backend. `abort` also wakes calls blocked on other threads.
acclResult_t release(const char* name, acclComm_t comm, bool abort) {
  return api(name, [&] {
    ACCL_ARG_CHECK(comm, "comm is NULL");
    uint32_t expected = acclComm::kLive;
    if (!comm->magic.compare_exchange_strong(expected, acclComm::kDead))
      ACCL_THROW(expected == acclComm::kDead ? acclInvalidUsage : acclInvalidArgument,
                 expected == acclComm::kDead ? "the communicator was already destroyed"
                                             : "comm does not point to an accl communicator");
    Comm& c = *comm->impl;
    if (abort || comm->inflight.load() > 0 || c.asyncError.load() == acclInProgress)
      __atomic_store_n(&c.abortFlag, 1, __ATOMIC_RELEASE);
    // Every wait polls the abort flag at least every 50 ms, so this ends promptly.
    while (comm->inflight.load() > 0) usleep(1000);
    if (c.initThread.joinable()) c.initThread.join();
    acclResult_t r = acclSuccess;
    std::string msg;
    if (c.bcomm) {
      clearBackendMessage();
      r = c.backend->commDestroy(c.bcomm);
      if (r != acclSuccess) msg = takeBackendMessage();
    }
    comm->impl.reset();
    if (r != acclSuccess) ACCL_THROW(r, "backend could not free its communicator: %s", msg.c_str());
    return acclSuccess;
  });
}

}  // namespace

// ==================================================================== C API

extern "C" {

acclResult_t acclGetVersion(int* version) {
  return api("acclGetVersion", [&] {
    ACCL_ARG_CHECK(version, "version is NULL");
    *version = ACCL_VERSION_CODE;
    return acclSuccess;
  });
}

acclResult_t acclHostAlloc(void** ptr, size_t size) {
  return api("acclHostAlloc", [&] {
    ACCL_ARG_CHECK(ptr, "ptr is NULL");
    *ptr = hostAlloc(size);
    return acclSuccess;
  });
}

acclResult_t acclHostFree(void* ptr) {
  return api("acclHostFree", [&] {
    hostFree(ptr);
    return acclSuccess;
  });
}

acclResult_t acclGetUniqueId(acclUniqueId* uniqueId) {
  return api("acclGetUniqueId", [&] {
    ACCL_ARG_CHECK(uniqueId, "uniqueId is NULL");
    createUniqueId(uniqueId, true);
    return acclSuccess;
  });
}

acclResult_t acclCommInitRankConfig(acclComm_t* comm, int nranks, acclUniqueId commId, int rank,
                                    acclConfig_t* config) {
  return api("acclCommInitRank", [&] {
    ACCL_ARG_CHECK(comm, "comm is NULL");
    *comm = nullptr;
    ACCL_ARG_CHECK(nranks > 0, "nranks is %d, must be positive", nranks);
    ACCL_ARG_CHECK(rank >= 0 && rank < nranks, "rank %d is out of range [0, %d)", rank, nranks);
    return createComm(comm, nranks, commId, rank, readConfig(config, nullptr));
  });
}

acclResult_t acclCommInitRank(acclComm_t* comm, int nranks, acclUniqueId commId, int rank) {
  return acclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

acclResult_t acclCommSplit(acclComm_t comm, int color, int key, acclComm_t* newcomm,
                           acclConfig_t* config) {
  return api("acclCommSplit", [&] {
    ACCL_ARG_CHECK(newcomm, "newcomm is NULL");
    *newcomm = nullptr;
    ACCL_ARG_CHECK(color >= 0 || color == ACCL_SPLIT_NOCOLOR,
                   "color %d is negative and not ACCL_SPLIT_NOCOLOR", color);
    Entered e(comm);
    Comm& c = e.comm();
    Settings s = readConfig(config, &c);
    ++c.seq;
    // Round 1: everyone's color and key. Round 2: each color's first member (by key, then
    // rank) makes the new unique id, and everyone picks up its color's.
    struct Entry {
      int32_t color, key;
    };
    std::vector<Entry> all(c.nranks);
    all[c.rank] = {color, key};
    c.bootstrap->allGather(all.data(), sizeof(Entry), c.args.timeout);
    std::vector<int> members;
    for (int r = 0; r < c.nranks; ++r)
      if (color != ACCL_SPLIT_NOCOLOR && all[r].color == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[a].key < all[b].key; });
    std::vector<acclUniqueId> ids(c.nranks);
    if (!members.empty() && members[0] == c.rank) createUniqueId(&ids[c.rank], false);
    c.bootstrap->allGather(ids.data(), sizeof(acclUniqueId), c.args.timeout);
    if (members.empty()) return acclSuccess;
    int newRank = std::find(members.begin(), members.end(), c.rank) - members.begin();
    return createComm(newcomm, members.size(), ids[members[0]], newRank, s);
  });
}

acclResult_t acclCommFinalize(acclComm_t comm) {
  return api("acclCommFinalize", [&] {
    Entered e(comm);
    Comm& c = e.comm();
    comm->idleCalls.store(false);
    uint64_t seq = ++c.seq;
    if (c.backend) runOnBackend(c, seq, [](Comm& c) { return c.backend->commFinalize(c.bcomm); });
    c.bootstrap->barrier(c.args.timeout);
    c.finalized = true;
    return acclSuccess;
  });
}

acclResult_t acclCommDestroy(acclComm_t comm) { return release("acclCommDestroy", comm, false); }

acclResult_t acclCommAbort(acclComm_t comm) { return release("acclCommAbort", comm, true); }

acclResult_t acclCommGetAsyncError(acclComm_t comm, acclResult_t* asyncError) {
  return api("acclCommGetAsyncError", [&] {
    ACCL_ARG_CHECK(asyncError, "asyncError is NULL");
    Entered e(comm, true);
    Comm& c = e.comm();
    *asyncError = (acclResult_t)c.asyncError.load();
    if (*asyncError != acclSuccess && *asyncError != acclInProgress) {
      std::lock_guard<std::mutex> lock(c.asyncMutex);
      setLastError(c.asyncMessage);
    }
    return acclSuccess;
  });
}

// The backends read args.timeout at each wait (backend.h), so a new value applies from the
// next call; bootstrap calls read it too.
acclResult_t acclCommSetTimeout(acclComm_t comm, double timeout) {
  return api("acclCommSetTimeout", [&] {
    ACCL_ARG_CHECK(timeout > 0 && std::isfinite(timeout),
                   "the timeout must be a positive, finite number of seconds, got %g", timeout);
    Entered e(comm);  // not while a non-blocking init (which writes args) runs
    e.comm().args.timeout = timeout;
    return acclSuccess;
  });
}

acclResult_t acclCommGetTimeout(const acclComm_t comm, double* timeout) {
  return api("acclCommGetTimeout", [&] {
    ACCL_ARG_CHECK(timeout, "timeout is NULL");
    Entered e(comm);
    *timeout = e.comm().args.timeout;
    return acclSuccess;
  });
}

acclResult_t acclCommCount(const acclComm_t comm, int* count) {
  return api("acclCommCount", [&] {
    ACCL_ARG_CHECK(count, "count is NULL");
    Entered e(comm, true);
    *count = e.comm().nranks;
    return acclSuccess;
  });
}

acclResult_t acclCommUserRank(const acclComm_t comm, int* rank) {
  return api("acclCommUserRank", [&] {
    ACCL_ARG_CHECK(rank, "rank is NULL");
    Entered e(comm, true);
    *rank = e.comm().rank;
    return acclSuccess;
  });
}

acclResult_t acclCommGetBackend(const acclComm_t comm, const char** name) {
  return api("acclCommGetBackend", [&] {
    ACCL_ARG_CHECK(name, "name is NULL");
    Entered e(comm, true);
    const Comm& c = e.comm();
    // "auto" until the first collective's buffers choose (chooseBackend).
    *name = c.backend ? c.backend->name : c.backendName.empty() ? "auto" : c.backendName.c_str();
    return acclSuccess;
  });
}

acclResult_t acclGetBackendInfo(const char* name, int* version, const char** versionString,
                                const char** libraryPath) {
  return api("acclGetBackendInfo", [&] {
    ACCL_ARG_CHECK(name, "name is NULL");
    const BackendInfo& b = findBackend(name);
    if (version) *version = b.version;
    if (versionString) *versionString = b.versionString;
    if (libraryPath) *libraryPath = b.path.c_str();
    return acclSuccess;
  });
}

acclResult_t acclCommGetTrace(acclComm_t comm, char* buf, size_t* size) {
  return api("acclCommGetTrace", [&] {
    ACCL_ARG_CHECK(size, "size is NULL");
    Entered e(comm, true);
    Comm& c = e.comm();
    ACCL_ARG_CHECK(c.trace, "the communicator has no flight recorder yet (still initialising)");
    std::string j = traceJson(c, "requested");
    if (buf && *size) snprintf(buf, *size, "%s", j.c_str());
    *size = j.size() + 1;
    return acclSuccess;
  });
}

const char* acclGetErrorString(acclResult_t result) {
  switch (result) {
    case acclSuccess: return "no error";
    case acclUnhandledDeviceError: return "unhandled device runtime error";
    case acclSystemError: return "system error";
    case acclInternalError: return "internal error";
    case acclInvalidArgument: return "invalid argument";
    case acclInvalidUsage: return "invalid usage";
    case acclRemoteError: return "remote process exited or there was a network error";
    case acclInProgress: return "operation in progress";
    case acclTimeout: return "timeout";
    case acclNotSupported: return "not supported by the backend";
    default: return "unknown result code";
  }
}

const char* acclGetLastError(acclComm_t) { return lastError(); }

// ------------------------------------------------------------------ collectives

acclResult_t acclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           acclDataType_t datatype, acclRedOp_t op, acclComm_t comm,
                           void* stream) {
  return commOp(
      OpDesc{"acclAllReduce", datatype, count, -1, op, false, recvbuff}, comm,
      [=](const acclComm&) {
        checkType(datatype);
        checkOp(op);
        size_t bytes = count * typeSize(datatype);
        checkBuffer({"sendbuff", sendbuff, bytes}, count);
        checkBuffer({"recvbuff", recvbuff, bytes}, count);
        checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0, false);
      },
      [=](Comm& c) {
        return c.backend->allReduce(sendbuff, recvbuff, count, datatype, op, c.bcomm, stream);
      });
}

acclResult_t acclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           acclDataType_t datatype, int root, acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclBroadcast", datatype, count, root, -1, false, recvbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkRank(c, root, "root");
        size_t bytes = count * typeSize(datatype);
        if (c.rank == root) {
          checkBuffer({"sendbuff", sendbuff, bytes}, count);
          checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0, false);
        }
        checkBuffer({"recvbuff", recvbuff, bytes}, count);
      },
      [=](Comm& c) {
        return withComposition(
            c, "broadcast",
            [&] {
              return c.backend->broadcast(sendbuff, recvbuff, count, datatype, root, c.bcomm,
                                          stream);
            },
            [&] { return composeBroadcast(c, sendbuff, recvbuff, count, datatype, root, stream); });
      });
}

acclResult_t acclReduce(const void* sendbuff, void* recvbuff, size_t count,
                        acclDataType_t datatype, acclRedOp_t op, int root, acclComm_t comm,
                        void* stream) {
  return commOp(
      OpDesc{"acclReduce", datatype, count, root, op, false, sendbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkOp(op);
        checkRank(c, root, "root");
        size_t bytes = count * typeSize(datatype);
        checkBuffer({"sendbuff", sendbuff, bytes}, count);
        if (c.rank == root) {
          checkBuffer({"recvbuff", recvbuff, bytes}, count);
          checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0, false);
        }
      },
      [=](Comm& c) {
        return c.backend->reduce(sendbuff, recvbuff, count, datatype, op, root, c.bcomm, stream);
      });
}

acclResult_t acclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           acclDataType_t datatype, acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclAllGather", datatype, sendcount, -1, -1, false, recvbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        size_t bytes = sendcount * typeSize(datatype);
        checkBuffer({"sendbuff", sendbuff, bytes}, sendcount);
        checkBuffer({"recvbuff", recvbuff, bytes}, sendcount);
        checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes * c.nranks},
                     bytes * c.rank, false);
      },
      [=](Comm& c) {
        return c.backend->allGather(sendbuff, recvbuff, sendcount, datatype, c.bcomm, stream);
      });
}

acclResult_t acclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               acclDataType_t datatype, acclRedOp_t op, acclComm_t comm,
                               void* stream) {
  return commOp(
      OpDesc{"acclReduceScatter", datatype, recvcount, -1, op, false, recvbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkOp(op);
        size_t bytes = recvcount * typeSize(datatype);
        checkBuffer({"sendbuff", sendbuff, bytes}, recvcount);
        checkBuffer({"recvbuff", recvbuff, bytes}, recvcount);
        checkOverlap({"sendbuff", sendbuff, bytes * c.nranks}, {"recvbuff", recvbuff, bytes},
                     bytes * c.rank, true);
      },
      [=](Comm& c) {
        return c.backend->reduceScatter(sendbuff, recvbuff, recvcount, datatype, op, c.bcomm,
                                        stream);
      });
}

acclResult_t acclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          acclDataType_t datatype, acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclAlltoAll", datatype, count, -1, -1, false, recvbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        size_t bytes = count * typeSize(datatype) * c.nranks;
        checkBuffer({"sendbuff", sendbuff, bytes}, count);
        checkBuffer({"recvbuff", recvbuff, bytes}, count);
        checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0, false);
      },
      [=](Comm& c) {
        return withComposition(
            c, "alltoall",
            [&] { return c.backend->alltoAll(sendbuff, recvbuff, count, datatype, c.bcomm, stream); },
            [&] { return composeAlltoAll(c, sendbuff, recvbuff, count, datatype, stream); });
      });
}

acclResult_t acclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        acclDataType_t datatype, int root, acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclGather", datatype, sendcount, root, -1, false, sendbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkRank(c, root, "root");
        size_t bytes = sendcount * typeSize(datatype);
        checkBuffer({"sendbuff", sendbuff, bytes}, sendcount);
        if (c.rank == root) {
          checkBuffer({"recvbuff", recvbuff, bytes}, sendcount);
          checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes * c.nranks},
                       bytes * root, false);
        }
      },
      [=](Comm& c) {
        return withComposition(
            c, "gather",
            [&] {
              return c.backend->gather(sendbuff, recvbuff, sendcount, datatype, root, c.bcomm,
                                       stream);
            },
            [&] { return composeGather(c, sendbuff, recvbuff, sendcount, datatype, root, stream); });
      });
}

acclResult_t acclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         acclDataType_t datatype, int root, acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclScatter", datatype, recvcount, root, -1, false, recvbuff}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkRank(c, root, "root");
        size_t bytes = recvcount * typeSize(datatype);
        checkBuffer({"recvbuff", recvbuff, bytes}, recvcount);
        if (c.rank == root) {
          checkBuffer({"sendbuff", sendbuff, bytes}, recvcount);
          checkOverlap({"sendbuff", sendbuff, bytes * c.nranks}, {"recvbuff", recvbuff, bytes},
                       bytes * root, true);
        }
      },
      [=](Comm& c) {
        return withComposition(
            c, "scatter",
            [&] {
              return c.backend->scatter(sendbuff, recvbuff, recvcount, datatype, root, c.bcomm,
                                        stream);
            },
            [&] { return composeScatter(c, sendbuff, recvbuff, recvcount, datatype, root, stream); });
      });
}

acclResult_t acclBarrier(acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclBarrier"}, comm, [](const acclComm&) {},
      [=](Comm& c) {
        return withComposition(
            c, "barrier", [&] { return c.backend->barrier(c.bcomm, stream); },
            [&] { return composeBarrier(c, stream); });
      });
}

acclResult_t acclSend(const void* sendbuff, size_t count, acclDataType_t datatype, int peer,
                      acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclSend", datatype, count, peer, -1, true}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkRank(c, peer, "peer");
        checkBuffer({"sendbuff", sendbuff, 0}, count);
      },
      [=](Comm& c) {
        return c.backend->send(sendbuff, count, datatype, peer, c.bcomm, stream);
      });
}

acclResult_t acclRecv(void* recvbuff, size_t count, acclDataType_t datatype, int peer,
                      acclComm_t comm, void* stream) {
  return commOp(
      OpDesc{"acclRecv", datatype, count, peer, -1, true}, comm,
      [=](const acclComm& c) {
        checkType(datatype);
        checkRank(c, peer, "peer");
        checkBuffer({"recvbuff", recvbuff, 0}, count);
      },
      [=](Comm& c) {
        return c.backend->recv(recvbuff, count, datatype, peer, c.bcomm, stream);
      });
}

acclResult_t acclGroupStart(void) {
  ++tlsGroup.depth;
  return acclSuccess;
}

acclResult_t acclGroupEnd(void) {
  return api("acclGroupEnd", [&] {
    GroupState& g = tlsGroup;
    if (g.depth == 0)
      ACCL_THROW(acclInvalidUsage, "acclGroupEnd without a matching acclGroupStart");
    if (--g.depth > 0) return acclSuccess;
    g.queuedAt = 0;
    // Taken out, since a backend may run its group on accl in turn (the fake NCCL of the
    // tests does), and given back empty however the group ends, keeping their memory.
    struct Taken {
      GroupLists& kept;
      GroupLists lists;
      explicit Taken(GroupLists& k) : kept(k) { lists.swap(kept); }
      ~Taken() {
        lists.ops.clear();
        lists.held.clear();
        lists.backends.clear();
        if (kept.ops.empty()) lists.swap(kept);
      }
    } taken(g.lists);
    const std::vector<QueuedOp>& ops = taken.lists.ops;
    // Hold every communicator the group touches, then replay the calls inside each backend's
    // own group bracket.
    std::vector<Entered>& held = taken.lists.held;
    std::vector<const acclBackend_v1*>& backends = taken.lists.backends;
    bool traced = false;  // some communicator keeps a flight recorder: the group reads the clock
    for (auto& op : ops) {
      if (std::none_of(held.begin(), held.end(),
                       [&](const Entered& e) { return e.handle() == op.handle; })) {
        held.emplace_back(op.handle);
        traced |= op.handle->impl->trace->on();
      }
      const acclBackend_v1* b = op.handle->impl->backend;
      if (std::find(backends.begin(), backends.end(), b) == backends.end()) backends.push_back(b);
    }
    for (auto* b : backends) {
      clearBackendMessage();
      acclResult_t r = b->groupStart();
      if (r != acclSuccess)
        ACCL_THROW(r, "backend %s could not start a group: %s", b->name,
                   takeBackendMessage().c_str());
    }
    acclResult_t first = acclSuccess;
    std::string firstMsg;
    const uint64_t started = traced ? Trace::ticks() : 0;
    for (auto& op : ops) {
      try {
        runOnBackend(*op.handle->impl, op.seq, op.run, &started);
      } catch (const Error& e) {
        if (first == acclSuccess) {
          first = e.code();
          firstMsg = e.what();
        }
      }
    }
    for (auto* b : backends) {
      clearBackendMessage();
      acclResult_t r = b->groupEnd();
      if (r == acclSuccess) continue;
      std::string msg = takeBackendMessage();
      for (auto& op : ops) {
        Comm& c = *op.handle->impl;
        if (c.backend != b) continue;
        c.trace->update(op.seq, Trace::kFailed, r);
        fail(c, r, format("rank %d/%d (%s) group: %s", c.rank, c.nranks, c.backendName.c_str(),
                          msg.c_str()));
      }
      if (first == acclSuccess) {
        first = r;
        firstMsg = msg;
      }
    }
    if (first != acclSuccess) throw Error(first, firstMsg);
    if (!traced) return acclSuccess;
    const uint64_t done = Trace::ticks();
    for (auto& op : ops) op.handle->impl->trace->update(op.seq, Trace::kDone, acclSuccess, done);
    return acclSuccess;
  });
}

}  // extern "C"
