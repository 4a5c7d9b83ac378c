#include "bootstrap.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <deque>
#include <mutex>

#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "auth.h"
#include "errors.h"
#include "logging.h"
#include "params.h"

namespace accl {
namespace {

constexpr uint32_t kIdMagic = 0x4c434341;  // "ACCL"
constexpr uint32_t kWireVersion = 1;       // bumped whenever a message below changes
constexpr uint16_t kIdRootAtRank0 = 1;     // ACCL_COMM_ID mode
constexpr uint32_t kHelloMagic = 0x4f4c4548, kStarMagic = 0x52415453, kGatherMagic = 0x48544741;
// A stranger gets this long to complete the handshake, so a stalled one cannot hold up the job.
constexpr double kHandshakeSeconds = 5.0;

struct IdBody {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint8_t secret[kSecretBytes];
  uint64_t commHash;
  WireAddr root;
};
static_assert(sizeof(IdBody) <= ACCL_UNIQUE_ID_BYTES, "unique id too small");

struct Challenge {
  uint32_t magic, version;
  uint8_t nonce[kNonceBytes];
};
struct Response {
  uint32_t magic, version;
  uint8_t nonce[kNonceBytes];
  uint8_t mac[kMacBytes];
};
struct Hello {
  uint32_t magic;
  int32_t rank, nranks;
  WireAddr listen;  // rank 0's star address; empty for others
  char hostId[96];
};
struct Reply {
  int32_t status;  // an acclResult_t
  char msg[200];
};
struct StarJoin {
  uint32_t magic;
  int32_t rank;
};
struct GatherHeader {
  uint32_t magic;
  uint32_t pad;
  uint64_t bytes;
};

void mac(const uint8_t* secret, char role, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  uint8_t msg[1 + 2 * kNonceBytes];
  msg[0] = role;
  memcpy(msg + 1, a, kNonceBytes);
  memcpy(msg + 1 + kNonceBytes, b, kNonceBytes);
  siphash128(secret, msg, sizeof(msg), out);
}

bool macEqual(const uint8_t* a, const uint8_t* b) {
  uint8_t d = 0;  // constant time: a timing side channel must not reveal the MAC byte by byte
  for (size_t i = 0; i < kMacBytes; ++i) d |= a[i] ^ b[i];
  return d == 0;
}

// Server side of the handshake. False (and the reason logged) when the peer cannot prove the
// secret; the caller then drops the connection and carries on.
bool serverHandshake(Socket& s, const uint8_t* secret, Deadline dl) {
  Challenge ch{kIdMagic, kWireVersion, {}};
  randomBytes(ch.nonce, sizeof(ch.nonce));
  Response rsp;
  try {
    s.sendAll(&ch, sizeof(ch), dl, nullptr);
    s.recvAll(&rsp, sizeof(rsp), dl, nullptr);
  } catch (const Error& e) {
    ACCL_WARN("BOOTSTRAP", "refused connection from %s: incomplete handshake (%s)",
              s.peer().str().c_str(), e.what());
    return false;
  }
  uint8_t want[kMacBytes];
  mac(secret, 'C', ch.nonce, rsp.nonce, want);
  if (rsp.magic != kIdMagic || rsp.version != kWireVersion || !macEqual(want, rsp.mac)) {
    ACCL_WARN("BOOTSTRAP", "refused connection from %s: %s", s.peer().str().c_str(),
              rsp.magic != kIdMagic        ? "not an accl peer"
              : rsp.version != kWireVersion ? "other accl wire version"
                                            : "wrong secret");
    return false;
  }
  uint8_t confirm[kMacBytes];
  mac(secret, 'S', rsp.nonce, ch.nonce, confirm);
  try {
    s.sendAll(confirm, sizeof(confirm), dl, nullptr);
  } catch (const Error&) {
    return false;
  }
  return true;
}

// Client side: proves the secret and checks that the server knows it too.
void clientHandshake(Socket& s, const uint8_t* secret, Deadline dl, const volatile int* abortFlag,
                     const char* what) {
  Challenge ch;
  s.recvAll(&ch, sizeof(ch), dl, abortFlag);
  if (ch.magic != kIdMagic || ch.version != kWireVersion)
    ACCL_THROW(acclInvalidUsage, "%s at %s is not an accl %u rendezvous (magic %#x, version %u)",
               what, s.peer().str().c_str(), kWireVersion, ch.magic, ch.version);
  Response rsp{kIdMagic, kWireVersion, {}, {}};
  randomBytes(rsp.nonce, sizeof(rsp.nonce));
  mac(secret, 'C', ch.nonce, rsp.nonce, rsp.mac);
  s.sendAll(&rsp, sizeof(rsp), dl, abortFlag);
  uint8_t confirm[kMacBytes], want[kMacBytes];
  try {
    s.recvAll(confirm, sizeof(confirm), dl, abortFlag);
  } catch (const Error& e) {
    if (e.code() == acclRemoteError)
      ACCL_THROW(acclInvalidUsage, "%s at %s refused this rank: the unique id's secret does not "
                 "match (an id from another job, or corrupted in transit)", what,
                 s.peer().str().c_str());
    throw;
  }
  mac(secret, 'S', rsp.nonce, ch.nonce, want);
  if (!macEqual(want, confirm))
    ACCL_THROW(acclInvalidUsage, "%s at %s could not prove the unique id's secret", what,
               s.peer().str().c_str());
}

// Accepts connections and authenticates each on a short-lived thread of its own, so a stalled
// or hostile peer (a slowloris, a scanner) delays nobody: next() hands out authenticated
// connections together with their first message.
class Acceptor {
 public:
  Acceptor(Socket& listener, const uint8_t* secret, size_t firstBytes)
      : listener_(listener), firstBytes_(firstBytes) {
    memcpy(secret_, secret, kSecretBytes);
    ACCL_SYSCHECK(shared_->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "eventfd", "");
  }

