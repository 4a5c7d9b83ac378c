// The mpi backend plugin (libaccl-backend-mpi.so): every accl operation on an MPI communicator
// that spans exactly the ranks of the accl communicator, in accl rank order. It reaches the core
// only through the plugin ABI (accl/backend.h), and uses the MPI library of the process (the one
// mpi4py uses, when it is loaded).
//
// Why the waits are ours: MPI's blocking calls have no deadline and cannot be interrupted, so
// every operation is posted nonblocking (MPI_I*) and completed by a polling loop that honours
// args->timeout and *args->abortFlag. An operation abandoned that way leaves MPI requests that
// MPI cannot cancel (collectives): the communicator is then never freed and MPI never finalised
// by this plugin, since either could touch memory the caller has since released.
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "accl/backend.h"

namespace {

const acclBackendHost_v1* gHost = nullptr;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// Thrown inside the plugin, turned into a result code and host->setError text at the boundary.
struct Failure {
  acclResult_t code;
  std::string message;
  bool keepMessage = false;  // the core's bootstrap already set the message
  int request = -1;          // the failed request, when a wait on several fails
};

template <class F>
acclResult_t guard(F&& f) {
  try {
    f();
    return acclSuccess;
  } catch (const Failure& e) {
    if (!e.keepMessage) gHost->setError("%s", e.message.c_str());
    return e.code;
  } catch (const std::bad_alloc&) {
    gHost->setError("out of host memory");
    return acclSystemError;
  } catch (const std::exception& e) {
    gHost->setError("internal error: %s", e.what());
    return acclInternalError;
  }
}

// ------------------------------------------------------------------ MPI calls and their errors

bool gSerialize = false;  // MPI gives less than MPI_THREAD_MULTIPLE: one MPI call at a time
std::mutex gMpiMutex;

struct MpiLock {
  MpiLock() {
    if (gSerialize) gMpiMutex.lock();
  }
  ~MpiLock() {
    if (gSerialize) gMpiMutex.unlock();
  }
};

acclResult_t resultForClass(int cls) {
  switch (cls) {
    case MPI_ERR_TRUNCATE: return acclRemoteError;  // a send larger than its receive
    case MPI_ERR_BUFFER: case MPI_ERR_COUNT: case MPI_ERR_TYPE: case MPI_ERR_TAG:
    case MPI_ERR_COMM: case MPI_ERR_RANK: case MPI_ERR_ROOT: case MPI_ERR_OP:
    case MPI_ERR_ARG: case MPI_ERR_INTERN:
      return acclInternalError;  // the core validated the arguments: a bug here
    default: return acclSystemError;
  }
}

std::string mpiErrorText(int rc) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) return format("MPI error %d", rc);
  return std::string(s, len);
}

void mpiCheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  int cls = MPI_ERR_OTHER;
  MPI_Error_class(rc, &cls);
  throw Failure{resultForClass(cls), format("%s failed: %s", what, mpiErrorText(rc).c_str())};
}

