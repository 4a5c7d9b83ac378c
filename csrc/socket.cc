#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "errors.h"
#include "params.h"

namespace accl {
namespace {

constexpr int kPollSliceMs = 50;  // how often a blocked socket wait looks at the abort flag

bool aborted(const volatile int* flag) {
  return flag && __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

void setNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  ACCL_SYSCHECK(fl, "fcntl(F_GETFL)", "");
  ACCL_SYSCHECK(fcntl(fd, F_SETFL, fl | O_NONBLOCK), "fcntl(O_NONBLOCK)", "");
}

// Waits until `fd` is ready for `events`; false when the deadline passes.
bool waitReady(int fd, short events, Deadline dl, const volatile int* abortFlag) {
  for (;;) {
    if (aborted(abortFlag)) ACCL_THROW(acclRemoteError, "communicator aborted");
    double rem = dl.remaining();
    if (rem <= 0) return false;
    pollfd p{fd, events, 0};
    int ms = std::min<double>(kPollSliceMs, rem * 1000 + 1);
    int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    ACCL_SYSCHECK(r, "poll", "");
    if (r > 0) return true;
  }
}

}  // namespace

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return format("%s:%d", host, port);
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return format("[%s]:%d", host, port);
  }
  return "(no address)";
}

WireAddr toWire(const SockAddr& a) {
  WireAddr w{};
  w.family = a.ss.ss_family;
  if (w.family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a.ss);
    w.port = in->sin_port;
    memcpy(w.addr, &in->sin_addr, 4);
  } else if (w.family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&a.ss);
    w.port = in->sin6_port;
    w.scope = in->sin6_scope_id;
    memcpy(w.addr, &in->sin6_addr, 16);
  }
  return w;
}

SockAddr fromWire(const WireAddr& w) {
  SockAddr a;
  if (w.family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.ss);
    in->sin_family = AF_INET;
    in->sin_port = w.port;
    memcpy(&in->sin_addr, w.addr, 4);
    a.len = sizeof(sockaddr_in);
  } else if (w.family == AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&a.ss);
    in->sin6_family = AF_INET6;
    in->sin6_port = w.port;
    in->sin6_scope_id = w.scope;
    memcpy(&in->sin6_addr, w.addr, 16);
    a.len = sizeof(sockaddr_in6);
  } else {
    ACCL_THROW(acclInvalidArgument, "the unique id holds no valid address (family %d): it was "
               "not made by acclGetUniqueId or was corrupted in transit", w.family);
  }
  return a;
}

