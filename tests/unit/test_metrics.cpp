// Metrics file: every line is a valid flat JSON object with the documented keys in order, floats
// round-trip exactly, NaN becomes null, and a path without {rank} is refused above one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "flops.h"
#include "metrics.h"

namespace {

using Object = std::vector<std::pair<std::string, std::string>>;  // key, raw JSON value, in order

// A tiny parser for the flat objects of the metrics file: strings without escapes, JSON numbers,
// null, true. Returns false on anything that is not valid JSON of that shape.
bool parse_flat(const std::string &line, Object *obj) {
  static const std::regex number(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  size_t i = 0;
  auto string_at = [&](std::string *out) {
    if (i >= line.size() || line[i] != '"') return false;
    size_t end = line.find('"', i + 1);
    if (end == std::string::npos) return false;
    *out = line.substr(i + 1, end - i - 1);
    if (out->find('\\') != std::string::npos) return false;
    i = end + 1;
    return true;
  };
  obj->clear();
  if (line.empty() || line[i++] != '{') return false;
  while (true) {
    std::string key, value;
    if (!string_at(&key) || i >= line.size() || line[i++] != ':') return false;
    if (i < line.size() && line[i] == '"') {
      size_t start = i;
      if (!string_at(&value)) return false;
      value = line.substr(start, i - start);
    } else {
      size_t end = line.find_first_of(",}", i);
      if (end == std::string::npos) return false;
      value = line.substr(i, end - i);
      if (value != "null" && value != "true" && !std::regex_match(value, number)) return false;
      i = end;
    }
    obj->emplace_back(key, value);
    if (i >= line.size()) return false;
    char c = line[i++];
    if (c == '}') return i == line.size();
    if (c != ',') return false;
  }
}

std::vector<std::string> keys(const Object &o) {
  std::vector<std::string> k;
  for (auto &kv : o) k.push_back(kv.first);
  return k;
}

std::string value(const Object &o, const std::string &key) {
  for (auto &kv : o)
    if (kv.first == key) return kv.second;
  return "<missing>";
}

std::vector<std::string> read_lines(const std::string &path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string tmp_path(const std::string &name) { return std::string(DDP_TEST_TMPDIR) + "/" + name; }

}  // namespace

TEST(Metrics, ParserSelfCheck) {
  Object o;
  EXPECT_TRUE(parse_flat(R"({"a":1,"b":"x","c":null,"d":-1.5e-07})", &o));
  EXPECT_FALSE(parse_flat(R"({"a":nan})", &o));
  EXPECT_FALSE(parse_flat(R"({"a":inf})", &o));
  EXPECT_FALSE(parse_flat(R"({"a":1,})", &o));
  EXPECT_FALSE(parse_flat(R"({"a":01})", &o));
}

TEST(Metrics, LinesAreDocumentedJson) {
  Metrics m;
  metrics_open(&m, tmp_path("metrics_{rank}.jsonl").c_str(), 3, 1);
  ASSERT_NE(m.f, nullptr);
  metrics_step(&m, 1, 0, 2.30258512f);
  metrics_step(&m, 12345678901LL, 2, 0.1f);
  metrics_epoch(&m, 0, 0.56789f, 0.8421, 12345.678, false);
  metrics_epoch(&m, 1, 0.5f, -1.0, 1e6, true);  // not evaluated: no test_acc; stopped by --max_steps
  metrics_final(&m, 4, 1407, 0x0123456789abcdefULL);
  EXPECT_EQ(m.f, nullptr);          // the final object closes the file
  metrics_step(&m, 1408, 2, 0.1f);  // nothing comes after it
  metrics_close(&m);                // closing again does nothing

  auto lines = read_lines(tmp_path("metrics_3.jsonl"));
  ASSERT_EQ(lines.size(), 5u);
  std::vector<Object> objs(lines.size());
  for (size_t i = 0; i < lines.size(); i++) ASSERT_TRUE(parse_flat(lines[i], &objs[i])) << lines[i];

  using K = std::vector<std::string>;
  EXPECT_EQ(keys(objs[0]), (K{"type", "step", "epoch", "loss", "time"}));
  EXPECT_EQ(value(objs[0], "type"), "\"step\"");
  EXPECT_EQ(value(objs[0], "step"), "1");
  EXPECT_EQ(value(objs[0], "epoch"), "0");
  EXPECT_EQ(value(objs[1], "step"), "12345678901");
  EXPECT_EQ(value(objs[1], "epoch"), "2");

  EXPECT_EQ(keys(objs[2]), (K{"type", "epoch", "train_loss", "test_acc", "samples_per_s"}));
  EXPECT_EQ(value(objs[2], "type"), "\"epoch\"");
  EXPECT_EQ(std::strtod(value(objs[2], "test_acc").c_str(), nullptr), 0.8421);
  EXPECT_EQ(std::strtod(value(objs[2], "samples_per_s").c_str(), nullptr), 12345.678);
  EXPECT_EQ(keys(objs[3]), (K{"type", "epoch", "train_loss", "samples_per_s", "partial"}));
  EXPECT_EQ(value(objs[3], "partial"), "true");

  EXPECT_EQ(keys(objs[4]),
            (K{"type", "world_size", "steps", "param_digest", "peak_rss_kib", "attempt", "start_step"}));
  EXPECT_EQ(value(objs[4], "attempt"), "0");     // no TORCHELASTIC_RESTART_COUNT
  EXPECT_EQ(value(objs[4], "start_step"), "0");  // the first step object was step 1
  EXPECT_EQ(value(objs[4], "type"), "\"final\"");
  EXPECT_EQ(value(objs[4], "world_size"), "4");
  EXPECT_EQ(value(objs[4], "steps"), "1407");
  EXPECT_EQ(value(objs[4], "param_digest"), "\"0123456789abcdef\"");
  EXPECT_GT(std::strtol(value(objs[4], "peak_rss_kib").c_str(), nullptr, 10), 1000);  // this process: > 1 MB
}

TEST(Metrics, FloatsRoundTripExactly) {
  std::vector<float> losses = {2.30258512f,     0.1f,   1.0f / 3.0f, 1e-8f, 123456.789f, 3.4028235e38f,
                               1.17549435e-38f, 1e-45f, -0.0f,       0.0f,  7.0f};
  for (int i = 0; i < 1000; i++) losses.push_back(std::ldexp((float)(i * 2654435761u % 1000003), -i % 40));
  std::string path = tmp_path("metrics_roundtrip.jsonl");
  Metrics m;
  metrics_open(&m, path.c_str(), 0, 1);
  for (size_t i = 0; i < losses.size(); i++) {
    metrics_step(&m, (long long)i, 0, losses[i]);
    metrics_epoch(&m, (int)i, losses[i], 0.5, 1.0, false);
  }
  metrics_close(&m);
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2 * losses.size());
  for (size_t i = 0; i < losses.size(); i++) {
    Object step, epoch;
    ASSERT_TRUE(parse_flat(lines[2 * i], &step)) << lines[2 * i];
    ASSERT_TRUE(parse_flat(lines[2 * i + 1], &epoch)) << lines[2 * i + 1];
    float a = std::strtof(value(step, "loss").c_str(), nullptr);
    float b = std::strtof(value(epoch, "train_loss").c_str(), nullptr);
    EXPECT_EQ(a, losses[i]) << lines[2 * i];
    EXPECT_EQ(std::signbit(a), std::signbit(losses[i])) << lines[2 * i];
    EXPECT_EQ(b, losses[i]) << lines[2 * i + 1];
  }
}

TEST(Metrics, NonFiniteBecomesNull) {
  std::string path = tmp_path("metrics_nan.jsonl");
  Metrics m;
  metrics_open(&m, path.c_str(), 0, 1);
  metrics_step(&m, 1, 0, std::numeric_limits<float>::quiet_NaN());
  metrics_step(&m, 2, 0, std::numeric_limits<float>::infinity());
  metrics_step(&m, 3, 0, -std::numeric_limits<float>::infinity());
  metrics_epoch(&m, 0, std::numeric_limits<float>::quiet_NaN(), std::nan(""),
                std::numeric_limits<double>::infinity(), false);
  metrics_close(&m);
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  for (int i = 0; i < 3; i++) {
    Object o;
    ASSERT_TRUE(parse_flat(lines[i], &o)) << lines[i];
    EXPECT_EQ(value(o, "loss"), "null");
  }
  Object e;
  ASSERT_TRUE(parse_flat(lines[3], &e)) << lines[3];
  EXPECT_EQ(value(e, "train_loss"), "null");
  EXPECT_EQ(value(e, "samples_per_s"), "null");
  // A NaN accuracy is not "negative", so it is written, as null.
  EXPECT_EQ(value(e, "test_acc"), "null");
}

TEST(Metrics, LinesAreFlushedBeforeClose) {
  std::string path = tmp_path("metrics_flush.jsonl");
  Metrics m;
  metrics_open(&m, path.c_str(), 0, 1);
  metrics_step(&m, 1, 0, 0.5f);
  auto lines = read_lines(path);  // still open: the line must already be on disk
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind(R"({"type":"step","step":1,"epoch":0,"loss":0.5,"time":)", 0), 0u) << lines[0];
  metrics_close(&m);
}

