// probe: the first minute on a node. Every rank all-reduces buffers of known values and checks the
// result element by element, prints one line per rank (ok or broken), the back end and its version,
// then a small bus-bandwidth table in nccl-tests' columns. A rank that never arrives is named, and
// so is the flag when the ranks were started with different sizes or iterations; the whole run is
// bounded by --timeout. Exit status 1 on any wrong element, 2 on a bad command line.
//
//   build/bin/probe                                # one process
//   mpirun -np 2 build/bin/probe --device cpu      # CPU ranks, MPI
//   mpirun -np 8 build/bin/probe                   # one rank per GPU, NCCL
//   scripts/launch.sh -n 8 build/bin/probe         # the same without MPI (torchrun and srun alike)
#define _POSIX_C_SOURCE 200809L  // gethostname, nanosleep
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agree.h"   // agree.h: Agreement, agree_init, agree_add, agree_check
#include "check.h"   // check.h: die, mallocCheck
#include "device.h"  // device.h: Ctx, device_parse, device_name, device_cuda_count, device_init, device_free
#include "devmem.h"  // devmem.h: dev_alloc, dev_upload, dev_download, DevEvent, dev_event_*
#include "dist.h"    // dist.h: ProcessGroup, dist_init, dist_connect, dist_all_reduce, dist_all_gather,
                     //         dist_barrier, dist_destroy, dist_backend_name
#include "log.h"     // log.h: log0
#include "probe.h"   // probe.h: probe_check_in, probe_backend_version

// ---------------------------------------------------------------------------------------------------
// Configuration

typedef struct ProbeArgs {
  const char *device;   // --device: auto | cpu | cuda
  const char *backend;  // --backend: auto | nccl | mpi
  double timeout;       // --timeout: seconds any wait may take, the check-in included
  size_t min_bytes;     // --min_bytes: first size of the table
  size_t max_bytes;     // --max_bytes: last size (at most)
  size_t factor;        // --factor: each size is the previous one times this
  long iters;           // --iters: timed all-reduces per size (fewer for large sizes, see iters_for)
  long warmup;          // --warmup: untimed all-reduces per size, after the checked one
  long wrong_rank;      // --test_wrong_rank: this rank contributes one wrong element (-1: none)
  long absent_rank;     // --test_absent_rank: this rank never checks in (-1: none)
  bool async;           // --call async: dist_all_reduce_async + dist_wait (the reducer's call)
} ProbeArgs;

#define MAX_BYTES_LIMIT ((size_t)1 << 33)  // 8 GiB: a bound on --max_bytes, far above any useful size
#define BYTES_PER_SIZE ((size_t)1 << 30)   // the timed iterations of one size move at most 1 GiB
#define CHECK_COUNT 1024                   // elements of the connectivity all-reduce (4 KiB)
#define WRONG_AT 3                         // where --test_wrong_rank's wrong element is
#define LINE_BYTES 128                     // one rank's ok/broken line, gathered to every rank

static const char *USAGE =
    "usage: probe [flags]   (--flag value or --flag=value; sizes take a K, M or G suffix: 1K = 1024)\n"
    "Checks that every rank can all-reduce with every other, then measures the bus bandwidth.\n\n"
    "flags:\n"
    "  --device NAME          auto|cpu|cuda (default auto: CUDA when a GPU is visible)\n"
    "  --backend NAME         auto|nccl|mpi (default auto: nccl for cuda, mpi for cpu)\n"
    "  --timeout SECONDS      longest wait of any step, check-in included (default 60, > 0)\n"
    "  --min_bytes N          first size of the table (default 1K; a multiple of 4, >= 4)\n"
    "  --max_bytes N          last size of the table (default 256M; >= --min_bytes, <= 8G)\n"
    "  --factor N             each size is the previous one times N (default 4; 2..1024)\n"
    "  --iters N              timed all-reduces per size (default 20, 1..100000; fewer where a size\n"
    "                         would move more than 1 GiB, at least 1)\n"
    "  --warmup N             untimed all-reduces per size before the timed ones (default 1, 0..1000)\n"
    "  --call KIND            blocking|async: time dist_all_reduce, or dist_all_reduce_async and\n"
    "                         dist_wait as the reducers of steps 06-08 call them (default blocking;\n"
    "                         MPI runs another algorithm for each)\n"
    "  --test_wrong_rank R    FOR TESTS ONLY: rank R contributes a wrong value at element 3\n"
    "  --test_absent_rank R   FOR TESTS ONLY: rank R never arrives (sleeps instead of checking in)\n"
    "  --help                 this text\n";

static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("error: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n\n%s", USAGE);
  exit(2);
}

