// Every collective, in place and out of place, every dtype x op, small/odd/zero and multi-chunk
// counts, roots other than 0, and the large-count cases.
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "coll_util.h"
#include "dtypes.h"
#include "harness.h"

using namespace at;

namespace {

std::vector<int> rootsFor(int n) {
  std::vector<int> roots = {0, n - 1, n / 2, 1 % n};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

uint64_t saltOf(int a, int b, int c, int d) {
  return (static_cast<uint64_t>(a) << 24) ^ (static_cast<uint64_t>(b) << 16) ^
         (static_cast<uint64_t>(c) << 8) ^ static_cast<uint64_t>(d);
}

// Buffers that touch but do not overlap are not in place and must be accepted (both orders).
void adjacentBuffers(Ctx& c) {
  const int n = c.nranks, r = c.rank;
  const size_t cnt = 1031, blk = cnt * 4;
  Buf big(blk * n * 2);
  uint8_t* base = big.data();
  for (int order = 0; order < 2; ++order) {
    std::string tail = order ? " (recvbuff right before sendbuff)" : " (recvbuff right after sendbuff)";
    uint8_t* send = base + (order ? blk : 0);
    uint8_t* recv = base + (order ? 0 : blk);
    std::string what = "acclAllReduce with adjacent buffers" + tail;
    fillRed(send, acclInt32, acclSum, n, r, cnt);
    ACCL_OK(acclAllReduce(send, recv, cnt, acclInt32, acclSum, c.comm, nullptr));
    checkRed(recv, acclInt32, acclSum, n, cnt, 0, what);
    checkRedInput(send, acclInt32, acclSum, n, r, cnt, 0, what);

    what = "acclAllGather with adjacent buffers" + tail;
    send = base + (order ? n * blk : 0);
    recv = base + (order ? 0 : blk);
    fillPat(send, blk, r, 700 + order);
    ACCL_OK(acclAllGather(send, recv, cnt, acclInt32, c.comm, nullptr));
    for (int k = 0; k < n; ++k) checkPat(recv + k * blk, blk, k, 700 + order, 0, 4, what);

    what = "acclReduceScatter with adjacent buffers" + tail;
    send = base + (order ? blk : 0);
    recv = base + (order ? 0 : n * blk);
    fillRed(send, acclInt32, acclMax, n, r, cnt * n);
    ACCL_OK(acclReduceScatter(send, recv, cnt, acclInt32, acclMax, c.comm, nullptr));
    checkRed(recv, acclInt32, acclMax, n, cnt, r * cnt, what);

    what = "acclAlltoAll with adjacent buffers" + tail;
    send = base + (order ? n * blk : 0);
    recv = base + (order ? 0 : n * blk);
    fillPat(send, n * blk, r, 710 + order);
    ACCL_OK(acclAlltoAll(send, recv, cnt, acclInt32, c.comm, nullptr));
    for (int k = 0; k < n; ++k) checkPat(recv + k * blk, blk, k, 710 + order, r * blk, 4, what);
  }
  big.guardsOk("adjacent buffers");
}

}  // namespace

// Every collective with element sizes 1, 2, 4, 8, counts 0, 1 and 1031, in and out of place,
// every root in {0, n/2, n-1, 1}, then acclBarrier and zero counts with NULL buffers.
TEST_CASE(collectives) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const acclDataType_t types[] = {acclInt8, acclFloat16, acclInt32, acclFloat64};
    const size_t counts[] = {0, 1, 1031};
    int iter = 0;
    for (acclDataType_t dt : types) {
      for (size_t count : counts) {
        for (bool inPlace : {false, true}) {
          ++iter;
          runAllReduce(c, dt, acclSum, count, inPlace);
          runAllGather(c, dt, count, inPlace, saltOf(iter, 1, 0, 0));
          runReduceScatter(c, dt, acclSum, count, inPlace);
          runAlltoAll(c, dt, count, inPlace, saltOf(iter, 2, 0, 0));
          for (int root : rootsFor(c.nranks)) {
            runBroadcast(c, dt, count, root, inPlace, saltOf(iter, 3, root, 0));
            runReduce(c, dt, acclSum, count, root, inPlace);
            runGather(c, dt, count, root, inPlace, saltOf(iter, 4, root, 0));
            runScatter(c, dt, count, root, inPlace, saltOf(iter, 5, root, 0));
          }
        }
      }
    }
    runBarrier(c, 0);
    adjacentBuffers(c);

