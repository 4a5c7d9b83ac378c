// Two processes, one per core, each copying the same number of bytes at the same time, by
// method: why a peer's shared mapping beats the kernel's copy, what small pages cost the
// kernel's copy, and what zeros do to streaming stores (docs/algorithms.md, "Shared host
// memory", "Page size" and "Copies nobody reads again"). Build and run:
// g++ -O2 perf/copy_rates.cc -o /tmp/copy_rates && /tmp/copy_rates 32
// (MiB per process; prints the median of 15 rounds for each method).
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stream_copy.h"

namespace {

void movsb(char* d, const char* s, size_t n) {
  asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

// Private memory at the same address in both processes (so each can name the other's buffer),
// on huge pages where the kernel allows (`huge`) or on small pages, as numpy's and torch's
// memory is where transparent huge pages are only advised, written (with `fill`) so that every
// page is this process's own.
char* privateBuffer(uintptr_t at, size_t n, bool huge = true, int fill = 1) {
  void* p = mmap(reinterpret_cast<void*>(at), n, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(1); }
  madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  memset(p, fill, n);
  return static_cast<char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = size_t(argc > 1 ? atol(argv[1]) : 32) << 20;
  // One shared buffer per process, made before the fork so both map both.
  char* shared[2];
  for (char*& s : shared) {
    s = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    memset(s, 1, n);
  }
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return 1;
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);  // let the child write into this process
  const pid_t parent = getpid(), child = fork();
  const int me = child == 0;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  const pid_t peer = me ? parent : child;
  char* src = privateBuffer(0x600000000000, n);
  char* dst = privateBuffer(0x610000000000, n);
  char* srcSmall = privateBuffer(0x620000000000, n, false);
  char* dstSmall = privateBuffer(0x630000000000, n, false);
  char* zeros = privateBuffer(0x640000000000, n, true, 0);
  auto barrier = [&] {
    char c = 0;
    bool ok = me ? write(up[1], &c, 1) == 1 && read(down[0], &c, 1) == 1
                 : read(up[0], &c, 1) == 1 && write(down[1], &c, 1) == 1;
    if (!ok) exit(1);
  };
  const char* names[] = {"memcpy", "rep movsb", "streaming stores", "process_vm_writev to the peer",
                         "streaming stores into the peer's shared buffer",
                         "process_vm_writev to the peer, small pages",
                         "streaming stores of zeros"};
  // The methods take turns round by round, so that a drift in the machine's speed reaches all.
  std::vector<double> us[7];
  for (int round = 0; round < 15; ++round) {
    for (int method = 0; method < 7; ++method) {
      barrier();
      auto t0 = std::chrono::steady_clock::now();
      if (method == 0) memcpy(dst, src, n);
      if (method == 1) movsb(dst, src, n);
      if (method == 2) stream(dst, src, n);
      if (method == 3 || method == 5) {
        iovec local{method == 3 ? src : srcSmall, n}, remote{method == 3 ? dst : dstSmall, n};
        if (process_vm_writev(peer, &local, 1, &remote, 1, 0) != ssize_t(n)) perror("writev");
      }
      if (method == 4) stream(shared[1 - me], src, n);
      if (method == 6) stream(dst, zeros, n);
      us[method].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  barrier();
  for (int method = 0; method < 7 && !me; ++method) {
    std::sort(us[method].begin(), us[method].end());
    printf("%-48s %8.0f us  %6.2f GB/s per process\n", names[method], us[method][7],
           n / us[method][7] / 1e3);
  }
  if (!me) wait(nullptr);
}
