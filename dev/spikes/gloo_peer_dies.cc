// Spike S1 of step 09 (docs/09_live.md, "What stage 2 builds on"): Debian's Gloo (0.0~git20220518)
// after a peer dies or freezes. A throwaway experiment kept for rerunning, not part of the build:
//   g++ -std=c++17 -O1 -o /tmp/gloo_peer_dies dev/spikes/gloo_peer_dies.cc -lgloo -lpthread
//   /tmp/gloo_peer_dies kill 3000     (or: stop 3000; the number is the op timeout in ms)
// 3 processes forked from one parent, a FileStore rendezvous, TCP on loopback.
// Each child: context A (prefix "q1"), all-reduces in a loop; rank 2 is SIGKILLed (or SIGSTOPped)
// by the parent while the others are inside gloo::allreduce. The survivors report how long the
// pending all-reduce took to fail and with what; then destroy A and connect context B (prefix "q2",
// 2 ranks) in the same process and all-reduce on it; fds and threads are counted before and after.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static int count_dir(const char *path) {
  int n = 0;
  DIR *d = opendir(path);
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n - 2;
}

static std::shared_ptr<gloo::rendezvous::Context> connect(const std::string &dir, const char *prefix,
                                                          int rank, int size,
                                                          std::shared_ptr<gloo::transport::Device> dev,
                                                          int timeout_ms) {
  gloo::rendezvous::FileStore fs(dir);
  gloo::rendezvous::PrefixStore ps(prefix, fs);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
  ctx->connectFullMesh(ps, dev);
  return ctx;
}

static void allreduce(std::shared_ptr<gloo::Context> ctx, std::vector<float> &v, int timeout_ms) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(v.data(), v.size());
  o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
  o.setTimeout(std::chrono::milliseconds(timeout_ms));
  gloo::allreduce(o);
}

static int child(const std::string &dir, int rank, int timeout_ms) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  int fds0 = count_dir("/proc/self/fd"), thr0 = count_dir("/proc/self/task");
  auto a = connect(dir, "q1", rank, 3, dev, timeout_ms);
  std::vector<float> v(1 << 20, 1.0f);
  double t_fail = 0;
  std::string what;
  for (int it = 0;; it++) {
    try {
      double t0 = now();
      allreduce(a, v, timeout_ms);
      (void)t0;
    } catch (const std::exception &e) {
      t_fail = now();
      what = e.what();
      break;
    }
    if (rank == 0 && it == 20) {
      FILE *f = fopen((dir + "/go").c_str(), "w");  // tells the parent the ranks are in their loop
      fclose(f);
    }
  }
  FILE *k = fopen((dir + "/killed").c_str(), "r");
  double t_kill = 0;
  if (k) {
    if (fscanf(k, "%lf", &t_kill) != 1) t_kill = 0;
    fclose(k);
  }
  int fds1 = count_dir("/proc/self/fd"), thr1 = count_dir("/proc/self/task");
  printf("rank %d: all-reduce failed %.3f s after the signal: %.160s\n", rank, t_fail - t_kill, what.c_str());
  fflush(stdout);
  a.reset();  // destroy context A (its pairs, one errored)
  int fds2 = count_dir("/proc/self/fd"), thr2 = count_dir("/proc/self/task");
  double t1 = now();
  try {
    auto b = connect(dir, "q2", rank, 2, dev, timeout_ms);
    std::vector<float> w(1 << 20, (float)(rank + 1));
    allreduce(b, w, timeout_ms);
    printf("rank %d: context B (2 ranks, prefix q2) connected and all-reduced in %.3f s: %g (want 3)\n", rank,
           now() - t1, w[0]);
    b.reset();
  } catch (const std::exception &e) {
    printf("rank %d: context B failed: %.160s\n", rank, e.what());
  }
  int fds3 = count_dir("/proc/self/fd"), thr3 = count_dir("/proc/self/task");
  printf(
      "rank %d: fds %d -> %d (A failed) -> %d (A destroyed) -> %d (B done); threads %d -> %d -> %d -> %d\n",
      rank, fds0, fds1, fds2, fds3, thr0, thr1, thr2, thr3);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  int sig = argc > 1 && strcmp(argv[1], "stop") == 0 ? SIGSTOP : SIGKILL;
  int timeout_ms = argc > 2 ? atoi(argv[2]) : 3000;
  char tmpl[] = "/tmp/gloo_peer_dies.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  pid_t pids[3];
  for (int r = 0; r < 3; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(child(dir, r, timeout_ms));
  }
  while (access((dir + "/go").c_str(), F_OK) != 0) usleep(1000);
  usleep(3000);
  FILE *f = fopen((dir + "/killed").c_str(), "w");
  fprintf(f, "%.6f\n", now());
  fclose(f);
  kill(pids[2], sig);
  printf("parent: %s rank 2 (op timeout %d ms)\n", sig == SIGKILL ? "SIGKILL" : "SIGSTOP", timeout_ms);
  fflush(stdout);
  for (int r = 0; r < 2; r++) waitpid(pids[r], nullptr, 0);
  kill(pids[2], SIGKILL);
  waitpid(pids[2], nullptr, 0);
  return std::system(("rm -rf " + dir).c_str()) == 0 ? 0 : 1;  // the rendezvous files
}