    // Buffers a rank does not use may be NULL: sendbuff of a non-root in Broadcast and
    // Scatter, recvbuff of a non-root in Reduce and Gather.
    {
      const int n = c.nranks, root = n - 1;
      const size_t count = 1031;
      const bool isRoot = c.rank == root;
      std::string what = "acclBroadcast with sendbuff NULL on non-roots";
      Buf a(count * 4 * n), b(count * 4 * n);
      if (isRoot) fillPat(a.data(), count * 4, root, 900);
      ACCL_OK(acclBroadcast(isRoot ? a.data() : nullptr, b.data(), count, acclFloat32, root, c.comm, nullptr));
      checkPat(b.data(), count * 4, root, 900, 0, 4, what);
      what = "acclReduce with recvbuff NULL on non-roots";
      fillRed(a.data(), acclInt32, acclMax, n, c.rank, count);
      ACCL_OK(acclReduce(a.data(), isRoot ? b.data() : nullptr, count, acclInt32, acclMax, root, c.comm, nullptr));
      if (isRoot) checkRed(b.data(), acclInt32, acclMax, n, count, 0, what);
      what = "acclGather with recvbuff NULL on non-roots";
      fillPat(a.data(), count * 4, c.rank, 901);
      ACCL_OK(acclGather(a.data(), isRoot ? b.data() : nullptr, count, acclUint32, root, c.comm, nullptr));
      if (isRoot)
        for (int k = 0; k < n; ++k) checkPat(b.at(k * count * 4), count * 4, k, 901, 0, 4, what);
      what = "acclScatter with sendbuff NULL on non-roots";
      if (isRoot) fillPat(a.data(), count * 4 * n, root, 902);
      ACCL_OK(acclScatter(isRoot ? a.data() : nullptr, b.data(), count, acclUint32, root, c.comm, nullptr));
      checkPat(b.data(), count * 4, root, 902, c.rank * count * 4, 4, what);
      a.guardsOk(what);
      b.guardsOk(what);
    }

    // Zero counts need no buffers.
    CHECK_ACCL_OK(acclAllReduce(nullptr, nullptr, 0, acclFloat32, acclSum, c.comm, nullptr));
    CHECK_ACCL_OK(acclBroadcast(nullptr, nullptr, 0, acclFloat32, c.nranks - 1, c.comm, nullptr));
    CHECK_ACCL_OK(acclAllGather(nullptr, nullptr, 0, acclInt8, c.comm, nullptr));
    sanityAllReduce(c, "zero-count collectives with NULL buffers");
  });
  return ok ? 0 : 1;
}

// Every dtype (fp8 included) x every op through AllReduce (in and out of place), Reduce and
// ReduceScatter (in and out of place).
TEST_CASE(dtypes_ops) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    for (acclDataType_t dt : allTypes()) {
      for (acclRedOp_t op : allOps()) {
        runAllReduce(c, dt, op, 1031, false);
        runAllReduce(c, dt, op, 3, true);
        runReduce(c, dt, op, 517, c.nranks - 1, op % 2 == 1);
        runReduceScatter(c, dt, op, 131, false);
        runReduceScatter(c, dt, op, 67, true);
      }
    }
  });
  return ok ? 0 : 1;
}

