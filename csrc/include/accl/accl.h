/*
 * accl — one NCCL-shaped collective-communication API over several backends.
 *
 * Conventions shared by every function below:
 *  - Every function returns an acclResult_t. On failure, acclGetLastError() returns a message
 *    for the calling thread that says what was wrong, on which rank and in which call.
 *  - Counts are element counts of type size_t; buffers are device pointers of the communicator's
 *    backend (host pointers for the built-in "cpu" backend).
 *  - `stream` is an opaque handle of the backend's device runtime (a cudaStream_t for nccl, a
 *    hipStream_t for rccl). The cpu backend works on host memory and takes NULL.
 *  - Collectives are matched by call order: every rank of a communicator must call the same
 *    collectives in the same order with matching arguments.
 *  - No call blocks longer than the communicator's timeout. When it expires the call returns
 *    acclTimeout, the message names the operation, its sequence number and the ranks that did
 *    not arrive, and the communicator is left in an error state (see acclCommGetAsyncError):
 *    destroy or abort it.
 *  - An invalid argument is detected before any data moves; the call returns
 *    acclInvalidArgument or acclInvalidUsage and the communicator stays usable.
 */
#ifndef ACCL_ACCL_H_
#define ACCL_ACCL_H_

#include <stddef.h>
#include <stdint.h>

#include "accl/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ACCL_API __attribute__((visibility("default")))
#else
#define ACCL_API
#endif

/* The enums below are int-sized in C and C++ alike. C++ gets the fixed underlying type
 * explicitly, so that any int a C caller passes is a value of the enum type (and rejected as
 * invalid), not undefined behaviour. */
#ifdef __cplusplus
#define ACCL_ENUM_INT : int
#else
#define ACCL_ENUM_INT
#endif

/* Result codes. 0..7 have the values and meanings of ncclResult_t. */
typedef enum ACCL_ENUM_INT {
  acclSuccess = 0,
  acclUnhandledDeviceError = 1, /* the device runtime (CUDA, HIP, ...) failed */
  acclSystemError = 2,          /* a system call failed: shared memory, sockets, dlopen */
  acclInternalError = 3,        /* a bug in accl or a backend */
  acclInvalidArgument = 4,      /* a bad pointer, count, type, op, root or peer */
  acclInvalidUsage = 5,         /* a call that is not valid now: destroyed comm, group misuse */
  acclRemoteError = 6,          /* a peer failed, disconnected or disagreed */
  acclInProgress = 7,           /* a non-blocking communicator is still being set up */
  acclTimeout = 8,              /* the communicator's timeout expired */
  acclNotSupported = 9,         /* the backend does not offer this operation or type */
  acclNumResults = 10
} acclResult_t;

/* Element types. Values follow ncclDataType_t. */
typedef enum ACCL_ENUM_INT {
  acclInt8 = 0,
  acclUint8 = 1,
  acclInt32 = 2,
  acclUint32 = 3,
  acclInt64 = 4,
  acclUint64 = 5,
  acclFloat16 = 6,    /* IEEE 754 binary16 */
  acclFloat32 = 7,
  acclFloat64 = 8,
  acclBfloat16 = 9,
  acclFloat8e4m3 = 10, /* OCP FP8 E4M3 (finite-only, max 448) */
  acclFloat8e5m2 = 11, /* OCP FP8 E5M2 */
  acclNumTypes = 12
} acclDataType_t;

/* Reduction operations. Values follow ncclRedOp_t. Avg divides the sum by the rank count
 * (integer division for integer types). */
typedef enum ACCL_ENUM_INT {
  acclSum = 0,
  acclProd = 1,
  acclMax = 2,
  acclMin = 3,
  acclAvg = 4,
  acclNumOps = 5
} acclRedOp_t;

/* An opaque rendezvous token: the root's address and a random 128-bit secret. Create it once
 * with acclGetUniqueId and hand the same bytes to every rank by any means (environment, file,
 * a key-value store, MPI). */
#define ACCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[ACCL_UNIQUE_ID_BYTES];
} acclUniqueId;

typedef struct acclComm* acclComm_t;

/* Configuration for acclCommInitRankConfig and acclCommSplit. Initialise it with
 * ACCL_CONFIG_INITIALIZER, then change the fields you need; fields left at their initial value
 * take the environment's setting or the default. */
typedef struct {
  size_t size;          /* sizeof(acclConfig_t); lets later versions add fields */
  unsigned int magic;   /* ACCL_CONFIG_MAGIC: catches an uninitialised struct */
  unsigned int version; /* ACCL_VERSION_CODE of the header the caller compiled against */
  int blocking;         /* 1 (default): init returns when the communicator is ready.
                           0: init returns acclInProgress at once and finishes in the
                           background; poll acclCommGetAsyncError until it is not
                           acclInProgress. */
  double timeout;       /* seconds any call on this communicator may block; <= 0 takes
                           ACCL_TIMEOUT (default 600) */
  const char* backend;  /* backend name ("cpu", ...); NULL takes ACCL_BACKEND (default cpu) */
} acclConfig_t;

