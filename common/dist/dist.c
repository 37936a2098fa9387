// dist.c: launcher discovery, backend choice, and the collectives: what every backend shares (argument
// checks, the group of one process, the in-place forms, the work handles), then a call through the
// backend's table of operations (dist_backend.h: dist_mpi.c, dist_nccl.c, dist_gloo.cc).
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "half.h"
#include "placement.h"
#include "watchdog.h"

// CMake defines HAVE_MPI=1, HAVE_NCCL=1, HAVE_GLOO=1 in a build with that backend. WITH_MPI(call): a
// call of the MPI launcher (MPI_Init, the abort hook, MPI_Finalize: under mpirun whatever the backend),
// compiled only in a build with MPI; discover() refuses mpirun in a build without it, so there the
// call is never reached. The backends' operations go through their tables (dist_backend_ops()).
#if HAVE_MPI
#define WITH_MPI(call) call
#else
#define HAVE_MPI 0
#define WITH_MPI(call) die(1, "this program was built without MPI")
#endif
#ifndef HAVE_NCCL
#define HAVE_NCCL 0
#endif
#ifndef HAVE_GLOO
#define HAVE_GLOO 0
#endif

bool dist_on_gpu(const ProcessGroup *pg) { return pg->ctx && pg->ctx->dev == DEVICE_CUDA; }

void *dist_staging(ProcessGroup *pg, size_t bytes) {
  if (bytes > pg->stage_bytes) {
    dev_sync(pg->ctx);  // an upload from the old buffer may still be queued
    dev_host_free(pg->ctx, pg->stage);
    pg->stage = dev_host_alloc(pg->ctx, bytes);
    pg->stage_bytes = bytes;
  }
  return pg->stage;
}

const char *dist_backend_name(Backend b) {
  return b == BACKEND_NCCL ? "nccl" : b == BACKEND_GLOO ? "gloo" : "mpi";
}

bool dist_have_mpi(void) { return HAVE_MPI; }

bool dist_have_nccl(void) { return HAVE_NCCL; }

bool dist_have_gloo(void) { return HAVE_GLOO; }

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

// True when the environment @p env (NAME=VALUE strings, NULL-terminated) sets @p name.
static bool env_has(char *const *env, const char *name) {
  size_t n = strlen(name);
  for (; env && *env; env++)
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=') return true;
  return false;
}

Launcher dist_detect_launcher(char *const *env, bool have_mpi) {
  // Open MPI's mpirun is the only launcher that sets OMPI_*. Slurm's PMIx and PMI2 plugins (srun
  // --mpi=pmix) and other MPIs' launchers set PMI*/PMIX* for any program: an MPI launch where MPI is
  // built; else the environment launch or srun's SLURM_* below, if there is one.
  bool pmi = env_has(env, "PMIX_RANK") || env_has(env, "PMI_SIZE") || env_has(env, "PMI_RANK");
  bool torchrun = env_has(env, "RANK") || env_has(env, "WORLD_SIZE");
  bool slurm = env_has(env, "SLURM_PROCID") && env_has(env, "SLURM_NTASKS");
  if (env_has(env, "OMPI_COMM_WORLD_SIZE") || (pmi && have_mpi)) return LAUNCH_MPI;
  if (torchrun) return LAUNCH_ENV;
  if (slurm) return LAUNCH_SLURM;
  if (pmi) return LAUNCH_MPI;  // an MPI launcher and nothing else: dist_init says MPI is not built
  return LAUNCH_NONE;
}

bool dist_nccl_says_gpu_shared(const char *last) {
  return last && (strstr(last, "Duplicate GPU detected") ||                // NCCL <= 2.29
                  strstr(last, "Multiple Ranks are using the same GPU"));  // NCCL >= 2.30
}

// A positive count at *p, leaving p after its digits; -1 when there is none.
static int count_at(const char **p) {
  char *end;
  long v = strtol(*p, &end, 10);
  if (end == *p || v < 1 || v > 1000000) return -1;
  *p = end;
  return (int)v;
}

int dist_most_ranks_per_node(const char *local_world_size, const char *ntasks_per_node, const char *layout) {
  const char *whole[2] = {local_world_size, ntasks_per_node};
  for (int i = 0; i < 2; i++) {
    const char *p = whole[i];
    int v = p ? count_at(&p) : -1;
    if (v > 0 && *p == '\0') return v;
  }
  // Slurm's layout: comma-separated counts, each maybe repeated: "2(x3),1" is 2, 2, 2 and 1
  int most = -1;
  for (const char *p = layout; p && *p;) {
    int v = count_at(&p);
    if (v < 0) return -1;
    if (*p == '(') {
      p++;
      if (*p++ != 'x' || count_at(&p) < 0 || *p++ != ')') return -1;
    }
    if (*p != ',' && *p != '\0') return -1;
    if (*p == ',') p++;
    most = v > most ? v : most;
  }
  return most;
}

