// Bad arguments, timeouts, abort of a blocked call, and wrong unique ids.
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "coll_util.h"
#include "dtypes.h"
#include "harness.h"

using namespace at;

namespace {

// The call must be rejected with acclInvalidArgument or acclInvalidUsage and a message that
// names the function; the communicator must still work afterwards.
void expectRejected(Ctx& c, acclResult_t r, const char* fn, const std::string& what) {
  std::string msg = lastError();
  if (r != acclInvalidArgument && r != acclInvalidUsage) {
    AT_FAIL(what + " returned " + resultName(r) +
            " (expected acclInvalidArgument or acclInvalidUsage); last error: " + show(msg));
  } else if (msg.empty()) {
    AT_FAIL(what + " returned " + resultName(r) + " with an empty acclGetLastError()");
  } else if (msg.find(fn) == std::string::npos) {
    AT_FAIL(what + ": the message does not name " + fn + ": " + show(msg));
  }
  sanityAllReduce(c, what);
  acclResult_t st = acclInternalError;
  ACCL_OK(acclCommGetAsyncError(c.comm, &st));
  if (st != acclSuccess) {
    AT_FAIL("after " + what + ", acclCommGetAsyncError gives " + resultName(st));
    throw FatalError{};
  }
}

#define EXPECT_REJECTED(call, fn) expectRejected(c, (call), fn, #call)

// Does msg name rank `who` (e.g. "ranks 1", "rank(s) [1,3]", "ranks that did not arrive: 1")?
bool namesRank(const std::string& msg, int who) {
  std::regex re("rank[^0-9]{0,40}([0-9][0-9, ]*)", std::regex::icase);
  for (auto it = std::sregex_iterator(msg.begin(), msg.end(), re); it != std::sregex_iterator(); ++it) {
    std::string list = (*it)[1].str();
    std::regex num("[0-9]+");
    for (auto jt = std::sregex_iterator(list.begin(), list.end(), num); jt != std::sregex_iterator(); ++jt)
      if (std::stoi(jt->str()) == who) return true;
  }
  return false;
}

}  // namespace

