// probe_backend.c: the probe's check-in (MPI point to point) and the back end's version string.
#define _POSIX_C_SOURCE 200809L  // nanosleep
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"  // check.h: mpiCheck, ncclCheck, die, mallocCheck
#include "log.h"    // log.h: log_clock
#include "probe.h"

#ifdef HAVE_MPI
#include <mpi.h>
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

#define CHECK_IN_TAG 0x70726f  // a tag of its own, so that no other message can match
#define POLL_S 0.001           // between two polls of the pending messages

static void nap(double s) {
  struct timespec t = {0, (long)(s * 1e9)};
  nanosleep(&t, NULL);
}

#ifdef HAVE_MPI
// Appends " R," for every rank whose message is still pending; returns how many there are.
static int list_missing(const MPI_Request *req, int W, char *out, size_t len) {
  int n = 0;
  size_t used = 0;
  out[0] = '\0';
  for (int k = 1; k < W; k++) {
    if (req[k] == MPI_REQUEST_NULL) continue;
    if (used + 16 < len) used += (size_t)snprintf(out + used, len - used, "%s%d", n ? ", " : "", k);
    n++;
  }
  return n;
}

// Rank 0: receives one message from every other rank, for at most @p limit_s; names the absent ones.
static double gather_arrivals(int W, double limit_s, double timeout_s) {
  MPI_Request *req = mallocCheck((size_t)W * sizeof *req);
  int *seen = mallocCheck((size_t)W * sizeof *seen);
  req[0] = MPI_REQUEST_NULL;
  for (int k = 1; k < W; k++)
    mpiCheck(MPI_Irecv(&seen[k], 1, MPI_INT, k, CHECK_IN_TAG, MPI_COMM_WORLD, &req[k]));
  double t0 = log_clock(), waited = 0;
  for (int pending = W - 1; pending > 0;) {
    pending = 0;
    for (int k = 1; k < W; k++) {
      int done = 1;
      if (req[k] != MPI_REQUEST_NULL) mpiCheck(MPI_Test(&req[k], &done, MPI_STATUS_IGNORE));
      pending += !done;
    }
    waited = log_clock() - t0;
    if (pending && waited > limit_s) {
      char names[512];
      int n = list_missing(req, W, names, sizeof names);
      die(1,
          "probe: %s %s never arrived within %.1f s (half of --timeout %.1f): %s not started, stuck "
          "before its first collective, or on a node that cannot reach rank 0",
          n == 1 ? "rank" : "ranks", names, limit_s, timeout_s, n == 1 ? "it is" : "they are");
    }
    if (pending) nap(POLL_S);
  }
  for (int k = 1; k < W; k++) mpiCheck(MPI_Send(&seen[k], 1, MPI_INT, k, CHECK_IN_TAG, MPI_COMM_WORLD));
  free(seen);
  free(req);
  return waited;
}

// Any other rank: says it is here, then waits at most @p timeout_s for rank 0's answer.
static void report_arrival(int rank, double timeout_s) {
  int here = rank, answer = -1, done = 0;
  MPI_Request req[2];
  mpiCheck(MPI_Isend(&here, 1, MPI_INT, 0, CHECK_IN_TAG, MPI_COMM_WORLD, &req[0]));
  mpiCheck(MPI_Irecv(&answer, 1, MPI_INT, 0, CHECK_IN_TAG, MPI_COMM_WORLD, &req[1]));
  for (double t0 = log_clock(); !done; nap(POLL_S)) {
    mpiCheck(MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE));
    if (!done && log_clock() - t0 > timeout_s)
      die(1,
          "probe: rank 0 never answered rank %d's check-in within --timeout %.1f s: rank 0 is not "
          "started, stuck, or cannot be reached from here",
          rank, timeout_s);
  }
  if (answer != rank) die(1, "probe: rank 0 answered rank %d's check-in with %d", rank, answer);
}

bool probe_check_in(const ProcessGroup *pg, double timeout_s, double *waited_s) {
  *waited_s = 0;
  if (!pg->mpi_up) return false;
  if (pg->rank == 0)
    *waited_s = gather_arrivals(pg->world_size, timeout_s / 2, timeout_s);
  else
    report_arrival(pg->rank, timeout_s);
  return true;
}

static void mpi_version(char *out, size_t len) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  mpiCheck(MPI_Get_library_version(v, &n));
  v[strcspn(v, "\n")] = '\0';  // Open MPI's is one line; MPICH's goes on over several
  snprintf(out, len, "%s", v);
}
#else
bool probe_check_in(const ProcessGroup *pg, double timeout_s, double *waited_s) {
  (void)pg, (void)timeout_s;
  *waited_s = 0;
  return false;
}

static void mpi_version(char *out, size_t len) { snprintf(out, len, "MPI (not built in)"); }
#endif

#ifdef HAVE_NCCL
static void nccl_version(char *out, size_t len) {
  int v = 0;
  ncclCheck(ncclGetVersion(&v));  // major*10000 + minor*100 + patch since NCCL 2.9
  snprintf(out, len, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}
#else
static void nccl_version(char *out, size_t len) { snprintf(out, len, "NCCL (not built in)"); }
#endif

void probe_backend_version(const ProcessGroup *pg, char *out, size_t len) {
  if (pg->backend == BACKEND_NCCL)
    nccl_version(out, len);
  else
    mpi_version(out, len);
}