bool dist_nccl_limit_ctas(bool multi_rank_gpu, int most_per_node, int gpus) {
  return multi_rank_gpu && most_per_node > gpus;
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
  if (pg->local_rank > pg->rank) die(1, "%s=%d is larger than %s=%d", local, pg->local_rank, rank, pg->rank);
  // Ranks on this node: torchrun sets LOCAL_WORLD_SIZE; srun sets SLURM_NTASKS_PER_NODE when asked
  // for a fixed count. Without either, this rank only knows that it is at least local_rank + 1.
  pg->local_size = env_int("LOCAL_WORLD_SIZE");
  if (pg->local_size < 0) pg->local_size = env_int("SLURM_NTASKS_PER_NODE");
  if (pg->local_size < 0) pg->local_size = pg->local_rank + 1;
}

// A TCP port number from the environment: 1..65535, digits only; -1 when unset.
static int env_port(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || s[0] < '0' || s[0] > '9' || v < 1 || v > 65535)
    die(1, "%s='%s' is not a TCP port (a number from 1 to 65535)", name, s);
  return (int)v;
}

// MASTER_ADDR as NCCL_COMM_ID wants it: a host name or IPv4 address as it is, an IPv6 literal (with
// or without brackets, with an optional %zone) in brackets.
static void bootstrap_host(const char *addr, char *host, size_t size) {
  size_t n = strlen(addr);
  bool bracketed = n >= 2 && addr[0] == '[' && addr[n - 1] == ']';
  if (n == 0 || strspn(addr, " \t") == n)
    die(1, "MASTER_ADDR is empty: set it to rank 0's host name or address");
  if (!bracketed && !strchr(addr, ':')) {  // a host name or an IPv4 address
    if (strpbrk(addr, " \t[]/")) die(1, "MASTER_ADDR='%s' is not a host name or an IP address", addr);
    snprintf(host, size, "%s", addr);
    return;
  }
  char ip[INET6_ADDRSTRLEN + 64] = "";  // the literal without brackets and zone
  size_t len = bracketed ? n - 2 : n;
  if (len >= sizeof ip) die(1, "MASTER_ADDR='%s' is too long for an IPv6 address", addr);
  memcpy(ip, bracketed ? addr + 1 : addr, len);
  ip[len] = 0;
  char *zone = strchr(ip, '%');
  if (zone) *zone = 0;
  unsigned char buf[16];
  if (inet_pton(AF_INET6, ip, buf) != 1)
    die(1,
        "MASTER_ADDR='%s' is neither a host name nor an IPv4 or IPv6 address (give the port in "
        "MASTER_PORT, not in MASTER_ADDR)",
        addr);
  snprintf(host, size, "[%.*s]", (int)len, bracketed ? addr + 1 : addr);
}

// Whether torchrun says that no agent store listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=False,
// as Debian's torch 1.13 sets it): the port is then the workers' own, and PyTorch's rank 0 serves its
// store there.
static bool master_port_is_ours(void) {
  const char *v = getenv("TORCHELASTIC_USE_AGENT_STORE");
  return v && (strcasecmp(v, "false") == 0 || strcmp(v, "0") == 0);
}

// The bootstrap port of an environment launch, one rule for NCCL's root and Gloo's rendezvous store:
// DDP_NCCL_PORT when set; else MASTER_PORT itself when torchrun's agent store does not listen there
// (as PyTorch's own init_process_group does); else MASTER_PORT + 1, since torchrun's agent store (or
// another launcher's) may listen on MASTER_PORT. -1 without MASTER_ADDR and a port
// (need_bootstrap_address() says so once the backend is known).
static int bootstrap_port(void) {
  const char *addr = getenv("MASTER_ADDR");
  int master = env_port("MASTER_PORT"), port = env_port("DDP_NCCL_PORT");
  if (!addr || (master < 0 && port < 0)) return -1;
  if (port < 0 && master_port_is_ours()) return master;
  if (port < 0) {
    if (master == 65535)
      die(1,
          "MASTER_PORT=65535: NCCL bootstraps on MASTER_PORT + 1, which is not a port; choose a "
          "lower MASTER_PORT, or set DDP_NCCL_PORT");
    port = master + 1;
  }
  return port;
}

