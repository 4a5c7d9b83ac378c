#include "harness.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <thread>

namespace at {

namespace {

std::atomic<int> g_failures{0};
std::atomic<double> g_firstFailure{0.0};
thread_local int t_rank = -1;

std::string prefix() {
  if (t_rank < 0) return "[main] ";
  return "[rank " + std::to_string(t_rank) + "] ";
}

void writeLine(const std::string& line) {
  // One write() per line so lines of different ranks do not interleave.
  std::string s = line;
  if (s.empty() || s.back() != '\n') s.push_back('\n');
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = ::write(2, s.data() + off, s.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
}

const char* shortFile(const char* file) {
  const char* p = std::strstr(file, "tests/cpp/");
  return p ? p : file;
}

std::map<std::string, CaseFn>& registry() {
  static std::map<std::string, CaseFn> r;
  return r;
}

}  // namespace

std::string resultName(acclResult_t r) {
  static const char* names[] = {"acclSuccess",        "acclUnhandledDeviceError",
                                "acclSystemError",    "acclInternalError",
                                "acclInvalidArgument", "acclInvalidUsage",
                                "acclRemoteError",    "acclInProgress",
                                "acclTimeout",        "acclNotSupported"};
  int v = static_cast<int>(r);
  std::string n = (v >= 0 && v < 10) ? names[v] : "acclResult?";
  return n + "(" + std::to_string(v) + ")";
}

std::string lastError() {
  const char* e = acclGetLastError(nullptr);
  return e ? std::string(e) : std::string("(null)");
}

void reportFailure(const char* file, int line, const std::string& msg) {
  double expected = 0.0;
  g_firstFailure.compare_exchange_strong(expected, now());
  g_failures.fetch_add(1);
  writeLine(prefix() + shortFile(file) + ":" + std::to_string(line) + ": FAILED: " + msg);
}

void note(const std::string& msg) { writeLine(prefix() + msg); }

int failureCount() { return g_failures.load(); }
void setRankLabel(int rank) { t_rank = rank; }
int rankLabel() { return t_rank; }

double now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void sleepFor(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void Ctx::oobBarrier(double timeout) {
  int64_t gen = shared->barrierGen.load();
  if (shared->barrierCount.fetch_add(1) + 1 == nranks) {
    shared->barrierCount.store(0);
    shared->barrierGen.fetch_add(1);
    return;
  }
  double deadline = now() + timeout;
  while (shared->barrierGen.load() == gen) {
    if (now() > deadline) {
      reportFailure(__FILE__, __LINE__, "out-of-band barrier timed out (another rank is stuck)");
      throw FatalError{};
    }
    usleep(200);
  }
}

void Ctx::waitSlot(int i, int64_t value, double timeout) {
  double deadline = now() + timeout;
  while (slot(i).load() < value) {
    if (now() > deadline) {
      reportFailure(__FILE__, __LINE__,
                    "timed out waiting for out-of-band slot " + std::to_string(i) +
                        " to reach " + std::to_string(value));
      throw FatalError{};
    }
    usleep(200);
  }
}

std::vector<std::string> shmEntries() {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    std::string low = n;
    std::transform(low.begin(), low.end(), low.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (low.find("accl") != std::string::npos) out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

Shared* newShared(int nranks) {
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  if (mem == MAP_FAILED) {
    reportFailure(__FILE__, __LINE__, "mmap of the out-of-band area failed");
    return nullptr;
  }
  Shared* sh = new (mem) Shared;
  sh->barrierCount.store(0);
  sh->barrierGen.store(0);
  for (auto& s : sh->slots) s.store(0);
  sh->nranks = nranks;
  return sh;
}

bool makeIds(const RunOpts& o, std::vector<acclUniqueId>& ids) {
  int n = o.numIds >= 0 ? o.numIds : 1 + o.extraIds;
  ids.resize(static_cast<size_t>(n));
  for (auto& id : ids) {
    std::memset(&id, 0, sizeof(id));
    acclResult_t r = acclGetUniqueId(&id);
    if (r != acclSuccess) {
      reportFailure(__FILE__, __LINE__,
                    "acclGetUniqueId returned " + resultName(r) + ": " + lastError());
      return false;
    }
  }
  return true;
}

void runBody(Ctx& c, const std::function<void(Ctx&)>& body, const RunOpts& o) {
  try {
    if (o.initComm) {
      acclComm_t comm = nullptr;
      ACCL_OK(acclCommInitRank(&comm, c.nranks, c.ids[0], c.rank));
      REQUIRE(comm != nullptr);
      c.comm = comm;
    }
    body(c);
    if (o.destroyComm && c.comm) {
      acclComm_t cm = c.comm;
      c.comm = nullptr;
      ACCL_OK(acclCommDestroy(cm));
    }
  } catch (FatalError&) {
    note("abandoning this rank after the failure above");
    if (c.comm) {
      // Free what we can (shared memory) and wake our own blocked calls; peers blocked in a
      // collective with us will fail by their timeout or be killed by the harness.
      acclCommAbort(c.comm);
      c.comm = nullptr;
    }
  } catch (std::exception& e) {
    reportFailure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
  } catch (...) {
    reportFailure(__FILE__, __LINE__, "uncaught exception of unknown type");
  }
}

// ACCL_TEST_NODES=k: the ranks pretend to be on k hosts (blocks of consecutive ranks; "k:rr"
// deals them round-robin), so the multi-node paths run over loopback TCP.
void pretendNode(int r, int n) {
  if (const char* nodes = std::getenv("ACCL_TEST_NODES")) {
    int k = std::max(1, std::atoi(nodes));
    int node = std::strstr(nodes, ":rr") ? r % k : r * k / n;
    setenv("ACCL_HOSTID", ("testnode" + std::to_string(node)).c_str(), 1);
  }
}

constexpr double kGraceAfterFailure = 20.0;

bool runProcs(int n, const std::function<void(Ctx&)>& body, const RunOpts& o) {
  int failuresBefore = failureCount();
  std::vector<std::string> before = o.checkShm ? shmEntries() : std::vector<std::string>();
  Shared* sh = newShared(n);
  if (!sh) return false;
  sh->idsReady.store(0);
  std::fflush(nullptr);
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      reportFailure(__FILE__, __LINE__, std::string("fork failed: ") + std::strerror(errno));
      for (int k = 0; k < r; ++k) kill(pids[k], SIGKILL);
      for (int k = 0; k < r; ++k) waitpid(pids[k], nullptr, 0);
      return false;
    }
    if (pid == 0) {
      g_failures.store(0);
      g_firstFailure.store(0.0);
      setRankLabel(r);
      pretendNode(r, n);
      Ctx c;
      c.rank = r;
      c.nranks = n;
      c.mode = Mode::Proc;
      c.shared = sh;
      while (sh->idsReady.load() == 0) usleep(1000);  // bounded: the parent kills at deadline
      if (sh->idsReady.load() > 0) {
        c.ids.assign(sh->ids, sh->ids + sh->numIds);
        runBody(c, body, o);
      }
      int rc = failureCount() ? 1 : 0;
      std::fflush(nullptr);
      if (o.childNormalExit) std::exit(rc);
      _exit(rc);
    }
    pids[r] = pid;
  }
  std::vector<acclUniqueId> ids;
  bool made = makeIds(o, ids) && ids.size() <= Shared::kMaxIds;
  if (made) {
    sh->numIds = static_cast<int>(ids.size());
    std::copy(ids.begin(), ids.end(), sh->ids);
  }
  sh->idsReady.store(made ? 1 : -1);

  double deadline = now() + o.deadline;
  std::vector<bool> done(static_cast<size_t>(n), false);
  int remaining = n;
  bool anyFailed = false;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      pid_t p = waitpid(pids[r], &st, WNOHANG);
      if (p != pids[r]) continue;
      done[r] = true;
      --remaining;
      progressed = true;
      if (WIFEXITED(st)) {
        if (WEXITSTATUS(st) != 0) {
          reportFailure(__FILE__, __LINE__,
                        "rank " + std::to_string(r) + " (pid " + std::to_string(pids[r]) +
                            ") exited with status " + std::to_string(WEXITSTATUS(st)));
          anyFailed = true;
        }
      } else if (WIFSIGNALED(st)) {
        reportFailure(__FILE__, __LINE__,
                      "rank " + std::to_string(r) + " (pid " + std::to_string(pids[r]) +
                          ") was killed by signal " + std::to_string(WTERMSIG(st)) + " (" +
                          strsignal(WTERMSIG(st)) + ")");
        anyFailed = true;
      }
      if (anyFailed && deadline > now() + kGraceAfterFailure)
        deadline = now() + kGraceAfterFailure;
    }
    if (remaining == 0) break;
    if (now() > deadline) {
      std::string late;
      for (int r = 0; r < n; ++r)
        if (!done[r]) late += (late.empty() ? "" : ",") + std::to_string(r);
      reportFailure(__FILE__, __LINE__,
                    "ranks " + late +
                        (anyFailed ? " were still running " + std::to_string(int(kGraceAfterFailure)) +
                                         " s after another rank failed"
                                   : " did not finish within the deadline of " +
                                         std::to_string(int(o.deadline)) + " s") +
                        "; killing them");
      for (int r = 0; r < n; ++r)
        if (!done[r]) kill(pids[r], SIGKILL);
      for (int r = 0; r < n; ++r)
        if (!done[r]) waitpid(pids[r], nullptr, 0);
      break;
    }
    if (!progressed) usleep(2000);
  }
  munmap(sh, sizeof(Shared));

