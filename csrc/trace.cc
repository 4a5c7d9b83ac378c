#include "trace.h"

#include <algorithm>

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
  Lock lock(busy_);
  Entry& e = at(seq);
  e.seq = seq;
  e.op = d;
  e.state = s;
  e.result = acclSuccess;
  e.queued = now;
  e.started = s == kStarted ? now : -1;
  e.done = -1;
}

void Trace::update(uint64_t seq, State s, acclResult_t result, uint64_t stamp) {
  if (ring_.empty()) return;
  Lock lock(busy_);
  Entry& e = at(seq);
  if (e.seq != seq) return;  // already overwritten by newer operations
  e.state = s;
  e.result = result;
  (s == kStarted ? e.started : e.done) = int64_t(stamp - tick0_);
}

std::string Trace::json(const std::string& header) const {
  static const char* states[] = {"queued", "started", "done", "failed"};
  Lock lock(busy_);
  std::vector<const Entry*> live;
  for (auto& e : ring_)
    if (e.seq) live.push_back(&e);
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
  const double usPerTick =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count() /
      std::max<int64_t>(sinceStart(), 1);
  auto us = [&](int64_t t) { return t < 0 ? -1LL : (long long)(t * usPerTick); };
  std::string s = "{" + header + ", \"ops\": [";
  for (size_t i = 0; i < live.size(); ++i) {
    const Entry& e = *live[i];
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
