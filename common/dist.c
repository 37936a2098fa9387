// dist.c: launcher discovery, backend choice and dispatch to dist_mpi.c / dist_nccl.c.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dist_backend.h"
#include "watchdog.h"

const char *dist_backend_name(Backend b) { return b == BACKEND_NCCL ? "nccl" : "mpi"; }

size_t dist_type_size(DistType type) {
  return type == DIST_DOUBLE ? sizeof(double) : type == DIST_INT ? sizeof(int) : sizeof(float);
}

// Reads a non-negative integer environment variable; -1 when unset, ends the job when malformed.
static int env_int(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 0 || v > INT_MAX) die(1, "%s='%s' is not a non-negative integer", name, s);
  return (int)v;
}

static bool launched_by_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

// Ranks from RANK / WORLD_SIZE / LOCAL_RANK (torchrun) or SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID.
static void from_env(ProcessGroup *pg, const char *rank, const char *size, const char *local) {
  pg->rank = env_int(rank);
  pg->world_size = env_int(size);
  pg->local_rank = env_int(local);
  if (pg->rank < 0 || pg->world_size < 0)
    die(1, "%s and %s must both be set (%s=%s, %s=%s)", rank, size, rank,
        getenv(rank) ? getenv(rank) : "unset", size, getenv(size) ? getenv(size) : "unset");
  if (pg->world_size < 1) die(1, "%s=%d: the world needs at least one process", size, pg->world_size);
  if (pg->rank >= pg->world_size)
    die(1, "%s=%d but %s=%d: ranks run from 0 to %d", rank, pg->rank, size, pg->world_size,
        pg->world_size - 1);
  if (pg->local_rank < 0) {
    if (pg->world_size > 1) die(1, "%s is not set; the launcher must say which GPU is this rank's", local);
    pg->local_rank = 0;
  }
  if (pg->local_rank > pg->rank)
    die(1, "%s=%d is larger than %s=%d", local, pg->local_rank, rank, pg->rank);
  // Ranks on this node: torchrun sets LOCAL_WORLD_SIZE; srun sets SLURM_NTASKS_PER_NODE when asked
  // for a fixed count. Without either, this rank only knows that it is at least local_rank + 1.
  pg->local_size = env_int("LOCAL_WORLD_SIZE");
  if (pg->local_size < 0) pg->local_size = env_int("SLURM_NTASKS_PER_NODE");
  if (pg->local_size < 0) pg->local_size = pg->local_rank + 1;
}

static void discover(ProcessGroup *pg) {
  if (launched_by_mpirun()) {
    if (!dist_have_mpi())
      die(1, "started by mpirun, but this program was built without MPI; rebuild with MPI installed "
             "or launch with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK)");
    pg->launcher = LAUNCH_MPI;
    dist_mpi_init(pg);
    pg->mpi_up = true;
  } else if (getenv("RANK") || getenv("WORLD_SIZE")) {
    pg->launcher = LAUNCH_ENV;
    from_env(pg, "RANK", "WORLD_SIZE", "LOCAL_RANK");
  } else if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS")) {
    pg->launcher = LAUNCH_SLURM;
    from_env(pg, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  } else {
    pg->launcher = LAUNCH_NONE;
    pg->world_size = pg->local_size = 1;
  }
}

static Backend choose_backend(const ProcessGroup *pg, const char *name, Device dev) {
  Backend b;
  if (strcmp(name, "auto") == 0) {
    b = dev == DEVICE_CUDA && dist_have_nccl() ? BACKEND_NCCL : BACKEND_MPI;
  } else if (strcmp(name, "nccl") == 0) {
    b = BACKEND_NCCL;
  } else if (strcmp(name, "mpi") == 0) {
    b = BACKEND_MPI;
  } else {
    die(2, "unknown --backend '%s' (expected auto, nccl or mpi)", name);
  }
  if (b == BACKEND_NCCL && !dist_have_nccl())
    die(1, "--backend nccl: this program was built without NCCL (CUDA toolkit not found at build "
           "time); use --backend mpi");
  if (b == BACKEND_NCCL && dev != DEVICE_CUDA)
    die(1, "--backend nccl needs GPU buffers; use --device cuda, or --backend mpi on the CPU");
  if (b == BACKEND_MPI && pg->world_size > 1 && pg->launcher != LAUNCH_MPI)
    die(1, "--backend mpi needs an MPI launcher: start with `mpirun -np %d ...`, or use --backend nccl "
           "with %s", pg->world_size, pg->launcher == LAUNCH_SLURM ? "srun" : "torchrun");
  return b;
}

void dist_init(ProcessGroup *pg, const char *backend, Device dev, double timeout_s) {
  memset(pg, 0, sizeof *pg);
  pg->timeout = timeout_s > 0 ? timeout_s : 300.0;
  discover(pg);
  check_set_rank(pg->rank);
  if (pg->mpi_up) dist_mpi_set_abort();  // from here on, any failure on any rank ends every rank
  pg->backend = choose_backend(pg, backend, dev);
}

