// lighthouse: the coordinator of live recovery (step 09; torchft's lighthouse), a process of its own,
// never a trainer, so that no trainer's death takes it along. It decides quorums: which replicas form
// the next process group, each one's rank, the newest step among them and whom the others heal from
// (common/dist/lighthouse.h has the wire format and the client). It also serves the key-value store
// (store.h) on --port + 1, under whose prefix q<id>/ each quorum's Gloo ranks meet.
//
//   build/bin/lighthouse --port 29510 --replicas 3                    # on 127.0.0.1, store on 29511
//   build/bin/lighthouse --port 29510 --replicas 3 --min_replicas 2 --log lh.jsonl
//
// One thread polls the membership connections (the store has threads of its own). It exits 0 on
// SIGTERM or SIGINT, and by itself once a quorum was issued and no replica has been connected for
// LINGER_S (a replacement the launcher starts meanwhile still finds it); 2 on a bad command line.
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"  // check.h: die, mallocCheck
#include "json.h"   // json.h: json_put_escaped
#include "store.h"  // store.h: StoreServer, store_server_start, store_server_drop_prefix, store_server_stop

#define TICK_MS 50                             // the longest poll: timeouts are checked at least this often
#define LINGER_S 2.0                           // how long it outlives the last replica
#define LINE_BYTES 256                         // the longest request line (hello, beat, quorum)
#define REASON_BYTES (8 * MAX_REPLICAS + 256)  // the longest refusal (it may name every replica)
#define MAX_REPLICAS 1024                      // lighthouse.h's LIGHTHOUSE_MAX_REPLICAS

// ---- configuration ----------------------------------------------------------------------------------

typedef struct Config {
  const char *host;          // --host: the address to listen on ("" all)
  int port;                  // --port: membership; the store is on port + 1
  int replicas;              // --replicas: the launch's size (replica ids 0 .. replicas - 1)
  int min_replicas;          // --min_replicas: the smallest quorum
  double join_timeout;       // --join_timeout: how long a quorum waits for members that have not asked
  double heartbeat_timeout;  // --heartbeat_timeout: a member silent this long is no longer alive
  double quorum_timeout;     // --quorum_timeout: the longest a request waits
  bool shrink_only;          // --shrink_only: no newcomer joins (only members of the last quorum go on)
  const char *log;           // --log: events, one JSON object a line (NULL: none)
} Config;

static const char *USAGE =
    "usage: lighthouse --port P --replicas N [flags]   (--flag value)\n"
    "Decides the quorums of step 09's replicas and serves their rendezvous store on P + 1.\n\n"
    "flags:\n"
    "  --port P               the membership port (required; the store listens on P + 1)\n"
    "  --host H               the address to listen on (default 127.0.0.1; \"\": every address)\n"
    "  --replicas N           the replicas of the launch, ids 0 .. N-1 (required, 1 .. 1024)\n"
    "  --min_replicas M       the smallest quorum (default 1, 1 .. N)\n"
    "  --join_timeout S       how long a quorum waits for live members that have not asked (default 1.0)\n"
    "  --heartbeat_timeout S  a member silent this long is left out (default 2.0)\n"
    "  --quorum_timeout S     the longest a quorum request waits (default 60)\n"
    "  --shrink_only          refuse new replicas after the first quorum (default: they join and heal)\n"
    "  --log FILE             write each event as a JSON object, one a line\n";

static _Noreturn void usage(const char *fmt, const char *arg) {
  fprintf(stderr, "lighthouse: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", USAGE);
  exit(2);
}

static double seconds_flag(const char *name, const char *v) {
  char *end;
  double s = strtod(v, &end);
  if (end == v || *end || !(s > 0 && s < 1e7)) usage("%s: expected seconds > 0", name);
  return s;
}

static int int_flag(const char *name, const char *v, int lo, int hi) {
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < lo || n > hi) usage("%s: expected an integer in range", name);
  return (int)n;
}

