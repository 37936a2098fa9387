// lighthouse.c: a trainer's connection to the lighthouse (lighthouse.h): text lines over TCP, a
// heartbeat thread, and the quorum request.
#define _POSIX_C_SOURCE 200809L
#include "lighthouse.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tcp.h"

#define BACKOFF_FIRST_S 0.01  // first pause between connect attempts (as store.c's)
#define BACKOFF_LAST_S 0.5    // the pause doubles up to this
#define LINE_MAX_BYTES 16384  // the longest answer: a quorum of LIGHTHOUSE_MAX_REPLICAS ids and more
#define SEND_TIMEOUT_S 5      // a send that blocks this long (the lighthouse frozen) fails instead

struct Lighthouse {
  int fd;
  int replica;
  char host[256];  // the lighthouse's host, without brackets
  char port[16];
  int store_port;  // from hello's `ok`
  double heartbeat_s;
  pthread_t beater;
  pthread_mutex_t lock;  // serialises sends, and guards stopping
  pthread_cond_t wake;   // lighthouse_leave() wakes the heartbeat thread at once
  bool stopping;
  char in[LINE_MAX_BYTES];  // received bytes not yet returned as lines (only the main thread reads)
  size_t len;
  bool joiner;  // a `join` line came since the last quorum request
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&t, NULL);
}

// Splits "host:port" ("[v6]:port" too) into @p lh's host and port; false when it is not of that form.
static bool parse_address(Lighthouse *lh, const char *address) {
  const char *colon = strrchr(address, ':');
  if (!colon || colon == address || !colon[1] || strlen(colon + 1) >= sizeof lh->port) return false;
  const char *h = address;
  size_t n = (size_t)(colon - address);
  if (h[0] == '[') {
    if (n < 3 || h[n - 1] != ']') return false;
    h++, n -= 2;
  }
  if (n >= sizeof lh->host) return false;
  snprintf(lh->host, sizeof lh->host, "%.*s", (int)n, h);
  snprintf(lh->port, sizeof lh->port, "%s", colon + 1);
  char *end;
  long p = strtol(lh->port, &end, 10);
  return *end == 0 && p > 0 && p < 65536;
}