// Messages above 1 MiB so that chunked / pipelined paths run, including odd byte counts.
TEST_CASE(multichunk) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks;
    const size_t big = 300007;           // float32: 1.2 MB
    const size_t block = 270001;         // float32: 1.08 MB per rank block
    runAllReduce(c, acclFloat32, acclSum, big, false);
    runAllReduce(c, acclFloat32, acclSum, big, true);
    runAllReduce(c, acclInt8, acclSum, (size_t(1) << 20) + 7, false);  // 1 MiB + 7 bytes
    runAllReduce(c, acclBfloat16, acclMax, 600011, true);
    runAllReduce(c, acclFloat64, acclProd, 150001, false);
    runAllReduce(c, acclFloat16, acclAvg, 600011, false);
    // Across nodes: several chunks of the pipelined hierarchical all-reduce, the last one short.
    runAllReduce(c, acclFloat32, acclSum, 2600003, true);  // 3 chunks
    runAllReduce(c, acclFloat64, acclAvg, 700001, false);
    runBroadcast(c, acclFloat32, big, n - 1, false, 11);
    runBroadcast(c, acclInt8, (size_t(1) << 20) + 3, n / 2, true, 12);
    runReduce(c, acclInt32, acclSum, big, 1 % n, false);
    runReduce(c, acclUint8, acclMin, (size_t(1) << 20) + 5, n - 1, true);
    runAllGather(c, acclFloat32, block, false, 13);
    runAllGather(c, acclInt8, (size_t(1) << 20) + 1, true, 14);
    runReduceScatter(c, acclFloat32, acclSum, block, false);
    runReduceScatter(c, acclInt64, acclMax, 140003, true);
    size_t a2a = (size_t(1) << 20) / (4 * n) + 17;  // int32, > 1 MiB in all
    runAlltoAll(c, acclInt32, a2a, false, 15);
    runAlltoAll(c, acclInt32, a2a, true, 16);
    // In place on some ranks only: every rank must still choose the same algorithm.
    runAlltoAll(c, acclInt32, a2a, c.rank % 2 == 0, 29);
    runAlltoAll(c, acclInt32, 20011, c.rank % 2 == 1, 32);  // 80 KiB blocks
    runGather(c, acclFloat32, block, n - 1, false, 17);
    runGather(c, acclFloat32, block, 1 % n, true, 18);
    runScatter(c, acclFloat32, block, n / 2, false, 19);
    runScatter(c, acclFloat32, block, n - 1, true, 20);
    {
      // Element-aligned buffers that are not 16-byte aligned, over several chunks.
      const size_t count = 300007;
      Buf s(std::max(count * 4, size_t(70001) * n * 8) + 64), d(count * 4 + 64);
      auto* sp = s.data() + 4;
      auto* dp = d.data() + 12;
      std::string what = "acclAllReduce(float32, count 300007, sum) with sendbuff at +4 and recvbuff at +12 bytes";
      fillRed(sp, acclFloat32, acclSum, n, c.rank, count);
      ACCL_OK(acclAllReduce(sp, dp, count, acclFloat32, acclSum, c.comm, nullptr));
      checkRed(dp, acclFloat32, acclSum, n, count, 0, what);
      checkFill(d.data(), 12, kSentinel, what + " (bytes before recvbuff)");
      checkFill(dp + count * 4, d.bytes() - 12 - count * 4, kSentinel, what + " (bytes after recvbuff)");
      what = "acclReduceScatter(float64, count 70001, max) with buffers at +8 and +24 bytes";
      fillRed(s.data() + 8, acclFloat64, acclMax, n, c.rank, 70001 * n);
      ACCL_OK(acclReduceScatter(s.data() + 8, d.data() + 24, 70001, acclFloat64, acclMax, c.comm, nullptr));
      checkRed(d.data() + 24, acclFloat64, acclMax, n, 70001, 70001 * c.rank, what);
      s.guardsOk(what);
      d.guardsOk(what);
    }
    sanityAllReduce(c, "the multi-chunk collectives");
  });
  return ok ? 0 : 1;
}

