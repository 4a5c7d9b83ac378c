// A tiny self-contained test harness for the accl C++ tests.
//
//  - Cases are registered with TEST_CASE(name) and run as `accl_tests <case> [nranks] [proc|thread]`;
//    ctest registers every (case, nranks, mode) as its own test (tests/cpp/CMakeLists.txt).
//  - CHECK* macros report file:line and the failing values and let the case go on (so that all
//    ranks stay in step); REQUIRE* / ACCL_OK report and abandon the rank's body.
//  - runRanks() runs a body on N ranks, as forked processes (the parent calls acclGetUniqueId,
//    then fork()s; it waits with a deadline and kills late children) or as threads of this
//    process, each rank with its own communicator.
//  - Every message printed by a rank is prefixed with "[rank R]".
#ifndef ACCL_TESTS_HARNESS_H_
#define ACCL_TESTS_HARNESS_H_

#include <accl/accl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace at {

// ------------------------------------------------------------------ reporting

enum class Mode { Proc, Thread };

std::string resultName(acclResult_t r);  // "acclTimeout(8)"
std::string lastError();                 // acclGetLastError(NULL), never null
void reportFailure(const char* file, int line, const std::string& msg);
void note(const std::string& msg);       // informational line on stderr, with the rank prefix
int failureCount();                      // failures reported in this process
void setRankLabel(int rank);             // the calling thread's "[rank R]" prefix (-1: main)
int rankLabel();
double now();                            // steady clock, seconds
void sleepFor(double seconds);

struct FatalError {};  // thrown by REQUIRE*/ACCL_OK; caught by the rank runner

template <class T>
std::string show(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<std::decay_t<T>, int8_t> || std::is_same_v<std::decay_t<T>, uint8_t> ||
                std::is_same_v<std::decay_t<T>, char>)
    os << static_cast<int>(v);
  else if constexpr (std::is_same_v<std::decay_t<T>, long double>)
    os.precision(21), os << v;
  else if constexpr (std::is_floating_point_v<std::decay_t<T>>)
    os.precision(17), os << v;
  else if constexpr (std::is_pointer_v<std::decay_t<T>> &&
                     !std::is_same_v<std::decay_t<T>, const char*> &&
                     !std::is_same_v<std::decay_t<T>, char*>)
    os << static_cast<const void*>(v);
  else if constexpr (std::is_same_v<std::decay_t<T>, const char*> ||
                     std::is_same_v<std::decay_t<T>, char*>)
    os << '"' << (v ? v : "(null)") << '"';
  else if constexpr (std::is_same_v<std::decay_t<T>, std::string>)
    os << '"' << v << '"';
  else
    os << v;
  return os.str();
}
inline std::string show(acclResult_t r) { return resultName(r); }

// ------------------------------------------------------------------ ranks

// Out-of-band state shared by all ranks of one runRanks() call (an anonymous MAP_SHARED
// mapping, so it works across fork() and across threads): a barrier that does not use accl and
// some integer slots.
struct Shared {
  static constexpr int kSlots = 256;
  static constexpr int kMaxIds = 32;
  // The parent forks the ranks before it makes the ids (which starts the rendezvous thread), so
  // no child is forked while a parent thread holds a lock; the ids then arrive through here.
  std::atomic<int> idsReady;  // 0: not yet, 1: ready, -1: the parent failed to make them
  int numIds;
  acclUniqueId ids[kMaxIds];
  std::atomic<int64_t> barrierCount;
  std::atomic<int64_t> barrierGen;
  std::atomic<int64_t> slots[kSlots];
  int nranks;
};

struct Ctx {
  int rank = 0;
  int nranks = 1;
  Mode mode = Mode::Proc;
  acclComm_t comm = nullptr;         // set when RunOpts::initComm
  std::vector<acclUniqueId> ids;     // ids[0] is the main communicator's
  Shared* shared = nullptr;

  bool threads() const { return mode == Mode::Thread; }
  // A barrier among the ranks that does not use accl. Fails (fatally) after `timeout` s.
  void oobBarrier(double timeout = 60.0);
  std::atomic<int64_t>& slot(int i) { return shared->slots[i]; }
  // Waits until slot(i) >= value; fails fatally after `timeout` s.
  void waitSlot(int i, int64_t value, double timeout = 60.0);
};

struct RunOpts {
  bool initComm = true;       // acclCommInitRank(ids[0]) before the body
  bool destroyComm = true;    // acclCommDestroy(ctx.comm) after the body if it is non-NULL
  int extraIds = 0;           // more acclGetUniqueId() ids in ctx.ids[1..]
  int numIds = -1;            // if >= 0: exactly this many ids (overrides extraIds)
  double deadline = 120.0;    // seconds for the whole run; late ranks are killed / the test fails
  bool childNormalExit = false;  // processes: children leave by exit() instead of _exit()
  bool checkShm = true;       // processes: no new /dev/shm/*accl* entries afterwards
};

