// The shared-memory part of the cpu backend's communicator: one segment per communicator and
// node, mapped by the ranks of the communicator on that node (its "members"), holding
//   - a control line per rank: its barrier epoch (see arrive/waitAll);
//   - two sets of staging slots, one slot per rank in each: collectives copy through them;
//   - a channel per ordered pair of ranks (two buffers and head/tail counters) for send/recv;
//   - a ring of small boxes for small broadcasts (see nextBox).
// The segment is unlinked as soon as every rank has mapped it, so it disappears with the last
// mapping however the processes end.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "accl/backend.h"
#include "host_memory.h"

namespace accl {
namespace cpu {

constexpr int kP2pBufs = 2;

enum Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kBarrier,
  kSendRecv,  // not a collective: send/recv's single-copy threshold (cmaMin); no algorithm
  kNumColls
};

// The items of a list variable (ACCL_ALGO, ACCL_CMA_MIN): separated by , or ;, empty ones
// skipped, lowercase without '_' and ' ' ("All_Reduce:Ring" reads as "allreduce:ring").
std::vector<std::string> specItems(const std::string& spec);

enum : uint32_t { kNoCopy, kCopyAside, kCopyInSlot };  // RankCtrl::sendCopy

struct alignas(64) RankCtrl {
  std::atomic<uint64_t> epoch;
  // Who this rank is, so peers can tell when its process is gone (kill -9, crash).
  int64_t pid;
  uint64_t startTime;  // /proc/<pid>/stat field 22: tells a reused pid from the original
  // Single-copy operations: where this rank's buffers of the current operation are, for peers
  // to read with process_vm_readv. Written before the rank arrives at the operation's barrier.
  uint64_t sendAddr, recvAddr;
  // Where the blocks of an all-to-all in place went before this rank's buffer is overwritten:
  // kCopyAside (sendAddr is that copy) or kCopyInSlot (this rank's slot of the step's set);
  // kNoCopy otherwise. alltoall_cma.cc says how the peers read each.
  uint32_t sendCopy;
  uint64_t probeAddr, probeValue;  // set at init: peers test that they may read this rank
  cpu_set_t cpus;                   // set at init: the CPUs this rank may run on
  // Multi-node only: what this rank waits for on another node, or why it failed (`failed` set),
  // so that its local peers, which wait for it in turn, can name the ranks really missing.
  std::atomic<int32_t> failed;
  char note[124];
  // The shared host memory (acclHostAlloc) holding sendAddr and recvAddr (id 0: none).
  HostRegion sendRegion, recvRegion;
  // With more ranks than cores: local rank + 1 of the one peer this rank's send/recv waits for,
  // where the wait is for messages from it through the channel alone (0: none; awaitOnly). In
  // its own line: written at such waits, read by the ranks bound to the same CPU.
  alignas(64) std::atomic<uint32_t> awaits;
};

// Set in ChannelCtrl::written with m + 1: the sender could not write message m single copy
// (in ChannelCtrl::taken: the receiver could not read it).
constexpr uint64_t kCopyFailed = uint64_t(1) << 63;

// A send/recv channel (one per ordered pair of ranks). A message travels in chunks through the
// channel's buffers, or, single copy, straight from the sender's buffer into the receiver's:
// the receiver posts where it waits for message m (messages are counted on each side, from 0),
// and a sender that finds that post when it starts message m writes there and says so, or, for
// a large message (any message with more ranks than cores), offers its own buffer, which the
// receiver reads; such a message is offered before the post too. Offers have a field of their
// own: an offer of message m + 1 in `written` could replace the word that message m was written
// before the receiver had seen it.
// Each line is written by one side only. Chunk c is announced in its own slot, slots[c %
// kP2pSlots], four lines whose first holds the announcement and which also hold a chunk of up
// to kInlineBytes: a message that small moves the slot's lines it fills to the receiver, who
// waits on the first, and not a line of the buffers after it. The sender reads `head` back only
// when its last reading leaves no free slot, once in kP2pSlots - 1 messages when the receiver
// keeps up. (One `tail` line holding every chunk's size, and `head` read before every chunk,
// moved three lines a message: an 8-byte exchange at 2 ranks took 3-4x an 8-byte all-gather,
// 0.72 against 0.17 us and 1.35 against 0.44 in the machine's two placements, 2026-12-05.)
// Slots of one line (48 bytes inline) took longer from 49 bytes, and as long at 8 bytes: 2
// ranks, perf/ab_builds.cc, 2026-12-07, a send/recv group of 128 B 0.481 against 0.464 us in
// the VM's fast mode, 0.557 / 0.531 and 0.955 / 0.859 in slow ones, 240 B 1.14 / 1.02 and 1.12 /
// 0.97, 8 B 0.464 / 0.463 and 0.851 / 0.812; 4 ranks on the 2 cores, 4 rounds of alternating
// launches, 128 B 3.01-3.43 against 2.50-3.22 us.
constexpr int kP2pSlots = 8;
constexpr size_t kInlineBytes = 240;
struct alignas(64) ChunkSlot {
  std::atomic<uint64_t> seq;  // c + 1: chunk c is here, or in buffer c % kP2pBufs
  // Total bytes of the message the chunk belongs to, so a mismatched send/recv pair is
  // reported instead of silently misread.
  uint64_t msgBytes;
  char data[kInlineBytes];
};
struct alignas(64) ChannelCtrl {
  alignas(64) std::atomic<uint64_t> written;  // m + 1: message m was written single copy (or
                                              // m + 1 | kCopyFailed: it could not be)
  std::atomic<uint64_t> offered;              // m + 1: message m waits at offerAddr, of
  uint64_t offerAddr, offerBytes;             // offerBytes, for the receiver to read it
  alignas(64) std::atomic<uint64_t> tail;     // chunks written by the sender
  uint64_t headSeen;                          // the sender's last reading of `head`
  alignas(64) std::atomic<uint64_t> head;     // chunks taken by the receiver
  // Read by a sender only for messages that may go single copy.
  alignas(64) std::atomic<uint64_t> posted;  // m + 1: the receiver waits for message m at
  uint64_t postAddr, postBytes;              // this address, for this many bytes,
  HostRegion postRegion;                     // in this shared host memory (id 0: none)
  std::atomic<uint64_t> taken;               // m + 1: offered message m was read (or m + 1 |
                                             // kCopyFailed: it could not be)
  ChunkSlot slots[kP2pSlots];
};

struct ShmHeader {
  uint64_t magic;
  uint64_t commHash;
  int32_t nranks;
  // Non-zero (rank + 1) once a rank aborted: peers stop waiting for it.
  std::atomic<int32_t> abortedBy;
};

// Polls a condition the way every wait in the backend does: spin briefly (ACCL_SPIN_US), then
// yield, then sleep, so ranks oversubscribed on few cores still make progress. Throws
// acclTimeout after `timeout` seconds, acclRemoteError on abort; `describe` says what was
// awaited.
class Backoff {
 public:
  Backoff(double timeout, long spinNs, std::function<void()> checkAbort);
  // `yield` false: while it would yield, it polls with a CPU pause instead, but for every 512th
  // poll (a wait whose CPU's other ranks all wait for this one: ShmComm::matesAwaitMe).
  void pause(const std::function<std::string()>& describe, bool yield = true);
  // Progress was made: the next pause starts a new wait, spinning first.
  void restart() {
    polls_ = 0;
    phase_ = spinNs_ > 0 ? kSpin : kYield;
  }

