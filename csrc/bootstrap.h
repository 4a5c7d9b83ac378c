// Rendezvous and the out-of-band channel among the ranks of a communicator.
//
// The unique id holds a rendezvous address and a random secret. A root service at that address
// (a thread of the process that called acclGetUniqueId, or of rank 0 with ACCL_COMM_ID) learns
// every rank's host and rank 0's own listening address, and hands the table to all; then the
// ranks connect to rank 0 in a star that carries the bootstrap all-gather and barrier for the
// communicator's lifetime. Every connection first proves the secret (auth.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "accl/accl.h"
#include "socket.h"

namespace accl {

// Fills `id`: a fresh secret and communicator hash, and the rendezvous address. Starts the
// root service thread in this process, unless `fromEnv` and ACCL_COMM_ID is set (then rank 0
// hosts it there). Split passes fromEnv = false: its ids are handed out by the parent.
void createUniqueId(acclUniqueId* id, bool fromEnv);

class Bootstrap {
 public:
  // Collective over `nranks` ranks; blocks until all joined or `timeout` seconds passed.
  Bootstrap(const acclUniqueId& id, int rank, int nranks, double timeout,
            const volatile int* abortFlag);

  // `data` holds nranks slots of `bytes`; this rank's slot is filled in. Each call must be made
  // by every rank in the same order with the same `bytes`.
  void allGather(void* data, size_t bytes, double timeout);
  void barrier(double timeout);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  uint64_t commHash() const { return commHash_; }
  const std::string& hostId(int r) const { return hostIds_[r]; }

 private:
  int rank_, nranks_;
  uint64_t commHash_;
  const volatile int* abortFlag_;
  std::vector<std::string> hostIds_;
  // Rank 0: peers_[r] is the connection to rank r (peers_[0] unused). Others: peers_[0].
  std::vector<Socket> peers_;
};

}  // namespace accl
