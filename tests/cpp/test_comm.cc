// Library and communicator calls: version, error strings, queries, configs, non-blocking init,
// acclCommSplit, several communicators at once, finalize, exits.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coll_util.h"
#include "dtypes.h"
#include "harness.h"

using namespace at;

namespace {

// Checks acclCommCount / acclCommUserRank of comm.
void checkShape(acclComm_t comm, int expectCount, int expectRank, const std::string& what) {
  int count = -7, rank = -7;
  ACCL_OK(acclCommCount(comm, &count));
  ACCL_OK(acclCommUserRank(comm, &rank));
  if (count != expectCount)
    AT_FAIL(what + ": acclCommCount gives " + std::to_string(count) + ", expected " + std::to_string(expectCount));
  if (rank != expectRank)
    AT_FAIL(what + ": acclCommUserRank gives " + std::to_string(rank) + ", expected " + std::to_string(expectRank));
}

// An all-gather of every member's parent rank must list `members` in order.
void checkMembers(acclComm_t comm, int parentRank, const std::vector<int>& members, const std::string& what) {
  int32_t mine = parentRank;
  std::vector<int32_t> all(members.size(), -1);
  ACCL_OK(acclAllGather(&mine, all.data(), 1, acclInt32, comm, nullptr));
  for (size_t k = 0; k < members.size(); ++k) {
    if (all[k] != members[k]) {
      std::string got, exp;
      for (size_t j = 0; j < members.size(); ++j)
        got += (j ? "," : "") + std::to_string(all[j]), exp += (j ? "," : "") + std::to_string(members[j]);
      AT_FAIL(what + ": the new communicator's ranks are parent ranks [" + got + "], expected [" + exp + "]");
      return;
    }
  }
}

Ctx subCtx(const Ctx& c, acclComm_t comm, int rank, int nranks) {
  Ctx s = c;
  s.comm = comm;
  s.rank = rank;
  s.nranks = nranks;
  return s;
}

// A few collectives on a (sub)communicator, each checked.
void exercise(Ctx& s, uint64_t salt) {
  runAllReduce(s, acclFloat32, acclSum, 1031, false);
  runAllGather(s, acclInt32, 257, true, salt);
  runReduceScatter(s, acclInt64, acclMax, 129, false);
  runBroadcast(s, acclUint8, 1001, s.nranks - 1, false, salt + 1);
  runReduce(s, acclFloat64, acclMin, 333, s.nranks / 2, true);
  runAlltoAll(s, acclUint32, 211, false, salt + 2);
  runScatter(s, acclInt8, 513, s.nranks - 1, true, salt + 3);
  // A ring of point-to-point messages: peers are ranks of this communicator.
  const int next = (s.rank + 1) % s.nranks, prev = (s.rank - 1 + s.nranks) % s.nranks;
  const size_t count = 70001;
  Buf out(count * 4), in(count * 4);
  fillPat(out.data(), out.bytes(), s.rank, salt + 4);
  ACCL_OK(acclGroupStart());
  ACCL_OK(acclSend(out.data(), count, acclFloat32, next, s.comm, nullptr));
  ACCL_OK(acclRecv(in.data(), count, acclFloat32, prev, s.comm, nullptr));
  ACCL_OK(acclGroupEnd());
  checkPat(in.data(), in.bytes(), prev, salt + 4, 0, 4,
           "ring send/recv on a communicator of " + std::to_string(s.nranks) + " ranks");
}

}  // namespace