 private:
  enum Phase { kSpin, kYield, kSleep };
  std::chrono::steady_clock::time_point start_;
  double timeout_;
  std::function<void()> checkAbort_;
  long spinNs_;
  Phase phase_;
  uint64_t polls_ = 0;
};

// Ranks and roots passed to a ShmComm are its local indices (0 .. members-1); messages name
// the communicator's ranks. On one node the two are the same.
class ShmComm {
 public:
  // `members`: the communicator's ranks on this node, ascending, including args->rank. The
  // constructor is collective over all ranks of the communicator (bootstrap all-gathers).
  ShmComm(const acclBackendCommArgs_v1* args, std::vector<int> members);
  ~ShmComm();
  ShmComm(const ShmComm&) = delete;
  ShmComm& operator=(const ShmComm&) = delete;

  // Largest all-reduce (bytes) for the direct algorithm (ACCL_ALLREDUCE_DIRECT_MAX).
  size_t allReduceDirectMax;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const acclBackendCommArgs_v1& args() const { return *args_; }

  // Barrier over the ranks' epoch counters: arrive() publishes this rank's next epoch; waitAll()
  // returns once every rank has arrived there; waitFor(r) once rank r has (a step whose readers
  // need one writer only).
  void arrive();
  void waitAll() { waitRanks(-1, epoch_); }
  void waitFor(int r) { waitRanks(r, epoch_); }
  void barrier() {
    arrive();
    waitAll();
  }

