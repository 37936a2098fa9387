// store.c: the rendezvous key-value store of store.h (server threads on rank 0 or in the lighthouse,
// blocking clients).
#define _POSIX_C_SOURCE 200809L
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tcp.h"

#define MAX_KEY 4096          // bytes: keys are short names
#define MAX_VALUE (1u << 20)  // bytes: Gloo's values are a few addresses
#define MAX_CONNECTIONS 1024  // open at once (more when the job has more ranks); more are closed at once
#define SHARE_KEYS 16         // keys one connection may set: a rank sets 2 to 4
#define SHARE_BYTES 4096      // bytes of keys and values one connection may set, plus ADDRESS_BYTES per rank
#define ADDRESS_BYTES 256     // Gloo's value holds one address (136 bytes) per peer
#define SPARE_SHARES 16       // the job's total: (world_size + SPARE_SHARES) connections' shares
#define ACCEPT_PAUSE_S 0.05   // pause before retrying an accept that failed for want of resources
#define TURN_AWAY_S 0.2       // longest a turned-away connection stays open for its client's hello
#define THREAD_STACK (256u * 1024u)         // bytes: a connection's thread needs little
#define THREAD_STACK_ROOMY (4096u * 1024u)  // when the libraries' thread-local storage leaves too little
#define BACKOFF_FIRST_S 0.01                // first pause between connect attempts
#define BACKOFF_LAST_S 0.5                  // the pause doubles up to this

// ---- time and sockets -------------------------------------------------------------------------------

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&t, NULL);
}

// Writes all @p n bytes; false when the peer is gone. MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE.
static bool send_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

// Reads exactly @p n bytes; false on end of stream, error or the socket's receive timeout.
static bool recv_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static bool send_u32(int fd, uint32_t v) {
  v = htonl(v);
  return send_all(fd, &v, sizeof v);
}

static bool recv_u32(int fd, uint32_t *v) {
  if (!recv_all(fd, v, sizeof *v)) return false;
  *v = ntohl(*v);
  return true;
}

// ---- the server (rank 0, or the lighthouse) -----------------------------------------------------------

typedef struct Entry {
  char *key;
  char *value;
  uint32_t n;
} Entry;

typedef struct StoreServer {  // store.h's StoreServer
  const char *who;            // who serves it, in messages: "rank 0", "lighthouse"
  int listen_fd;
  pthread_t acceptor;
  pthread_mutex_t lock;    // guards everything below
  pthread_cond_t changed;  // a key was set, the job was aborted, or the server stops
  pthread_cond_t drained;  // a connection ended
  Entry *entries;
  size_t count, cap;
  size_t *index;               // open addressing over entries: 1 + the entry's position, 0 for a free slot
  size_t index_size;           // a power of two, at least twice count
  size_t bytes;                // keys and values stored
  size_t max_keys, max_bytes;  // the job's total
  size_t share_keys, share_bytes;  // one connection's
  int *fds;            // the open connections, each served by its own (detached) thread; -1: a free slot
  int max_open;        // slots in fds
  int open;            // connections open now
  char *abort_reason;  // set once by store_abort(): every get answers with it from then on
  int turned_away;     // connections refused for want of a slot (told so: turn_away())
  bool stopping;
} Server;

typedef struct Conn {
  Server *server;
  int fd, slot;
  size_t keys, bytes;  // what this connection has stored
} Conn;

static uint64_t hash(const char *key) {  // FNV-1a
  uint64_t h = 1469598103934665603u;
  for (; *key; key++) h = (h ^ (unsigned char)*key) * 1099511628211u;
  return h;
}

// The entry of @p key, or NULL; under the lock.
static const Entry *find(const Server *sv, const char *key) {
  if (!sv->index_size) return NULL;
  size_t mask = sv->index_size - 1;
  for (size_t i = hash(key) & mask; sv->index[i]; i = (i + 1) & mask) {
    const Entry *e = &sv->entries[sv->index[i] - 1];
    if (strcmp(e->key, key) == 0) return e;
  }
  return NULL;
}

// Puts entry @p pos into the index (which has room); under the lock.
static void index_put(Server *sv, size_t pos) {
  size_t mask = sv->index_size - 1, i = hash(sv->entries[pos].key) & mask;
  while (sv->index[i]) i = (i + 1) & mask;
  sv->index[i] = pos + 1;
}

