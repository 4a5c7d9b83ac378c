#include "cpu_comm.h"

#include <algorithm>
#include <cctype>
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
enum Where { kAnyNodes, kOneNode, kSingleCopy };  // kSingleCopy: one node, cross-memory attach
struct Named {
  const char* name;
  Coll coll;
  Algo algo;
  Where where;
};
const Named kNamed[] = {
    {"allreduce:ring", kAllReduce, allReduceRing, kAnyNodes},
    {"allreduce:hier", kAllReduce, allReduceHier, kAnyNodes},
    {"allreduce:hierring", kAllReduce, allReduceHierRing, kAnyNodes},
    {"allreduce:hierdoubling", kAllReduce, allReduceHierDoubling, kAnyNodes},
    {"broadcast:hier", kBroadcast, broadcastHier, kAnyNodes},
    {"broadcast:hiertree", kBroadcast, broadcastHierTree, kAnyNodes},
    {"broadcast:hierscatter", kBroadcast, broadcastHierScatter, kAnyNodes},
    {"allreduce:direct", kAllReduce, onShm<allReduceDirect>, kOneNode},
    {"allreduce:split", kAllReduce, onShm<allReduceSplit>, kOneNode},
    {"allreduce:cma", kAllReduce, onShm<allReduceCma>, kSingleCopy},
    {"allgather:ring", kAllGather, allGatherRing, kAnyNodes},
    {"allgather:hier", kAllGather, allGatherHier, kAnyNodes},
    {"reducescatter:pairwise", kReduceScatter, reduceScatterPairwise, kAnyNodes},
    {"reducescatter:hier", kReduceScatter, reduceScatterHier, kAnyNodes},
    {"allgather:direct", kAllGather, onShm<allGatherDirect>, kOneNode},
    {"allgather:cma", kAllGather, onShm<allGatherCma>, kSingleCopy},
    {"reducescatter:direct", kReduceScatter, onShm<reduceScatterDirect>, kOneNode},
    {"reducescatter:cma", kReduceScatter, onShm<reduceScatterCma>, kSingleCopy},
    {"broadcast:direct", kBroadcast, onShm<broadcastDirect>, kOneNode},
    {"broadcast:cma", kBroadcast, onShm<broadcastCma>, kSingleCopy},
    {"reduce:direct", kReduce, onShm<reduceDirect>, kOneNode},
    {"reduce:split", kReduce, onShm<reduceSplit>, kOneNode},
    {"reduce:cma", kReduce, onShm<reduceCma>, kSingleCopy},
    {"reduce:pull", kReduce, onShm<reducePull>, kSingleCopy},
    {"alltoall:direct", kAlltoAll, onShm<alltoAllDirect>, kOneNode},
    {"alltoall:cma", kAlltoAll, onShm<alltoAllCma>, kSingleCopy},
    {"gather:direct", kGather, onShm<gatherDirect>, kOneNode},
    {"gather:cma", kGather, onShm<gatherCma>, kSingleCopy},
    {"scatter:direct", kScatter, onShm<scatterDirect>, kOneNode},
    {"scatter:cma", kScatter, onShm<scatterCma>, kSingleCopy},
};

std::vector<const Named*> parseAlgo() {
  std::vector<const Named*> forced;
  std::string spec = paramString(Param::Algo);
  for (const std::string& lower : specItems(spec)) {
    const Named* hit = nullptr;
    std::string known;
    for (const Named& k : kNamed) {
      if (lower == k.name) hit = &k;
      known += (known.empty() ? "" : ", ") + std::string(k.name);
    }
    if (!hit)
      ACCL_THROW(acclInvalidArgument, "ACCL_ALGO=%s: unknown item '%s' (known: %s)",
                 spec.c_str(), lower.c_str(), known.c_str());
    forced.push_back(hit);
  }
  return forced;
}

// Variables that choose a collective's path. Ranks that disagree on one (their environments or
// tuning files differ) would take different paths through a collective and hang or corrupt it,
// so they fail at creation instead, told which. The global ones must agree over all ranks; the
// others only shape a node's shared memory and choices there, so nodes may differ (each its own
// accl-tune file) while the ranks of a node may not. Whether single copy is off at all is global:
// its probe is exchanged over all ranks.
constexpr Param kGlobal[] = {Param::Algo, Param::SocketNsocks, Param::Compose, Param::Check};
constexpr Param kLocal[] = {Param::CmaMin, Param::AllReduceDirectMax, Param::ShmSlotBytes,
                            Param::ShmP2pBytes};

