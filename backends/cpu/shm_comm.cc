#include "shm_comm.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <numeric>
#include <thread>
#include <vector>

#include "auth.h"
#include "errors.h"
#include "logging.h"
#include "params.h"
#include "reduce.h"

namespace accl {
namespace cpu {
namespace {

constexpr uint64_t kShmMagic = 0x41434c4c53484d31ULL;  // "ACLLSHM1"
constexpr size_t kPage = 4096;

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Start time of process `pid` in clock ticks since boot, or 0 if there is no such process or it
// has exited (a zombie not yet reaped by its parent counts as gone); its state letter in `state`.
uint64_t processStartTime(int64_t pid, char* state = nullptr) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return 0;
  size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  const char* p = stat.c_str() + paren + 2;  // field 3 onwards: the state
  if (state) *state = *p;
  if (*p == 'Z' || *p == 'X' || *p == 'x') return 0;
  for (int field = 3; field < 22 && *p; ++field) {
    p = strchr(p, ' ');
    if (!p) return 0;
    ++p;
  }
  return strtoull(p, nullptr, 10);
}

// What rank 0 tells the others about the segment it made.
struct SegmentInfo {
  char name[64];
  char error[192];  // non-empty when rank 0 could not make it
};

void gather(const acclBackendCommArgs_v1& a, void* data, size_t bytes) {
  acclResult_t r = a.allGather(a.bootstrap, data, bytes);
  if (r != acclSuccess) ACCL_THROW(r, "bootstrap exchange failed");  // text set by the core
}

// ACCL_CMA_MIN: the smallest message (bytes per rank) each collective copies once, straight
// between the ranks' buffers, instead of through /dev/shm. Unset or 0: the crossovers measured
// at 2 ranks, or with more ranks than cores at 4 ranks on 2 cores, on buffers of whole huge
// pages (docs/algorithms.md, "Crossovers on whole huge pages"): with more ranks than cores a
// single copy waits for every rank to be scheduled (in its barriers, or its root does), while
// staged steps let ranks run ahead. Another number: for all; collective:bytes items: for those
// named (bytes -1: never). Returns false for -1 alone (never).
const std::pair<const char*, Coll> kCmaColls[] = {
    {"allreduce", kAllReduce}, {"allgather", kAllGather}, {"reducescatter", kReduceScatter},
    {"broadcast", kBroadcast}, {"reduce", kReduce},      {"alltoall", kAlltoAll},
    {"gather", kGather},       {"scatter", kScatter},    {"sendrecv", kSendRecv}};

bool cmaCrossovers(size_t* min, bool oversubscribed) {
  std::fill(min, min + kNumColls, SIZE_MAX);  // no single-copy form
  min[kAllReduce] = (oversubscribed ? 128 : 32) << 10;
  min[kAllGather] = (oversubscribed ? 64 : 16) << 10;
  min[kReduceScatter] = 16 << 10;
  min[kBroadcast] = (oversubscribed ? 128 : 32) << 10;
  min[kReduce] = (oversubscribed ? 32 : 64) << 10;
  min[kAlltoAll] = (oversubscribed ? 32 : 16) << 10;
  min[kGather] = 32 << 10;
  min[kScatter] = (oversubscribed ? 32 : 64) << 10;
  min[kSendRecv] = (oversubscribed ? 32 : 8) << 10;
  const std::string spec = paramString(Param::CmaMin);
  auto bytes = [&](const std::string& text) -> size_t {
    if (text == "-1") return SIZE_MAX;  // never, for the collective named
    char* end = nullptr;
    long long v = strtoll(text.c_str(), &end, 0);
    if (text.empty() || *end || v < 0)
      ACCL_THROW(acclInvalidArgument, "ACCL_CMA_MIN=%s: '%s' is not a size in bytes (or -1)",
                 spec.c_str(), text.c_str());
    return static_cast<size_t>(v);
  };
  if (spec.empty() || spec == "0") return true;
  if (spec == "-1") return false;
  if (spec.find(':') == std::string::npos) {
    size_t all = bytes(spec);
    for (const auto& [name, k] : kCmaColls) min[k] = all;
    return true;
  }
  for (const std::string& item : specItems(spec)) {
    size_t colon = item.find(':');
    std::string name = item.substr(0, colon);
    auto hit = std::find_if(std::begin(kCmaColls), std::end(kCmaColls),
                            [&](const auto& n) { return name == n.first; });
    if (colon == std::string::npos || hit == std::end(kCmaColls)) {
      std::string known;
      for (const auto& [n, k] : kCmaColls) known += std::string(known.empty() ? "" : ", ") + n;
      ACCL_THROW(acclInvalidArgument, "ACCL_CMA_MIN=%s: '%s' is not collective:bytes with a "
                 "collective of %s", spec.c_str(), item.c_str(), known.c_str());
    }
    min[hit->second] = bytes(item.substr(colon + 1));
  }
  return true;
}

}  // namespace

std::vector<std::string> specItems(const std::string& spec) {
  std::vector<std::string> items;
  for (size_t pos = 0; pos < spec.size();) {
    size_t end = std::min(spec.find_first_of(",;", pos), spec.size());
    std::string item;
    for (char ch : spec.substr(pos, end - pos))
      if (ch != '_' && ch != ' ') item += static_cast<char>(tolower(ch));
    if (!item.empty()) items.push_back(item);
    pos = end + 1;
  }
  return items;
}

namespace {

void* mapSegment(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) ACCL_SYSCHECK(-1, "mmap of the shared-memory segment", "");
  return p;
}

}  // namespace

