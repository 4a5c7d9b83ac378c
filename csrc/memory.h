// Which memory a buffer lives in, for communicators whose backend follows their buffers (no
// backend chosen). CUDA memory is recognised through the driver's cuPointerGetAttribute, and
// only in a process that has loaded the driver (libcuda.so.1) itself: accl never loads it, so
// a process without CUDA pays nothing.
#pragma once

namespace accl {

enum class Memory { kHost, kCuda };

// True when this process has loaded the CUDA driver.
bool cudaLoaded();
Memory memoryOf(const void* p);
const char* memoryName(Memory m);      // "host memory", "CUDA device memory"
const char* backendForMemory(Memory m);  // "cpu", "nccl"

}  // namespace accl