  // The next authenticated connection and its first `firstBytes` bytes; false at the deadline.
  bool next(Deadline dl, const volatile int* abortFlag, Socket* out, void* first) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        if (!shared_->ready.empty()) {
          *out = std::move(shared_->ready.front().first);
          memcpy(first, shared_->ready.front().second.data(), firstBytes_);
          shared_->ready.pop_front();
          return true;
        }
      }
      if (abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE))
        ACCL_THROW(acclRemoteError, "communicator aborted");
      double rem = dl.remaining();
      if (rem <= 0) return false;
      pollfd p[2] = {{listener_.fd(), POLLIN, 0}, {shared_->wake, POLLIN, 0}};
      int r = poll(p, 2, std::min<double>(50, rem * 1000 + 1));
      if (r < 0 && errno != EINTR) ACCL_SYSCHECK(r, "poll", "");
      if (p[1].revents) {
        uint64_t v;
        (void)!read(shared_->wake, &v, sizeof(v));
      }
      if (p[0].revents) admit();
    }
  }

 private:
  static constexpr int kMaxPending = 64;
  struct Shared {
    std::mutex mu;
    std::deque<std::pair<Socket, std::vector<char>>> ready;
    int pending = 0;
    int wake = -1;  // eventfd: a handshake finished
    ~Shared() { close(wake); }
  };

  void admit() {
    Socket s = listener_.accept(Deadline::in(0), nullptr);
    if (!s.valid()) return;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->pending >= kMaxPending) {
        ACCL_WARN("BOOTSTRAP", "refused connection from %s: %d handshakes already pending",
                  s.peer().str().c_str(), kMaxPending);
        return;
      }
      ++shared_->pending;
    }
    std::array<uint8_t, kSecretBytes> secret;
    memcpy(secret.data(), secret_, kSecretBytes);
    std::thread([sh = shared_, s = std::move(s), secret, n = firstBytes_]() mutable {
      std::vector<char> first(n);
      bool ok = serverHandshake(s, secret.data(), Deadline::in(kHandshakeSeconds));
      if (ok) {
        try {
          s.recvAll(first.data(), n, Deadline::in(kHandshakeSeconds), nullptr);
        } catch (const Error& e) {
          ACCL_WARN("BOOTSTRAP", "dropped %s after its handshake: %s", s.peer().str().c_str(),
                    e.what());
          ok = false;
        }
      }
      std::lock_guard<std::mutex> lock(sh->mu);
      --sh->pending;
      if (ok) sh->ready.emplace_back(std::move(s), std::move(first));
      uint64_t one = 1;
      (void)!write(sh->wake, &one, sizeof(one));
    }).detach();
  }

  Socket& listener_;
  uint8_t secret_[kSecretBytes];
  size_t firstBytes_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