Backoff::Backoff(double timeout, long spinNs, std::function<void()> checkAbort)
    : timeout_(timeout),
      checkAbort_(std::move(checkAbort)),
      spinNs_(spinNs) {
  restart();
}

void Backoff::pause(const std::function<std::string()>& describe, bool yield) {
  // The clock and the abort flags are looked at every 64 polls; in between a poll does what
  // its phase does. The wait's clock starts at the 64th poll: most waits end sooner (an
  // 8-byte exchange's in a few polls) and read no clock (24 ns a reading here, against 0.2 us
  // for a whole 8-byte all-reduce). The timeout and the spinning count from there.
  if (++polls_ & 63) {
    if (phase_ == kSpin) cpuRelax();
    // Asked not to yield, it still does every 512th poll (tens of microseconds): the CPU's other
    // ranks wait for this one, but a thread of another program may be waiting for the CPU too.
    else if (phase_ == kYield && (yield || polls_ % 512 == 511)) sched_yield();
    else if (phase_ == kYield) cpuRelax();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
    return;
  }
  checkAbort_();
  const auto now = std::chrono::steady_clock::now();
  if (polls_ == 64) start_ = now;
  double waited = std::chrono::duration<double>(now - start_).count();
  if (waited > timeout_)
    ACCL_THROW(acclTimeout, "timed out after %.1f s waiting for %s", timeout_,
               describe().c_str());
  long ns = static_cast<long>(waited * 1e9);
  // Long waits (a slow peer, or more ranks than cores) sleep so that the peer can run.
  phase_ = ns < spinNs_ ? kSpin : ns < spinNs_ + 2000000 ? kYield : kSleep;
}