int dist_bootstrap_address(char *host, size_t size) {
  int port = bootstrap_port();
  if (port >= 0) bootstrap_host(getenv("MASTER_ADDR"), host, size);
  return port;
}

// Environment launch with several ranks: NCCL bootstraps from NCCL_COMM_ID=host:port, which every
// rank builds the same way here, before any CUDA or NCCL call, so that a bad MASTER_ADDR or
// MASTER_PORT is reported at once on every rank (on the CPU too: Gloo's store uses the same address).
// A user's own NCCL_COMM_ID is kept.
static void set_bootstrap_address(void) {
  if (getenv("NCCL_COMM_ID")) return;
  int port = bootstrap_port();
  if (port < 0) return;
  char host[INET6_ADDRSTRLEN + 80], id[INET6_ADDRSTRLEN + 96];
  bootstrap_host(getenv("MASTER_ADDR"), host, sizeof host);
  snprintf(id, sizeof id, "%s:%d", host, port);
  setenv("NCCL_COMM_ID", id, 1);
}

// With an environment launch of several ranks, NCCL bootstraps from NCCL_COMM_ID and Gloo's ranks
// meet at rank 0's store, both on the bootstrap address.
static void need_bootstrap_address(const ProcessGroup *pg) {
  if (pg->backend == BACKEND_NCCL ? getenv("NCCL_COMM_ID") != NULL : bootstrap_port() >= 0) return;
  if (pg->backend == BACKEND_NCCL)
    die(1,
        "rank %d of %d: set MASTER_ADDR and MASTER_PORT (the address and a free port of rank 0's "
        "node) so that NCCL can bootstrap",
        pg->rank, pg->world_size);
  die(1,
      "rank %d of %d: set MASTER_ADDR and MASTER_PORT (the address and a free port of rank 0's node) "
      "so that the Gloo ranks can meet, or start CPU ranks with `mpirun -np %d ...` or, under Slurm, "
      "`srun --mpi=pmix -n %d ...`",
      pg->rank, pg->world_size, pg->world_size, pg->world_size);
}

static bool env_launch(const ProcessGroup *pg) {
  return (pg->launcher == LAUNCH_ENV || pg->launcher == LAUNCH_SLURM) && pg->world_size > 1;
}

extern char **environ;