  // Staging. Each step of a collective takes the next of the two slot sets and arrives once.
  // A rank reads a set only before it arrives at the next step, so once every rank has arrived
  // at the previous step, all reads of this set's previous use (two steps back) are complete.
  // Most steps end with waitAll(), which makes that so; after a step that did not (a broadcast,
  // whose root waits for nobody), a rank that will write waits for it here.
  int nextSet(bool write = true) {
    if (write && synced_ < epoch_) waitAll();
    return static_cast<int>(step_++ & 1);
  }
  // Small broadcasts, scatters, gathers and reduces go through a ring of kBoxes boxes of
  // kBoxBytes instead, so that the ranks that only write (a broadcast's or scatter's root, a
  // gather's or reduce's other ranks) can run up to kBoxes calls ahead of the readers: with more
  // ranks than cores, readers then catch up several at a time rather than each call waiting for
  // every rank to be scheduled. Every rank takes the next box at each such call; one that will
  // write waits until every rank has left the step that last read the box. Calls whose data
  // fit (fitsBox) take a box: kBoxBytes with more ranks than cores (up to there boxes
  // beat slots and single copy alike, docs/algorithms.md "Steps"), 1 KiB otherwise (there, from
  // 2 KiB, a root running ahead slows its readers down: 2 ranks, 4 KiB broadcast, box 1.5x
  // slower).
  static constexpr uint64_t kBoxes = 64;
  static constexpr size_t kBoxBytes = 32768;
  // Takes the next box for a call in which each writer (a broadcast's or scatter's root, a
  // gather's or reduce's other ranks) writes `bytes`. Every rank also has head records in
  // each box, which end with its stamp; a writer's data lie beside its stamp when they fit,
  // otherwise in the box's kBoxBytes (boxFor says where). A writer stamps its head record with
  // the epoch it then arrives at, and readers wait for that stamp instead of the writer's
  // epoch: small data cross in the line they wait on, one line instead of two, one after the
  // other. A call of up to 24 bytes a writer takes a record of 32 bytes, two consecutive boxes'
  // to a line, so a reader behind its writer takes two calls in one line's crossing, as Open
  // MPI's fast box packs two small messages to a line (2 ranks, 8-byte broadcasts: 0.73-0.96 of
  // the time in the VM's slow minutes, where a line crosses in 0.16-0.20 us); one of up to 56
  // bytes takes a whole line, in a ring of its own (in the box they took 1.03-1.10x the time,
  // a second crossing; docs/algorithms.md "Steps"). Each stamp lies where only stamps are
  // written, so the stamp a reader finds is that box's last. The head lines lie together,
  // 6 KiB a rank, where the boxes take a page each (each head in its box's page, a run's first
  // 8-byte broadcasts took up to 1.8x as long).
  static constexpr size_t kHalfStampAt = 24;  // in a record of half a line
  void nextBox(bool write, size_t bytes);
  // Where rank `writer`'s data go in this call's box: beside its stamp when they fit,
  // otherwise at byte `at` of the box.
  char* boxFor(int writer, size_t at) const {
    return beside_ ? head(writer) : boxes_ + box_ * kBoxBytes + at;
  }
  void stampBox() { stampOf(rank_).store(epoch_ + 1, std::memory_order_release); }
  // After arriving: waits until rank `writer` has stamped this call's box.
  void waitBox(int writer) { waitStamp(stampOf(writer), epoch_, writer, spinFor(writer)); }
  bool fitsBox(size_t bytes) const { return bytes <= boxMax_; }
  // Small all-reduces (up to kStampAt bytes a rank) take neither: every rank writes its input
  // beside a stamp in its own line of one of two sets, used in turn, and reads the others'
  // lines once their stamps show this call, so one line crosses from each rank where a slot
  // step moves its epoch's line and then its slot's (docs/algorithms.md, "Small
  // all-reduces"). No epoch is taken: a rank writes a set again two calls later, once it has
  // seen every rank's stamp of the call in between, which each writes after reading this set.
  static constexpr size_t kStampAt = 56;  // where a line's stamp lies, after its data (boxes too)
  char* nextLine() {
    ++lineStep_;
    return lineOf(rank_);
  }
  char* lineOf(int r) const { return lines_ + ((lineStep_ & 1) * nranks_ + r) * 64; }
  void stampLine() { lineStamp(rank_).store(lineStep_, std::memory_order_release); }
  // Waits until rank r has stamped its line of this call.
  void waitLine(int r) { waitStamp(lineStamp(r), lineStep_, r, spinNs_); }
  char* slot(int set, int r) const { return data_ + (size_t(set) * nranks_ + r) * slotBytes_; }
  size_t slotBytes() const { return slotBytes_; }
  // Room for one pointer per rank: the sources of a reduction, without an allocation per call.
  const void** sources() { return sources_.data(); }

