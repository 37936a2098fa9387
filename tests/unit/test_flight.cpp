// flight.h: the ring keeps the last FLIGHT_RING collectives in order, with their states and times;
// a skipped number leaves a gap; the oldest collective not done is the one a hung rank waits on; the
// dump is one JSON object per line, written whole or not at all.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "flight.h"

namespace {
std::vector<std::string> lines_of(const std::string &path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

std::string dir_for(const char *name) {
  std::string d = std::string(DDP_TEST_TMPDIR) + "/" + name;
  std::remove((d + "/fr_3.jsonl").c_str());
  return d;
}
}  // namespace

TEST(Flight, RecordsInOrderWithStates) {
  flight_reset();
  EXPECT_EQ(flight_record("all-reduce", "float32", 10, "bucket 0"), 1u);
  uint64_t b = flight_record("all-reduce", "float32", 20, "bucket 1");
  EXPECT_EQ(b, 2u);
  flight_mark(1, FLIGHT_STARTED);
  flight_mark(1, FLIGHT_DONE);
  flight_mark(b, FLIGHT_STARTED);
  FlightEntry e;
  ASSERT_TRUE(flight_oldest_pending(&e));  // bucket 0 is done: bucket 1 is what this rank waits on
  EXPECT_EQ(e.seq, 2u);
  EXPECT_STREQ(e.tag, "bucket 1");
  EXPECT_EQ(e.state, FLIGHT_STARTED);
  EXPECT_GT(e.started, 0.0);
  EXPECT_EQ(e.finished, 0.0);
  char line[200];
  flight_describe(&e, line, sizeof line);
  EXPECT_NE(std::string(line).find("collective #2 (all-reduce, bucket 1, float32 x 20 = 0.0 MiB) started "),
            std::string::npos)
      << line;
  flight_mark(b, FLIGHT_DONE);
  EXPECT_FALSE(flight_oldest_pending(&e));
}

TEST(Flight, KeepsTheLastRingfulAndSkipsLeaveAGap) {
  flight_reset();
  for (int i = 0; i < FLIGHT_RING + 44; i++)
    flight_mark(flight_record("broadcast", "int32", 1, "x"), FLIGHT_DONE);
  EXPECT_EQ(flight_skip(), (uint64_t)FLIGHT_RING + 45);
  uint64_t last = flight_record("barrier", "float32", 0, nullptr);
  EXPECT_EQ(last, (uint64_t)FLIGHT_RING + 46);
  std::string dir = dir_for("flight_ring");
  flight_set_dir(dir.c_str(), 3, 4);
  ASSERT_EQ(flight_dump("test", nullptr, 0), 0);
  std::vector<std::string> l = lines_of(dir + "/fr_3.jsonl");
  ASSERT_EQ(l.size(), (size_t)FLIGHT_RING) << "a header, then the entries still in the ring";
  EXPECT_NE(l[0].find("\"rank\": 3, \"world_size\": 4"), std::string::npos) << l[0];
  EXPECT_NE(l[0].find("\"why\": \"test\""), std::string::npos) << l[0];
  // The ring holds FLIGHT_RING slots: seq 47 .. 300 minus the skipped 301, plus 302.
  EXPECT_NE(l[1].find("\"seq\": 47,"), std::string::npos) << l[1];
  EXPECT_NE(l.back().find("\"seq\": 302, \"op\": \"barrier\""), std::string::npos) << l.back();
  EXPECT_NE(l.back().find("\"state\": \"queued\""), std::string::npos) << l.back();
  EXPECT_NE(l[l.size() - 2].find("\"seq\": 300,"), std::string::npos) << "301 was skipped";
}

TEST(Flight, TagsAreEscapedAndTruncated) {
  flight_reset();
  flight_record("all-gather", "fp16", 3, "a \"quoted\"\\tag that is much longer than the forty bytes kept");
  std::string dir = dir_for("flight_escape");
  flight_set_dir(dir.c_str(), 3, 4);
  ASSERT_EQ(flight_dump("why \"here\"", nullptr, 0), 0);
  std::vector<std::string> l = lines_of(dir + "/fr_3.jsonl");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NE(l[0].find("\"why\": \"why \\\"here\\\"\""), std::string::npos) << l[0];
  EXPECT_NE(l[1].find("\"tag\": \"a \\\"quoted\\\"\\\\tag that is much longer than\""), std::string::npos)
      << l[1];
}

TEST(Flight, AFailedDumpLeavesNothing) {
  flight_reset();
  flight_record("all-reduce", "float32", 1, "loss");
  std::string file = std::string(DDP_TEST_TMPDIR) + "/flight_not_a_dir";
  FILE *f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  flight_set_dir((file + "/sub").c_str(), 3, 4);  // a file stands where a folder must be
  EXPECT_NE(flight_dump("test", nullptr, 0), 0);
  struct stat st;
  EXPECT_NE(stat((file + "/sub/fr_3.jsonl").c_str(), &st), 0);
  flight_set_dir(DDP_TEST_TMPDIR, 0, 4);
}

TEST(Flight, ADumpRequestIsTakenOnce) {
  EXPECT_FALSE(flight_take_request());
  flight_request_dump();
  EXPECT_TRUE(flight_take_request());
  EXPECT_FALSE(flight_take_request());
}

TEST(Flight, AFolderTooLongIsRefusedAndChangesNothing) {
  flight_set_dir("kept", 0, 1);
  EXPECT_EQ(flight_set_dir(std::string(FLIGHT_DIR_MAX, 'a').c_str(), 0, 1), -1);
  EXPECT_STREQ(flight_dir(), "kept");
  EXPECT_EQ(flight_set_dir(std::string(FLIGHT_DIR_MAX - 1, 'a').c_str(), 0, 1), 0);
  flight_set_dir(DDP_TEST_TMPDIR, 0, 1);
}