static void discover(ProcessGroup *pg) {
  pg->launcher = dist_detect_launcher(environ, dist_have_mpi());
  if (pg->launcher == LAUNCH_MPI) {
    if (!dist_have_mpi())
      die(1,
          "started by mpirun, but this program was built without MPI; rebuild with MPI installed "
          "or launch with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK)");
  } else if (pg->launcher == LAUNCH_ENV) {
    from_env(pg, "RANK", "WORLD_SIZE", "LOCAL_RANK");
  } else if (pg->launcher == LAUNCH_SLURM) {
    from_env(pg, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  } else {
    pg->world_size = pg->local_size = 1;
  }
  if (env_launch(pg)) set_bootstrap_address();
  // From here until dist_destroy() has left the job, a peer that never arrives, freezes or dies
  // ends this rank after the timeout instead of hanging it: MPI_Init and the NCCL start-up wait for
  // every rank.
  if (pg->launcher != LAUNCH_NONE) watchdog_start(pg->timeout, NULL, NULL, NULL, NULL);
  if (pg->launcher == LAUNCH_MPI) {
    WITH_MPI(dist_mpi_init(pg));
    pg->mpi_up = true;
  }
}

// The CPU's backend for --backend auto: MPI under mpirun (and on its own), Gloo under an environment
// launch (torchrun, scripts/launch.sh, a plain srun), as PyTorch uses gloo for CPUs. A build without
// Gloo picks MPI there, whose refusal below says how to get Gloo.
static Backend cpu_default(const ProcessGroup *pg) {
  bool env = pg->launcher == LAUNCH_ENV || pg->launcher == LAUNCH_SLURM;
  return env && dist_have_gloo() ? BACKEND_GLOO : BACKEND_MPI;
}

static Backend choose_backend(const ProcessGroup *pg, const char *name, Device dev) {
  Backend b;
  if (strcmp(name, "auto") == 0) {
    b = dev == DEVICE_CUDA && dist_have_nccl() ? BACKEND_NCCL : cpu_default(pg);
  } else if (strcmp(name, "nccl") == 0) {
    b = BACKEND_NCCL;
  } else if (strcmp(name, "mpi") == 0) {
    b = BACKEND_MPI;
  } else if (strcmp(name, "gloo") == 0) {
    b = BACKEND_GLOO;
  } else {
    die(2, "unknown --backend '%s' (expected auto, nccl, mpi or gloo)", name);
  }
  if (b == BACKEND_GLOO && !dist_have_gloo())
    die(1,
        "--backend gloo: this program was built without Gloo; install libgloo-dev (scripts/setup.sh "
        "does) and rebuild, or use --backend mpi under mpirun");
  if (b == BACKEND_GLOO && pg->launcher == LAUNCH_MPI && pg->world_size > 1)
    die(1,
        "--backend gloo meets its peers through MASTER_ADDR and MASTER_PORT: launch with torchrun or "
        "scripts/launch.sh, or use --backend mpi under mpirun");
  if (b == BACKEND_NCCL && !dist_have_nccl())
    die(1,
        "--backend nccl: this program was built without NCCL (CUDA toolkit not found at build "
        "time); use --backend mpi");
  if (b == BACKEND_NCCL && dev != DEVICE_CUDA)
    die(1, "--backend nccl needs GPU buffers; use --device cuda, or --backend mpi on the CPU");
  if (b == BACKEND_MPI && pg->world_size > 1 && pg->launcher != LAUNCH_MPI && dev != DEVICE_CUDA)
    die(1,
        "%d CPU ranks started by %s: the MPI backend needs `mpirun -np %d ...` or, under Slurm, "
        "`srun --mpi=pmix -n %d ...`; %s",
        pg->world_size,
        pg->launcher == LAUNCH_SLURM ? "srun without an MPI plugin"
                                     : "environment variables (RANK, WORLD_SIZE)",
        pg->world_size, pg->world_size,
        dist_have_gloo() ? "a launch like this one is for --backend gloo (the default here) or GPU ranks"
                         : "this program was built without Gloo, the CPU backend of a launch like this "
                           "one: install libgloo-dev (scripts/setup.sh does) and rebuild");
  if (b == BACKEND_MPI && pg->world_size > 1 && pg->launcher != LAUNCH_MPI)
    die(1,
        "--backend mpi needs an MPI launcher: start with `mpirun -np %d ...` or `srun --mpi=pmix -n %d "
        "...`, or use --backend nccl with %s",
        pg->world_size, pg->world_size, pg->launcher == LAUNCH_SLURM ? "srun" : "torchrun");
  return b;
}

void dist_init(ProcessGroup *pg, const char *backend, Device dev, double timeout_s) {
  memset(pg, 0, sizeof *pg);
  pg->timeout = timeout_s > 0 ? timeout_s : 300.0;
  discover(pg);
  check_set_rank(pg->rank);
  if (pg->mpi_up) WITH_MPI(dist_mpi_set_abort());  // from now on, a failure on any rank ends all
  pg->backend = choose_backend(pg, backend, dev);
  pg->ops = dist_backend_ops(pg->backend);
  if ((pg->backend == BACKEND_NCCL || pg->backend == BACKEND_GLOO) && env_launch(pg))
    need_bootstrap_address(pg);
}

// Under mpirun, NCCL's unique id travels from rank 0 to the others over MPI (an environment launch
// needs no such step: NCCL_COMM_ID gives every rank the same id). Only an MPI launch calls it, and
// only a build with MPI has one.
void dist_share_from_rank0(void *bytes, size_t size) {
  (void)bytes, (void)size;  // (unused in a build without MPI)
  WITH_MPI(dist_mpi_broadcast_bytes(bytes, size, 0));
}

// ---- the tables ---------------------------------------------------------------------------------------

// Slot s of a table, as `filled`; one line per slot, in DistSlot's order (-Wswitch names a slot that
// is missing here).
static bool fills(const DistBackendOps *o, DistSlot s) {
  switch (s) {
    case DIST_SLOT_CONNECT:
      return o->connect;
    case DIST_SLOT_ALL_REDUCE:
      return o->all_reduce;
    case DIST_SLOT_ALL_REDUCE_START:
      return o->all_reduce_start;
    case DIST_SLOT_REDUCE_SCATTER_START:
      return o->reduce_scatter_start;
    case DIST_SLOT_ALL_GATHER:
      return o->all_gather;
    case DIST_SLOT_ALL_GATHER_START:
      return o->all_gather_start;
    case DIST_SLOT_BROADCAST:
      return o->broadcast;
    case DIST_SLOT_BARRIER:
      return o->barrier;
    case DIST_SLOT_TEST:
      return o->test;
    case DIST_SLOT_WAIT:
      return o->wait;
    case DIST_SLOT_WORK_INIT:
      return o->work_init;
    case DIST_SLOT_WORK_FREE:
      return o->work_free;
    case DIST_SLOT_GROUP_START:
      return o->group_start;
    case DIST_SLOT_GROUP_END:
      return o->group_end;
    case DIST_SLOT_DESTROY:
      return o->destroy;
    case DIST_SLOT_COUNT:
      break;
  }
  return false;
}

// Every slot has a DistSlot: the table is its header fields (name .. version) and DIST_SLOT_COUNT function
// pointers.
_Static_assert(sizeof(DistBackendOps) ==
                   offsetof(DistBackendOps, connect) + DIST_SLOT_COUNT * sizeof(void (*)(void)),
               "a slot of DistBackendOps has no DistSlot (or a DistSlot no slot)");
_Static_assert(DIST_SLOT_COUNT <= 32, "DistBackendOps.refuses has 32 bits");

bool dist_backend_fills(const DistBackendOps *ops, DistSlot s) {
  return (unsigned)s < DIST_SLOT_COUNT && fills(ops, s);
}

const char *dist_slot_name(DistSlot s) {
  static const char *const names[DIST_SLOT_COUNT] = {
      [DIST_SLOT_CONNECT] = "connect",
      [DIST_SLOT_ALL_REDUCE] = "all-reduce",
      [DIST_SLOT_ALL_REDUCE_START] = "all-reduce-async",
      [DIST_SLOT_REDUCE_SCATTER_START] = "reduce-scatter-async",
      [DIST_SLOT_ALL_GATHER] = "all-gather",
      [DIST_SLOT_ALL_GATHER_START] = "all-gather-async",
      [DIST_SLOT_BROADCAST] = "broadcast",
      [DIST_SLOT_BARRIER] = "barrier",
      [DIST_SLOT_TEST] = "test",
      [DIST_SLOT_WAIT] = "wait",
      [DIST_SLOT_WORK_INIT] = "work-init",
      [DIST_SLOT_WORK_FREE] = "work-free",
      [DIST_SLOT_GROUP_START] = "group-start",
      [DIST_SLOT_GROUP_END] = "group-end",
      [DIST_SLOT_DESTROY] = "destroy",
  };
  return (unsigned)s < DIST_SLOT_COUNT && names[s] ? names[s] : "?";
}

const char *dist_backend_gap(const DistBackendOps *ops) {
  if (!ops->built) return NULL;  // refused whole: "this program was built without ..."
  for (int s = 0; s < DIST_SLOT_COUNT; s++) {
    bool refused = (ops->refuses >> s) & 1u;
    if (fills(ops, (DistSlot)s) == refused) return dist_slot_name((DistSlot)s);
  }
  return NULL;
}

void dist_backend_refuse(const DistBackendOps *ops, DistSlot s, const char *call) {
  if (!ops->built) die(1, "%s: this program was built without %s", call, ops->library);
  die(1, "%s: the %s backend has no %s", call, ops->name, dist_slot_name(s));
}

const DistBackendOps *dist_backend_ops(Backend b) {
  // The tables of the backends this build lacks: every slot NULL, refused as not built.
  static const DistBackendOps without[] = {
      [BACKEND_MPI] = {.name = "mpi", .library = "MPI"},
      [BACKEND_NCCL] = {.name = "nccl", .library = "NCCL"},
      [BACKEND_GLOO] = {.name = "gloo", .library = "Gloo"},
  };
  switch (b) {
    case BACKEND_MPI:
#if HAVE_MPI
      return dist_mpi_ops();
#endif
      break;
    case BACKEND_NCCL:
#if HAVE_NCCL
      return dist_nccl_ops();
#endif
      break;
    case BACKEND_GLOO:
#if HAVE_GLOO
      return dist_gloo_ops();
#endif
      break;
    default:
      die(1, "dist_backend_ops: no backend %d", (int)b);
  }
  return &without[b];
}

// The table of @p pg: from dist_init(), or (a process group zeroed by hand or by dist_destroy) its
// backend's.
static const DistBackendOps *table(const ProcessGroup *pg) {
  return pg->ops ? pg->ops : dist_backend_ops(pg->backend);
}

// The table of @p pg when it fills slot @p s; else the end of the job, naming the backend and the
// operation that @p call needed: never another backend's.
static const DistBackendOps *need(const ProcessGroup *pg, DistSlot s, const char *call) {
  const DistBackendOps *o = table(pg);
  if (!fills(o, s)) dist_backend_refuse(o, s, call);
  return o;
}

// Every entry point from here on starts with check_stop_if_ending(): once an abort is under way (the
// watchdog's thread may be aborting the communicator), this thread starts no collective.

// A group of one process (the MPI backend without an MPI launcher, Gloo without a context): every
// collective is the identity, and no backend is called.
static bool solo(const ProcessGroup *pg) {
  return (pg->backend == BACKEND_MPI && !pg->mpi_up) || (pg->backend == BACKEND_GLOO && !pg->gloo);
}

// The start of every collective: the job is not ending, and a group of several ranks is connected.
// Before dist_connect a group has no device context (and on Gloo or NCCL no communicator either), so
// a collective would crash on one backend and quietly work on another (MPI's needs neither).
static void begin(const ProcessGroup *pg, const char *call) {
  check_stop_if_ending();
  if (pg->world_size > 1 && !pg->ctx)
    die(1,
        "%s: rank %d of %d: the process group is not connected: dist_connect was never called (call "
        "dist_connect(&pg, &ctx) after dist_init and device_init, before the first collective)",
        call, pg->rank, pg->world_size);
}

void dist_connect(ProcessGroup *pg, const Ctx *c) {
  check_stop_if_ending();
  pg->ctx = c;
  dev_event_init(c, &pg->ready);
  // Solo before connect: the MPI backend of one process (a build without MPI too), or Gloo, whose
  // connect makes its context (several ranks) or none (one).
  if (!solo(pg) || table(pg)->built) need(pg, DIST_SLOT_CONNECT, "dist_connect")->connect(pg);
  placement_log(pg);  // rank 0 prints every rank's node: `ranks: nodea 0-1 (local 0-1), ...`
}

void dist_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  begin(pg, "dist_all_reduce");
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "dist_all_reduce: DIST_AVG needs float data");
  if (n == 0 || solo(pg)) return;
  need(pg, DIST_SLOT_ALL_REDUCE, "dist_all_reduce")->all_reduce(pg, buf, n, type, op);
}

