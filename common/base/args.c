// args.c: the flags of args.h. One table describes every flag (name, group, kind, field, default,
// bounds, help); the defaults, parsing, validation and the usage text are all generated from it, so
// they cannot disagree.
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// KIND_LIST: comma-separated positive integers, possibly none (--hidden); their bounds belong to the
// code that uses them (mlp_parse_sizes).
typedef enum { KIND_INT, KIND_FLOAT, KIND_U64, KIND_STR, KIND_LIST, KIND_BOOL } Kind;

// How a number is bounded: value >= min, value > min, or min <= value < 1 (momentum).
typedef enum { RANGE_NONE, RANGE_GE, RANGE_GT, RANGE_UNIT } Range;

typedef struct Flag {
  const char *name;     // without the leading "--"
  unsigned group;       // ARGS_*
  Kind kind;            // how the value is parsed
  size_t off;           // offsetof(Args, field)
  const char *def;      // default, parsed like a value on the command line (NULL: 0, off or none)
  Range range;          // lower bound on numbers
  double min;           // the lower bound
  double max;           // upper bound, inclusive (NO_MAX: none)
  const char *choices;  // "a|b|c" for enumerations, NULL for free text
  const char *meta;     // value placeholder in the usage ("N", "PATH")
  const char *help;     // one line for the usage
} Flag;

// Upper bounds: each keeps the values the trainers compute from the flag inside an int (or a size
// the reducer and the watchdog can represent), with room to spare for any real run.
#define NO_MAX INFINITY
#define MAX_EPOCHS 1000000          // a checkpoint's epoch stays far below 2^31
#define MAX_BATCH (1 << 20)         // samples per micro-batch per process
#define MAX_ACCUM (1 << 16)         // micro-batches per optimizer step
#define MAX_STEP_SAMPLES (1 << 24)  // --batch_size x --grad_accum: start + step size fits an int
#define MAX_DATASET 100000000       // the IDX reader's own limit on items
#define MAX_STEPS 1000000000        // --max_steps, --log_interval
#define MAX_BUCKET_MB 1024.0        // one bucket of 2^28 floats: an MPI count well below INT_MAX
#define MAX_TIMEOUT 604800.0        // one week, in seconds

