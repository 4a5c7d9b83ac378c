#include "cpu_comm.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <sstream>

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

// ACCL_ALGO: "allreduce:ring;allgather:cma" (items separated by ; or ,; case, '_' and ' '
// ignored). Parsed before any exchange, so a typo fails every rank alike at once. The one-node
// algorithms run on the node's shared memory only, so forcing one across nodes is an error.
struct Named {
  const char* name;
  Coll coll;
  Algo algo;
  bool oneNode;
};
const Named kNamed[] = {
    {"allreduce:ring", kAllReduce, allReduceRing, false},
    {"allreduce:hier", kAllReduce, allReduceHier, false},
    {"allreduce:hierring", kAllReduce, allReduceHierRing, false},
    {"allreduce:hierdoubling", kAllReduce, allReduceHierDoubling, false},
    {"broadcast:hier", kBroadcast, broadcastHier, false},
    {"broadcast:hiertree", kBroadcast, broadcastHierTree, false},
    {"broadcast:hierscatter", kBroadcast, broadcastHierScatter, false},
    {"allreduce:direct", kAllReduce, onShm<allReduceDirect>, true},
    {"allreduce:split", kAllReduce, onShm<allReduceSplit>, true},
    {"allreduce:cma", kAllReduce, onShm<allReduceCma>, true},
    {"allgather:ring", kAllGather, allGatherRing, false},
    {"allgather:hier", kAllGather, allGatherHier, false},
    {"reducescatter:pairwise", kReduceScatter, reduceScatterPairwise, false},
    {"reducescatter:hier", kReduceScatter, reduceScatterHier, false},
    {"allgather:direct", kAllGather, onShm<allGatherDirect>, true},
    {"allgather:cma", kAllGather, onShm<allGatherCma>, true},
    {"reducescatter:direct", kReduceScatter, onShm<reduceScatterDirect>, true},
    {"reducescatter:cma", kReduceScatter, onShm<reduceScatterCma>, true},
    {"broadcast:direct", kBroadcast, onShm<broadcastDirect>, true},
    {"broadcast:cma", kBroadcast, onShm<broadcastCma>, true},
};

std::vector<const Named*> parseAlgo() {
  std::vector<const Named*> forced;
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
    const Named* hit = nullptr;
    std::string known;
    for (const Named& k : kNamed) {
      if (lower == k.name) hit = &k;
      known += (known.empty() ? "" : ", ") + std::string(k.name);
    }
    if (!hit)
      ACCL_THROW(acclInvalidArgument, "ACCL_ALGO=%s: unknown item '%s' (known: %s)",
                 spec.c_str(), item.c_str(), known.c_str());
    forced.push_back(hit);
  }
  return forced;
}

// The variables that choose algorithms or lay out shared memory and connections. Ranks that
// disagree on one (their environments or tuning files differ) would take different paths
// through a collective and hang or corrupt it, so they fail at creation instead, told which.
constexpr Param kAgreed[] = {Param::Algo,         Param::CmaMin,      Param::AllReduceDirectMax,
                             Param::ShmSlotBytes, Param::ShmP2pBytes, Param::SocketNsocks};

// What every rank tells the others when the communicator is made.
struct Identity {
  char host[128];
  char settings[512];  // NAME=value lines of kAgreed
};

void checkAgreement(const std::vector<Identity>& ids) {
  auto lines = [](const char* text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  const std::vector<std::string> first = lines(ids[0].settings);
  for (size_t q = 1; q < ids.size(); ++q) {
    std::vector<std::string> theirs = lines(ids[q].settings);
    size_t i = 0;
    while (i < first.size() && i < theirs.size() && first[i] == theirs[i]) ++i;
    if (i == first.size() && i == theirs.size()) continue;
    auto shown = [i](const std::vector<std::string>& v) {
      if (i >= v.size()) return std::string("more settings");  // cut at sizeof(settings)
      return v[i].back() == '=' ? v[i].substr(0, v[i].size() - 1) + " unset" : v[i];
    };
    ACCL_THROW(acclInvalidUsage, "ranks disagree on a setting that every rank must share: "
               "rank 0 has %s, rank %zu has %s (set in their environments or tuning files)",
               shown(first).c_str(), q, shown(theirs).c_str());
  }
}

}  // namespace