TEST(Metrics, DisabledIsANoOp) {
  Metrics m;
  metrics_open(&m, nullptr, 0, 1);
  EXPECT_EQ(m.f, nullptr);
  metrics_step(&m, 1, 0, 1.0f);
  metrics_epoch(&m, 0, 1.0f, 0.5, 10.0, false);
  metrics_final(&m, 1, 1, 0);
  metrics_close(&m);
  EXPECT_EQ(m.f, nullptr);
}

TEST(Metrics, OpenFailureEndsTheJob) {
  EXPECT_EXIT(
      {
        Metrics m;
        metrics_open(&m, "/nonexistent_dir_ddp/m_{rank}.jsonl", 1, 2);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1), "cannot open '/nonexistent_dir_ddp/m_1.jsonl'");
}

// Above one rank, a path without {rank} would have every rank truncate and overwrite one file (a
// shared trace was invalid JSON): refused with status 2, naming the flag, the path and the ranks.
TEST(Metrics, SharedPathAtSeveralRanksIsRefused) {
  std::string plain = tmp_path("shared_metrics.jsonl");
  std::remove(plain.c_str());
  EXPECT_EXIT(
      {
        Metrics m;
        metrics_open(&m, plain.c_str(), 1, 4);
        std::exit(100);
      },
      ::testing::ExitedWithCode(2),
      "error: --metrics .*shared_metrics.jsonl: at 4 ranks the path must contain \\{rank\\} "
      "\\(e.g. .*shared_metrics_\\{rank\\}.jsonl\\)");
  FILE *g = fopen(plain.c_str(), "r");
  EXPECT_EQ(g, nullptr) << "the refused file must not be created";
  if (g) fclose(g);
  // One rank may use any path (rankfile.h's tests cover {rank} above one rank).
  Metrics m;
  metrics_open(&m, plain.c_str(), 0, 1);
  EXPECT_NE(m.f, nullptr);
  metrics_close(&m);
}

