// All-reduce across nodes, hierarchical: reduce inside each node to its leader (shared memory),
// all-reduce among the leaders over TCP, broadcast inside each node. Only leaders use the
// network, each sending the message about twice (ring) or (nodes-1) times (direct, small).
#include <cstring>

#include "algorithms/algorithms.h"
#include "reduce.h"
#include "types.h"

namespace accl {
namespace cpu {

namespace {
constexpr size_t kDirectMax = 64 << 10;  // bytes: below, one round of latency beats the ring
}

void allReduceHier(CpuComm& c, const CollArgs& a) {
  // An average is a sum until the end: the stages would otherwise divide by their own sizes.
  const acclRedOp_t op = a.op == acclAvg ? acclSum : a.op;
  reduceSplit(c.shm(), {a.send, a.recv, a.count, a.type, op, 0});
  if (c.isLeader()) {
    char* buf = static_cast<char*>(a.recv);
    if (a.count * typeSize(a.type) <= kDirectMax)
      directAllReduce(c, c.leaders(), c.node(), buf, a.count, a.type, op);
    else
      ringAllReduce(c, c.leaders(), c.node(), buf, a.count, a.type, op);
    if (a.op == acclAvg) divide(buf, a.count, a.type, c.nranks());
  }
  broadcastAuto(c.shm(), {a.recv, a.recv, a.count, a.type, acclSum, 0});
}

}  // namespace cpu
}  // namespace accl
