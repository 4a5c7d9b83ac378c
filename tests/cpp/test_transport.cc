// The TCP transport alone (backends/cpu/transport/tcp.*), without the core: N ranks as forked
// processes on loopback, with a stand-in bootstrap (an all-gather through shared memory).
//
//   accl_transport_test <nranks>
//
// Checks: messages of many sizes (0, 1, odd, the 256 KiB split point, larger than the socket
// buffers) between every pair at once, in order; a receive of the wrong size is reported; a
// peer that exits is named; and strangers connecting to the highest rank while it builds its
// mesh (garbage, a hello with the wrong token, a silent one) are refused and logged, while the
// mesh still completes. Exit code 0 on success.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"
#include "transport/tcp.h"

using namespace accl;
using namespace accl::cpu;

namespace {

constexpr int kMaxRanks = 8;
constexpr size_t kSlot = 4096;

struct Shared {
  pthread_barrier_t barrier;
  char slots[kMaxRanks][kSlot];
  int tableReady;    // the address exchange is done: strangers may go
  int strangersDone;  // ranks 0.. wait for the strangers before they connect
};
Shared* g;
int gRank, gN;
int gFailures = 0;

#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "[rank %d] %s:%d: FAILED: %s: ", gRank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      ++gFailures;                                                          \
    }                                                                       \
  } while (0)

acclResult_t fakeAllGather(void*, void* data, size_t bytes) {
  char* d = static_cast<char*>(data);
  memcpy(g->slots[gRank], d + gRank * bytes, bytes);
  pthread_barrier_wait(&g->barrier);
  for (int r = 0; r < gN; ++r) memcpy(d + r * bytes, g->slots[r], bytes);
  pthread_barrier_wait(&g->barrier);
  // The first exchange is the addresses: the lower ranks let the strangers go first.
  if (gRank == 0) __atomic_store_n(&g->tableReady, 1, __ATOMIC_RELEASE);
  if (gRank < gN - 1)
    while (!__atomic_load_n(&g->strangersDone, __ATOMIC_ACQUIRE)) usleep(1000);
  return acclSuccess;
}

// Runs `ops` to completion the way the backend does: progress, then poll.
void run(TcpTransport& t, std::vector<NetOp>& ops, double timeout) {
  auto start = std::chrono::steady_clock::now();
  std::vector<pollfd> fds;
  for (;;) {
    bool pending = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].complete) continue;
      pending = true;
      bool blocked = false;  // one message at a time per peer and direction
      for (size_t j = 0; j < i; ++j)
        blocked |= !ops[j].complete && ops[j].peer == ops[i].peer && ops[j].send == ops[i].send;
      if (!blocked) t.progress(ops[i]);
    }
    if (!pending) return;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout)
      ACCL_THROW(acclTimeout, "test: timed out");
    fds.clear();
    for (auto& op : ops) t.pollEvents(op, &fds);
    poll(fds.data(), fds.size(), 50);
  }
}

uint8_t pattern(int from, int to, size_t msg, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + msg * 13 + i * 101 + (i >> 12));
}

void rankMain(int rank, int n) {
  gRank = rank;
  gN = n;
  if (rank == n - 1) {
    // Its log (the refused strangers) is checked by the parent.
    FILE* f = freopen(("/tmp/accl_transport_test_log." + std::to_string(getppid())).c_str(), "w",
                      stderr);
    (void)f;
    setvbuf(stderr, nullptr, _IONBF, 0);  // ranks leave with _exit
  }
  volatile int abortFlag = 0;
  acclBackendCommArgs_v1 args{};
  args.size = sizeof(args);
  args.rank = rank;
  args.nranks = n;
  args.timeout = 20;
  args.abortFlag = &abortFlag;
  args.allGather = fakeAllGather;
  std::vector<bool> remote(n, true);
  remote[rank] = false;
  TcpTransport t(&args, remote);

  const std::vector<size_t> sizes = {0,          1,           7,           4096,       65537,
                                     256 * 1024 - 1, 256 * 1024, 1000003, 8 * 1024 * 1024 + 5};
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<NetOp> ops;
  for (size_t m = 0; m < sizes.size(); ++m)
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      out.emplace_back(sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i) out.back()[i] = pattern(rank, q, m, i);
      in.emplace_back(sizes[m], 0xee);
    }
  ops.resize(out.size() * 2);
  size_t k = 0;
  for (size_t m = 0; m < sizes.size(); ++m)
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      t.start(ops[2 * k], true, q, out[k].data(), sizes[m]);
      t.start(ops[2 * k + 1], false, q, in[k].data(), sizes[m]);
      ++k;
    }
  run(t, ops, 20);
  k = 0;
  for (size_t m = 0; m < sizes.size(); ++m)
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      size_t bad = 0;
      for (size_t i = 0; i < sizes[m]; ++i) bad += in[k][i] != pattern(q, rank, m, i);
      EXPECT(bad == 0, "%zu of %zu bytes from rank %d differ", bad, sizes[m], q);
      ++k;
    }

  // A receive of the wrong size: rank 0 sends 100 bytes to rank 1, which expects 50.
  if (n >= 2 && rank <= 1) {
    std::vector<uint8_t> buf(100);
    std::vector<NetOp> one(1);
    t.start(one[0], rank == 0, 1 - rank, buf.data(), rank == 0 ? 100 : 50);
    try {
      run(t, one, 10);
      EXPECT(rank == 0, "a receive of 50 bytes took a message of 100");
    } catch (const Error& e) {
      EXPECT(rank == 1 && strstr(e.what(), "do not match") && strstr(e.what(), "rank 0"),
             "unexpected error: %s", e.what());
    }
  }
  // A peer that exits: the last rank leaves; rank 0 waits for a message from it.
  pthread_barrier_wait(&g->barrier);
  if (rank == n - 1 && n > 2) _exit(gFailures ? 1 : 0);
  if (rank == 0 && n > 2) {
    std::vector<uint8_t> buf(10);
    std::vector<NetOp> one(1);
    t.start(one[0], false, n - 1, buf.data(), 10);
    try {
      run(t, one, 10);
      EXPECT(false, "a receive from a rank that exited completed");
    } catch (const Error& e) {
      std::string want = "rank " + std::to_string(n - 1);
      EXPECT(e.code() == acclRemoteError && strstr(e.what(), want.c_str()) &&
                 strstr(e.what(), "closed"),
             "unexpected error %d: %s", e.code(), e.what());
    }
  }
}