// Version, error strings, last error on a fresh thread, count/rank/backend, finalize.
TEST_CASE(api_info) {
  int v = -1;
  CHECK_EQ(acclGetVersion(&v), acclSuccess);
  CHECK_EQ(v, ACCL_VERSION_CODE);
  {
    acclResult_t r = acclGetVersion(nullptr);
    CHECK_MSG(r == acclInvalidArgument || r == acclInvalidUsage,
              "acclGetVersion(NULL) returned " + resultName(r));
  }
  std::set<std::string> seen;
  for (int k = 0; k < acclNumResults; ++k) {
    const char* s = acclGetErrorString(static_cast<acclResult_t>(k));
    if (!s || !*s) {
      AT_FAIL("acclGetErrorString(" + std::to_string(k) + ") is empty or NULL");
      continue;
    }
    if (!seen.insert(s).second)
      AT_FAIL("acclGetErrorString(" + std::to_string(k) + ") repeats another code's string: " + show(s));
  }
  for (int k : {static_cast<int>(acclNumResults), 99, -1}) {
    const char* s = acclGetErrorString(static_cast<acclResult_t>(k));
    CHECK_MSG(s != nullptr && *s, "acclGetErrorString(" + std::to_string(k) + ") must name an unknown code");
  }
  {
    // acclGetBackendInfo: the built-in cpu backend, NULL outputs, unknown names and paths.
    int bv = -1;
    const char* vs = nullptr;
    const char* path = nullptr;
    acclResult_t r = acclGetBackendInfo("cpu", &bv, &vs, &path);
    CHECK_MSG(r == acclSuccess, "acclGetBackendInfo(\"cpu\") returned " + resultName(r) + ": " + lastError());
    if (r == acclSuccess) {
      CHECK_MSG(vs != nullptr && *vs, "acclGetBackendInfo(\"cpu\") gives no version string");
      CHECK_MSG(path != nullptr, "acclGetBackendInfo(\"cpu\") gives no library path");
      note("backend cpu: version " + std::to_string(bv) + " " + show(vs) + " from " + show(path));
    }
    CHECK_EQ(acclGetBackendInfo("cpu", nullptr, nullptr, nullptr), acclSuccess);
    for (const char* bad : {"nosuchbackend_xyz", "/nonexistent/dir/libaccl-backend-nosuch.so"}) {
      r = acclGetBackendInfo(bad, &bv, &vs, &path);
      std::string msg = lastError();
      CHECK_MSG(r != acclSuccess, std::string("acclGetBackendInfo(\"") + bad + "\") returned acclSuccess");
      CHECK_MSG(!msg.empty(), std::string("acclGetBackendInfo(\"") + bad + "\") left no message");
    }
    r = acclGetBackendInfo(nullptr, &bv, &vs, &path);
    CHECK_MSG(r == acclInvalidArgument || r == acclInvalidUsage,
              "acclGetBackendInfo(NULL) returned " + resultName(r));
  }
  std::thread([] {
    const char* e = acclGetLastError(nullptr);
    CHECK_MSG(e != nullptr && *e == '\0', "acclGetLastError on a new thread is " + show(e) + ", expected \"\"");
  }).join();

  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    checkShape(c.comm, c.nranks, c.rank, "the communicator from acclCommInitRank");
    const char* name = nullptr;
    ACCL_OK(acclCommGetBackend(c.comm, &name));
    CHECK_MSG(name && std::string(name) == "cpu", "acclCommGetBackend gives " + show(name));
    acclResult_t st = acclInternalError;
    ACCL_OK(acclCommGetAsyncError(c.comm, &st));
    CHECK_EQ(st, acclSuccess);
    CHECK(acclGetLastError(c.comm) != nullptr);
    sanityAllReduce(c, "the queries");

    // A call of nothing completes on the handle alone (api.cc, commOp), but its arguments are
    // still checked, and the error names the rank as any other's does.
    acclResult_t r = acclBroadcast(nullptr, nullptr, 0, acclInt32, c.nranks, c.comm, nullptr);
    CHECK_MSG(r == acclInvalidArgument, "a broadcast of nothing from root nranks returned " +
                                            resultName(r));
    std::string want = "rank " + std::to_string(c.rank) + "/" + std::to_string(c.nranks) +
                       ": root " + std::to_string(c.nranks) + " is out of range";
    CHECK_MSG(lastError().find(want) != std::string::npos,
              "a broadcast of nothing from root nranks says " + show(lastError()));

    // After acclCommFinalize only acclCommDestroy is valid: a call of nothing fails too.
    ACCL_OK(acclCommFinalize(c.comm));
    int32_t x = 1, y = 0;
    for (size_t count : {1, 0}) {
      r = acclAllReduce(&x, &y, count, acclInt32, acclSum, c.comm, nullptr);
      CHECK_MSG(r == acclInvalidUsage, "acclAllReduce of count " + std::to_string(count) +
                                           " after acclCommFinalize returned " + resultName(r));
      CHECK_MSG(lastError().find("finalized") != std::string::npos,
                "the call after finalize says " + show(lastError()));
    }
  });
  return ok ? 0 : 1;
}