#define ACCL_CONFIG_MAGIC 0xacc1c0f6u
#define ACCL_CONFIG_INITIALIZER \
  { sizeof(acclConfig_t), ACCL_CONFIG_MAGIC, ACCL_VERSION_CODE, 1, 0.0, NULL }

/* acclCommSplit: ranks passing this color get no new communicator (*newcomm = NULL). */
#define ACCL_SPLIT_NOCOLOR (-1)

/* ---------------------------------------------------------------- library and communicators */

/* Stores ACCL_VERSION_CODE of the loaded library (major*10000 + minor*100 + patch). */
ACCL_API acclResult_t acclGetVersion(int* version);

/* Host memory that the ranks of a node share, zeroed, page-aligned (like ncclMemAlloc, for host
 * buffers). Any host buffer works with every call; a collective's buffers in this memory let the
 * cpu backend's peers on the node copy to and from them directly instead of through the kernel
 * (docs/algorithms.md, "Shared host memory"). Free it with acclHostFree, after every call using
 * it has returned on every rank. */
ACCL_API acclResult_t acclHostAlloc(void** ptr, size_t size);
/* Frees memory from acclHostAlloc; NULL is ignored. */
ACCL_API acclResult_t acclHostFree(void* ptr);

/* Creates a new unique id and starts, in this process, the service that the ranks meet at.
 * The service answers one rendezvous and then stops; this process must live until every rank
 * has returned from acclCommInitRank. With ACCL_COMM_ID=host:port set, no service starts here:
 * rank 0 hosts it at that address inside acclCommInitRank, and every rank must see the same
 * ACCL_COMM_ID and ACCL_COMM_SECRET. */
ACCL_API acclResult_t acclGetUniqueId(acclUniqueId* uniqueId);

/* Creates this rank's member of a communicator of `nranks` ranks (0 <= rank < nranks). Blocks
 * until all ranks have joined or the timeout (ACCL_TIMEOUT) expires. */
ACCL_API acclResult_t acclCommInitRank(acclComm_t* comm, int nranks, acclUniqueId commId, int rank);

/* As acclCommInitRank, with a configuration; `config` may be NULL for the defaults. */
ACCL_API acclResult_t acclCommInitRankConfig(acclComm_t* comm, int nranks, acclUniqueId commId,
                                             int rank, acclConfig_t* config);

/* Collective over `comm`: ranks with the same `color` form a new communicator, ordered by `key`
 * and then by their rank in `comm`. Ranks passing ACCL_SPLIT_NOCOLOR get *newcomm = NULL.
 * `config` may be NULL to inherit the parent's. */
ACCL_API acclResult_t acclCommSplit(acclComm_t comm, int color, int key, acclComm_t* newcomm,
                                    acclConfig_t* config);

/* Collective: waits until every rank has finished all operations on `comm`. After it, only
 * acclCommDestroy is valid. */
ACCL_API acclResult_t acclCommFinalize(acclComm_t comm);

/* Frees this rank's resources of `comm`. Local: it does not wait for other ranks. */
ACCL_API acclResult_t acclCommDestroy(acclComm_t comm);

/* Marks `comm` aborted, wakes any call blocked on it (which then returns acclRemoteError),
 * and frees it. Local and bounded in time; may be called from any thread. */
ACCL_API acclResult_t acclCommAbort(acclComm_t comm);

/* Stores the communicator's error state: acclSuccess, acclInProgress while a non-blocking
 * init runs, or the error (timeout, dead peer, failed init) that left it unusable. */
ACCL_API acclResult_t acclCommGetAsyncError(acclComm_t comm, acclResult_t* asyncError);

/* Sets the seconds that each later call on `comm` may block (the timeout of acclConfig_t),
 * for instance a longer one around a slow phase of a program. Local: each rank sets its own.
 * Not concurrent with another call on `comm`: it applies from the next call on. Communicators
 * split from `comm` later inherit it. `timeout` must be positive and finite. Like a
 * collective, it fails with acclInProgress while a non-blocking init runs and with the earlier
 * error on a communicator that an error left unusable. */
ACCL_API acclResult_t acclCommSetTimeout(acclComm_t comm, double timeout);

/* Stores the communicator's timeout in seconds: what bounds each call on it. Fails as
 * acclCommSetTimeout does. */
ACCL_API acclResult_t acclCommGetTimeout(const acclComm_t comm, double* timeout);

ACCL_API acclResult_t acclCommCount(const acclComm_t comm, int* count);
ACCL_API acclResult_t acclCommUserRank(const acclComm_t comm, int* rank);

/* The flight recorder: the communicator's last ACCL_TRACE_BUFFER operations (sequence number,
 * call, type, count, root or peer, op, state queued/started/done/failed, times in microseconds
 * since the communicator was created) as JSON. Copies at most *size bytes, NUL-terminated, into
 * buf (which may be NULL) and stores the full size in *size. Also valid on a communicator that
 * failed. The same JSON is written to ACCL_TRACE_DIR on a timeout or a dead peer. */