CpuComm::CpuComm(const acclBackendCommArgs_v1* args)
    : args_(args), sources_(args->nranks), allRanks_(args->nranks) {
  const int n = args->nranks, me = args->rank;
  for (int q = 0; q < n; ++q) allRanks_[q] = q;
  std::vector<const Named*> forced = parseAlgo();

  std::vector<Identity> hosts(n);
  snprintf(hosts[me].host, sizeof(hosts[me].host), "%s", hostIdentity().c_str());
  std::string settings;
  for (Param p : kAgreed) settings += format("%s=%s\n", paramName(p), paramString(p).c_str());
  snprintf(hosts[me].settings, sizeof(hosts[me].settings), "%s", settings.c_str());
  acclResult_t r = args->allGather(args->bootstrap, hosts.data(), sizeof(Identity));
  if (r != acclSuccess) ACCL_THROW(r, "bootstrap exchange of host identities failed");
  for (Identity& h : hosts) h.settings[sizeof(h.settings) - 1] = 0;
  checkAgreement(hosts);
  // Nodes are numbered in the order of their lowest rank; that rank leads the node.
  std::map<std::string, int> nodeIds;
  std::vector<int> count;
  node_.resize(n);
  local_.resize(n);
  for (int q = 0; q < n; ++q) {
    hosts[q].host[sizeof(hosts[q].host) - 1] = 0;
    auto it = nodeIds.emplace(hosts[q].host, static_cast<int>(leaders_.size())).first;
    if (it->second == static_cast<int>(leaders_.size())) {
      leaders_.push_back(q);
      count.push_back(0);
    }
    node_[q] = it->second;
    local_[q] = count[it->second]++;
  }
  members_.resize(leaders_.size());
  for (int q = 0; q < n; ++q) members_[node_[q]].push_back(q);
  int at = 0;
  for (const auto& m : members_) {
    starts_.push_back(at);
    at += static_cast<int>(m.size());
  }
  shm_ = std::make_unique<ShmComm>(args, members_[node_[me]]);
  if (!singleNode()) {
    std::vector<bool> remote(n);
    for (int q = 0; q < n; ++q) remote[q] = node_[q] != node_[me];
    net_ = std::make_unique<TcpTransport>(args, remote);
  }
  ACCL_INFO("INIT", "rank %d: %d node(s); this node (%s) holds %zu rank(s), led by rank %d", me,
            nnodes(), hosts[me].host, members_[node()].size(), leaders_[node()]);

  if (singleNode()) {
    algo[kAllReduce] = onShm<allReduceAuto>;
    algo[kBroadcast] = onShm<broadcastAuto>;
    algo[kReduce] = onShm<reduceSplit>;
    algo[kAllGather] = onShm<allGatherAuto>;
    algo[kReduceScatter] = onShm<reduceScatterAuto>;
    algo[kAlltoAll] = onShm<alltoAllDirect>;
    algo[kGather] = onShm<gatherDirect>;
    algo[kScatter] = onShm<scatterDirect>;
    algo[kBarrier] = onShm<barrierShm>;
  } else {
    algo[kAllReduce] = allReduceHier;
    algo[kBroadcast] = broadcastHier;
    algo[kReduce] = reduceHier;
    algo[kAllGather] = allGatherHier;
    algo[kReduceScatter] = reduceScatterHier;
    algo[kAlltoAll] = alltoAllPairwise;
    algo[kGather] = gatherPairwise;
    algo[kScatter] = scatterPairwise;
    algo[kBarrier] = barrierHier;
  }
  for (const Named* f : forced) {
    if (f->oneNode && !singleNode())
      ACCL_THROW(acclInvalidArgument, "ACCL_ALGO: %s works inside one node; this communicator "
                 "spans %d nodes", f->name, nnodes());
    if (strstr(f->name, ":cma") && !shm().cma())
      ACCL_THROW(acclInvalidUsage, "ACCL_ALGO: %s needs cross-memory attach between the ranks, "
                 "which this host refuses (ptrace restrictions, pid namespaces or ACCL_CMA_MIN=-1)",
                 f->name);
    algo[f->coll] = f->algo;
  }
}

}  // namespace cpu
}  // namespace accl