// Each row: name, group, kind, field, default; bounds, choices, value placeholder; help.
#define F(field) offsetof(Args, field)
// clang-format off: one row per flag, laid out by hand
static const Flag FLAGS[] = {
    {"epochs", ARGS_TRAIN, KIND_INT, F(epochs), "3", RANGE_GE, 1, MAX_EPOCHS, NULL, "N",
     "passes over the training data"},
    {"batch_size", ARGS_TRAIN, KIND_INT, F(batch_size), "128", RANGE_GE, 1, MAX_BATCH, NULL, "N",
     "samples per optimizer step per process"},
    {"lr", ARGS_TRAIN, KIND_FLOAT, F(lr), "0.05", RANGE_GT, 0, NO_MAX, NULL, "X", "learning rate"},
    {"momentum", ARGS_TRAIN, KIND_FLOAT, F(momentum), "0.9", RANGE_UNIT, 0, NO_MAX, NULL, "X",
     "SGD momentum"},
    {"weight_decay", ARGS_TRAIN, KIND_FLOAT, F(weight_decay), "0", RANGE_GE, 0, NO_MAX, NULL, "X",
     "L2 weight decay"},
    {"dataset_size", ARGS_TRAIN, KIND_INT, F(dataset_size), "0", RANGE_GE, 0, MAX_DATASET, NULL, "N",
     "training samples to use, 0 = all (synthetic: 10000)"},
    {"save_interval", ARGS_TRAIN, KIND_INT, F(save_interval), "1", RANGE_GE, 0, MAX_EPOCHS, NULL, "N",
     "save a checkpoint after every N-th epoch and where --max_steps stops, 0 = never"},
    {"device", ARGS_TRAIN, KIND_STR, F(device), "auto", RANGE_NONE, 0, NO_MAX, "auto|cpu|cuda", "NAME",
     "where to train"},
    {"tf32", ARGS_TRAIN, KIND_BOOL, F(tf32), NULL, RANGE_NONE, 0, NO_MAX, NULL, NULL,
     "let GPU GEMMs use TF32 tensor cores (faster, less precise; no effect on the CPU)"},
    {"data", ARGS_TRAIN, KIND_STR, F(data), "fashion-mnist", RANGE_NONE, 0, NO_MAX,
     "fashion-mnist|mnist|synthetic", "NAME", "data set"},
    {"data_dir", ARGS_TRAIN, KIND_STR, F(data_dir), NULL, RANGE_NONE, 0, NO_MAX, NULL, "DIR",
     "directory with the IDX files (default: the data set's own)"},
    // The bounds are the model's, checked where the sizes are used (mlp_parse_sizes): MLP_MAX_LAYERS
    // - 1 hidden layers of at most MLP_MAX_WIDTH each. test_args.cpp checks that this line states them.
    {"hidden", ARGS_TRAIN, KIND_LIST, F(hidden), "1024,1024", RANGE_NONE, 0, NO_MAX, NULL, "LIST",
     "hidden layer sizes, comma-separated (\"\" = none); at most 7 sizes, each 1..1048576"},
    {"seed", ARGS_TRAIN, KIND_U64, F(seed), "42", RANGE_NONE, 0, NO_MAX, NULL, "N",
     "seed for initialisation and shuffling"},
    {"metrics", ARGS_TRAIN, KIND_STR, F(metrics), NULL, RANGE_NONE, 0, NO_MAX, NULL, "PATH",
     "write JSON Lines metrics, {rank} replaced by the rank; {rank} required above 1 rank"},
    {"ckpt_dir", ARGS_TRAIN, KIND_STR, F(ckpt_dir), "checkpoints/{program}", RANGE_NONE, 0, NO_MAX, NULL,
     "DIR", "folder of checkpoint.bin (each step its own)"},
    {"resume", ARGS_TRAIN, KIND_STR, F(resume), NULL, RANGE_NONE, 0, NO_MAX, NULL, "PATH",
     "checkpoint to continue from; from step 06 also \"auto\": --ckpt_dir's checkpoint if there is one, "
     "else the start"},
    {"save_init", ARGS_TRAIN, KIND_STR, F(save_init), NULL, RANGE_NONE, 0, NO_MAX, NULL, "DIR",
     "before training, write the initial state (as built, or as resumed) to DIR/checkpoint.bin"},
    {"max_steps", ARGS_TRAIN, KIND_INT, F(max_steps), "0", RANGE_GE, 0, MAX_STEPS, NULL, "N",
     "stop after N optimizer steps, 0 = no limit"},
    {"log_interval", ARGS_TRAIN, KIND_INT, F(log_interval), "50", RANGE_GE, 1, MAX_STEPS, NULL, "N",
     "optimizer steps between progress lines"},
    {"clip_grad_norm", ARGS_TRAIN, KIND_FLOAT, F(clip_grad_norm), "0", RANGE_GE, 0, NO_MAX, NULL, "MAX",
     "scale the gradient to a global 2-norm of at most MAX (clip_grad_norm_), 0 = off"},
    {"backend", ARGS_DIST, KIND_STR, F(backend), "auto", RANGE_NONE, 0, NO_MAX, "auto|nccl|mpi|gloo", "NAME",
     "communication backend"},
    {"timeout", ARGS_DIST, KIND_FLOAT, F(timeout), "300", RANGE_GT, 0, MAX_TIMEOUT, NULL, "SECONDS",
     "end the job when a collective waits longer than this"},
    {"fr_dir", ARGS_DIST, KIND_STR, F(fr_dir), NULL, RANGE_NONE, 0, NO_MAX, NULL, "DIR",
     "where a hung or failed job writes each rank's last collectives, fr_<rank>.jsonl, for "
     "scripts/fr_analyze.py (default: --metrics' folder, else out)"},
    {"drop_last", ARGS_SAMPLER, KIND_BOOL, F(drop_last), NULL, RANGE_NONE, 0, NO_MAX, NULL, NULL,
     "drop the tail of the data instead of padding it"},
    {"bucket_cap_mb", ARGS_REDUCER, KIND_FLOAT, F(bucket_cap_mb), "25", RANGE_GT, 0, MAX_BUCKET_MB, NULL, "X",
     "gradient bucket size cap in MiB"},
    {"grad_accum", ARGS_REDUCER, KIND_INT, F(grad_accum), "1", RANGE_GE, 1, MAX_ACCUM, NULL, "N",
     "micro-batches per optimizer step"},
    {"trace", ARGS_REDUCER, KIND_STR, F(trace), NULL, RANGE_NONE, 0, NO_MAX, NULL, "PATH",
     "write a Chrome trace (chrome://tracing, Perfetto), {rank} replaced by the rank; {rank} "
     "required above 1 rank"},
    {"straggler", ARGS_REDUCER, KIND_INT, F(straggler), "0", RANGE_GE, 0, 100000, NULL, "N",
     "every N steps, name the rank that arrives late at the gradient all-reduce, 0 = never"},
    {"save_steps", ARGS_FAULT, KIND_INT, F(save_steps), "0", RANGE_GE, 0, MAX_STEPS, NULL, "N",
     "also save the checkpoint every N optimizer steps (a snapshot to restart from), 0 = never"},
    {"comm_hook", ARGS_HOOKS, KIND_STR, F(comm_hook), "allreduce", RANGE_NONE, 0, NO_MAX,
     "allreduce|fp16|bf16|powersgd", "NAME", "what each gradient bucket sends (DDP's register_comm_hook)"},
    {"powersgd_rank", ARGS_HOOKS, KIND_INT, F(powersgd_rank), "1", RANGE_GE, 1, 1024, NULL, "R",
     "PowerSGD's matrix_approximation_rank"},
    {"powersgd_start_iter", ARGS_HOOKS, KIND_INT, F(powersgd_start_iter), "1000", RANGE_GE, 2, MAX_STEPS,
     NULL, "N", "PowerSGD's start_powerSGD_iter: plain all-reduce for the first N iterations (PyTorch: > 1)"},
    {"check_finite", ARGS_HOOKS, KIND_BOOL, F(check_finite), NULL, RANGE_NONE, 0, NO_MAX, NULL, NULL,
     "before a bucket's collective, end the job if this rank's gradients hold a NaN or an infinity"},
    {"ft_op_timeout", ARGS_LIVE, KIND_FLOAT, F(ft_op_timeout), "3", RANGE_GT, 0, MAX_TIMEOUT, NULL, "SECONDS",
     "under launch.sh --ft: a collective that waits longer fails its step (a frozen peer), and the "
     "others go on"},
    {"heartbeat_timeout", ARGS_LIVE, KIND_FLOAT, F(heartbeat_timeout), "2", RANGE_GT, 0, MAX_TIMEOUT, NULL,
     "SECONDS", "under launch.sh --ft: the lighthouse drops a replica silent this long"},
    {"join_timeout", ARGS_LIVE, KIND_FLOAT, F(join_timeout), "1", RANGE_GE, 0, MAX_TIMEOUT, NULL, "SECONDS",
     "under launch.sh --ft: how long the lighthouse waits for the live replicas still missing from a quorum"},
    {"ft_quorum_timeout", ARGS_LIVE, KIND_FLOAT, F(ft_quorum_timeout), "30", RANGE_GT, 0, MAX_TIMEOUT, NULL,
     "SECONDS", "under launch.sh --ft: a replica's longest wait for a quorum"},
    {"min_replicas", ARGS_LIVE, KIND_INT, F(min_replicas), "1", RANGE_GE, 1, 1024, NULL, "N",
     "under launch.sh --ft: the fewest replicas that train on; fewer end the job"},
    {"ft_batch", ARGS_LIVE, KIND_STR, F(ft_batch), "global", RANGE_NONE, 0, NO_MAX, "global|per_rank", "MODE",
     "after a change of world size: global keeps the samples per step (each rank takes more); per_rank "
     "keeps each rank's, from the next epoch on"},
};
// clang-format on
#undef F
#define N_FLAGS (sizeof FLAGS / sizeof FLAGS[0])