ShmComm::ShmComm(const acclBackendCommArgs_v1* args, std::vector<int> members)
    : args_(args),
      members_(std::move(members)),
      sent_(members_.size()),
      received_(members_.size()),
      sources_(members_.size()) {
  nranks_ = static_cast<int>(members_.size());
  rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), args->rank) -
                           members_.begin());
  ACCL_ENFORCE_EQ(members_.at(rank_), args->rank);
  // Larger slots mean fewer barriers per byte (4 MiB measured best); the automatic size keeps
  // the staging of a communicator at 32 MiB however many ranks share the host.
  long long slot = paramInt(Param::ShmSlotBytes);
  if (slot <= 0) slot = std::min(4LL << 20, std::max(1LL << 20, (16LL << 20) / nranks_));
  slotBytes_ = alignUp(std::max(slot, 4096LL), 64);
  p2pBytes_ = alignUp(std::max<long long>(paramInt(Param::ShmP2pBytes), 4096), 64);
  // Collectives that split a slot into n blocks need room for a cache line of 8-byte elements
  // per block.
  slotBytes_ = std::max(slotBytes_, size_t(nranks_) * 512);
  allReduceDirectMax = paramInt(Param::AllReduceDirectMax);
  oversubscribed_ = nranks_ > sysconf(_SC_NPROCESSORS_ONLN);
  const bool tryCma = cmaCrossovers(cmaMin_, oversubscribed_);  // before anything is allocated
  stoppedSince_.resize(nranks_);
  double stopped = paramDouble(Param::HeartbeatTimeout);
  ACCL_ARG_CHECK(stopped > 0, "ACCL_HEARTBEAT_TIMEOUT=%g must be > 0", stopped);
  stoppedLimit_ = std::chrono::duration<double>(stopped);
  // With more ranks than cores a spinning rank takes the core its peer needs: yield at once.
  spinNs_ = oversubscribed_ ? 0 : paramInt(Param::SpinUs) * 1000;
  boxMax_ = oversubscribed_ ? kBoxBytes : 1024;
  // Every exchange below is an all-gather over all ranks of the communicator (the bootstrap
  // knows no other), so each node reads its own members' slots: `lead` made the segment.
  const int lead = members_[0];

  size_t ctrlBytes = alignUp(sizeof(ShmHeader), 64) + sizeof(RankCtrl) * nranks_ +
                     sizeof(ChannelCtrl) * nranks_ * nranks_;
  size_t dataOff = alignUp(ctrlBytes, kPage);
  size_t p2pOff = dataOff + 2 * slotBytes_ * nranks_;
  size_t boxOff = p2pOff + p2pBytes_ * kP2pBufs * nranks_ * nranks_;
  size_t headsOff = boxOff + kBoxes * kBoxBytes;
  size_t wideHeadsOff = headsOff + kBoxes / 2 * nranks_ * 64;
  size_t linesOff = wideHeadsOff + kBoxes * nranks_ * 64;
  size_t total = linesOff + 2 * nranks_ * 64;

  std::vector<SegmentInfo> info(args_->nranks);
  SegmentInfo& mine = info[args_->rank];
  int fd = -1;
  if (rank_ == 0) {
    snprintf(mine.name, sizeof(mine.name), "/accl-%016llx-%d",
             (unsigned long long)args_->commHash, getpid());
    try {
      fd = shm_open(mine.name, O_CREAT | O_EXCL | O_RDWR, 0600);
      ACCL_SYSCHECK(fd, "shm_open(/dev/shm" + std::string(mine.name) + ")",
                    "is /dev/shm mounted and writable?");
      ACCL_SYSCHECK(ftruncate(fd, total), "ftruncate of the shared-memory segment", "");
      // Reserve the pages now: a /dev/shm too small must fail here, not as SIGBUS later.
      int e = posix_fallocate(fd, 0, total);
      if (e)
        ACCL_THROW(acclSystemError, "cannot reserve %zu MiB in /dev/shm: %s (check `df -h "
                   "/dev/shm`; in a container raise --shm-size)", total >> 20, strerror(e));
      base_ = mapSegment(fd, total);
    } catch (const Error& err) {
      snprintf(mine.error, sizeof(mine.error), "%s", err.what());
    }
  }
  auto cleanup = [&] {
    if (fd >= 0) close(fd);
    fd = -1;
    if (rank_ == 0) shm_unlink(info[lead].name);
  };
  try {
    gather(*args_, info.data(), sizeof(SegmentInfo));
    if (info[lead].error[0])
      ACCL_THROW(acclSystemError, "rank %d could not create the shared-memory segment: %s",
                 lead, info[lead].error);
    if (rank_ != 0) {
      try {
        fd = shm_open(info[lead].name, O_RDWR, 0600);
        ACCL_SYSCHECK(fd, "shm_open(/dev/shm" + std::string(info[lead].name) + ")",
                      "do all ranks run as the same user?");
        base_ = mapSegment(fd, total);
      } catch (const Error& err) {
        snprintf(mine.error, sizeof(mine.error), "%s", err.what());
      }
    }
    // Everyone reports; the leader unlinks whatever happened, so no segment is left behind.
    gather(*args_, info.data(), sizeof(SegmentInfo));
    cleanup();
    for (int r : members_)
      if (info[r].error[0])
        ACCL_THROW(acclSystemError, "rank %d could not map the shared-memory segment: %s", r,
                   info[r].error);
  } catch (...) {
    cleanup();
    if (base_) munmap(base_, total);
    base_ = nullptr;
    throw;
  }
  size_ = total;
  char* b = static_cast<char*>(base_);
  // Map the control lines and the broadcast boxes into this process now: otherwise the first
  // small calls each take a page fault per box (16 boxes: +0.6 us on a 20-call loop). The large
  // regions are left to fault in on use. Best effort: kernels before 5.14 lack the advice.