// Runs body on nranks ranks; returns true if no rank reported a failure.
bool runRanks(int nranks, Mode mode, const std::function<void(Ctx&)>& body,
              const RunOpts& opts = RunOpts());

std::vector<std::string> shmEntries();  // /dev/shm names containing "accl" (any case)

// ------------------------------------------------------------------ cases

struct CaseArgs {
  int nranks = 2;
  Mode mode = Mode::Proc;
};
// Returns 0 (pass), 1 (fail) or 77 (skipped). A case may also just report failures and return 0.
using CaseFn = int (*)(const CaseArgs&);
struct Registrar {
  Registrar(const char* name, CaseFn fn);
};

}  // namespace at

#define ACCL_TEST_CAT2(a, b) a##b
#define ACCL_TEST_CAT(a, b) ACCL_TEST_CAT2(a, b)

#define TEST_CASE(name)                                                      \
  static int ACCL_TEST_CAT(case_fn_, name)(const ::at::CaseArgs& args);      \
  static ::at::Registrar ACCL_TEST_CAT(case_reg_, name)(#name,              \
                                                       &ACCL_TEST_CAT(case_fn_, name)); \
  static int ACCL_TEST_CAT(case_fn_, name)([[maybe_unused]] const ::at::CaseArgs& args)

#define AT_FAIL(msg) ::at::reportFailure(__FILE__, __LINE__, (msg))

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) ::at::reportFailure(__FILE__, __LINE__, "CHECK(" #cond ") failed"); \
  } while (0)

#define CHECK_MSG(cond, msg)                                                                 \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::at::reportFailure(__FILE__, __LINE__, std::string("CHECK(" #cond ") failed: ") + (msg)); \
  } while (0)

#define REQUIRE(cond)                                                                \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      ::at::reportFailure(__FILE__, __LINE__, "REQUIRE(" #cond ") failed");          \
      throw ::at::FatalError{};                                                      \
    }                                                                                \
  } while (0)

#define REQUIRE_MSG(cond, msg)                                                                 \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      ::at::reportFailure(__FILE__, __LINE__, std::string("REQUIRE(" #cond ") failed: ") + (msg)); \
      throw ::at::FatalError{};                                                                \
    }                                                                                          \
  } while (0)

#define AT_CMP_(a, b, op, fatal, name)                                                       \
  do {                                                                                       \
    const auto& at_a_ = (a);                                                                 \
    const auto& at_b_ = (b);                                                                 \
    if (!(at_a_ op at_b_)) {                                                                 \
      ::at::reportFailure(__FILE__, __LINE__,                                                \
                          std::string(name "(" #a ", " #b ") failed: ") + ::at::show(at_a_) + \
                              " vs " + ::at::show(at_b_));                                   \
      if (fatal) throw ::at::FatalError{};                                                   \
    }                                                                                        \
  } while (0)

#define CHECK_EQ(a, b) AT_CMP_(a, b, ==, false, "CHECK_EQ")
#define CHECK_NE(a, b) AT_CMP_(a, b, !=, false, "CHECK_NE")
#define CHECK_LT(a, b) AT_CMP_(a, b, <, false, "CHECK_LT")
#define CHECK_LE(a, b) AT_CMP_(a, b, <=, false, "CHECK_LE")
#define CHECK_GE(a, b) AT_CMP_(a, b, >=, false, "CHECK_GE")
#define REQUIRE_EQ(a, b) AT_CMP_(a, b, ==, true, "REQUIRE_EQ")

// The accl call must return acclSuccess; otherwise report the result and acclGetLastError()
// and abandon the rank (a failed collective leaves the ranks out of step).
#define ACCL_OK(call)                                                                        \
  do {                                                                                       \
    acclResult_t at_r_ = (call);                                                             \
    if (at_r_ != acclSuccess) {                                                              \
      ::at::reportFailure(__FILE__, __LINE__, std::string(#call " returned ") +              \
                                                  ::at::resultName(at_r_) + ", last error: " + \
                                                  ::at::show(::at::lastError()));            \
      throw ::at::FatalError{};                                                              \
    }                                                                                        \
  } while (0)

// As ACCL_OK, but the case goes on.
#define CHECK_ACCL_OK(call)                                                                  \
  do {                                                                                       \
    acclResult_t at_r_ = (call);                                                             \
    if (at_r_ != acclSuccess)                                                                \
      ::at::reportFailure(__FILE__, __LINE__, std::string(#call " returned ") +              \
                                                  ::at::resultName(at_r_) + ", last error: " + \
                                                  ::at::show(::at::lastError()));            \
  } while (0)

#endif  // ACCL_TESTS_HARNESS_H_