// The root service: collects one Hello per rank and sends everyone the table. Runs on its own
// thread and ends when the rendezvous completes, fails, or the deadline passes.
void rootService(Socket listener, IdBody id, double timeout) {
  Deadline dl = Deadline::in(timeout);
  std::vector<Socket> conns;
  std::vector<Hello> hellos;
  int nranks = -1;
  auto reject = [](Socket& s, acclResult_t code, const std::string& msg) {
    Reply r{code, {}};
    snprintf(r.msg, sizeof(r.msg), "%s", msg.c_str());
    try {
      s.sendAll(&r, sizeof(r), Deadline::in(1), nullptr);
    } catch (const Error&) {
    }
  };
  Acceptor acceptor(listener, id.secret, sizeof(Hello));
  try {
    while (nranks < 0 || (int)conns.size() < nranks) {
      Socket s;
      Hello h;
      if (!acceptor.next(dl, nullptr, &s, &h)) {
        // Tell the ranks that came which ones did not; they would time out anyway.
        std::string missing;
        for (int r = 0; r < nranks; ++r) {
          bool came = false;
          for (auto& h : hellos) came |= h.rank == r;
          if (!came) missing += (missing.empty() ? "" : ",") + std::to_string(r);
        }
        std::string msg = format("ranks %s did not join the rendezvous within %.1f s",
                                 missing.c_str(), timeout);
        ACCL_WARN("BOOTSTRAP", "%s", msg.c_str());
        for (auto& c : conns) reject(c, acclTimeout, msg);
        return;
      }
      h.hostId[sizeof(h.hostId) - 1] = 0;
      if (h.magic != kHelloMagic || h.nranks <= 0 || h.rank < 0 || h.rank >= h.nranks) {
        reject(s, acclInvalidArgument, format("bad rank %d of %d", h.rank, h.nranks));
        continue;
      }
      if (nranks < 0) nranks = h.nranks;
      if (h.nranks != nranks) {
        reject(s, acclInvalidArgument,
               format("rank %d says nranks=%d but earlier ranks said %d", h.rank, h.nranks,
                      nranks));
        continue;
      }
      bool dup = false;
      for (auto& o : hellos) dup |= o.rank == h.rank;
      if (dup) {
        reject(s, acclInvalidArgument, format("rank %d joined twice", h.rank));
        continue;
      }
      conns.push_back(std::move(s));
      hellos.push_back(h);
    }
    std::vector<Hello> table(nranks);
    for (auto& h : hellos) table[h.rank] = h;
    Reply ok{acclSuccess, {}};
    for (auto& c : conns) {
      try {
        c.sendAll(&ok, sizeof(ok), dl, nullptr);
        c.sendAll(table.data(), table.size() * sizeof(Hello), dl, nullptr);
      } catch (const Error& e) {
        ACCL_WARN("BOOTSTRAP", "rendezvous could not answer %s: %s", c.peer().str().c_str(),
                  e.what());
      }
    }
    ACCL_INFO("BOOTSTRAP", "rendezvous done: %d ranks", nranks);
  } catch (const Error& e) {
    ACCL_WARN("BOOTSTRAP", "rendezvous failed: %s", e.what());
  }
}