// Room for one more entry, in the array and in the index; under the lock.
static void grow(Server *sv) {
  if (sv->count == sv->cap) {
    sv->cap = sv->cap ? 2 * sv->cap : 64;
    Entry *grown = realloc(sv->entries, sv->cap * sizeof *grown);
    if (!grown) die(1, "%s: out of memory in the rendezvous store", sv->who);
    sv->entries = grown;
  }
  if (2 * (sv->count + 1) > sv->index_size) {
    free(sv->index);
    sv->index_size = sv->index_size ? 2 * sv->index_size : 128;
    sv->index = calloc(sv->index_size, sizeof *sv->index);
    if (!sv->index) die(1, "%s: out of memory in the rendezvous store", sv->who);
    for (size_t i = 0; i < sv->count; i++) index_put(sv, i);
  }
}

// Whether @p c may store one more key of @p n bytes (key and value): its own share and the job's
// total both have room; under the lock.
static bool fits(const Server *sv, const Conn *c, size_t n) {
  return c->keys < sv->share_keys && n <= sv->share_bytes - c->bytes && sv->count < sv->max_keys &&
         n <= sv->max_bytes - sv->bytes;
}

// Stores the pair (taking it over) for connection @p c: '+', or '!' when the key is already set
// (keys are write-once), or 'F' when it does not fit (fits()); the caller frees the pair unless '+'.
static char server_set(Server *sv, Conn *c, char *key, uint32_t kn, char *value, uint32_t n) {
  pthread_mutex_lock(&sv->lock);
  char reply = find(sv, key) ? '!' : fits(sv, c, (size_t)kn + n) ? '+' : 'F';
  if (reply == '+') {
    grow(sv);
    sv->entries[sv->count] = (Entry){key, value, n};
    index_put(sv, sv->count++);
    sv->bytes += (size_t)kn + n;
    c->keys++;
    c->bytes += (size_t)kn + n;
    pthread_cond_broadcast(&sv->changed);
  }
  pthread_mutex_unlock(&sv->lock);
  return reply;
}

// The reply @p tag u32 n, then the n bytes, as one buffer to send at once (several small sends would
// wait on delayed ACKs); NULL when out of memory.
static char *reply_value(char tag, const char *value, uint32_t n) {
  char *b = malloc((size_t)n + 5);
  if (!b) return NULL;
  uint32_t be = htonl(n);
  b[0] = tag;
  memcpy(b + 1, &be, 4);
  memcpy(b + 5, value, n);
  return b;
}

// Sends a reply_value() buffer of @p n bytes of value and frees it; false when it is NULL or the peer
// is gone.
static bool send_reply(int fd, char *b, uint32_t n) {
  bool ok = b && send_all(fd, b, (size_t)n + 5);
  free(b);
  return ok;
}

// Answers a get: waits for the key up to @p timeout_ms (CLOCK_MONOTONIC: see server_start). Once the
// job is aborted every get answers 'X' and the reason; a get still waiting when the server stops
// answers 'E' (no rank of a finished job waits on a key: that one belongs to another job).
static bool server_get(Server *sv, int fd, const char *key, uint32_t timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&sv->lock);
  const Entry *e;
  int err = 0;
  while (!(e = find(sv, key)) && !sv->stopping && !sv->abort_reason && err != ETIMEDOUT)
    err = pthread_cond_timedwait(&sv->changed, &sv->lock, &until);
  // The reply is copied under the lock (store_server_drop_prefix() frees entries) and sent unlocked.
  const char *reason = sv->abort_reason;
  bool stopped = !e && sv->stopping;
  uint32_t n = reason ? (uint32_t)strlen(reason) : e ? e->n : 0;
  char *reply = reason ? reply_value('X', reason, n) : e ? reply_value('+', e->value, n) : NULL;
  pthread_mutex_unlock(&sv->lock);
  if (!reason && !e) return send_all(fd, stopped ? "E" : "-", 1);
  return send_reply(fd, reply, n);
}

// Aborts the job (the first reason stays); every get, waiting or to come, answers with the reason.
static void server_abort(Server *sv, char *reason) {
  pthread_mutex_lock(&sv->lock);
  if (!sv->abort_reason) {
    sv->abort_reason = reason;
    reason = NULL;
    pthread_cond_broadcast(&sv->changed);
  }
  pthread_mutex_unlock(&sv->lock);
  free(reason);
}

// Reads @p n bytes into a new NUL-terminated buffer; NULL on a short read.
static char *recv_body(int fd, uint32_t n) {
  char *b = malloc((size_t)n + 1);
  if (!b) return NULL;
  if (!recv_all(fd, b, n)) {
    free(b);
    return NULL;
  }
  b[n] = 0;
  return b;
}

