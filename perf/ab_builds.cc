// Two builds of libaccl against each other in the same processes, so that both see the same
// mode of this VM (docs/performance.md, "How far a point can be trusted": the cost of a line
// crossing between the cores changes every few seconds, and separate launches compare
// different draws). Each process loads both libraries side by side (dlopen, RTLD_LOCAL: each
// keeps its own globals), makes a communicator with each, and times their loops in turn, each
// round starting with the other build. Rank 0 prints each round's two times (µs a call, the
// slowest rank's), then the medians of the rounds where both builds ran in the fast mode and
// of those where both ran in the slow one (by SLOW_US, default 0.2 µs for an 8-byte call).
// Build and run from the repository root (copy a build first: the two files must differ):
//   g++ -O2 -std=c++17 -Icsrc/include perf/ab_builds.cc -o /tmp/ab_builds -ldl
//   /tmp/ab_builds /tmp/libaccl.old.so python/accl/libaccl.so broadcast 8 2000 20000
// The arguments: the two libraries, the call (all_reduce, broadcast, broadcast_in_place, reduce,
// reduce_in_place (both to rank 0), all_gather, all_gather_in_place, or sendrecv: a group of a
// send to the next rank and a receive from the previous one), its bytes (an all-gather's
// output, as accl-perf counts), rounds, calls per loop, and optionally the threshold in µs
// between the modes and the number of ranks (default 2), bound as accl-perf binds them: rank r
// to CPU r * cpus / n. Where the two builds differ by a few percent, run both orders (A B and
// B A): a run of 16 rounds has read 0.91 in one order where the other read 0.99 (all_gather of
// 16 MiB, 2026-12-07).
#include <accl/accl.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace {

struct Build {
  decltype(&acclGetUniqueId) uniqueId;
  decltype(&acclCommInitRank) init;
  decltype(&acclAllReduce) allReduce;
  decltype(&acclBroadcast) broadcast;
  decltype(&acclReduce) reduce;
  decltype(&acclAllGather) allGather;
  decltype(&acclSend) send;
  decltype(&acclRecv) recv;
  decltype(&acclGroupStart) groupStart;
  decltype(&acclGroupEnd) groupEnd;
  acclUniqueId id;
  acclComm_t comm;