// Small broadcasts, scatters, gathers and reduces go through a ring of 64 boxes whose readers
// wait for their writers' stamps beside the data (ShmComm::nextBox). Every box here takes data
// beside the stamps and data in the box in turn, filled with bytes that read as huge words,
// while the writers come late every third call: a reader that took data for a stamp would go
// on before the writer wrote and read the box's earlier contents.
TEST_CASE(box_stamps) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks;
    // 2048 and 3000: a broadcast's or scatter's root streams them into the box (copyToBox).
    // Nine sizes against four kinds: every kind meets every size.
    const size_t sizes[] = {1, 24, 25, 8, 1000, 56, 64, 2048, 3000};
    const char* const names[] = {"acclScatter", "acclBroadcast", "acclGather", "acclReduce"};
    for (int i = 0; i < 400; ++i) {
      const int root = i % n, op = i % 4;
      const size_t bytes = sizes[i % 9];
      const bool rootWrites = op < 2;
      auto byteOf = [&](size_t k, int block) { return uint8_t(0x80 | ((i * 7 + k + block) & 0x7f)); };
      std::vector<uint8_t> in(bytes * n), out(bytes * n), expect;
      for (int b = 0; b < n; ++b)
        for (size_t k = 0; k < bytes; ++k) in[b * bytes + k] = byteOf(k, rootWrites ? b : c.rank);
      if ((c.rank == root) == rootWrites && i % 3 == 0) sleepFor(0.0002);
      if (op == 0) {
        ACCL_OK(acclScatter(in.data(), out.data(), bytes, acclUint8, root, c.comm, nullptr));
        expect.assign(in.begin() + c.rank * bytes, in.begin() + (c.rank + 1) * bytes);
        out.resize(bytes);
      } else if (op == 1) {
        ACCL_OK(acclBroadcast(in.data(), out.data(), bytes, acclUint8, root, c.comm, nullptr));
        expect.assign(in.begin(), in.begin() + bytes);
        out.resize(bytes);
      } else if (op == 2) {
        ACCL_OK(acclGather(in.data(), out.data(), bytes, acclUint8, root, c.comm, nullptr));
        for (int b = 0; b < n; ++b)
          for (size_t k = 0; k < bytes; ++k) expect.push_back(byteOf(k, b));
      } else {
        ACCL_OK(acclReduce(in.data(), out.data(), bytes, acclUint8, acclSum, root, c.comm, nullptr));
        for (size_t k = 0; k < bytes; ++k) {
          uint8_t sum = 0;
          for (int b = 0; b < n; ++b) sum = uint8_t(sum + byteOf(k, b));
          expect.push_back(sum);
        }
        out.resize(bytes);
      }
      if ((rootWrites || c.rank == root) && out != expect)
        reportFailure(__FILE__, __LINE__, std::string(names[op]) + " #" + std::to_string(i) +
                                              " of " + std::to_string(bytes) + " B from root " +
                                              std::to_string(root) + ": wrong bytes");
    }
    sanityAllReduce(c, "the stamped boxes");
  });
  return ok ? 0 : 1;
}

// Small all-reduces go through two sets of lines in turn, each rank's input beside its stamp
// (ShmComm::nextLine): back to back, 4 to 56 bytes, with a rank asleep now and then and
// staged all-reduces and broadcasts between. A rank that wrote a set while a peer still read it
// would hand that peer its next call's input.
TEST_CASE(line_allreduce) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks;
    std::vector<int32_t> in(1000), out(1000);
    for (int i = 0; i < 3000; ++i) {
      const size_t count = i % 50 == 49 ? 1000 : 1 + i % 14;  // 1000: through the slots
      for (size_t k = 0; k < count; ++k) in[k] = int32_t(i * 131 + k * 7 + c.rank);
      if (i % 97 == c.rank) sleepFor(0.0001);
      if (i % 23 == 0)
        ACCL_OK(acclBroadcast(in.data(), out.data(), 4, acclInt32, i % n, c.comm, nullptr));
      ACCL_OK(acclAllReduce(in.data(), out.data(), count, acclInt32, acclSum, c.comm, nullptr));
      for (size_t k = 0; k < count; ++k)
        if (out[k] != int32_t(n * (i * 131 + k * 7) + n * (n - 1) / 2)) {
          reportFailure(__FILE__, __LINE__, "all_reduce #" + std::to_string(i) + " of " +
                                                std::to_string(count) + " int32: wrong sum");
          return;
        }
    }
    sanityAllReduce(c, "the small all-reduces");
  });
  return ok ? 0 : 1;
}