// The step in which each group arrives, for "not available in this step" messages.
static const struct {
  unsigned group;
  const char *stage;
} STAGES[] = {
    {ARGS_DIST, "the process group in step 02"},
    {ARGS_SAMPLER, "the distributed sampler in step 03"},
    {ARGS_REDUCER, "the bucketed reducer in step 06"},
    {ARGS_FAULT, "the restarts in step 06"},
    {ARGS_HOOKS, "step 06's DDP communication hooks; steps 07 and 08 reduce-scatter shards and take none"},
    {ARGS_LIVE, "live recovery in step 09"},
};

// ---- usage ------------------------------------------------------------------------------------------

// The accepted range after the help text: "; 1..1048576", "; > 0", "; in (0, 1024]", "; in [0, 1)".
static void print_range(FILE *out, const Flag *f) {
  bool capped = f->max != NO_MAX;
  switch (f->range) {
    case RANGE_NONE:
      break;
    case RANGE_GE:
      if (!capped)
        fprintf(out, "; >= %.10g", f->min);
      else if (f->kind == KIND_INT)
        fprintf(out, "; %.10g..%.10g", f->min, f->max);
      else
        fprintf(out, "; in [%.10g, %.10g]", f->min, f->max);
      break;
    case RANGE_GT:
      if (capped)
        fprintf(out, "; in (%.10g, %.10g]", f->min, f->max);
      else
        fprintf(out, "; > %.10g", f->min);
      break;
    case RANGE_UNIT:
      fprintf(out, "; in [%.10g, 1)", f->min);
      break;
  }
}