// acclCommInitRankConfig: ACCL_CONFIG_INITIALIZER with a timeout and backend "cpu", a NULL config,
// a non-blocking init, and an unknown backend.
TEST_CASE(config) {
  RunOpts o;
  o.initComm = false;
  o.numIds = 4;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, r = c.rank;
    {
      acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
      CHECK_EQ(cfg.size, sizeof(acclConfig_t));
      CHECK_EQ(cfg.magic, ACCL_CONFIG_MAGIC);
      CHECK_EQ(cfg.blocking, 1);
      cfg.timeout = 25.0;
      cfg.backend = "cpu";
      acclComm_t comm = nullptr;
      ACCL_OK(acclCommInitRankConfig(&comm, n, c.ids[0], r, &cfg));
      REQUIRE(comm != nullptr);
      c.comm = comm;
      checkShape(comm, n, r, "config with timeout 25 and backend cpu");
      const char* name = nullptr;
      ACCL_OK(acclCommGetBackend(comm, &name));
      CHECK_MSG(name && std::string(name) == "cpu", "acclCommGetBackend gives " + show(name));
      sanityAllReduce(c, "init with a config");
      c.comm = nullptr;
      ACCL_OK(acclCommDestroy(comm));
    }
    {
      acclComm_t comm = nullptr;
      ACCL_OK(acclCommInitRankConfig(&comm, n, c.ids[1], r, nullptr));
      REQUIRE(comm != nullptr);
      c.comm = comm;
      checkShape(comm, n, r, "NULL config");
      sanityAllReduce(c, "init with a NULL config");
      c.comm = nullptr;
      ACCL_OK(acclCommDestroy(comm));
    }
    {
      // Non-blocking: rank 0 initialises first, alone; the others start only once its call
      // has returned, so a call that waits for them cannot be non-blocking.
      acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      acclComm_t comm = nullptr;
      if (r != 0) {
        double t0 = now();
        while (c.slot(10).load() == 0 && now() - t0 < 10.0) usleep(500);
        if (c.slot(10).load() == 0)
          AT_FAIL("rank 0's non-blocking acclCommInitRankConfig did not return within 10 s while "
                  "the other ranks had not joined (it blocks)");
      }
      double t0 = now();
      acclResult_t res = acclCommInitRankConfig(&comm, n, c.ids[2], r, &cfg);
      double el = now() - t0;
      if (r == 0) c.slot(10).store(1);
      CHECK_MSG(res == acclInProgress || res == acclSuccess,
                "non-blocking init returned " + resultName(res) + ": " + lastError());
      if (res != acclInProgress && res != acclSuccess) throw FatalError{};
      REQUIRE(comm != nullptr);
      if (r == 0 && n > 1) {
        CHECK_MSG(res == acclInProgress, "non-blocking init returned acclSuccess before the other ranks joined");
        CHECK_MSG(el < 2.0, "non-blocking init took " + std::to_string(el) + " s");
      }
      acclResult_t st = acclInProgress;
      double deadline = now() + 30.0;
      while (true) {
        ACCL_OK(acclCommGetAsyncError(comm, &st));
        if (st != acclInProgress || now() > deadline) break;
        usleep(1000);
      }
      CHECK_MSG(st == acclSuccess, "acclCommGetAsyncError after a non-blocking init gives " + resultName(st) +
                                       " (after " + std::to_string(now() - t0) + " s)");
      c.comm = comm;
      if (st == acclSuccess) {
        checkShape(comm, n, r, "non-blocking init");
        sanityAllReduce(c, "a non-blocking init");
      }
      c.comm = nullptr;
      ACCL_OK(acclCommDestroy(comm));
    }
    {
      acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
      cfg.backend = "nosuchbackend_xyz";
      cfg.timeout = 5.0;
      acclComm_t comm = nullptr;
      double t0 = now();
      acclResult_t res = acclCommInitRankConfig(&comm, n, c.ids[3], r, &cfg);
      double el = now() - t0;
      std::string msg = lastError();
      CHECK_MSG(res != acclSuccess && res != acclInProgress,
                "init with backend \"nosuchbackend_xyz\" returned " + resultName(res));
      CHECK_MSG(msg.find("nosuchbackend_xyz") != std::string::npos,
                "the error for an unknown backend does not name it: " + show(msg));
      CHECK_MSG(el < 10.0, "init with an unknown backend took " + std::to_string(el) + " s");
      if (res == acclSuccess && comm) acclCommDestroy(comm);
    }
  }, o);
  return ok ? 0 : 1;
}

// acclCommSplit: even/odd colors with keys reversing the order, ACCL_SPLIT_NOCOLOR, a config,
// a nested split, and collectives on all of them interleaved with the parent.
TEST_CASE(split) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, r = c.rank;

    // A: color = parity, key = -rank: members ordered by decreasing parent rank.
    acclComm_t a = nullptr;
    ACCL_OK(acclCommSplit(c.comm, r % 2, -r, &a, nullptr));
    REQUIRE(a != nullptr);
    std::vector<int> membersA;
    for (int k = n - 1; k >= 0; --k)
      if (k % 2 == r % 2) membersA.push_back(k);
    int rankA = static_cast<int>(std::find(membersA.begin(), membersA.end(), r) - membersA.begin());
    checkShape(a, static_cast<int>(membersA.size()), rankA, "split by parity with key -rank");
    checkMembers(a, r, membersA, "split by parity with key -rank");
    Ctx ca = subCtx(c, a, rankA, static_cast<int>(membersA.size()));

    // B: rank 0 opts out with ACCL_SPLIT_NOCOLOR; equal keys keep the parent order.
    int dummy = 0;
    acclComm_t b = reinterpret_cast<acclComm_t>(&dummy);
    ACCL_OK(acclCommSplit(c.comm, r == 0 ? ACCL_SPLIT_NOCOLOR : 7, 0, &b, nullptr));
    std::vector<int> membersB;
    for (int k = 1; k < n; ++k) membersB.push_back(k);
    if (r == 0) {
      CHECK_MSG(b == nullptr, "ACCL_SPLIT_NOCOLOR must give *newcomm = NULL");
      b = nullptr;
    } else {
      REQUIRE(b != nullptr);
      checkShape(b, n - 1, r - 1, "split with rank 0 as NOCOLOR");
      checkMembers(b, r, membersB, "split with rank 0 as NOCOLOR");
    }

    // C: one color, key = rank % 3 (ties by parent rank), with a config.
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = 20.0;
    acclComm_t cc = nullptr;
    ACCL_OK(acclCommSplit(c.comm, 0, r % 3, &cc, &cfg));
    REQUIRE(cc != nullptr);
    std::vector<int> membersC;
    for (int key = 0; key < 3; ++key)
      for (int k = 0; k < n; ++k)
        if (k % 3 == key) membersC.push_back(k);
    int rankC = static_cast<int>(std::find(membersC.begin(), membersC.end(), r) - membersC.begin());
    checkShape(cc, n, rankC, "split with key rank%3");
    checkMembers(cc, r, membersC, "split with key rank%3");
    Ctx csc = subCtx(c, cc, rankC, n);

    // Collectives interleaved over the parent and the children.
    exercise(ca, 1);
    sanityAllReduce(c, "collectives on the split communicators");
    if (b) {
      Ctx cb = subCtx(c, b, r - 1, n - 1);
      exercise(cb, 2);
    }
    exercise(csc, 3);
    exercise(ca, 4);

    // D: split a split communicator again (halves of C by its rank parity, NOCOLOR for none).
    acclComm_t d = nullptr;
    ACCL_OK(acclCommSplit(cc, rankC % 2, rankC, &d, nullptr));
    REQUIRE(d != nullptr);
    std::vector<int> membersD;
    for (size_t k = 0; k < membersC.size(); ++k)
      if (static_cast<int>(k) % 2 == rankC % 2) membersD.push_back(membersC[k]);
    int rankD = static_cast<int>(std::find(membersD.begin(), membersD.end(), r) - membersD.begin());
    checkShape(d, static_cast<int>(membersD.size()), rankD, "nested split");
    checkMembers(d, r, membersD, "nested split");
    Ctx cd = subCtx(c, d, rankD, static_cast<int>(membersD.size()));
    exercise(cd, 5);

    // E: every rank opts out.
    acclComm_t e = reinterpret_cast<acclComm_t>(&dummy);
    ACCL_OK(acclCommSplit(c.comm, ACCL_SPLIT_NOCOLOR, r, &e, nullptr));
    CHECK_MSG(e == nullptr, "a split where every rank passes ACCL_SPLIT_NOCOLOR must give NULL");

    ACCL_OK(acclCommDestroy(d));
    ACCL_OK(acclCommDestroy(a));
    if (b) ACCL_OK(acclCommDestroy(b));
    sanityAllReduce(c, "destroying split communicators");
    ACCL_OK(acclCommDestroy(cc));
  });
  return ok ? 0 : 1;
}