// Single-copy broadcasts, scatters and gathers in place, whose root takes a share of the copies
// (rootShare: 288 KiB parts give 72 KiB shares at 2-4 ranks): the others leave as soon as they
// have copied their part, except that they wait for the root's share. Each rank looks at its
// buffer the moment the call returns, and a gather's writer overwrites its input at once: a
// reader gone before the root wrote its share would see the last call's bytes, a writer gone
// before the root read its share would hand it the garbage.
TEST_CASE(root_share) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, me = c.rank;
    const size_t part = 288 << 10;
    std::vector<uint8_t> buf(part * n);
    const char* const names[] = {"acclBroadcast", "acclScatter", "acclGather"};
    for (int i = 0; i < 120; ++i) {
      const int root = i % n, op = (i / n) % 3;
      auto byteOf = [&](size_t k, int block) { return uint8_t((i * 29 + k * 7 + block) & 0xff); };
      const size_t bytes = op == 0 ? part : part * n;  // the root's buffer
      for (size_t k = 0; k < bytes; ++k)
        buf[k] = me == root || op == 2 ? byteOf(k % part, op == 2 ? me : int(k / part)) : 0;
      uint8_t* mine = buf.data() + (op == 0 ? 0 : me * part);
      if (op == 0) {
        ACCL_OK(acclBroadcast(buf.data(), buf.data(), part, acclUint8, root, c.comm, nullptr));
      } else if (op == 1) {
        ACCL_OK(acclScatter(buf.data(), mine, part, acclUint8, root, c.comm, nullptr));
      } else {
        ACCL_OK(acclGather(mine, buf.data(), part, acclUint8, root, c.comm, nullptr));
        if (me != root) memset(mine, 0x5a, part);  // the root may read it only before we return
      }
      bool good = true;
      if (op < 2) {  // every rank's part: the root's share at its end first
        for (size_t k = part; k-- > 0 && good;) good = mine[k] == byteOf(k, op == 0 ? 0 : me);
      } else if (me == root) {
        for (size_t k = 0; k < bytes && good; ++k) good = buf[k] == byteOf(k % part, int(k / part));
      }
      if (!good)
        reportFailure(__FILE__, __LINE__, std::string(names[op]) + " #" + std::to_string(i) +
                                              " in place from root " + std::to_string(root) +
                                              ": wrong bytes on rank " + std::to_string(me));
    }
    sanityAllReduce(c, "the single copies with the root's share");
  });
  return ok ? 0 : 1;
}

// Single-copy reduces from the threshold on, where below 128 KiB (256 KiB with more ranks than
// cores) the root alone reads every peer's input (reducePull), and beyond, where the ranks split
// the work: every root, in and out of place. A rank other than the root overwrites its input the
// moment the call returns: gone before the root had read it, it would hand the root the garbage.
TEST_CASE(reduce_pull) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks, me = c.rank;
    const size_t counts[] = {8192 + 3, 16384, 32767, 40000 + 1, 70000};  // int32
    std::vector<int32_t> in(counts[4]), out(counts[4]);
    for (int i = 0; i < 40; ++i) {
      const int root = i % n;
      const size_t count = counts[(i / n) % 5];
      const bool inPlace = (i / (5 * n)) % 2 == 1;
      auto valueOf = [&](size_t k, int r) { return int32_t(k * 7 + r * 1000003 + i); };
      for (size_t k = 0; k < count; ++k) in[k] = valueOf(k, me);
      int32_t* dst = inPlace ? in.data() : out.data();
      ACCL_OK(acclReduce(in.data(), dst, count, acclInt32, acclSum, root, c.comm, nullptr));
      if (me != root) {
        std::fill(in.begin(), in.end(), -1);
        continue;
      }
      size_t bad = count;
      for (size_t k = 0; k < count && bad == count; ++k) {
        int64_t want = 0;
        for (int r = 0; r < n; ++r) want += valueOf(k, r);
        if (dst[k] != int32_t(want)) bad = k;
      }
      if (bad < count)
        reportFailure(__FILE__, __LINE__, "acclReduce #" + std::to_string(i) + " of " +
                                              std::to_string(count) + " int32 " +
                                              (inPlace ? "in place" : "out of place") +
                                              " to root " + std::to_string(root) +
                                              ": wrong element " + std::to_string(bad));
    }
    sanityAllReduce(c, "the single-copy reduces");
  });
  return ok ? 0 : 1;
}