// A default with `{program}` in it, e.g. --ckpt_dir's checkpoints/{program}, names the running
// program (argv[0]'s last component), so that each step keeps its own checkpoints. The text lives
// in a static buffer: one such flag.
static const char *expand_default(const Flag *f, const char *prog) {
  static char buf[256];
  const char *at = f->def ? strstr(f->def, "{program}") : NULL;
  if (!at) return f->def;
  const char *base = strrchr(prog, '/');
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - f->def), f->def, base ? base + 1 : prog,
           at + strlen("{program}"));
  return buf;
}

static void usage(FILE *out, const char *prog, unsigned groups, const char *about) {
  const char *base = strrchr(prog, '/');
  if (about) fprintf(out, "%s\n\n", about);
  fprintf(out, "usage: %s [flags]   (--flag value or --flag=value)\n\nflags:\n", base ? base + 1 : prog);
  for (size_t i = 0; i < N_FLAGS; i++) {
    const Flag *f = &FLAGS[i];
    if (!(f->group & groups)) continue;
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", f->name, f->choices || f->meta ? " " : "",
             f->choices ? f->choices
             : f->meta  ? f->meta
                        : "");
    fprintf(out, "  %-38s %s", left, f->help);
    print_range(out, f);
    if (f->def) fprintf(out, " (default %s)", expand_default(f, prog));
    fputc('\n', out);
  }
  fprintf(out, "  %-38s %s\n", "-h, --help", "show this help and exit");
  if (groups & ARGS_REDUCER)
    fprintf(out, "\nlimits: --batch_size x --grad_accum <= %d (samples per optimizer step)\n",
            MAX_STEP_SAMPLES);
}

// Prints "error: <what>", a blank line and the usage to stderr, then exits 2. Arguments are parsed
// before any process group exists, so a plain exit is the right way to end.
static void __attribute__((noreturn, format(printf, 4, 5)))
fail(const char *prog, unsigned groups, const char *about, const char *fmt, ...) {
  va_list ap;
  fputs("error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n\n", stderr);
  usage(stderr, prog, groups, about);
  fflush(stdout);
  exit(2);
}

// ---- values -----------------------------------------------------------------------------------------

typedef struct Parser {  // what an error message needs to print the usage
  const char *prog;
  unsigned groups;
  const char *about;
} Parser;

#define FAIL(c, ...) fail((c)->prog, (c)->groups, (c)->about, __VA_ARGS__)