// Runs one MPI call under the lock and throws with MPI_Error_string's text on failure.
#define MPI_CALL(name, ...)              \
  do {                                   \
    MpiLock lock_;                       \
    mpiCheck(name(__VA_ARGS__), #name); \
  } while (0)

// ------------------------------------------------------------------ types and reductions

size_t typeSize(acclDataType_t t) {
  static const size_t sizes[acclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[t];
}

const char* typeName(acclDataType_t t) {
  static const char* names[acclNumTypes] = {"int8",    "uint8",    "int32",   "uint32",
                                            "int64",   "uint64",   "float16", "float32",
                                            "float64", "bfloat16", "float8_e4m3", "float8_e5m2"};
  return names[t];
}

// The MPI type that moves an element. MPI has no 16-bit or 8-bit float types: those travel as
// unsigned integers of their size, and reduce through the user-defined ops below.
MPI_Datatype mpiType(acclDataType_t t) {
  switch (t) {
    case acclInt8: return MPI_INT8_T;
    case acclUint8: return MPI_UINT8_T;
    case acclInt32: return MPI_INT32_T;
    case acclUint32: return MPI_UINT32_T;
    case acclInt64: return MPI_INT64_T;
    case acclUint64: return MPI_UINT64_T;
    case acclFloat32: return MPI_FLOAT;
    case acclFloat64: return MPI_DOUBLE;
    case acclFloat16: case acclBfloat16: return MPI_UINT16_T;
    default: return MPI_UINT8_T;  // fp8
  }
}

float halfToFloat(uint16_t h) {
  unsigned exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f = exp == 0    ? std::ldexp(float(man), -24)  // zero and subnormals
            : exp == 31 ? (man ? NAN : INFINITY)
                        : std::ldexp(float(man | 0x400), int(exp) - 25);
  return (h & 0x8000) ? -f : f;
}

uint16_t floatToHalf(float f) {  // round to nearest even, as the cpu backend does
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // 65520 is halfway to 2^16: rounds to infinity
  if (a < 6.103515625e-05f) return sign | uint16_t(std::nearbyint(a * 16777216.0f));  // 2^-24 units
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  unsigned mant = unsigned(std::nearbyint(std::ldexp(m, 11)));  // 11 significant bits
  int exp = e + 14;
  if (mant == 2048) mant = 1024, ++exp;
  if (exp >= 31) return sign | 0x7c00;
  return sign | uint16_t(exp << 10) | uint16_t(mant - 1024);
}

float bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
}

struct Half {
  static float load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(float v) { return floatToHalf(v); }
};
struct Bf16 {
  static float load(uint16_t v) { return bf16ToFloat(v); }
  static uint16_t store(float v) { return floatToBf16(v); }
};

template <class Codec, acclRedOp_t Op>
void halfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = Codec::load(a[i]), y = Codec::load(b[i]);
    float r = Op == acclSum ? x + y : Op == acclProd ? x * y : Op == acclMax ? std::fmax(x, y)
                                                                             : std::fmin(x, y);
    b[i] = Codec::store(r);
  }
}

MPI_Op gHalfOps[2][4];  // [float16, bfloat16][sum, prod, max, min]; made once MPI is up

void createHalfOps() {
  MPI_User_function* fns[2][4] = {
      {halfReduce<Half, acclSum>, halfReduce<Half, acclProd>, halfReduce<Half, acclMax>,
       halfReduce<Half, acclMin>},
      {halfReduce<Bf16, acclSum>, halfReduce<Bf16, acclProd>, halfReduce<Bf16, acclMax>,
       halfReduce<Bf16, acclMin>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 4; ++o) MPI_CALL(MPI_Op_create, fns[t][o], 1, &gHalfOps[t][o]);
}

// The MPI op for a reduction; Avg reduces with the sum and divides afterwards (divideBy).
MPI_Op mpiOp(acclDataType_t t, acclRedOp_t op) {
  int o = op == acclAvg ? acclSum : op;
  if (t == acclFloat8e4m3 || t == acclFloat8e5m2)
    throw Failure{acclNotSupported, format("the mpi backend has no reduction over %s: MPI has no "
                                           "8-bit float type", typeName(t))};
  if (t == acclFloat16 || t == acclBfloat16) return gHalfOps[t == acclBfloat16][o];
  static const MPI_Op ops[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return ops[o];
}

template <class T>
void divideAs(void* buf, size_t count, int n) {
  T* p = static_cast<T*>(buf);
  // Integer types divide as integers (truncating), like the cpu backend.
  for (size_t i = 0; i < count; ++i) p[i] = T(p[i] / static_cast<decltype(p[i] + 0)>(n));
}

template <class Codec>
void divideHalf(void* buf, size_t count, int n) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = Codec::store(Codec::load(p[i]) / float(n));
}

void divideBy(void* buf, size_t count, acclDataType_t t, int n) {
  switch (t) {
    case acclInt8: return divideAs<int8_t>(buf, count, n);
    case acclUint8: return divideAs<uint8_t>(buf, count, n);
    case acclInt32: return divideAs<int32_t>(buf, count, n);
    case acclUint32: return divideAs<uint32_t>(buf, count, n);
    case acclInt64: return divideAs<int64_t>(buf, count, n);
    case acclUint64: return divideAs<uint64_t>(buf, count, n);
    case acclFloat32: return divideAs<float>(buf, count, n);
    case acclFloat64: return divideAs<double>(buf, count, n);
    case acclFloat16: return divideHalf<Half>(buf, count, n);
    case acclBfloat16: return divideHalf<Bf16>(buf, count, n);
    default: return;  // fp8 reductions are refused by mpiOp
  }
}

// ------------------------------------------------------------------ MPI setup and teardown

std::mutex gSetupMutex;
bool gReady = false;
bool gWeInitialised = false;          // this plugin called MPI_Init_thread: it finalises at exit
std::atomic<bool> gAbandoned{false};  // requests were left pending: never finalise

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (gAbandoned.load()) {
    gHost->log(acclLogWarn, "INIT", "mpi: not calling MPI_Finalize: an operation was abandoned "
               "after a timeout or abort and MPI may still reach its buffers");
    return;
  }
  MPI_Finalize();
}