// Blocks from 2 MiB on, where a rank's own block (all-gather, gather, scatter, alltoall) and the
// root's copy (broadcast) take `rep movsb`, and from 8 MiB on, where they bypass the caches: odd
// sizes and odd offsets, so the streamed middle has an unaligned head and a short tail on some
// ranks.
TEST_CASE(uncached_copies) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks;
    const size_t odd = (size_t(4) << 20) + 3, big = (size_t(8) << 20) + 5;  // int8
    runAllGather(c, acclInt8, odd, false, 21);
    runAllGather(c, acclFloat32, (size_t(1) << 20) + 1, false, 22);
    runAllGather(c, acclInt8, big, false, 27);
    runBroadcast(c, acclInt8, odd, n - 1, false, 23);
    runBroadcast(c, acclInt8, big, 0, false, 28);
    runGather(c, acclInt8, odd, n / 2, false, 24);
    runScatter(c, acclInt8, big, 0, false, 25);
    runAlltoAll(c, acclInt8, odd, false, 26);
    runAlltoAll(c, acclInt8, odd, true, 30);
    runAlltoAll(c, acclInt8, odd, c.rank % 2 == 1, 31);
    sanityAllReduce(c, "the collectives with uncached copies");
  });
  return ok ? 0 : 1;
}

// Shared host memory (acclHostAlloc): rejected arguments, and more regions than a peer keeps
// mapped, each freed before the next is made, so a new region often reuses a freed one's
// address, descriptor and inode: a peer storing into its stale mapping would leave the
// receiver's sentinel in place. Then a send/recv into the place of a freed region.
TEST_CASE(host_memory) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const int n = c.nranks;
    void* bad = reinterpret_cast<void*>(1);
    CHECK_EQ(acclHostAlloc(&bad, 0), acclInvalidArgument);
    CHECK_EQ(acclHostAlloc(nullptr, 64), acclInvalidArgument);
    int local = 0;
    CHECK_EQ(acclHostFree(&local), acclInvalidArgument);
    CHECK_MSG(std::string(acclGetLastError(nullptr)).find("acclHostAlloc") != std::string::npos,
              std::string("acclHostFree's message names acclHostAlloc: ") +
                  acclGetLastError(nullptr));
    ACCL_OK(acclHostFree(nullptr));
    const size_t count = 100003;  // float32 blocks of 400 KB: single copy
    for (int round = 0; round < 40; ++round) {
      runAllGather(c, acclFloat32, count, round % 2 == 1, 100 + round);
      runAllReduce(c, acclFloat32, acclSum, count, round % 2 == 0);
    }
    // A receive into private memory where a shared buffer was, which the receiver published in
    // its last collective and has freed since: the sender must not write through its mapping.
    const size_t bytes = size_t(1) << 20;
    void* h = nullptr;
    ACCL_OK(acclHostAlloc(&h, bytes * n));
    char* hc = static_cast<char*>(h);
    ACCL_OK(acclAllGather(hc + c.rank * bytes, hc, bytes, acclUint8, c.comm, nullptr));
    ACCL_OK(acclHostFree(h));
    void* p = mmap(h, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    REQUIRE_MSG(p == h, "could not map private memory where the shared buffer was");
    Buf send(bytes);
    fillPat(send.data(), bytes, c.rank, 31);
    const int next = (c.rank + 1) % n, prev = (c.rank + n - 1) % n;
    ACCL_OK(acclGroupStart());
    ACCL_OK(acclSend(send.data(), bytes, acclUint8, next, c.comm, nullptr));
    ACCL_OK(acclRecv(p, bytes, acclUint8, prev, c.comm, nullptr));
    ACCL_OK(acclGroupEnd());
    checkPat(p, bytes, prev, 31, 0, 1, "a receive where a freed shared buffer was");
    munmap(p, bytes);
    sanityAllReduce(c, "40 rounds of new shared buffers");
  });
  return ok ? 0 : 1;
}

