#include "p2p.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "cpu_comm.h"
#include "errors.h"
#include "reduce.h"

namespace accl {
namespace cpu {
namespace {

std::string describe(const P2pOp& op) {
  const char* dir = op.send ? "to" : "from";
  std::string what =
      op.internal ? format("%s rank %d", op.send ? "sending to" : "receiving from", op.peer)
                  : format("%s #%llu %s rank %d", op.send ? "acclSend" : "acclRecv",
                           (unsigned long long)op.seq, dir, op.peer);
  if (op.local >= 0)
    return what + format(" (%zu of %zu chunks %s)", op.done, op.chunks,
                         op.send ? "sent" : "received");
  size_t moved = 0;
  for (int i = 0; i < kMaxSocks; ++i) moved += op.net.done[i];
  // The heartbeat tells a peer that is alive but elsewhere (late, or waiting on another) from
  // one that is gone.
  double beat = op.comm->net()->heartbeatAge(op.peer);
  return what + format(" over TCP at %s (%zu of %zu bytes %s%s)",
                       op.comm->net()->address(op.peer).c_str(), moved, op.bytes,
                       op.send ? "sent" : "received",
                       beat < 0 ? "" : format("; its last heartbeat %.1f s ago", beat).c_str());
}

// How an error names a receive: the user's call with its number, or a step of a collective.
std::string receiveName(const P2pOp& op) {
  return op.internal ? "a receive" : format("acclRecv #%llu", (unsigned long long)op.seq);
}

// The receive `op` met a message of `sent` bytes.
[[noreturn]] void sizesDiffer(const P2pOp& op, uint64_t sent) {
  ACCL_THROW(acclRemoteError, "%s expects %zu bytes from rank %d, which sent a message of %llu "
             "bytes: sends and receives do not match",
             receiveName(op).c_str(), op.bytes, op.peer, (unsigned long long)sent);
}

// Makes the single copy of message `op` (`copy`) and says in `flag` that it is done, or that it
// failed: the peer waits for that flag and would otherwise wait until its timeout.
template <class Copy>
void singleCopy(P2pOp& op, std::atomic<uint64_t>& flag, Copy copy) {
  try {
    copy();
  } catch (const Error&) {
    flag.store((op.msg + 1) | kCopyFailed, std::memory_order_release);
    throw;
  }
  flag.store(op.msg + 1, std::memory_order_release);
  op.done = op.chunks;
}

// A send in place (from its copy, copyInPlaceSends) goes through the channel below this: copied
// aside and then read by its receiver it took 1.3-1.7x the time of the channel's way at 8-32
// KiB (2 ranks), level at 128-512 KiB (docs/algorithms.md, "Crossovers on data").
constexpr size_t kInPlaceCmaMin = 128 << 10;

// Whether send `op` on this node may go single copy.
bool copiesOnce(const P2pOp& op) {
  const ShmComm& c = op.comm->shm();
  return c.cma() && op.bytes >= std::max(c.cmaMin(kSendRecv), op.copied ? kInPlaceCmaMin : 0);
}

// Offers the buffer of send `op` for its receiver to read.
void offer(P2pOp& op, ChannelCtrl& ch) {
  ch.offerAddr = reinterpret_cast<uint64_t>(op.buf);
  ch.offerBytes = op.bytes;
  ch.offered.store(op.msg + 1, std::memory_order_release);
  op.offered = true;
}

// Moves as many chunks of `op` as its shared-memory channel allows without waiting; true if
// any moved. `receiving`: a receive of the same set is not finished. `read`: a receive may read
// a message offered to it now.
bool progressShm(P2pOp& op, bool receiving, bool read) {
  ShmComm& c = op.comm->shm();
  const int me = c.rank();
  const size_t cb = c.p2pBytes();
  bool moved = false;
  if (op.send) {
    ChannelCtrl& ch = c.channel(me, op.local);
    if (op.offered) {
      const uint64_t taken = ch.taken.load(std::memory_order_acquire);
      if (taken == ((op.msg + 1) | kCopyFailed))
        ACCL_THROW(acclRemoteError, "%s: rank %d could not read the %zu-byte message from the "
                   "send buffer at %p (its error says why)",
                   describe(op).c_str(), op.peer, op.bytes, static_cast<void*>(op.buf));
      if (taken != op.msg + 1) return false;
      op.done = op.chunks;
      return true;
    }
    if (!op.eager) {
      // Single copy when the receiver waits for this message: straight into its buffer. A
      // message larger than the channel's buffers waits for its receiver anyway, and so does a
      // smaller one while this rank waits for a receive of its own anyway (an exchange). Before
      // the post a large one offers its buffer instead.
      // Otherwise through the buffers: a send that fits in them completes without its
      // receiver, as a lone send always did.
      const bool posted = ch.posted.load(std::memory_order_acquire) == op.msg + 1;
      // With more ranks than cores every message is read by its receiver, as Open MPI's are:
      // the sender offers its buffer and goes on, where a write would wait for the receiver to
      // post and then for the sender to be scheduled again (4 ranks bound two to a core, 6
      // alternating launches, 2026-12-04: out of place 0.64-0.96 of the time at 32 KiB-2 MiB,
      // in place 0.80-0.97; level at 4 MiB, which was read already).
      const bool reads = c.oversubscribed();
      if (posted && ch.postBytes == op.bytes) {  // else the receiver reports the sizes
        // Large messages are read by the receiver, and so is every copy of a send in place
        // (copyInPlaceSends says why), unless it goes into shared host memory.
        if (op.copied ? !ch.postRegion.id
                      : reads || ShmComm::pullsInto(op.bytes, ch.postRegion)) {
          offer(op, ch);
          return true;
        }
        singleCopy(op, ch.written,
                   [&] { c.postWrite(op.local, ch.postRegion, ch.postAddr, op.buf, op.bytes); });
        return true;
      }
      if (!posted && (receiving || op.bytes > kP2pBufs * cb)) {
        // A large message, which the receiver would read once posted, is offered at once: the
        // receiver reads it as soon as it posts (into whatever memory: the sender cannot know
        // yet whether it is shared host memory), instead of when the sender next looks (4 ranks
        // on the 2 cores, out of place, medians of 6-8 alternating launches, 2026-12-04: 0.80-0.91
        // of the time at 4-8 MiB; level at 2 ranks). So is every message the receiver reads
        // (`reads`). Smaller ones wait at 2 ranks: offered, they took 1.5-2x as long at
        // 64-256 KiB, where the receiver's read is slower than the sender's write.
        if (op.bytes < ShmComm::kPullBytes && !reads) return false;
        offer(op, ch);
        return true;
      }
      op.eager = true;
    }
    while (op.done < op.chunks) {
      const uint64_t tail = ch.tail.load(std::memory_order_relaxed);  // written only by this rank
      const size_t off = op.done * cb, len = std::min(cb, op.bytes - off);
      const bool inlined = len <= kInlineBytes;
      const uint64_t room = inlined ? kP2pSlots : kP2pBufs;
      if (tail - ch.headSeen >= room) {
        ch.headSeen = ch.head.load(std::memory_order_acquire);
        if (tail - ch.headSeen >= room) break;
      }
      ChunkSlot& slot = ch.slots[tail % kP2pSlots];
      if (inlined) memcpy(slot.data, op.buf + off, len);
      else copyToSlot(c.channelBuf(me, op.local, tail % kP2pBufs), op.buf + off, len);
      slot.msgBytes = op.bytes;
      slot.seq.store(tail + 1, std::memory_order_release);
      ch.tail.store(tail + 1, std::memory_order_relaxed);
      ++op.done;
      moved = true;
    }
  } else {
    ChannelCtrl& ch = c.channel(op.local, me);
    if (c.cma() && !op.posted) {
      ch.postAddr = reinterpret_cast<uint64_t>(op.buf);
      ch.postBytes = op.bytes;
      // Looked up (a lock, where shared memory exists) only where the send may go single copy.
      ch.postRegion = op.bytes >= c.cmaMin(kSendRecv) ? findHostRegion(op.buf) : HostRegion{};
      ch.posted.store(op.msg + 1, std::memory_order_release);
      op.posted = true;
    }
    const uint64_t written = op.posted ? ch.written.load(std::memory_order_acquire) : 0;
    if (written == op.msg + 1) {
      op.done = op.chunks;
      return true;
    }
    if (op.posted && ch.offered.load(std::memory_order_acquire) == op.msg + 1) {
      if (!read) return false;
      if (ch.offerBytes != op.bytes) {
        ch.taken.store((op.msg + 1) | kCopyFailed, std::memory_order_release);
        sizesDiffer(op, ch.offerBytes);
      }
      singleCopy(op, ch.taken, [&] { c.offerRead(op.local, ch.offerAddr, op.buf, op.bytes); });
      return true;
    }
    if (written == ((op.msg + 1) | kCopyFailed))
      ACCL_THROW(acclRemoteError, "%s: rank %d could not write its %zu-byte message into the "
                 "receive buffer at %p (its error says why: a receive buffer this process cannot "
                 "write, or a send buffer it cannot read)",
                 receiveName(op).c_str(), op.peer, op.bytes, static_cast<void*>(op.buf));
    while (op.done < op.chunks) {
      const uint64_t head = ch.head.load(std::memory_order_relaxed);  // written only by this rank
      const ChunkSlot& slot = ch.slots[head % kP2pSlots];
      if (slot.seq.load(std::memory_order_acquire) != head + 1) break;
      // A first chunk may be the next message's: this one may have been written single copy
      // since `written` was read above. The sender says so there before it sends the next, so
      // with the chunk seen a second look at `written` finds it, and the next call completes
      // the receive. (Taken as this message's, a next message of the same size was received in
      // its place: the ring all-reduce across nodes, about 1 run in 35 of multichunk, 2026-12-05.)
      if (op.done == 0 && op.posted && ch.written.load(std::memory_order_acquire) != written)
        break;
      if (slot.msgBytes != op.bytes) sizesDiffer(op, slot.msgBytes);
      const size_t off = op.done * cb, len = std::min(cb, op.bytes - off);
      const char* from =
          len <= kInlineBytes ? slot.data : c.channelBuf(op.local, me, head % kP2pBufs);
      memcpy(op.buf + off, from, len);
      ch.head.store(head + 1, std::memory_order_release);
      ++op.done;
      moved = true;
    }
  }
  return moved;
}

// A send whose buffer a receive of the same set writes (a send/recv in place) sends from a copy
// taken first: the receive's data may arrive, written by the peer, from the channel or from
// the socket, before the send has taken all of its own. The steps of collectives never do
// that; only the user's sends and receives are compared.
// The copy streams around the caches, and a receiver in private memory reads it, so that no
// line moves between the cores' caches: the copy is in memory, and the receiver's buffer in its
// own cache (in an exchange it has just copied it aside too). In some launches on this VM a
// copy that takes lines out of the other core's cache is slow, and a send in place written
// into the receiver's buffer, or read from a copy in the sender's cache, took 5-6x the time
// (2 ranks; the ways toggled loop by loop within each launch, 2026-12-02: 1 MiB 95-104 us read
// from the streamed copy against 527-596); in the other launches it is level at 64 KiB-1 MiB
// and 1.2-1.3x slower at 4 MiB (386-405 against 296-332 us). In alternating launches no launch
// was slow in 12 against 4 of 12 written, at 2 and at 4 ranks on the 2 cores (docs/algorithms.md,
// "Lines that cross between the cores").
// The receiver read a cached copy 1.4-4.3x slower than the streamed one at 8-256 KiB too (2 ranks,
// 2026-12-05).
// A message that goes through the channel's buffers instead (below the single-copy threshold)
// is copied there by this rank, from a copy that stays in its cache. From a streamed one, which
// it read back from memory, an exchange in place took 0.3-2.0 us longer than out of place at
// 128 B-8 KiB (4 ranks, 3 alternating launches, 2026-12-05; -0.3 to +0.5 us from a cached copy;
// level at 8-32 B, where no whole line is streamed).
void copyInPlaceSends(std::vector<P2pOp>& ops) {
  // Each communicator's copies share its aside buffer: sized first, then cut up in order.
  struct Aside {
    ShmComm* shm;
    size_t bytes;
    char* next;
  };
  std::vector<Aside> asides;
  auto asideOf = [&](P2pOp& s) -> Aside& {
    for (Aside& x : asides)
      if (x.shm == &s.comm->shm()) return x;
    return asides.emplace_back(Aside{&s.comm->shm(), 0, nullptr});
  };
  auto footprint = [](size_t bytes) { return (bytes + 63) / 64 * 64; };  // each copy on a line
  for (P2pOp& s : ops) {
    if (!s.send || s.internal) continue;
    s.copied = std::any_of(ops.begin(), ops.end(), [&](const P2pOp& r) {
      return !r.send && !r.internal && s.buf < r.buf + r.bytes && r.buf < s.buf + s.bytes;
    });
    if (s.copied) asideOf(s).bytes += footprint(s.bytes);
  }
  for (Aside& x : asides) x.next = x.shm->aside(x.bytes);
  for (P2pOp& s : ops) {
    if (!s.copied) continue;
    Aside& x = asideOf(s);
    s.eager = s.local >= 0 && !copiesOnce(s);  // copies go single copy from kInPlaceCmaMin only
    if (s.eager) memcpy(x.next, s.buf, s.bytes);
    else copyUncached(x.next, s.buf, s.bytes, 0);
    s.buf = s.net.buf = x.next;
    x.next += footprint(s.bytes);
  }
}

// One pass over `ops`: moves what moves without waiting, keeping each channel's order.
// Receives first, so that their posts are there for the single-copy sends of a peer doing the
// same; they read the messages offered to them only after the sends, so that in an exchange both
// ranks offer theirs before either reads (reading at once, the 2-rank exchange took 1.1-1.4x the
// time at 4-8 MiB: one rank read before it offered its own message). A send through the
// channel's buffers looks for no post: it goes with the receives, in the order given, so that a
// peer waiting for it gets it sooner (2 ranks, a send then a receive: 0.91-0.98 of the time at
// 8-32 B, 0.76-0.82 at 128 B, perf/ab_builds.cc; level at 4 ranks on the 2 cores).
bool progressAll(std::vector<P2pOp>& ops, bool* pending, bool* shmPending) {
  bool moved = false, receiving = false;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < ops.size(); ++i) {
      P2pOp& op = ops[i];
      const bool early = !op.send || op.eager;
      if (op.finished() || early != (pass != 1) || (pass == 2 && (op.send || op.local < 0)))
        continue;
      *pending = true;
      *shmPending |= op.local >= 0;
      bool blocked = false;
      for (size_t j = 0; j < i && !blocked; ++j)
        blocked = !ops[j].finished() && ops[j].comm == op.comm && ops[j].send == op.send &&
                  ops[j].peer == op.peer;
      if (blocked) continue;
      if (op.local < 0) moved |= op.comm->net()->progress(op.net);
      else moved |= progressShm(op, receiving, pass == 2);
    }
    receiving = std::any_of(ops.begin(), ops.end(),
                            [](const P2pOp& op) { return !op.send && !op.finished(); });
  }
  return moved;
}

// The shared-memory communicator of the one local peer (`*peer`) that the open operations of
// `ops` wait for, where all of them are receives from it that go through the channel (below
// single copy's threshold: a message offered or written single copy does not show there);
// nullptr otherwise. Only where ranks share bound CPUs (ShmComm::matesAwaitMe).
ShmComm* onlyPeer(const std::vector<P2pOp>& ops, int* peer) {
  ShmComm* only = nullptr;
  for (const P2pOp& op : ops) {
    if (op.finished()) continue;
    if (op.send || op.local < 0) return nullptr;
    ShmComm& c = op.comm->shm();
    if ((only && (&c != only || op.local != *peer)) || !c.hasMates() ||
        (c.cma() && op.bytes >= c.cmaMin(kSendRecv)))
      return nullptr;
    only = &c;
    *peer = op.local;
  }
  return only;
}

}  // namespace