TEST_CASE(bad_args) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, r = c.rank;
    const int next = (r + 1) % n;
    const size_t cnt = 16;  // int32
    Buf abuf(4096), bbuf(4096);
    int32_t* a = reinterpret_cast<int32_t*>(abuf.data());
    int32_t* b = reinterpret_cast<int32_t*>(bbuf.data());
    for (int i = 0; i < 1024; ++i) a[i] = i, b[i] = -i;
    acclComm_t comm = c.comm;
    void* stream = reinterpret_cast<void*>(0x1);

    // NULL buffers with count > 0.
    EXPECT_REJECTED(acclAllReduce(nullptr, b, cnt, acclInt32, acclSum, comm, nullptr), "acclAllReduce");
    EXPECT_REJECTED(acclAllReduce(a, nullptr, cnt, acclInt32, acclSum, comm, nullptr), "acclAllReduce");
    EXPECT_REJECTED(acclBroadcast(a, nullptr, cnt, acclInt32, 0, comm, nullptr), "acclBroadcast");
    EXPECT_REJECTED(acclReduce(nullptr, b, cnt, acclInt32, acclSum, 0, comm, nullptr), "acclReduce");
    EXPECT_REJECTED(acclAllGather(nullptr, b, cnt, acclInt32, comm, nullptr), "acclAllGather");
    EXPECT_REJECTED(acclAllGather(a, nullptr, cnt, acclInt32, comm, nullptr), "acclAllGather");
    EXPECT_REJECTED(acclReduceScatter(nullptr, b, cnt, acclInt32, acclSum, comm, nullptr), "acclReduceScatter");
    EXPECT_REJECTED(acclReduceScatter(a, nullptr, cnt, acclInt32, acclSum, comm, nullptr), "acclReduceScatter");
    EXPECT_REJECTED(acclAlltoAll(nullptr, b, cnt, acclInt32, comm, nullptr), "acclAlltoAll");
    EXPECT_REJECTED(acclAlltoAll(a, nullptr, cnt, acclInt32, comm, nullptr), "acclAlltoAll");
    EXPECT_REJECTED(acclGather(nullptr, b, cnt, acclInt32, 0, comm, nullptr), "acclGather");
    EXPECT_REJECTED(acclScatter(a, nullptr, cnt, acclInt32, 0, comm, nullptr), "acclScatter");
    EXPECT_REJECTED(acclSend(nullptr, cnt, acclInt32, next, comm, nullptr), "acclSend");
    EXPECT_REJECTED(acclRecv(nullptr, cnt, acclInt32, next, comm, nullptr), "acclRecv");

    // Data types and ops out of range.
    for (int bad : {99, static_cast<int>(acclNumTypes), -1}) {
      auto dt = static_cast<acclDataType_t>(bad);
      EXPECT_REJECTED(acclAllReduce(a, b, cnt, dt, acclSum, comm, nullptr), "acclAllReduce");
      EXPECT_REJECTED(acclBroadcast(a, b, cnt, dt, 0, comm, nullptr), "acclBroadcast");
      EXPECT_REJECTED(acclAllGather(a, b, 1, dt, comm, nullptr), "acclAllGather");
      EXPECT_REJECTED(acclAlltoAll(a, b, 1, dt, comm, nullptr), "acclAlltoAll");
      EXPECT_REJECTED(acclSend(a, cnt, dt, next, comm, nullptr), "acclSend");
    }
    for (int bad : {99, static_cast<int>(acclNumOps), -1}) {
      auto op = static_cast<acclRedOp_t>(bad);
      EXPECT_REJECTED(acclAllReduce(a, b, cnt, acclInt32, op, comm, nullptr), "acclAllReduce");
      EXPECT_REJECTED(acclReduce(a, b, cnt, acclInt32, op, 0, comm, nullptr), "acclReduce");
      EXPECT_REJECTED(acclReduceScatter(a, b, 4, acclInt32, op, comm, nullptr), "acclReduceScatter");
    }

    // Roots and peers out of range.
    for (int bad : {-1, n, n + 5}) {
      EXPECT_REJECTED(acclBroadcast(a, b, cnt, acclInt32, bad, comm, nullptr), "acclBroadcast");
      EXPECT_REJECTED(acclReduce(a, b, cnt, acclInt32, acclSum, bad, comm, nullptr), "acclReduce");
      EXPECT_REJECTED(acclGather(a, b, 4, acclInt32, bad, comm, nullptr), "acclGather");
      EXPECT_REJECTED(acclScatter(a, b, 4, acclInt32, bad, comm, nullptr), "acclScatter");
      EXPECT_REJECTED(acclSend(a, cnt, acclInt32, bad, comm, nullptr), "acclSend");
      EXPECT_REJECTED(acclRecv(b, cnt, acclInt32, bad, comm, nullptr), "acclRecv");
    }

    // Partial overlaps that are not the in-place layouts of accl.h.
    EXPECT_REJECTED(acclAllReduce(a, a + 1, cnt, acclInt32, acclSum, comm, nullptr), "acclAllReduce");
    EXPECT_REJECTED(acclAllReduce(a + 3, a, cnt, acclInt32, acclSum, comm, nullptr), "acclAllReduce");
    EXPECT_REJECTED(acclAllGather(a + r * cnt + 1, a, cnt, acclInt32, comm, nullptr), "acclAllGather");
    EXPECT_REJECTED(acclReduceScatter(a, a + r * cnt + 1, cnt, acclInt32, acclSum, comm, nullptr), "acclReduceScatter");
    EXPECT_REJECTED(acclAlltoAll(a, a + 1, cnt, acclInt32, comm, nullptr), "acclAlltoAll");
    if (n >= 2) {
      // A whole block at another rank's offset is not this rank's in-place layout.
      int other = (r + 1) % n;
      EXPECT_REJECTED(acclAllGather(a + other * cnt, a, cnt, acclInt32, comm, nullptr), "acclAllGather");
      EXPECT_REJECTED(acclReduceScatter(a, a + other * cnt, cnt, acclInt32, acclSum, comm, nullptr), "acclReduceScatter");
    }
    if (n == 1) {
      // Rooted collectives use both buffers only at the root: with one rank it is the root.
      EXPECT_REJECTED(acclBroadcast(a, a + 1, cnt, acclInt32, 0, comm, nullptr), "acclBroadcast");
      EXPECT_REJECTED(acclReduce(a, a + 1, cnt, acclInt32, acclSum, 0, comm, nullptr), "acclReduce");
      EXPECT_REJECTED(acclGather(a + 1, a, cnt, acclInt32, 0, comm, nullptr), "acclGather");
      EXPECT_REJECTED(acclScatter(a, a + 1, cnt, acclInt32, 0, comm, nullptr), "acclScatter");
    }

    // A stream on the cpu backend.
    EXPECT_REJECTED(acclAllReduce(a, b, cnt, acclInt32, acclSum, comm, stream), "acclAllReduce");
    EXPECT_REJECTED(acclBroadcast(a, b, cnt, acclInt32, 0, comm, stream), "acclBroadcast");
    EXPECT_REJECTED(acclReduce(a, b, cnt, acclInt32, acclSum, 0, comm, stream), "acclReduce");
    EXPECT_REJECTED(acclAllGather(a, b, cnt, acclInt32, comm, stream), "acclAllGather");
    EXPECT_REJECTED(acclReduceScatter(a, b, 4, acclInt32, acclSum, comm, stream), "acclReduceScatter");
    EXPECT_REJECTED(acclAlltoAll(a, b, 4, acclInt32, comm, stream), "acclAlltoAll");
    EXPECT_REJECTED(acclGather(a, b, 4, acclInt32, 0, comm, stream), "acclGather");
    EXPECT_REJECTED(acclScatter(a, b, 4, acclInt32, 0, comm, stream), "acclScatter");
    EXPECT_REJECTED(acclBarrier(comm, stream), "acclBarrier");
    EXPECT_REJECTED(acclSend(a, cnt, acclInt32, next, comm, stream), "acclSend");
    EXPECT_REJECTED(acclRecv(b, cnt, acclInt32, next, comm, stream), "acclRecv");

    // Group misuse.
    EXPECT_REJECTED(acclGroupEnd(), "acclGroupEnd");
    {
      // An argument error inside a group is reported by the call; the group still ends.
      ACCL_OK(acclGroupStart());
      acclResult_t rs = acclSend(a, cnt, acclInt32, -1, comm, nullptr);
      std::string msg = lastError();
      acclResult_t re = acclGroupEnd();
      if (rs != acclInvalidArgument && rs != acclInvalidUsage)
        AT_FAIL("acclSend to peer -1 inside a group returned " + resultName(rs));
      else if (msg.find("acclSend") == std::string::npos)
        AT_FAIL("the message for acclSend to peer -1 in a group does not name acclSend: " + show(msg));
      if (re != acclSuccess) note("acclGroupEnd after a rejected call in the group returns " + resultName(re));
      sanityAllReduce(c, "a group with a rejected call");
    }

    // NULL communicator and NULL output pointers.
    EXPECT_REJECTED(acclAllReduce(a, b, cnt, acclInt32, acclSum, nullptr, nullptr), "acclAllReduce");
    EXPECT_REJECTED(acclBarrier(nullptr, nullptr), "acclBarrier");
    EXPECT_REJECTED(acclCommCount(comm, nullptr), "acclCommCount");
    EXPECT_REJECTED(acclCommUserRank(comm, nullptr), "acclCommUserRank");
    EXPECT_REJECTED(acclCommGetBackend(comm, nullptr), "acclCommGetBackend");
    EXPECT_REJECTED(acclCommGetAsyncError(comm, nullptr), "acclCommGetAsyncError");
    EXPECT_REJECTED(acclCommSplit(comm, 0, 0, nullptr, nullptr), "acclCommSplit");

    // The last error is per thread: each rank fails a different call, then all read theirs.
    {
      const char* fn = nullptr;
      acclResult_t res;
      switch (r % 3) {
        case 0: res = acclAllReduce(nullptr, b, cnt, acclInt32, acclSum, comm, nullptr); fn = "acclAllReduce"; break;
        case 1: res = acclBroadcast(a, b, cnt, acclInt32, -1, comm, nullptr); fn = "acclBroadcast"; break;
        default: res = acclAllGather(a, b, cnt, static_cast<acclDataType_t>(77), comm, nullptr); fn = "acclAllGather"; break;
      }
      CHECK_NE(res, acclSuccess);
      c.oobBarrier();
      std::string msg = lastError();
      if (msg.find(fn) == std::string::npos)
        AT_FAIL(std::string("after every rank failed a different call, this rank's acclGetLastError() "
                            "does not name its own call ") + fn + ": " + show(msg));
      c.oobBarrier();
    }
    CHECK(abuf.guardsOk("bad_args buffers"));
    CHECK(bbuf.guardsOk("bad_args buffers"));
    sanityAllReduce(c, "all the bad calls");
  });
  return ok ? 0 : 1;
}

