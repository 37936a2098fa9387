// store.c: the rendezvous key-value store of store.h (server thread on rank 0, blocking clients).
#define _POSIX_C_SOURCE 200809L
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MAX_KEY 4096          // bytes: keys are short names
#define MAX_VALUE (1u << 20)  // bytes: Gloo's values are a few addresses
#define MAX_CONNECTIONS 1024  // the server refuses more clients than this
#define BACKOFF_FIRST_S 0.01  // first pause between connect attempts
#define BACKOFF_LAST_S 0.5    // the pause doubles up to this

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

// ---- the server (rank 0) ----------------------------------------------------------------------------

typedef struct Entry {
  char *key;
  char *value;
  uint32_t n;
} Entry;

typedef struct Server {
  int listen_fd;
  pthread_t acceptor;
  pthread_mutex_t lock;    // guards everything below
  pthread_cond_t changed;  // a key was set, or the server stops
  Entry *entries;
  size_t count, cap;
  int fds[MAX_CONNECTIONS];  // the clients' connections, each served by threads[i]
  pthread_t threads[MAX_CONNECTIONS];
  int clients;
  bool stopping;
} Server;

typedef struct Conn {
  Server *server;
  int fd;
} Conn;

static const Entry *find(const Server *sv, const char *key) {
  for (size_t i = 0; i < sv->count; i++)
    if (strcmp(sv->entries[i].key, key) == 0) return &sv->entries[i];
  return NULL;
}

// Stores a copy of the pair; false when the key is already set (keys are write-once).
static bool server_set(Server *sv, char *key, char *value, uint32_t n) {
  pthread_mutex_lock(&sv->lock);
  bool fresh = find(sv, key) == NULL;
  if (fresh) {
    if (sv->count == sv->cap) {
      sv->cap = sv->cap ? 2 * sv->cap : 64;
      Entry *grown = realloc(sv->entries, sv->cap * sizeof *grown);
      if (!grown) die(1, "rank 0: out of memory in the rendezvous store");
      sv->entries = grown;
    }
    sv->entries[sv->count++] = (Entry){key, value, n};
    pthread_cond_broadcast(&sv->changed);
  }
  pthread_mutex_unlock(&sv->lock);
  return fresh;
}

// Answers a get: waits for the key up to @p timeout_ms (CLOCK_MONOTONIC: see server_start).
static bool server_get(Server *sv, int fd, const char *key, uint32_t timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&sv->lock);
  const Entry *e;
  int err = 0;
  while (!(e = find(sv, key)) && !sv->stopping && err != ETIMEDOUT)
    err = pthread_cond_timedwait(&sv->changed, &sv->lock, &until);
  // Entries are never removed or changed until the server is freed: copy out, then answer unlocked.
  uint32_t n = e ? e->n : 0;
  const char *value = e ? e->value : NULL;
  pthread_mutex_unlock(&sv->lock);
  if (!value) return send_all(fd, "-", 1);
  return send_all(fd, "+", 1) && send_u32(fd, n) && send_all(fd, value, n);
}

// Reads a length-prefixed string of at most @p max bytes into a new NUL-terminated buffer.
static char *recv_bytes(int fd, uint32_t max, uint32_t *n) {
  if (!recv_u32(fd, n) || *n > max) return NULL;
  char *b = malloc(*n + 1u);
  if (!b) return NULL;
  if (!recv_all(fd, b, *n)) {
    free(b);
    return NULL;
  }
  b[*n] = 0;
  return b;
}

// One client's requests, until it closes the connection (or sends garbage).
static void *serve_client(void *arg) {
  Conn c = *(Conn *)arg;
  free(arg);
  for (;;) {
    char op;
    uint32_t kn, vn, timeout_ms;
    if (!recv_all(c.fd, &op, 1)) break;
    char *key = recv_bytes(c.fd, MAX_KEY, &kn);
    if (!key) break;
    bool ok;
    if (op == 'S') {
      char *value = recv_bytes(c.fd, MAX_VALUE, &vn);
      if (!value) {
        free(key);
        break;
      }
      bool fresh = server_set(c.server, key, value, vn);
      if (!fresh) free(key), free(value);
      ok = send_all(c.fd, fresh ? "+" : "!", 1);
    } else if (op == 'G' && recv_u32(c.fd, &timeout_ms)) {
      ok = server_get(c.server, c.fd, key, timeout_ms);
      free(key);
    } else {
      free(key);
      break;
    }
    if (!ok) break;
  }
  return NULL;
}

static void *accept_clients(void *arg) {
  Server *sv = arg;
  for (;;) {
    int fd = accept(sv->listen_fd, NULL, NULL);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0) return NULL;  // the listening socket was shut down: the server stops
    pthread_mutex_lock(&sv->lock);
    Conn *c = sv->stopping || sv->clients == MAX_CONNECTIONS ? NULL : malloc(sizeof *c);
    if (c) {
      *c = (Conn){sv, fd};
      if (pthread_create(&sv->threads[sv->clients], NULL, serve_client, c) == 0) {
        sv->fds[sv->clients++] = fd;
        fd = -1;
      } else {
        free(c);
      }
    }
    pthread_mutex_unlock(&sv->lock);
    if (fd >= 0) close(fd);
  }
}

