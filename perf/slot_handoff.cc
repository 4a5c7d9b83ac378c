// One staging slot handed from one core to the other, as a staged collective hands it: a writer
// process on core 1 fills a shared slot, a reader process on core 0 then copies it out, over and
// over, and each side times its own part. Why copies into slots stream from kSlotUncachedBytes
// (docs/algorithms.md, "Staging around the caches"): with plain stores the writer first takes
// every line back from the reader's cache, which in this VM's slow placements costs 4-10 us for
// 16 KiB. Build and run (one launch is one placement; run it a few times):
// g++ -O2 -mavx2 -mclflushopt perf/slot_handoff.cc -o /tmp/slot_handoff && /tmp/slot_handoff 16
// (KiB per slot; prints the median over 2000 handoffs of each method, writer and reader).
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stream_copy.h"

namespace {

constexpr int kMethods = 3, kRounds = 400, kBlock = 5;
constexpr long kHandoffs = long(kRounds) * kMethods * kBlock;
const char* const kNames[kMethods] = {"plain stores", "streaming stores",
                                      "plain stores, reader flushes its lines after reading"};

struct Shared {
  alignas(64) std::atomic<long> written{0};  // the handoff the writer has finished
  alignas(64) std::atomic<long> read{0};     // the handoff the reader has finished
  double writerUs[kHandoffs];
};

void pin(int core) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(core, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

int method(long handoff) { return (handoff - 1) / kBlock % kMethods; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = size_t(argc > 1 ? atol(argv[1]) : 16) << 10;
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* slot = static_cast<char*>(
      mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED || slot == MAP_FAILED) return 1;
  new (sh) Shared;
  std::vector<char> src(n, 1), dst(n);
  // The methods take turns in blocks of kBlock handoffs, so that a drift in the machine's speed
  // reaches all; the first handoff of a block, which starts from the state the method before
  // left, is not counted.
  if (fork() == 0) {
    pin(1);
    for (long k = 1; k <= kHandoffs; ++k) {
      while (sh->read.load() != k - 1) {}
      src[0] = char(k);
      auto t0 = std::chrono::steady_clock::now();
      if (method(k) == 1) stream(slot, src.data(), n);
      else memcpy(slot, src.data(), n);
      sh->writerUs[k - 1] = since(t0);
      sh->written.store(k);
    }
    _exit(0);
  }
  pin(0);
  std::vector<double> reader[kMethods], writer[kMethods];
  for (long k = 1; k <= kHandoffs; ++k) {
    while (sh->written.load() != k) {}
    auto t0 = std::chrono::steady_clock::now();
    memcpy(dst.data(), slot, n);
    if (method(k) == 2) {
      for (size_t i = 0; i < n; i += 64) _mm_clflushopt(slot + i);
      _mm_sfence();
    }
    if ((k - 1) % kBlock) {
      reader[method(k)].push_back(since(t0));
      writer[method(k)].push_back(sh->writerUs[k - 1]);
    }
    sh->read.store(k);
  }
  wait(nullptr);
  for (int m = 0; m < kMethods; ++m)
    printf("%-54s writer %6.2f us  reader %6.2f us\n", kNames[m], median(writer[m]),
           median(reader[m]));
}
