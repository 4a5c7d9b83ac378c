#include "host_memory.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "errors.h"

namespace accl {
namespace {

struct Region {
  size_t size;
  int fd;
  uint64_t inode, id;
};

std::mutex mu;
std::map<uintptr_t, Region> regions;  // by start address
std::atomic<size_t> live{0};          // regions.size(), read without the lock
uint64_t lastId = 0;

}  // namespace

void* hostAlloc(size_t bytes) {
  ACCL_ARG_CHECK(bytes > 0, "size is 0");
  const size_t page = sysconf(_SC_PAGESIZE), size = (bytes + page - 1) / page * page;
  // The descriptor stays open while the region lives: peers open /proc/<pid>/fd/<fd> to map it.
  int fd = memfd_create("accl-host", MFD_CLOEXEC);
  ACCL_SYSCHECK(fd, "memfd_create", "");
  struct stat st;
  void* p = MAP_FAILED;
  if (ftruncate(fd, size) == 0 && fstat(fd, &st) == 0)
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    ACCL_THROW(acclSystemError, "allocating %zu bytes of shared host memory failed: %s", bytes,
               strerror(err));
  }
  std::lock_guard<std::mutex> lock(mu);
  regions[reinterpret_cast<uintptr_t>(p)] = Region{size, fd, uint64_t(st.st_ino), ++lastId};
  live = regions.size();
  return p;
}

void hostFree(void* p) {
  if (!p) return;
  Region r;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = regions.find(reinterpret_cast<uintptr_t>(p));
    ACCL_ARG_CHECK(it != regions.end(), "%p was not returned by acclHostAlloc (or was freed)", p);
    r = it->second;
    regions.erase(it);
    live = regions.size();
  }
  munmap(p, r.size);
  close(r.fd);
}

HostRegion findHostRegion(const void* p) {
  if (live.load(std::memory_order_relaxed) == 0) return {};
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu);
  auto it = regions.upper_bound(a);
  if (it == regions.begin()) return {};
  --it;
  const Region& r = it->second;
  if (a - it->first >= r.size) return {};
  return HostRegion{r.fd, r.inode, r.id, it->first, r.size};
}

}  // namespace accl