// Reads a length-prefixed string of at most @p max bytes into a new NUL-terminated buffer.
static char *recv_bytes(int fd, uint32_t max, uint32_t *n) {
  if (!recv_u32(fd, n) || *n > max) return NULL;
  return recv_body(fd, *n);
}

// A set: refused ('F', and the connection closed) before its value is read when it does not fit.
static bool serve_set(Conn *c, char *key, uint32_t kn) {
  Server *sv = c->server;
  uint32_t vn;
  if (!recv_u32(c->fd, &vn) || vn > MAX_VALUE) {
    free(key);
    return false;
  }
  pthread_mutex_lock(&sv->lock);
  bool room = fits(sv, c, (size_t)kn + vn);
  pthread_mutex_unlock(&sv->lock);
  char *value = room ? recv_body(c->fd, vn) : NULL;
  char reply = value ? server_set(sv, c, key, kn, value, vn) : 'F';
  if (reply != '+') {
    free(key);
    free(value);
  }
  if (room && !value) return false;  // the connection broke
  return send_all(c->fd, &reply, 1) && reply != 'F';
}

// One client's requests, until it closes the connection, sends garbage or goes beyond its share;
// then its descriptor and slot are freed (the thread is detached: its stack goes with it).
static void *serve_client(void *arg) {
  Conn *c = arg;
  for (;;) {
    char op;
    uint32_t kn, timeout_ms;
    if (!recv_all(c->fd, &op, 1)) break;
    char *key = recv_bytes(c->fd, MAX_KEY, &kn);
    if (!key) break;
    bool ok;
    if (op == 'S') {
      ok = serve_set(c, key, kn);
    } else if (op == 'G' && recv_u32(c->fd, &timeout_ms)) {
      ok = server_get(c->server, c->fd, key, timeout_ms);
      free(key);
    } else if (op == 'H') {  // a rank's hello: it is served (a turned-away one is answered 'B')
      free(key);
      ok = send_all(c->fd, "+", 1);
    } else if (op == 'A') {  // the "key" is the reason
      server_abort(c->server, key);
      ok = send_all(c->fd, "+", 1);
    } else {
      free(key);
      break;
    }
    if (!ok) break;
  }
  Server *sv = c->server;
  pthread_mutex_lock(&sv->lock);
  sv->fds[c->slot] = -1;  // before the close: server_stop() shuts down only open descriptors
  sv->open--;
  pthread_cond_broadcast(&sv->drained);
  pthread_mutex_unlock(&sv->lock);  // sv may be freed from here on
  close(c->fd);
  free(c);
  return NULL;
}

// Serves @p fd on a thread of its own when a slot is free; false when it could not (turn_away()).
static bool serve(Server *sv, int fd) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, THREAD_STACK);
  bool served = false;
  pthread_mutex_lock(&sv->lock);
  int slot = 0;
  while (slot < sv->max_open && sv->fds[slot] >= 0) slot++;
  Conn *c = sv->stopping || slot == sv->max_open ? NULL : calloc(1, sizeof *c);
  if (c) {
    *c = (Conn){.server = sv, .fd = fd, .slot = slot};
    pthread_t t;
    int rc = pthread_create(&t, &attr, serve_client, c);  // it waits for the lock to end
    if (rc == EINVAL) {  // glibc carves the libraries' static TLS out of the stack (OpenBLAS 0.3.34's
      pthread_attr_setstacksize(&attr, THREAD_STACK_ROOMY);  // is 140 KiB): a stack with room for it
      rc = pthread_create(&t, &attr, serve_client, c);
    }
    if (rc == 0) {
      sv->fds[slot] = fd;
      sv->open++;
      served = true;
    } else {
      free(c);
    }
  }
  pthread_mutex_unlock(&sv->lock);
  pthread_attr_destroy(&attr);
  return served;
}

// Connections turned away and not yet closed: each is closed once its client has read the reason
// and gone, or after TURN_AWAY_S (accept_clients() polls them beside the listening socket).
#define TURN_AWAY_MAX 32
typedef struct Closing {
  int fd[TURN_AWAY_MAX];
  double until[TURN_AWAY_MAX];
  int n;
} Closing;

static void closing_drop(Closing *c, int i) {
  close(c->fd[i]);
  c->n--;
  c->fd[i] = c->fd[c->n];
  c->until[i] = c->until[c->n];
}

