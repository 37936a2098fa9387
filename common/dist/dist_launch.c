// dist_launch.c: chapter 02's lesson, "who am I": the launcher read from the environment (mpirun,
// torchrun or scripts/launch.sh, srun), this rank's place in the job (rank, world size, local rank),
// the bootstrap address and port that NCCL's root and Gloo's store share, and the choice of the backend
// (dist_init). The collectives over the backend's table, chapter 04's on, are in dist.c.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "dist_backend.h"
#include "dist_have.h"
#include "watchdog.h"

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
