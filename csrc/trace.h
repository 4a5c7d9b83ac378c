// The flight recorder: every communicator keeps its last ACCL_TRACE_BUFFER operations with their
// state and times, so a hang or a failure can be traced to the rank and the operation that fell
// behind (`python -m accl.trace DIR` reads the dumps of all ranks).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
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
  struct Fields {
    uint64_t seq = 0;  // 0: empty
    OpDesc op{};
    State state = kQueued;
    acclResult_t result = acclSuccess;
    int64_t queued = -1, started = -1, done = -1;  // ticks since t0_ (-1: not yet)
  };
  // Each entry has its own version, odd while the calling thread writes it (one thread at a time
  // calls a communicator, as for every call on it), which a dump from another thread reads before
  // and after its copy of the entry: plain stores on the caller's side, where a lock taken with
  // a locked instruction at each record and update made a 2-rank 8-byte send/recv group 2-5%
  // slower (perf/ab_builds.cc, 2026-12-07), and a dump held it while it formatted the ring.
  // Per entry, not one for the ring: a dump copies one entry between two calls, where a copy of
  // the whole ring could be overtaken at every try by a communicator busy with short calls.
  struct Entry {
    std::atomic<uint32_t> version{0};
    Fields f;
  };
  // Writes entry `e` between the two stores of its version.
  class Write {
   public:
    explicit Write(Entry& e) : e_(e), v_(e.version.load(std::memory_order_relaxed)) {
      e_.version.store(v_ + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
    }
    ~Write() { e_.version.store(v_ + 2, std::memory_order_release); }
    Fields& f() { return e_.f; }

   private:
    Entry& e_;
    uint32_t v_;
  };
  // A consistent copy of entry `e` (retried while the caller writes it; after kTries, a torn
  // copy, which can only mix two operations' fields in a dump).
  static Fields read(const Entry& e);
  int64_t sinceStart() const { return int64_t(ticks() - tick0_); }
  // The entry of operation `seq`, whichever it holds now. A mask, not a modulo: a division
  // costs as much as the rest of a record.
  Entry& at(uint64_t seq) { return ring_[seq & (ring_.size() - 1)]; }

  std::vector<Entry> ring_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  uint64_t tick0_ = ticks();
};

}  // namespace accl
