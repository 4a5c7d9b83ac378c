#include "trace.h"

#include <algorithm>

#include "errors.h"
#include "types.h"

namespace accl {

Trace::Trace(size_t capacity) : ring_(capacity) {}

int64_t Trace::nowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               t0_)
      .count();
}

void Trace::record(const OpDesc& d, uint64_t seq, State s) {
  if (ring_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = ring_[seq % ring_.size()];
  e = Entry();
  e.seq = seq;
  e.op = d;
  e.state = s;
  e.queuedUs = nowUs();
  if (s == kStarted) e.startedUs = e.queuedUs;
}

void Trace::update(uint64_t seq, State s, acclResult_t result) {
  if (ring_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = ring_[seq % ring_.size()];
  if (e.seq != seq) return;  // already overwritten by newer operations
  e.state = s;
  e.result = result;
  (s == kStarted ? e.startedUs : e.doneUs) = nowUs();
}

std::string Trace::json(const std::string& header) const {
  static const char* states[] = {"queued", "started", "done", "failed"};
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Entry*> live;
  for (auto& e : ring_)
    if (e.seq) live.push_back(&e);
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
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
                acclGetErrorString(e.result), (long long)e.queuedUs, (long long)e.startedUs,
                (long long)e.doneUs);
  }
  return s + "\n]}\n";
}

}  // namespace accl
