/*
 * libaccl-backend-example.so: the smallest complete accl backend plugin, as a vendor's starting
 * point. It is plain C and needs only the installed accl headers (see CMakeLists.txt and
 * docs/plugins.md).
 *
 * It supports communicators of one rank, on host memory: every collective is then a copy (and
 * every reduction over one rank is the identity), and send/recv can only be to the rank itself,
 * inside a group. Larger communicators are refused at creation with acclNotSupported. A real
 * backend replaces the bodies below with calls into its library, and keeps the rest: the
 * table, the error reporting through host->setError, the logging through host->log, and the
 * rule that no call blocks past args->timeout or ignores *args->abortFlag (nothing here
 * blocks, so there is nothing to poll).
 */
#include <stdlib.h>
#include <string.h>

#include "accl/backend.h"

#define EXAMPLE_VERSION 10000 /* 1.0.0, reported by getVersion */
#define EXAMPLE_VERSION_STRING "1.0.0"
#define MAX_PENDING 64 /* queued sends (or receives) per group */

static const acclBackendHost_v1* host;

typedef struct {
  const acclBackendCommArgs_v1* args; /* owned by the core, valid until commDestroy */
} ExampleComm;

static size_t typeSize(acclDataType_t t) {
  static const size_t sizes[acclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[t];
}

/* Device memory would need the vendor's runtime; this backend works on host memory only. */
static acclResult_t checkStream(void* stream) {
  if (stream == NULL) return acclSuccess;
  host->setError("the example backend works on host memory and takes stream NULL");
  return acclInvalidArgument;
}

/* recvbuff = sendbuff. In-place calls pass the same pointer; the core rejected other overlaps. */
static acclResult_t copy(const void* sendbuff, void* recvbuff, size_t count, acclDataType_t type,
                         void* stream) {
  acclResult_t r = checkStream(stream);
  if (r == acclSuccess && count > 0 && sendbuff != recvbuff)
    memcpy(recvbuff, sendbuff, count * typeSize(type));
  return r;
}

/* ------------------------------------------------------------------ lifecycle */

static acclResult_t exampleInit(const acclBackendHost_v1* h) {
  /* A core older than the header this was built with would pass a smaller struct. */
  if (h->version < 1 || h->size < sizeof(acclBackendHost_v1)) return acclInvalidUsage;
  host = h;
  host->log(acclLogInfo, "INIT", "example backend %s loaded", EXAMPLE_VERSION_STRING);
  return acclSuccess;
}

static acclResult_t exampleGetVersion(int* version, const char** versionString) {
  *version = EXAMPLE_VERSION;
  *versionString = EXAMPLE_VERSION_STRING;
  return acclSuccess;
}

static acclResult_t exampleCommInit(const acclBackendCommArgs_v1* args, void** bcomm) {
  ExampleComm* c;
  if (args->nranks != 1) {
    host->setError("the example backend supports communicators of 1 rank only, not %d",
                   args->nranks);
    return acclNotSupported;
  }
  c = (ExampleComm*)malloc(sizeof(*c));
  if (c == NULL) {
    host->setError("out of host memory");
    return acclSystemError;
  }
  c->args = args;
  host->log(acclLogInfo, "INIT", "example: communicator of 1 rank ready");
  *bcomm = c;
  return acclSuccess;
}

static acclResult_t exampleCommFinalize(void* bcomm) {
  (void)bcomm; /* every call completes before it returns: nothing is outstanding */
  return acclSuccess;
}

static acclResult_t exampleCommDestroy(void* bcomm) {
  free(bcomm);
  return acclSuccess;
}

/* ------------------------------------------------------------------ collectives
 * The core has checked the arguments (types, ops, roots in range, buffers, in-place layouts);
 * with one rank, every root is 0 and every block is the whole buffer. */

static acclResult_t exampleAllReduce(const void* s, void* r, size_t n, acclDataType_t t,
                                     acclRedOp_t op, void* b, void* st) {
  (void)op, (void)b; /* sum, prod, max, min and avg of one value are that value */
  return copy(s, r, n, t, st);
}
static acclResult_t exampleBroadcast(const void* s, void* r, size_t n, acclDataType_t t, int root,
                                     void* b, void* st) {
  (void)root, (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleReduce(const void* s, void* r, size_t n, acclDataType_t t,
                                  acclRedOp_t op, int root, void* b, void* st) {
  (void)op, (void)root, (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleAllGather(const void* s, void* r, size_t n, acclDataType_t t, void* b,
                                     void* st) {
  (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleReduceScatter(const void* s, void* r, size_t n, acclDataType_t t,
                                         acclRedOp_t op, void* b, void* st) {
  (void)op, (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleAlltoAll(const void* s, void* r, size_t n, acclDataType_t t, void* b,
                                    void* st) {
  (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleGather(const void* s, void* r, size_t n, acclDataType_t t, int root,
                                  void* b, void* st) {
  (void)root, (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleScatter(const void* s, void* r, size_t n, acclDataType_t t, int root,
                                   void* b, void* st) {
  (void)root, (void)b;
  return copy(s, r, n, t, st);
}
static acclResult_t exampleBarrier(void* b, void* st) {
  (void)b;
  return checkStream(st);
}

/* ------------------------------------------------------------------ point to point and groups
 * A rank can only talk to itself, and a send to itself completes only once its receive is
 * posted: both are queued inside a group and matched in order at the outermost group end. The
 * queue is per thread, as groups are. */

typedef struct {
  char* buf;
  size_t bytes;
} Pending;

static _Thread_local int groupDepth;
static _Thread_local Pending sends[MAX_PENDING], recvs[MAX_PENDING];
static _Thread_local int nsends, nrecvs;

static acclResult_t queue(Pending* q, int* n, const void* buf, size_t count, acclDataType_t t,
                          void* stream) {
  acclResult_t r = checkStream(stream);
  if (r != acclSuccess) return r;
  if (groupDepth == 0) {
    host->setError("a send or receive on one rank can only complete inside a group (with its "
                   "matching receive or send)");
    return acclInvalidUsage;
  }
  if (*n == MAX_PENDING) {
    host->setError("more than %d sends or receives in one group", MAX_PENDING);
    return acclInvalidUsage;
  }
  q[*n].buf = (char*)buf;
  q[*n].bytes = count * typeSize(t);
  ++*n;
  return acclSuccess;
}

static acclResult_t exampleSend(const void* buf, size_t n, acclDataType_t t, int peer, void* b,
                                void* st) {
  (void)peer, (void)b; /* peer is 0: the core checked it */
  return queue(sends, &nsends, buf, n, t, st);
}
static acclResult_t exampleRecv(void* buf, size_t n, acclDataType_t t, int peer, void* b,
                                void* st) {
  (void)peer, (void)b;
  return queue(recvs, &nrecvs, buf, n, t, st);
}

static acclResult_t exampleGroupStart(void) {
  ++groupDepth;
  return acclSuccess;
}

static acclResult_t exampleGroupEnd(void) {
  acclResult_t r = acclSuccess;
  int i;
  if (groupDepth == 0) {
    host->setError("group end without group start");
    return acclInvalidUsage;
  }
  if (--groupDepth > 0) return acclSuccess;
  if (nsends != nrecvs) {
    host->setError("%d sends and %d receives in the group: every send to this rank needs a "
                   "receive", nsends, nrecvs);
    r = acclInvalidUsage;
  }
  for (i = 0; r == acclSuccess && i < nsends; ++i) {
    if (sends[i].bytes != recvs[i].bytes) {
      host->setError("send %d of the group has %zu bytes, its receive %zu", i, sends[i].bytes,
                     recvs[i].bytes);
      r = acclInvalidUsage;
    } else if (sends[i].bytes > 0) {
      memmove(recvs[i].buf, sends[i].buf, sends[i].bytes);
    }
  }
  nsends = nrecvs = 0;
  return r;
}

/* ------------------------------------------------------------------ the exported table
 * The loader looks up this symbol (the newest ABI version first). Only it is exported: the
 * CMake project builds with hidden visibility. */

__attribute__((visibility("default"))) const acclBackend_v1 acclBackendPlugin_v1 = {
    .name = "example",
    .abiVersion = ACCL_BACKEND_ABI_VERSION,
    .init = exampleInit,
    .getVersion = exampleGetVersion,
    .commInit = exampleCommInit,
    .commFinalize = exampleCommFinalize,
    .commDestroy = exampleCommDestroy,
    .allReduce = exampleAllReduce,
    .broadcast = exampleBroadcast,
    .reduce = exampleReduce,
    .allGather = exampleAllGather,
    .reduceScatter = exampleReduceScatter,
    .alltoAll = exampleAlltoAll,
    .gather = exampleGather,
    .scatter = exampleScatter,
    .barrier = exampleBarrier,
    .send = exampleSend,
    .recv = exampleRecv,
    .groupStart = exampleGroupStart,
    .groupEnd = exampleGroupEnd,
};