void startRootService(const SockAddr& want, const IdBody& id, bool reuseAddr, WireAddr* bound) {
  SockAddr addr = want;
  Socket l = Socket::listen(addr, reuseAddr);
  if (bound) *bound = toWire(addr);
  double timeout = paramDouble(Param::Timeout);
  ACCL_INFO("BOOTSTRAP", "rendezvous listening at %s", addr.str().c_str());
  std::thread(rootService, std::move(l), id, timeout).detach();
}

IdBody decodeId(const acclUniqueId& uid) {
  IdBody id;
  memcpy(&id, uid.internal, sizeof(id));
  if (id.magic != kIdMagic)
    ACCL_THROW(acclInvalidArgument, "the unique id was not made by acclGetUniqueId (bad magic)");
  if (id.version != kWireVersion)
    ACCL_THROW(acclInvalidUsage, "the unique id is of wire version %u, this library speaks %u: "
               "all ranks must run the same accl version", id.version, kWireVersion);
  return id;
}

}  // namespace

void createUniqueId(acclUniqueId* uid, bool fromEnv) {
  IdBody id{};
  id.magic = kIdMagic;
  id.version = kWireVersion;
  randomBytes(&id.commHash, sizeof(id.commHash));
  std::string commId = fromEnv ? paramString(Param::CommId) : "";
  if (!commId.empty()) {
    // Every rank computes the same id from the environment, so the secret cannot be random.
    id.flags = kIdRootAtRank0;
    std::string secret = paramString(Param::CommSecret);
    if (secret.empty()) {
      ACCL_WARN("BOOTSTRAP", "ACCL_COMM_ID is set without ACCL_COMM_SECRET: any process that "
                "knows the address can join; set ACCL_COMM_SECRET to the same value on all ranks");
      secret = commId;
    }
    uint8_t key[16] = {};
    siphash128(key, secret.data(), secret.size(), id.secret);
    siphash128(id.secret, commId.data(), commId.size(), key);
    memcpy(&id.commHash, key, sizeof(id.commHash));
    id.root = toWire(parseHostPort(commId));
  } else {
    randomBytes(id.secret, sizeof(id.secret));
    startRootService(localAddress(), id, false, &id.root);
  }
  memset(uid->internal, 0, sizeof(uid->internal));
  memcpy(uid->internal, &id, sizeof(id));
}

