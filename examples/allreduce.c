/* All-reduce on 4 ranks of the cpu backend: the parent makes the unique id, each forked child is
 * one rank. Build: cc allreduce.c -I<accl>/include -L<dir of libaccl.so> -laccl */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accl/accl.h"

#define CHECK(call)                                                              \
  do {                                                                           \
    acclResult_t r_ = (call);                                                    \
    if (r_ != acclSuccess) {                                                     \
      fprintf(stderr, "%s: %s\n", acclGetErrorString(r_), acclGetLastError(NULL)); \
      _exit(1);                                                                  \
    }                                                                            \
  } while (0)

static int run_rank(acclUniqueId id, int rank, int nranks) {
  enum { COUNT = 1 << 20 };
  float* x = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; ++i) x[i] = (float)rank;
  acclComm_t comm;
  CHECK(acclCommInitRank(&comm, nranks, id, rank));
  CHECK(acclAllReduce(x, x, COUNT, acclFloat32, acclSum, comm, NULL)); /* in place */
  CHECK(acclCommDestroy(comm));
  float want = nranks * (nranks - 1) / 2.0f;
  int ok = x[0] == want && x[COUNT - 1] == want;
  if (rank == 0) fprintf(stderr, "all-reduce over %d ranks: %s\n", nranks, ok ? "ok" : "WRONG");
  free(x);
  return ok ? 0 : 1;
}

int main(void) {
  const int nranks = 4;
  acclUniqueId id;
  CHECK(acclGetUniqueId(&id)); /* this process hosts the rendezvous until the ranks have met */
  for (int r = 0; r < nranks; ++r)
    if (fork() == 0) _exit(run_rank(id, r, nranks));
  int failed = 0, status;
  while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  return failed;
}