SockAddr parseHostPort(const std::string& hp) {
  std::string host, port;
  if (!hp.empty() && hp[0] == '[') {
    size_t e = hp.find("]:");
    ACCL_ARG_CHECK(e != std::string::npos, "'%s' is not [ipv6]:port", hp.c_str());
    host = hp.substr(1, e - 1);
    port = hp.substr(e + 2);
  } else {
    size_t c = hp.rfind(':');
    ACCL_ARG_CHECK(c != std::string::npos, "'%s' is not host:port", hp.c_str());
    host = hp.substr(0, c);
    port = hp.substr(c + 1);
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    ACCL_THROW(acclSystemError, "cannot resolve '%s': %s (check the host name and DNS)",
               hp.c_str(), gai_strerror(rc));
  SockAddr a;
  memcpy(&a.ss, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  return a;
}

namespace {

// ACCL_SOCKET_IFNAME as NCCL_SOCKET_IFNAME reads it: "eth,ib" (prefixes), "=eth0" (exact
// names), "^docker,lo" (all but these), "^=docker0".
struct IfFilter {
  bool exclude = false, exact = false;
  std::vector<std::string> names;
  explicit IfFilter(std::string spec) {
    if (!spec.empty() && spec[0] == '^') exclude = true, spec.erase(0, 1);
    if (!spec.empty() && spec[0] == '=') exact = true, spec.erase(0, 1);
    size_t pos = 0;
    while (pos <= spec.size()) {
      size_t comma = spec.find(',', pos);
      if (comma == std::string::npos) comma = spec.size();
      if (comma > pos) names.push_back(spec.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  bool matches(const char* ifname) const {
    bool any = false;
    for (auto& n : names)
      any |= exact ? n == ifname : strncmp(ifname, n.c_str(), n.size()) == 0;
    return any != exclude;
  }
};

}  // namespace

SockAddr localAddress() {
  std::string want = paramString(Param::SocketIfname);
  std::string family = paramString(Param::SocketFamily);
  int onlyFamily = 0;
  if (family == "AF_INET" || family == "4") onlyFamily = AF_INET;
  else if (family == "AF_INET6" || family == "6") onlyFamily = AF_INET6;
  else ACCL_ARG_CHECK(family.empty(), "ACCL_SOCKET_FAMILY=%s is not AF_INET or AF_INET6",
                      family.c_str());
  IfFilter filter(want);
  ifaddrs* ifs = nullptr;
  ACCL_SYSCHECK(getifaddrs(&ifs), "getifaddrs", "");
  // Best first: not loopback, then IPv4, then the interface order. Link-local IPv6 addresses
  // are skipped: their scope id means nothing on another host.
  SockAddr best;
  int bestRank = 1 << 30, order = 0;
  for (ifaddrs* i = ifs; i; i = i->ifa_next, ++order) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (onlyFamily && fam != onlyFamily) continue;
    if (fam == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;
    bool isLo = i->ifa_flags & IFF_LOOPBACK;
    if (!want.empty() && !filter.matches(i->ifa_name)) continue;
    int rank = (isLo ? 1 << 20 : 0) + (fam == AF_INET ? 0 : 1 << 19) + order;
    if (rank >= bestRank) continue;
    bestRank = rank;
    best.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&best.ss, i->ifa_addr, best.len);
  }
  freeifaddrs(ifs);
  if (!best.len)
    ACCL_THROW(acclSystemError, "no up interface matches ACCL_SOCKET_IFNAME=%s%s%s (see `ip addr`)",
               want.c_str(), family.empty() ? "" : " and ACCL_SOCKET_FAMILY=", family.c_str());
  return best;
}

std::string hostIdentity() {
  std::string id = paramString(Param::HostId);
  if (!id.empty()) return id;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + ":" + boot;
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = o.peer_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::listen(SockAddr& addr, bool reuseAddr) {
  Socket s(::socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ACCL_SYSCHECK(s.fd_, "socket", "");
  int one = 1;
  if (reuseAddr) setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd_, reinterpret_cast<sockaddr*>(&addr.ss), addr.len) < 0) {
    int e = errno;
    ACCL_THROW(acclSystemError, "bind to %s failed: %s%s", addr.str().c_str(), strerror(e),
               e == EADDRINUSE ? " (another process holds this port: pick another)" : "");
  }
  ACCL_SYSCHECK(::listen(s.fd_, 128), "listen", "");
  ACCL_SYSCHECK(getsockname(s.fd_, reinterpret_cast<sockaddr*>(&addr.ss), &addr.len),
                "getsockname", "");
  setNonBlocking(s.fd_);
  return s;
}

Socket Socket::connect(const SockAddr& addr, Deadline dl, const volatile int* abortFlag) {
  int lastErr = 0;
  for (int attempt = 0;; ++attempt) {
    Socket s(::socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ACCL_SYSCHECK(s.fd_, "socket", "");
    setNonBlocking(s.fd_);
    int r = ::connect(s.fd_, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
    if (r < 0 && errno == EINPROGRESS) {
      if (!waitReady(s.fd_, POLLOUT, dl, abortFlag)) break;
      socklen_t len = sizeof(lastErr);
      getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &lastErr, &len);
      r = lastErr ? -1 : 0;
    } else if (r < 0) {
      lastErr = errno;
    }
    if (r == 0) {
      int one = 1;
      setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      s.peer_ = addr;
      return s;
    }
    // Refused or unreachable: the peer may simply not listen yet. Retry with a growing pause.
    if (dl.expired()) break;
    if (aborted(abortFlag)) ACCL_THROW(acclRemoteError, "communicator aborted");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10 + 10 * attempt, 200)));
  }
  ACCL_THROW(acclTimeout, "could not connect to %s before the timeout: %s", addr.str().c_str(),
             lastErr ? strerror(lastErr) : "no answer");
}

Socket Socket::accept(Deadline dl, const volatile int* abortFlag) {
  for (;;) {
    SockAddr peer;
    peer.len = sizeof(peer.ss);
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer.ss), &peer.len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        ACCL_SYSCHECK(fd, "accept", "");
      if (!waitReady(fd_, POLLIN, dl, abortFlag)) return Socket();
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Socket s(fd);
    s.peer_ = peer;
    return s;
  }
}

void Socket::sendAll(const void* buf, size_t n, Deadline dl, const volatile int* abortFlag) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= w;
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitReady(fd_, POLLOUT, dl, abortFlag))
        ACCL_THROW(acclTimeout, "timed out sending to %s", peer_.str().c_str());
      continue;
    }
    ACCL_THROW(acclRemoteError, "connection to %s lost while sending: %s", peer_.str().c_str(),
               strerror(errno));
  }
}

void Socket::recvAll(void* buf, size_t n, Deadline dl, const volatile int* abortFlag) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd_, p, n, 0);
    if (r > 0) {
      p += r;
      n -= r;
      continue;
    }
    if (r == 0)
      ACCL_THROW(acclRemoteError, "%s closed the connection", peer_.str().c_str());
    if (errno == EAGAIN || errno == EINTR) {
      if (!waitReady(fd_, POLLIN, dl, abortFlag))
        ACCL_THROW(acclTimeout, "timed out waiting for data from %s", peer_.str().c_str());
      continue;
    }
    ACCL_THROW(acclRemoteError, "connection to %s lost while receiving: %s",
               peer_.str().c_str(), strerror(errno));
  }
}

}  // namespace accl
