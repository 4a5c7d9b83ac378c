#include "cpu_comm.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "algorithms/algorithms.h"
#include "errors.h"
#include "logging.h"
#include "params.h"
#include "socket.h"

namespace accl {
namespace cpu {
namespace {

template <void (*F)(ShmComm&, const CollArgs&)>
void onShm(CpuComm& c, const CollArgs& a) {
  F(c.shm(), a);
}

// ACCL_ALGO: "allreduce:ring;allgather:..." (items separated by ; or ,). Parsed before any
// exchange, so a typo fails every rank alike at once.
struct Forced {
  Algo allReduce = nullptr;
};

Forced parseAlgo() {
  Forced f;
  std::string spec = paramString(Param::Algo);
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find_first_of(";,", pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    std::string lower;  // "AllReduce:Ring" and "all_reduce:ring" read as "allreduce:ring"
    for (char ch : item)
      if (ch != '_' && ch != ' ') lower += static_cast<char>(tolower(ch));
    if (lower == "allreduce:ring") f.allReduce = allReduceRing;
    else if (lower == "allreduce:hier") f.allReduce = allReduceHier;
    else if (lower == "allreduce:hierring") f.allReduce = allReduceHierRing;
    else
      ACCL_THROW(acclInvalidArgument, "ACCL_ALGO=%s: unknown item '%s' (known: allreduce:ring, "
                 "allreduce:hier, allreduce:hierring)", spec.c_str(), item.c_str());
  }
  return f;
}

}  // namespace

CpuComm::CpuComm(const acclBackendCommArgs_v1* args)
    : args_(args), sources_(args->nranks), allRanks_(args->nranks) {
  const int n = args->nranks, me = args->rank;
  for (int q = 0; q < n; ++q) allRanks_[q] = q;
  Forced forced = parseAlgo();

  struct HostId {
    char id[128];
  };
  std::vector<HostId> hosts(n);
  snprintf(hosts[me].id, sizeof(hosts[me].id), "%s", hostIdentity().c_str());
  acclResult_t r = args->allGather(args->bootstrap, hosts.data(), sizeof(HostId));
  if (r != acclSuccess) ACCL_THROW(r, "bootstrap exchange of host identities failed");
  // Nodes are numbered in the order of their lowest rank; that rank leads the node.
  std::map<std::string, int> nodeIds;
  std::vector<int> count;
  node_.resize(n);
  local_.resize(n);
  for (int q = 0; q < n; ++q) {
    hosts[q].id[sizeof(hosts[q].id) - 1] = 0;
    auto it = nodeIds.emplace(hosts[q].id, static_cast<int>(leaders_.size())).first;
    if (it->second == static_cast<int>(leaders_.size())) {
      leaders_.push_back(q);
      count.push_back(0);
    }
    node_[q] = it->second;
    local_[q] = count[it->second]++;
  }
  std::vector<int> members;
  for (int q = 0; q < n; ++q)
    if (node_[q] == node_[me]) members.push_back(q);
  shm_ = std::make_unique<ShmComm>(args, members);
  if (!singleNode()) {
    std::vector<bool> remote(n);
    for (int q = 0; q < n; ++q) remote[q] = node_[q] != node_[me];
    net_ = std::make_unique<TcpTransport>(args, remote);
  }
  ACCL_INFO("INIT", "rank %d: %d node(s); this node (%s) holds %zu rank(s), led by rank %d", me,
            nnodes(), hosts[me].id, members.size(), leaders_[node()]);

  if (singleNode()) {
    algo[kAllReduce] = onShm<allReduceAuto>;
    algo[kBroadcast] = onShm<broadcastAuto>;
    algo[kReduce] = onShm<reduceSplit>;
    algo[kAllGather] = onShm<allGatherAuto>;
    algo[kReduceScatter] = onShm<reduceScatterDirect>;
    algo[kAlltoAll] = onShm<alltoAllDirect>;
    algo[kGather] = onShm<gatherDirect>;
    algo[kScatter] = onShm<scatterDirect>;
    algo[kBarrier] = onShm<barrierShm>;
  } else {
    algo[kAllReduce] = allReduceHier;
    algo[kBroadcast] = broadcastHier;
    algo[kReduce] = reduceHier;
    algo[kAllGather] = allGatherRing;
    algo[kReduceScatter] = reduceScatterPairwise;
    algo[kAlltoAll] = alltoAllPairwise;
    algo[kGather] = gatherPairwise;
    algo[kScatter] = scatterPairwise;
    algo[kBarrier] = barrierHier;
  }
  if (forced.allReduce) algo[kAllReduce] = forced.allReduce;
}

}  // namespace cpu
}  // namespace accl