// A socket listening on @p port on every address: IPv6 with IPv4 mapped in, or IPv4 only where the
// host has no IPv6.
static int listen_on(int port) {
  int one = 1, zero = 0, fd = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a6 = {
      .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
  struct sockaddr *a = (struct sockaddr *)&a6;
  socklen_t len = sizeof a6;
  if (fd >= 0) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    a = (struct sockaddr *)&a4;
    len = sizeof a4;
  }
  if (fd < 0) die(1, "rank 0: cannot open a socket for the rendezvous store: %s", strerror(errno));
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a previous run's port in TIME_WAIT
  if (bind(fd, a, len) != 0 || listen(fd, 128) != 0)
    die(1,
        "rank 0: cannot listen on port %d for the rendezvous store: %s (the port is MASTER_PORT + 1, "
        "or DDP_NCCL_PORT: choose a free one)",
        port, strerror(errno));
  return fd;
}

static Server *server_start(int port) {
  Server *sv = mallocCheck(sizeof *sv);
  sv->listen_fd = listen_on(port);
  pthread_mutex_init(&sv->lock, NULL);
  pthread_condattr_t attr;  // server_get's deadlines are on the monotonic clock
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&sv->changed, &attr);
  pthread_condattr_destroy(&attr);
  if (pthread_create(&sv->acceptor, NULL, accept_clients, sv) != 0)
    die(1, "rank 0: cannot start the rendezvous store's thread");
  return sv;
}

static void server_stop(Server *sv) {
  pthread_mutex_lock(&sv->lock);
  sv->stopping = true;
  pthread_cond_broadcast(&sv->changed);
  pthread_mutex_unlock(&sv->lock);
  shutdown(sv->listen_fd, SHUT_RDWR);  // accept() returns
  pthread_join(sv->acceptor, NULL);
  close(sv->listen_fd);
  for (int i = 0; i < sv->clients; i++) {
    shutdown(sv->fds[i], SHUT_RDWR);  // a client thread blocked in recv() returns
    pthread_join(sv->threads[i], NULL);
    close(sv->fds[i]);
  }
  for (size_t i = 0; i < sv->count; i++) free(sv->entries[i].key), free(sv->entries[i].value);
  free(sv->entries);
  pthread_cond_destroy(&sv->changed);
  pthread_mutex_destroy(&sv->lock);
  free(sv);
}

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

// One connect attempt to every address of the host; the socket, or -1 with errno set.
static int try_connect(const Store *s, int *gai_err) {
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list = NULL;
  *gai_err = getaddrinfo(s->host, port, &hints, &list);
  if (*gai_err) return -1;
  int fd = -1;
  for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      int e = errno;
      close(fd);
      fd = -1;
      errno = e;
    }
  }
  freeaddrinfo(list);
  return fd;
}

// Connects, retrying with back-off until the timeout (rank 0's server may not be up yet).
static void client_connect(Store *s) {
  double until = now_s() + s->timeout, pause = BACKOFF_FIRST_S;
  int gai = 0;
  while ((s->fd = try_connect(s, &gai)) < 0) {
    if (gai == EAI_NONAME || gai == EAI_FAIL)
      die(1, "the rendezvous store's host '%s' (MASTER_ADDR) does not resolve: %s", s->host,
          gai_strerror(gai));
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

Store *store_init(const char *host, int port, int rank, int world_size, double timeout_s) {
  Store *s = mallocCheck(sizeof *s);
  size_t n = strlen(host);
  bool bracketed = n >= 2 && host[0] == '[' && host[n - 1] == ']';
  snprintf(s->host, sizeof s->host, "%.*s", (int)(bracketed ? n - 2 : n), bracketed ? host + 1 : host);
  s->port = port;
  s->rank = rank;
  s->world_size = world_size;
  s->timeout = timeout_s;
  if (rank == 0) s->server = server_start(port);
  client_connect(s);
  return s;
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

const char *store_local_address(const Store *s) { return s->local; }

void store_free(Store *s, const char *prefix) {
  char key[MAX_KEY];
  snprintf(key, sizeof key, "%sdone/%d", prefix, s->rank);
  store_set(s, key, "", 0);
  if (s->server) {  // the last rank to finish its gets has checked in: the server may stop
    for (int r = 0; r < s->world_size; r++) {
      size_t n;
      snprintf(key, sizeof key, "%sdone/%d", prefix, r);
      free(store_get(s, key, s->timeout, &n));
    }
  }
  close(s->fd);
  if (s->server) server_stop(s->server);
  free(s);
}