namespace {

// 2 ranks, 2 s timeout: rank 1 skips an all-reduce that rank 0 calls.
int timeoutCase(const CaseArgs& args, bool useAbort) {
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [useAbort](Ctx& c) {
    acclComm_t comm = initWithTimeout(c, 0, 2.0);
    if (c.rank == 0) {
      std::vector<float> s(1024, 1.0f), d(1024, 0.0f);
      double t0 = now();
      acclResult_t res = acclAllReduce(s.data(), d.data(), s.size(), acclFloat32, acclSum, comm, nullptr);
      double el = now() - t0;
      std::string msg = lastError();
      c.slot(1).store(1);  // the other ranks may go
      note("the all-reduce that rank 1 skipped returned " + resultName(res) + " after " +
           std::to_string(el) + " s: " + show(msg));
      CHECK_EQ(res, acclTimeout);
      CHECK_MSG(el >= 1.5 && el <= 3.5, "it returned after " + std::to_string(el) + " s with a 2 s timeout");
      CHECK_MSG(msg.find("acclAllReduce") != std::string::npos, "the message does not name acclAllReduce: " + show(msg));
      bool others = true;
      for (int k = 1; k < c.nranks; ++k) others = others && namesRank(msg, k);
      CHECK_MSG(others, "the message does not name the ranks that did not arrive: " + show(msg));
      acclResult_t st = acclSuccess;
      ACCL_OK(acclCommGetAsyncError(comm, &st));
      CHECK_MSG(st == acclTimeout, "acclCommGetAsyncError after the timeout gives " + resultName(st));
      double t1 = now();
      acclResult_t fr = useAbort ? acclCommAbort(comm) : acclCommDestroy(comm);
      double fel = now() - t1;
      c.comm = nullptr;
      CHECK_MSG(fr == acclSuccess, std::string(useAbort ? "acclCommAbort" : "acclCommDestroy") +
                                       " after the timeout returned " + resultName(fr) + ": " + lastError());
      CHECK_MSG(fel < 1.0, std::string(useAbort ? "acclCommAbort" : "acclCommDestroy") + " took " +
                               std::to_string(fel) + " s");
    } else {
      c.waitSlot(1, 1, 30.0);
      double t1 = now();
      acclResult_t fr = useAbort ? acclCommAbort(comm) : acclCommDestroy(comm);
      double fel = now() - t1;
      c.comm = nullptr;
      CHECK_EQ(fr, acclSuccess);
      CHECK_MSG(fel < 1.0, "freeing the communicator took " + std::to_string(fel) + " s");
    }
  }, o);
  return ok ? 0 : 1;
}

}  // namespace