static Config parse_args(int argc, char **argv) {
  Config cf = {.host = "127.0.0.1",
               .min_replicas = 1,
               .join_timeout = 1.0,
               .heartbeat_timeout = 2.0,
               .quorum_timeout = 60.0};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
      fputs(USAGE, stdout);
      exit(0);
    }
    if (strcmp(f, "--shrink_only") == 0) {
      cf.shrink_only = true;
      continue;
    }
    static const char *valued[] = {"--port",           "--host",         "--replicas",
                                   "--min_replicas",   "--join_timeout", "--heartbeat_timeout",
                                   "--quorum_timeout", "--log"};
    bool known = false;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known = known || strcmp(f, valued[k]) == 0;
    if (!known) usage("unknown flag %s", f);
    if (i + 1 >= argc) usage("%s: missing its value", f);
    const char *v = argv[++i];
    if (strcmp(f, "--port") == 0)
      cf.port = int_flag(f, v, 1, 65534);
    else if (strcmp(f, "--host") == 0)
      cf.host = v;
    else if (strcmp(f, "--replicas") == 0)
      cf.replicas = int_flag(f, v, 1, MAX_REPLICAS);
    else if (strcmp(f, "--min_replicas") == 0)
      cf.min_replicas = int_flag(f, v, 1, MAX_REPLICAS);
    else if (strcmp(f, "--join_timeout") == 0)
      cf.join_timeout = seconds_flag(f, v);
    else if (strcmp(f, "--heartbeat_timeout") == 0)
      cf.heartbeat_timeout = seconds_flag(f, v);
    else if (strcmp(f, "--quorum_timeout") == 0)
      cf.quorum_timeout = seconds_flag(f, v);
    else if (strcmp(f, "--log") == 0)
      cf.log = v;
    else
      usage("unknown flag %s", f);
  }
  if (!cf.port) usage("%s is required", "--port");
  if (!cf.replicas) usage("%s is required", "--replicas");
  if (cf.min_replicas > cf.replicas) usage("%s must be 1 .. --replicas", "--min_replicas");
  return cf;
}

// ---- state ------------------------------------------------------------------------------------------

typedef struct Conn {
  int fd;               // -1: closed, swept out at the end of the loop's turn
  int replica;          // -1 until its hello
  int incarnation;      // from its hello
  double opened;        // when it was accepted
  double last_beat;     // when it last sent a line: a member silent for --heartbeat_timeout is not alive
  bool silent;          // its silence was reported
  bool pending;         // it asked for a quorum and has no answer yet
  bool was_member;      // it was in an issued quorum: left out of a later one, it may not come back
  bool announced;       // a newcomer whose wait the last quorum's members were told of (`join R`)
  double asked;         // when
  long long step;       // its committed step, as it asked
  char digest[17];      // its parameters' digest (16 hex digits)
  char in[LINE_BYTES];  // received bytes, not yet a whole line
  size_t len;
} Conn;

typedef struct Lighthouse {
  Config cf;
  int listen_fd;
  StoreServer *store;
  FILE *log;
  double start;
  Conn *conns;  // (n of cap) the connections, members or not yet
  int n, cap;
  int last[MAX_REPLICAS];  // (n_last) the members of the last quorum, by replica id
  int n_last;
  int last_id;                   // the last quorum's id (0: none yet)
  long long last_step;           // its max_step
  char gone[MAX_REPLICAS][128];  // why each replica left (for the next quorum's line; cut to fit)
} Lighthouse;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// ---- messages: stderr and the --log file --------------------------------------------------------------

// One line on stderr, `lighthouse: ` first, at once (a test reads it while the lighthouse runs).
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("lighthouse: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  fflush(stderr);
  va_end(ap);
}

// @p s as a JSON string (quoted) on @p f.
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  json_put_escaped(f, s);
  fputc('"', f);
}

// The start of an event's JSON object: {"event":NAME,"t":seconds since the start; the caller adds its
// fields (",\"k\":v") and ends it with log_end(). No-ops without --log.
static void log_begin(const Lighthouse *lh, const char *event) {
  if (lh->log) fprintf(lh->log, "{\"event\":\"%s\",\"t\":%.3f", event, now_s() - lh->start);
}

static void log_end(const Lighthouse *lh) {
  if (!lh->log) return;
  fputs("}\n", lh->log);
  fflush(lh->log);
}

// An event about one replica, with an optional reason.
static void log_replica(const Lighthouse *lh, const char *event, int replica, const char *reason) {
  if (!lh->log) return;
  log_begin(lh, event);
  fprintf(lh->log, ",\"replica\":%d", replica);
  if (reason) fputs(",\"reason\":", lh->log), json_string(lh->log, reason);
  log_end(lh);
}

