// The TCP transport of the cpu backend: messages between ranks on different nodes.
//
// Each pair of ranks on different nodes holds ACCL_SOCKET_NSOCKS connections, made at
// communicator creation: every rank listens on the interface ACCL_SOCKET_IFNAME selects and
// publishes its address and a random token through the (authenticated) bootstrap; the lower rank
// of each pair connects and presents the listener's token, and the listener drops, with a
// warning, any connection that does not. The listeners close once the mesh is complete.
//
// Sockets are non-blocking. A message is an operation (NetOp) that progress() advances by as
// many bytes as the kernel takes or gives without blocking; the caller polls (pollEvents) and
// keeps, per peer and direction, the order of its operations (the receiver matches messages in
// the order they were sent, as with shared memory). A message of 256 KiB or more is split over
// all connections of the pair; socket 0 carries a header with its size first, so a receive of
// the wrong size is reported instead of misread.
//
// A rank whose operation fails tells its peers on other nodes why (announceFailure): where its
// stream on socket 0 is between messages it sends a failure header and the text, then it shuts
// down its sending side. A peer receiving from it fails at once with that text (which names
// the rank that died, say), or, where the frame could not be sent, with the closed connection.
//
// Heartbeats (ACCL_HEARTBEAT): each pair has one more connection, on which a thread of the
// communicator sends a byte every interval and notes when the peer's last arrived. A closed
// connection is seen by the data connections too; what only the heartbeat sees is silence: a
// peer whose process is stopped or hung in the kernel, or whose host or link vanished without a
// reset. A rank waiting on such a peer fails after ACCL_HEARTBEAT_TIMEOUT seconds naming it,
// instead of at the communicator's timeout (its node-mates, waiting on it through shared memory,
// still wait for that).
#pragma once

#include <poll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "accl/backend.h"
#include "socket.h"

namespace accl {
namespace cpu {

constexpr int kMaxSocks = 16;

// Wire formats. What each rank publishes through the bootstrap:
struct TcpEndpoint {
  WireAddr addr;  // family 0: this rank has no peer on another node
  int32_t nsocks;
  int32_t heartbeat;  // 1: this rank sends heartbeats
  uint8_t token[16];
  char host[64];  // gethostname, for messages
};
// What a connecting rank sends first on each connection.
constexpr uint32_t kTcpHelloMagic = 0x4e434341;  // "ACCN"
struct TcpHello {
  uint32_t magic;
  int32_t rank, sock, nsocks;
  uint8_t token[16];  // the listener's, as published through the bootstrap
};

struct NetOp {
  bool send = false;
  int peer = -1;  // rank in the communicator
  char* buf = nullptr;
  size_t bytes = 0;
  // Progress, owned by the transport.
  struct Header {
    uint32_t magic;
    uint32_t pad;
    uint64_t bytes;
  } hdr{};
  size_t hdrDone = 0;
  // Bytes of each socket's part moved. Zeroed by start()'s NetOp(), which value-initialises,
  // not by a default initializer: every P2pOp, most of them local, would clear it.
  size_t done[kMaxSocks];
  bool complete = false;
};

class TcpTransport {
 public:
  // Collective over all ranks of the communicator (two bootstrap all-gathers); connects this
  // rank with every rank r where remote[r]. Throws with the ranks that did not connect.
  TcpTransport(const acclBackendCommArgs_v1* args, const std::vector<bool>& remote);
  ~TcpTransport();
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  void start(NetOp& op, bool send, int peer, void* buf, size_t bytes) const;
  // Moves what moves without blocking; true if any byte did. Throws acclRemoteError naming the
  // peer when its connection fails or closes, and when a received message has another size.
  bool progress(NetOp& op);
  // Appends the pollfds that would let `op` move.
  void pollEvents(const NetOp& op, std::vector<pollfd>* fds) const;
  // After this rank failed for `why`: tells every peer on another node (see above). Sends only
  // what the kernel takes at once; never blocks.
  void announceFailure(const std::string& why);
  // Throws acclRemoteError naming peer r when it sent no heartbeat for ACCL_HEARTBEAT_TIMEOUT.
  void checkPeer(int r) const;
  // Seconds since peer r's last heartbeat arrived; negative where it sends none or this rank
  // does not listen (ACCL_HEARTBEAT=0).
  double heartbeatAge(int r) const;
  // "rank 3 (10.0.0.2:4711)", and the address alone.
  std::string peerName(int r) const;
  std::string address(int r) const { return addrs_[r].str(); }
  int nsocks() const { return nsocks_; }

 private:
  void connectMesh(const acclBackendCommArgs_v1* args, const std::vector<bool>& remote,
                   bool heartbeat);
  size_t part(size_t bytes, int sock, size_t* off) const;  // bytes of `sock`'s part; its offset
  // Throws acclRemoteError for a connection that closed (err 0) or failed.
  [[noreturn]] void lost(const NetOp& op, int sock, int err) const;
  // Throws the failure a peer announced: `got` bytes of its text are at `text`, the rest is
  // still on socket 0.
  [[noreturn]] void peerFailed(const NetOp& op, const char* text, size_t got) const;
  void heartbeatLoop(double interval);

  int rank_, nranks_, nsocks_;
  std::vector<SockAddr> addrs_;             // every rank's listening address
  std::vector<std::string> hosts_;          // and host name
  std::vector<std::vector<Socket>> socks_;  // [peer][i]; empty for peers on this node; the
                                            // last (index nsocks_) carries heartbeats
  std::vector<uint8_t> midSend_;            // [peer]: socket 0 is inside a message to it
  bool announced_ = false;                  // announceFailure ran
  // Heartbeats: the peer's last, in steady-clock nanoseconds (0: it sends none); the thread and
  // the pipe that stops it.
  std::unique_ptr<std::atomic<int64_t>[]> lastBeat_;
  double beatTimeout_ = 0;
  std::thread beats_;
  int stop_[2] = {-1, -1};
};

}  // namespace cpu
}  // namespace accl