TEST_CASE(timeout) { return timeoutCase(args, true); }
TEST_CASE(timeout_destroy) { return timeoutCase(args, false); }

// acclCommSetTimeout: a communicator made with a 60 s timeout gets 1.5 s, which a split made
// afterwards inherits; then rank 1 skips an all-reduce and rank 0 must time out after 1.5 s,
// not 60. Bad values are rejected and leave the timeout as it was.
TEST_CASE(timeout_set) {
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = 60.0;
    acclComm_t comm = nullptr;
    ACCL_OK(acclCommInitRankConfig(&comm, c.nranks, c.ids[0], c.rank, &cfg));
    c.comm = comm;
    double t = 0;
    ACCL_OK(acclCommGetTimeout(comm, &t));
    CHECK_EQ(t, 60.0);
    for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
      acclResult_t r = acclCommSetTimeout(comm, bad);
      CHECK_MSG(r == acclInvalidArgument, "acclCommSetTimeout(" + std::to_string(bad) +
                                              ") returned " + resultName(r));
    }
    CHECK_EQ(acclCommSetTimeout(nullptr, 1.0), acclInvalidArgument);
    CHECK_EQ(acclCommGetTimeout(comm, nullptr), acclInvalidArgument);
    ACCL_OK(acclCommGetTimeout(comm, &t));
    CHECK_EQ(t, 60.0);
    ACCL_OK(acclCommSetTimeout(comm, 1.5));
    ACCL_OK(acclCommGetTimeout(comm, &t));
    CHECK_EQ(t, 1.5);
    sanityAllReduce(c, "after acclCommSetTimeout");
    acclComm_t child = nullptr;
    ACCL_OK(acclCommSplit(comm, 0, c.rank, &child, nullptr));
    ACCL_OK(acclCommGetTimeout(child, &t));
    CHECK_MSG(t == 1.5, "a split made after acclCommSetTimeout(1.5) has timeout " + std::to_string(t));
    ACCL_OK(acclCommDestroy(child));
    if (c.rank == 0) {
      std::vector<float> s(1024, 1.0f), d(1024, 0.0f);
      double t0 = now();
      acclResult_t res = acclAllReduce(s.data(), d.data(), s.size(), acclFloat32, acclSum, comm, nullptr);
      double el = now() - t0;
      std::string msg = lastError();
      c.slot(1).store(1);
      CHECK_EQ(res, acclTimeout);
      CHECK_MSG(el >= 1.2 && el <= 5.0, "it returned after " + std::to_string(el) +
                                            " s with the timeout set to 1.5 s (created with 60 s)");
      CHECK_MSG(namesRank(msg, 1), "the message does not name rank 1: " + show(msg));
    } else {
      c.waitSlot(1, 1, 30.0);
    }
    c.comm = nullptr;
    CHECK_ACCL_OK(acclCommAbort(comm));
  }, o);
  return ok ? 0 : 1;
}