// strtol and friends skip leading spaces and strtoull accepts "-1"; neither is a number here.
static int plain_start(const char *s, int allow_minus) {
  if (!*s || isspace((unsigned char)*s)) return 0;
  return allow_minus || *s != '-';
}

static double parse_number(const Parser *c, const Flag *f, const char *v, void *dst) {
  char *end = NULL;
  errno = 0;
  if (f->kind == KIND_INT) {
    long x = plain_start(v, 1) ? strtol(v, &end, 10) : 0;
    if (!end || end == v || *end) FAIL(c, "--%s: '%s' is not an integer", f->name, v);
    if (errno == ERANGE || x < INT_MIN || x > INT_MAX)
      FAIL(c, "--%s: '%s' is out of range for an integer", f->name, v);
    *(int *)dst = (int)x;
    return (double)x;
  }
  if (f->kind == KIND_U64) {
    unsigned long long x = plain_start(v, 0) ? strtoull(v, &end, 10) : 0;
    if (!end || end == v || *end) FAIL(c, "--%s: '%s' is not a non-negative integer", f->name, v);
    if (errno == ERANGE) FAIL(c, "--%s: '%s' does not fit in 64 bits", f->name, v);
    *(uint64_t *)dst = (uint64_t)x;
    return (double)x;
  }
  float x = plain_start(v, 1) ? strtof(v, &end) : 0.0f;
  if (!end || end == v || *end) FAIL(c, "--%s: '%s' is not a number", f->name, v);
  if (!isfinite(x)) FAIL(c, "--%s: '%s' is not a finite number", f->name, v);
  if (errno == ERANGE) FAIL(c, "--%s: '%s' is out of range for a float", f->name, v);
  *(float *)dst = x;
  return (double)x;
}

static void check_range(const Parser *c, const Flag *f, double x, const char *v) {
  switch (f->range) {
    case RANGE_NONE:
      break;
    case RANGE_GE:
      if (!(x >= f->min)) FAIL(c, "--%s must be >= %.10g (got %s)", f->name, f->min, v);
      break;
    case RANGE_GT:
      if (!(x > f->min)) FAIL(c, "--%s must be > %.10g (got %s)", f->name, f->min, v);
      break;
    case RANGE_UNIT:
      if (!(x >= f->min && x < 1.0)) FAIL(c, "--%s must be in [%.10g, 1) (got %s)", f->name, f->min, v);
      break;
  }
  if (x > f->max) FAIL(c, "--%s must be <= %.10g (got %s)", f->name, f->max, v);
}

// Is v one of the '|'-separated words in choices?
static int is_choice(const char *choices, const char *v) {
  size_t n = strlen(v);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0) return 1;
    p += len + (bar ? 1 : 0);
  }
  return 0;
}

// Is v a comma-separated list of positive integers ("1024,1024"), or empty? Only the form is checked
// here: how many and how large is for the code that uses them to say.
static bool is_positive_list(const char *v) {
  for (const char *p = v; *p;) {
    const char *q = p;
    bool nonzero = false;
    for (; isdigit((unsigned char)*q); q++) nonzero |= *q != '0';
    if (!nonzero || (*q && *q != ',') || (*q == ',' && !q[1])) return false;
    p = *q ? q + 1 : q;
  }
  return true;
}

static void set_value(const Parser *c, Args *a, const Flag *f, const char *v) {
  void *dst = (char *)a + f->off;
  if (f->kind == KIND_STR || f->kind == KIND_LIST) {
    if (f->choices && !is_choice(f->choices, v))
      FAIL(c, "--%s: '%s' is not one of %s", f->name, v, f->choices);
    if (f->kind == KIND_STR && !*v) FAIL(c, "--%s needs a non-empty value", f->name);
    if (f->kind == KIND_LIST && !is_positive_list(v))
      FAIL(c, "--%s: '%s' is not a comma-separated list of positive integers (e.g. 1024,1024)", f->name, v);
    *(const char **)dst = v;
    return;
  }
  check_range(c, f, parse_number(c, f, v, dst), v);
}

// ---- settings ---------------------------------------------------------------------------------------

