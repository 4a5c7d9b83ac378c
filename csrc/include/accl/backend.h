/*
 * The accl backend ABI, version 1: what a backend (built in or a plugin) gives the accl core.
 *
 * A plugin is a shared library named libaccl-backend-<name>.so that exports a variable
 *     const acclBackend_v1 acclBackendPlugin_v1;
 * A released version of this struct is frozen: a later ABI adds acclBackend_v2 beside it and
 * the loader tries the newest symbol a plugin exports first.
 *
 * Rules for every function pointer:
 *  - It returns an acclResult_t. acclNotSupported means "this backend does not offer this
 *    operation, type or op"; the core then reports it or composes the operation another way.
 *  - On failure, it describes the cause with host->setError (thread-local, printf-style). The
 *    core prefixes the rank, the call and its sequence number; the backend says only what it
 *    knows ("timed out after 5 s waiting for ranks 2,3").
 *  - Arguments are validated by the core first: buffers are non-null when count > 0, types and
 *    ops are in range, roots and peers are valid ranks, in-place layouts are the allowed ones.
 *    A collective of count 0 never reaches the backend (the core completes it, as NCCL
 *    discards it); a send or receive of count 0 does (the cpu backend completes it at once).
 *  - It never prints to stdout, never exits or aborts the process, and never blocks longer than
 *    args->timeout seconds; it returns acclTimeout then, acclRemoteError when *args->abortFlag
 *    becomes non-zero.
 *  - Only C types cross this boundary; nothing may throw across it.
 */
#ifndef ACCL_BACKEND_H_
#define ACCL_BACKEND_H_

#include "accl/accl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACCL_BACKEND_ABI_VERSION 1

typedef enum ACCL_ENUM_INT {
  acclLogNone = 0,
  acclLogWarn = 1,
  acclLogInfo = 2,
  acclLogTrace = 3
} acclLogLevel_t;

/* Writes a log line if `level` is enabled by ACCL_DEBUG (and `subsys` by ACCL_DEBUG_SUBSYS). */
typedef void (*acclLogger_t)(acclLogLevel_t level, const char* subsys, const char* fmt, ...);

/* What the core offers every backend; passed once to init and valid until the process ends. */
typedef struct {
  size_t size;          /* sizeof(acclBackendHost_v1) */
  unsigned int version; /* ACCL_BACKEND_ABI_VERSION */
  acclLogger_t log;
  /* Sets the calling thread's error message for the failing call. */
  void (*setError)(const char* fmt, ...);
} acclBackendHost_v1;

/* Per-communicator arguments. The struct is owned by the core and lives as long as the backend
 * communicator: a backend may keep the pointer. `timeout` may change between calls (setTimeout)
 * and `abortFlag` may become non-zero at any time from another thread: read both at each wait. */
typedef struct {
  size_t size;          /* sizeof(acclBackendCommArgs_v1) */
  unsigned int version; /* ACCL_BACKEND_ABI_VERSION */
  int rank;
  int nranks;
  double timeout;                /* seconds a call may block */
  const volatile int* abortFlag; /* non-zero once the communicator is aborted; load atomically */
  uint64_t commHash;             /* random per communicator, equal on all its ranks */
  uint64_t seq;                  /* sequence number of the operation being called, set by the
                                    core before each call: for the backend's messages */
  /* The core's out-of-band channel among the ranks (TCP), for the backend's own setup: */
  void* bootstrap;
  /* `data` holds nranks slots of `bytes` each; this rank's slot is filled in, and on return
   * every slot holds that rank's data. */
  acclResult_t (*allGather)(void* bootstrap, void* data, size_t bytes);
  acclResult_t (*barrier)(void* bootstrap);
} acclBackendCommArgs_v1;

typedef struct {
  const char* name;        /* "cpu", "nccl", ...: first, so any version can read it */
  unsigned int abiVersion; /* ACCL_BACKEND_ABI_VERSION this struct was built against */

  /* Called once, before any other function. */
  acclResult_t (*init)(const acclBackendHost_v1* host);
  /* The library's own version, as a number and a printable string ("2.28.3"). */
  acclResult_t (*getVersion)(int* version, const char** versionString);

  /* Creates this rank's backend communicator; collective over args->nranks ranks. */
  acclResult_t (*commInit)(const acclBackendCommArgs_v1* args, void** bcomm);
  /* Collective: completes all outstanding work. */
  acclResult_t (*commFinalize)(void* bcomm);
  /* Local: frees everything. Called after an abort too, with *abortFlag set. */
  acclResult_t (*commDestroy)(void* bcomm);

  /* Collectives and point to point, with the semantics of the functions of the same name in
   * accl.h. */
  acclResult_t (*allReduce)(const void* sendbuff, void* recvbuff, size_t count,
                            acclDataType_t datatype, acclRedOp_t op, void* bcomm, void* stream);
  acclResult_t (*broadcast)(const void* sendbuff, void* recvbuff, size_t count,
                            acclDataType_t datatype, int root, void* bcomm, void* stream);
  acclResult_t (*reduce)(const void* sendbuff, void* recvbuff, size_t count,
                         acclDataType_t datatype, acclRedOp_t op, int root, void* bcomm,
                         void* stream);
  acclResult_t (*allGather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                            acclDataType_t datatype, void* bcomm, void* stream);
  acclResult_t (*reduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                acclDataType_t datatype, acclRedOp_t op, void* bcomm,
                                void* stream);
  acclResult_t (*alltoAll)(const void* sendbuff, void* recvbuff, size_t count,
                           acclDataType_t datatype, void* bcomm, void* stream);
  acclResult_t (*gather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                         acclDataType_t datatype, int root, void* bcomm, void* stream);
  acclResult_t (*scatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                          acclDataType_t datatype, int root, void* bcomm, void* stream);
  acclResult_t (*barrier)(void* bcomm, void* stream);
  acclResult_t (*send)(const void* sendbuff, size_t count, acclDataType_t datatype, int peer,
                       void* bcomm, void* stream);
  acclResult_t (*recv)(void* recvbuff, size_t count, acclDataType_t datatype, int peer,
                       void* bcomm, void* stream);

  /* Bracket calls that run together (see acclGroupStart). The core calls these on every
   * backend a group touches, on the calling thread. */
  acclResult_t (*groupStart)(void);
  acclResult_t (*groupEnd)(void);
} acclBackend_v1;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCL_BACKEND_H_ */