// acclCommAbort from another thread wakes a collective that is blocked because rank 1 never
// joins it.
TEST_CASE(abort_blocked) {
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclComm_t comm = initWithTimeout(c, 0, 30.0);
    if (c.rank == 0) {
      std::vector<float> s(1 << 16, 1.0f), d(1 << 16, 0.0f);
      std::atomic<int> done{0};
      acclResult_t res = acclSuccess;
      std::string msg;
      double tEnd = 0;
      std::thread t([&] {
        setRankLabel(0);
        res = acclAllReduce(s.data(), d.data(), s.size(), acclFloat32, acclSum, comm, nullptr);
        msg = lastError();
        tEnd = now();
        done.store(1);
      });
      sleepFor(0.5);
      if (done.load())
        AT_FAIL("acclAllReduce returned " + resultName(res) + " before the abort although rank 1 never joined");
      double t0 = now();
      acclResult_t ar = acclCommAbort(comm);
      double abortTime = now() - t0;
      c.comm = nullptr;
      while (!done.load() && now() - t0 < 10.0) usleep(1000);
      if (!done.load()) {
        AT_FAIL("the blocked acclAllReduce did not return within 10 s of acclCommAbort");
        c.slot(1).store(1);
        t.join();  // the harness deadline ends this if it never returns
      } else {
        t.join();
        double woke = tEnd - t0;
        note("the blocked all-reduce returned " + resultName(res) + " " + std::to_string(woke) +
             " s after acclCommAbort: " + show(msg));
        CHECK_MSG(woke < 1.0, "the blocked call returned " + std::to_string(woke) + " s after acclCommAbort");
        CHECK_MSG(res == acclRemoteError, "the blocked call returned " + resultName(res) +
                                              ", accl.h says an aborted call returns acclRemoteError");
        CHECK_MSG(!msg.empty(), "no message for the aborted call");
      }
      CHECK_EQ(ar, acclSuccess);
      CHECK_MSG(abortTime < 1.0, "acclCommAbort took " + std::to_string(abortTime) + " s");
      c.slot(1).store(1);
    } else {
      c.waitSlot(1, 1, 60.0);
      acclComm_t cm = c.comm;
      c.comm = nullptr;
      double t1 = now();
      CHECK_ACCL_OK(acclCommDestroy(cm));
      CHECK_MSG(now() - t1 < 1.0, "acclCommDestroy took " + std::to_string(now() - t1) + " s");
    }
  }, o);
  return ok ? 0 : 1;
}