// Tells a connection that could not be served why ('B' len reason, the answer to the rank's hello):
// rank 0 says so once on stderr and in a get that times out (store_get()), the rank in its own
// message, instead of both blaming a rank that died or never started. The connection is not closed
// here: closed before the client's hello is read, it would be reset, and the reason could be lost;
// it joins @p c, which the accept loop drains without waiting on any one client.
static void turn_away(Server *sv, int fd, Closing *c) {
  pthread_mutex_lock(&sv->lock);
  bool stopping = sv->stopping, first = !stopping && sv->turned_away++ == 0, full = sv->open == sv->max_open;
  int slots = sv->max_open;
  pthread_mutex_unlock(&sv->lock);
  if (stopping) {  // the job is over: nobody to tell
    close(fd);
    return;
  }
  char reason[256];
  if (full)
    snprintf(reason, sizeof reason,
             "all %d of its connection slots are held by clients that stay connected (another "
             "program on the port?)",
             slots);
  else
    snprintf(reason, sizeof reason, "%s could not start a thread for the connection", sv->who);
  if (first)
    fprintf(stderr, "warning: %s: the rendezvous store turned a connection away: %s\n", sv->who, reason);
  char b[sizeof reason + 5];
  uint32_t n = (uint32_t)strlen(reason), be = htonl(n);
  b[0] = 'B';
  memcpy(b + 1, &be, 4);
  memcpy(b + 5, reason, n);
  (void)send(fd, b, (size_t)n + 5, MSG_NOSIGNAL | MSG_DONTWAIT);  // a fresh socket's buffer has room
  shutdown(fd, SHUT_WR);
  if (c->n == TURN_AWAY_MAX) closing_drop(c, 0);  // many at once: the oldest goes first
  c->fd[c->n] = fd;
  c->until[c->n++] = now_s() + TURN_AWAY_S;
}

// Reads what the turned-away clients sent (their hellos) and closes each one that has gone, or whose
// TURN_AWAY_S are over.
static void closing_drain(Closing *c, const struct pollfd *p) {
  double t = now_s();
  for (int i = c->n - 1; i >= 0; i--) {
    char junk[256];
    ssize_t got = 1;
    if (p[i].revents) {
      while ((got = recv(c->fd[i], junk, sizeof junk, MSG_DONTWAIT)) > 0) {
      }
    }
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || t >= c->until[i])
      closing_drop(c, i);
  }
}

static void *accept_clients(void *arg) {
  Server *sv = arg;
  bool warned = false;
  Closing c = {.n = 0};
  struct pollfd p[TURN_AWAY_MAX + 1];
  for (;;) {
    // The listening socket and the turned-away connections (p[0 .. c.n - 1]), until the next deadline
    int wait_ms = -1;
    for (int i = 0; i < c.n; i++) {
      p[i] = (struct pollfd){.fd = c.fd[i], .events = POLLIN};
      int ms = (int)((c.until[i] - now_s()) * 1000) + 1;
      if (wait_ms < 0 || ms < wait_ms) wait_ms = ms < 0 ? 0 : ms;
    }
    p[c.n] = (struct pollfd){.fd = sv->listen_fd, .events = POLLIN};
    int ready = poll(p, (nfds_t)c.n + 1, wait_ms);
    if (ready < 0 && errno != EINTR)
      die(1, "%s: the rendezvous store's poll failed: %s", sv->who, strerror(errno));
    bool listener = ready > 0 && p[c.n].revents;
    if (c.n) closing_drain(&c, p);
    if (!listener) continue;
    int fd = accept(sv->listen_fd, NULL, NULL);
    if (fd < 0) {
      int e = errno;
      pthread_mutex_lock(&sv->lock);
      bool stopping = sv->stopping;
      pthread_mutex_unlock(&sv->lock);
      if (stopping) {  // the listening socket was shut down
        while (c.n) closing_drop(&c, 0);
        return NULL;
      }
      // A connection that failed before it was accepted (accept(2): pending network errors are
      // reported here); the next one may be a rank's.
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM || e == ENETDOWN || e == ENOPROTOOPT ||
          e == EHOSTDOWN || e == ENONET || e == EHOSTUNREACH || e == ENETUNREACH || e == EAGAIN ||
          e == EWOULDBLOCK)
        continue;
      // Out of descriptors (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM), or anything else: wait for
      // some to be freed and try again; the ranks' connections wait in the backlog meanwhile.
      if (!warned)
        fprintf(stderr, "warning: %s: the rendezvous store cannot accept a connection: %s (retrying)\n",
                sv->who, strerror(e));
      warned = true;
      sleep_s(ACCEPT_PAUSE_S);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!serve(sv, fd)) turn_away(sv, fd, &c);  // too many open at once, or no thread: told so
  }
}