// Initialises MPI once per process (unless the application did), at the first communicator:
// loading the plugin alone (acclGetBackendInfo, python -m accl.info) must not start MPI.
void ensureMpi() {
  std::lock_guard<std::mutex> lock(gSetupMutex);
  if (gReady) return;
  int initialised = 0, finalized = 0, provided = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw Failure{acclInvalidUsage, "MPI was already finalised in this process (MPI_Finalize, "
                                    "or mpi4py at exit): no new mpi communicator can be made"};
  MPI_Initialized(&initialised);
  if (!initialised) {
    mpiCheck(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    gWeInitialised = true;
    // MPI is ours: report its errors as codes instead of aborting the process.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    atexit(finalizeAtExit);
  } else {
    MPI_Query_thread(&provided);
  }
  gSerialize = provided < MPI_THREAD_MULTIPLE;
  if (gSerialize)
    gHost->log(acclLogInfo, "INIT", "mpi: MPI provides thread level %d, not "
               "MPI_THREAD_MULTIPLE: MPI calls are serialised", provided);
  createHalfOps();
  gReady = true;
}

// An identifier of this process's MPI job, from the launcher's environment ("" if unknown): two
// ranks in different jobs may share world ranks, and MPI_Comm_create_group would then hang.
std::string jobKey() {
  for (const char* v : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_JOBID"}) {
    const char* s = getenv(v);
    if (s && *s) return s;
  }
  const char* job = getenv("SLURM_JOB_ID");
  const char* step = getenv("SLURM_STEP_ID");
  return job ? format("slurm %s.%s", job, step ? step : "") : "";
}

// ------------------------------------------------------------------ communicators and waits

struct MpiComm {
  const acclBackendCommArgs_v1* args;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, nranks = 0;
  bool abandoned = false;  // an operation was given up with requests pending: never freed

  bool aborted() const { return __atomic_load_n(args->abortFlag, __ATOMIC_ACQUIRE) != 0; }
};

MpiComm& asComm(void* b) { return *static_cast<MpiComm*>(b); }

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Completes `reqs` (statuses in `st`), polling so that each communicator's timeout and abort
// flag are honoured. `pending` describes what is still incomplete, for the error message.
void waitAll(const std::vector<MpiComm*>& comms, std::vector<MPI_Request>& reqs,
             std::vector<MPI_Status>& st, const std::function<std::string()>& pending) {
  st.resize(reqs.size());
  const double start = now();
  for (long spins = 0;; ++spins) {
    int done = 0, rc;
    {
      MpiLock lock;
      rc = MPI_Testall(int(reqs.size()), reqs.data(), &done, st.data());
    }
    if (rc == MPI_ERR_IN_STATUS)
      for (size_t j = 0; j < st.size(); ++j)
        if (st[j].MPI_ERROR != MPI_SUCCESS && st[j].MPI_ERROR != MPI_ERR_PENDING) {
          try {
            mpiCheck(st[j].MPI_ERROR, "MPI_Testall");
          } catch (Failure& f) {
            f.request = int(j);
            throw;
          }
        }
    mpiCheck(rc, "MPI_Testall");
    if (done) return;
    double timeout = 0, waited = now() - start;
    bool aborted = false;
    for (MpiComm* c : comms) {
      timeout = std::max(timeout, c->args->timeout);
      aborted |= c->aborted();
    }
    if (aborted || waited > timeout) {
      for (MpiComm* c : comms) c->abandoned = true;
      gAbandoned = true;
      if (aborted)
        throw Failure{acclRemoteError, format("the communicator was aborted while waiting for %s",
                                              pending().c_str())};
      throw Failure{acclTimeout, format("timed out after %g s waiting for %s (MPI does not say "
                                        "which ranks did not arrive)", timeout, pending().c_str())};
    }
    // Spin briefly for latency, then give the CPU to the peers (ranks may share cores).
    if (spins < 200) continue;
    if (waited < 1e-3) {
      sched_yield();
    } else {
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }
}

void checkStream(void* stream) {
  if (stream)
    throw Failure{acclInvalidArgument, "the mpi backend works on host memory and takes stream "
                                       "NULL"};
}

int blockCount(size_t count, const char* what) {
  if (count > size_t(INT_MAX))
    throw Failure{acclNotSupported, format("%s of %zu elements per rank: the mpi backend moves "
                                           "at most %d elements per block (MPI counts are int)",
                                           what, count, INT_MAX)};
  return int(count);
}

// Runs one collective: `post` starts MPI requests for elements [off, off + n) (called per chunk
// of at most INT_MAX elements when `chunked`, once with the whole count otherwise), then waits.
void runCollective(void* bcomm, void* stream, const char* name, size_t count, bool chunked,
                   const std::function<void(size_t, int, std::vector<MPI_Request>&)>& post) {
  checkStream(stream);
  MpiComm& c = asComm(bcomm);
  std::vector<MPI_Request> reqs;
  if (!chunked) {
    post(0, blockCount(count, name), reqs);
  } else {
    size_t off = 0;
    do {  // once even for count 0: every rank takes part
      int k = int(std::min(count - off, size_t(INT_MAX)));
      post(off, k, reqs);
      off += k;
    } while (off < count);
  }
  std::vector<MPI_Status> st;
  uint64_t seq = c.args->seq;
  waitAll({&c}, reqs, st, [&] {
    return format("%s #%llu (%zu elements) to complete on all %d ranks", name,
                  (unsigned long long)seq, count, c.nranks);
  });
}

char* at(const void* p, size_t bytes) {
  return const_cast<char*>(static_cast<const char*>(p)) + bytes;
}

// ------------------------------------------------------------------ point to point and groups

struct P2pOp {
  MpiComm* comm;
  bool send;
  char* buf;
  size_t count;
  acclDataType_t type;
  int peer;
  uint64_t seq;
};

struct GroupState {
  int depth = 0;
  std::vector<P2pOp> p2p;  // posted together at the outermost group end
};
thread_local GroupState tlsGroup;

// Posts every operation at once, so that exchanges which would deadlock one by one complete;
// MPI keeps the order of messages between two ranks (same communicator and tag).
void runP2p(const std::vector<P2pOp>& ops) {
  std::vector<MpiComm*> comms;
  std::vector<MPI_Request> reqs;
  std::vector<size_t> opOf;  // the op each request belongs to
  std::vector<int> counts;   // and the elements it moves
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& op = ops[i];
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
    size_t off = 0;
    do {  // messages of at most INT_MAX elements; both sides cut them alike
      int k = int(std::min(op.count - off, size_t(INT_MAX)));
      char* p = at(op.buf, off * typeSize(op.type));
      MPI_Request r;
      if (op.send)
        MPI_CALL(MPI_Isend, p, k, mpiType(op.type), op.peer, 0, op.comm->comm, &r);
      else
        MPI_CALL(MPI_Irecv, p, k, mpiType(op.type), op.peer, 0, op.comm->comm, &r);
      reqs.push_back(r);
      opOf.push_back(i);
      counts.push_back(k);
      off += k;
    } while (off < op.count);
  }
  auto describe = [&](const P2pOp& op) {
    return format("%s #%llu %s rank %d", op.send ? "acclSend" : "acclRecv",
                  (unsigned long long)op.seq, op.send ? "to" : "from", op.peer);
  };
  auto pending = [&] {
    std::string s;
    size_t last = SIZE_MAX;  // an op of several requests is named once
    for (size_t j = 0; j < reqs.size(); ++j) {
      int done = 1;
      if (reqs[j] != MPI_REQUEST_NULL) {
        MpiLock lock;
        MPI_Request_get_status(reqs[j], &done, MPI_STATUS_IGNORE);
      }
      if (done || opOf[j] == last) continue;
      last = opOf[j];
      s += (s.empty() ? "" : "; ") + describe(ops[opOf[j]]);
    }
    return s;
  };
  std::vector<MPI_Status> st;
  try {
    waitAll(comms, reqs, st, pending);
  } catch (Failure& f) {
    if (f.request >= 0) f.message = describe(ops[opOf[f.request]]) + ": " + f.message;
    if (f.code == acclRemoteError)  // MPI_ERR_TRUNCATE
      f.message += " (the send is larger than its receive: sends and receives do not match)";
    throw;
  }
  // A receive must get exactly what was sent: MPI accepts a shorter message.
  for (size_t j = 0; j < reqs.size(); ++j) {
    const P2pOp& op = ops[opOf[j]];
    int got = 0;
    if (op.send || (MPI_Get_count(&st[j], mpiType(op.type), &got), got == counts[j])) continue;
    throw Failure{acclRemoteError, format("acclRecv #%llu expected %zu elements of %s from rank "
                                          "%d, which sent %d: sends and receives do not match",
                                          (unsigned long long)op.seq, op.count,
                                          typeName(op.type), op.peer, got)};
  }
}

acclResult_t p2p(bool send, const void* buf, size_t count, acclDataType_t type, int peer,
                 void* bcomm, void* stream) {
  return guard([&] {
    checkStream(stream);
    MpiComm& c = asComm(bcomm);
    P2pOp op{&c, send, at(buf, 0), count, type, peer, c.args->seq};
    if (tlsGroup.depth > 0) {
      tlsGroup.p2p.push_back(op);
      return;
    }
    runP2p({op});
  });
}

acclResult_t groupStart() {
  ++tlsGroup.depth;
  return acclSuccess;
}

// Collectives inside a group run when called (the core replays them in call order inside this
// bracket); the point-to-point operations then run together here, as the ABI asks.
acclResult_t groupEnd() {
  return guard([] {
    if (tlsGroup.depth == 0) throw Failure{acclInvalidUsage, "group end without group start"};
    if (--tlsGroup.depth > 0) return;
    std::vector<P2pOp> ops;
    ops.swap(tlsGroup.p2p);
    if (!ops.empty()) runP2p(ops);
  });
}

// ------------------------------------------------------------------ the ABI table

acclResult_t init(const acclBackendHost_v1* host) {
  gHost = host;
  return acclSuccess;
}

// The MPI library's own version ("Open MPI v5.0.11"); MPI allows asking before MPI_Init.
acclResult_t getVersion(int* version, const char** versionString) {
  static std::string text;
  static int code = 0;
  static std::once_flag once;
  std::call_once(once, [] {
    char buf[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(buf, &len);
    text.assign(buf, strcspn(buf, ",\n"));
    int major = 0, minor = 0, patch = 0;
    const char* d = strpbrk(text.c_str(), "0123456789");
    if (d) sscanf(d, "%d.%d.%d", &major, &minor, &patch);
    code = major * 10000 + minor * 100 + patch;
  });
  *version = code;
  *versionString = text.c_str();
  return acclSuccess;
}

// The MPI communicator is carved out of MPI_COMM_WORLD: the ranks swap their world ranks through
// the core's bootstrap, then MPI_Comm_create_group (collective over the members only, unlike
// MPI_Comm_split) orders them by accl rank. MPI offers no deadline here.
acclResult_t commInit(const acclBackendCommArgs_v1* args, void** out) {
  return guard([&] {
    ensureMpi();
    struct Entry {
      int32_t worldRank, worldSize;
      char job[56];
    };
    std::vector<Entry> all(args->nranks);
    Entry& me = all[args->rank];
    memset(&me, 0, sizeof(me));
    MPI_CALL(MPI_Comm_rank, MPI_COMM_WORLD, &me.worldRank);
    MPI_CALL(MPI_Comm_size, MPI_COMM_WORLD, &me.worldSize);
    snprintf(me.job, sizeof(me.job), "%s", jobKey().c_str());
    acclResult_t r = args->allGather(args->bootstrap, all.data(), sizeof(Entry));
    if (r != acclSuccess) throw Failure{r, "", true};
    std::vector<int> worldRanks(args->nranks);
    std::vector<char> seen(me.worldSize, 0);
    for (int i = 0; i < args->nranks; ++i) {
      const Entry& e = all[i];
      if (e.worldSize == 1 && args->nranks > 1)
        throw Failure{acclInvalidUsage, format(
            "the %d ranks are not one MPI job: rank %d is an MPI singleton (started without "
            "mpirun/mpiexec/srun). Start every rank under one MPI launcher, e.g. mpirun -n %d",
            args->nranks, i, args->nranks)};
      if (e.worldSize != me.worldSize || strncmp(e.job, me.job, sizeof(me.job)) != 0)
        throw Failure{acclInvalidUsage, format(
            "rank %d is in another MPI job (MPI_COMM_WORLD of %d ranks, job '%.56s') than rank "
            "%d (%d ranks, job '%.56s'): every rank must be a process of one MPI job", i,
            e.worldSize, e.job, args->rank, me.worldSize, me.job)};
      if (seen[e.worldRank]++)
        throw Failure{acclInvalidUsage, format(
            "ranks of this communicator share MPI world rank %d: each rank must be its own MPI "
            "process", e.worldRank)};
      worldRanks[i] = e.worldRank;
    }
    auto* c = new MpiComm;
    c->args = args;
    c->rank = args->rank;
    c->nranks = args->nranks;
    try {
      MPI_Group world, group;
      MPI_CALL(MPI_Comm_group, MPI_COMM_WORLD, &world);
      MPI_CALL(MPI_Group_incl, world, args->nranks, worldRanks.data(), &group);
      // The tag tells apart communicators being created at once over overlapping ranks.
      MPI_CALL(MPI_Comm_create_group, MPI_COMM_WORLD, group, int(args->commHash & 0x7fff),
               &c->comm);
      MPI_CALL(MPI_Group_free, &group);
      MPI_CALL(MPI_Group_free, &world);
      MPI_CALL(MPI_Comm_set_errhandler, c->comm, MPI_ERRORS_RETURN);
      int rank = -1;
      MPI_CALL(MPI_Comm_rank, c->comm, &rank);
      if (rank != args->rank)
        throw Failure{acclInternalError, format("MPI placed rank %d at %d", args->rank, rank)};
    } catch (...) {
      delete c;
      throw;
    }
    gHost->log(acclLogInfo, "INIT", "mpi: rank %d/%d is MPI world rank %d of %d", args->rank,
               args->nranks, me.worldRank, me.worldSize);
    *out = c;
  });
}

acclResult_t commFinalize(void*) { return acclSuccess; }  // every call completes before returning

acclResult_t commDestroy(void* bcomm) {
  return guard([&] {
    MpiComm* c = static_cast<MpiComm*>(bcomm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (c->abandoned)
      gHost->log(acclLogWarn, "INIT", "mpi: rank %d/%d: keeping the MPI communicator, which has "
                 "operations MPI cannot cancel", c->rank, c->nranks);
    else if (!finalized && c->comm != MPI_COMM_NULL)
      MPI_CALL(MPI_Comm_free, &c->comm);
    delete c;
  });
}

acclResult_t allReduce(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                       void* b, void* st) {
  return guard([&] {
    MPI_Op mop = mpiOp(t, op);
    size_t isz = typeSize(t);
    runCollective(b, st, "acclAllReduce", n, true, [&](size_t off, int k, auto& reqs) {
      MPI_Request q;
      const void* send = s == r ? MPI_IN_PLACE : at(s, off * isz);
      MPI_CALL(MPI_Iallreduce, send, at(r, off * isz), k, mpiType(t), mop, asComm(b).comm, &q);
      reqs.push_back(q);
    });
    if (op == acclAvg) divideBy(r, n, t, asComm(b).nranks);
  });
}

acclResult_t broadcast(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                       void* st) {
  return guard([&] {
    checkStream(st);
    size_t isz = typeSize(t);
    if (asComm(b).rank == root && s != r && n) memcpy(r, s, n * isz);  // MPI_Bcast is in place
    runCollective(b, st, "acclBroadcast", n, true, [&](size_t off, int k, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Ibcast, at(r, off * isz), k, mpiType(t), root, asComm(b).comm, &q);
      reqs.push_back(q);
    });
  });
}

acclResult_t reduce(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op, int root,
                    void* b, void* st) {
  return guard([&] {
    MPI_Op mop = mpiOp(t, op);
    size_t isz = typeSize(t);
    bool atRoot = asComm(b).rank == root;
    runCollective(b, st, "acclReduce", n, true, [&](size_t off, int k, auto& reqs) {
      MPI_Request q;
      const void* send = atRoot && s == r ? MPI_IN_PLACE : at(s, off * isz);
      void* recv = r ? at(r, off * isz) : nullptr;  // used at the root only
      MPI_CALL(MPI_Ireduce, send, recv, k, mpiType(t), mop, root, asComm(b).comm, &q);
      reqs.push_back(q);
    });
    if (op == acclAvg && atRoot) divideBy(r, n, t, asComm(b).nranks);
  });
}

acclResult_t allGather(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return guard([&] {
    size_t bytes = n * typeSize(t);
    const void* send = s == at(r, asComm(b).rank * bytes) ? MPI_IN_PLACE : s;
    runCollective(b, st, "acclAllGather", n, false, [&](size_t, int k, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Iallgather, send, k, mpiType(t), r, k, mpiType(t), asComm(b).comm, &q);
      reqs.push_back(q);
    });
  });
}

acclResult_t reduceScatter(const void* s, void* r, size_t n, acclDataType_t t, acclRedOp_t op,
                           void* b, void* st) {
  return guard([&] {
    MPI_Op mop = mpiOp(t, op);
    size_t bytes = n * typeSize(t);
    // MPI's in-place form takes the result at the start of the buffer, not at this rank's
    // block: reduce into a temporary instead.
    bool inPlace = r == at(s, asComm(b).rank * bytes) && bytes;
    std::vector<char> tmp(inPlace ? bytes : 0);
    void* recv = inPlace ? tmp.data() : r;
    runCollective(b, st, "acclReduceScatter", n, false, [&](size_t, int k, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Ireduce_scatter_block, s, recv, k, mpiType(t), mop, asComm(b).comm, &q);
      reqs.push_back(q);
    });
    if (inPlace) memcpy(r, recv, bytes);
    if (op == acclAvg) divideBy(r, n, t, asComm(b).nranks);
  });
}