namespace {

// Inits with `id` (3 s timeout); must fail with a message, within 6 s.
void expectInitFails(Ctx& c, const acclUniqueId& id, const std::string& what) {
  acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
  cfg.timeout = 3.0;
  acclComm_t comm = nullptr;
  double t0 = now();
  acclResult_t r = acclCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg);
  double el = now() - t0;
  std::string msg = lastError();
  note(what + ": init returned " + resultName(r) + " after " + std::to_string(el) + " s: " + show(msg));
  CHECK_MSG(r != acclSuccess && r != acclInProgress, what + ": init returned " + resultName(r));
  CHECK_MSG(!msg.empty(), what + ": no message");
  CHECK_MSG(el < 6.0, what + ": init took " + std::to_string(el) + " s with a 3 s timeout");
  if (r == acclSuccess && comm) acclCommDestroy(comm);
}

// ids[0] with one byte of its secret changed. The id starts with a fixed header (magic,
// version, flags) and then the 16-byte random secret (csrc/bootstrap.cc, IdBody), so the first
// byte where two fresh ids (ids[0] and ids[1]) differ is a byte of the secret. (Taking the
// longest run of differing bytes, as this once did, sometimes found the secret's tail merged
// with the random communicator hash after it, and altered the hash: init then rightly passed.)
acclUniqueId alteredSecret(const Ctx& c) {
  const auto& A = c.ids[0];
  const auto& B = c.ids[1];
  int pos = 0;
  while (pos < ACCL_UNIQUE_ID_BYTES && A.internal[pos] == B.internal[pos]) ++pos;
  CHECK_MSG(pos < ACCL_UNIQUE_ID_BYTES, "two fresh unique ids are identical");
  acclUniqueId bad = A;
  if (pos < ACCL_UNIQUE_ID_BYTES) bad.internal[pos] = static_cast<char>(A.internal[pos] ^ 0x01);
  if (c.rank == 0) note("altering byte " + std::to_string(pos) + " of the unique id");
  return bad;
}

}  // namespace

TEST_CASE(bad_id_random) {
  RunOpts o;
  o.initComm = false;
  o.numIds = 0;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclUniqueId bad;
    std::mt19937 rng(4242);
    for (auto& ch : bad.internal) ch = static_cast<char>(rng());
    expectInitFails(c, bad, "random unique id");
  }, o);
  return ok ? 0 : 1;
}

TEST_CASE(bad_id_secret) {
  RunOpts o;
  o.initComm = false;
  o.numIds = 2;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    expectInitFails(c, alteredSecret(c), "unique id with an altered secret (all ranks)");
  }, o);
  return ok ? 0 : 1;
}

// Only the last rank has the altered secret: it must be refused, and the others (who wait for
// it) must fail by their timeout rather than hang.
TEST_CASE(bad_id_secret_one_rank) {
  RunOpts o;
  o.initComm = false;
  o.numIds = 2;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    if (c.rank == c.nranks - 1)
      expectInitFails(c, alteredSecret(c), "unique id with an altered secret (this rank only)");
    else
      expectInitFails(c, c.ids[0], "correct unique id, but another rank's secret is wrong");
  }, o);
  return ok ? 0 : 1;
}

// The timeout inside a group: rank 1 never posts the matching point-to-point operations, so
// rank 0's acclGroupEnd must return acclTimeout.
TEST_CASE(timeout_group) {
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclComm_t comm = initWithTimeout(c, 0, 2.0);
    if (c.rank == 0) {
      const size_t count = size_t(1) << 20;
      Buf s(count), d(count);
      double t0 = now();
      ACCL_OK(acclGroupStart());
      ACCL_OK(acclSend(s.data(), count, acclUint8, 1, comm, nullptr));
      ACCL_OK(acclRecv(d.data(), count, acclUint8, 1, comm, nullptr));
      acclResult_t res = acclGroupEnd();
      double el = now() - t0;
      std::string msg = lastError();
      c.slot(1).store(1);
      note("the group that rank 1 skipped returned " + resultName(res) + " after " +
           std::to_string(el) + " s: " + show(msg));
      CHECK_EQ(res, acclTimeout);
      CHECK_MSG(el >= 1.5 && el <= 3.5, "acclGroupEnd returned after " + std::to_string(el) + " s with a 2 s timeout");
      CHECK_MSG(!msg.empty(), "no message for the timed-out group");
      acclResult_t st = acclSuccess;
      ACCL_OK(acclCommGetAsyncError(comm, &st));
      CHECK_MSG(st == acclTimeout, "acclCommGetAsyncError after the timeout gives " + resultName(st));
      double t1 = now();
      CHECK_ACCL_OK(acclCommAbort(comm));
      c.comm = nullptr;
      CHECK_MSG(now() - t1 < 1.0, "acclCommAbort took " + std::to_string(now() - t1) + " s");
    } else {
      c.waitSlot(1, 1, 30.0);
      c.comm = nullptr;
      double t1 = now();
      CHECK_ACCL_OK(acclCommDestroy(comm));
      CHECK_MSG(now() - t1 < 1.0, "acclCommDestroy took " + std::to_string(now() - t1) + " s");
    }
  }, o);
  return ok ? 0 : 1;
}