static bool is_loopback(const struct sockaddr *a) {
  if (a->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family != AF_INET6) return false;
  const struct in6_addr *a6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

// localhost, localhost.localdomain, x.localhost, ip6-localhost, ip6-loopback: names of this machine
// and of no other.
static bool is_localhost_name(const char *host) {
  size_t n = strlen(host);
  if (strncasecmp(host, "localhost", 9) == 0 && (host[9] == 0 || host[9] == '.')) return true;
  if (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0) return true;
  return strcasecmp(host, "ip6-localhost") == 0 || strcasecmp(host, "ip6-loopback") == 0;
}

// Binds and listens on @p a; the socket, or -1 with errno set (EADDRNOTAVAIL: not this machine's).
static int bind_listen(int family, const struct sockaddr *a, socklen_t len, bool dual_stack) {
  int fd = socket(family, SOCK_STREAM, 0), one = 1, zero = 0;
  if (fd < 0) return -1;
  if (dual_stack) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a previous run's port in TIME_WAIT
  if (bind(fd, a, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// @p who serves the store ("rank 0", "the lighthouse"); @p port_is says where the port comes from.
static _Noreturn void cannot_listen(const char *who, int port, const char *port_is) {
  die(1, "%s: cannot listen on port %d for the rendezvous store: %s (the port is %s: choose a free one)", who,
      port, strerror(errno), port_is);
}

// A socket listening on @p port at the address @p host (MASTER_ADDR) resolves to, when that is an
// address of this machine: the store and Gloo have no authentication, so they listen no wider than
// the ranks need. A name of this machine that resolves to a loopback address here (Debian maps the
// host name to 127.0.1.1) but is not localhost, or an address that is not this machine's (behind
// NAT), gives every address instead: IPv6 with IPv4 mapped in, or IPv4 only where there is no IPv6.
// An empty @p host (the lighthouse's --host "") asks for every address.
static int listen_on(const char *host, int port, const char *who, const char *port_is) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *list = NULL, *numeric = NULL;
  bool named = getaddrinfo(host, service, &(struct addrinfo){.ai_flags = AI_NUMERICHOST}, &numeric) != 0;
  if (numeric) freeaddrinfo(numeric);
  int fd = -1;
  if (host[0] && getaddrinfo(host, service, &hints, &list) == 0) {
    for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
      if (named && is_loopback(a->ai_addr) && !is_localhost_name(host)) continue;
      fd = bind_listen(a->ai_family, a->ai_addr, a->ai_addrlen, false);
      if (fd < 0 && errno != EADDRNOTAVAIL && errno != EAFNOSUPPORT) cannot_listen(who, port, port_is);
    }
    freeaddrinfo(list);
  }
  if (fd >= 0) return fd;
  struct sockaddr_in6 a6 = {
      .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
  fd = bind_listen(AF_INET6, (struct sockaddr *)&a6, sizeof a6, true);
  if (fd < 0 && errno == EAFNOSUPPORT) fd = bind_listen(AF_INET, (struct sockaddr *)&a4, sizeof a4, false);
  if (fd < 0) cannot_listen(who, port, port_is);
  return fd;
}

// Connections open at once: MAX_CONNECTIONS, but no more than half the descriptors this process may
// open (the rest are Gloo's and the trainer's), and at least every rank plus a few.
static int max_open(int world_size) {
  struct rlimit r;
  long n = MAX_CONNECTIONS;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && (long)(r.rlim_cur / 2) < n)
    n = (long)(r.rlim_cur / 2);
  if (n < world_size + 8L) n = world_size + 8L;
  return (int)n;
}

// Serves on @p port at @p host (listen_on()) for @p world_size clients at once (the caps), as @p who.
static Server *server_start(const char *host, int port, int world_size, const char *who,
                            const char *port_is) {
  Server *sv = mallocCheck(sizeof *sv);
  *sv = (Server){
      .who = who, .listen_fd = listen_on(host, port, who, port_is), .max_open = max_open(world_size)};
  sv->fds = mallocCheck((size_t)sv->max_open * sizeof *sv->fds);
  for (int i = 0; i < sv->max_open; i++) sv->fds[i] = -1;
  sv->share_keys = SHARE_KEYS;
  sv->share_bytes = SHARE_BYTES + (size_t)ADDRESS_BYTES * (size_t)world_size;
  sv->max_keys = sv->share_keys * ((size_t)world_size + SPARE_SHARES);
  sv->max_bytes = sv->share_bytes * ((size_t)world_size + SPARE_SHARES);
  pthread_mutex_init(&sv->lock, NULL);
  pthread_condattr_t attr;  // server_get's and server_stop's deadlines are on the monotonic clock
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&sv->changed, &attr);
  pthread_cond_init(&sv->drained, &attr);
  pthread_condattr_destroy(&attr);
  if (pthread_create(&sv->acceptor, NULL, accept_clients, sv) != 0)
    die(1, "%s: cannot start the rendezvous store's thread", who);
  return sv;
}

// Shuts down every open connection (@p how: SHUT_RD or SHUT_RDWR); under the lock.
static void shut_all(Server *sv, int how) {
  for (int i = 0; i < sv->max_open; i++)
    if (sv->fds[i] >= 0) shutdown(sv->fds[i], how);
}

static void server_stop(Server *sv) {
  pthread_mutex_lock(&sv->lock);
  sv->stopping = true;
  pthread_cond_broadcast(&sv->changed);
  // A thread blocked in recv() returns, while a reply still being sent goes out: the last rank's
  // '+' to its done/<rank> races rank 0's get of that key, which ends the server.
  shut_all(sv, SHUT_RD);
  pthread_mutex_unlock(&sv->lock);
  shutdown(sv->listen_fd, SHUT_RDWR);  // accept() returns
  pthread_join(sv->acceptor, NULL);
  close(sv->listen_fd);
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += 2;
  pthread_mutex_lock(&sv->lock);
  int err = 0;
  while (sv->open > 0 && err != ETIMEDOUT) err = pthread_cond_timedwait(&sv->drained, &sv->lock, &until);
  shut_all(sv, SHUT_RDWR);  // a client that does not read its replies: its thread's send() returns
  while (sv->open > 0) pthread_cond_wait(&sv->drained, &sv->lock);
  pthread_mutex_unlock(&sv->lock);
  for (size_t i = 0; i < sv->count; i++) free(sv->entries[i].key), free(sv->entries[i].value);
  free(sv->entries);
  free(sv->index);
  free(sv->fds);
  free(sv->abort_reason);
  pthread_cond_destroy(&sv->changed);
  pthread_cond_destroy(&sv->drained);
  pthread_mutex_destroy(&sv->lock);
  free(sv);
}

StoreServer *store_server_start(const char *host, int port, int clients) {
  return server_start(host ? host : "", port, clients, "lighthouse", "the lighthouse's --port + 1");
}

void store_server_drop_prefix(StoreServer *sv, const char *prefix) {
  size_t n = strlen(prefix), kept = 0;
  pthread_mutex_lock(&sv->lock);
  for (size_t i = 0; i < sv->count; i++) {
    Entry *e = &sv->entries[i];
    if (strncmp(e->key, prefix, n) != 0) {
      sv->entries[kept++] = *e;
      continue;
    }
    sv->bytes -= strlen(e->key) + e->n;
    free(e->key);
    free(e->value);
  }
  sv->count = kept;
  // The index holds positions in entries, which moved: rebuilt (a get waiting for a dropped key goes
  // on waiting, as for one never set; a connection's own share is not given back: a quorum's ranks
  // meet on fresh connections)
  if (sv->index_size) memset(sv->index, 0, sv->index_size * sizeof *sv->index);
  for (size_t i = 0; i < sv->count; i++) index_put(sv, i);
  pthread_mutex_unlock(&sv->lock);
}

void store_server_stop(StoreServer *sv) { server_stop(sv); }

// ---- the client (every rank) ------------------------------------------------------------------------

struct Store {
  int fd;  // the connection to the server
  int rank, world_size;
  double timeout;  // seconds
  char host[256];  // the server's host, without brackets
  int port;
  char local[INET6_ADDRSTRLEN + 8];  // this end's address
  Server *server;                    // rank 0 only
};

// The hello on a new connection: true when the server serves it; false when it turned the connection
// away, with its reason in @p why (connection closed), or when it did not answer (why empty).
static bool hello(Store *s, char *why, size_t size) {
  char reply = 0;
  uint32_t n;
  why[0] = 0;
  struct timeval tv = {(time_t)s->timeout + 5, 0};
  setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (send_all(s->fd, "H", 1) && send_u32(s->fd, 0) && recv_all(s->fd, &reply, 1) && reply == '+')
    return true;
  if (reply == 'B' && recv_u32(s->fd, &n) && n < size && recv_all(s->fd, why, n)) why[n] = 0;
  close(s->fd);
  s->fd = -1;
  return false;
}

// Connects and says hello, retrying with back-off until the timeout (rank 0's server may not be up
// yet; all its connection slots may be held for a while).
static void client_connect(Store *s) {
  double until = now_s() + s->timeout, pause = BACKOFF_FIRST_S;
  int gai = 0;
  char why[512] = "";
  for (;;) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    s->fd = tcp_connect(s->host, port, &gai);
    if (s->fd >= 0 && hello(s, why, sizeof why)) break;
    if (gai == EAI_NONAME || gai == EAI_FAIL)
      die(1, "the rendezvous store's host '%s' (MASTER_ADDR) does not resolve: %s", s->host,
          gai_strerror(gai));
    if (now_s() + pause > until && why[0])
      die(1,
          "rank %d: the rendezvous store at %s:%d turned this rank away for %g s (--timeout): %s; "
          "rank 0 is running, but cannot serve this rank",
          s->rank, s->host, s->port, s->timeout, why);
    if (now_s() + pause > until)
      die(1,
          "cannot reach the rendezvous store at %s:%d within %g s (--timeout): %s; is rank 0 "
          "running, and are MASTER_ADDR and MASTER_PORT the same on every rank?",
          s->host, s->port, s->timeout, gai ? gai_strerror(gai) : strerror(errno));
    sleep_s(pause);
    pause = pause * 2 < BACKOFF_LAST_S ? pause * 2 : BACKOFF_LAST_S;
  }
  int one = 1;
  setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A server that stops answering (rank 0 frozen) is an error after the timeout, not a hang; a get
  // waits on the server for up to its own timeout first, hence the margin.
  double wait = s->timeout + 5.0;
  struct timeval tv = {(time_t)wait, 0};
  setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_storage me;
  socklen_t len = sizeof me;
  if (getsockname(s->fd, (struct sockaddr *)&me, &len) != 0 ||
      getnameinfo((struct sockaddr *)&me, len, s->local, sizeof s->local, NULL, 0, NI_NUMERICHOST) != 0)
    die(1, "cannot read the local address of the connection to the rendezvous store");
}

