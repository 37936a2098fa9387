// Issue 40, V7: when every connection slot of the rendezvous store is held by idle clients, a rank
// that connects is turned away and told why, and rank 0's get that times out says that it turned
// connections away. Before, the connection was closed silently: the rank reported that rank 0 had
// died, and rank 0 that a rank never started. Loopback only.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
#include "store.h"
}
#include "free_port.h"

namespace {
// A client that connects, shows it is served (a get of a missing key with no wait answers '-'), and
// then stays idle, holding its slot; -1 when the server did not serve it.
int idle_client(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) return close(fd), -1;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string b = "G";
  uint32_t n = htonl(7), ms = htonl(0);
  b.append(reinterpret_cast<const char *>(&n), 4);
  b += "missing";
  b.append(reinterpret_cast<const char *>(&ms), 4);
  char reply = 0;
  if (send(fd, b.data(), b.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(b.size()) ||
      recv(fd, &reply, 1, 0) != 1 || reply != '-')
    return close(fd), -1;
  return fd;
}
}  // namespace

TEST(StoreSlotsDeathTest, ATurnedAwayRankAndRankZeroAreToldWhy) {
  GTEST_FLAG_SET(death_test_style, "fast");  // the children use the parent's server, which forks keep
  int port = free_port();
  // Few descriptors: the server allows world_size + 8 = 10 connections (rank 0's own is one of them).
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  rlimit low = old;
  low.rlim_cur = 20;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  Store *s0 = store_init("127.0.0.1", port, 0, 2, 1.0);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  std::vector<int> held;
  for (int fd; held.size() < 64 && (fd = idle_client(port)) >= 0;) held.push_back(fd);
  ASSERT_EQ(held.size(), 9u) << "the idle clients did not fill exactly the 9 slots left";
  EXPECT_EXIT(store_init("127.0.0.1", port, 1, 2, 1.0), ::testing::ExitedWithCode(1),
              "rank 1: the rendezvous store at 127.0.0.1:[0-9]+ turned this rank away for 1 s "
              "\\(--timeout\\): all 10 of its connection slots are held");
  size_t n = 0;
  EXPECT_EXIT(
      store_get(s0, "done/1", 1.0, &n), ::testing::ExitedWithCode(1),
      "did not appear within 1 s \\(--timeout\\), and the store turned [0-9]+ connection\\(s\\) away");
  for (int fd : held) close(fd);
  // A slot is free again: rank 1 joins.
  Store *s1 = store_init("127.0.0.1", port, 1, 2, 5.0);
  store_set(s1, "hello", "world", 5);
  char *v = static_cast<char *>(store_get(s0, "hello", 5.0, &n));
  EXPECT_EQ(std::string(v, n), "world");
  free(v);
  store_free(s1, "t/");
  store_free(s0, "t/");
}