  if (o.checkShm) {
    std::vector<std::string> after = shmEntries();
    std::set<std::string> old(before.begin(), before.end());
    for (const auto& name : after) {
      if (old.count(name)) continue;
      reportFailure(__FILE__, __LINE__,
                    "/dev/shm/" + name + " remains after all ranks exited (leaked; removing it)");
      std::string path = "/dev/shm/" + name;
      unlink(path.c_str());
    }
  }
  return failureCount() == failuresBefore;
}

bool runThreads(int n, const std::function<void(Ctx&)>& body, const RunOpts& o) {
  int failuresBefore = failureCount();
  Shared* sh = newShared(n);
  if (!sh) return false;
  std::vector<acclUniqueId> ids;
  if (!makeIds(o, ids)) return false;

  std::atomic<int> finished{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      setRankLabel(r);
      pretendNode(r, n);
      Ctx c;
      c.rank = r;
      c.nranks = n;
      c.mode = Mode::Thread;
      c.ids = ids;
      c.shared = sh;
      runBody(c, body, o);
      finished.fetch_add(1);
    });
  }
  double deadline = now() + o.deadline;
  while (finished.load() < n) {
    double t = now();
    bool failedLongAgo = failureCount() > failuresBefore && g_firstFailure.load() > 0 &&
                         t > g_firstFailure.load() + kGraceAfterFailure;
    if (t > deadline || failedLongAgo) {
      reportFailure(__FILE__, __LINE__,
                    std::to_string(n - finished.load()) + " rank thread(s) still running " +
                        (failedLongAgo ? std::to_string(int(kGraceAfterFailure)) + " s after a failure"
                                       : "after the deadline of " + std::to_string(int(o.deadline)) +
                                             " s") +
                        "; exiting the process");
      std::fflush(nullptr);
      _exit(1);
    }
    usleep(2000);
  }
  for (auto& t : ts) t.join();
  munmap(sh, sizeof(Shared));
  return failureCount() == failuresBefore;
}

}  // namespace