// A client of the server at host:port; with @p serve, this process starts the server first.
static Store *store_open(const char *host, int port, int rank, int world_size, double timeout_s, bool serve) {
  Store *s = mallocCheck(sizeof *s);
  size_t n = strlen(host);
  bool bracketed = n >= 2 && host[0] == '[' && host[n - 1] == ']';
  snprintf(s->host, sizeof s->host, "%.*s", (int)(bracketed ? n - 2 : n), bracketed ? host + 1 : host);
  s->port = port;
  s->rank = rank;
  s->world_size = world_size;
  s->timeout = timeout_s;
  s->server =
      serve ? server_start(s->host, port, world_size, "rank 0", "MASTER_PORT + 1, or DDP_NCCL_PORT") : NULL;
  client_connect(s);
  return s;
}

Store *store_init(const char *host, int port, int rank, int world_size, double timeout_s) {
  return store_open(host, port, rank, world_size, timeout_s, rank == 0);
}

Store *store_connect(const char *host, int port, int rank, int world_size, double timeout_s) {
  return store_open(host, port, rank, world_size, timeout_s, false);
}

// How many connections the server has turned away (turn_away()).
static int turned_away(Server *sv) {
  pthread_mutex_lock(&sv->lock);
  int n = sv->turned_away;
  pthread_mutex_unlock(&sv->lock);
  return n;
}

