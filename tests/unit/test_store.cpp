// The rendezvous store's server (common/dist/store.c) against clients that are not ranks: connections
// that open and close are reaped (descriptors back to where they were, later ranks still served); an
// accept that fails for want of descriptors is retried; one connection cannot store more than a
// rank's share, nor all connections together more than the job's; many keys are all found; the
// server listens on MASTER_ADDR's own address when it is local. Loopback only.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "store.h"
}
#include "free_port.h"

namespace {

// A raw connection to @p ip:@p port; -1 when refused.
int dial(const char *ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{5, 0};  // a test never waits on the server for longer
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void put_u32(std::string &b, uint32_t v) {
  v = htonl(v);
  b.append(reinterpret_cast<const char *>(&v), 4);
}

// Sends a set of @p key to @p n bytes over a raw connection; the reply ('+', '!', 'F'), or 0 when
// the server closed the connection instead.
char raw_set(int fd, const std::string &key, size_t n) {
  std::string b = "S";
  put_u32(b, static_cast<uint32_t>(key.size()));
  b += key;
  put_u32(b, static_cast<uint32_t>(n));
  b += std::string(n, 'x');
  size_t off = 0;
  while (off < b.size()) {
    ssize_t k = send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (k <= 0) break;  // the server closed (it may still have answered first)
    off += static_cast<size_t>(k);
  }
  char reply = 0;
  return recv(fd, &reply, 1, 0) == 1 ? reply : 0;
}

// Whether @p key is set, asked over a fresh raw connection with a 100 ms wait.
bool raw_has(int port, const std::string &key) {
  int fd = dial("127.0.0.1", port);
  std::string b = "G";
  put_u32(b, static_cast<uint32_t>(key.size()));
  b += key;
  put_u32(b, 100);
  send(fd, b.data(), b.size(), MSG_NOSIGNAL);
  char reply = 0;
  recv(fd, &reply, 1, 0);
  close(fd);
  return reply == '+';
}

int open_fds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  while (readdir(d)) n++;
  closedir(d);
  return n - 3;  // ., .. and the directory's own descriptor
}

// Rank 1 of 2 joins, sets a key rank 0 reads back, and both leave (the server stops).
void second_rank_works(Store *s0, int port) {
  Store *s1 = store_init("127.0.0.1", port, 1, 2, 5.0);
  store_set(s1, "hello", "world", 5);
  size_t n = 0;
  char *v = static_cast<char *>(store_get(s0, "hello", 5.0, &n));
  EXPECT_EQ(std::string(v, n), "world");
  free(v);
  store_free(s1, "t/");
  store_free(s0, "t/");
}

// Y1: 1100 connect-and-close (a port scan): each connection's descriptor and thread go when it
// closes, and a rank that comes after is served. The old server kept all of them until it stopped
// and closed every connection after the 1024th at once.
TEST(StoreServer, ReapsClosedConnections) {
  int port = free_port();
  Store *s0 = store_init("127.0.0.1", port, 0, 2, 5.0);
  int base = open_fds();
  for (int i = 0; i < 1100; i++) {
    int fd = dial("127.0.0.1", port);
    ASSERT_GE(fd, 0) << "connection " << i << " refused";
    close(fd);
  }
  int now = open_fds();
  for (int i = 0; i < 100 && now > base + 2; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = open_fds();
  }
  EXPECT_LE(now, base + 2) << "descriptors still open 5 s after 1100 connections closed";
  second_rank_works(s0, port);
}

// Y1: an accept that fails with EMFILE (the process is out of descriptors) is retried once some are
// free; the old acceptor thread ended for good, and later ranks got no answer.
TEST(StoreServer, AcceptSurvivesEMFILE) {
  int port = free_port();
  Store *s0 = store_init("127.0.0.1", port, 0, 2, 3.0);
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_fds() + 16);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> held;
  for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;) held.push_back(fd);
  // One descriptor free, taken by a client socket: its connection waits in the backlog while the
  // server has none left to accept it with.
  bool pending = false;
  for (int tries = 0; tries < 8 && !pending && !held.empty(); tries++) {
    close(held.back());
    held.pop_back();
    int fd = dial("127.0.0.1", port);
    if (fd >= 0) held.push_back(fd), pending = true;
  }
  ASSERT_TRUE(pending) << "could not leave a connection waiting in the backlog";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // accept() fails with EMFILE meanwhile
  for (int fd : held) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  second_rank_works(s0, port);
}

// Y2: a value larger than a rank's share is refused without being read (the connection is closed),
// and is not stored; the ranks' own keys still are.
TEST(StoreServer, RefusesLargeValues) {
  int port = free_port();
  Store *s0 = store_init("127.0.0.1", port, 0, 2, 5.0);
  int fd = dial("127.0.0.1", port);
  char reply = raw_set(fd, "big", 1u << 20);
  close(fd);
  EXPECT_NE(reply, '+') << "the store took 1 MiB from one connection";
  EXPECT_FALSE(raw_has(port, "big"));
  second_rank_works(s0, port);
}