// Connects, retrying with back-off until @p timeout_s (the lighthouse may start after the trainers).
static void connect_lighthouse(Lighthouse *lh, const char *address, double timeout_s) {
  double until = now_s() + timeout_s, pause = BACKOFF_FIRST_S;
  int gai = 0;
  while ((lh->fd = tcp_connect(lh->host, lh->port, &gai)) < 0) {
    if (gai == EAI_NONAME || gai == EAI_FAIL)
      die(1, "the lighthouse's host in '%s' (DDP_LIGHTHOUSE) does not resolve: %s", address,
          gai_strerror(gai));
    if (now_s() + pause > until)
      die(1,
          "cannot reach the lighthouse at %s within %g s: %s; is build/bin/lighthouse running there "
          "(--host, --port)?",
          address, timeout_s, gai ? gai_strerror(gai) : strerror(errno));
    sleep_s(pause);
    pause = pause * 2 < BACKOFF_LAST_S ? pause * 2 : BACKOFF_LAST_S;
  }
  int one = 1;
  setsockopt(lh->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval tv = {SEND_TIMEOUT_S, 0};
  setsockopt(lh->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Sends one line (the caller's text ends in '\n'), serialised with the heartbeat thread; false when
// the connection is gone. MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE.
static bool send_line(Lighthouse *lh, const char *line) {
  size_t n = strlen(line);
  bool ok = true;
  pthread_mutex_lock(&lh->lock);
  for (const char *p = line; ok && n > 0;) {
    ssize_t k = send(lh->fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    ok = k > 0;
    if (ok) p += k, n -= (size_t)k;
  }
  pthread_mutex_unlock(&lh->lock);
  return ok;
}

// The next line (without its '\n') into @p line, waiting until @p until (now_s()'s clock; a time past
// takes only what has arrived): 1; 0 when none came in time; -1 when the connection closed or broke,
// or the line is too long.
static int read_line(Lighthouse *lh, char *line, size_t size, double until) {
  for (;;) {
    char *nl = memchr(lh->in, '\n', lh->len);
    if (nl) {
      size_t n = (size_t)(nl - lh->in);
      if (n >= size) return -1;
      memcpy(line, lh->in, n);
      line[n] = 0;
      lh->len -= n + 1;
      memmove(lh->in, nl + 1, lh->len);
      return 1;
    }
    if (lh->len == sizeof lh->in) return -1;
    double left = until - now_s();
    struct pollfd p = {.fd = lh->fd, .events = POLLIN};
    int ready = poll(&p, 1, left > 0 ? (int)(left * 1000) + 1 : 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return -1;
    if (ready == 0 && left <= 0) return 0;
    if (ready == 0) continue;
    ssize_t k = recv(lh->fd, lh->in + lh->len, sizeof lh->in - lh->len, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    lh->len += (size_t)k;
  }
}

// The heartbeat thread: one `beat` every heartbeat interval until lighthouse_leave(), which wakes it.
// A beat that cannot be sent is not an error here: the main thread sees the broken connection.
static void *beat(void *arg) {
  Lighthouse *lh = arg;
  pthread_mutex_lock(&lh->lock);
  while (!lh->stopping) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double s = (double)until.tv_nsec * 1e-9 + lh->heartbeat_s;
    until.tv_sec += (time_t)s;
    until.tv_nsec = (long)((s - (double)(time_t)s) * 1e9);
    int err = 0;
    while (!lh->stopping && err != ETIMEDOUT) err = pthread_cond_timedwait(&lh->wake, &lh->lock, &until);
    if (lh->stopping) break;
    // under the lock already: the send is serialised with send_line()'s
    (void)send(lh->fd, "beat\n", 5, MSG_NOSIGNAL);
  }
  pthread_mutex_unlock(&lh->lock);
  return NULL;
}

// Says hello and reads the answer: the store's port, or the process ends with the lighthouse's reason.
static void hello(Lighthouse *lh, const char *address, int incarnation, double timeout_s) {
  char line[1024];
  snprintf(line, sizeof line, "hello %d %d\n", lh->replica, incarnation);
  if (!send_line(lh, line)) die(1, "the lighthouse at %s closed the connection before its hello", address);
  int got = read_line(lh, line, sizeof line, now_s() + timeout_s);
  if (got == 0)
    die(1, "the lighthouse at %s did not answer replica %d's hello within %g s", address, lh->replica,
        timeout_s);
  if (got < 0)
    die(1, "the lighthouse at %s closed the connection during replica %d's hello", address, lh->replica);
  if (strncmp(line, "refused ", 8) == 0)
    die(1, "the lighthouse at %s refused replica %d: %s", address, lh->replica, line + 8);
  char *end = line;
  long port = strncmp(line, "ok ", 3) == 0 ? strtol(line + 3, &end, 10) : 0;
  if (port <= 0 || port >= 65536 || *end)
    die(1, "the lighthouse at %s answered replica %d's hello with '%.200s' (is it a lighthouse?)", address,
        lh->replica, line);
  lh->store_port = (int)port;
}

Lighthouse *lighthouse_join(const char *address, int replica, int incarnation, double heartbeat_s,
                            double timeout_s) {
  Lighthouse *lh = mallocCheck(sizeof *lh);
  *lh = (Lighthouse){.fd = -1, .replica = replica, .heartbeat_s = heartbeat_s};
  if (!parse_address(lh, address))
    die(1, "the lighthouse's address '%s' (DDP_LIGHTHOUSE) is not host:port", address);
  pthread_mutex_init(&lh->lock, NULL);
  pthread_condattr_t attr;  // the heartbeat's deadlines are on the monotonic clock
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&lh->wake, &attr);
  pthread_condattr_destroy(&attr);
  connect_lighthouse(lh, address, timeout_s);
  hello(lh, address, incarnation, timeout_s);
  if (pthread_create(&lh->beater, NULL, beat, lh) != 0)
    die(1, "cannot start the lighthouse's heartbeat thread");
  return lh;
}

// Reads "R0,R1,..." into q->replicas: exactly q->world_size ids; false otherwise.
static bool parse_replicas(const char *s, Quorum *q) {
  int n = 0;
  for (;;) {
    char *end;
    long r = strtol(s, &end, 10);
    if (end == s || r < 0 || r > 1000000000L || n == q->world_size) return false;
    q->replicas[n++] = (int)r;
    if (*end == 0) break;
    if (*end != ',') return false;
    s = end + 1;
  }
  return n == q->world_size;
}

// Parses "quorum ID WORLD RANK MAX_STEP SOURCE HEAL R0,R1,..." for replica @p replica; false when it
// is not a well-formed quorum that names this replica at its rank.
static bool parse_quorum(const char *line, int replica, Quorum *q) {
  int heal, used = 0;
  char ids[LINE_MAX_BYTES];
  if (sscanf(line, "quorum %d %d %d %lld %d %d %16383s%n", &q->id, &q->world_size, &q->rank, &q->max_step,
             &q->source, &heal, ids, &used) != 7 ||
      line[used] != 0)
    return false;
  if (q->id < 1 || q->world_size < 1 || q->world_size > LIGHTHOUSE_MAX_REPLICAS || q->rank < 0 ||
      q->rank >= q->world_size || q->source < 0 || q->source >= q->world_size || (heal != 0 && heal != 1) ||
      q->max_step < 0)
    return false;
  q->heal = heal == 1;
  return parse_replicas(ids, q) && q->replicas[q->rank] == replica;
}

int lighthouse_quorum(Lighthouse *lh, long long step, uint64_t digest, double timeout_s, Quorum *q, char *why,
                      size_t why_size) {
  char line[LINE_MAX_BYTES];
  snprintf(why, why_size, "%s", "");
  // An answer that came after an earlier request timed out (2) is stale: dropped, so that it is not
  // taken for this request's
  while (read_line(lh, line, sizeof line, 0.0) == 1) {
  }
  lh->joiner = false;  // the quorum asked for now takes in whoever waits
  snprintf(line, sizeof line, "quorum %lld %016" PRIx64 "\n", step, digest);
  if (!send_line(lh, line)) {
    snprintf(why, why_size, "the connection to the lighthouse at %s:%s broke", lh->host, lh->port);
    return 2;
  }
  double until = now_s() + timeout_s;
  int got;
  while ((got = read_line(lh, line, sizeof line, until)) == 1 && strncmp(line, "join ", 5) == 0) {
  }  // (a joiner announced meanwhile: this quorum is the one it waits for)
  if (got == 0) {
    snprintf(why, why_size, "the lighthouse at %s:%s gave no quorum within %g s", lh->host, lh->port,
             timeout_s);
    return 2;
  }
  if (got < 0) {
    snprintf(why, why_size, "the connection to the lighthouse at %s:%s broke while waiting for a quorum",
             lh->host, lh->port);
    return 2;
  }
  if (strncmp(line, "refused ", 8) == 0) {
    snprintf(why, why_size, "%s", line + 8);
    return 1;
  }
  if (!parse_quorum(line, lh->replica, q)) {
    snprintf(why, why_size, "the lighthouse at %s:%s answered '%.200s', not a quorum of replica %d", lh->host,
             lh->port, line, lh->replica);
    return 2;
  }
  snprintf(q->store_host, sizeof q->store_host, "%s", lh->host);
  q->store_port = lh->store_port;
  return 0;
}

bool lighthouse_join_waiting(Lighthouse *lh) {
  char line[LINE_MAX_BYTES];
  int got;
  while (!lh->joiner && (got = read_line(lh, line, sizeof line, 0.0)) == 1)
    lh->joiner = strncmp(line, "join ", 5) == 0;
  return lh->joiner;
}

void lighthouse_leave(Lighthouse *lh) {
  pthread_mutex_lock(&lh->lock);
  lh->stopping = true;
  pthread_cond_signal(&lh->wake);
  pthread_mutex_unlock(&lh->lock);
  pthread_join(lh->beater, NULL);
  close(lh->fd);
  pthread_cond_destroy(&lh->wake);
  pthread_mutex_destroy(&lh->lock);
  free(lh);
}