bool runRanks(int nranks, Mode mode, const std::function<void(Ctx&)>& body, const RunOpts& opts) {
  if (nranks < 1) {
    reportFailure(__FILE__, __LINE__, "runRanks: bad rank count");
    return false;
  }
  return mode == Mode::Proc ? runProcs(nranks, body, opts) : runThreads(nranks, body, opts);
}

Registrar::Registrar(const char* name, CaseFn fn) { registry()[name] = fn; }

}  // namespace at

namespace {

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s <case> [nranks] [proc|thread]\n"
               "       %s --list\n"
               "       %s --check-registered <case>...   (every case is registered with ctest)\n"
               "cases:",
               argv0, argv0, argv0);
  for (const auto& kv : at::registry()) std::fprintf(stderr, " %s", kv.first.c_str());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A failing test should fail by the communicator's timeout rather than hang for 600 s; the
  // harness deadlines are longer than this.
  setenv("ACCL_TIMEOUT", "60", 0);
  // The tests make their own ids and use host memory: a job's rendezvous address or another
  // default backend in the environment would change what they test.
  for (const char* var : {"ACCL_COMM_ID", "ACCL_COMM_SECRET", "ACCL_BACKEND"}) {
    if (std::getenv(var)) {
      std::fprintf(stderr, "[main] note: ignoring %s=%s from the environment\n", var, std::getenv(var));
      unsetenv(var);
    }
  }
  if (argc < 2) return usage(argv[0]);
  std::string what = argv[1];
  if (what == "--list") {
    for (const auto& kv : at::registry()) std::printf("%s\n", kv.first.c_str());
    return 0;
  }
  if (what == "--check-registered") {
    std::set<std::string> given(argv + 2, argv + argc);
    int bad = 0;
    for (const auto& kv : at::registry())
      if (!given.count(kv.first)) {
        std::fprintf(stderr, "case %s is not registered with ctest (tests/cpp/CMakeLists.txt)\n",
                     kv.first.c_str());
        ++bad;
      }
    for (const auto& g : given)
      if (!at::registry().count(g)) {
        std::fprintf(stderr, "ctest names case %s, which does not exist\n", g.c_str());
        ++bad;
      }
    return bad ? 1 : 0;
  }
  auto it = at::registry().find(what);
  if (it == at::registry().end()) {
    std::fprintf(stderr, "unknown case '%s'\n", what.c_str());
    return usage(argv[0]);
  }
  at::CaseArgs args;
  if (argc > 2) args.nranks = std::atoi(argv[2]);
  if (argc > 3) {
    std::string m = argv[3];
    if (m == "proc") {
      args.mode = at::Mode::Proc;
    } else if (m == "thread") {
      args.mode = at::Mode::Thread;
    } else {
      std::fprintf(stderr, "mode must be proc or thread, not '%s'\n", m.c_str());
      return 2;
    }
  }
  if (args.nranks < 1) {
    std::fprintf(stderr, "bad rank count '%s'\n", argv[2]);
    return 2;
  }
  std::printf("=== %s: %d rank(s) as %s\n", what.c_str(), args.nranks,
              args.mode == at::Mode::Proc ? "processes" : "threads");
  std::fflush(stdout);
  double t0 = at::now();
  int rc = 1;
  try {
    rc = it->second(args);
  } catch (at::FatalError&) {
    rc = 1;
  } catch (std::exception& e) {
    at::reportFailure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
  }
  if (rc == 0 && at::failureCount() > 0) rc = 1;
  if (rc != 77 && rc != 0) rc = 1;
  std::printf("=== %s: %s (%.2f s, %d failure(s))\n", what.c_str(),
              rc == 0 ? "PASS" : rc == 77 ? "SKIP" : "FAIL", at::now() - t0, at::failureCount());
  std::fflush(stdout);
  return rc;
}
