// All-reduce, reduce and reduce-scatter, single copy (cross-memory attach). Rank r reduces one
// range of elements: part r of the message (all-reduce, reduce) or block r (reduce-scatter).
// Chunk by chunk it reads that range of every peer's input straight from the peer's memory
// (process_vm_readv) into private buffers small enough to stay in cache (out of place, the first
// peer's into the output itself) and reduces them with its own input into its output; the
// all-reduce then writes the result straight into every peer's output (process_vm_writev), the
// reduce into the root's (a rank other than the root reduces into a private buffer, as its
// output is not used). A barrier at the start
// publishes the buffers' addresses; one at the end says that every part has arrived and nobody
// reads this rank's input any more.
//
// Against staging through /dev/shm this copies each byte once, and no rank reads memory another
// core has just written (the peers' inputs are the caller's; the all-reduce pushes its results
// rather than letting peers pull them): on this VM those core-to-core reads of fresh lines are
// the slow path. Rank r's range of every buffer is read and written by rank r alone, each chunk
// read before it is written, so in place is safe. Each byte is reduced once, by one rank, so all
// ranks get the same bits.
//
// Each peer's chunk is added into the output as soon as it is read, while it is still in cache,
// rather than all peers' chunks being read first and reduced in one pass: at 4 ranks on 2 cores
// that took 0.63-0.92 of the time at 512 KiB-8 MiB (docs/algorithms.md). The sum runs from this
// rank's input through the next ranks' in turn. Half and fp8 types with more than one peer keep
// the single pass, which rounds once.
//
// A smaller reduce (reducePull) leaves the whole message to the root: it reads every peer's
// input and reduces it into its output while the others only publish their inputs and wait for
// it to finish. Half the waits, and no writes to the root: below the sizes where splitting the
// work across the cores pays (cpu_backend.cc, reduceAuto).
#include <algorithm>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {
namespace {

// Who gets the reduced chunks besides this rank's output.
enum Push { kNobody = -2, kEveryPeer = -1 };  // or a rank: that rank alone

// Reduces elements [from, from + len) of every rank's input into `out` (null: into a private
// buffer, chunk by chunk) and writes each reduced chunk to the same elements of the output of
// `push`. Every peer's input must be published; the caller waits around it.
void reduceChunks(ShmComm& c, const CollArgs& a, size_t from, size_t len, char* out, int push) {
  const size_t es = typeSize(a.type), chunk = c.cmaChunkBytes() / es;
  const int n = c.nranks(), me = c.rank();
  const char* send = static_cast<const char*>(a.send);
  const void** srcs = c.sources();
  char* scratch = c.cmaScratch(out);
  char* own = scratch + (n - 1) * c.cmaChunkBytes();  // the private output
  // Out of place, the first peer's chunk is read straight into the output, where its sum lands
  // anyway, instead of into a private buffer: the reduce-scatter 1.05-1.19x faster at 2-64 MiB,
  // the all-reduce level (2 ranks). In place the output holds this rank's own input.
  const bool inPlace = out == send + from * es;
  const bool onePass = n == 1 || (n > 2 && roundsOnce(a.type));  // alone: a copy
  const acclRedOp_t op = a.op == acclAvg && !onePass ? acclSum : a.op;
  for (size_t done = 0; done < len; done += chunk) {
    const size_t k = std::min(chunk, len - done), at = (from + done) * es;
    char* dst = out ? out + done * es : own;
    for (int i = 1; i < n; ++i) {
      const int q = (me + i) % n;
      // One pass keeps every peer's chunk; otherwise each is added before the next is read.
      // A peer's input in shared host memory is reduced where it lies.
      char* buf = i == 1 && !inPlace ? dst : scratch + (onePass ? i - 1 : 0) * c.cmaChunkBytes();
      const char* in = c.readIn(q, c.peer(q).sendAddr + at, k * es, buf);
      srcs[i] = in;
      if (onePass) continue;
      const void* two[2] = {i == 1 ? send + at : dst, in};
      reduce(dst, two, 2, k, a.type, op);
    }
    srcs[0] = send + at;
    if (onePass) reduce(dst, srcs, n, k, a.type, op);
    else if (a.op == acclAvg) divide(dst, k, a.type, n);
    for (int q = 0; q < n; ++q)
      if (q != me && (push == kEveryPeer || push == q))
        c.cmaWrite(q, c.peer(q).recvAddr + at, dst, k * es);
  }
}

// Every rank reduces its range between two barriers.
void reduceRange(ShmComm& c, const CollArgs& a, size_t from, size_t len, char* out, int push) {
  c.publish(a.send, a.recv);
  c.barrier();
  reduceChunks(c, a, from, len, out, push);
  c.barrier();
}

}  // namespace

void allReduceCma(ShmComm& c, const CollArgs& a) {
  size_t b, e;
  partRange(a.count, c.rank(), c.nranks(), typeSize(a.type), &b, &e);
  reduceRange(c, a, b, e - b, static_cast<char*>(a.recv) + b * typeSize(a.type), kEveryPeer);
}

void reduceCma(ShmComm& c, const CollArgs& a) {
  size_t b, e;
  partRange(a.count, c.rank(), c.nranks(), typeSize(a.type), &b, &e);
  const bool root = c.rank() == a.root;
  reduceRange(c, a, b, e - b, root ? static_cast<char*>(a.recv) + b * typeSize(a.type) : nullptr,
              root ? kNobody : a.root);
}

// The others arrive twice at once: the root waits for their first arrival (the inputs are
// published) and they for its second (it has read them).
void reducePull(ShmComm& c, const CollArgs& a) {
  c.publish(a.send, a.recv);
  c.arrive();
  if (c.rank() != a.root) {
    c.arrive();
    c.waitFor(a.root);
    return;
  }
  c.waitAll();
  reduceChunks(c, a, 0, a.count, static_cast<char*>(a.recv), kNobody);
  c.arrive();
}

void reduceScatterCma(ShmComm& c, const CollArgs& a) {
  reduceRange(c, a, c.rank() * a.count, a.count, static_cast<char*>(a.recv), kNobody);
}

}  // namespace cpu
}  // namespace accl