// A whole number with an optional binary suffix (K, M, G), within [lo, hi].
static size_t parse_size(const char *flag, const char *v, size_t lo, size_t hi) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (errno || end == v || *end || v[0] == '-' || (shift && x > (UINT64_MAX >> shift)))
    usage_error("--%s '%s' is not a whole number", flag, v);
  x <<= shift;
  if (x < lo || x > hi) usage_error("--%s %s is out of range [%zu, %zu]", flag, v, lo, hi);
  return (size_t)x;
}

static double parse_seconds(const char *v) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x > 0 && x <= 86400))
    usage_error("--timeout '%s': seconds in (0, 86400]", v);
  return x;
}

// Sets the flag named @p name from @p v; false for an unknown name.
static bool set_flag(ProbeArgs *a, const char *name, const char *v) {
  if (!strcmp(name, "device"))
    a->device = v;
  else if (!strcmp(name, "backend"))
    a->backend = v;
  else if (!strcmp(name, "timeout"))
    a->timeout = parse_seconds(v);
  else if (!strcmp(name, "min_bytes"))
    a->min_bytes = parse_size(name, v, 4, MAX_BYTES_LIMIT);
  else if (!strcmp(name, "max_bytes"))
    a->max_bytes = parse_size(name, v, 4, MAX_BYTES_LIMIT);
  else if (!strcmp(name, "factor"))
    a->factor = parse_size(name, v, 2, 1024);
  else if (!strcmp(name, "iters"))
    a->iters = (long)parse_size(name, v, 1, 100000);
  else if (!strcmp(name, "warmup"))
    a->warmup = (long)parse_size(name, v, 0, 1000);
  else if (!strcmp(name, "call")) {
    if (strcmp(v, "blocking") && strcmp(v, "async")) usage_error("--call: blocking or async, not '%s'", v);
    a->async = !strcmp(v, "async");
  } else if (!strcmp(name, "test_wrong_rank"))
    a->wrong_rank = (long)parse_size(name, v, 0, 1 << 20);
  else if (!strcmp(name, "test_absent_rank"))
    a->absent_rank = (long)parse_size(name, v, 0, 1 << 20);
  else
    return false;
  return true;
}

static void configure(ProbeArgs *a, int argc, char **argv) {
  *a = (ProbeArgs){"auto", "auto", 60, 1024, (size_t)256 << 20, 4, 20, 1, -1, -1, false};
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      fputs(USAGE, stdout);
      exit(0);
    }
    if (strncmp(s, "--", 2) != 0) usage_error("unexpected argument '%s'", s);
    char name[32];
    const char *eq = strchr(s, '='), *v;
    size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
    if (len >= sizeof name) usage_error("unknown flag '%s'", s);
    memcpy(name, s + 2, len);
    name[len] = '\0';
    if (eq)
      v = eq + 1;
    else if (i + 1 < argc)
      v = argv[++i];
    else
      usage_error("%s needs a value", s);
    if (!set_flag(a, name, v)) usage_error("unknown flag '--%s'", name);
  }
  if (a->min_bytes % 4 || a->max_bytes % 4)
    usage_error("--min_bytes and --max_bytes: whole floats (multiples of 4)");
  if (a->max_bytes < a->min_bytes)
    usage_error("--max_bytes %zu is below --min_bytes %zu", a->max_bytes, a->min_bytes);
}

// ---------------------------------------------------------------------------------------------------
// Process group

typedef struct Probe {
  ProbeArgs args;
  ProcessGroup pg;
  Ctx ctx;
  float *buf;       // device, (max count): what the all-reduces run on
  float *host;      // host, (max count): the values to upload, then the result to check
  double *stat;     // device, (2): a rank's [seconds, #wrong], summed over the ranks
  DevEvent t0, t1;  // around the timed iterations
  DistWork work;    // --call async: the handle of each all-reduce
  double wrong;     // elements wrong, summed over the ranks and all the checks so far
} Probe;

static const char *launcher_name(Launcher l) {
  return l == LAUNCH_MPI     ? "mpirun"
         : l == LAUNCH_ENV   ? "environment (torchrun, scripts/launch.sh)"
         : l == LAUNCH_SLURM ? "srun"
                             : "none (one process)";
}

// --test_absent_rank: this rank "never arrives". It sleeps past every deadline of the others (they
// end the job, and mpirun or the launcher end this process), then ends itself as a last resort.
static void stay_away(const Probe *p) {
  if (p->args.absent_rank != p->pg.rank) return;
  double s = 3 * p->args.timeout + 10;
  struct timespec t = {(time_t)s, 0};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
  die(1, "probe: rank %d (--test_absent_rank) was never stopped by its peers", p->pg.rank);
}