#ifdef MADV_POPULATE_WRITE
  madvise(b, dataOff, MADV_POPULATE_WRITE);
  madvise(b + boxOff, total - boxOff, MADV_POPULATE_WRITE);
#endif
  header_ = reinterpret_cast<ShmHeader*>(b);
  ctrl_ = reinterpret_cast<RankCtrl*>(b + alignUp(sizeof(ShmHeader), 64));
  channels_ = reinterpret_cast<ChannelCtrl*>(ctrl_ + nranks_);
  data_ = b + dataOff;
  p2p_ = b + p2pOff;
  boxes_ = b + boxOff;
  heads_ = b + headsOff;
  wideHeads_ = b + wideHeadsOff;
  lines_ = b + linesOff;
  // Peers learn this rank's process once the last exchange below is done.
  ctrl_[rank_].pid = getpid();
  ctrl_[rank_].startTime = processStartTime(getpid());
  if (sched_getaffinity(0, sizeof(cpu_set_t), &ctrl_[rank_].cpus) != 0)
    CPU_ZERO(&ctrl_[rank_].cpus);  // unknown: shares a CPU with no rank, so waits never spin
  if (rank_ == 0) {
    header_->magic = kShmMagic;
    header_->commHash = args_->commHash;
    header_->nranks = nranks_;
  }
  // Cross-memory attach: allow peers to read this process (Yama's ptrace_scope=1 needs it), and
  // leave a word for them to test with.
  if (tryCma) {
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    randomBytes(&probe_, sizeof(probe_));
    ctrl_[rank_].probeAddr = reinterpret_cast<uint64_t>(&probe_);
    ctrl_[rank_].probeValue = probe_;
  }
  std::vector<char> ready(args_->nranks);
  gather(*args_, ready.data(), 1);
  if (tryCma) {
    bool ok = true;
    for (int r = 0; r < nranks_ && ok; ++r) {
      uint64_t v = 0;
      iovec local{&v, sizeof(v)}, remote{reinterpret_cast<void*>(ctrl_[r].probeAddr), sizeof(v)};
      ok = process_vm_readv(ctrl_[r].pid, &local, 1, &remote, 1, 0) == sizeof(v) &&
           v == ctrl_[r].probeValue;
    }
    // All ranks must agree: an operation is single copy on every rank or on none.
    std::vector<char> oks(args_->nranks);
    oks[args_->rank] = ok;
    gather(*args_, oks.data(), 1);
    cma_ = std::all_of(members_.begin(), members_.end(), [&](int r) { return oks[r] != 0; });
    if (!cma_)
      ACCL_INFO("SHM", "rank %d: cross-memory attach is not possible between all ranks (ptrace "
                "restrictions or pid namespaces): large messages are copied through /dev/shm",
                args_->rank);
  }
  apart_.assign(nranks_, 0);
  if (oversubscribed_) {
    std::string list, mates;
    const cpu_set_t& mine = ctrl_[rank_].cpus;
    for (int r = 0; r < nranks_; ++r) {
      cpu_set_t both;
      CPU_AND(&both, &ctrl_[r].cpus, &mine);
      apart_[r] = r != rank_ && CPU_COUNT(&ctrl_[r].cpus) > 0 && CPU_COUNT(&both) == 0;
      if (apart_[r]) list += (list.empty() ? "" : ",") + std::to_string(members_[r]);
      if (r != rank_ && CPU_COUNT(&mine) == 1 && CPU_EQUAL(&ctrl_[r].cpus, &mine)) {
        mates_.push_back(r);
        mates += (mates.empty() ? "" : ",") + std::to_string(members_[r]);
      }
    }
    ACCL_INFO("SHM", "rank %d: more ranks than cores: waits yield at once, but those for box "
              "writers bound to other CPUs (%s) spin up to %ld ns first, and a send/recv's "
              "polls while the others bound to its CPU (%s) wait for it", args_->rank,
              list.empty() ? "none" : list.c_str(), kSpinApartNs,
              mates.empty() ? "none" : mates.c_str());
  }
  canSeePeers_ = true;
  for (int r = 0; r < nranks_; ++r)
    canSeePeers_ &= ctrl_[r].startTime && processStartTime(ctrl_[r].pid) == ctrl_[r].startTime;
  if (!canSeePeers_)
    ACCL_INFO("SHM", "rank %d: cannot see every peer's process (another pid namespace, or a "
              "peer already exited): a dead peer is found by the timeout only", args_->rank);
  std::string single = cma_ ? "" : " none";
  if (cma_)
    for (const auto& [name, k] : kCmaColls)
      single += format("%s %s %s", single.empty() ? "" : ",", name,
                       cmaMin_[k] == SIZE_MAX ? "never" : std::to_string(cmaMin_[k]).c_str());
  ACCL_INFO("SHM", "rank %d: segment %s, %zu MiB, %d ranks; single copy from (bytes):%s",
            args_->rank, info[lead].name, total >> 20, nranks_, single.c_str());
}

