#include "coll_util.h"

#include <cstdio>
#include <cstring>
#include <set>

namespace at {

void sanityAllReduce(Ctx& c, const std::string& after) {
  const size_t count = 7;
  int32_t send[count], recv[count];
  for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(c.rank * 100 + i), recv[i] = -1;
  acclResult_t r = acclAllReduce(send, recv, count, acclInt32, acclSum, c.comm, nullptr);
  if (r != acclSuccess) {
    reportFailure(__FILE__, __LINE__,
                  "the communicator no longer works after " + after + ": acclAllReduce returned " +
                      resultName(r) + ": " + show(lastError()));
    throw FatalError{};
  }
  int64_t n = c.nranks;
  for (size_t i = 0; i < count; ++i) {
    int64_t expect = 100 * n * (n - 1) / 2 + n * static_cast<int64_t>(i);
    if (recv[i] != expect) {
      reportFailure(__FILE__, __LINE__,
                    "after " + after + ": a correct all-reduce gave " + std::to_string(recv[i]) +
                        " at element " + std::to_string(i) + ", expected " + std::to_string(expect));
      break;
    }
  }
}

acclComm_t initWithTimeout(Ctx& c, int id, double seconds) {
  acclConfig_t cfg = ACCL_CONFIG_INITIALIZER;
  cfg.timeout = seconds;
  acclComm_t comm = nullptr;
  ACCL_OK(acclCommInitRankConfig(&comm, c.nranks, c.ids[id], c.rank, &cfg));
  c.comm = comm;
  char what[64];
  snprintf(what, sizeof what, "init with a %g s timeout", seconds);
  sanityAllReduce(c, what);
  return comm;
}

bool acceptResult(Ctx& c, acclResult_t r, acclDataType_t dt, const std::string& what) {
  if (r == acclSuccess) return true;
  std::string msg = lastError();
  if (isFp8(dt)) {
    static thread_local std::set<std::string> noted;
    if (msg.empty())
      reportFailure(__FILE__, __LINE__,
                    what + " returned " + resultName(r) + " with an empty acclGetLastError()");
    std::string key = std::string(typeName(dt)) + resultName(r);
    if (c.rank == 0 && !noted.count(key)) {
      noted.insert(key);
      note("note: " + what + " is not supported: " + resultName(r) + ": " + msg);
    }
    sanityAllReduce(c, "an unsupported fp8 call");
    return false;
  }
  reportFailure(__FILE__, __LINE__, what + " returned " + resultName(r) + ": " + show(msg));
  throw FatalError{};
}

std::string describe(const char* coll, const Ctx& c, acclDataType_t dt, size_t count, bool inPlace,
                     int op, int root) {
  std::string s = std::string(coll) + "(" + typeName(dt) + ", count " + std::to_string(count);
  if (op >= 0) s += std::string(", ") + opName(static_cast<acclRedOp_t>(op));
  if (root >= 0) s += ", root " + std::to_string(root);
  s += inPlace ? ", in place" : ", out of place";
  s += ", " + std::to_string(c.nranks) + " ranks)";
  return s;
}

void runAllReduce(Ctx& c, acclDataType_t dt, acclRedOp_t op, size_t count, bool inPlace) {
  std::string what = describe("acclAllReduce", c, dt, count, inPlace, op);
  size_t bytes = count * esize(dt);
  Buf send(bytes), recv(bytes);
  fillRed(send.data(), dt, op, c.nranks, c.rank, count);
  void* out = inPlace ? send.data() : recv.data();
  acclResult_t r = acclAllReduce(send.data(), out, count, dt, op, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  checkRed(out, dt, op, c.nranks, count, 0, what);
  if (!inPlace) {
    checkRedInput(send.data(), dt, op, c.nranks, c.rank, count, 0, what);
    recv.guardsOk(what);
  }
  send.guardsOk(what);
}

void runBroadcast(Ctx& c, acclDataType_t dt, size_t count, int root, bool inPlace, uint64_t salt) {
  std::string what = describe("acclBroadcast", c, dt, count, inPlace, -1, root);
  size_t es = esize(dt), bytes = count * es;
  Buf send(bytes), recv(bytes);
  // Non-roots fill sendbuff with other bytes: it must not be read.
  int srcRank = c.rank == root ? root : c.rank + 1000;
  fillPat(send.data(), bytes, srcRank, salt);
  void* in = send.data();
  void* out = recv.data();
  if (inPlace) {
    if (c.rank != root) in = recv.data();
    out = in;
  }
  acclResult_t r = acclBroadcast(in, out, count, dt, root, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  checkPat(out, bytes, root, salt, 0, es, what + " result");
  if (!inPlace) checkPat(send.data(), bytes, srcRank, salt, 0, es, what + " sendbuff");
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runReduce(Ctx& c, acclDataType_t dt, acclRedOp_t op, size_t count, int root, bool inPlace) {
  std::string what = describe("acclReduce", c, dt, count, inPlace, op, root);
  size_t bytes = count * esize(dt);
  Buf send(bytes), recv(bytes);
  fillRed(send.data(), dt, op, c.nranks, c.rank, count);
  void* out = inPlace ? send.data() : recv.data();
  acclResult_t r = acclReduce(send.data(), out, count, dt, op, root, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  if (c.rank == root) {
    checkRed(out, dt, op, c.nranks, count, 0, what);
    if (!inPlace) checkRedInput(send.data(), dt, op, c.nranks, c.rank, count, 0, what);
  } else {
    checkRedInput(send.data(), dt, op, c.nranks, c.rank, count, 0, what + " (non-root)");
    if (!inPlace) checkFill(recv.data(), bytes, kSentinel, what + " recvbuff of a non-root");
  }
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runAllGather(Ctx& c, acclDataType_t dt, size_t count, bool inPlace, uint64_t salt) {
  std::string what = describe("acclAllGather", c, dt, count, inPlace);
  size_t es = esize(dt), bytes = count * es;
  Buf send(bytes), recv(bytes * c.nranks);
  const void* in = send.data();
  if (inPlace) {
    in = recv.at(c.rank * bytes);
    fillPat(recv.at(c.rank * bytes), bytes, c.rank, salt);
  } else {
    fillPat(send.data(), bytes, c.rank, salt);
  }
  acclResult_t r = acclAllGather(in, recv.data(), count, dt, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  for (int k = 0; k < c.nranks; ++k)
    checkPat(recv.at(k * bytes), bytes, k, salt, 0, es, what + " block of rank " + std::to_string(k));
  if (!inPlace) checkPat(send.data(), bytes, c.rank, salt, 0, es, what + " sendbuff");
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runReduceScatter(Ctx& c, acclDataType_t dt, acclRedOp_t op, size_t count, bool inPlace) {
  std::string what = describe("acclReduceScatter", c, dt, count, inPlace, op);
  size_t bytes = count * esize(dt);
  size_t total = count * c.nranks;
  Buf send(bytes * c.nranks), recv(bytes);
  fillRed(send.data(), dt, op, c.nranks, c.rank, total);
  void* out = inPlace ? send.at(c.rank * bytes) : recv.data();
  acclResult_t r = acclReduceScatter(send.data(), out, count, dt, op, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  checkRed(out, dt, op, c.nranks, count, c.rank * count, what);
  if (!inPlace) checkRedInput(send.data(), dt, op, c.nranks, c.rank, total, 0, what);
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runAlltoAll(Ctx& c, acclDataType_t dt, size_t count, bool inPlace, uint64_t salt) {
  std::string what = describe("acclAlltoAll", c, dt, count, inPlace);
  size_t es = esize(dt), bytes = count * es;
  Buf send(bytes * c.nranks), recv(bytes * c.nranks);
  fillPat(send.data(), bytes * c.nranks, c.rank, salt);
  uint8_t* out = inPlace ? send.data() : recv.data();
  acclResult_t r = acclAlltoAll(send.data(), out, count, dt, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  // Block i of my result is block `rank` of rank i's sendbuff.
  for (int k = 0; k < c.nranks; ++k)
    checkPat(out + k * bytes, bytes, k, salt, c.rank * bytes, es,
             what + " block from rank " + std::to_string(k));
  if (!inPlace) checkPat(send.data(), bytes * c.nranks, c.rank, salt, 0, es, what + " sendbuff");
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runGather(Ctx& c, acclDataType_t dt, size_t count, int root, bool inPlace, uint64_t salt) {
  std::string what = describe("acclGather", c, dt, count, inPlace, -1, root);
  size_t es = esize(dt), bytes = count * es;
  Buf send(bytes), recv(bytes * c.nranks);
  const void* in = send.data();
  if (inPlace && c.rank == root) {
    in = recv.at(root * bytes);
    fillPat(recv.at(root * bytes), bytes, root, salt);
  } else {
    fillPat(send.data(), bytes, c.rank, salt);
  }
  acclResult_t r = acclGather(in, recv.data(), count, dt, root, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  if (c.rank == root) {
    for (int k = 0; k < c.nranks; ++k)
      checkPat(recv.at(k * bytes), bytes, k, salt, 0, es, what + " block of rank " + std::to_string(k));
  } else {
    checkFill(recv.data(), recv.bytes(), kSentinel, what + " recvbuff of a non-root");
  }
  if (in == send.data()) checkPat(send.data(), bytes, c.rank, salt, 0, es, what + " sendbuff");
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runScatter(Ctx& c, acclDataType_t dt, size_t count, int root, bool inPlace, uint64_t salt) {
  std::string what = describe("acclScatter", c, dt, count, inPlace, -1, root);
  size_t es = esize(dt), bytes = count * es;
  Buf send(bytes * c.nranks), recv(bytes);
  int srcRank = c.rank == root ? root : c.rank + 1000;  // non-roots: must not be read
  fillPat(send.data(), send.bytes(), srcRank, salt);
  void* out = (inPlace && c.rank == root) ? send.at(root * bytes) : recv.data();
  acclResult_t r = acclScatter(send.data(), out, count, dt, root, c.comm, nullptr);
  if (!acceptResult(c, r, dt, what)) return;
  checkPat(out, bytes, root, salt, c.rank * bytes, es, what + " result");
  checkPat(send.data(), send.bytes(), srcRank, salt, 0, es, what + " sendbuff");
  send.guardsOk(what);
  recv.guardsOk(what);
}

void runBarrier(Ctx& c, int counterSlot) {
  auto& counter = c.slot(counterSlot);
  int64_t base = counter.load();
  c.oobBarrier();
  for (int round = 1; round <= 3; ++round) {
    // Arrive in a different order each round; the last one arrives ~100 ms after the first.
    int pos = (c.rank + round) % c.nranks;
    sleepFor(0.1 * pos / std::max(1, c.nranks - 1));
    counter.fetch_add(1);
    ACCL_OK(acclBarrier(c.comm, nullptr));
    int64_t seen = counter.load() - base;
    if (seen < static_cast<int64_t>(round) * c.nranks)
      reportFailure(__FILE__, __LINE__,
                    "acclBarrier round " + std::to_string(round) + " returned after only " +
                        std::to_string(seen - (round - 1) * c.nranks) + " of " +
                        std::to_string(c.nranks) + " ranks had arrived");
  }
  c.oobBarrier();
}

}  // namespace at
