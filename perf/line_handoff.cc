// What one cache line costs to cross between the cores, against accl's smallest all-reduce, in
// whichever mode this VM is in (docs/algorithms.md, "Small all-reduces"): two processes pinned
// to CPUs 0 and 1 alternate batches of 20000 calls of three kinds, so that each row's three
// figures share a mode: accl's 8-byte all-reduce, a symmetric exchange by hand through a data
// line and then a flag line (as a slot step moves them), and one through a single line holding
// both. At the end, the medians of the rows in each mode (fast: the single line under 0.1 us).
// Build and run from the repository root after `make build` (the argument: seconds):
//   g++ -O2 -std=c++17 -Icsrc/include perf/line_handoff.cc -o /tmp/line_handoff
//       -Lpython/accl -laccl -Wl,-rpath,$PWD/python/accl && /tmp/line_handoff 60
#include <accl/accl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

namespace {

struct alignas(64) Line {
  std::atomic<uint64_t> flag;
  uint64_t data[7];
};
struct Shared {
  Line data[2], flag[2], both[2];  // per process
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 60;
  auto* m = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (m) Shared();
  acclUniqueId id;
  if (acclGetUniqueId(&id)) return 1;
  const int me = fork() == 0 ? 1 : 0, peer = 1 - me;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  acclComm_t comm;
  if (acclCommInitRank(&comm, 2, id, me)) {
    fprintf(stderr, "rank %d: %s\n", me, acclGetLastError(nullptr));
    return 1;
  }
  const long n = 20000;
  float in[2] = {1, 2}, out[2];
  uint64_t seq = 0, sum = 0;
  auto exchange = [&](Line* data, Line* flag) {  // flag == data: one line
    ++seq;
    data[me].data[0] = seq;
    flag[me].flag.store(seq, std::memory_order_release);
    while (flag[peer].flag.load(std::memory_order_acquire) < seq) __builtin_ia32_pause();
    sum += data[peer].data[0];
  };
  std::vector<double> rows[3];  // us a call: accl, two lines, one line
  const double start = now();
  for (int stop = 0; !stop;) {
    double t[4];
    t[0] = now();
    for (long i = 0; i < n; ++i) acclAllReduce(in, out, 2, acclFloat32, acclSum, comm, nullptr);
    t[1] = now();
    for (long i = 0; i < n; ++i) exchange(m->data, m->flag);
    t[2] = now();
    for (long i = 0; i < n; ++i) exchange(m->both, m->both);
    t[3] = now();
    for (int k = 0; k < 3; ++k) rows[k].push_back((t[k + 1] - t[k]) / n * 1e6);
    int late = now() - start > seconds;
    acclAllReduce(&late, &stop, 1, acclInt32, acclMax, comm, nullptr);  // both stop together
  }
  acclCommDestroy(comm);
  if (me == 1) return sum == 0;
  wait(nullptr);
  for (int slow = 0; slow < 2; ++slow) {
    std::vector<double> pick[3];
    for (size_t r = 0; r < rows[0].size(); ++r)
      if ((rows[2][r] >= 0.1) == bool(slow))
        for (int k = 0; k < 3; ++k) pick[k].push_back(rows[k][r]);
    printf("%s mode: %zu batches; accl all_reduce 8 B %.3f us, two lines %.3f, one line %.3f\n",
           slow ? "slow" : "fast", pick[0].size(), median(pick[0]), median(pick[1]),
           median(pick[2]));
  }
  return 0;
}