ShmComm::~ShmComm() {
  for (const Mapped& m : mapped_)
    if (m.base) munmap(m.base, m.size);
  if (base_) munmap(base_, size_);
  if (aside_) munmap(aside_, asideBytes_);
}

char* ShmComm::mapped(int r, uint64_t remote, size_t bytes) const {
  char* there = mappedIn(r, ctrl_[r].sendRegion, remote, bytes);
  return there ? there : mappedIn(r, ctrl_[r].recvRegion, remote, bytes);
}

char* ShmComm::mappedIn(int r, const HostRegion& h, uint64_t remote, size_t bytes) const {
  if (!h.id || remote < h.base || remote - h.base + bytes > h.size) return nullptr;
  char* base = mapRegion(r, h);
  return base ? base + (remote - h.base) : nullptr;
}

char* ShmComm::mapRegion(int r, const HostRegion& h) const {
  for (const Mapped& m : mapped_)
    if (m.rank == r && m.id == h.id) return m.base;
  // The owner keeps the region's descriptor open while it lives. The inode tells a descriptor
  // number reused for another file (a region freed during the call: the user's error) apart.
  Mapped m{r, h.id, nullptr, h.size};
  std::string path = format("/proc/%lld/fd/%lld", (long long)ctrl_[r].pid, (long long)h.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && uint64_t(st.st_ino) == h.inode &&
      uint64_t(st.st_size) >= h.size) {
    void* p = mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) m.base = static_cast<char*>(p);
  }
  if (fd >= 0) close(fd);
  if (!m.base)
    ACCL_INFO("SHM", "rank %d: cannot map rank %d's shared host memory (%s): copying through "
              "the kernel", members_[rank_], members_[r], path.c_str());
  // A call maps at most two regions per peer: four times the ranks keeps a call's own.
  if (mapped_.size() >= size_t(std::max(16, 4 * nranks_))) {
    if (mapped_.front().base) munmap(mapped_.front().base, mapped_.front().size);
    mapped_.erase(mapped_.begin());
  }
  mapped_.push_back(m);
  return m.base;
}

void ShmComm::checkAbort(const std::function<bool(int)>& awaited) const {
  if (__atomic_load_n(args_->abortFlag, __ATOMIC_ACQUIRE))
    ACCL_THROW(acclRemoteError, "the communicator was aborted");
  // A failure first: a rank that failed then aborted says more by why it failed.
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_ && ctrl_[r].failed.load(std::memory_order_acquire) && awaited(r))
      ACCL_THROW(acclRemoteError, "rank %d failed: %s", members_[r], note(r).c_str());
  int by = header_->abortedBy.load(std::memory_order_acquire);
  if (by) ACCL_THROW(acclRemoteError, "rank %d aborted the communicator", by - 1);
  if (canSeePeers_) checkPeersAlive(awaited);
}

void ShmComm::setNote(const std::string& text) {
  // Read by peers without a lock: a torn read garbles a diagnostic, nothing else.
  RankCtrl& me = ctrl_[rank_];
  size_t n = std::min(text.size(), sizeof(me.note) - 1);
  memcpy(me.note, text.data(), n);
  me.note[n] = 0;
}

void ShmComm::fail(const std::string& why) {
  setNote(why);
  ctrl_[rank_].failed.store(1, std::memory_order_release);
}