// NAME=value lines.
std::string settingsText(bool global) {
  std::string text;
  auto add = [&](Param p) { text += format("%s=%s\n", paramName(p), paramString(p).c_str()); };
  if (!global) {
    for (Param p : kLocal) add(p);
    return text;
  }
  for (Param p : kGlobal) add(p);
  return text + paramName(Param::CmaMin) +
         (paramString(Param::CmaMin) == "-1" ? "=-1\n" : " other than -1\n");
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

// What every rank tells the others when the communicator is made: its host and the hashes of
// its settings (the texts travel only when they differ).
struct Identity {
  char host[128];
  uint64_t global, local;
};

struct SettingsText {
  char global[512], local[512];
};

// The first line where two settings texts differ, as "rank a has X, rank b has Y".
std::string firstDifference(int a, const char* ta, int b, const char* tb) {
  auto lines = [](const char* text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  std::vector<std::string> x = lines(ta), y = lines(tb);
  size_t i = 0;
  while (i < x.size() && i < y.size() && x[i] == y[i]) ++i;
  auto shown = [i](const std::vector<std::string>& v) {
    if (i >= v.size()) return std::string("a longer value (cut)");  // past sizeof(SettingsText)
    const std::string& l = v[i];
    return !l.empty() && l.back() == '=' ? l.substr(0, l.size() - 1) + " unset" : l;
  };
  return format("rank %d has %s, rank %d has %s", a, shown(x).c_str(), b, shown(y).c_str());
}

// Fails, on every rank alike, when a rank's settings differ from rank 0's (global) or from its
// node leader's (local); only then do the texts travel, to name the variable.
void checkAgreement(const acclBackendCommArgs_v1& args, const std::vector<Identity>& ids,
                    const std::vector<int>& node, const std::vector<int>& leaders) {
  int bad = -1;
  bool global = true;
  for (int q = 0; q < static_cast<int>(ids.size()) && bad < 0; ++q) {
    if (ids[q].global != ids[0].global) bad = q;
    else if (ids[q].local != ids[leaders[node[q]]].local) bad = q, global = false;
  }
  if (bad < 0) return;
  std::vector<SettingsText> texts(ids.size());
  SettingsText& mine = texts[args.rank];
  snprintf(mine.global, sizeof(mine.global), "%s", settingsText(true).c_str());
  snprintf(mine.local, sizeof(mine.local), "%s", settingsText(false).c_str());
  acclResult_t r = args.allGather(args.bootstrap, texts.data(), sizeof(SettingsText));
  if (r != acclSuccess) ACCL_THROW(r, "bootstrap exchange of the settings failed");
  for (SettingsText& t : texts) t.global[sizeof(t.global) - 1] = t.local[sizeof(t.local) - 1] = 0;
  int ref = global ? 0 : leaders[node[bad]];
  ACCL_THROW(acclInvalidUsage, "ranks disagree on a setting that %s must share: %s (set in "
             "their environments or tuning files)", global ? "every rank" : "the ranks of a node",
             firstDifference(ref, global ? texts[ref].global : texts[ref].local, bad,
                             global ? texts[bad].global : texts[bad].local).c_str());
}

}  // namespace

CpuComm::CpuComm(const acclBackendCommArgs_v1* args)
    : args_(args), sources_(args->nranks), allRanks_(args->nranks) {
  const int n = args->nranks, me = args->rank;
  for (int q = 0; q < n; ++q) allRanks_[q] = q;
  std::vector<const Named*> forced = parseAlgo();

  std::vector<Identity> hosts(n);
  snprintf(hosts[me].host, sizeof(hosts[me].host), "%s", hostIdentity().c_str());
  hosts[me].global = fnv1a(settingsText(true));
  hosts[me].local = fnv1a(settingsText(false));
  acclResult_t r = args->allGather(args->bootstrap, hosts.data(), sizeof(Identity));
  if (r != acclSuccess) ACCL_THROW(r, "bootstrap exchange of host identities failed");
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
  checkAgreement(*args, hosts, node_, leaders_);
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
    algo[kReduce] = onShm<reduceAuto>;
    algo[kAllGather] = onShm<allGatherAuto>;
    algo[kReduceScatter] = onShm<reduceScatterAuto>;
    algo[kAlltoAll] = onShm<alltoAllAuto>;
    algo[kGather] = onShm<gatherAuto>;
    algo[kScatter] = onShm<scatterAuto>;
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
    if (f->where != kAnyNodes && !singleNode())
      ACCL_THROW(acclInvalidArgument, "ACCL_ALGO: %s works inside one node; this communicator "
                 "spans %d nodes", f->name, nnodes());
    if (f->where == kSingleCopy && !shm().cma())
      ACCL_THROW(acclInvalidUsage, "ACCL_ALGO: %s needs cross-memory attach between the ranks, "
                 "which this host refuses (ptrace restrictions, pid namespaces or ACCL_CMA_MIN=-1)",
                 f->name);
    algo[f->coll] = f->algo;
  }
}

}  // namespace cpu
}  // namespace accl