// Appends the line "name<TAB>value" (value formatted like printf) to buf, which has room for len.
static void __attribute__((format(printf, 4, 5)))
add_setting(char *buf, size_t len, const char *name, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used >= len) return;
  used += (size_t)snprintf(buf + used, len - used, "%s\t", name);
  if (used >= len) return;
  va_list ap;
  va_start(ap, fmt);
  used += (size_t)vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
  if (used < len) snprintf(buf + used, len - used, "\n");
}

// A float as its user wrote it ("0.05"), unless that text would not tell it from a neighbour; then
// with 9 significant digits, which always do.
static void add_float(char *buf, size_t len, const char *name, float x) {
  char text[32];
  snprintf(text, sizeof text, "%g", (double)x);
  if (strtof(text, NULL) != x) snprintf(text, sizeof text, "%.9g", (double)x);
  add_setting(buf, len, name, "%s", text);
}

const char *args_settings(const Args *g) {
  static char s[4096];
  const size_t n = sizeof s;
  s[0] = '\0';
  add_setting(s, n, "--epochs", "%d", g->epochs);
  add_setting(s, n, "--batch_size", "%d", g->batch_size);
  add_float(s, n, "--lr", g->lr);
  add_float(s, n, "--momentum", g->momentum);
  add_float(s, n, "--weight_decay", g->weight_decay);
  add_float(s, n, "--clip_grad_norm", g->clip_grad_norm);
  add_setting(s, n, "--dataset_size", "%d", g->dataset_size);
  add_setting(s, n, "--data", "%s", g->data);
  add_setting(s, n, "--seed", "%llu", (unsigned long long)g->seed);
  add_setting(s, n, "--max_steps", "%d", g->max_steps);
  add_setting(s, n, "--save_interval", "%d", g->save_interval);
  add_setting(s, n, "--device", "%s", g->device);
  add_setting(s, n, "--tf32", "%s", g->tf32 ? "on" : "off");
  add_setting(s, n, "--drop_last", "%s", g->drop_last ? "on" : "off");
  add_float(s, n, "--bucket_cap_mb", g->bucket_cap_mb);
  add_setting(s, n, "--grad_accum", "%d", g->grad_accum);
  add_setting(s, n, "--trace", "%s", g->trace ? "on" : "off");
  add_setting(s, n, "--straggler", "%d", g->straggler);  // its all-gathers must come at the same steps
  add_setting(s, n, "--save_init", "%s", g->save_init ? "on" : "off");  // a save has a barrier from step 05
  add_setting(s, n, "--save_steps", "%d", g->save_steps);               // so do snapshots (step 06)
  add_setting(s, n, "--comm_hook", "%s", g->comm_hook ? g->comm_hook : "allreduce");
  add_setting(s, n, "--powersgd_rank", "%d", g->powersgd_rank);
  add_setting(s, n, "--powersgd_start_iter", "%d", g->powersgd_start_iter);
  add_setting(s, n, "--check_finite", "%s", g->check_finite ? "on" : "off");
  add_setting(s, n, "--ft_batch", "%s", g->ft_batch ? g->ft_batch : "global");
  add_setting(s, n, "--resume auto", "%s",
              g->resume && strcmp(g->resume, ARGS_RESUME_AUTO) == 0 ? "on" : "off");
  return s;
}

// ---- parsing ----------------------------------------------------------------------------------------

static const Flag *find_flag(const char *name, size_t len) {
  for (size_t i = 0; i < N_FLAGS; i++)
    if (strlen(FLAGS[i].name) == len && strncmp(FLAGS[i].name, name, len) == 0) return &FLAGS[i];
  return NULL;
}

static const char *stage_of(unsigned group) {
  for (size_t i = 0; i < sizeof STAGES / sizeof STAGES[0]; i++)
    if (STAGES[i].group == group) return STAGES[i].stage;
  return "a later step";
}

// Every field from its row's default, parsed and checked like a command-line value.
static void set_defaults(const Parser *c, Args *a) {
  memset(a, 0, sizeof *a);
  for (size_t i = 0; i < N_FLAGS; i++)
    if (FLAGS[i].def) set_value(c, a, &FLAGS[i], expand_default(&FLAGS[i], c->prog));
}