// Several communicators at once: two over the same ranks, interleaved; then two disjoint ones
// running at the same time.
TEST_CASE(multi_comm) {
  RunOpts o;
  o.numIds = 4;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, r = c.rank;
    acclComm_t second = nullptr;
    ACCL_OK(acclCommInitRank(&second, n, c.ids[1], r));
    Ctx c2 = subCtx(c, second, r, n);
    for (int it = 0; it < 3; ++it) {
      runAllReduce(c, acclInt32, acclSum, 1031 + it, it % 2);
      runAllReduce(c2, acclFloat32, acclMax, 2049 + it, false);
      runAllGather(c2, acclInt8, 333, false, 40 + it);
      runAllGather(c, acclInt8, 333, true, 50 + it);
    }
    {
      // One group with collectives on both communicators and point to point on the second.
      std::string what = "a group spanning two communicators";
      const size_t n1 = 1031, n2 = 777, n3 = 100003;
      Buf s1(n1 * 4), d1(n1 * 4), s2(n2 * 4), d2(n2 * 4), s3(n3), d3(n3);
      fillRed(s1.data(), acclInt32, acclSum, n, r, n1);
      fillRed(s2.data(), acclFloat32, acclMax, n, r, n2);
      fillPat(s3.data(), n3, r, 77);
      ACCL_OK(acclGroupStart());
      ACCL_OK(acclAllReduce(s1.data(), d1.data(), n1, acclInt32, acclSum, c.comm, nullptr));
      ACCL_OK(acclAllReduce(s2.data(), d2.data(), n2, acclFloat32, acclMax, second, nullptr));
      ACCL_OK(acclSend(s3.data(), n3, acclUint8, (r + 1) % n, second, nullptr));
      ACCL_OK(acclRecv(d3.data(), n3, acclUint8, (r - 1 + n) % n, second, nullptr));
      ACCL_OK(acclGroupEnd());
      checkRed(d1.data(), acclInt32, acclSum, n, n1, 0, what + ": all-reduce on the first");
      checkRed(d2.data(), acclFloat32, acclMax, n, n2, 0, what + ": all-reduce on the second");
      checkPat(d3.data(), n3, (r - 1 + n) % n, 77, 0, 1, what + ": recv on the second");
    }
    ACCL_OK(acclCommDestroy(second));
    sanityAllReduce(c, "destroying a second communicator over the same ranks");

    if (n >= 2) {
      int half = n / 2;
      bool low = r < half;
      int sr = low ? r : r - half, sn = low ? half : n - half;
      acclComm_t sub = nullptr;
      ACCL_OK(acclCommInitRank(&sub, sn, c.ids[low ? 2 : 3], sr));
      Ctx cs = subCtx(c, sub, sr, sn);
      for (int it = 0; it < 20; ++it) runAllReduce(cs, low ? acclInt64 : acclFloat64, acclSum, 4097, it % 2);
      runAlltoAll(cs, acclInt32, 1000, false, 60);
      ACCL_OK(acclCommDestroy(sub));
    }
    sanityAllReduce(c, "the disjoint communicators");
  }, o);
  return ok ? 0 : 1;
}

// Children that leave by exit() (static destructors run in a forked child of the process that
// hosts the rendezvous service) must exit cleanly.
TEST_CASE(child_exit) {
  RunOpts o;
  o.childNormalExit = true;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) { sanityAllReduce(c, "init"); }, o);
  return ok ? 0 : 1;
}

