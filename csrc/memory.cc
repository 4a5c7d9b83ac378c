#include "memory.h"

#include <dlfcn.h>

#include <cstdint>

namespace accl {
namespace {

// CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr)
using PointerGetAttribute = int (*)(void*, int, unsigned long long);

// The driver's function if the process has loaded the driver; RTLD_NOLOAD never loads it.
PointerGetAttribute cudaProbe() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  auto f = reinterpret_cast<PointerGetAttribute>(dlsym(h, "cuPointerGetAttribute"));
  dlclose(h);  // drops only the reference RTLD_NOLOAD took: the process holds its own
  return f;
}

}  // namespace

bool cudaLoaded() { return cudaProbe() != nullptr; }

Memory memoryOf(const void* p) {
  constexpr int kMemoryType = 2;                 // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
  constexpr unsigned kDevice = 2, kUnified = 4;  // CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_UNIFIED
  PointerGetAttribute f = p ? cudaProbe() : nullptr;
  unsigned type = 0;
  // Plain host memory is unknown to the driver (CUDA_ERROR_INVALID_VALUE); pinned host memory
  // is CU_MEMORYTYPE_HOST. Both are host memory to accl.
  if (f && f(&type, kMemoryType, reinterpret_cast<uintptr_t>(p)) == 0 &&
      (type == kDevice || type == kUnified))
    return Memory::kCuda;
  return Memory::kHost;
}

const char* memoryName(Memory m) {
  return m == Memory::kCuda ? "CUDA device memory" : "host memory";
}

const char* backendForMemory(Memory m) { return m == Memory::kCuda ? "nccl" : "cpu"; }

}  // namespace accl
