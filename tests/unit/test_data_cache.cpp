// data_cache.h: the test suite's cache of generated datasets (DDP_SYNTHETIC_CACHE): a dataset read
// back from it is the generated one bit for bit, and a torn or corrupt file, another count, or an
// unset variable is a miss that leaves the data to be generated.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "data.h"
#include "data_cache.h"

namespace {
class DataCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::string(DDP_TEST_TMPDIR) + "/data_cache_" + std::to_string(::getpid());
    setenv("DDP_SYNTHETIC_CACHE", dir.c_str(), 1);
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    unsetenv("DDP_SYNTHETIC_CACHE");
  }
  std::string file(const char *key) const { return dir + "/" + key + ".bin"; }
  std::string dir;
};

TEST_F(DataCache, SyntheticDataReadBackIsTheGeneratedDataBitForBit) {
  Dataset generated, cached;
  dataset_synthetic(&generated, 300, 784, 10, 7, 1);  // a miss: generated, then stored
  dataset_synthetic(&cached, 300, 784, 10, 7, 1);     // a hit
  EXPECT_EQ(generated.crc, cached.crc);
  EXPECT_EQ(std::memcmp(generated.x, cached.x, (size_t)300 * 784 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(generated.y, cached.y, 300 * sizeof *generated.y), 0);
  unsetenv("DDP_SYNTHETIC_CACHE");
  Dataset fresh;
  dataset_synthetic(&fresh, 300, 784, 10, 7, 1);
  EXPECT_EQ(std::memcmp(generated.x, fresh.x, (size_t)300 * 784 * sizeof(float)), 0);
  dataset_free(&generated);
  dataset_free(&cached);
  dataset_free(&fresh);
}

TEST_F(DataCache, ACorruptFileOrAnotherCountIsAMiss) {
  Dataset d;
  dataset_synthetic(&d, 10, 100, 10, 1, 0);  // 1000 floats and their CRC-32, the library's way
  std::vector<float> back(1000);
  uint32_t crc = 0;
  data_cache_store("k", d.x, 1000, d.crc + 1);  // a wrong CRC recorded: never read back
  EXPECT_FALSE(data_cache_load("k", back.data(), 1000, &crc)) << "a wrong CRC";
  data_cache_store("k", d.x, 1000, d.crc);
  ASSERT_TRUE(data_cache_load("k", back.data(), 1000, &crc));
  EXPECT_EQ(crc, d.crc);
  EXPECT_EQ(std::memcmp(back.data(), d.x, 1000 * sizeof(float)), 0);
  EXPECT_FALSE(data_cache_load("k", back.data(), 999, &crc)) << "another count";
  FILE *f = std::fopen(file("k").c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 100, SEEK_SET);
  std::fputc(0x55, f);  // one byte of the floats changed
  std::fclose(f);
  EXPECT_FALSE(data_cache_load("k", back.data(), 1000, &crc)) << "a corrupt file";
  dataset_free(&d);
}

TEST_F(DataCache, WithoutTheVariableNothingIsWritten) {
  unsetenv("DDP_SYNTHETIC_CACHE");
  std::vector<float> x(10, 1.0f);
  uint32_t crc = 0;
  data_cache_store("k", x.data(), x.size(), 0);
  EXPECT_FALSE(data_cache_load("k", x.data(), x.size(), &crc));
  FILE *f = std::fopen(file("k").c_str(), "rb");
  EXPECT_EQ(f, nullptr);
  if (f) std::fclose(f);
}
}  // namespace