// Ends the job: the connection to the server broke during @p what.
static _Noreturn void lost(const Store *s, const char *what, const char *key) {
  die(1,
      "the rendezvous store at %s:%d did not answer %s('%s') (rank 0 ended, froze, or "
      "another program holds the port)",
      s->host, s->port, what, key);
}

static bool send_key(const Store *s, char op, const char *key) {
  size_t n = strlen(key);
  if (n > MAX_KEY) die(1, "rendezvous key of %zu bytes is too long", n);
  return send_all(s->fd, &op, 1) && send_u32(s->fd, (uint32_t)n) && send_all(s->fd, key, n);
}

void store_set(Store *s, const char *key, const void *value, size_t n) {
  if (n > MAX_VALUE) die(1, "rendezvous value of %zu bytes for '%s' is too large", n, key);
  char reply;
  if (!send_key(s, 'S', key) || !send_u32(s->fd, (uint32_t)n) || !send_all(s->fd, value, n) ||
      !recv_all(s->fd, &reply, 1))
    lost(s, "set", key);
  if (reply == 'F')
    die(1,
        "the rendezvous store at %s:%d refused set('%s'): this connection or the job has stored as "
        "much as %d ranks may (another program filled it? the store has no authentication: use it on a "
        "trusted network only)",
        s->host, s->port, key, s->world_size);
  if (reply != '+')
    die(1,
        "the rendezvous key '%s' is already set: two ranks share a RANK, or two jobs share "
        "MASTER_ADDR:MASTER_PORT",
        key);
}