// ---- connections --------------------------------------------------------------------------------------

// The listening socket of the membership port: the first address of --host that binds (every address
// for "").
static int listen_members(const Config *cf) {
  char service[16];
  snprintf(service, sizeof service, "%d", cf->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE},
                  *list = NULL;
  int gai = getaddrinfo(cf->host[0] ? cf->host : NULL, service, &hints, &list);
  if (gai) die(1, "lighthouse: --host '%s' does not resolve: %s", cf->host, gai_strerror(gai));
  int fd = -1, one = 1, err = 0;
  for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a previous run's port in TIME_WAIT
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(list);
  if (fd < 0)
    die(1, "lighthouse: cannot listen on %s:%d: %s (choose a free --port)", cf->host, cf->port,
        strerror(err));
  return fd;
}

// The open member that is replica @p r, or NULL.
static Conn *member(Lighthouse *lh, int r) {
  for (int i = 0; i < lh->n; i++)
    if (lh->conns[i].fd >= 0 && lh->conns[i].replica == r) return &lh->conns[i];
  return NULL;
}

static bool healthy(const Lighthouse *lh, const Conn *c, double now) {
  return c->fd >= 0 && c->replica >= 0 && now - c->last_beat < lh->cf.heartbeat_timeout;
}

static bool in_last(const Lighthouse *lh, int r) {
  for (int i = 0; i < lh->n_last; i++)
    if (lh->last[i] == r) return true;
  return false;
}

// Whether @p c may be in the next quorum: anyone before the first; then the members of the last one,
// and newcomers (a replica never in a quorum: a replacement) unless --shrink_only. A member left out of
// a quorum (frozen while the others went on) may not come back: its state is of an old quorum.
static bool eligible(const Lighthouse *lh, const Conn *c) {
  if (lh->last_id == 0) return true;
  if (c->was_member) return in_last(lh, c->replica);
  return !lh->cf.shrink_only;
}

// A newcomer is in the quorum: it heals from a member, whatever the steps say.
static bool newcomer(const Lighthouse *lh, const Conn *c) { return lh->last_id > 0 && !c->was_member; }

// Closes @p c (swept out later); a member's leaving is told with @p why.
static void drop(Lighthouse *lh, Conn *c, const char *why) {
  if (c->fd < 0) return;
  close(c->fd);
  c->fd = -1;
  if (c->replica < 0) return;
  snprintf(lh->gone[c->replica], sizeof lh->gone[c->replica], "%.127s", why);
  say("replica %d left (%s)", c->replica, why);
  log_replica(lh, "leave", c->replica, why);
}