void dist_connect(ProcessGroup *pg, const Ctx *c) {
  pg->ctx = c;
  dev_event_init(c, &pg->ready);
  if (pg->backend == BACKEND_NCCL) dist_nccl_connect(pg);
  if (pg->world_size > 1) {  // a peer that never joins a collective must not hang this rank
    bool nccl = pg->backend == BACKEND_NCCL;
    watchdog_start(pg->timeout, nccl ? dist_nccl_poll : NULL, nccl ? dist_nccl_abort : NULL, pg);
  }
}

// A group of one process with the MPI backend and no MPI launcher: every collective is the identity.
static bool solo(const ProcessGroup *pg) { return pg->backend == BACKEND_MPI && !pg->mpi_up; }

void dist_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "dist_all_reduce: DIST_AVG needs float data");
  if (n == 0 || solo(pg)) return;
  if (pg->backend == BACKEND_NCCL) {
    dist_nccl_all_reduce(pg, buf, n, type, op);
  } else {
    dist_mpi_all_reduce(pg, buf, n, type, op);
  }
}

void dist_work_init(ProcessGroup *pg, DistWork *w) {
  memset(w, 0, sizeof *w);
  dev_event_init(pg->ctx, &w->start);
  dev_event_init(pg->ctx, &w->end);
}

void dist_work_free(ProcessGroup *pg, DistWork *w) {
  if (w->active) die(1, "dist_work_free: the all-reduce is still in flight (call dist_wait first)");
  dev_event_free(pg->ctx, &w->end);
  dev_event_free(pg->ctx, &w->start);
}

void dist_all_reduce_async(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op,
                           DistWork *w) {
  if (w->active) die(1, "dist_all_reduce_async: this handle is still in flight");
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "dist_all_reduce_async: DIST_AVG needs floats");
  w->buf = buf;
  w->n = n;
  w->type = type;
  w->op = op;
  w->active = true;
  w->done = false;
  if (n == 0 || solo(pg)) {
    dev_event_record(pg->ctx, &w->start, NULL);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
  } else if (pg->backend == BACKEND_NCCL) {
    dev_event_record(pg->ctx, &pg->ready, NULL);            // after the work that wrote buf ...
    dev_stream_wait(pg->ctx, pg->comm_stream, &pg->ready);  // ... the communication stream starts
    dev_event_record(pg->ctx, &w->start, pg->comm_stream);
    dist_nccl_all_reduce_on(pg, buf, n, type, op, pg->comm_stream);
    dev_event_record(pg->ctx, &w->end, pg->comm_stream);
  } else {
    dist_mpi_all_reduce_start(pg, w);
  }
}

bool dist_test(ProcessGroup *pg, DistWork *w) {
  if (!w->active || w->done || pg->backend == BACKEND_NCCL) return true;
  return dist_mpi_test(pg, w);
}

void dist_wait(ProcessGroup *pg, DistWork *w) {
  if (!w->active) die(1, "dist_wait: no all-reduce in flight on this handle");
  if (pg->backend == BACKEND_NCCL && !w->done) {
    dev_stream_wait(pg->ctx, NULL, &w->end);  // the compute stream waits; the host does not
  } else if (!w->done) {
    dist_mpi_wait(pg, w);
  }
  w->active = false;
}

void dist_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  if (n == 0 || solo(pg)) return;
  if (pg->backend == BACKEND_NCCL) {
    dist_nccl_broadcast(pg, buf, n, type, root);
  } else {
    dist_mpi_broadcast(pg, buf, n, type, root);
  }
}

void dist_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  if (solo(pg)) {
    dev_copy(pg->ctx, recv, send, n * dist_type_size(type));
  } else if (pg->backend == BACKEND_NCCL) {
    dist_nccl_all_gather(pg, send, recv, n, type);
  } else {
    dist_mpi_all_gather(pg, send, recv, n, type);
  }
}

void dist_barrier(ProcessGroup *pg) {
  if (pg->backend == BACKEND_NCCL) {
    dist_nccl_barrier(pg);
  } else if (pg->mpi_up) {
    dist_mpi_barrier();
  }
}

void dist_destroy(ProcessGroup *pg) {
  watchdog_stop();
  if (pg->backend == BACKEND_NCCL && pg->nccl) dist_nccl_destroy(pg);
  if (pg->stage) host_free(pg->ctx, pg->stage);
  if (pg->ctx) dev_event_free(pg->ctx, &pg->ready);
  check_set_abort(NULL);
  if (pg->mpi_up) dist_mpi_finalize();
  memset(pg, 0, sizeof *pg);
}