// Whether the command line gave the flag called name (given: one entry per row of FLAGS).
static bool given_flag(const bool *given, const char *name) {
  const Flag *f = find_flag(name, strlen(name));
  return f && given[f - FLAGS];
}

// --fr_dir's default: the folder of the --metrics file (whose rings then lie beside the metrics), or
// "out" without metrics or when that folder depends on the rank.
static const char *default_fr_dir(const char *metrics) {
  static char dir[512];
  if (!metrics) return "out";
  const char *slash = strrchr(metrics, '/');
  if (!slash) return ".";
  if (slash == metrics) return "/";
  if ((size_t)(slash - metrics) >= sizeof dir) return "out";
  snprintf(dir, sizeof dir, "%.*s", (int)(slash - metrics), metrics);
  return strstr(dir, "{rank}") ? "out" : dir;
}

void args_parse(Args *a, int argc, char **argv, unsigned groups, const char *about) {
  Parser c = {argc > 0 && argv[0] ? argv[0] : "train", groups, about};
  bool given[N_FLAGS] = {false};
  set_defaults(&c, a);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout, c.prog, groups, about);
      fflush(stdout);
      exit(0);
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
      if (arg[0] == '-' && arg[1] != '\0') FAIL(&c, "unknown flag %s", arg);
      FAIL(&c, "unexpected argument '%s' (every option is a --flag)", arg);
    }
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const Flag *f = find_flag(name, len);
    if (!f) FAIL(&c, "unknown flag --%.*s", (int)len, name);
    if (!(f->group & groups))
      FAIL(&c, "--%s is not available in this step (it arrives with %s)", f->name, stage_of(f->group));
    given[f - FLAGS] = true;
    if (f->kind == KIND_BOOL) {
      if (eq) FAIL(&c, "--%s takes no value", f->name);
      *(bool *)((char *)a + f->off) = true;
      continue;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
      // "--metrics --epochs 3" almost certainly forgot the value rather than meant a path "--epochs".
      if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0) FAIL(&c, "--%s needs a value", f->name);
      v = argv[++i];
    }
    set_value(&c, a, f, v);
  }
  if (a->resume && strcmp(a->resume, ARGS_RESUME_AUTO) == 0 && !(groups & ARGS_FAULT))
    FAIL(&c, "--resume auto is not available in this step (it arrives with %s): name a checkpoint file",
         stage_of(ARGS_FAULT));
  // The trainers compute the samples of an optimizer step as an int: keep it far from overflowing
  // (it did: a product that wrapped to 0 ended the run with SIGFPE).
  if ((long long)a->batch_size * a->grad_accum > MAX_STEP_SAMPLES)
    FAIL(&c, "--batch_size %d x --grad_accum %d = %lld samples per optimizer step, more than %d",
         a->batch_size, a->grad_accum, (long long)a->batch_size * a->grad_accum, MAX_STEP_SAMPLES);
  // PowerSGD's settings change nothing under another hook: accepted silently, they would let a run
  // look compressed that is not (PyTorch's PowerSGDState belongs to powerSGD_hook only).
  static const char *const psgd_flags[] = {"powersgd_rank", "powersgd_start_iter"};
  for (size_t k = 0; k < sizeof psgd_flags / sizeof psgd_flags[0]; k++)
    if (given_flag(given, psgd_flags[k]) && strcmp(a->comm_hook, "powersgd") != 0)
      FAIL(&c,
           "--%s applies to --comm_hook powersgd only (this run's hook is %s): drop it, or add "
           "--comm_hook powersgd",
           psgd_flags[k], a->comm_hook);
  if (!a->fr_dir) a->fr_dir = default_fr_dir(a->metrics);
  // Both files are opened for writing: one path would leave the trace where the metrics were.
  if (a->metrics && a->trace && strcmp(a->metrics, a->trace) == 0)
    FAIL(&c,
         "--metrics and --trace are both '%s': the trace would overwrite the metrics; give each its own path",
         a->metrics);
}