// The one 64 MiB case: a float32 all-reduce of 16 Mi elements.
TEST_CASE(allreduce_64mib) {
  bool ok = runRanks(args.nranks, args.mode, [](Ctx& c) {
    const size_t count = size_t(16) << 20;
    std::vector<float> send(count), recv(count, -1.0f);
    auto val = [](int r, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + r * 3) % 1000) - 500); };
    for (size_t i = 0; i < count; ++i) send[i] = val(c.rank, i);
    double t0 = now();
    ACCL_OK(acclAllReduce(send.data(), recv.data(), count, acclFloat32, acclSum, c.comm, nullptr));
    double dt = now() - t0;
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      float ref = 0;
      for (int r = 0; r < c.nranks; ++r) ref += val(r, i);
      if (recv[i] != ref) {
        if (bad < 3)
          AT_FAIL("64 MiB all-reduce: element " + std::to_string(i) + " is " + show(recv[i]) +
                  ", expected " + show(ref));
        ++bad;
      }
    }
    if (bad) AT_FAIL(std::to_string(bad) + " of " + std::to_string(count) + " elements wrong");
    for (size_t i = 0; i < count; i += 4099)
      if (send[i] != val(c.rank, i)) { AT_FAIL("sendbuff changed at " + std::to_string(i)); break; }
    if (c.rank == 0)
      note("64 MiB all-reduce took " + std::to_string(dt) + " s (" +
           std::to_string(64.0 / dt) + " MiB/s algorithm bandwidth)");
  });
  return ok ? 0 : 1;
}

// Opt-in (ACCL_TEST_LARGE=1): an in-place int8 all-reduce of 2^31 + 17 elements, so counts and
// offsets above 2^31 must be size_t end to end.
TEST_CASE(large_2g) {
  const char* env = std::getenv("ACCL_TEST_LARGE");
  if (!env || std::string(env) != "1") {
    std::printf("SKIP: set ACCL_TEST_LARGE=1 to run the in-place all-reduce of 2^31+17 int8 "
                "elements (needs about %d GiB of memory)\n", (5 * args.nranks + 1) / 2);
    return 77;
  }
  const size_t count = (size_t(1) << 31) + 17;
  {
    std::ifstream mi("/proc/meminfo");
    std::string key;
    long long kb = 0;
    while (mi >> key >> kb) {
      if (key == "MemAvailable:") break;
      mi.ignore(256, '\n');
    }
    long long need = static_cast<long long>(args.nranks) * (5LL << 20) / 2;  // ~2.5 GiB per rank, in kB
    if (kb > 0 && kb < need) {
      std::printf("SKIP: only %lld MiB of memory available, the test needs about %lld MiB\n",
                  kb / 1024, need / 1024);
      return 77;
    }
  }
  setenv("ACCL_TIMEOUT", "900", 1);  // a call on 2 GiB may take longer than the default 60 s
  RunOpts o;
  o.deadline = 1100;
  bool ok = runRanks(args.nranks, args.mode, [count](Ctx& c) {
    void* mem = mmap(nullptr, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(mem != MAP_FAILED);
    int8_t* buf = static_cast<int8_t*>(mem);
    // Period 251 does not divide any power of two, so a wrapped offset shows.
    auto val = [](int r, size_t i) { return static_cast<int8_t>(((i % 251) & 0x3f) + r); };
    for (size_t i = 0; i < count; ++i) buf[i] = val(c.rank, i);
    double t0 = now();
    ACCL_OK(acclAllReduce(buf, buf, count, acclInt8, acclSum, c.comm, nullptr));
    if (c.rank == 0) note("2^31+17 int8 all-reduce took " + std::to_string(now() - t0) + " s");
    std::vector<size_t> idx;
    for (size_t i = 0; i < 4096; ++i) idx.push_back(i);
    for (size_t i = (size_t(1) << 31) - 4096; i < count; ++i) idx.push_back(i);
    for (size_t i = (size_t(1) << 32) / 4 - 2048; i < (size_t(1) << 32) / 4 + 2048; ++i) idx.push_back(i);
    std::mt19937_64 rng(12345);
    for (int k = 0; k < 200000; ++k) idx.push_back(rng() % count);
    size_t bad = 0;
    for (size_t i : idx) {
      int ref = 0;
      for (int r = 0; r < c.nranks; ++r) ref += val(r, i);
      if (buf[i] != static_cast<int8_t>(ref)) {
        if (bad < 3)
          AT_FAIL("element " + std::to_string(i) + " is " + std::to_string(buf[i]) + ", expected " +
                  std::to_string(ref));
        ++bad;
      }
    }
    if (bad) AT_FAIL(std::to_string(bad) + " of " + std::to_string(idx.size()) + " sampled elements wrong");
    munmap(mem, count);
  }, o);
  return ok ? 0 : 1;
}