std::string ShmComm::note(int r) const {
  char buf[sizeof(RankCtrl::note)];
  memcpy(buf, ctrl_[r].note, sizeof(buf));
  buf[sizeof(buf) - 1] = 0;
  return buf;
}

void ShmComm::checkPeersAlive(const std::function<bool(int)>& awaited) const {
  auto now = std::chrono::steady_clock::now();
  if (now < nextLivenessCheck_) return;
  nextLivenessCheck_ = now + std::chrono::milliseconds(200);
  std::string gone, stopped;
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    // Death first, then `awaited`: a rank that did its part and then exited is not awaited by
    // the time its death is seen, and a dead process does nothing more.
    char state = 0;
    bool dead = processStartTime(ctrl_[r].pid, &state) != ctrl_[r].startTime;
    // A process stopped by a signal (state T; not t, a debugger's stop) is alive but will not
    // arrive: after ACCL_HEARTBEAT_TIMEOUT seconds it counts as gone, as a silent peer on
    // another node does.
    if (state != 'T') stoppedSince_[r] = {};
    else if (stoppedSince_[r] == std::chrono::steady_clock::time_point{}) stoppedSince_[r] = now;
    bool stuck = state == 'T' && now - stoppedSince_[r] > stoppedLimit_;
    if (!(dead || stuck) || !awaited(r)) continue;
    std::string& list = dead ? gone : stopped;
    list += format("%s%d (pid %lld)", list.empty() ? "" : ", ", members_[r],
                   (long long)ctrl_[r].pid);
  }
  if (gone.empty() && stopped.empty()) return;
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  if (!gone.empty())
    ACCL_THROW(acclRemoteError, "the process of rank %s on host %s is gone (killed, crashed or "
               "exited)", gone.c_str(), host);
  ACCL_THROW(acclRemoteError, "the process of rank %s on host %s has been stopped (SIGSTOP) for "
             "more than ACCL_HEARTBEAT_TIMEOUT=%g s", stopped.c_str(), host,
             std::chrono::duration<double>(stoppedLimit_).count());
}

void ShmComm::announceAbort() {
  int32_t none = 0;
  header_->abortedBy.compare_exchange_strong(none, members_[rank_] + 1);
}

void ShmComm::cmaRead(int r, void* local, uint64_t remote, size_t bytes) const {
  cmaCopy(r, local, remote, bytes, false, mapped(r, remote, bytes));
}

const char* ShmComm::readIn(int r, uint64_t remote, size_t bytes, char* buf) const {
  if (const char* there = mapped(r, remote, bytes)) return there;
  cmaCopy(r, buf, remote, bytes, false, nullptr);
  return buf;
}

void ShmComm::cmaWrite(int r, uint64_t remote, const void* local, size_t bytes) const {
  cmaCopy(r, const_cast<void*>(local), remote, bytes, true, mapped(r, remote, bytes));
}

void ShmComm::postWrite(int r, const HostRegion& region, uint64_t remote, const void* local,
                        size_t bytes) const {
  cmaCopy(r, const_cast<void*>(local), remote, bytes, true, mappedIn(r, region, remote, bytes));
}

void ShmComm::cmaCopy(int r, void* local, uint64_t remote, size_t bytes, bool write,
                      char* there) const {
  char* mine = static_cast<char*>(local);
  // Shared host memory: the peer's buffer is mapped here, no kernel copy needed (2 ranks,
  // in-place all_gather of 16-64 MiB: 0.3-0.9 of the time; docs/algorithms.md).
  if (there) {
    if (write) copyUncached(there, mine, bytes, size_t(4) << 20);  // measured so; not copyOnce
    else memcpy(mine, there, bytes);
    return;
  }
  while (bytes > 0) {
    iovec l{mine, bytes}, rm{reinterpret_cast<void*>(remote), bytes};
    ssize_t n = write ? process_vm_writev(ctrl_[r].pid, &l, 1, &rm, 1, 0)
                      : process_vm_readv(ctrl_[r].pid, &l, 1, &rm, 1, 0);
    if (n <= 0)
      ACCL_THROW(acclSystemError, "%s %zu bytes %s rank %d (pid %lld) failed: %s",
                 write ? "writing" : "reading", bytes, write ? "to" : "from", members_[r],
                 (long long)ctrl_[r].pid, n < 0 ? strerror(errno) : "nothing copied");
    mine += n;
    remote += n;
    bytes -= n;
  }
}

