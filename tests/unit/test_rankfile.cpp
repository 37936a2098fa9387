// rankfile.h: {rank} expansion, per-rank files named after the rank, and the refusals: a path too
// long, and a path without {rank} above one rank.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "rankfile.h"

namespace {
std::string tmp_path(const std::string &name) { return std::string(DDP_TEST_TMPDIR) + "/" + name; }
}  // namespace

TEST(RankFile, Path) {
  char out[64];
  EXPECT_EQ(rankfile_path(out, sizeof out, "m_{rank}.jsonl", 0), 0);
  EXPECT_STREQ(out, "m_0.jsonl");
  EXPECT_EQ(rankfile_path(out, sizeof out, "{rank}/m_{rank}_{rank}.jsonl", 12), 0);
  EXPECT_STREQ(out, "12/m_12_12.jsonl");
  EXPECT_EQ(rankfile_path(out, sizeof out, "plain.jsonl", 5), 0);
  EXPECT_STREQ(out, "plain.jsonl");
  EXPECT_EQ(rankfile_path(out, sizeof out, "{rank", 5), 0);
  EXPECT_STREQ(out, "{rank");
  EXPECT_EQ(rankfile_path(out, sizeof out, "", 5), 0);
  EXPECT_STREQ(out, "");
  char small[6];
  EXPECT_EQ(rankfile_path(small, sizeof small, "ab{rank}", 1234), -1);
  EXPECT_EQ(rankfile_path(small, sizeof small, "ab{rank}", 123), 0);  // "ab123" just fits
  EXPECT_EQ(rankfile_path(small, sizeof small, "abcdef", 0), -1);     // needs 7 with the NUL
}

TEST(RankFile, TooLongNamesTheFlag) {
  std::string long_path(5000, 'a');  // longer than any path the toolkit builds
  EXPECT_EXIT(
      {
        (void)rankfile_open("--trace", long_path.c_str(), 0, 1);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1), "--trace: path 'a+' is too long");
}

TEST(RankFile, OpenExpandsTheRank) {
  FILE *f = rankfile_open("--trace", tmp_path("rank_file_{rank}.txt").c_str(), 7, 8);
  ASSERT_NE(f, nullptr);
  fputs("x", f);
  fclose(f);
  FILE *g = fopen(tmp_path("rank_file_7.txt").c_str(), "r");
  ASSERT_NE(g, nullptr) << "the file is named after the rank";
  EXPECT_EQ(fgetc(g), 'x');
  fclose(g);
}

// Above one rank, a path without {rank} would have every rank truncate and overwrite one file (a
// shared trace was invalid JSON): refused with status 2, naming the flag, the path and the ranks,
// before the file is created.
TEST(RankFile, SharedPathAtSeveralRanksIsRefused) {
  std::string plain = tmp_path("shared_trace.json");
  std::remove(plain.c_str());
  EXPECT_EXIT(
      {
        (void)rankfile_open("--trace", plain.c_str(), 0, 2);
        std::exit(100);
      },
      ::testing::ExitedWithCode(2),
      "error: --trace .*shared_trace.json: at 2 ranks the path must contain \\{rank\\} \\(e.g. "
      ".*shared_trace_\\{rank\\}.json\\), or every rank would write the same file");
  FILE *g = fopen(plain.c_str(), "r");
  EXPECT_EQ(g, nullptr) << "the refused file must not be created";
  if (g) fclose(g);
  FILE *one = rankfile_open("--trace", plain.c_str(), 0, 1);  // one rank may use any path
  EXPECT_NE(one, nullptr);
  if (one) fclose(one);
  FILE *f = rankfile_open("--trace", tmp_path("shared_{rank}.json").c_str(), 3, 4);
  EXPECT_NE(f, nullptr);
  if (f) fclose(f);
}

// The attempt of a restarted job: TORCHELASTIC_RESTART_COUNT (restart.sh, torchrun), 0 when unset or
// empty; anything but a decimal count ends the job with status 2, naming the variable.
TEST(RankFile, Attempt) {
  unsetenv("TORCHELASTIC_RESTART_COUNT");
  EXPECT_EQ(rankfile_attempt(), 0);
  setenv("TORCHELASTIC_RESTART_COUNT", "", 1);
  EXPECT_EQ(rankfile_attempt(), 0);
  setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
  EXPECT_EQ(rankfile_attempt(), 3);
  for (const char *bad : {"x", "-1", "1x", " 1", "99999999999"}) {
    setenv("TORCHELASTIC_RESTART_COUNT", bad, 1);
    EXPECT_EXIT(rankfile_attempt(), ::testing::ExitedWithCode(2),
                "TORCHELASTIC_RESTART_COUNT=.* is not a restart count")
        << bad;
  }
  unsetenv("TORCHELASTIC_RESTART_COUNT");
}

// rankfile_open_mode: "a" keeps what the file holds, "w" truncates it.
TEST(RankFile, OpenModeAppends) {
  std::string path = tmp_path("append_0.txt");
  for (const char *mode : {"w", "a", "a"}) {
    FILE *f = rankfile_open_mode("--metrics", tmp_path("append_{rank}.txt").c_str(), 0, 2, mode);
    fputs("line\n", f);
    fclose(f);
  }
  FILE *f = fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[64] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  EXPECT_EQ(std::string(buf, n), "line\nline\nline\n");
}