Bootstrap::Bootstrap(const acclUniqueId& uid, int rank, int nranks, double timeout,
                     const volatile int* abortFlag)
    : rank_(rank), nranks_(nranks), abortFlag_(abortFlag) {
  IdBody id = decodeId(uid);
  commHash_ = id.commHash;
  Deadline dl = Deadline::in(timeout);
  SockAddr rootAddr = fromWire(id.root);
  if ((id.flags & kIdRootAtRank0) && rank == 0) startRootService(rootAddr, id, true, nullptr);

  // Rank 0 listens for the star before it says hello, so its address can go in the table.
  Socket listener;
  Hello me{kHelloMagic, rank, nranks, {}, {}};
  if (rank == 0 && nranks > 1) {
    SockAddr a = localAddress();
    listener = Socket::listen(a, false);
    me.listen = toWire(a);
  }
  snprintf(me.hostId, sizeof(me.hostId), "%s", hostIdentity().c_str());

  std::vector<Hello> table(nranks);
  {
    Socket root;
    try {
      root = Socket::connect(rootAddr, dl, abortFlag);
    } catch (const Error& e) {
      ACCL_THROW(e.code(), "rank %d cannot reach the rendezvous of the unique id at %s: %s (is "
                 "the process that called acclGetUniqueId still running?)", rank,
                 rootAddr.str().c_str(), e.what());
    }
    clientHandshake(root, id.secret, dl, abortFlag, "the rendezvous");
    root.sendAll(&me, sizeof(me), dl, abortFlag);
    Reply r;
    try {
      root.recvAll(&r, sizeof(r), dl, abortFlag);
    } catch (const Error& e) {
      if (e.code() == acclTimeout)
        ACCL_THROW(acclTimeout, "rank %d: not all %d ranks joined the rendezvous at %s within "
                   "%.1f s", rank, nranks, rootAddr.str().c_str(), timeout);
      throw;
    }
    r.msg[sizeof(r.msg) - 1] = 0;
    if (r.status != acclSuccess)
      ACCL_THROW((acclResult_t)r.status, "rendezvous refused rank %d: %s", rank, r.msg);
    root.recvAll(table.data(), table.size() * sizeof(Hello), dl, abortFlag);
  }
  for (auto& h : table) {
    h.hostId[sizeof(h.hostId) - 1] = 0;
    hostIds_.emplace_back(h.hostId);
  }

  // The star: every rank keeps one authenticated connection to rank 0.
  peers_.resize(rank == 0 ? nranks : 1);
  if (rank == 0) {
    Acceptor acceptor(listener, id.secret, sizeof(StarJoin));
    for (int joined = 1; joined < nranks;) {
      Socket s;
      StarJoin j;
      if (!acceptor.next(dl, abortFlag, &s, &j)) {
        std::string missing;
        for (int r = 1; r < nranks; ++r)
          if (!peers_[r].valid()) missing += (missing.empty() ? "" : ",") + std::to_string(r);
        ACCL_THROW(acclTimeout, "rank 0: ranks %s did not connect within %.1f s",
                   missing.c_str(), timeout);
      }
      if (j.magic != kStarMagic || j.rank <= 0 || j.rank >= nranks || peers_[j.rank].valid()) {
        ACCL_WARN("BOOTSTRAP", "dropped %s: bad join as rank %d", s.peer().str().c_str(), j.rank);
        continue;
      }
      peers_[j.rank] = std::move(s);
      ++joined;
    }
  } else {
    peers_[0] = Socket::connect(fromWire(table[0].listen), dl, abortFlag);
    clientHandshake(peers_[0], id.secret, dl, abortFlag, "rank 0");
    StarJoin j{kStarMagic, rank};
    peers_[0].sendAll(&j, sizeof(j), dl, abortFlag);
  }
  // Everyone connected: no rank leaves init before the star is complete.
  barrier(std::max(0.0, dl.remaining()));
}

void Bootstrap::allGather(void* data, size_t bytes, double timeout) {
  if (nranks_ == 1) return;
  Deadline dl = Deadline::in(timeout);
  char* buf = static_cast<char*>(data);
  GatherHeader h{kGatherMagic, 0, bytes};
  int current = 0;  // the peer being served, for the error message
  try {
    if (rank_ == 0) {
      for (current = 1; current < nranks_; ++current) {
        GatherHeader in;
        peers_[current].recvAll(&in, sizeof(in), dl, abortFlag_);
        if (in.magic != kGatherMagic || in.bytes != bytes)
          ACCL_THROW(acclInvalidUsage, "bootstrap out of step: rank %d sent %llu bytes where "
                     "rank 0 expected %zu", current, (unsigned long long)in.bytes, bytes);
        peers_[current].recvAll(buf + current * bytes, bytes, dl, abortFlag_);
      }
      for (current = 1; current < nranks_; ++current)
        peers_[current].sendAll(buf, nranks_ * bytes, dl, abortFlag_);
    } else {
      peers_[0].sendAll(&h, sizeof(h), dl, abortFlag_);
      peers_[0].sendAll(buf + rank_ * bytes, bytes, dl, abortFlag_);
      peers_[0].recvAll(buf, nranks_ * bytes, dl, abortFlag_);
    }
  } catch (const Error& e) {
    if (e.code() == acclInvalidUsage) throw;
    ACCL_THROW(e.code(), "bootstrap exchange between rank %d and rank %d (host %s): %s", rank_,
               current, hostIds_[current].c_str(), e.what());
  }
}

void Bootstrap::barrier(double timeout) {
  std::vector<char> b(nranks_);
  allGather(b.data(), 1, timeout);
}

}  // namespace accl