char* ShmComm::cmaScratch(const void* out) {
  if (cmaScratch_.empty()) cmaScratch_.resize(nranks_ * cmaChunkBytes() + 2 * kPage);
  const uintptr_t page = alignUp(reinterpret_cast<uintptr_t>(cmaScratch_.data()), kPage);
  return reinterpret_cast<char*>(page + reinterpret_cast<uintptr_t>(out) % kPage);
}

char* ShmComm::aside(size_t bytes) {
  if (bytes <= asideBytes_) return aside_;
  constexpr size_t kHuge = size_t(2) << 20;
  if (aside_) munmap(aside_, asideBytes_);
  aside_ = nullptr;
  asideBytes_ = 0;
  // Mapped with a huge page's slack, then trimmed to the aligned part.
  const size_t size = alignUp(bytes, kHuge);
  void* m = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ACCL_SYSCHECK(m == MAP_FAILED ? -1 : 0, "mmap of " + std::to_string(size >> 20) + " MiB",
                "the copy of an in-place input");
  char* raw = static_cast<char*>(m);
  char* p = reinterpret_cast<char*>(alignUp(reinterpret_cast<uintptr_t>(raw), kHuge));
  if (p > raw) munmap(raw, p - raw);
  munmap(p + size, raw + kHuge - p);
  madvise(p, size, MADV_HUGEPAGE);  // a hint: without huge pages the buffer still works
  aside_ = p;
  asideBytes_ = size;
  return aside_;
}

void ShmComm::nextBox(bool write, size_t bytes) {
  const uint64_t k = boxStep_++ % kBoxes;
  // Readers of this box's last use (0: none yet) read it after arriving at boxUsed_[k], before
  // their next arrival.
  if (write && boxUsed_[k]) waitEpoch(boxUsed_[k] + 1);
  boxUsed_[k] = epoch_ + 1;  // the epoch this step arrives at
  box_ = k;
  wide_ = bytes > kHalfStampAt && bytes <= kStampAt;
  beside_ = bytes <= kStampAt;
}

void ShmComm::waitStamp(const std::atomic<uint64_t>& stamp, uint64_t want, int r, long spinNs) {
  if (stamp.load(std::memory_order_acquire) >= want) return;
  auto missing = [&](int q) { return q == r && stamp.load(std::memory_order_acquire) < want; };
  Backoff wait(args_->timeout, spinNs, [&] { checkAbort(missing); });
  while (stamp.load(std::memory_order_acquire) < want) wait.pause([&] { return awaited(missing); });
}

std::string ShmComm::awaited(const std::function<bool(int)>& missing) const {
  std::string list, notes;
  for (int q = 0; q < nranks_; ++q) {
    if (!missing(q)) continue;
    list += (list.empty() ? "" : ",") + std::to_string(members_[q]);
    // A rank that is itself blocked on another node says on whom (multi-node only).
    std::string n = note(q);
    if (!n.empty()) notes += format("; rank %d is %s", members_[q], n.c_str());
  }
  return "ranks " + list + " to arrive" + notes;
}

void ShmComm::arrive() { ctrl_[rank_].epoch.store(++epoch_, std::memory_order_release); }

void ShmComm::waitRanks(int only, uint64_t epoch) {
  auto missing = [this, only, epoch](int r) {
    return (only < 0 || r == only) && ctrl_[r].epoch.load(std::memory_order_acquire) < epoch;
  };
  Backoff wait(args_->timeout, spinNs_, [&] { checkAbort(missing); });
  uint64_t lowest = UINT64_MAX;  // the least epoch seen: all have reached it, maybe past `epoch`
  for (int r = only < 0 ? 0 : only; r < (only < 0 ? nranks_ : only + 1); ++r) {
    uint64_t e;
    while ((e = ctrl_[r].epoch.load(std::memory_order_acquire)) < epoch)
      wait.pause([&] { return awaited(missing); });
    lowest = std::min(lowest, e);
  }
  if (only < 0) synced_ = std::max(synced_, lowest);
}

}  // namespace cpu
}  // namespace accl