TEST(Metrics, EpochCarriesGflopsOnceFlopsAreCounted) {
  unsetenv("DDP_CPU_PEAK_GFLOPS");
  flops_set_device("cpu", false);
  Metrics m;
  metrics_open(&m, tmp_path("metrics_gflops_{rank}.jsonl").c_str(), 0, 1);
  ASSERT_NE(m.f, nullptr);
  m.t_epoch -= 100.0;  // as if the epoch took 100 s (the test reads no clock of its own)
  flops_count(5e12);   // 50 GFLOP/s
  metrics_epoch(&m, 0, 0.5f, 0.9, 1000.0, false);
  setenv("DDP_CPU_PEAK_GFLOPS", "100", 1);
  flops_set_device("cpu", false);
  m.t_epoch -= 100.0;
  flops_count(2e12);  // 20 GFLOP/s of 100: MFU 0.2
  metrics_epoch(&m, 1, 0.5f, 0.9, 1000.0, false);
  metrics_epoch(&m, 2, 0.5f, 0.9, 1000.0, false);  // nothing counted since: neither field
  metrics_close(&m);
  unsetenv("DDP_CPU_PEAK_GFLOPS");
  flops_set_device("cpu", false);

  auto lines = read_lines(tmp_path("metrics_gflops_0.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  std::vector<Object> objs(3);
  for (size_t i = 0; i < 3; i++) ASSERT_TRUE(parse_flat(lines[i], &objs[i])) << lines[i];
  using K = std::vector<std::string>;
  EXPECT_EQ(keys(objs[0]), (K{"type", "epoch", "train_loss", "test_acc", "samples_per_s", "gflops"}));
  EXPECT_NEAR(std::strtod(value(objs[0], "gflops").c_str(), nullptr), 50.0, 0.5);
  EXPECT_EQ(keys(objs[1]), (K{"type", "epoch", "train_loss", "test_acc", "samples_per_s", "gflops", "mfu"}));
  EXPECT_NEAR(std::strtod(value(objs[1], "mfu").c_str(), nullptr), 0.2, 0.002);
  EXPECT_EQ(keys(objs[2]), (K{"type", "epoch", "train_loss", "test_acc", "samples_per_s"}));
}

// A restarted attempt (scripts/restart.sh, torchrun) runs the same command line: it appends after the
// earlier attempt's lines (which a truncation wiped: issue Y4), marks where it starts, and its final
// object names the attempt and the step it started from. The first attempt creates the file anew.
TEST(Metrics, RestartedAttemptAppends) {
  std::string path = tmp_path("metrics_restart_0.jsonl");
  std::string tmpl = tmp_path("metrics_restart_{rank}.jsonl");
  Metrics m;
  setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  for (int pass = 0; pass < 2; pass++) {  // the second first attempt truncates the first one's lines
    metrics_open(&m, tmpl.c_str(), 0, 1);
    for (long long s = 1; s <= 4; s++) metrics_step(&m, s, 0, 1.0f);
    metrics_close(&m);  // killed: no final object
  }
  setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
  metrics_open(&m, tmpl.c_str(), 0, 1);  // resumed from a snapshot at step 2
  for (long long s = 3; s <= 6; s++) metrics_step(&m, s, 0, 0.5f);
  metrics_final(&m, 1, 6, 42);
  unsetenv("TORCHELASTIC_RESTART_COUNT");

  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u + 1u + 4u + 1u);
  std::vector<Object> objs(lines.size());
  for (size_t i = 0; i < lines.size(); i++) ASSERT_TRUE(parse_flat(lines[i], &objs[i])) << lines[i];
  for (size_t i = 0; i < 4; i++) EXPECT_EQ(value(objs[i], "step"), std::to_string(i + 1));
  using K = std::vector<std::string>;
  EXPECT_EQ(keys(objs[4]), (K{"type", "attempt"}));
  EXPECT_EQ(value(objs[4], "type"), "\"attempt\"");
  EXPECT_EQ(value(objs[4], "attempt"), "1");
  for (size_t i = 5; i < 9; i++) EXPECT_EQ(value(objs[i], "step"), std::to_string(i - 2));
  EXPECT_EQ(value(objs[9], "type"), "\"final\"");
  EXPECT_EQ(value(objs[9], "steps"), "6");
  EXPECT_EQ(value(objs[9], "attempt"), "1");
  EXPECT_EQ(value(objs[9], "start_step"), "2");
}

// A process that trains no step (resumed from a checkpoint that had finished) started at its final step.
TEST(Metrics, FinalWithoutStepsStartsAtTheEnd) {
  std::string path = tmp_path("metrics_nosteps.jsonl");
  Metrics m;
  metrics_open(&m, path.c_str(), 0, 1);
  metrics_final(&m, 2, 80, 1);
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  Object o;
  ASSERT_TRUE(parse_flat(lines[0], &o)) << lines[0];
  EXPECT_EQ(value(o, "start_step"), "80");
}
