// The NCCL-shaped C API as this adapter sees it: the few types it needs, declared here so that no
// vendor header is needed at build time, and the table of functions it resolves with dlsym.
//
// The facts (values, layouts, the version each symbol appeared in) are those of NVIDIA's
// src/nccl.h.in; RCCL exports the same symbols and values, pccl the same with a "pccl" prefix.
#pragma once

#include <climits>
#include <cstddef>
#include <string>

#include "accl/backend.h"

namespace accl {
namespace nccl {

// ncclResult_t. 8 (ncclTimeout) exists from NCCL 2.30; older libraries never return it.
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
  kTimeout = 8,
};

using Comm = struct ncclComm*;  // ncclComm_t: opaque
struct UniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};

// NCCL_VERSION(X,Y,Z) from 2.9 on; every version this adapter accepts is newer (ncclSend/Recv,
// which it needs, came in 2.7, whose codes are X*1000+Y*100+Z: decodeVersion handles both).
constexpr int version(int major, int minor, int patch) {
  return major * 10000 + minor * 100 + patch;
}

// ncclConfig_t as NCCL 2.14 introduced it. NCCL reads `size` bytes and treats every field that
// a config of `version` did not have as unset, so this prefix is valid for every later release.
struct ConfigV21400 {
  size_t size = sizeof(ConfigV21400);
  unsigned int magic = 0xcafebeef;  // NCCL_API_MAGIC, set by NCCL_CONFIG_INITIALIZER
  unsigned int version = nccl::version(2, 14, 0);
  int blocking = INT_MIN;           // NCCL_CONFIG_UNDEF_INT
  int unset = INT_MIN;              // the padding up to 24 bytes: cgaClusterSize in later layouts
};

// Values of ncclDataType_t and ncclRedOp_t used by the mapping tables.
enum DataType : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9, kFloat8e4m3 = 10, kFloat8e5m2 = 11,
};
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

// The functions this adapter calls; `nullptr` for an optional one the library lacks.
struct Api {
  // Mandatory: present in every release since NCCL 2.7.
  Result (*GetVersion)(int*);
  const char* (*GetErrorString)(Result);
  Result (*GetUniqueId)(UniqueId*);
  Result (*CommInitRank)(Comm*, int, UniqueId, int);
  Result (*CommDestroy)(Comm);
  Result (*CommAbort)(Comm);
  Result (*CommGetAsyncError)(Comm, Result*);
  Result (*AllReduce)(const void*, void*, size_t, int, int, Comm, void*);
  Result (*Broadcast)(const void*, void*, size_t, int, int, Comm, void*);
  Result (*Reduce)(const void*, void*, size_t, int, int, int, Comm, void*);
  Result (*AllGather)(const void*, void*, size_t, int, Comm, void*);
  Result (*ReduceScatter)(const void*, void*, size_t, int, int, Comm, void*);
  Result (*Send)(const void*, size_t, int, int, Comm, void*);
  Result (*Recv)(void*, size_t, int, int, Comm, void*);
  Result (*GroupStart)();
  Result (*GroupEnd)();
  // Optional, by the release that added them.
  const char* (*GetLastError)(Comm);                                 // 2.13
  Result (*CommInitRankConfig)(Comm*, int, UniqueId, int, ConfigV21400*);  // 2.14
  Result (*CommFinalize)(Comm);                                      // 2.14
  Result (*AlltoAll)(const void*, void*, size_t, int, Comm, void*);  // 2.28
  Result (*Gather)(const void*, void*, size_t, int, int, Comm, void*);   // 2.28
  Result (*Scatter)(const void*, void*, size_t, int, int, Comm, void*);  // 2.28
};

// The library one plugin drives: which one, and what was found when it was loaded.
struct Flavor {
  const char* name;           // the backend name: "nccl", "rccl", "pccl"
  const char* prefix;         // of every symbol: "nccl" or "pccl"
  const char* envVar;         // overrides where the library is looked for
  const char* libs[3];        // names tried on the loader's search path, in order
  const char* wheelDir;       // a pip wheel's library directory under site-packages, or null
  const char* wheelHint;      // how a user installs it, for the "not found" message
  const char* device;         // the device runtime, for messages
  const char* homeEnv;        // an install prefix variable whose lib/ holds the library, or null
  const char* homeDefault;    // its value when unset
  bool ncclVersions;          // versions follow NCCL's numbering, so NCCL's feature gates apply
};

struct Library {
  const Flavor* flavor = nullptr;
  Api api{};
  std::string path;           // the file the library was loaded from
  int versionCode = 0;        // as the library reports it
  int major = 0, minor = 0, patch = 0;
  std::string versionString;  // "2.28.3"
  int code() const { return version(major, minor, patch); }  // comparable with version()
};

// The flavor this plugin was built for (ACCL_NCCL_FLAVOR).
const Flavor& flavor();

// Loads the library once per process (later calls return the first success), logging through
// `host` what it found. On failure it returns nullptr with a message in *why that says where it
// looked and how to point it elsewhere.
const Library* loadLibrary(const acclBackendHost_v1* host, std::string* why);

}  // namespace nccl
}  // namespace accl