// ---- the sum canary (dist_verify_sum) ----------------------------------------------------------------

// Element i of the canary on rank r: only ranks 0 and 1 send anything but zeros, so every addition a
// backend makes is exact in every type, 16-bit ones included (1 + 0, 1.5 + 0.25), whatever the
// order; and every rank's own values differ from the sum, so a collective that moves nothing leaves
// every rank, not only some, with a wrong answer.
enum { CANARY_N = 3 };
static double canary_value(int i, int r) {
  static const double v[CANARY_N][2] = {{1, 0}, {0, 2}, {1.5, 0.25}};
  return r < 2 ? v[i][r] : 0;
}

static void canary_put(void *buf, DistType t, int i, double x) {
  if (t == DIST_HALF || t == DIST_BF16)
    ((uint16_t *)buf)[i] = t == DIST_HALF ? half_from_float((float)x) : bf16_from_float((float)x);
  else if (t == DIST_DOUBLE)
    ((double *)buf)[i] = x;
  else if (t == DIST_INT)
    ((int *)buf)[i] = (int)x;
  else
    ((float *)buf)[i] = (float)x;
}

static double canary_get(const void *buf, DistType t, int i) {
  if (t == DIST_HALF) return half_to_float(((const uint16_t *)buf)[i]);
  if (t == DIST_BF16) return bf16_to_float(((const uint16_t *)buf)[i]);
  if (t == DIST_DOUBLE) return ((const double *)buf)[i];
  if (t == DIST_INT) return ((const int *)buf)[i];
  return ((const float *)buf)[i];
}