// acclCommGetTrace from another thread while the rank's thread makes calls on the communicator
// (a ring of one entry, rewritten at every call): every entry of every dump is one operation's,
// never a mix of two. Call k has count k % 7 + 1 (k: its sequence number), so an entry whose
// count belongs to another number was read while it was rewritten. One rank, whose two threads
// run on separate cores: a copy that ignores the entry's version failed 4 runs of 4.
TEST_CASE(trace_concurrent_dump) {
  setenv("ACCL_TRACE_BUFFER", "1", 1);
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    std::vector<float> buf(8, 1.0f);
    const std::string key = "{\"seq\": ";
    auto lastSeq = [&](const std::string& json) {
      size_t at = json.rfind(key);
      return at == std::string::npos ? 0ull : std::stoull(json.substr(at + key.size()));
    };
    std::string first(1 << 16, '\0');
    size_t size = first.size();
    ACCL_OK(acclAllReduce(buf.data(), buf.data(), 1, acclFloat32, acclSum, c.comm, nullptr));
    ACCL_OK(acclCommGetTrace(c.comm, first.data(), &size));
    const unsigned long long seq0 = lastSeq(first.c_str());
    REQUIRE(seq0 > 0);
    std::atomic<bool> stop{false};
    std::atomic<long> dumps{0}, torn{0}, entries{0};
    std::string example;
    std::thread dumper([&] {
      std::string out(1 << 16, '\0');
      while (!stop.load()) {
        size_t n = out.size();
        if (acclCommGetTrace(c.comm, out.data(), &n) != acclSuccess) continue;
        ++dumps;
        const std::string json = out.c_str();  // this dump alone, not an older one's tail
        for (size_t at = 0; (at = json.find(key, at)) != std::string::npos; ++at) {
          unsigned long long seq = 0, count = 0;
          if (sscanf(json.c_str() + at, "{\"seq\": %llu, \"op\": \"%*[^\"]\", \"dtype\": "
                     "\"%*[^\"]\", \"count\": %llu", &seq, &count) != 2 || seq <= seq0)
            continue;
          ++entries;
          if (count != seq % 7 + 1 && torn++ == 0)
            example = json.substr(at, json.find('}', at) - at + 1);
        }
      }
    });
    // Calls until the dumper has read 20000 dumps (the rank is alone: no other rank counts them).
    const double t0 = now();
    for (unsigned long long seq = seq0 + 1; dumps.load() < 20000 && now() - t0 < 10.0; ++seq)
      ACCL_OK(acclAllReduce(buf.data(), buf.data(), seq % 7 + 1, acclFloat32, acclSum, c.comm,
                            nullptr));
    stop = true;
    dumper.join();
    note("rank " + std::to_string(c.rank) + ": " + std::to_string(dumps.load()) + " dumps, " +
         std::to_string(entries.load()) + " entries read");
    CHECK_MSG(dumps.load() > 0 && entries.load() > 0, "no dump read an entry of the calls");
    CHECK_MSG(torn.load() == 0, std::to_string(torn.load()) + " entries mix two operations, e.g. " +
                                    example);
  });
  return ok ? 0 : 1;
}