// Sends one line to @p c; a member that cannot take it (gone, or not reading) is dropped.
static void send_line(Lighthouse *lh, Conn *c, const char *line) {
  size_t n = strlen(line);
  ssize_t k = c->fd >= 0 ? send(c->fd, line, n, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
  if (k != (ssize_t)n) drop(lh, c, "connection broken");
}

static void refuse(Lighthouse *lh, Conn *c, const char *reason) {
  char line[REASON_BYTES + 16];
  snprintf(line, sizeof line, "refused %s\n", reason);
  c->pending = false;
  if (c->replica >= 0) say("refused replica %d: %s", c->replica, reason);
  log_replica(lh, "refused", c->replica, reason);
  send_line(lh, c, line);
}

// ---- membership: hello, beats, requests --------------------------------------------------------------

// Refuses a hello that claimed replica @p r (-1: unreadable), and closes its connection.
static void refuse_hello(Lighthouse *lh, Conn *c, int r, const char *reason) {
  char line[REASON_BYTES + 16];
  snprintf(line, sizeof line, "refused %s\n", reason);
  say("refused a hello as replica %d: %s", r, reason);
  log_replica(lh, "refused", r, reason);
  send_line(lh, c, line);
  drop(lh, c, "");
}

// `hello R INCARNATION`: @p c becomes member R, unless another live connection is.
static void hello(Lighthouse *lh, Conn *c, const char *line, double now) {
  int r, inc, used = 0;
  char reason[256];
  if (sscanf(line, "hello %d %d%n", &r, &inc, &used) != 2 || line[used] || r < 0 || inc < 0) {
    refuse_hello(lh, c, -1, "expected 'hello REPLICA INCARNATION'");
    return;
  }
  if (r >= lh->cf.replicas) {
    snprintf(reason, sizeof reason, "replica %d is out of range: --replicas %d gives ids 0 .. %d", r,
             lh->cf.replicas, lh->cf.replicas - 1);
    refuse_hello(lh, c, r, reason);
    return;
  }
  Conn *old = member(lh, r);
  if (old && healthy(lh, old, now)) {
    snprintf(reason, sizeof reason, "replica %d is already a member (incarnation %d)", r, old->incarnation);
    refuse_hello(lh, c, r, reason);
    return;
  }
  if (old) {  // frozen: the newcomer takes its place (its connection is dropped, not waited for)
    snprintf(reason, sizeof reason, "replaced by incarnation %d after %.1f s of silence", inc,
             now - old->last_beat);
    drop(lh, old, reason);
  }
  c->replica = r;
  c->incarnation = inc;
  c->last_beat = now;
  char ok[32];
  snprintf(ok, sizeof ok, "ok %d\n", lh->cf.port + 1);
  say("replica %d joined (incarnation %d)", r, inc);
  if (lh->log) {
    log_begin(lh, "join");
    fprintf(lh->log, ",\"replica\":%d,\"incarnation\":%d", r, inc);
    log_end(lh);
  }
  send_line(lh, c, ok);
}

// `quorum STEP DIGEST`: the member's request, pending until the next quorum or a refusal.
static void request(Lighthouse *lh, Conn *c, const char *line, double now) {
  long long step;
  char digest[17];
  int used = 0;
  if (sscanf(line, "quorum %lld %16[0-9a-fA-F]%n", &step, digest, &used) != 2 || line[used] ||
      strlen(digest) != 16 || step < 0) {
    refuse(lh, c, "expected 'quorum STEP DIGEST' (DIGEST: 16 hex digits)");
    return;
  }
  if (!c->pending) c->asked = now;
  c->pending = true;
  c->step = step;
  memcpy(c->digest, digest, sizeof digest);
}

// One line from @p c. Any line is a sign of life.
static void serve_line(Lighthouse *lh, Conn *c, const char *line, double now) {
  if (c->replica < 0) {
    hello(lh, c, line, now);
    return;
  }
  c->last_beat = now;
  if (c->silent) {
    c->silent = false;
    say("replica %d is beating again", c->replica);
    log_replica(lh, "beating", c->replica, NULL);
  }
  if (strcmp(line, "beat") == 0) return;
  if (strncmp(line, "quorum ", 7) == 0) {
    request(lh, c, line, now);
    return;
  }
  char why[LINE_BYTES + 32];
  snprintf(why, sizeof why, "it sent '%.100s'", line);
  drop(lh, c, why);
}

// Reads what @p c sent and serves its whole lines.
static void serve_conn(Lighthouse *lh, Conn *c, double now) {
  ssize_t k = recv(c->fd, c->in + c->len, sizeof c->in - c->len, MSG_DONTWAIT);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (k <= 0) {
    drop(lh, c, "connection closed");
    return;
  }
  c->len += (size_t)k;
  char *nl;
  while (c->fd >= 0 && (nl = memchr(c->in, '\n', c->len))) {
    *nl = 0;
    serve_line(lh, c, c->in, now);
    c->len -= (size_t)(nl + 1 - c->in);
    memmove(c->in, nl + 1, c->len);
  }
  if (c->fd >= 0 && c->len == sizeof c->in) drop(lh, c, "a line too long");
}

static void accept_conn(Lighthouse *lh, double now) {
  int fd = accept(lh->listen_fd, NULL, NULL);
  if (fd < 0) return;      // a connection that failed before it was accepted, or out of descriptors
  if (lh->n == lh->cap) {  // bounded: a port scan cannot grow the lighthouse
    close(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  lh->conns[lh->n++] = (Conn){.fd = fd, .replica = -1, .opened = now, .last_beat = now};
}

// Reports members newly silent, and closes connections that said no hello within the heartbeat timeout.
static void check_silence(Lighthouse *lh, double now) {
  for (int i = 0; i < lh->n; i++) {
    Conn *c = &lh->conns[i];
    if (c->fd < 0) continue;
    if (c->replica < 0 && now - c->opened >= lh->cf.heartbeat_timeout) drop(lh, c, "no hello");
    if (c->replica < 0 || c->silent || healthy(lh, c, now)) continue;
    c->silent = true;
    say("replica %d silent for %.1f s (frozen?)", c->replica, now - c->last_beat);
    if (lh->log) {
      log_begin(lh, "silent");
      fprintf(lh->log, ",\"replica\":%d,\"seconds\":%.3f", c->replica, now - c->last_beat);
      log_end(lh);
    }
  }
}

// Removes the closed connections from the array.
static void sweep(Lighthouse *lh) {
  int kept = 0;
  for (int i = 0; i < lh->n; i++)
    if (lh->conns[i].fd >= 0) lh->conns[kept++] = lh->conns[i];
  lh->n = kept;
}

// ---- quorums -----------------------------------------------------------------------------------------

typedef struct Pick {  // the candidates of a quorum: healthy members that asked, by replica id
  Conn *c[MAX_REPLICAS];
  int n;
  double first_asked;  // the earliest request among them
} Pick;

static int by_replica(const void *a, const void *b) {
  const Conn *x = *(Conn *const *)a, *y = *(Conn *const *)b;
  return (x->replica > y->replica) - (x->replica < y->replica);
}

// The candidates into @p p, and how many eligible members are alive (healthy) into @p alive. A newcomer
// counts once it asks: one still starting up (loading its data) does not hold up the others' quorum;
// it joins the next one.
static void candidates(Lighthouse *lh, double now, Pick *p, int *alive) {
  p->n = 0;
  *alive = 0;
  for (int i = 0; i < lh->n; i++) {
    Conn *c = &lh->conns[i];
    if (!healthy(lh, c, now) || !eligible(lh, c) || (newcomer(lh, c) && !c->pending)) continue;
    ++*alive;
    if (!c->pending) continue;
    if (p->n == 0 || c->asked < p->first_asked) p->first_asked = c->asked;
    p->c[p->n++] = c;
  }
  qsort(p->c, (size_t)p->n, sizeof p->c[0], by_replica);
}

// "[0, 1, 2]": the replica ids of @p p.
static void ids_text(const Pick *p, char *out, size_t size) {
  size_t used = (size_t)snprintf(out, size, "[");
  for (int i = 0; i < p->n && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%d", i ? ", " : "", p->c[i]->replica);
  if (used < size) snprintf(out + used, size - used, "]");
}

static void refuse_all(Lighthouse *lh, const Pick *p, const char *reason) {
  for (int i = 0; i < p->n; i++) refuse(lh, p->c[i], reason);
}

// Refuses the requests of replicas that may not join the next quorum (eligible()): a late member of
// an old quorum, frozen while the others moved on, gets a reason instead of a wait without end.
static void refuse_outsiders(Lighthouse *lh) {
  char reason[REASON_BYTES];
  for (int i = 0; i < lh->n; i++) {
    Conn *c = &lh->conns[i];
    if (c->fd < 0 || !c->pending || eligible(lh, c)) continue;
    if (lh->cf.shrink_only && !c->was_member)
      snprintf(reason, sizeof reason,
               "replica %d is not a member of quorum %d (live recovery here only shrinks: --shrink_only; it "
               "missed the quorum formed at step %lld)",
               c->replica, lh->last_id, lh->last_step);
    else
      snprintf(
          reason, sizeof reason,
          "replica %d is not a member of quorum %d (it was left out of it, formed at step %lld: its state "
          "is an old quorum's; a new incarnation may join, as scripts/launch.sh --ft --replace starts one)",
          c->replica, lh->last_id, lh->last_step);
    refuse(lh, c, reason);
  }
}

// Tells the members of the last quorum, once per newcomer, that one waits to join (`join R`): they ask
// for the next quorum together at their next step boundary (lighthouse.h).
static void announce_newcomers(Lighthouse *lh, double now) {
  for (int i = 0; i < lh->n; i++) {
    Conn *c = &lh->conns[i];
    if (c->fd < 0 || !c->pending || c->announced || !newcomer(lh, c) || !eligible(lh, c)) continue;
    c->announced = true;
    char line[32];
    snprintf(line, sizeof line, "join %d\n", c->replica);
    say("replica %d (incarnation %d) waits to join quorum %d's members", c->replica, c->incarnation,
        lh->last_id);
    for (int k = 0; k < lh->n_last; k++) {
      Conn *m = member(lh, lh->last[k]);
      if (m && m != c && m->was_member && healthy(lh, m, now)) send_line(lh, m, line);
    }
  }
}

// Whether the members at @p max_step report one digest (they must hold the same parameters: the
// others heal from one of them); else @p why names each with its digest. Newcomers heal whatever they
// report.
static bool digests_agree(const Lighthouse *lh, const Pick *p, long long max_step, char *why, size_t size) {
  const char *first = NULL;
  bool agree = true;
  for (int i = 0; i < p->n; i++) {
    if (p->c[i]->step != max_step || newcomer(lh, p->c[i])) continue;
    if (!first) first = p->c[i]->digest;
    agree = agree && strcmp(first, p->c[i]->digest) == 0;
  }
  if (agree) return true;
  size_t used = (size_t)snprintf(why, size, "replicas disagree at step %lld:", max_step);
  const char *sep = " ";
  for (int i = 0; i < p->n && used < size; i++) {
    if (p->c[i]->step != max_step || newcomer(lh, p->c[i])) continue;
    used += (size_t)snprintf(why + used, size - used, "%sreplica %d digest %s", sep, p->c[i]->replica,
                             p->c[i]->digest);
    sep = ", ";
  }
  return false;
}

// Why replica @p r of the previous quorum (or of the launch, before the first) is not in the new one.
static const char *why_out(Lighthouse *lh, int r, double now, char *buf, size_t size) {
  Conn *c = member(lh, r);
  if (!c) return lh->gone[r][0] ? lh->gone[r] : "never joined";
  if (!healthy(lh, c, now))
    snprintf(buf, size, "silent for %.1f s", now - c->last_beat);
  else
    snprintf(buf, size, "asked for no quorum");
  return buf;
}

// Says who is in quorum @p id and who of the previous one (the launch's replicas, before the first)
// is not, and why: one line on stderr, one event in the log.
static void announce(Lighthouse *lh, int id, const Pick *p, long long max_step, double now) {
  int before = lh->last_id ? lh->n_last : lh->cf.replicas;
  char ids[8 * MAX_REPLICAS], out[REASON_BYTES] = "", buf[64];
  ids_text(p, ids, sizeof ids);
  size_t used = 0;
  if (lh->log) {
    log_begin(lh, "quorum");
    fprintf(lh->log, ",\"id\":%d,\"replicas\":[", id);
    for (int i = 0; i < p->n; i++) fprintf(lh->log, "%s%d", i ? "," : "", p->c[i]->replica);
    fprintf(lh->log, "],\"max_step\":%lld,\"world\":%d,\"dropped\":{", max_step, p->n);
  }
  int dropped = 0;
  for (int k = 0; k < before; k++) {
    int r = lh->last_id ? lh->last[k] : k;
    bool kept = false;
    for (int i = 0; i < p->n && !kept; i++) kept = p->c[i]->replica == r;
    if (kept) continue;
    const char *why = why_out(lh, r, now, buf, sizeof buf);
    if (used < sizeof out)
      used +=
          (size_t)snprintf(out + used, sizeof out - used, "%sreplica %d: %s", dropped ? "; " : " (", r, why);
    if (lh->log) fprintf(lh->log, "%s\"%d\":", dropped ? "," : "", r), json_string(lh->log, why);
    dropped++;
  }
  if (dropped && used < sizeof out) snprintf(out + used, sizeof out - used, ")");
  if (lh->log) fputs("}", lh->log), log_end(lh);
  say("quorum %d = replicas %s%s, max_step %lld, world %d -> %d", id, ids, out, max_step, before, p->n);
}

// Issues a quorum of @p p's members (each told its rank, in replica-id order), unless the members at
// the newest step disagree on their parameters (then every one is refused, named in the reason).
static void issue(Lighthouse *lh, const Pick *p, double now) {
  long long max_step = 0;
  for (int i = 0; i < p->n; i++)
    if (p->c[i]->step > max_step) max_step = p->c[i]->step;
  char why[REASON_BYTES];
  if (!digests_agree(lh, p, max_step, why, sizeof why)) {
    refuse_all(lh, p, why);
    return;
  }
  int id = lh->last_id + 1, source = -1;
  bool heal = false;
  char ids[8 * MAX_REPLICAS], line[8 * MAX_REPLICAS + 128];
  size_t used = 0;
  for (int i = 0; i < p->n; i++) {
    if (source < 0 && p->c[i]->step == max_step && !newcomer(lh, p->c[i])) source = i;
    heal = heal || p->c[i]->step < max_step || newcomer(lh, p->c[i]);
    used += (size_t)snprintf(ids + used, sizeof ids - used, "%s%d", i ? "," : "", p->c[i]->replica);
  }
  if (source < 0) {  // only newcomers: nobody holds the training's state any more
    refuse_all(lh, p,
               "no member of the last quorum is left to heal from: the training's state is gone (restart "
               "from a checkpoint: --resume)");
    return;
  }
  announce(lh, id, p, max_step, now);
  for (int i = 0; i < p->n; i++) {
    snprintf(line, sizeof line, "quorum %d %d %d %lld %d %d %s\n", id, p->n, i, max_step, source,
             heal ? 1 : 0, ids);
    p->c[i]->pending = false;
    p->c[i]->was_member = true;
    p->c[i]->announced = false;
    send_line(lh, p->c[i], line);
  }
  for (int i = 0; i < p->n; i++) lh->last[i] = p->c[i]->replica;
  lh->n_last = p->n;
  lh->last_id = id;
  lh->last_step = max_step;
  // The previous quorum's group is over: its rendezvous keys go (older ones went at earlier quorums)
  if (id > 1) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "q%d/", id - 1);
    store_server_drop_prefix(lh->store, prefix);
  }
}

// The first quorum waits for every replica of the launch, or for --quorum_timeout after the first
// request; then it forms with those that asked, when they are enough.
static void first_quorum(Lighthouse *lh, const Pick *p, double now) {
  if (p->n == lh->cf.replicas) {
    issue(lh, p, now);
    return;
  }
  if (now - p->first_asked < lh->cf.quorum_timeout) return;
  if (p->n >= lh->cf.min_replicas) {
    issue(lh, p, now);
    return;
  }
  char ids[8 * MAX_REPLICAS], reason[REASON_BYTES];
  ids_text(p, ids, sizeof ids);
  snprintf(
      reason, sizeof reason,
      "quorum impossible: %d of %d replica(s) asked within %g s (--quorum_timeout) %s, --min_replicas %d",
      p->n, lh->cf.replicas, lh->cf.quorum_timeout, ids, lh->cf.min_replicas);
  refuse_all(lh, p, reason);
}

// Whether every member of the last quorum is alive and has asked: the next quorum forms at once.
static bool all_last_asked(Lighthouse *lh, double now) {
  for (int i = 0; i < lh->n_last; i++) {
    Conn *c = member(lh, lh->last[i]);
    if (!c || !healthy(lh, c, now) || !c->pending) return false;
  }
  return true;
}

// Refuses the candidates that have waited --quorum_timeout.
static void expire(Lighthouse *lh, const Pick *p, int alive, double now) {
  char ids[8 * MAX_REPLICAS], reason[REASON_BYTES];
  ids_text(p, ids, sizeof ids);
  snprintf(reason, sizeof reason,
           "no quorum within %g s (--quorum_timeout): %d of %d live member(s) asked %s",
           lh->cf.quorum_timeout, p->n, alive, ids);
  for (int i = 0; i < p->n; i++)
    if (now - p->c[i]->asked >= lh->cf.quorum_timeout) refuse(lh, p->c[i], reason);
}

// torchft's quorum_compute, adapted: a quorum forms at once when every member of the last one asks;
// otherwise once enough have asked (--min_replicas) and they are a majority of the live members, and
// either every live member asked or --join_timeout has passed since the first request (a member still
// in its step may ask soon). When every live member asked and they are too few, no quorum can form.
static void decide(Lighthouse *lh, double now) {
  refuse_outsiders(lh);
  announce_newcomers(lh, now);
  static Pick p;  // large; only this thread decides
  int alive;
  candidates(lh, now, &p, &alive);
  if (!p.n) return;
  if (lh->last_id == 0) {
    first_quorum(lh, &p, now);
    return;
  }
  bool all_asked = p.n == alive, enough = p.n >= lh->cf.min_replicas && 2 * p.n > alive;
  if (all_last_asked(lh, now) || (enough && (all_asked || now - p.first_asked >= lh->cf.join_timeout))) {
    issue(lh, &p, now);
    return;
  }
  if (all_asked && p.n < lh->cf.min_replicas) {
    char ids[8 * MAX_REPLICAS], reason[REASON_BYTES];
    ids_text(&p, ids, sizeof ids);
    snprintf(reason, sizeof reason, "quorum impossible: %d live replica(s) %s, --min_replicas %d", p.n, ids,
             lh->cf.min_replicas);
    refuse_all(lh, &p, reason);
    return;
  }
  expire(lh, &p, alive, now);
}

// ---- main ---------------------------------------------------------------------------------------------

static void on_signals(void) {
  struct sigaction sa = {.sa_handler = on_signal};  // no SA_RESTART: poll() returns at once
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static Lighthouse *lighthouse_start(int argc, char **argv) {
  Lighthouse *lh = mallocCheck(sizeof *lh);
  memset(lh, 0, sizeof *lh);
  lh->cf = parse_args(argc, argv);
  lh->start = now_s();
  if (lh->cf.log && !(lh->log = fopen(lh->cf.log, "w")))
    die(1, "lighthouse: cannot write --log %s: %s", lh->cf.log, strerror(errno));
  lh->listen_fd = listen_members(&lh->cf);
  lh->store = store_server_start(lh->cf.host, lh->cf.port + 1, lh->cf.replicas);
  lh->cap = 4 * lh->cf.replicas + 64;  // members, their replacements, and a few strangers
  lh->conns = mallocCheck((size_t)lh->cap * sizeof *lh->conns);
  const Config *cf = &lh->cf;
  say("listening on %s:%d (store on %d), %d replicas, min %d", cf->host, cf->port, cf->port + 1, cf->replicas,
      cf->min_replicas);
  if (lh->log) {
    log_begin(lh, "listening");
    fprintf(lh->log, ",\"port\":%d,\"store_port\":%d,\"replicas\":%d,\"min_replicas\":%d", cf->port,
            cf->port + 1, cf->replicas, cf->min_replicas);
    log_end(lh);
  }
  return lh;
}

// One turn of the loop: waits up to TICK_MS for lines and connections, serves them, then checks the
// timeouts and whether a quorum forms.
static void turn(Lighthouse *lh, struct pollfd *pfd) {
  pfd[0] = (struct pollfd){.fd = lh->listen_fd, .events = POLLIN};
  for (int i = 0; i < lh->n; i++) pfd[i + 1] = (struct pollfd){.fd = lh->conns[i].fd, .events = POLLIN};
  int n = lh->n;
  if (poll(pfd, (nfds_t)n + 1, TICK_MS) < 0 && errno != EINTR)
    die(1, "lighthouse: poll failed: %s", strerror(errno));
  double now = now_s();
  for (int i = 0; i < n; i++)
    if (pfd[i + 1].revents && lh->conns[i].fd >= 0) serve_conn(lh, &lh->conns[i], now);
  if (pfd[0].revents & POLLIN) accept_conn(lh, now);
  check_silence(lh, now);
  decide(lh, now);
  sweep(lh);
}

static int members(const Lighthouse *lh) {
  int n = 0;
  for (int i = 0; i < lh->n; i++) n += lh->conns[i].replica >= 0;
  return n;
}

int main(int argc, char **argv) {
  on_signals();
  Lighthouse *lh = lighthouse_start(argc, argv);
  struct pollfd *pfd = mallocCheck(((size_t)lh->cap + 1) * sizeof *pfd);
  double alone_since = 0;  // when the last replica left (0: one is connected)
  while (!stop_signal) {
    turn(lh, pfd);
    if (lh->last_id == 0 || members(lh) > 0) {
      alone_since = 0;
    } else if (!alone_since) {
      alone_since = now_s();
    } else if (now_s() - alone_since >= LINGER_S) {
      say("every replica has left after quorum %d: exiting", lh->last_id);
      break;
    }
  }
  if (stop_signal) say("stopping (signal %d)", (int)stop_signal);
  for (int i = 0; i < lh->n; i++) close(lh->conns[i].fd);
  store_server_stop(lh->store);
  close(lh->listen_fd);
  if (lh->log) fclose(lh->log);
  free(pfd);
  free(lh->conns);
  free(lh);
  return 0;
}