  // Point to point.
  ChannelCtrl& channel(int src, int dst) const { return channels_[src * nranks_ + dst]; }
  char* channelBuf(int src, int dst, int i) const {
    return p2p_ + ((size_t(src) * nranks_ + dst) * kP2pBufs + i) * p2pBytes_;
  }
  size_t p2pBytes() const { return p2pBytes_; }
  // The number of this message on the channel to (send) or from peer r, counted from 0.
  uint64_t nextMessage(bool send, int r) { return (send ? sent_ : received_)[r]++; }
  // How long a wait spins before it yields: ACCL_SPIN_US, or 0 with more ranks than cores.
  long spinNs() const { return spinNs_; }
  bool oversubscribed() const { return oversubscribed_; }  // more ranks than cores
  // With more ranks than cores and ranks bound to single CPUs, a send/recv that waits only for
  // messages from local rank r through the channel says so (awaitOnly(r); -1 when the wait
  // ends), and a wait asks whether every other rank bound to its CPU waits so for this rank
  // with nothing of it left to read (matesAwaitMe). Then yielding would hand the CPU to a rank
  // that can only look and yield it back, and the wait polls instead: at 4 ranks bound two to
  // a core, a ring of 8-byte exchanges took 0.8 of the time (docs/algorithms.md "Waiting").
  // Those ranks can only move once this one sends again, which it does after its wait.
  bool hasMates() const { return !mates_.empty(); }
  void awaitOnly(int r) { ctrl_[rank_].awaits.store(r + 1, std::memory_order_relaxed); }
  bool matesAwaitMe() const {
    for (int m : mates_) {
      const ChannelCtrl& ch = channel(rank_, m);
      if (ctrl_[m].awaits.load(std::memory_order_relaxed) != uint32_t(rank_ + 1) ||
          ch.head.load(std::memory_order_acquire) != ch.tail.load(std::memory_order_relaxed))
        return false;
    }
    return !mates_.empty();
  }

