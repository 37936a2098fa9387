// LD_PRELOAD library for tests/integration/step06.py (step06_trace): records, per process, the order of
// the MPI calls that start, test and wait for a nonblocking all-reduce, one letter per call (I =
// MPI_Iallreduce, T = MPI_Test, W = MPI_Wait) appended to $DDP_MPI_CALLS/<pid>, and passes each call
// on to the MPI library. A T between two I of one step shows that the reducer let the buckets already
// started progress while backward was still producing the next ones (dist_test in the hook): the
// order of the calls, unlike their times, does not depend on how loaded the machine is.
//
// No MPI header is needed: the arguments are passed on unchanged, as Open MPI's handles (pointers)
// and counts (int).
//   cc -shared -fPIC -o mpi_calls.so mpi_calls.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void record(char what) {
  static int fd = -2;
  if (fd == -2) {
    const char *dir = getenv("DDP_MPI_CALLS");
    char path[4096];
    fd = -1;
    if (dir && snprintf(path, sizeof path, "%s/%ld", dir, (long)getpid()) < (int)sizeof path)
      fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  if (fd >= 0 && write(fd, &what, 1) != 1) fd = -1;
}

static void *next(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "mpi_calls.so: no %s after this library\n", name);
    abort();
  }
  return f;
}

int MPI_Iallreduce(const void *send, void *recv, int count, void *type, void *op, void *comm, void *req) {
  static int (*real)(const void *, void *, int, void *, void *, void *, void *);
  if (!real)
    real = (int (*)(const void *, void *, int, void *, void *, void *, void *))next("MPI_Iallreduce");
  record('I');
  return real(send, recv, count, type, op, comm, req);
}

int MPI_Test(void *req, int *flag, void *status) {
  static int (*real)(void *, int *, void *);
  if (!real) real = (int (*)(void *, int *, void *))next("MPI_Test");
  record('T');
  return real(req, flag, status);
}

int MPI_Wait(void *req, void *status) {
  static int (*real)(void *, void *);
  if (!real) real = (int (*)(void *, void *))next("MPI_Wait");
  record('W');
  return real(req, status);
}