const char *dist_type_name(DistType t) {
  static const char *const names[] = {"float32", "int32", "float64", "fp16", "bf16"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

// NCCL's name of the type in its device functions (ncclDevFunc_AllReduce_Sum_<suffix>_...; it sums
// int32 as u32, as scripts/nccl_caps.py says).
static const char *nccl_suffix(DistType t) {
  static const char *const names[] = {"f32", "u32", "f64", "f16", "bf16"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

void dist_verify_sum(ProcessGroup *pg, DistType type, const char *who) {
  begin(pg, "dist_verify_sum");
  if (pg->world_size < 2 || solo(pg)) return;  // one rank: its values are the sum
  size_t bytes = CANARY_N * dist_type_size(type);
  double host[CANARY_N];  // room for CANARY_N elements of any type
  for (int i = 0; i < CANARY_N; i++) canary_put(host, type, i, canary_value(i, pg->rank));
  void *buf = dev_alloc(pg->ctx, bytes);
  dev_upload(pg->ctx, buf, host, bytes);
  dist_all_reduce(pg, buf, CANARY_N, type, DIST_SUM);
  // Test hook: DDP_TEST_UNSUMMED_CANARY=1 keeps this rank's own values, as an all-reduce that moved
  // nothing would (NCCL runs a device function its library lacks as an empty kernel). The collective
  // still runs, so that a rank without the variable is not left waiting.
  const char *unsummed = getenv("DDP_TEST_UNSUMMED_CANARY");
  if (!unsummed || strcmp(unsummed, "1") != 0) dev_download(pg->ctx, host, buf, bytes);
  dev_free(pg->ctx, buf);
  const DistBackendOps *o = table(pg);
  const char *version = o->version ? o->version() : NULL;
  for (int i = 0; i < CANARY_N; i++) {
    double got = canary_get(host, type, i), want = canary_value(i, 0) + canary_value(i, 1);
    if (got == want) continue;
    die(1,
        "%s: rank %d: the %s library (%s%s%s) does not sum %s: a test all-reduce of known values came back "
        "wrong (element %d: %g, the sum is %g), with no error. A library built without that type's kernel "
        "(NCCL: ncclDevFunc_AllReduce_Sum_%s, left out by NCCL's ONLY_FUNCS) runs it as an empty kernel, "
        "and the replicas would drift apart. Use a library that carries it (scripts/nccl_caps.py LIBRARY "
        "lists what one carries), or another --comm_hook",
        who, pg->rank, o->library, o->name, version ? " " : "", version ? version : "", dist_type_name(type),
        i, got, want, nccl_suffix(type));
  }
}

void dist_work_init(ProcessGroup *pg, DistWork *w) {
  begin(pg, "dist_work_init");
  memset(w, 0, sizeof *w);
  dev_event_init(pg->ctx, &w->start);
  dev_event_init(pg->ctx, &w->end);
  if (!solo(pg)) need(pg, DIST_SLOT_WORK_INIT, "dist_work_init")->work_init(pg, w);
}

void dist_work_free(ProcessGroup *pg, DistWork *w) {
  if (w->active) die(1, "dist_work_free: the collective is still in flight (call dist_wait first)");
  // Whatever the group is now: work_free frees what work_init gave, nothing when it gave nothing.
  if (table(pg)->built) need(pg, DIST_SLOT_WORK_FREE, "dist_work_free")->work_free(pg, w);
  dev_event_free(pg->ctx, &w->end);
  dev_event_free(pg->ctx, &w->start);
}

// Marks @p w started for a collective (@p what, for timelines) that writes @p n elements at @p buf on
// this rank.
static void work_begin(DistWork *w, const char *call, const char *what, void *buf, size_t n, DistType type,
                       DistOp op) {
  if (w->active) die(1, "%s: this handle is still in flight", call);
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "%s: DIST_AVG needs floats", call);
  w->what = what;
  w->buf = buf;
  w->n = n;
  w->type = type;
  w->op = op;
  w->active = true;
  w->done = false;
  w->bytes += (long long)(n * dist_type_size(type));
}

long long dist_take_bytes(DistWork *works, int n) {
  long long bytes = 0;
  for (int i = 0; i < n; i++) {
    bytes += works[i].bytes;
    works[i].bytes = 0;
  }
  return bytes;
}

// A collective with nothing to exchange: complete at once (its events mark the moment).
static void work_done_now(ProcessGroup *pg, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  dev_event_record(pg->ctx, &w->end, NULL);
  w->done = true;
}

void dist_all_reduce_async(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op, DistWork *w) {
  begin(pg, "dist_all_reduce_async");
  work_begin(w, "dist_all_reduce_async", "all-reduce", buf, n, type, op);
  if (n == 0 || solo(pg)) {
    work_done_now(pg, w);
  } else {
    need(pg, DIST_SLOT_ALL_REDUCE_START, "dist_all_reduce_async")->all_reduce_start(pg, w);
  }
}

// True when the byte ranges [a, a + an) and [b, b + bn) share a byte.
static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

void dist_reduce_scatter_async(ProcessGroup *pg, void *send, void *recv, const size_t *counts, DistType type,
                               DistOp op, DistWork *w) {
  begin(pg, "dist_reduce_scatter_async");
  work_begin(w, "dist_reduce_scatter_async", "reduce-scatter", recv, counts[pg->rank], type, op);
  size_t total = dist_chunk_offset(counts, pg->world_size), size = dist_type_size(type);
  bool in_place = recv == (char *)send + dist_chunk_offset(counts, pg->rank) * size;
  if (!in_place && overlap(send, total * size, recv, w->n * size))
    die(1,
        "dist_reduce_scatter_async: recv overlaps send but is not this rank's chunk of it (the in-place "
        "form)");
  if (total == 0 || solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, w->n * size);  // one rank: the mean of one is itself
    work_done_now(pg, w);
  } else {
    need(pg, DIST_SLOT_REDUCE_SCATTER_START, "dist_reduce_scatter_async")
        ->reduce_scatter_start(pg, send, counts, w);
  }
}

void dist_shard_counts(size_t a, size_t b, size_t S, int W, size_t *counts) {
  if (a > b || W < 1 || b > S * (size_t)W)
    die(1, "dist_shard_counts: the slice [%zu, %zu) is not inside %d shards of %zu", a, b, W, S);
  for (int j = 0; j < W; j++) {
    size_t lo = (size_t)j * S, hi = lo + S;
    if (a > lo) lo = a;
    if (b < hi) hi = b;
    counts[j] = hi > lo ? hi - lo : 0;
  }
}

bool dist_test(ProcessGroup *pg, DistWork *w) {
  check_stop_if_ending();
  if (!w->active || w->done) return true;  // (a solo group's collectives are done when started)
  return need(pg, DIST_SLOT_TEST, "dist_test")->test(pg, w);
}

void dist_wait(ProcessGroup *pg, DistWork *w) {
  check_stop_if_ending();
  if (!w->active) die(1, "dist_wait: no all-reduce in flight on this handle");
  if (!w->done) need(pg, DIST_SLOT_WAIT, "dist_wait")->wait(pg, w);
  w->active = false;
}

void dist_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  begin(pg, "dist_broadcast");
  if (n == 0 || solo(pg)) return;
  need(pg, DIST_SLOT_BROADCAST, "dist_broadcast")->broadcast(pg, buf, n, type, root);
}

void dist_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  begin(pg, "dist_all_gather");
  size_t bytes = n * dist_type_size(type);
  bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;
  if (!in_place && overlap(send, bytes, recv, bytes * (size_t)pg->world_size))
    die(1, "dist_all_gather: send overlaps recv but is not recv + rank·n (the in-place form)");
  if (solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, bytes);
  } else {
    need(pg, DIST_SLOT_ALL_GATHER, "dist_all_gather")->all_gather(pg, send, recv, n, type);
  }
}