  // Single copy (cross-memory attach): peers read this rank's buffers directly. Enabled when
  // every rank can read every other (same user, no ptrace restriction) and ACCL_CMA_MIN is not
  // -1; collective k uses it for messages of at least cmaMin(k) bytes per rank (kSendRecv:
  // bytes of a message).
  bool cma() const { return cma_; }
  size_t cmaMin(Coll k) const { return cmaMin_[k]; }
  // Also which shared host memory (acclHostAlloc) holds each: a peer maps it once and then
  // copies with plain loads and stores instead of the kernel's copy (cmaRead, cmaWrite).
  void publish(const void* send, const void* recv, uint32_t sendCopy = kNoCopy) {
    RankCtrl& me = ctrl_[rank_];
    me.sendAddr = reinterpret_cast<uint64_t>(send);
    me.recvAddr = reinterpret_cast<uint64_t>(recv);
    me.sendCopy = sendCopy;
    me.sendRegion = findHostRegion(send);
    me.recvRegion = findHostRegion(recv);
  }
  const RankCtrl& peer(int r) const { return ctrl_[r]; }
  // Copies `bytes` from address `remote` in rank r's process to `local`. `remote` lies in the
  // buffers r published for this operation: where they are shared host memory, the copy goes
  // through this process's mapping of it (mapped), otherwise through the kernel.
  void cmaRead(int r, void* local, uint64_t remote, size_t bytes) const;
  // Copies `bytes` from `local` to address `remote` (as cmaRead's) in rank r's process.
  void cmaWrite(int r, uint64_t remote, const void* local, size_t bytes) const;
  // The same to an address r posted for a message (send/recv), which lies in `region` (id 0:
  // none), posted with it: r's published buffers, perhaps freed since its last collective, say
  // nothing of it.
  void postWrite(int r, const HostRegion& region, uint64_t remote, const void* local,
                 size_t bytes) const;
  // Whether the owner of an output of `bytes` in `region` (id 0: private memory) reads what it
  // receives from its peers' buffers, rather than they write it there. The kernel's copy into
  // another process's pinned pages is slower than its copy out of them once the buffers outgrow
  // the caches (docs/algorithms.md, "Pulling large blocks"), so large outputs are read, except
  // in shared host memory, which the peers write with streaming stores.
  static constexpr size_t kPullBytes = size_t(4) << 20;
  static bool pullsInto(size_t bytes, const HostRegion& region) {
    return bytes >= kPullBytes && !region.id;
  }
  // The same for `bytes` of rank r's output in a single-copy collective, from what r published:
  // every rank decides the same for each pair.
  bool pulls(int r, size_t bytes) const { return pullsInto(bytes, ctrl_[r].recvRegion); }
  // Copies `bytes` from address `remote` in rank r's process, which r offered for a message,
  // to `local`, always by the kernel (r's published buffers say nothing of it).
  void offerRead(int r, uint64_t remote, void* local, size_t bytes) const {
    cmaCopy(r, local, remote, bytes, false, nullptr);
  }
  // [remote, remote + bytes) of rank r where this process can read it: r's shared host memory
  // mapped here, or else `buf`, into which it is copied (as cmaRead).
  const char* readIn(int r, uint64_t remote, size_t bytes, char* buf) const;
  // Single-copy reductions: a private buffer of cmaChunkBytes() per peer, and one for this
  // rank's sums where its output is not used (reduce), allocated at first use. 1 MiB chunks
  // measured best at 2 ranks on huge pages (docs/algorithms.md); with many ranks they shrink
  // so that the buffers stay within 2 MiB.
  // A multiple of 4 KiB, so every peer's buffer is aligned for any type (2 MiB / 7 is odd).
  size_t cmaChunkBytes() const {
    size_t b = std::max<size_t>(64 << 10,
                                std::min<size_t>(1 << 20, (2 << 20) / std::max(1, nranks_ - 1)));
    return b / 4096 * 4096;
  }
  // The buffers start at the same offset within a 4 KiB page as `out`, which the chunks are
  // reduced into. 16 bytes above it, where malloc put them against a page-aligned output, the
  // in-place reduce-scatter of 16-32 MiB took 1.3-1.7x longer (2 ranks), as a buffer so placed
  // does against any output; 0, 32 or 48 bytes above, or 16 below, were level. Loads that match
  // the low 12 bits of stores just issued wait for them (4K aliasing); at the same offset a
  // load of element i only matches the store of element i, which comes after it.
  char* cmaScratch(const void* out);
  // A private buffer of at least `bytes`, for the copy of an input that is overwritten while it
  // is being sent (an all-to-all or send/recv in place). It is kept for the next call, so no
  // call allocates it or faults its pages in, and is on huge pages where the kernel gives them:
  // at 2 ranks, 16 MiB in place, send/recv took 3.6-5.3 ms against 4.7-5.7 from a new
  // std::vector each call (10 alternating launches), all-to-all 1.3-1.6 ms against 1.8-3.4 from
  // a kept one on small pages (5; 2026-12-02).
  char* aside(size_t bytes);

