#include "compose.h"

#include <cstring>
#include <vector>

#include "errors.h"
#include "logging.h"
#include "types.h"

namespace accl {

bool compositionForced(const Comm& c, const char* collective) {
  if (c.compose.empty()) return false;
  std::string list = "," + c.compose + ",";
  return list.find(",all,") != std::string::npos ||
         list.find("," + std::string(collective) + ",") != std::string::npos;
}

namespace {

// Runs `post` (which posts sends and receives) inside one backend group; the first failure wins,
// and the group is always closed.
acclResult_t inGroup(Comm& c, const std::function<acclResult_t()>& post) {
  const acclBackend_v1* b = c.backend;
  acclResult_t r = b->groupStart();
  if (r != acclSuccess) return r;
  acclResult_t posted = post();
  std::string msg = posted ? takeBackendMessage() : "";
  acclResult_t ended = b->groupEnd();
  if (posted != acclSuccess) {
    setBackendMessage(msg);
    return posted;
  }
  return ended;
}

const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

}  // namespace

void noteComposition(const char* collective) {
  ACCL_INFO("COLL", "%s: backend has none (%s); composing it from send/recv", collective,
            takeBackendMessage().c_str());
}

// Flat: the root sends to every rank. Good enough where a backend lacks broadcast, which
// NCCL-shaped libraries never do.
acclResult_t composeBroadcast(Comm& c, const void* send, void* recv, size_t count,
                              acclDataType_t type, int root, void* stream) {
  const acclBackend_v1* b = c.backend;
  return inGroup(c, [&] {
    acclResult_t r = acclSuccess;
    if (c.rank == root) {
      for (int p = 0; p < c.nranks && !r; ++p)
        if (p != root || send != recv) r = b->send(send, count, type, p, c.bcomm, stream);
      if (!r && send != recv) r = b->recv(recv, count, type, root, c.bcomm, stream);
    } else {
      r = b->recv(recv, count, type, root, c.bcomm, stream);
    }
    return r;
  });
}

acclResult_t composeGather(Comm& c, const void* send, void* recv, size_t count,
                           acclDataType_t type, int root, void* stream) {
  const acclBackend_v1* b = c.backend;
  const size_t block = count * typeSize(type);
  return inGroup(c, [&] {
    acclResult_t r = acclSuccess;
    if (c.rank == root) {
      for (int p = 0; p < c.nranks && !r; ++p)
        if (p != root) r = b->recv(at(recv, p * block), count, type, p, c.bcomm, stream);
      // The root's own block travels through a send to itself, which also works on device memory.
      if (!r && send != at(recv, root * block)) {
        r = b->send(send, count, type, root, c.bcomm, stream);
        if (!r) r = b->recv(at(recv, root * block), count, type, root, c.bcomm, stream);
      }
    } else {
      r = b->send(send, count, type, root, c.bcomm, stream);
    }
    return r;
  });
}

acclResult_t composeScatter(Comm& c, const void* send, void* recv, size_t count,
                            acclDataType_t type, int root, void* stream) {
  const acclBackend_v1* b = c.backend;
  const size_t block = count * typeSize(type);
  return inGroup(c, [&] {
    acclResult_t r = acclSuccess;
    if (c.rank == root) {
      for (int p = 0; p < c.nranks && !r; ++p)
        if (p != root || recv != at(send, root * block))
          r = b->send(at(send, p * block), count, type, p, c.bcomm, stream);
      if (!r && recv != at(send, root * block))
        r = b->recv(recv, count, type, root, c.bcomm, stream);
    } else {
      r = b->recv(recv, count, type, root, c.bcomm, stream);
    }
    return r;
  });
}

acclResult_t composeAlltoAll(Comm& c, const void* send, void* recv, size_t count,
                             acclDataType_t type, void* stream) {
  const acclBackend_v1* b = c.backend;
  const size_t block = count * typeSize(type);
  std::vector<char> copy;
  if (send == recv) {
    // In place needs the input kept while blocks arrive: possible only for host memory.
    if (stream) {
      setBackendMessage("in-place all-to-all is not offered by this backend and cannot be "
                        "composed on device memory; pass separate buffers");
      return acclNotSupported;
    }
    copy.assign(static_cast<const char*>(send), at(send, c.nranks * block));
    send = copy.data();
  }
  return inGroup(c, [&] {
    acclResult_t r = acclSuccess;
    // Staggered order spreads the traffic: rank i first talks to i+1, then i+2, ...
    for (int k = 0; k < c.nranks && !r; ++k) {
      int to = (c.rank + k) % c.nranks, from = (c.rank - k + c.nranks) % c.nranks;
      r = b->send(at(send, to * block), count, type, to, c.bcomm, stream);
      if (!r) r = b->recv(at(recv, from * block), count, type, from, c.bcomm, stream);
    }
    return r;
  });
}

// Dissemination barrier: round k exchanges a byte with the ranks 2^k away; log2(n) rounds. The
// byte lives in host memory, so this serves backends whose send/recv take host memory; the
// stream is passed on for the backend to accept or reject.
acclResult_t composeBarrier(Comm& c, void* stream) {
  const acclBackend_v1* b = c.backend;
  char out = 0, in = 0;
  for (int d = 1; d < c.nranks; d *= 2) {
    acclResult_t r = inGroup(c, [&] {
      acclResult_t e = b->send(&out, 1, acclUint8, (c.rank + d) % c.nranks, c.bcomm, stream);
      return e ? e : b->recv(&in, 1, acclUint8, (c.rank - d + c.nranks) % c.nranks, c.bcomm,
                             stream);
    });
    if (r != acclSuccess) return r;
  }
  return acclSuccess;
}

}  // namespace accl
