// Reduce, split: all-reduce split (all_reduce_split.cc), where only the root copies the reduced
// parts out.
#include "algorithms/algorithms.h"

namespace accl {
namespace cpu {

void reduceSplit(ShmComm& c, const CollArgs& a) { reduceSplitTo(c, a, a.root); }

}  // namespace cpu
}  // namespace accl
