// TCP sockets with deadlines, for the bootstrap. Every blocking step polls in short slices so a
// deadline or an abort flag ends it; nothing here can wait forever.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace accl {

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point at;
  static Deadline in(double seconds) {
    return {Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds))};
  }
  double remaining() const { return std::chrono::duration<double>(at - Clock::now()).count(); }
  bool expired() const { return Clock::now() >= at; }
};

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string str() const;  // "1.2.3.4:5678" or "[::1]:5678"
};

// An address as it travels between ranks (in the unique id, the bootstrap, the transport).
struct WireAddr {
  uint16_t family;
  uint16_t port;  // network order
  uint32_t scope;
  uint8_t addr[16];
};
WireAddr toWire(const SockAddr& a);
// Throws acclInvalidArgument for a family other than IPv4 and IPv6.
SockAddr fromWire(const WireAddr& w);

// "host:port" or "[v6]:port"; the host may be a name.
SockAddr parseHostPort(const std::string& hostPort);
// The address this host is reached at: the first up interface ACCL_SOCKET_IFNAME allows (NCCL
// syntax), non-loopback before loopback and IPv4 before IPv6 (ACCL_SOCKET_FAMILY: only one).
// Port 0.
SockAddr localAddress();
// Who this host is, for telling which ranks share memory: ACCL_HOSTID, else the host name and
// the boot id (containers on one kernel share the boot id but not, as a rule, the host name:
// they are told apart, as they may not share /dev/shm).
std::string hostIdentity();

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_), peer_(o.peer_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Binds and listens; `addr` gets the bound port.
  static Socket listen(SockAddr& addr, bool reuseAddr);
  // Connects, retrying while the peer is not listening yet, until the deadline.
  static Socket connect(const SockAddr& addr, Deadline dl, const volatile int* abortFlag);
  // Waits for one connection; returns an invalid socket if the deadline passes.
  Socket accept(Deadline dl, const volatile int* abortFlag);

  // Move exactly n bytes. Throw acclTimeout, or acclRemoteError when the peer closed or reset.
  void sendAll(const void* buf, size_t n, Deadline dl, const volatile int* abortFlag);
  void recvAll(void* buf, size_t n, Deadline dl, const volatile int* abortFlag);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const SockAddr& peer() const { return peer_; }
  void close();

 private:
  int fd_ = -1;
  SockAddr peer_;
};

}  // namespace accl
