// A stand-in for the CUDA driver, for tests only: built as libfakecuda.so with the soname
// libcuda.so.1, so that a test process that loads it looks to accl like a process that loaded
// CUDA. It has the one function accl asks the driver: cuPointerGetAttribute, which calls every
// non-null pointer CUDA device memory when FAKE_CUDA_DEVICE=1 and host memory (unknown to the
// driver) otherwise.
#include <cstdlib>
#include <cstring>

extern "C" __attribute__((visibility("default"))) int cuPointerGetAttribute(
    void* data, int attribute, unsigned long long ptr) {
  constexpr int kMemoryType = 2, kInvalidValue = 1;
  constexpr unsigned kDevice = 2;
  const char* device = getenv("FAKE_CUDA_DEVICE");
  if (attribute != kMemoryType || !ptr || !device || strcmp(device, "1") != 0)
    return kInvalidValue;
  *static_cast<unsigned*>(data) = kDevice;
  return 0;
}