// acclCommInitRank takes its timeout from ACCL_TIMEOUT: rank 1 skips an acclBarrier.
TEST_CASE(timeout_env) {
  setenv("ACCL_TIMEOUT", "2", 1);
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    sanityAllReduce(c, "init with ACCL_TIMEOUT=2");
    acclComm_t comm = c.comm;
    if (c.rank == 0) {
      double t0 = now();
      acclResult_t res = acclBarrier(comm, nullptr);
      double el = now() - t0;
      std::string msg = lastError();
      c.slot(1).store(1);
      note("the barrier that rank 1 skipped returned " + resultName(res) + " after " +
           std::to_string(el) + " s: " + show(msg));
      CHECK_EQ(res, acclTimeout);
      CHECK_MSG(el >= 1.5 && el <= 3.5, "acclBarrier returned after " + std::to_string(el) + " s with ACCL_TIMEOUT=2");
      CHECK_MSG(msg.find("acclBarrier") != std::string::npos, "the message does not name acclBarrier: " + show(msg));
      CHECK_MSG(namesRank(msg, 1), "the message does not name rank 1: " + show(msg));
      c.comm = nullptr;
      CHECK_ACCL_OK(acclCommAbort(comm));
    } else {
      c.waitSlot(1, 1, 30.0);
      c.comm = nullptr;
      CHECK_ACCL_OK(acclCommDestroy(comm));
    }
  });
  return ok ? 0 : 1;
}

// A rank process dies (without destroying its communicator) between two collectives: the
// others must get an error within the timeout, and nothing may stay in /dev/shm. With
// ACCL_TEST_DEATH_OP=barrier the next call is a barrier, which with more ranks than cores
// releases through rank 0: every survivor must still name the dead rank, not rank 0.
TEST_CASE(peer_death) {
  if (args.mode != Mode::Proc) {
    std::printf("SKIP: peer_death needs ranks as processes\n");
    return 77;
  }
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclComm_t comm = initWithTimeout(c, 0, 5.0);
    c.oobBarrier();
    if (c.rank == 1) {
      std::fflush(nullptr);
      _exit(0);  // dies with its communicator open
    }
    const char* op = std::getenv("ACCL_TEST_DEATH_OP");
    const bool barrier = op && std::string(op) == "barrier";
    std::vector<int32_t> s(4096, 1), d(4096, 0);
    double t0 = now();
    acclResult_t res =
        barrier ? acclBarrier(comm, nullptr)
                : acclAllReduce(s.data(), d.data(), s.size(), acclInt32, acclSum, comm, nullptr);
    double el = now() - t0;
    std::string msg = lastError();
    const std::string what = barrier ? "barrier" : "all-reduce";
    note("the " + what + " after rank 1 died returned " + resultName(res) + " after " +
         std::to_string(el) + " s: " + show(msg));
    CHECK_MSG(res == acclRemoteError || res == acclTimeout,
              "a " + what + " with a dead rank returned " + resultName(res));
    if (barrier)
      CHECK_MSG(msg.find("rank 1 ") != std::string::npos, "the error does not name rank 1");
    CHECK_MSG(el < 6.5, "it took " + std::to_string(el) + " s with a 5 s timeout");
    CHECK_MSG(!msg.empty(), "no message");
    acclResult_t st = acclSuccess;
    ACCL_OK(acclCommGetAsyncError(comm, &st));
    CHECK_MSG(st != acclSuccess && st != acclInProgress,
              "acclCommGetAsyncError after a dead peer gives " + resultName(st));
    c.comm = nullptr;
    double t1 = now();
    CHECK_ACCL_OK(acclCommDestroy(comm));
    CHECK_MSG(now() - t1 < 1.0, "acclCommDestroy took " + std::to_string(now() - t1) + " s");
  }, o);
  return ok ? 0 : 1;
}

