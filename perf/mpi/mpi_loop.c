/* The timed loop of accl-perf's MPI runner (python/accl/perf_peers.py), in C as accl's own loop
 * is, so that no library's figure carries Python's cost per call. Built once per MPI against
 * that MPI's mpi.h (`make build`: Open MPI's and MPICH's handles and constants differ) and
 * loaded with ctypes after mpi4py has initialized MPI; the calls run on MPI_COMM_WORLD. */
#include <mpi.h>
#include <string.h>

/* accl's element-type and reduction codes (accl.h) in the order of their values; MPI has no
 * average and no 16- or 8-bit floats. */
static MPI_Datatype datatype(int code) {
  switch (code) {
    case 0: return MPI_INT8_T;
    case 1: return MPI_UINT8_T;
    case 2: return MPI_INT32_T;
    case 3: return MPI_UINT32_T;
    case 4: return MPI_INT64_T;
    case 5: return MPI_UINT64_T;
    case 7: return MPI_FLOAT;
    case 8: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op reduction(int code) {
  switch (code) {
    case 0: return MPI_SUM;
    case 1: return MPI_PROD;
    case 2: return MPI_MAX;
    case 3: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

/* The collectives of accl-perf, by the names it passes; resolved once per loop, not per call. */
enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALLTOALL, GATHER, SCATTER,
       SENDRECV, KINDS };
static const char* const kNames[KINDS] = {"all_reduce", "all_gather", "reduce_scatter",
                                          "broadcast", "reduce", "alltoall", "gather", "scatter",
                                          "sendrecv"};

static int collective(const char* name) {
  for (int k = 0; k < KINDS; ++k)
    if (!strcmp(name, kNames[k])) return k;
  return -1;
}

/* One call in nccl-tests' layout: `count` elements per rank's block (the whole buffer for
 * all_reduce, broadcast, reduce and sendrecv). Out of place, the broadcast's root copies its
 * input into the output first, as a user of MPI_Bcast must. */
static int call(int kind, const void* src, void* out, int count, MPI_Datatype type, MPI_Op op,
                int root, int in_place, int me, int n, size_t bytes) {
  MPI_Comm w = MPI_COMM_WORLD;
  const void* mine = in_place ? MPI_IN_PLACE : src;
  const void* rootMine = in_place && me == root ? MPI_IN_PLACE : src;
  switch (kind) {
    case ALL_REDUCE: return MPI_Allreduce(mine, out, count, type, op, w);
    case ALL_GATHER: return MPI_Allgather(mine, count, type, out, count, type, w);
    case REDUCE_SCATTER: return MPI_Reduce_scatter_block(src, out, count, type, op, w);
    case BROADCAST:
      if (!in_place && me == root) memcpy(out, src, bytes);
      return MPI_Bcast(out, count, type, root, w);
    case REDUCE: return MPI_Reduce(rootMine, out, count, type, op, root, w);
    case ALLTOALL: return MPI_Alltoall(mine, count, type, out, count, type, w);
    case GATHER: return MPI_Gather(rootMine, count, type, out, count, type, root, w);
    case SCATTER:
      return MPI_Scatter(src, count, type, in_place && me == root ? MPI_IN_PLACE : out, count,
                         type, root, w);
    default: { /* SENDRECV: to the next rank, from the previous one */
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      if (in_place)
        return MPI_Sendrecv_replace(out, count, type, next, 0, prev, 0, w, MPI_STATUS_IGNORE);
      return MPI_Sendrecv(src, count, type, next, 0, out, count, type, prev, 0, w,
                          MPI_STATUS_IGNORE);
    }
  }
}

/* Whether MPI is initialized as this library sees it: false if this library's MPI is not the
 * one mpi4py initialized (two copies of libmpi in one process). */
int accl_mpi_ready(void) {
  int ready = 0;
  MPI_Initialized(&ready);
  return ready;
}

/* Times `iters` calls from a barrier with MPI_Wtime. Returns 0; 1 for a call without
 * nccl-tests' layout (the in-place reduce-scatter leaves its block at the start of the buffer);
 * -1 for a collective, type, reduction or count the caller should have refused; else MPI's
 * error code. */
int accl_mpi_time(const char* coll, const void* src, void* out, long count, int dtype, int op,
                  int root, int in_place, int iters, double* seconds) {
  const int kind = collective(coll);
  MPI_Datatype type = datatype(dtype);
  MPI_Op mop = reduction(op);
  int me, n, size, err;
  if (kind < 0 || type == MPI_DATATYPE_NULL || mop == MPI_OP_NULL || count > 0x7fffffff)
    return -1;
  if (in_place && kind == REDUCE_SCATTER) return 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Type_size(type, &size);
  if ((err = MPI_Barrier(MPI_COMM_WORLD)) != MPI_SUCCESS) return err;
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i)
    if ((err = call(kind, src, out, (int)count, type, mop, root, in_place, me, n,
                    (size_t)count * size)) != MPI_SUCCESS)
      return err;
  *seconds = MPI_Wtime() - t0;
  return 0;
}