void dist_all_gather_async(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type,
                           DistWork *w) {
  begin(pg, "dist_all_gather_async");
  size_t bytes = n * dist_type_size(type);
  work_begin(w, "dist_all_gather_async", "all-gather", recv, n * (size_t)pg->world_size, type, DIST_SUM);
  bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;
  if (!in_place && overlap(send, bytes, recv, bytes * (size_t)pg->world_size))
    die(1, "dist_all_gather_async: send overlaps recv but is not recv + rank·n (the in-place form)");
  if (n == 0 || solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, bytes);
    work_done_now(pg, w);
  } else {
    need(pg, DIST_SLOT_ALL_GATHER_START, "dist_all_gather_async")->all_gather_start(pg, send, w);
  }
}

void dist_barrier(ProcessGroup *pg) {
  begin(pg, "dist_barrier");
  if (!solo(pg)) need(pg, DIST_SLOT_BARRIER, "dist_barrier")->barrier(pg);
}

void dist_group_start(ProcessGroup *pg) {
  check_stop_if_ending();
  if (!solo(pg)) need(pg, DIST_SLOT_GROUP_START, "dist_group_start")->group_start(pg);
}

void dist_group_end(ProcessGroup *pg) {
  check_stop_if_ending();
  if (!solo(pg)) need(pg, DIST_SLOT_GROUP_END, "dist_group_end")->group_end(pg);
}

void dist_destroy(ProcessGroup *pg) {
  check_stop_if_ending();
  // Shutdown waits for the peers too (the last collectives, MPI_Finalize): the watchdog stays, without
  // the poll of a communicator that is about to go.
  if (pg->launcher != LAUNCH_NONE) watchdog_start(pg->timeout, NULL, NULL, NULL, NULL);
  if (!solo(pg)) need(pg, DIST_SLOT_DESTROY, "dist_destroy")->destroy(pg);
  if (pg->stage) dev_host_free(pg->ctx, pg->stage);
  if (pg->ctx) dev_event_free(pg->ctx, &pg->ready);
  check_set_abort(NULL);
  if (pg->mpi_up) WITH_MPI(dist_mpi_finalize());
  watchdog_stop();
  memset(pg, 0, sizeof *pg);
}