// Rank 0 learns that every rank is here (or names the missing ones) before the first collective.
static void check_in(Probe *p) {
  double waited;
  if (p->pg.world_size == 1) {
    log0("# check-in: one rank, nothing to wait for\n");
  } else if (probe_check_in(&p->pg, p->args.timeout, &waited)) {
    log0("# check-in: all %d ranks arrived within %.2f s\n", p->pg.world_size, waited);
  } else {
    log0(
        "# check-in: needs MPI (this launcher: %s); a rank that never arrives ends the job at the "
        "watchdog's --timeout, without its name\n",
        launcher_name(p->pg.launcher));
  }
}

static void setup(Probe *p) {
  Device dev;
  if (device_parse(p->args.device, &dev) != 0) die(2, "unknown --device '%s'", p->args.device);
  dist_init(&p->pg, p->args.backend, dev, p->args.timeout);
  if (p->pg.world_size > 2000)
    die(1, "probe: its sums are exact in fp32 up to 2000 ranks, not %d", p->pg.world_size);
  long W = p->pg.world_size;
  if (p->args.wrong_rank >= W || p->args.absent_rank >= W)
    die(2, "--test_wrong_rank / --test_absent_rank name a rank beyond the %ld of this job", W);
  stay_away(p);
  check_in(p);
  // one GPU per rank, numbered by the local rank, unless the launcher gave each process one GPU
  int gpus = dev == DEVICE_CUDA ? device_cuda_count() : 0;
  if (gpus > 1 && p->pg.local_size > gpus)
    die(1, "%d ranks on this node but only %d GPUs: start at most one rank per GPU", p->pg.local_size, gpus);
  device_init(&p->ctx, dev, gpus == 1 ? 0 : p->pg.local_rank);
  dist_connect(&p->pg, &p->ctx);
}

// Every rank must run the same all-reduces: a rank started with another --iters or --warmup calls
// them a different number of times, one with other sizes calls them with other counts, and the job
// then fails far from its cause (MPI_ERR_TRUNCATE, a watchdog error after a table that says OK).
// Compared as the trainers compare theirs (agree.h): one all-gather, then one message naming the flag.
static void check_flags_agree(Probe *p) {
  Agreement a;
  agree_init(&a);  // the program itself
  agree_add(&a, "--min_bytes", "%zu", p->args.min_bytes);
  agree_add(&a, "--max_bytes", "%zu", p->args.max_bytes);
  agree_add(&a, "--factor", "%zu", p->args.factor);
  agree_add(&a, "--iters", "%ld", p->args.iters);
  agree_add(&a, "--warmup", "%ld", p->args.warmup);
  agree_add(&a, "--call", "%s", p->args.async ? "async" : "blocking");
  agree_add(&a, "--test_wrong_rank", "%ld", p->args.wrong_rank);
  agree_check(&a, &p->pg, &p->ctx);
}

// Allocates every buffer once, at the largest size, and writes it (dev_alloc zero-fills), so that no
// timed all-reduce pays for the first touch of fresh pages (docs/performance.md).
static void alloc_buffers(Probe *p) {
  size_t n =
      p->args.max_bytes < CHECK_COUNT * sizeof(float) ? CHECK_COUNT : p->args.max_bytes / sizeof(float);
  p->buf = dev_alloc(&p->ctx, n * sizeof(float));
  p->host = dev_host_alloc(&p->ctx, n * sizeof(float));
  p->stat = dev_alloc(&p->ctx, 2 * sizeof(double));
  dev_event_init(&p->ctx, &p->t0);
  dev_event_init(&p->ctx, &p->t1);
  dist_work_init(&p->pg, &p->work);
}

static void cleanup(Probe *p) {
  dist_work_free(&p->pg, &p->work);
  dev_event_free(&p->ctx, &p->t1);
  dev_event_free(&p->ctx, &p->t0);
  dev_free(&p->ctx, p->stat);
  dev_host_free(&p->ctx, p->host);
  dev_free(&p->ctx, p->buf);
  dist_destroy(&p->pg);
  device_free(&p->ctx);
}

// ---------------------------------------------------------------------------------------------------
// Data: rank r contributes (r + 1) * k at element i, k = 1 + i mod 7, so the sum is W(W+1)/2 * k:
// whole numbers below 2^24 (W <= 2000), exact in fp32 whatever order the ranks are added in, and
// different from element to element, so that data landing in the wrong place is seen too.

static float factor_at(size_t i) { return (float)(1 + i % 7); }