// Invalid arguments to init, NULL communicators, and use after acclCommDestroy / acclCommAbort.
TEST_CASE(init_errors) {
  setenv("ACCL_TIMEOUT", "5", 1);  // a bad init that is not rejected must not wait for 60 s
  auto expectRejected = [](acclResult_t r, const char* fn, const std::string& what) {
    std::string msg = lastError();
    if (r != acclInvalidArgument && r != acclInvalidUsage) {
      AT_FAIL(what + " returned " + resultName(r) +
              " (expected acclInvalidArgument or acclInvalidUsage); last error: " + show(msg));
    } else if (msg.empty()) {
      AT_FAIL(what + " returned " + resultName(r) + " with an empty acclGetLastError()");
    } else if (msg.find(fn) == std::string::npos) {
      AT_FAIL(what + ": the message does not name " + fn + ": " + show(msg));
    }
  };
  auto expectUsage = [](acclResult_t r, const char* fn, const std::string& what) {
    std::string msg = lastError();
    if (r != acclInvalidUsage)
      AT_FAIL(what + " returned " + resultName(r) + " (expected acclInvalidUsage); last error: " + show(msg));
    else if (msg.empty())
      AT_FAIL(what + " returned acclInvalidUsage with an empty acclGetLastError()");
    else if (msg.find(fn) == std::string::npos)
      AT_FAIL(what + ": the message does not name " + fn + ": " + show(msg));
  };
#define EXPECT_REJECTED(call, fn)                                                 \
  do {                                                                            \
    acclComm_t out_ = nullptr;                                                    \
    (void)out_;                                                                   \
    double t0_ = now();                                                           \
    acclResult_t r_ = (call);                                                     \
    expectRejected(r_, fn, #call);                                                \
    CHECK_MSG(now() - t0_ < 3.0, std::string(#call) + " took " + std::to_string(now() - t0_) + " s"); \
  } while (0)

  acclUniqueId id;
  ACCL_OK(acclGetUniqueId(&id));
  acclComm_t comm = nullptr;
  EXPECT_REJECTED(acclCommInitRank(&comm, 0, id, 0), "acclCommInitRank");
  EXPECT_REJECTED(acclCommInitRank(&comm, -1, id, 0), "acclCommInitRank");
  EXPECT_REJECTED(acclCommInitRank(&comm, 2, id, 2), "acclCommInitRank");
  EXPECT_REJECTED(acclCommInitRank(&comm, 2, id, -1), "acclCommInitRank");
  EXPECT_REJECTED(acclCommInitRank(nullptr, 1, id, 0), "acclCommInitRank");
  EXPECT_REJECTED(acclGetUniqueId(nullptr), "acclGetUniqueId");
  {
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.magic = 0x12345678u;
    acclComm_t c1 = nullptr;
    acclResult_t r = acclCommInitRankConfig(&c1, 1, id, 0, &cfg);
    expectRejected(r, "acclCommInitRank", "acclCommInitRankConfig with a wrong magic");
    if (r == acclSuccess && c1) acclCommDestroy(c1);
  }
  {
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.size = 8;
    acclComm_t c1 = nullptr;
    acclResult_t r = acclCommInitRankConfig(&c1, 1, id, 0, &cfg);
    expectRejected(r, "acclCommInitRank", "acclCommInitRankConfig with size 8");
    if (r == acclSuccess && c1) acclCommDestroy(c1);
  }
  {
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.size = 0;
    acclComm_t c1 = nullptr;
    acclResult_t r = acclCommInitRankConfig(&c1, 1, id, 0, &cfg);
    expectRejected(r, "acclCommInitRank", "acclCommInitRankConfig with size 0");
    if (r == acclSuccess && c1) acclCommDestroy(c1);
  }

  // The library still works: a one-rank communicator from a fresh id.
  acclUniqueId id2;
  ACCL_OK(acclGetUniqueId(&id2));
  ACCL_OK(acclCommInitRank(&comm, 1, id2, 0));
  REQUIRE(comm != nullptr);
  Ctx c;
  c.comm = comm;
  sanityAllReduce(c, "rejected inits");

  // NULL communicator.
  int32_t x = 1, y = 0;
  int iv = 0;
  const char* name = nullptr;
  acclResult_t st = acclSuccess;
  EXPECT_REJECTED(acclAllReduce(&x, &y, 1, acclInt32, acclSum, nullptr, nullptr), "acclAllReduce");
  EXPECT_REJECTED(acclBroadcast(&x, &y, 1, acclInt32, 0, nullptr, nullptr), "acclBroadcast");
  EXPECT_REJECTED(acclBarrier(nullptr, nullptr), "acclBarrier");
  EXPECT_REJECTED(acclSend(&x, 1, acclInt32, 0, nullptr, nullptr), "acclSend");
  EXPECT_REJECTED(acclRecv(&y, 1, acclInt32, 0, nullptr, nullptr), "acclRecv");
  EXPECT_REJECTED(acclCommCount(nullptr, &iv), "acclCommCount");
  EXPECT_REJECTED(acclCommUserRank(nullptr, &iv), "acclCommUserRank");
  EXPECT_REJECTED(acclCommGetBackend(nullptr, &name), "acclCommGetBackend");
  EXPECT_REJECTED(acclCommGetAsyncError(nullptr, &st), "acclCommGetAsyncError");
  EXPECT_REJECTED(acclCommSplit(nullptr, 0, 0, &out_, nullptr), "acclCommSplit");
  EXPECT_REJECTED(acclCommFinalize(nullptr), "acclCommFinalize");
  {
    // Like free(NULL) these may succeed; they must not crash.
    acclResult_t r1 = acclCommDestroy(nullptr);
    acclResult_t r2 = acclCommAbort(nullptr);
    note("acclCommDestroy(NULL) returns " + resultName(r1) + ", acclCommAbort(NULL) returns " + resultName(r2));
  }
  sanityAllReduce(c, "calls with a NULL communicator");

  // Use after destroy: the handle is a tombstone.
  acclComm_t dead = comm;
  ACCL_OK(acclCommDestroy(comm));
  comm = nullptr;
  auto useDead = [&](acclComm_t h, const std::string& how) {
    expectUsage(acclAllReduce(&x, &y, 1, acclInt32, acclSum, h, nullptr), "acclAllReduce", "acclAllReduce " + how);
    expectUsage(acclAllReduce(&x, &y, 0, acclInt32, acclSum, h, nullptr), "acclAllReduce",
                "acclAllReduce of nothing " + how);
    expectUsage(acclBroadcast(&x, &y, 1, acclInt32, 0, h, nullptr), "acclBroadcast", "acclBroadcast " + how);
    expectUsage(acclBarrier(h, nullptr), "acclBarrier", "acclBarrier " + how);
    expectUsage(acclSend(&x, 1, acclInt32, 0, h, nullptr), "acclSend", "acclSend " + how);
    expectUsage(acclCommCount(h, &iv), "acclCommCount", "acclCommCount " + how);
    expectUsage(acclCommUserRank(h, &iv), "acclCommUserRank", "acclCommUserRank " + how);
    expectUsage(acclCommGetBackend(h, &name), "acclCommGetBackend", "acclCommGetBackend " + how);
    expectUsage(acclCommGetAsyncError(h, &st), "acclCommGetAsyncError", "acclCommGetAsyncError " + how);
    acclComm_t nc = nullptr;
    expectUsage(acclCommSplit(h, 0, 0, &nc, nullptr), "acclCommSplit", "acclCommSplit " + how);
    expectUsage(acclCommFinalize(h), "acclCommFinalize", "acclCommFinalize " + how);
    expectUsage(acclCommDestroy(h), "acclCommDestroy", "acclCommDestroy " + how);
    expectUsage(acclCommAbort(h), "acclCommAbort", "acclCommAbort " + how);
  };
  useDead(dead, "after acclCommDestroy");

  // A new communicator must not make the old handle valid again.
  acclUniqueId id3;
  ACCL_OK(acclGetUniqueId(&id3));
  acclComm_t fresh = nullptr;
  ACCL_OK(acclCommInitRank(&fresh, 1, id3, 0));
  if (fresh == dead) note("the new communicator has the same handle as the destroyed one");
  expectUsage(acclAllReduce(&x, &y, 1, acclInt32, acclSum, dead, nullptr), "acclAllReduce",
              "acclAllReduce on a destroyed handle after a new communicator was created");
  c.comm = fresh;
  sanityAllReduce(c, "use of a destroyed handle");

  // Use after abort.
  ACCL_OK(acclCommAbort(fresh));
  useDead(fresh, "after acclCommAbort");
  return 0;
#undef EXPECT_REJECTED
}

namespace {

int countEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

int countLines(const char* path) {
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) ++n;
  return n;
}

struct Resources {
  int fds, threads, maps;
};

Resources resources() {
  return {countEntries("/proc/self/fd"), countEntries("/proc/self/task"), countLines("/proc/self/maps")};
}

constexpr int kChurnInits = 12;

}  // namespace

// Creating and destroying communicators (by split and by init) must not leak file descriptors,
// threads or memory mappings.
TEST_CASE(comm_churn) {
  RunOpts o;
  o.numIds = 2 + kChurnInits;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, r = c.rank;
    auto splitCycle = [&](int it) {
      acclComm_t s = nullptr;
      int color = it % 2 ? 0 : r % 2;
      ACCL_OK(acclCommSplit(c.comm, color, r, &s, nullptr));
      REQUIRE(s != nullptr);
      int sn = 0, sr = 0;
      ACCL_OK(acclCommCount(s, &sn));
      ACCL_OK(acclCommUserRank(s, &sr));
      Ctx sc = subCtx(c, s, sr, sn);
      sanityAllReduce(sc, "a split in a create/destroy loop");
      ACCL_OK(acclCommDestroy(s));
    };
    auto initCycle = [&](int idIndex) {
      acclComm_t s = nullptr;
      ACCL_OK(acclCommInitRank(&s, n, c.ids[idIndex], r));
      Ctx sc = subCtx(c, s, r, n);
      sanityAllReduce(sc, "an init in a create/destroy loop");
      ACCL_OK(acclCommDestroy(s));
    };
    // Warm up: first-use allocations are not leaks.
    splitCycle(0);
    splitCycle(1);
    initCycle(1);
    bool measure = c.mode == Mode::Proc || r == 0;  // threads share one process
    c.oobBarrier();
    sleepFor(0.1);
    Resources before = measure ? resources() : Resources{};
    c.oobBarrier();
    const int splits = 40;
    for (int it = 0; it < splits; ++it) splitCycle(it);
    for (int k = 0; k < kChurnInits; ++k) initCycle(2 + k);
    c.oobBarrier();
    sleepFor(0.2);
    if (measure) {
      Resources after = resources();
      std::string cycles = std::to_string(splits) + " split and " + std::to_string(kChurnInits) +
                           " init create/destroy cycles";
      if (after.fds > before.fds + 4)
        AT_FAIL("open file descriptors grew from " + std::to_string(before.fds) + " to " +
                std::to_string(after.fds) + " over " + cycles);
      if (after.threads > before.threads + 2)
        AT_FAIL("threads grew from " + std::to_string(before.threads) + " to " +
                std::to_string(after.threads) + " over " + cycles);
#if defined(__SANITIZE_ADDRESS__)
      // ASan's allocator maps its own regions as it goes: mappings say nothing there.
      const int mapSlack = 1 << 20;
#else
      const int mapSlack = 16;
#endif
      if (after.maps > before.maps + mapSlack)
        AT_FAIL("memory mappings grew from " + std::to_string(before.maps) + " to " +
                std::to_string(after.maps) + " over " + cycles);
    }
    c.oobBarrier();
    sanityAllReduce(c, "the create/destroy loop");
  }, o);
  return ok ? 0 : 1;
}

