#include "transport/tcp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "auth.h"
#include "errors.h"
#include "logging.h"
#include "params.h"

namespace accl {
namespace cpu {
namespace {

constexpr uint32_t kMsgMagic = 0x4d434341;   // "ACCM": a message header
constexpr uint32_t kFailMagic = 0x46434341;  // "ACCF": the sender failed; its text follows
constexpr size_t kMaxFailText = 1024;
constexpr size_t kSplitMin = 256 << 10;      // smaller messages use one connection
constexpr size_t kSplitAlign = 4096;
constexpr double kHelloSeconds = 5.0;        // a connection gets this long to say who it is
constexpr size_t kMaxIo = 4 << 20;           // bytes per system call: keeps the sockets fair

bool sameToken(const uint8_t* a, const uint8_t* b) {
  uint8_t d = 0;  // constant time
  for (int i = 0; i < 16; ++i) d |= a[i] ^ b[i];
  return d == 0;
}

// Latency and dead-link detection. Keepalive probes an idle connection whose peer host vanished
// after ~25 s; TCP_USER_TIMEOUT fails a send that stays unacknowledged for the communicator's
// timeout. The communicator's own deadline bounds every wait in any case.
void tune(int fd, double timeout) {
  int one = 1, idle = 10, intvl = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  unsigned userTimeout = static_cast<unsigned>(std::min(timeout, 3600.0) * 1000);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeout, sizeof(userTimeout));
}

bool aborted(const volatile int* flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

TcpTransport::TcpTransport(const acclBackendCommArgs_v1* args, const std::vector<bool>& remote)
    : rank_(args->rank), nranks_(args->nranks) {
  long long n = paramInt(Param::SocketNsocks);
  ACCL_ARG_CHECK(n >= 1 && n <= kMaxSocks, "ACCL_SOCKET_NSOCKS=%lld is not between 1 and %d", n,
                 kMaxSocks);
  nsocks_ = static_cast<int>(n);
  double interval = paramDouble(Param::Heartbeat);
  beatTimeout_ = paramDouble(Param::HeartbeatTimeout);
  // ACCL_HEARTBEAT_TIMEOUT is checked by the node's ShmComm, made first.
  ACCL_ARG_CHECK(interval >= 0, "ACCL_HEARTBEAT=%g must be >= 0", interval);
  connectMesh(args, remote, interval > 0);
  if (interval > 0 && std::find(remote.begin(), remote.end(), true) != remote.end()) {
    if (pipe2(stop_, O_CLOEXEC) != 0) ACCL_SYSCHECK(-1, "pipe2", "for the heartbeat thread");
    beats_ = std::thread([this, interval] { heartbeatLoop(interval); });
  }
}

TcpTransport::~TcpTransport() {
  if (beats_.joinable()) {
    char b = 0;
    (void)!write(stop_[1], &b, 1);
    beats_.join();
  }
  for (int fd : stop_)
    if (fd >= 0) ::close(fd);
}

// Sends a byte to every peer each interval and stamps each peer's arrivals. A peer whose
// connection closed or failed is no longer polled: its stamp ages, which only matters while a
// rank waits on it, and then its data connections report the closure first.
void TcpTransport::heartbeatLoop(double interval) {
  std::vector<pollfd> fds;
  std::vector<int> who;
  std::vector<bool> gone(nranks_);
  const int64_t step = static_cast<int64_t>(interval * 1e9);
  int64_t next = nowNs();
  char sink[256];
  for (;;) {
    int64_t now = nowNs();
    if (now >= next) {
      for (int q = 0; q < nranks_; ++q)
        if (!socks_[q].empty() && !gone[q])
          (void)send(socks_[q][nsocks_].fd(), "h", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      next = std::max(next + step, now);
    }
    fds.assign(1, {stop_[0], POLLIN, 0});
    who.assign(1, -1);
    for (int q = 0; q < nranks_; ++q)
      if (!socks_[q].empty() && !gone[q]) {
        fds.push_back({socks_[q][nsocks_].fd(), POLLIN, 0});
        who.push_back(q);
      }
    int ms = static_cast<int>((next - nowNs()) / 1000000) + 1;
    if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    for (size_t k = 1; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      ssize_t got = recv(fds[k].fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (got > 0) lastBeat_[who[k]].store(nowNs(), std::memory_order_relaxed);
      else if (got == 0 || (errno != EAGAIN && errno != EINTR)) gone[who[k]] = true;
    }
  }
}

double TcpTransport::heartbeatAge(int r) const {
  int64_t last = beats_.joinable() ? lastBeat_[r].load(std::memory_order_relaxed) : 0;
  return last ? (nowNs() - last) / 1e9 : -1;
}

void TcpTransport::checkPeer(int r) const {
  double age = heartbeatAge(r);
  if (age > beatTimeout_)
    ACCL_THROW(acclRemoteError, "%s sent no heartbeat for %.1f s (ACCL_HEARTBEAT_TIMEOUT=%g): "
               "its process is stopped or hung, or its host or the link is down",
               peerName(r).c_str(), age, beatTimeout_);
}

void TcpTransport::connectMesh(const acclBackendCommArgs_v1* args,
                               const std::vector<bool>& remote, bool heartbeat) {
  const volatile int* abortFlag = args->abortFlag;
  Deadline dl = Deadline::in(args->timeout);
  std::vector<TcpEndpoint> eps(nranks_);
  TcpEndpoint& mine = eps[rank_];
  mine.nsocks = nsocks_;
  mine.heartbeat = heartbeat;
  const int conns = nsocks_ + 1;  // the data connections and the heartbeat's
  Socket listener;
  bool any = std::find(remote.begin(), remote.end(), true) != remote.end();
  if (any) {
    SockAddr a = localAddress();
    listener = Socket::listen(a, false);
    mine.addr = toWire(a);
    randomBytes(mine.token, sizeof(mine.token));
    gethostname(mine.host, sizeof(mine.host) - 1);
    ACCL_INFO("NET", "rank %d: TCP transport listening at %s, %d connections per peer", rank_,
              a.str().c_str(), nsocks_);
  }
  acclResult_t r = args->allGather(args->bootstrap, eps.data(), sizeof(TcpEndpoint));
  if (r != acclSuccess) ACCL_THROW(r, "bootstrap exchange of TCP addresses failed");
  addrs_.resize(nranks_);
  hosts_.resize(nranks_);
  socks_.resize(nranks_);
  midSend_.assign(nranks_, 0);
  for (int q = 0; q < nranks_; ++q) {
    if (!remote[q]) continue;
    if (eps[q].nsocks != nsocks_)
      ACCL_THROW(acclInvalidUsage, "ACCL_SOCKET_NSOCKS is %d on rank %d and %d on rank %d: all "
                 "ranks must use the same value", nsocks_, rank_, eps[q].nsocks, q);
    addrs_[q] = fromWire(eps[q].addr);
    eps[q].host[sizeof(eps[q].host) - 1] = 0;
    hosts_[q] = eps[q].host;
    socks_[q].resize(conns);
  }
  lastBeat_.reset(new std::atomic<int64_t>[nranks_]);
  for (int q = 0; q < nranks_; ++q) lastBeat_[q] = remote[q] && eps[q].heartbeat ? nowNs() : 0;

  // The lower rank of each pair connects. Connections complete in the listener's backlog, so
  // connecting first and accepting second cannot deadlock.
  for (int q = rank_ + 1; q < nranks_; ++q) {
    if (!remote[q]) continue;
    for (int i = 0; i < conns; ++i) {
      Socket s;
      try {
        s = Socket::connect(addrs_[q], dl, abortFlag);
        tune(s.fd(), args->timeout);
        TcpHello h{kTcpHelloMagic, rank_, i, nsocks_, {}};
        memcpy(h.token, eps[q].token, sizeof(h.token));
        s.sendAll(&h, sizeof(h), dl, abortFlag);
      } catch (const Error& e) {
        ACCL_THROW(e.code(), "rank %d cannot connect to rank %d over TCP: %s (does "
                   "ACCL_SOCKET_IFNAME select an interface the two can reach each other on?)",
                   rank_, q, e.what());
      }
      socks_[q][i] = std::move(s);
    }
  }

  // Accept the lower ranks' connections; anything else is logged and dropped.
  struct Pending {
    Socket s;
    TcpHello h;
    size_t got;
    Deadline dl;
  };
  std::vector<Pending> pending;
  int expected = 0;
  for (int q = 0; q < rank_; ++q) expected += remote[q] ? conns : 0;
  auto missing = [&] {
    std::string m;
    for (int q = 0; q < rank_; ++q) {
      if (!remote[q]) continue;
      bool all = true;
      for (auto& s : socks_[q]) all &= s.valid();
      if (!all) m += (m.empty() ? "" : ",") + std::to_string(q);
    }
    return m;
  };
  auto drop = [](Pending& p, const std::string& why) {
    ACCL_WARN("NET", "refused TCP connection from %s: %s", p.s.peer().str().c_str(), why.c_str());
    p.s.close();
  };
  while (expected > 0) {
    if (aborted(abortFlag)) ACCL_THROW(acclRemoteError, "communicator aborted");
    if (dl.expired())
      ACCL_THROW(acclTimeout, "rank %d: ranks %s did not connect over TCP within %.1f s (this "
                 "rank listens at %s; check ACCL_SOCKET_IFNAME and firewalls)", rank_,
                 missing().c_str(), args->timeout, fromWire(mine.addr).str().c_str());
    std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
    for (auto& p : pending) fds.push_back({p.s.fd(), POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), std::min<double>(50, dl.remaining() * 1000 + 1));
    if (rc < 0 && errno != EINTR) ACCL_SYSCHECK(rc, "poll", "");
    for (size_t k = 0; k < pending.size(); ++k) {
      Pending& p = pending[k];
      if (fds[k + 1].revents) {
        ssize_t got = recv(p.s.fd(), reinterpret_cast<char*>(&p.h) + p.got, sizeof(p.h) - p.got, 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
          drop(p, got == 0 ? "closed before saying who it is" : strerror(errno));
          continue;
        }
        if (got > 0) p.got += got;
      }
      if (p.got < sizeof(p.h)) {
        if (p.dl.expired()) drop(p, "said nothing for 5 s");
        continue;
      }
      const TcpHello& h = p.h;
      if (h.magic != kTcpHelloMagic) drop(p, "not an accl peer");
      else if (!sameToken(h.token, mine.token)) drop(p, "wrong token (not of this communicator)");
      else if (h.rank < 0 || h.rank >= rank_ || !remote[h.rank] || h.sock < 0 ||
               h.sock >= conns || socks_[h.rank][h.sock].valid())
        drop(p, format("unexpected connection %d of rank %d", h.sock, h.rank));
      else {
        tune(p.s.fd(), args->timeout);
        socks_[h.rank][h.sock] = std::move(p.s);
        --expected;
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending& p) { return !p.s.valid(); }),
                  pending.end());
    if (fds[0].revents) {
      Socket s = listener.accept(Deadline::in(0), abortFlag);
      if (s.valid()) pending.push_back({std::move(s), {}, 0, Deadline::in(kHelloSeconds)});
    }
  }
  for (auto& p : pending) drop(p, "the mesh is complete");
  if (any) ACCL_INFO("NET", "rank %d: TCP mesh complete", rank_);
}

void TcpTransport::start(NetOp& op, bool send, int peer, void* buf, size_t bytes) const {
  op = NetOp();
  op.send = send;
  op.peer = peer;
  op.buf = static_cast<char*>(buf);
  op.bytes = bytes;
  if (send) op.hdr = {kMsgMagic, 0, bytes};
}

size_t TcpTransport::part(size_t bytes, int sock, size_t* off) const {
  if (bytes < kSplitMin || nsocks_ == 1) {
    *off = 0;
    return sock == 0 ? bytes : 0;
  }
  size_t per = (bytes + nsocks_ - 1) / nsocks_;
  size_t chunk = (per + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  *off = std::min(bytes, chunk * sock);
  return std::min(chunk, bytes - *off);
}

std::string TcpTransport::peerName(int r) const {
  return format("rank %d (host %s, %s)", r, hosts_[r].c_str(), addrs_[r].str().c_str());
}

void TcpTransport::lost(const NetOp& op, int sock, int err) const {
  const char* doing = op.send ? "sending to it" : "receiving from it";
  if (!err || err == ECONNRESET || err == EPIPE)
    ACCL_THROW(acclRemoteError, "%s closed its connection while this rank was %s: its process "
               "ended (killed, crashed or exited), or it destroyed or aborted the communicator",
               peerName(op.peer).c_str(), doing);
  ACCL_THROW(acclRemoteError, "connection %d to %s failed while %s: %s%s", sock,
             peerName(op.peer).c_str(), doing, strerror(err),
             err == ETIMEDOUT ? " (its host or the link is down)" : "");
}

bool TcpTransport::progress(NetOp& op) {
  if (op.complete) return false;
  std::vector<Socket>& ss = socks_[op.peer];
  bool moved = false, complete = true;
  for (int i = 0; i < nsocks_; ++i) {
    size_t off;
    size_t len = part(op.bytes, i, &off);
    while (op.done[i] < len || (i == 0 && op.hdrDone < sizeof(op.hdr))) {
      // Socket 0 moves the header and its part in one call.
      iovec iov[2];
      int n = 0;
      if (i == 0 && op.hdrDone < sizeof(op.hdr))
        iov[n++] = {reinterpret_cast<char*>(&op.hdr) + op.hdrDone, sizeof(op.hdr) - op.hdrDone};
      if (op.done[i] < len)
        iov[n++] = {op.buf + off + op.done[i], std::min(len - op.done[i], kMaxIo)};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = n;
      ssize_t got = op.send ? sendmsg(ss[i].fd(), &m, MSG_NOSIGNAL) : recvmsg(ss[i].fd(), &m, 0);
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        lost(op, i, errno);
      }
      if (got == 0) lost(op, i, 0);
      moved = true;
      size_t g = static_cast<size_t>(got);
      if (i == 0 && op.hdrDone < sizeof(op.hdr)) {
        size_t h = std::min(g, sizeof(op.hdr) - op.hdrDone);
        op.hdrDone += h;
        g -= h;
        if (!op.send && op.hdrDone == sizeof(op.hdr)) {
          if (op.hdr.magic == kFailMagic) peerFailed(op, op.buf + off + op.done[i], g);
          if (op.hdr.magic != kMsgMagic)
            ACCL_THROW(acclRemoteError, "the stream from %s is out of step (bad message header)",
                       peerName(op.peer).c_str());
          if (op.hdr.bytes != op.bytes)
            ACCL_THROW(acclRemoteError, "expected %zu bytes from %s, which sent a message of %llu "
                       "bytes: sends and receives do not match", op.bytes,
                       peerName(op.peer).c_str(), (unsigned long long)op.hdr.bytes);
        }
      }
      op.done[i] += g;
    }
    bool sockDone = op.done[i] == len && (i != 0 || op.hdrDone == sizeof(op.hdr));
    if (i == 0 && op.send) midSend_[op.peer] = op.hdrDone > 0 && !sockDone;
    complete &= sockDone;
  }
  op.complete = complete;
  return moved;
}

void TcpTransport::peerFailed(const NetOp& op, const char* text, size_t got) const {
  std::string why(std::min<uint64_t>(op.hdr.bytes, kMaxFailText), '\0');
  got = std::min(got, why.size());
  memcpy(&why[0], text, got);
  // The rest of the text is on its way, or lost with the peer: a short wait, then what came.
  Deadline dl = Deadline::in(0.2);
  int fd = socks_[op.peer][0].fd();
  while (got < why.size() && !dl.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) < 0 && errno != EINTR) break;
    ssize_t n = recv(fd, &why[got], why.size() - got, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (n > 0) got += n;
  }
  why.resize(got);
  ACCL_THROW(acclRemoteError, "%s failed: %s", peerName(op.peer).c_str(), why.c_str());
}

void TcpTransport::announceFailure(const std::string& why) {
  if (announced_) return;  // once: the first failure is the cause
  announced_ = true;
  for (int q = 0; q < nranks_; ++q) {
    if (socks_[q].empty()) continue;
    if (!midSend_[q]) {
      std::string text = why.substr(0, kMaxFailText);
      NetOp::Header h{kFailMagic, 0, text.size()};
      iovec iov[2] = {{&h, sizeof(h)}, {&text[0], text.size()}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      (void)sendmsg(socks_[q][0].fd(), &m, MSG_DONTWAIT | MSG_NOSIGNAL);  // best effort
    }
    for (int i = 0; i < nsocks_; ++i)  // the heartbeat goes on: this process is alive
      if (socks_[q][i].valid()) shutdown(socks_[q][i].fd(), SHUT_WR);
  }
}

void TcpTransport::pollEvents(const NetOp& op, std::vector<pollfd>* fds) const {
  if (op.complete) return;
  for (int i = 0; i < nsocks_; ++i) {
    size_t off;
    size_t len = part(op.bytes, i, &off);
    if (op.done[i] < len || (i == 0 && op.hdrDone < sizeof(op.hdr)))
      fds->push_back({socks_[op.peer][i].fd(), short(op.send ? POLLOUT : POLLIN), 0});
  }
}

}  // namespace cpu
}  // namespace accl