static void fill(const Probe *p, size_t n) {
  float r1 = (float)(p->pg.rank + 1);
  for (size_t i = 0; i < n; i++) p->host[i] = r1 * factor_at(i);
  if (p->args.wrong_rank == p->pg.rank) p->host[n > WRONG_AT ? WRONG_AT : n - 1] += 1;  // --test_wrong_rank
  dev_upload(&p->ctx, p->buf, p->host, n * sizeof(float));
}

typedef struct Verdict {
  size_t wrong;    // elements that differ from the exact sum
  size_t first;    // index of the first of them
  float expected;  // its exact sum
  float got;       // what the all-reduce gave
} Verdict;

// One all-reduce of freshly filled data, downloaded and compared with the exact sums.
static Verdict check_once(Probe *p, size_t n) {
  fill(p, n);
  dist_all_reduce(&p->pg, p->buf, n, DIST_FLOAT, DIST_SUM);
  dev_download(&p->ctx, p->host, p->buf, n * sizeof(float));
  float tri = (float)p->pg.world_size * (float)(p->pg.world_size + 1) / 2;
  Verdict v = {0, 0, 0, 0};
  for (size_t i = 0; i < n; i++) {
    float want = tri * factor_at(i);
    if (p->host[i] == want) continue;
    if (v.wrong++ == 0) v = (Verdict){1, i, want, p->host[i]};
  }
  return v;
}

// Sums @p seconds and @p wrong over the ranks (on the device, as every collective here).
static void sum_over_ranks(Probe *p, double *seconds, double *wrong) {
  double s[2] = {*seconds, *wrong};
  dev_upload(&p->ctx, p->stat, s, sizeof s);
  dist_all_reduce(&p->pg, p->stat, 2, DIST_DOUBLE, DIST_SUM);
  dev_download(&p->ctx, s, p->stat, sizeof s);
  *seconds = s[0];
  *wrong = s[1];
}

// ---------------------------------------------------------------------------------------------------
// Connectivity: every rank's line, in rank order, on rank 0

static void format_line(const Probe *p, const Verdict *v, char *line) {
  char host[64] = "?", dev[16] = "cpu";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  if (p->ctx.dev == DEVICE_CUDA) snprintf(dev, sizeof dev, "cuda:%d", p->ctx.gpu);
  int n = snprintf(line, LINE_BYTES, "[%.48s rank %d/%d local %d device %s] ", host, p->pg.rank,
                   p->pg.world_size, p->pg.local_rank, dev);
  if (v->wrong == 0)
    snprintf(line + n, LINE_BYTES - (size_t)n, "ok");
  else
    snprintf(line + n, LINE_BYTES - (size_t)n, "broken: expected %.0f, got %.9g at %zu (%zu of %d wrong)",
             v->expected, v->got, v->first, v->wrong, CHECK_COUNT);
}

static void check_connectivity(Probe *p) {
  Verdict v = check_once(p, CHECK_COUNT);
  int W = p->pg.world_size;
  char *lines = mallocCheck((size_t)W * LINE_BYTES);
  format_line(p, &v, lines + (size_t)p->pg.rank * LINE_BYTES);
  char *dev_lines = dev_alloc(&p->ctx, (size_t)W * LINE_BYTES);  // (W, LINE_BYTES) chars
  dev_upload(&p->ctx, dev_lines + (size_t)p->pg.rank * LINE_BYTES, lines + (size_t)p->pg.rank * LINE_BYTES,
             LINE_BYTES);
  dist_all_gather(&p->pg, dev_lines + (size_t)p->pg.rank * LINE_BYTES, dev_lines, LINE_BYTES / sizeof(int),
                  DIST_INT);
  dev_download(&p->ctx, lines, dev_lines, (size_t)W * LINE_BYTES);
  for (int r = 0; r < W; r++) {
    lines[(size_t)r * LINE_BYTES + LINE_BYTES - 1] = '\0';
    log0("%s\n", lines + (size_t)r * LINE_BYTES);
  }
  dev_free(&p->ctx, dev_lines);
  free(lines);
  double unused = 0, wrong = (double)v.wrong;
  sum_over_ranks(p, &unused, &wrong);
  p->wrong += wrong;
}

static void print_backend(const Probe *p) {
  char version[256];
  probe_backend_version(&p->pg, version, sizeof version);
  log0("# backend %s: %s; device %s; launcher %s\n", dist_backend_name(p->pg.backend), version,
       device_name(p->ctx.dev), launcher_name(p->pg.launcher));
}

// ---------------------------------------------------------------------------------------------------
// Bandwidth: nccl-tests' columns and factors (GB = 1e9 bytes; busbw = algbw * 2(W-1)/W for an
// all-reduce: what each rank's link carries, so that it compares with the link's own bandwidth)