void kickP2p(std::vector<P2pOp>& ops) {
  bool pending = false, shmPending = false;
  progressAll(ops, &pending, &shmPending);
}

void addP2p(std::vector<P2pOp>& ops, CpuComm& c, bool send, int peer, const void* buf,
            size_t bytes, bool internal) {
  if (bytes == 0) return;
  P2pOp& op = ops.emplace_back();
  op.comm = &c;
  op.send = send;
  op.peer = peer;
  op.buf = const_cast<char*>(static_cast<const char*>(buf));
  op.bytes = bytes;
  op.seq = c.args().seq;
  op.internal = internal;
  if (c.nodeOf(peer) == c.node()) {
    op.local = c.localIndex(peer);
    op.chunks = (bytes + c.shm().p2pBytes() - 1) / c.shm().p2pBytes();
    op.msg = c.shm().nextMessage(send, op.local);
    op.eager = send && !copiesOnce(op);
  } else {
    op.local = -1;
    c.net()->start(op.net, send, peer, op.buf, bytes);
  }
}

void runP2p(std::vector<P2pOp>& ops) {
  copyInPlaceSends(ops);
  double timeout = 0;
  long spinNs = 0;
  bool mates = false;  // some rank shares this one's bound CPU (ShmComm::matesAwaitMe)
  for (auto& op : ops) {
    timeout = std::max(timeout, op.comm->args().timeout);
    spinNs = std::max(spinNs, op.comm->shm().spinNs());
    mates |= op.comm->shm().hasMates();
  }
  auto checkAbort = [&] {
    for (auto& op : ops) {
      if (op.finished()) continue;
      if (op.local < 0) {
        if (__atomic_load_n(op.comm->args().abortFlag, __ATOMIC_ACQUIRE))
          ACCL_THROW(acclRemoteError, "the communicator was aborted");
        op.comm->net()->checkPeer(op.peer);
        continue;
      }
      // The peer is awaited while this operation cannot move: no data to take, no room to give.
      ShmComm& s = op.comm->shm();
      s.checkAbort([&](int r) {
        if (r != op.local) return false;
        int me = s.rank();
        ChannelCtrl& ch = op.send ? s.channel(me, r) : s.channel(r, me);
        uint64_t head = ch.head.load(std::memory_order_acquire);
        uint64_t tail = ch.tail.load(std::memory_order_acquire);
        // A send not yet started single copy waits for the receiver's post.
        return op.send ? tail - head >= kP2pBufs || (!op.eager && op.done == 0) : head == tail;
      });
    }
  };
  auto pendingText = [&] {
    std::string s;
    for (auto& op : ops)
      if (!op.finished()) s += (s.empty() ? "" : "; ") + describe(op);
    return s;
  };
  // A wait with only TCP operations left sleeps in poll(); one with shared-memory operations
  // polls memory (Backoff). Either ends after `timeout` seconds without progress.
  Backoff wait(timeout, spinNs, checkAbort);
  // Since when nothing has moved, for TCP waits (unset until one waits, as Backoff's clock:
  // an exchange that never waits reads no clock).
  std::chrono::steady_clock::time_point idle{};
  ShmComm* noted = nullptr;  // the node's peers were told what this rank waits for
  // Where this wait said it waits for one peer only (ShmComm::awaitOnly), unsaid however the
  // wait ends. Operations only finish meanwhile, so once said it stays true.
  struct Awaiting {
    ShmComm* shm = nullptr;
    ~Awaiting() {
      if (shm) shm->awaitOnly(-1);
    }
  } awaiting;
  std::vector<pollfd> fds;
  for (;;) {
    bool pending = false, shmPending = false;
    bool moved = progressAll(ops, &pending, &shmPending);
    if (!pending) break;
    if (moved) {
      wait.restart();  // the timeout bounds a wait without progress
      idle = {};
      continue;
    }
    if (shmPending) {
      int peer = -1;
      if (mates && !awaiting.shm && (awaiting.shm = onlyPeer(ops, &peer)))
        awaiting.shm->awaitOnly(peer);
      wait.pause(pendingText, !(awaiting.shm && awaiting.shm->matesAwaitMe()));
      continue;
    }
    fds.clear();
    for (auto& op : ops)
      if (!op.finished()) op.comm->net()->pollEvents(op.net, &fds);
    const auto now = std::chrono::steady_clock::now();
    if (idle == std::chrono::steady_clock::time_point{}) idle = now;
    double waited = std::chrono::duration<double>(now - idle).count();
    if (waited > timeout)
      ACCL_THROW(acclTimeout, "timed out after %.1f s %s", timeout, pendingText().c_str());
    checkAbort();
    if (!noted && waited > 0.05) {
      for (auto& op : ops)
        if (!op.finished() && !op.comm->singleNode()) {
          noted = &op.comm->shm();
          noted->setNote(pendingText());
          break;
        }
    }
    int ms = static_cast<int>(std::min(50.0, (timeout - waited) * 1000 + 1));
    int rc = poll(fds.data(), fds.size(), ms);
    if (rc < 0 && errno != EINTR) ACCL_SYSCHECK(rc, "poll", "");
  }
  // On an error the note stays: the failure handler replaces it with the error (ShmComm::fail);
  // cleared first, a local peer timing out in between would name no one on the far side.
  if (noted) noted->setNote("");
}

}  // namespace cpu
}  // namespace accl