acclResult_t alltoAll(const void* s, void* r, size_t n, acclDataType_t t, void* b, void* st) {
  return guard([&] {
    checkStream(st);
    size_t total = n * typeSize(t) * asComm(b).nranks;
    // MPI_IN_PLACE for nonblocking all-to-all is not offered by every MPI: copy instead.
    std::vector<char> tmp(s == r ? total : 0);
    if (s == r && total) memcpy(tmp.data(), s, total);
    const void* send = s == r ? tmp.data() : s;
    runCollective(b, st, "acclAlltoAll", n, false, [&](size_t, int k, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Ialltoall, send, k, mpiType(t), r, k, mpiType(t), asComm(b).comm, &q);
      reqs.push_back(q);
    });
  });
}

acclResult_t gather(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                    void* st) {
  return guard([&] {
    bool atRoot = asComm(b).rank == root;
    const void* send = atRoot && s == at(r, root * n * typeSize(t)) ? MPI_IN_PLACE : s;
    runCollective(b, st, "acclGather", n, false, [&](size_t, int k, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Igather, send, k, mpiType(t), r, k, mpiType(t), root, asComm(b).comm, &q);
      reqs.push_back(q);
    });
  });
}

acclResult_t scatter(const void* s, void* r, size_t n, acclDataType_t t, int root, void* b,
                     void* st) {
  return guard([&] {
    bool atRoot = asComm(b).rank == root;
    void* recv = atRoot && r == at(s, root * n * typeSize(t)) ? MPI_IN_PLACE : r;
    runCollective(b, st, "acclScatter", n, false, [&](size_t, int k, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Iscatter, s, k, mpiType(t), recv, k, mpiType(t), root, asComm(b).comm, &q);
      reqs.push_back(q);
    });
  });
}

acclResult_t barrier(void* b, void* st) {
  return guard([&] {
    runCollective(b, st, "acclBarrier", 0, false, [&](size_t, int, auto& reqs) {
      MPI_Request q;
      MPI_CALL(MPI_Ibarrier, asComm(b).comm, &q);
      reqs.push_back(q);
    });
  });
}

acclResult_t send(const void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return p2p(true, buf, n, t, peer, b, st);
}

acclResult_t recv(void* buf, size_t n, acclDataType_t t, int peer, void* b, void* st) {
  return p2p(false, buf, n, t, peer, b, st);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const acclBackend_v1 acclBackendPlugin_v1 = {
    "mpi",     ACCL_BACKEND_ABI_VERSION,
    init,      getVersion,
    commInit,  commFinalize,
    commDestroy,
    allReduce, broadcast,
    reduce,    allGather,
    reduceScatter,
    alltoAll,  gather,
    scatter,   barrier,
    send,      recv,
    groupStart, groupEnd,
};
