// The flight recorder: every communicator keeps its last ACCL_TRACE_BUFFER operations with their
// state and times, so a hang or a failure can be traced to the rank and the operation that fell
// behind (`python -m accl.trace DIR` reads the dumps of all ranks).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
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

  // Keeps the last `capacity` operations, rounded up to a power of two (0: none).
  explicit Trace(size_t capacity);
  bool on() const { return !ring_.empty(); }
  // A new operation, queued or started at `stamp`, a reading of ticks().
  void record(const OpDesc& d, uint64_t seq, State s, uint64_t stamp);
  void update(uint64_t seq, State s, acclResult_t result = acclSuccess) {
    update(seq, s, result, ticks());
  }
  // The same, stamped with a reading of ticks() that a group's operations share: they start
  // together and end together.
  void update(uint64_t seq, State s, acclResult_t result, uint64_t stamp);
  // The clock, read twice for an operation alone and three times for a group whatever it holds
  // (its first queued operation's stamp is all its operations' "queued"): the TSC where it is
  // invariant (9.7 ns a reading here, against 24 for steady_clock), else steady_clock's
  // nanoseconds. Dumps convert the ticks to microseconds by the rate both clocks show since t0_.
  static uint64_t ticks();
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
  int64_t sinceStart() const { return int64_t(ticks() - tick0_); }
  // The entry of operation `seq`, whichever it holds now. A mask, not a modulo: a division
  // costs as much as the rest of a record.
  Entry& at(uint64_t seq) { return ring_[seq & (ring_.size() - 1)]; }

  // Guards the ring: dumps may come from another thread. The calling thread takes it two or
  // three times an operation and a dump seldom, so it is a flag, taken with one locked
  // instruction and released with a plain store, where a mutex costs two calls and two locked
  // instructions; a rare waiter yields.
  class Lock {
   public:
    explicit Lock(std::atomic<bool>& busy) : busy_(busy) {
      while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
    }
    ~Lock() { busy_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool>& busy_;
  };
  mutable std::atomic<bool> busy_{false};
  std::vector<Entry> ring_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  uint64_t tick0_ = ticks();
};

}  // namespace accl