// Y2: one connection stores at most a rank's share of keys, and many connections together at most
// the job's total; a rank that came before keeps its keys, and rank 0 still leaves cleanly.
TEST(StoreServer, CapsKeysPerConnectionAndInTotal) {
  int port = free_port();
  Store *s0 = store_init("127.0.0.1", port, 0, 2, 5.0);
  Store *s1 = store_init("127.0.0.1", port, 1, 2, 5.0);
  store_set(s1, "early", "1", 1);
  store_free(s1, "t/");
  int fd = dial("127.0.0.1", port), stored = 0;
  while (stored < 100000 && raw_set(fd, "one/" + std::to_string(stored), 8) == '+') stored++;
  close(fd);
  EXPECT_LT(stored, 100) << "one connection stored " << stored << " keys";
  int total = stored;
  for (int c = 0; c < 200; c++) {
    fd = dial("127.0.0.1", port);
    ASSERT_GE(fd, 0);
    for (int k = 0; k < 100 && raw_set(fd, "many/" + std::to_string(c) + "/" + std::to_string(k), 8) == '+';
         k++)
      total++;
    close(fd);
  }
  EXPECT_LT(total, 2000) << "200 connections stored " << total << " keys";
  EXPECT_TRUE(raw_has(port, "early"));
  store_free(s0, "t/");
}

// Y2: the index finds every key among many (it replaced a linear scan), by exact name only.
TEST(StoreServer, FindsEveryKeyAmongMany) {
  int port = free_port(), world = 64;
  Store *s0 = store_init("127.0.0.1", port, 0, world, 5.0);
  std::vector<Store *> ranks;
  for (int r = 1; r < world; r++) ranks.push_back(store_init("127.0.0.1", port, r, world, 5.0));
  for (int r = 1; r < world; r++)
    for (int k = 0; k < 8; k++) {
      std::string key = "k" + std::to_string(r) + "_" + std::to_string(k), value = key + "=v";
      store_set(ranks[r - 1], key.c_str(), value.data(), value.size());
    }
  for (int r = world - 1; r >= 1; r--)
    for (int k = 7; k >= 0; k--) {
      std::string key = "k" + std::to_string(r) + "_" + std::to_string(k);
      size_t n = 0;
      char *v = static_cast<char *>(store_get(s0, key.c_str(), 5.0, &n));
      EXPECT_EQ(std::string(v, n), key + "=v");
      free(v);
    }
  EXPECT_FALSE(raw_has(port, "k1_"));
  EXPECT_FALSE(raw_has(port, "k1_00"));
  for (Store *s : ranks) store_free(s, "t/");
  store_free(s0, "t/");
}

// A get that waits when the server stops is told so ('E'), not that its key never appeared ('-'):
// a rank of one job that reached another job's store (two jobs on one MASTER_PORT) waits on a key
// that job will never set, and the old answer made its message blame a slow rank and --timeout.
TEST(StoreServer, AGetWaitingWhenTheServerStopsIsToldSo) {
  int port = free_port();
  Store *s0 = store_init("127.0.0.1", port, 0, 1, 5.0);
  int fd = dial("127.0.0.1", port);
  ASSERT_GE(fd, 0);
  std::string b = "G";
  put_u32(b, 4);
  b += "none";
  put_u32(b, 4000);  // longer than the test waits: only the stop can answer it
  ASSERT_EQ(send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the get is waiting
  std::thread stop([s0] { store_free(s0, "t/"); });
  char reply = 0;
  EXPECT_EQ(recv(fd, &reply, 1, 0), 1);
  EXPECT_EQ(reply, 'E');
  close(fd);
  stop.join();
}

// Y3: with MASTER_ADDR 127.0.0.1 (or 127.0.0.2) the store listens on that address only, not on every
// interface: another address of this machine (127.0.0.2, or 127.0.0.1) is refused.
TEST(StoreServer, ListensOnMasterAddrOnly) {
  const char *mine[] = {"127.0.0.1", "127.0.0.2"}, *other[] = {"127.0.0.2", "127.0.0.1"};
  for (int i = 0; i < 2; i++) {
    int port = free_port();
    Store *s0 = store_init(mine[i], port, 0, 1, 5.0);
    int fd = dial(other[i], port);
    EXPECT_LT(fd, 0) << "MASTER_ADDR=" << mine[i] << ": the store answers on " << other[i];
    if (fd >= 0) close(fd);
    fd = dial(mine[i], port);
    EXPECT_GE(fd, 0) << "MASTER_ADDR=" << mine[i] << ": the store does not answer there";
    if (fd >= 0) close(fd);
    store_free(s0, "t/");
  }
}

// Y3: a host name still works: localhost, and this machine's own name (which Debian maps to
// 127.0.1.1 and other nodes reach through another address).
TEST(StoreServer, HostNamesStillWork) {
  char host[256] = "";
  gethostname(host, sizeof host);
  for (const char *name : {"localhost", static_cast<const char *>(host)}) {
    int port = free_port();
    Store *s0 = store_init(name, port, 0, 2, 5.0);
    Store *s1 = store_init(name, port, 1, 2, 5.0);
    store_set(s1, "hello", "world", 5);
    size_t n = 0;
    free(store_get(s0, "hello", 5.0, &n));
    EXPECT_EQ(n, 5u) << name;
    store_free(s1, "t/");
    store_free(s0, "t/");
  }
}

}  // namespace