// Timeouts of split communicators: a NULL config inherits the parent's (3 s), a config sets its
// own (1.5 s); the parent stays usable after a child communicator timed out.
TEST_CASE(timeout_split) {
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = 3.0;
    acclComm_t comm = nullptr;
    ACCL_OK(acclCommInitRankConfig(&comm, c.nranks, c.ids[0], c.rank, &cfg));
    c.comm = comm;
    struct Step {
      const char* what;
      double timeout;  // 0: inherit
      double lo, hi;
    };
    const Step steps[] = {{"a split with a NULL config (inherits 3 s)", 0, 2.5, 4.5},
                          {"a split with a 1.5 s config", 1.5, 1.0, 2.5}};
    int slot = 1;
    for (const Step& st : steps) {
      acclConfig_t scfg = ACCL_CONFIG_INITIALIZER;
      scfg.timeout = st.timeout;
      acclComm_t sub = nullptr;
      ACCL_OK(acclCommSplit(comm, 0, c.rank, &sub, st.timeout > 0 ? &scfg : nullptr));
      Ctx sc = c;
      sc.comm = sub;
      sanityAllReduce(sc, std::string(st.what));
      if (c.rank == 0) {
        int32_t x = 1, y = 0;
        double t0 = now();
        acclResult_t res = acclAllReduce(&x, &y, 1, acclInt32, acclSum, sub, nullptr);
        double el = now() - t0;
        std::string msg = lastError();
        c.slot(slot).store(1);
        note(std::string(st.what) + ": skipped all-reduce returned " + resultName(res) + " after " +
             std::to_string(el) + " s: " + show(msg));
        CHECK_EQ(res, acclTimeout);
        CHECK_MSG(el >= st.lo && el <= st.hi, std::string(st.what) + ": timed out after " + std::to_string(el) + " s");
        CHECK_ACCL_OK(acclCommAbort(sub));
      } else {
        c.waitSlot(slot, 1, 30.0);
        CHECK_ACCL_OK(acclCommDestroy(sub));
      }
      ++slot;
      acclResult_t pst = acclInternalError;
      ACCL_OK(acclCommGetAsyncError(comm, &pst));
      CHECK_MSG(pst == acclSuccess, "the parent's async error after a child timed out: " + resultName(pst));
      sanityAllReduce(c, std::string("a timeout on ") + st.what);
    }
  }, o);
  return ok ? 0 : 1;
}

// acclCommAbort on one rank makes its peers' blocked calls (a broadcast from it) fail promptly (docs/api.md: "peers
// blocked on this rank fail too"), not after their timeout.
TEST_CASE(abort_peer) {
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclComm_t comm = initWithTimeout(c, 0, 30.0);
    c.comm = nullptr;
    if (c.rank == c.nranks - 1) {
      sleepFor(0.5);
      c.slot(1).store(static_cast<int64_t>(now() * 1e6));
      CHECK_ACCL_OK(acclCommAbort(comm));
    } else {
      // A broadcast from the rank that aborts: the others wait for its data.
      std::vector<float> d(4096, 0.0f);
      acclResult_t res = acclBroadcast(d.data(), d.data(), d.size(), acclFloat32, c.nranks - 1, comm, nullptr);
      double t = now();
      std::string msg = lastError();
      c.waitSlot(1, 1, 5.0);
      double after = t - static_cast<double>(c.slot(1).load()) / 1e6;
      note("the broadcast from the aborting rank returned " + resultName(res) + " " +
           std::to_string(after) + " s after the abort: " + show(msg));
      CHECK_MSG(res == acclRemoteError, "it returned " + resultName(res));
      CHECK_MSG(after < 1.5, "it returned " + std::to_string(after) + " s after the peer's abort");
      CHECK_ACCL_OK(acclCommDestroy(comm));
    }
  }, o);
  return ok ? 0 : 1;
}