  // Throws if this communicator or a peer's was aborted, or (checked at most every 200 ms) the
  // process of an awaited rank is gone. Only awaited ranks count: a rank whose part is done
  // (say, an eager send already in the buffer) may exit before this one finishes.
  void checkAbort(const std::function<bool(int)>& awaited) const;
  // Marks the segment so peers stop waiting for this rank.
  void announceAbort();
  // What this rank waits for elsewhere ("" when nothing), shown in its local peers' timeouts.
  void setNote(const std::string& text);
  // This rank's operation failed: local peers waiting for it fail too, with `why`.
  void fail(const std::string& why);
  std::string note(int r) const;
  int global(int r) const { return members_[r]; }

 private:
  // `there`: the remote bytes mapped here, or nullptr for the kernel's copy.
  void cmaCopy(int r, void* local, uint64_t remote, size_t bytes, bool write, char* there) const;
  // [remote, remote + bytes) of rank r's region h mapped here, or nullptr.
  char* mappedIn(int r, const HostRegion& h, uint64_t remote, size_t bytes) const;
  // [remote, remote + bytes) of rank r mapped here, where it lies in shared host memory that r
  // published for this operation; nullptr otherwise.
  char* mapped(int r, uint64_t remote, size_t bytes) const;
  char* mapRegion(int r, const HostRegion& h) const;
  // Waits until rank `only` (-1: every rank) has arrived at `epoch`.
  void waitRanks(int only, uint64_t epoch);
  // Waits until rank r's `stamp` (a box's head line, a small all-reduce's line) reaches `want`.
  void waitStamp(const std::atomic<uint64_t>& stamp, uint64_t want, int r, long spinNs);
  // How long a wait for box writer r spins before it yields. With more ranks than cores the
  // waits yield at once (spinNs_ 0), but a writer bound to other CPUs than this one's runs there
  // meanwhile, and its stamp is a fraction of a microsecond away: those waits spin up to
  // kSpinApartNs first. Yielding at once there, 4 ranks bound two to a core swung between two
  // modes from one launch to the next, 0.1 and 0.6 us a call for 8 B-512 B broadcasts and
  // scatters (each wait a switch to the core's other rank, which waited too); spinning 2 us,
  // 0.08-0.39 in every round. A wait for a rank's epoch still yields at once: that rank may
  // have a long copy before it arrives, and the core's other rank one of its own to make
  // meanwhile (docs/algorithms.md "Waiting").
  static constexpr long kSpinApartNs = 2000;
  long spinFor(int r) const { return apart_[r] ? std::max(spinNs_, kSpinApartNs) : spinNs_; }
  // This call's head record of rank r: a whole line (wide_) or half of one.
  char* head(int r) const {
    return wide_ ? wideHeads_ + (box_ * nranks_ + r) * 64
                 : heads_ + ((box_ / 2) * nranks_ + r) * 64 + box_ % 2 * 32;
  }
  std::atomic<uint64_t>& stampOf(int r) const {
    char* at = head(r) + (wide_ ? kStampAt : kHalfStampAt);
    return *reinterpret_cast<std::atomic<uint64_t>*>(at);
  }
  // What a wait for the ranks where `missing` holds says it waits for.
  std::string awaited(const std::function<bool(int)>& missing) const;
  void waitEpoch(uint64_t epoch) {
    if (synced_ < epoch) waitRanks(-1, epoch);
  }
  void checkPeersAlive(const std::function<bool(int)>& awaited) const;

