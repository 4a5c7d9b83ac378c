// The flight recorder: every communicator keeps its last ACCL_TRACE_BUFFER operations with their
// state and times, so a hang or a failure can be traced to the rank and the operation that fell
// behind (`python -m accl.trace DIR` reads the dumps of all ranks).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "accl/accl.h"

namespace accl {

// What a call is, for the recorder and for ACCL_CHECK's comparison across ranks.
struct OpDesc {
  const char* name;  // "acclAllReduce", ...
  int type = -1;     // acclDataType_t, -1 if none
  size_t count = 0;
  int root = -1;   // root, or peer for send/recv; -1 if none
  int redop = -1;  // acclRedOp_t, -1 if none
  bool p2p = false;
  const void* buf = nullptr;  // a buffer every rank passes: its memory can choose the backend
};

class Trace {
 public:
  enum State { kQueued, kStarted, kDone, kFailed };

  explicit Trace(size_t capacity);
  void record(const OpDesc& d, uint64_t seq, State s);
  void update(uint64_t seq, State s, acclResult_t result = acclSuccess);
  // The whole buffer as JSON; `header` holds the communicator's fields, without braces.
  std::string json(const std::string& header) const;

 private:
  struct Entry {
    uint64_t seq = 0;  // 0: empty
    OpDesc op;
    State state = kQueued;
    acclResult_t result = acclSuccess;
    int64_t queued = -1, started = -1, done = -1;  // ticks since t0_ (-1: not yet)
  };
  // A clock read three times for each operation of a group: the TSC where it is invariant
  // (9.6 ns a reading here, against 24 for steady_clock), else steady_clock's nanoseconds.
  // Dumps convert the ticks to microseconds by the rate both clocks show since t0_.
  static uint64_t ticks();
  int64_t sinceStart() const { return int64_t(ticks() - tick0_); }

  mutable std::mutex mu_;  // dumps may come from another thread
  std::vector<Entry> ring_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  uint64_t tick0_ = ticks();
};

}  // namespace accl