  explicit Build(const char* path) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "ab_builds: %s\n", dlerror());
      exit(2);
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(h, name);
      if (!p) {
        fprintf(stderr, "ab_builds: %s has no %s\n", path, name);
        exit(2);
      }
      return p;
    };
    uniqueId = reinterpret_cast<decltype(uniqueId)>(sym("acclGetUniqueId"));
    init = reinterpret_cast<decltype(init)>(sym("acclCommInitRank"));
    allReduce = reinterpret_cast<decltype(allReduce)>(sym("acclAllReduce"));
    broadcast = reinterpret_cast<decltype(broadcast)>(sym("acclBroadcast"));
    reduce = reinterpret_cast<decltype(reduce)>(sym("acclReduce"));
    allGather = reinterpret_cast<decltype(allGather)>(sym("acclAllGather"));
    send = reinterpret_cast<decltype(send)>(sym("acclSend"));
    recv = reinterpret_cast<decltype(recv)>(sym("acclRecv"));
    groupStart = reinterpret_cast<decltype(groupStart)>(sym("acclGroupStart"));
    groupEnd = reinterpret_cast<decltype(groupEnd)>(sym("acclGroupEnd"));
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: ab_builds LIB_A LIB_B all_reduce|broadcast|broadcast_in_place|"
                    "reduce|reduce_in_place|all_gather|all_gather_in_place|sendrecv BYTES "
                    "ROUNDS CALLS [SLOW_US [NRANKS]]\n");
    return 2;
  }
  if (!strcmp(argv[1], argv[2])) {
    fprintf(stderr, "ab_builds: one file loads once; copy one build elsewhere\n");
    return 2;
  }
  Build builds[2] = {Build(argv[1]), Build(argv[2])};
  const std::string call = argv[3];
  const size_t count = atol(argv[4]) / 4;  // float32 elements
  const int rounds = atoi(argv[5]);
  const long calls = atol(argv[6]);
  const double slowUs = argc > 7 ? atof(argv[7]) : 0.2;
  const int n = argc > 8 ? atoi(argv[8]) : 2;
  // The call is looked up once: compared by name in the loop, it cost 3% of an 8-byte send/recv.
  enum Call { kAllReduce, kBroadcast, kBroadcastInPlace, kReduce, kReduceInPlace, kAllGather,
              kAllGatherInPlace, kSendRecv };
  const char* const names[] = {"all_reduce", "broadcast", "broadcast_in_place", "reduce",
                               "reduce_in_place", "all_gather", "all_gather_in_place",
                               "sendrecv"};  // in the order of Call
  const auto named = std::find(std::begin(names), std::end(names), call);
  if (named == std::end(names)) {
    fprintf(stderr, "ab_builds: unknown call %s\n", call.c_str());
    return 2;
  }
  const Call kind = Call(named - std::begin(names));
  if (n < 2) {
    fprintf(stderr, "ab_builds: NRANKS must be at least 2\n");
    return 2;
  }
  for (Build& b : builds)
    if (b.uniqueId(&b.id)) return 1;
  // Rank 0's view of each round: [round][build], µs a call.
  auto* times = static_cast<double*>(mmap(nullptr, sizeof(double) * 2 * rounds,
                                          PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                          -1, 0));
  int me = 0;
  std::vector<pid_t> children;
  for (int r = 1; r < n && me == 0; ++r) {
    const pid_t pid = fork();
    if (pid == 0) me = r;
    else children.push_back(pid);
  }
  const int ncpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me * ncpus / n, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  for (Build& b : builds)
    if (b.init(&b.comm, n, b.id, me)) {
      fprintf(stderr, "ab_builds: rank %d: init failed\n", me);
      return 1;
    }
  // Huge pages advised, written with ones, as accl-perf's buffers (python/accl/perf.py buffer).
  auto buffer = [](size_t floats) {
    const size_t huge = size_t(2) << 20, bytes = (floats * 4 + huge - 1) / huge * huge;
    void* m = mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) exit(1);
    auto* p = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(m) + huge - 1) / huge * huge);
    madvise(p, bytes, MADV_HUGEPAGE);
    std::fill(p, p + bytes / 4, 1.0f);
    return p;
  };
  float* in = buffer(std::max<size_t>(count, 1));
  float* out = buffer(std::max<size_t>(count, 1));
  const size_t block = count / n;  // an all-gather's input
  auto once = [&](Build& b) {
    switch (kind) {
      case kAllReduce: return b.allReduce(in, out, count, acclFloat32, acclSum, b.comm, nullptr);
      case kBroadcast: return b.broadcast(in, out, count, acclFloat32, 0, b.comm, nullptr);
      case kBroadcastInPlace: return b.broadcast(out, out, count, acclFloat32, 0, b.comm, nullptr);
      case kReduce: return b.reduce(in, out, count, acclFloat32, acclSum, 0, b.comm, nullptr);
      case kReduceInPlace:
        return b.reduce(out, out, count, acclFloat32, acclSum, 0, b.comm, nullptr);
      case kAllGather: return b.allGather(in, out, block, acclFloat32, b.comm, nullptr);
      case kAllGatherInPlace:
        return b.allGather(out + me * block, out, block, acclFloat32, b.comm, nullptr);
      case kSendRecv: break;
    }
    b.groupStart();
    acclResult_t s = b.send(in, count, acclFloat32, (me + 1) % n, b.comm, nullptr);
    acclResult_t r = b.recv(out, count, acclFloat32, (me + n - 1) % n, b.comm, nullptr);
    acclResult_t e = b.groupEnd();
    return s ? s : r ? r : e;
  };
  for (int k = 0; k < rounds; ++k)
    for (int j = 0; j < 2; ++j) {
      const int i = (j + k) % 2;  // each round starts with the other build
      Build& b = builds[i];
      float one = 0, slowest = 0;
      b.allReduce(&one, &slowest, 1, acclFloat32, acclMax, b.comm, nullptr);  // start together
      const auto t0 = std::chrono::steady_clock::now();
      for (long c = 0; c < calls; ++c)
        if (once(b)) {
          fprintf(stderr, "ab_builds: rank %d: %s failed in build %d\n", me, call.c_str(), i);
          return 1;
        }
      float us = float(std::chrono::duration<double, std::micro>(
                           std::chrono::steady_clock::now() - t0).count() / calls);
      b.allReduce(&us, &slowest, 1, acclFloat32, acclMax, b.comm, nullptr);
      if (me == 0) times[2 * k + i] = slowest;
    }
  if (me != 0) return 0;
  int status = 0;
  for (pid_t pid : children) {
    int st = 0;
    waitpid(pid, &st, 0);
    if (st) status = st;
  }
  std::vector<double> a[2], b[2];  // per mode (0 fast, 1 slow): each build's times
  for (int k = 0; k < rounds; ++k) {
    const double x = times[2 * k], y = times[2 * k + 1];
    printf("%.3f %.3f\n", x, y);
    if ((x < slowUs) == (y < slowUs)) {
      a[x >= slowUs].push_back(x);
      b[x >= slowUs].push_back(y);
    }
  }
  for (int m = 0; m < 2; ++m)
    if (!a[m].empty())
      printf("# %s mode, %zu rounds: A %.3f us, B %.3f us (medians)\n", m ? "slow" : "fast",
             a[m].size(), median(a[m]), median(b[m]));
  return status == 0 ? 0 : 1;
}