  const acclBackendCommArgs_v1* args_;
  std::vector<int> members_;
  int rank_, nranks_;
  // Peers' processes are visible in this pid namespace (false in separate containers).
  bool canSeePeers_ = false;
  bool cma_ = false;
  size_t cmaMin_[kNumColls];
  std::vector<char> cmaScratch_;
  char* aside_ = nullptr;  // aside(): asideBytes_ mapped, 2 MiB-aligned
  size_t asideBytes_ = 0;
  struct Mapped {
    int rank;
    uint64_t id;  // HostRegion::id
    char* base;   // nullptr: it could not be mapped
    size_t size;
  };
  mutable std::vector<Mapped> mapped_;  // peers' shared host memory, oldest first
  uint64_t probe_ = 0;  // the word peers read at init to test cross-memory attach
  mutable std::chrono::steady_clock::time_point nextLivenessCheck_{};
  // Since when each peer's process has been seen stopped (zero: it is not), and for how long
  // it may be (ACCL_HEARTBEAT_TIMEOUT).
  mutable std::vector<std::chrono::steady_clock::time_point> stoppedSince_;
  std::chrono::duration<double> stoppedLimit_{0};
  size_t slotBytes_, p2pBytes_;
  std::vector<uint64_t> sent_, received_;  // messages started on each channel (nextMessage)
  uint64_t epoch_ = 0, step_ = 0;
  uint64_t synced_ = 0;  // every rank has arrived at this epoch
  uint64_t boxStep_ = 0, boxUsed_[kBoxes] = {};
  char* heads_ = nullptr;      // kBoxes / 2 x nranks_ head lines, two boxes' records in each
  char* wideHeads_ = nullptr;  // kBoxes x nranks_ head lines, a box's record in each
  char* lines_ = nullptr;  // 2 x nranks_ lines of small all-reduces
  uint64_t lineStep_ = 0;  // small all-reduces so far
  std::atomic<uint64_t>& lineStamp(int r) const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(lineOf(r) + kStampAt);
  }
  uint64_t box_ = 0;       // the box of the latest call that took one
  bool wide_ = false;      // its head records are whole lines (nextBox)
  bool beside_ = false;    // its data lie beside the stamps
  bool oversubscribed_ = false;
  long spinNs_ = 0;
  std::vector<char> apart_;  // per rank: bound to none of this rank's CPUs
  std::vector<int> mates_;   // with more ranks than cores: the others bound to this rank's CPU
  size_t boxMax_ = kBoxBytes;
  std::vector<const void*> sources_;
  void* base_ = nullptr;
  size_t size_ = 0;
  ShmHeader* header_ = nullptr;
  RankCtrl* ctrl_ = nullptr;
  ChannelCtrl* channels_ = nullptr;
  char* data_ = nullptr;
  char* p2p_ = nullptr;
  char* boxes_ = nullptr;
};

}  // namespace cpu
}  // namespace accl