void *store_get(Store *s, const char *key, double timeout_s, size_t *n) {
  char reply;
  uint32_t ms = timeout_s > 4e6 ? 4000000000u : (uint32_t)(timeout_s * 1000.0);
  if (!send_key(s, 'G', key) || !send_u32(s->fd, ms) || !recv_all(s->fd, &reply, 1)) lost(s, "get", key);
  if (reply == 'X') {  // the job was aborted: the reason instead of the value
    uint32_t len;
    char *reason = recv_bytes(s->fd, MAX_KEY, &len);
    if (!reason) lost(s, "get", key);
    die(1, "the job stopped during the rendezvous: %s", reason);
  }
  if (reply == 'E')
    die(1,
        "the rendezvous store at %s:%d stopped while this rank waited for '%s': its rank 0 finished "
        "its job; two jobs share MASTER_ADDR:MASTER_PORT (give each job its own MASTER_PORT)",
        s->host, s->port, key);
  if (reply != '+' && s->server && turned_away(s->server) > 0)
    die(1,
        "the rendezvous key '%s' did not appear within %g s (--timeout), and the store turned %d "
        "connection(s) away (see the warning above): a rank may have been turned away rather than "
        "not started",
        key, timeout_s, turned_away(s->server));
  if (reply != '+')
    die(1,
        "the rendezvous key '%s' did not appear within %g s (--timeout): a rank never "
        "started, or died during start-up",
        key, timeout_s);
  uint32_t len;
  char *value = recv_bytes(s->fd, MAX_VALUE, &len);
  if (!value) lost(s, "get", key);
  *n = len;
  return value;
}

void store_abort(Store *s, const char *reason) {
  size_t n = strlen(reason);
  char reply;
  // Best effort: the caller ends the job next whether or not rank 0 got the reason.
  if (send_all(s->fd, "A", 1) && send_u32(s->fd, (uint32_t)(n > MAX_KEY ? MAX_KEY : n)))
    if (send_all(s->fd, reason, n > MAX_KEY ? MAX_KEY : n)) recv_all(s->fd, &reply, 1);
}

void store_agree(Store *s, const char *name, const char *value, const char *hint) {
  char key[MAX_KEY];
  snprintf(key, sizeof key, "agree/%s", name);
  if (s->rank == 0) {
    store_set(s, key, value, strlen(value));
    return;
  }
  size_t n;
  char *theirs = store_get(s, key, s->timeout, &n);
  if (strlen(theirs) != n || strcmp(theirs, value) != 0) {
    char reason[1024];
    snprintf(reason, sizeof reason, "rank %d was started with %s=%.200s, rank 0 with %s=%.200s: %s", s->rank,
             name, value, name, theirs, hint);
    store_abort(s, reason);  // rank 0, and every rank waiting on the store, stop with this line
    die(1, "this rank was started with %s=%.200s, rank 0 with %s=%.200s: %s", name, value, name, theirs,
        hint);
  }
  free(theirs);
}

const char *store_local_address(const Store *s) { return s->local; }

void store_close(Store *s) {
  close(s->fd);
  free(s);
}

void store_free(Store *s, const char *prefix) {
  char key[MAX_KEY];
  if (s->server) {  // the last rank to finish its gets has checked in: the server may stop
    for (int r = 1; r < s->world_size; r++) {
      size_t n;
      snprintf(key, sizeof key, "%sdone/%d", prefix, r);
      free(store_get(s, key, s->timeout, &n));
    }
  } else {
    snprintf(key, sizeof key, "%sdone/%d", prefix, s->rank);
    store_set(s, key, "", 0);
  }
  close(s->fd);
  if (s->server) server_stop(s->server);
  free(s);
}