// Timed iterations for @p bytes: --iters, fewer where they would move more than BYTES_PER_SIZE.
static long iters_for(const Probe *p, size_t bytes) {
  size_t cap = BYTES_PER_SIZE / bytes;
  return cap < 1 ? 1 : (long)cap < p->args.iters ? (long)cap : p->args.iters;
}

// Mean seconds of one all-reduce of @p n floats on this rank: from a barrier to the completion of
// the last of @p iters back-to-back all-reduces (on a GPU, events on the stream the NCCL calls use).
static void all_reduce(Probe *p, size_t n) {
  if (!p->args.async) {
    dist_all_reduce(&p->pg, p->buf, n, DIST_FLOAT, DIST_SUM);
    return;
  }
  dist_all_reduce_async(&p->pg, p->buf, n, DIST_FLOAT, DIST_SUM, &p->work);
  dist_wait(&p->pg, &p->work);
}

static double time_all_reduce(Probe *p, size_t n, long iters) {
  for (long i = 0; i < p->args.warmup; i++) all_reduce(p, n);
  dist_barrier(&p->pg);
  dev_event_record(&p->ctx, &p->t0, NULL);
  for (long i = 0; i < iters; i++) all_reduce(p, n);
  dev_event_record(&p->ctx, &p->t1, NULL);
  return dev_event_elapsed(&p->ctx, &p->t0, &p->t1) / (double)iters;
}

static void print_header(const Probe *p) {
  int W = p->pg.world_size;
  log0(
      "#\n# all-reduce%s, sum, float32, in place, %d rank%s; %ld timed iterations per size (fewer where "
      "they would move more than 1 GiB), after %ld warm-up%s and one checked all-reduce\n",
      p->args.async ? " (async, then wait)" : "", W, W == 1 ? "" : "s", p->args.iters, p->args.warmup,
      p->args.warmup == 1 ? "" : "s");
  log0("# buffers: allocated once at the largest size and written before any timing (hot), on the %s\n",
       p->ctx.dev == DEVICE_CUDA ? "GPU" : "CPU");
  log0("# time: mean over the ranks of (barrier .. last all-reduce complete) / iterations\n");
  if (W == 1) log0("# busbw: one rank moves nothing between ranks (factor 2(W-1)/W = 0): not shown\n");
  log0("#\n# %10s %12s %8s %10s %8s %8s %8s\n", "size", "count", "type", "time", "algbw", "busbw", "#wrong");
  log0("# %10s %12s %8s %10s %8s %8s %8s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

// One row: the size checked, then timed; returns its busbw in GB/s.
static double measure_size(Probe *p, size_t bytes) {
  size_t n = bytes / sizeof(float);
  int W = p->pg.world_size;
  Verdict v = check_once(p, n);
  double sec = time_all_reduce(p, n, iters_for(p, bytes)), wrong = (double)v.wrong;
  sum_over_ranks(p, &sec, &wrong);
  sec /= W;
  p->wrong += wrong;
  double algbw = (double)bytes / 1e9 / sec, busbw = algbw * 2.0 * (W - 1) / W;
  char bus[16] = "-";
  if (W > 1) snprintf(bus, sizeof bus, "%8.2f", busbw);
  log0("  %10zu %12zu %8s %10.2f %8.2f %8s %8.0f\n", bytes, n, "float", sec * 1e6, algbw, bus, wrong);
  return busbw;
}

static void sweep(Probe *p) {
  print_header(p);
  double sum_bw = 0;
  int rows = 0;
  for (size_t b = p->args.min_bytes; b <= p->args.max_bytes; b *= p->args.factor) {
    sum_bw += measure_size(p, b);
    rows++;
    if (b > p->args.max_bytes / p->args.factor) break;  // the next size would pass --max_bytes
  }
  log0("# #wrong in all: %.0f %s\n", p->wrong, p->wrong == 0 ? "OK" : "FAILED");
  if (p->pg.world_size > 1)
    log0("# Avg bus bandwidth    : %.3f GB/s (mean over the %d sizes)\n", sum_bw / rows, rows);
}

// ---------------------------------------------------------------------------------------------------
// main

int main(int argc, char **argv) {
  Probe p = {0};
  configure(&p.args, argc, argv);
  setup(&p);
  check_flags_agree(&p);
  alloc_buffers(&p);
  check_connectivity(&p);
  print_backend(&p);
  sweep(&p);
  int status = p.wrong == 0 ? 0 : 1;  // every rank has the same sum, so every rank agrees
  cleanup(&p);
  return status;
}
