#include "trace.h"

#include <algorithm>
#include <thread>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "errors.h"
#include "types.h"

namespace accl {

namespace {
size_t powerOfTwoAtLeast(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return n ? p : 0;
}
}  // namespace

Trace::Trace(size_t capacity) : ring_(powerOfTwoAtLeast(capacity)) {}

uint64_t Trace::ticks() {
#if defined(__x86_64__)
  static const bool invariant = [] {
    unsigned a, b, c, d;
    return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
  }();
  if (invariant) return __rdtsc();
#endif
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Trace::record(const OpDesc& d, uint64_t seq, State s, uint64_t stamp) {
  if (ring_.empty()) return;
  const int64_t now = int64_t(stamp - tick0_);
  Write w(at(seq));
  Fields& f = w.f();
  f.seq = seq;
  f.op = d;
  f.state = s;
  f.result = acclSuccess;
  f.queued = now;
  f.started = s == kStarted ? now : -1;
  f.done = -1;
}

void Trace::update(uint64_t seq, State s, acclResult_t result, uint64_t stamp) {
  if (ring_.empty()) return;
  Entry& e = at(seq);
  if (e.f.seq != seq) return;  // already overwritten by newer operations
  Write w(e);
  w.f().state = s;
  w.f().result = result;
  (s == kStarted ? w.f().started : w.f().done) = int64_t(stamp - tick0_);
}

Trace::Fields Trace::read(const Entry& e) {
  constexpr int kTries = 1000;
  Fields f;
  for (int i = 0; i < kTries; ++i) {
    const uint32_t before = e.version.load(std::memory_order_acquire);
    f = e.f;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!(before & 1) && e.version.load(std::memory_order_relaxed) == before) break;
    std::this_thread::yield();
  }
  return f;
}

std::string Trace::json(const std::string& header) const {
  static const char* states[] = {"queued", "started", "done", "failed"};
  std::vector<Fields> live;
  for (auto& e : ring_) {
    Fields f = read(e);
    if (f.seq) live.push_back(f);
  }
  std::sort(live.begin(), live.end(),
            [](const Fields& a, const Fields& b) { return a.seq < b.seq; });
  const double usPerTick =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count() /
      std::max<int64_t>(sinceStart(), 1);
  auto us = [&](int64_t t) { return t < 0 ? -1LL : (long long)(t * usPerTick); };
  std::string s = "{" + header + ", \"ops\": [";
  for (size_t i = 0; i < live.size(); ++i) {
    const Fields& e = live[i];
    s += format("%s\n  {\"seq\": %llu, \"op\": \"%s\", \"dtype\": \"%s\", \"count\": %zu, "
                "\"%s\": %d, \"redop\": \"%s\", \"state\": \"%s\", \"result\": \"%s\", "
                "\"queued_us\": %lld, \"started_us\": %lld, \"done_us\": %lld}",
                i ? "," : "", (unsigned long long)e.seq, e.op.name,
                e.op.type >= 0 ? typeName(acclDataType_t(e.op.type)) : "",
                e.op.count, e.op.p2p ? "peer" : "root", e.op.root,
                e.op.redop >= 0 ? opName(acclRedOp_t(e.op.redop)) : "", states[e.state],
                acclGetErrorString(e.result), us(e.queued), us(e.started), us(e.done));
  }
  return s + "\n]}\n";
}

}  // namespace accl