namespace {

int freeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = -1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

}  // namespace

// ACCL_COMM_ID mode: no service in the parent; every rank makes its own id from the
// environment and rank 0 hosts the rendezvous. Then a rank with another ACCL_COMM_SECRET is
// refused and the others fail by their timeout.
TEST_CASE(comm_id_env) {
  int port = freeTcpPort();
  REQUIRE(port > 0);
  std::string addr = "127.0.0.1:" + std::to_string(port);
  setenv("ACCL_COMM_ID", addr.c_str(), 1);
  setenv("ACCL_COMM_SECRET", "accl-test-secret-1", 1);
  RunOpts o;
  o.initComm = false;
  o.numIds = 0;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclUniqueId id;
    ACCL_OK(acclGetUniqueId(&id));
    acclComm_t comm = nullptr;
    ACCL_OK(acclCommInitRank(&comm, c.nranks, id, c.rank));
    c.comm = comm;
    checkShape(comm, c.nranks, c.rank, "ACCL_COMM_ID mode");
    runAllReduce(c, acclFloat32, acclSum, 1031, false);
    c.comm = nullptr;
    ACCL_OK(acclCommDestroy(comm));
  }, o);

  // Second job on another port; the last rank has a different secret.
  port = freeTcpPort();
  addr = "127.0.0.1:" + std::to_string(port);
  setenv("ACCL_COMM_ID", addr.c_str(), 1);
  ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    if (c.rank == c.nranks - 1) setenv("ACCL_COMM_SECRET", "accl-test-secret-2", 1);
    acclUniqueId id;
    ACCL_OK(acclGetUniqueId(&id));
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = 3.0;
    acclComm_t comm = nullptr;
    double t0 = now();
    acclResult_t r = acclCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg);
    double el = now() - t0;
    std::string msg = lastError();
    note("init with " + std::string(c.rank == c.nranks - 1 ? "a wrong" : "the right") +
         " ACCL_COMM_SECRET returned " + resultName(r) + " after " + std::to_string(el) + " s: " + show(msg));
    CHECK_MSG(r != acclSuccess && r != acclInProgress, "init returned " + resultName(r) + " though one rank's secret differs");
    CHECK_MSG(!msg.empty(), "no message");
    CHECK_MSG(el < 6.0, "init took " + std::to_string(el) + " s with a 3 s timeout");
    if (r == acclSuccess && comm) acclCommDestroy(comm);
  }, o) && ok;
  unsetenv("ACCL_COMM_ID");
  unsetenv("ACCL_COMM_SECRET");
  return ok ? 0 : 1;
}

