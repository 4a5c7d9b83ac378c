// Point-to-point messages of the cpu backend, whichever way they travel: a peer on this node
// through its shared-memory channel, a peer on another node over TCP. runP2p progresses a set
// of them together (a group's sends and receives, or a step of an algorithm), so exchanges that
// would deadlock one at a time complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/tcp.h"

namespace accl {
namespace cpu {

class CpuComm;

struct P2pOp {
  // addP2p sets the fields it needs: value-initialised, each operation first cleared all its
  // 264 bytes with `rep stos` (3% of an 8-byte send/recv's samples under perf).
  P2pOp() {}
  CpuComm* comm;
  bool send;
  int peer;  // rank in the communicator
  char* buf;
  size_t bytes;
  uint64_t seq;
  bool internal;  // a step of a collective, not the user's acclSend/acclRecv
  // A peer on this node: its index in the node's ShmComm and the channel's chunks; -1 otherwise.
  int local;
  size_t chunks, done = 0;
  uint64_t msg;  // its number on the channel (ShmComm::nextMessage)
  // A send that goes through the channel's buffers: one that cannot go single copy (set when
  // added, and for a send in place when it is copied), or that progressShm sends so.
  bool eager = false;
  // A receive whose address the sender may write to (ChannelCtrl::posted).
  bool posted = false;
  // A send whose buffer waits for the receiver to read it (ChannelCtrl::offered).
  bool offered = false;
  // A send from a copy of its buffer (in place: copyInPlaceSends).
  bool copied = false;
  NetOp net;  // a peer on another node
  bool finished() const { return local >= 0 ? done == chunks : net.complete; }
};

// Appends a message to `ops`, unless it is empty (neither side moves anything then).
void addP2p(std::vector<P2pOp>& ops, CpuComm& c, bool send, int peer, const void* buf,
            size_t bytes, bool internal = true);
// Completes every operation of `ops`; those on the same channel (communicator, direction and
// peer) in the order given. Throws acclTimeout when none moves for the communicator's timeout,
// acclRemoteError when a peer is gone or aborted.
void runP2p(std::vector<P2pOp>& ops);
// Moves what moves of `ops` now, without waiting (the kernel carries on with what it was given
// while the caller does other work); runP2p completes them later.
void kickP2p(std::vector<P2pOp>& ops);

}  // namespace cpu
}  // namespace accl
