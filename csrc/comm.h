// The core's communicator: one backend communicator plus the bootstrap it was made with.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "accl/backend.h"
#include "bootstrap.h"
#include "trace.h"

namespace accl {

struct Comm {
  acclComm* handle = nullptr;  // the public handle, which outlives this
  int rank = 0, nranks = 0;
  std::string backendName;
  const acclBackend_v1* backend = nullptr;
  void* bcomm = nullptr;
  acclBackendCommArgs_v1 args{};  // handed to the backend; lives as long as bcomm
  std::unique_ptr<Bootstrap> bootstrap;
  volatile int abortFlag = 0;
  // acclSuccess, acclInProgress while a non-blocking init runs, or the error that broke it.
  std::atomic<int> asyncError{acclSuccess};
  std::string asyncMessage;
  std::mutex asyncMutex;             // guards asyncMessage once init is done
  uint64_t seq = 0;                  // numbers every operation, for error messages
  std::thread initThread;            // the non-blocking init
  bool finalized = false;
  bool checkArgs = false;            // ACCL_CHECK
  std::string traceDir;              // ACCL_TRACE_DIR
  std::string compose;               // ACCL_COMPOSE
  std::unique_ptr<Trace> trace;
  int64_t createdUnixUs = 0;         // lines up the flight recorders of different ranks
};

struct BackendInfo {
  const acclBackend_v1* table = nullptr;
  std::string path;  // the plugin library, or "(built into libaccl)"
  int version = 0;
  const char* versionString = nullptr;
};

// The backend named `spec` (a name, or a plugin's path), loaded and initialised once per
// process. Throws with every place it looked when there is none.
const BackendInfo& findBackend(const std::string& spec);

// The calling thread's message from a backend's host->setError (consumed by api.cc).
std::string takeBackendMessage();
void clearBackendMessage();  // before a backend call: no stale message is taken for its own
void setBackendMessage(const std::string& msg);

}  // namespace accl

// The public handle. It is never freed: after destroy it stays as a tombstone, so a call on a
// destroyed communicator is reported (acclInvalidUsage) instead of reading freed memory.
struct acclComm {
  static constexpr uint32_t kLive = 0xacc1c033, kDead = 0xdeadc033;
  std::atomic<uint32_t> magic{kLive};
  // Calls running on this communicator. It lives here, not in impl, so that a call can announce
  // itself before it looks at impl: destroy marks the handle dead, then waits for this to be 0.
  std::atomic<int> inflight{0};
  // Fixed at creation, as in impl: what the argument checks read (and a call of nothing, below).
  int rank = 0, nranks = 0;
  // Whether a collective of count 0 may complete on the handle alone, without holding impl (its
  // two locked instructions were half of such a call): set once init succeeded without
  // ACCL_CHECK (which compares even those calls across ranks), cleared when an error breaks the
  // communicator or it is finalized. Destroy marks `magic` instead.
  std::atomic<bool> idleCalls{false};
  std::unique_ptr<accl::Comm> impl;
};
