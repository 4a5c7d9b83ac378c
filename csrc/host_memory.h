// Host memory that the ranks of a node share (acclHostAlloc): a memfd, mapped shared. A peer
// process maps the same file through /proc/<pid>/fd and then moves data into the buffer with
// plain stores, where private memory needs a kernel copy (process_vm_writev) for each transfer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accl {

// What a peer needs to map a region. `id` is unique within the owning process for its
// lifetime (a freed region's descriptor and inode numbers are reused); `inode` lets the peer
// check that the descriptor it opened is still this region's file. id 0: no region.
struct HostRegion {
  int64_t fd = -1;
  uint64_t inode = 0, id = 0;
  uint64_t base = 0, size = 0;  // the owner's address of the region and its bytes
};

void* hostAlloc(size_t bytes);  // throws acclSystemError when the kernel refuses
void hostFree(void* p);         // throws acclInvalidArgument unless p came from hostAlloc
// The region holding address p, or id 0 (cheaply, when no region exists).
HostRegion findHostRegion(const void* p);

}  // namespace accl