ACCL_API acclResult_t acclCommGetTrace(acclComm_t comm, char* buf, size_t* size);

/* Stores the backend's name ("cpu", "nccl", ...) in a static string. */
ACCL_API acclResult_t acclCommGetBackend(const acclComm_t comm, const char** name);

/* Loads backend `name` (a name such as "cpu" or "nccl", or a plugin library's path) if it is not
 * loaded yet, and reports its library version and where it was loaded from. Any output pointer
 * may be NULL; the strings live as long as the process. Fails, with the places it looked in
 * acclGetLastError, when the backend is not available. */
ACCL_API acclResult_t acclGetBackendInfo(const char* name, int* version,
                                         const char** versionString, const char** libraryPath);

/* A static, human-readable name for a result code. */
ACCL_API const char* acclGetErrorString(acclResult_t result);

/* The message of the last failed accl call on the calling thread ("" if none). Valid until the
 * next accl call on this thread. */
ACCL_API const char* acclGetLastError(acclComm_t comm);

/* ---------------------------------------------------------------- collectives
 * In place is allowed wherever NCCL allows it, with NCCL's layout:
 *   AllReduce, Broadcast, Reduce:  sendbuff == recvbuff
 *   AllGather:      sendbuff == recvbuff + rank * sendcount
 *   ReduceScatter:  recvbuff == sendbuff + rank * recvcount
 *   AlltoAll:       sendbuff == recvbuff
 *   Gather (root):  sendbuff == recvbuff + root * sendcount
 *   Scatter (root): recvbuff == sendbuff + root * recvcount
 * Other overlaps between sendbuff and recvbuff are rejected. */

/* recvbuff[i] = op over ranks of sendbuff[i], for i < count, on every rank. */
ACCL_API acclResult_t acclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    acclDataType_t datatype, acclRedOp_t op, acclComm_t comm,
                                    void* stream);

/* Copies `count` elements of sendbuff at `root` into recvbuff on every rank. sendbuff is read
 * only at the root. */
ACCL_API acclResult_t acclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    acclDataType_t datatype, int root, acclComm_t comm,
                                    void* stream);

/* As acclAllReduce, but only `root` receives the result; recvbuff is used only at the root. */
ACCL_API acclResult_t acclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 acclDataType_t datatype, acclRedOp_t op, int root,
                                 acclComm_t comm, void* stream);

/* recvbuff (nranks * sendcount elements) receives every rank's sendbuff in rank order. */
ACCL_API acclResult_t acclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    acclDataType_t datatype, acclComm_t comm, void* stream);

/* sendbuff holds nranks blocks of recvcount elements; rank r receives the reduction of block r
 * over all ranks. */
ACCL_API acclResult_t acclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        acclDataType_t datatype, acclRedOp_t op,
                                        acclComm_t comm, void* stream);

/* sendbuff and recvbuff hold nranks blocks of `count` elements; block j of rank i's sendbuff
 * lands in block i of rank j's recvbuff. */
ACCL_API acclResult_t acclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   acclDataType_t datatype, acclComm_t comm, void* stream);

/* At `root`, recvbuff (nranks * sendcount elements) receives every rank's sendbuff in rank
 * order; recvbuff is used only at the root. */
ACCL_API acclResult_t acclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 acclDataType_t datatype, int root, acclComm_t comm,
                                 void* stream);

/* Block r of the root's sendbuff (nranks * recvcount elements) lands in rank r's recvbuff;
 * sendbuff is read only at the root. */
ACCL_API acclResult_t acclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  acclDataType_t datatype, int root, acclComm_t comm,
                                  void* stream);

/* Returns once every rank of `comm` has called it. */
ACCL_API acclResult_t acclBarrier(acclComm_t comm, void* stream);

/* Point to point. A send must be matched by a recv of the same count and type on `peer`;
 * messages between one pair of ranks arrive in the order they were sent. Inside a group, all
 * sends and receives progress together, so exchanges that would deadlock one by one do not. */
ACCL_API acclResult_t acclSend(const void* sendbuff, size_t count, acclDataType_t datatype,
                               int peer, acclComm_t comm, void* stream);
ACCL_API acclResult_t acclRecv(void* recvbuff, size_t count, acclDataType_t datatype, int peer,
                               acclComm_t comm, void* stream);

/* Calls between acclGroupStart and acclGroupEnd on the calling thread are queued and run
 * together at the outermost acclGroupEnd: collectives in call order, then all point-to-point
 * operations concurrently. Groups nest. Argument errors are reported by the call that made
 * them; errors while running are reported by acclGroupEnd. */
ACCL_API acclResult_t acclGroupStart(void);
ACCL_API acclResult_t acclGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCL_ACCL_H_ */
