// Reduction kernels for every accl type and op.
#pragma once

#include <cstddef>

#include "accl/accl.h"

namespace accl {
namespace cpu {

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count. dst may be one of the sources
// (same address), not a partial overlap. Half and fp8 types accumulate in float and round once.
// Avg divides by `avgDivisor`, or by `n` when it is 0 (integer division for integer types).
void reduce(void* dst, const void* const* srcs, int n, size_t count, acclDataType_t type,
            acclRedOp_t op, int avgDivisor = 0);

// buf[i] /= n: the end of an average whose sum was computed in stages.
inline void divide(void* buf, size_t count, acclDataType_t type, int n) {
  const void* src = buf;
  reduce(buf, &src, 1, count, type, acclAvg, n);
}

}  // namespace cpu
}  // namespace accl