// ACCL_BACKEND names the backend when the config names none; a config's backend overrides it.
TEST_CASE(backend_env) {
  setenv("ACCL_BACKEND", "nosuchbackend_env", 1);
  RunOpts o;
  o.initComm = false;
  o.numIds = 2;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
    cfg.timeout = 5.0;
    acclComm_t comm = nullptr;
    double t0 = now();
    acclResult_t r = acclCommInitRankConfig(&comm, c.nranks, c.ids[0], c.rank, &cfg);
    std::string msg = lastError();
    CHECK_MSG(r != acclSuccess && r != acclInProgress, "init with ACCL_BACKEND=nosuchbackend_env returned " + resultName(r));
    CHECK_MSG(msg.find("nosuchbackend_env") != std::string::npos,
              "the error for ACCL_BACKEND=nosuchbackend_env does not name it: " + show(msg));
    CHECK_MSG(now() - t0 < 10.0, "the failing init took " + std::to_string(now() - t0) + " s");
    if (r == acclSuccess && comm) acclCommDestroy(comm);
    cfg.backend = "cpu";
    comm = nullptr;
    ACCL_OK(acclCommInitRankConfig(&comm, c.nranks, c.ids[1], c.rank, &cfg));
    c.comm = comm;
    sanityAllReduce(c, "init with backend \"cpu\" in the config and ACCL_BACKEND set to another");
  }, o);
  unsetenv("ACCL_BACKEND");
  return ok ? 0 : 1;
}

// With ACCL_DEBUG=TRACE the library logs to stderr and never to stdout, in the process that
// hosts the rendezvous and in the ranks, through init, collectives, errors and destroy.
TEST_CASE(log_stdout) {
  setenv("ACCL_DEBUG", "TRACE", 1);
  std::fflush(stdout);
  char path[] = "/tmp/accl_test_stdout_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  unlink(path);
  int saved = dup(1);
  dup2(fd, 1);
  RunOpts o;
  o.initComm = false;
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    acclComm_t comm = nullptr;
    ACCL_OK(acclCommInitRank(&comm, c.nranks, c.ids[0], c.rank));
    c.comm = comm;
    runAllReduce(c, acclFloat32, acclSum, 300007, false);
    runAllGather(c, acclInt8, 1031, false, 1);
    int32_t x = 0;
    acclResult_t r = acclAllReduce(&x, &x, 1, static_cast<acclDataType_t>(99), acclSum, comm, nullptr);
    CHECK_NE(r, acclSuccess);
    acclComm_t sub = nullptr;
    ACCL_OK(acclCommSplit(comm, 0, c.rank, &sub, nullptr));
    ACCL_OK(acclCommDestroy(sub));
  }, o);
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  off_t size = lseek(fd, 0, SEEK_END);
  if (size > 0) {
    std::string head(static_cast<size_t>(std::min<off_t>(size, 400)), '\0');
    if (pread(fd, &head[0], head.size(), 0) < 0) head = "(unreadable)";
    AT_FAIL("the library wrote " + std::to_string(size) + " bytes to stdout with ACCL_DEBUG=TRACE, starting with: " + show(head));
  }
  close(fd);
  unsetenv("ACCL_DEBUG");
  return ok && size == 0 ? 0 : 1;
}