// Three strangers at the last rank's listener while it waits for its peers.
int strangers(int n) {
  while (!__atomic_load_n(&g->tableReady, __ATOMIC_ACQUIRE)) usleep(1000);
  TcpEndpoint ep;
  memcpy(&ep, g->slots[n - 1], sizeof(ep));
  SockAddr addr = fromWire(ep.addr);
  int failures = 0;
  std::vector<Socket> socks;
  Deadline dl = Deadline::in(10);
  for (int kind = 0; kind < 3; ++kind) {
    Socket s = Socket::connect(addr, dl, nullptr);
    if (kind == 0) {
      char junk[sizeof(TcpHello)];
      memset(junk, 'x', sizeof(junk));
      s.sendAll(junk, sizeof(junk), dl, nullptr);
    } else if (kind == 1) {
      TcpHello h{kTcpHelloMagic, 0, 0, ep.nsocks, {}};  // right form, wrong token
      s.sendAll(&h, sizeof(h), dl, nullptr);
    }  // kind 2 says nothing
    socks.push_back(std::move(s));
  }
  // The two that spoke are dropped at once; then the ranks may connect.
  for (int kind = 0; kind < 2; ++kind) {
    char c;
    try {
      socks[kind].recvAll(&c, 1, Deadline::in(5), nullptr);
      fprintf(stderr, "[stranger] connection %d got data\n", kind), ++failures;
    } catch (const Error& e) {
      if (e.code() != acclRemoteError)
        fprintf(stderr, "[stranger] connection %d not closed: %s\n", kind, e.what()), ++failures;
    }
  }
  __atomic_store_n(&g->strangersDone, 1, __ATOMIC_RELEASE);
  // The silent one is dropped once the mesh is complete.
  char c;
  try {
    socks[2].recvAll(&c, 1, Deadline::in(10), nullptr);
    ++failures;
  } catch (const Error& e) {
    if (e.code() != acclRemoteError)
      fprintf(stderr, "[stranger] silent connection not closed: %s\n", e.what()), ++failures;
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3;
  if (n < 2 || n > kMaxRanks) {
    fprintf(stderr, "usage: %s <nranks 2..%d>\n", argv[0], kMaxRanks);
    return 2;
  }
  setenv("ACCL_SOCKET_IFNAME", "=lo", 0);
  alarm(120);  // a hang fails the test
  g = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&g->barrier, &attr, n);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(100);
      try {
        rankMain(r, n);
      } catch (const std::exception& e) {
        fprintf(stderr, "[rank %d] FAILED: %s\n", r, e.what());
        ++gFailures;
      }
      _exit(gFailures ? 1 : 0);
    }
    pids.push_back(pid);
  }
  int failures = strangers(n);
  for (pid_t pid : pids) {
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failures;
  }
  std::string logName = "/tmp/accl_transport_test_log." + std::to_string(getpid());
  std::ifstream f(logName);
  std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  unlink(logName.c_str());
  int refused = 0;
  for (size_t p = 0; (p = log.find("refused TCP connection", p)) != std::string::npos; ++p)
    ++refused;
  if (refused != 3 || log.find("wrong token") == std::string::npos ||
      log.find("not an accl peer") == std::string::npos) {
    fprintf(stderr, "expected 3 refused strangers in rank %d's log, got:\n%s", n - 1, log.c_str());
    ++failures;
  }
  fprintf(stderr, "=== transport %d ranks: %s\n", n, failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
