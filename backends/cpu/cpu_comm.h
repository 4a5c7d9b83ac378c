// The cpu backend's communicator. At creation the ranks exchange their host identity
// (hostIdentity(): ACCL_HOSTID, else host name and boot id); ranks with the same one form a
// node. Ranks of a node share memory (ShmComm, over that node's ranks only); ranks on different
// nodes talk over TCP (TcpTransport). On one node there is no transport and every collective
// runs the shared-memory algorithm directly, as before nodes existed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "accl/backend.h"
#include "p2p.h"
#include "shm_comm.h"
#include "transport/tcp.h"

namespace accl {
namespace cpu {

struct CollArgs;
class CpuComm;
using Algo = void (*)(CpuComm&, const CollArgs&);

class CpuComm {
 public:
  explicit CpuComm(const acclBackendCommArgs_v1* args);
  CpuComm(const CpuComm&) = delete;
  CpuComm& operator=(const CpuComm&) = delete;

  int rank() const { return args_->rank; }
  int nranks() const { return args_->nranks; }
  const acclBackendCommArgs_v1& args() const { return *args_; }
  ShmComm& shm() { return *shm_; }
  TcpTransport* net() { return net_.get(); }  // null on one node

  bool singleNode() const { return leaders_.size() == 1; }
  int nnodes() const { return static_cast<int>(leaders_.size()); }
  int node() const { return node_[rank()]; }
  int nodeOf(int r) const { return node_[r]; }
  // Index of rank r among the ranks of its node (its rank in that node's ShmComm).
  int localIndex(int r) const { return local_[r]; }
  // The lowest rank of each node, by node: the ranks that talk across nodes.
  const std::vector<int>& leaders() const { return leaders_; }
  bool isLeader() const { return leaders_[node()] == rank(); }
  // The rank that talks for node j in a collective rooted at `root`: the root on its own node,
  // the leader elsewhere.
  int speaker(int j, int root) const { return nodeOf(root) == j ? root : leaders_[j]; }
  // The ranks of node j in local order, and the number of ranks on the nodes before it (where
  // node j's blocks start when blocks are laid out node after node).
  const std::vector<int>& nodeRanks(int j) const { return members_[j]; }
  int nodeStart(int j) const { return starts_[j]; }

  // The algorithm each collective runs, chosen at creation (ACCL_ALGO, node count).
  Algo algo[kNumColls];

  // A buffer of at least `bytes` that lives as long as the communicator, for algorithms that
  // receive before they reduce; grows, never shrinks.
  char* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }
  // Reused between steps of an algorithm: no allocation per step.
  std::vector<P2pOp>& ops() { return ops_; }
  // Room for one pointer per rank: the sources of a reduction, without an allocation per call.
  const void** sources() { return sources_.data(); }
  // 0, 1, ..., nranks-1: the flat ring's group.
  const std::vector<int>& allRanks() const { return allRanks_; }

 private:
  const acclBackendCommArgs_v1* args_;
  std::vector<int> node_, local_, leaders_, starts_;
  std::vector<std::vector<int>> members_;
  std::unique_ptr<ShmComm> shm_;
  std::unique_ptr<TcpTransport> net_;
  std::vector<char> scratch_;
  std::vector<P2pOp> ops_;
  std::vector<const void*> sources_;
  std::vector<int> allRanks_;
};

}  // namespace cpu
}  // namespace accl
