// Sizes and names of accl's element types and reduction ops.
#pragma once

#include <cstddef>

#include "accl/accl.h"

namespace accl {

inline bool validType(int t) { return t >= 0 && t < acclNumTypes; }
inline bool validOp(int op) { return op >= 0 && op < acclNumOps; }

inline size_t typeSize(acclDataType_t t) {
  static const size_t sizes[acclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[t];
}

inline const char* typeName(acclDataType_t t) {
  static const char* names[acclNumTypes] = {"int8",    "uint8",   "int32",    "uint32",
                                            "int64",   "uint64",  "float16",  "float32",
                                            "float64", "bfloat16", "float8_e4m3", "float8_e5m2"};
  return validType(t) ? names[t] : "invalid";
}

inline const char* opName(acclRedOp_t op) {
  static const char* names[acclNumOps] = {"sum", "prod", "max", "min", "avg"};
  return validOp(op) ? names[op] : "invalid";
}

}  // namespace accl
