// trace.h on the CPU: opening a trace has the model time its backward (a disabled one does not), and
// trace_backward writes one span per layer and one per all-reduce of the handles' array, for the
// first TRACE_STEPS steps only, into a complete JSON document.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "devmem.h"
#include "mlp.h"
#include "trace.h"

namespace {

int count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

class TraceCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    device_init(&c, DEVICE_CPU, 0);
    const int sizes[3] = {4, 3, 2};
    mlp_init(&m, &c, sizes, 2, 2, 1);
  }
  void TearDown() override {
    mlp_free(&m, &c);
    device_free(&c);
  }
  Ctx c = {};
  Mlp m = {};
};

}  // namespace

TEST_F(TraceCpu, DisabledLeavesTheModelUntimed) {
  Trace t;
  trace_open(&t, &c, &m, nullptr, 0, 2);
  EXPECT_FALSE(trace_on(&t));
  EXPECT_FALSE(m.timed);
  trace_backward(&t, &c, &m, nullptr, 0, 0);  // returns at once
  trace_close(&t, &c);
}

TEST_F(TraceCpu, OneSpanPerLayerAndPerAllReduceForTheFirstSteps) {
  std::string path = std::string(DDP_TEST_TMPDIR) + "/trace_{rank}.json";
  Trace t;
  trace_open(&t, &c, &m, path.c_str(), 0, 1);
  ASSERT_TRUE(trace_on(&t));
  EXPECT_TRUE(m.timed);  // so that backward records the events the spans are made of
  const float x[4] = {1, 2, 3, 4};
  const int y[1] = {1};
  DistWork work[2] = {};  // two buckets' all-reduces: 6 and 11 floats
  for (int i = 0; i < 2; i++) {
    dev_event_init(&c, &work[i].start);
    dev_event_init(&c, &work[i].end);
    work[i].n = i == 0 ? 6 : 11;
    work[i].what = "all-reduce";  // as dist_all_reduce_async() sets it
  }
  for (int step = 0; step < TRACE_STEPS + 3; step++) {
    mlp_zero_grad(&m);
    mlp_forward(&m, &c, x, 1);
    mlp_loss(&m, &c, y, 1);
    mlp_backward(&m, &c, x, 1, 1.0f, nullptr, nullptr);
    for (DistWork &w : work) {
      dev_event_record(&c, &w.start, nullptr);
      dev_event_record(&c, &w.end, nullptr);
    }
    trace_backward(&t, &c, &m, work, 2, step);
  }
  trace_close(&t, &c);
  for (DistWork &w : work) {
    dev_event_free(&c, &w.end);
    dev_event_free(&c, &w.start);
  }
  std::ifstream in(std::string(DDP_TEST_TMPDIR) + "/trace_0.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  EXPECT_EQ(s.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", 0), 0u) << s.substr(0, 80);
  EXPECT_EQ(s.substr(s.size() - 4), "\n]}\n");
  EXPECT_EQ(count(s, "\"ph\": \"X\""), TRACE_STEPS * 4);  // 2 layers + 2 all-reduces per step
  EXPECT_EQ(count(s, "\"name\": \"backward layer 1\""), TRACE_STEPS);
  EXPECT_EQ(count(s, "\"name\": \"all-reduce bucket 0: 6 floats"), TRACE_STEPS);
  EXPECT_EQ(count(s, "\"name\": \"all-reduce bucket 1: 11 floats"), TRACE_STEPS);
  EXPECT_EQ(count(s, "\"args\": {\"step\": " + std::to_string(TRACE_STEPS - 1) + "}"), 4);
  EXPECT_EQ(count(s, "\"args\": {\"step\": " + std::to_string(TRACE_STEPS) + "}"), 0);
}

// A restarted attempt (TORCHELASTIC_RESTART_COUNT > 0) writes its trace to a name of its own, with
// .attemptA before the extension; the earlier attempt's file stays as it was (a restart truncated it:
// issue Y4).
TEST_F(TraceCpu, RestartedAttemptWritesAFileOfItsOwn) {
  std::string dir = std::string(DDP_TEST_TMPDIR);
  {
    std::ofstream earlier(dir + "/trace_restart_0.json");
    earlier << "attempt 0's trace";
  }
  std::remove((dir + "/trace_restart_0.attempt2.json").c_str());
  setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  Trace t;
  trace_open(&t, &c, &m, (dir + "/trace_restart_{rank}.json").c_str(), 0, 1);
  unsetenv("TORCHELASTIC_RESTART_COUNT");
  ASSERT_TRUE(trace_on(&t));
  trace_close(&t, &c);
  std::ifstream in(dir + "/trace_restart_0.json"), again(dir + "/trace_restart_0.attempt2.json");
  std::stringstream a, b;
  a << in.rdbuf();
  b << again.rdbuf();
  EXPECT_EQ(a.str(), "attempt 0's trace");
  EXPECT_EQ(b.str().rfind("{\"displayTimeUnit\"", 0), 0u) << b.str();
}
