// Crash safety of ckpt_save: a saver killed with SIGKILL at a random moment never leaves a corrupt
// file under the real name, and the checkpoint that was there before stays loadable.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <random>
#include <signal.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "ckpt.h"

namespace {

// 784-1024-1024-10: 1.86 M parameters, a 15 MB file, tens of milliseconds to write and fsync.
CkptMeta big_meta() {
  CkptMeta m{};
  m.n_layers = 3;
  m.sizes[0] = 784;
  m.sizes[1] = 1024;
  m.sizes[2] = 1024;
  m.sizes[3] = 10;
  m.world_size = 1;
  m.batch_size = 1;  // saved at epoch boundaries: no samples of the epoch consumed
  m.grad_accum = 1;
  return m;
}

// The contents saved for epoch e: every float depends on e and its index, so a file that mixed two
// saves, or a half-written one that somehow passed the CRC, would be caught.
float value(uint32_t e, size_t i, int which) { return (float)e + (float)(i % 1000) * 1e-3f + (float)which; }

void fill(uint32_t e, std::vector<float> &p, std::vector<float> &o) {
  for (size_t i = 0; i < p.size(); i++) {
    p[i] = value(e, i, 0);
    o[i] = value(e, i, 1);
  }
}

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Removes PATH.tmp.* that killed savers left behind; returns how many.
int remove_stale(const std::string &dir, const std::string &base) {
  int n = 0;
  DIR *d = opendir(dir.c_str());
  if (!d) return 0;
  std::string prefix = base + ".tmp.";
  while (struct dirent *e = readdir(d)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      remove((dir + "/" + e->d_name).c_str());
      n++;
    }
  }
  closedir(d);
  return n;
}

void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

}  // namespace

TEST(CkptCrash, SigkillDuringSaveNeverCorrupts) {
  const std::string dir = DDP_TEST_TMPDIR, base = "crash_ckpt.bin", path = dir + "/" + base;
  const CkptMeta meta0 = big_meta();
  const size_t n = ckpt_param_count(&meta0);
  std::vector<float> p(n), o(n), lp(n), lo(n);
  char err[512];
  std::mt19937 rng(12345);
  remove(path.c_str());
  remove_stale(dir, base);

  uint32_t last_epoch = 0;  // epoch of the checkpoint known to be at path (0: none yet)
  int loaded = 0, absent = 0, stale = 0, kills_mid_run = 0;
  for (int trial = 0; trial < 50; trial++) {
    if (trial % 10 == 0) {  // now and then start from nothing: then absent is also acceptable
      remove(path.c_str());
      last_epoch = 0;
    }
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the saver: writes epochs last_epoch+1, +2, ... until killed
      close(ready[0]);
      CkptMeta m = meta0;
      for (uint32_t e = last_epoch + 1;; e++) {
        fill(e, p, o);
        m.epoch = e;
        if (e == last_epoch + 1 && write(ready[1], "x", 1) != 1) _exit(3);
        if (ckpt_save(path.c_str(), &m, p.data(), o.data(), err, sizeof err) != 0) {
          fprintf(stderr, "child: %s\n", err);
          _exit(2);
        }
      }
    }
    close(ready[1]);
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1);  // the child is about to start its first save
    close(ready[0]);
    // 0 to 120 ms: before, inside and after the first save, and into later ones.
    sleep_us(std::uniform_int_distribution<long>(0, 120000)(rng));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the saver ended on its own (status " << status << "): it failed to save";
    kills_mid_run++;

    if (!exists(path)) {
      ASSERT_EQ(last_epoch, 0u) << "trial " << trial << ": the previous checkpoint (epoch " << last_epoch
                                << ") disappeared";
      absent++;
    } else {
      CkptMeta got{};
      ASSERT_EQ(ckpt_load(path.c_str(), &meta0, &got, lp.data(), lo.data(), err, sizeof err), 0)
          << "trial " << trial << ": " << err;
      ASSERT_GE(got.epoch, last_epoch) << "trial " << trial << ": an older checkpoint came back";
      for (size_t i = 0; i < n; i += 997) {
        ASSERT_EQ(lp[i], value(got.epoch, i, 0)) << "trial " << trial << " index " << i;
        ASSERT_EQ(lo[i], value(got.epoch, i, 1)) << "trial " << trial << " index " << i;
      }
      last_epoch = got.epoch;
      loaded++;
    }
    stale += remove_stale(dir, base);
  }
  remove(path.c_str());
  RecordProperty("loaded", loaded);
  RecordProperty("absent", absent);
  RecordProperty("stale_tmp", stale);
  printf(
      "50 SIGKILLs of a saver: %d checkpoints loaded, %d absent (no save had finished), %d stale "
      "temporary files removed, last epoch %u\n",
      loaded, absent, stale, last_epoch);
  EXPECT_EQ(kills_mid_run, 50);
  EXPECT_GT(stale, 0) << "no kill landed inside a write: the test did not exercise a partial file";
}
