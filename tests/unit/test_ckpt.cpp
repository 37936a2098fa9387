// Checkpoint format: round trip, and every kind of damage is caught and named precisely.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>
#include <vector>

#include "ckpt.h"
#include "ckpt_model.h"
#include "test_files.h"

namespace {

std::string tmp_path(const std::string &name) { return std::string(DDP_TEST_TMPDIR) + "/" + name; }

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void put_u32(std::vector<unsigned char> &b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; i++) b[off + i] = (unsigned char)(v >> (8 * i));
}

// Recomputes the trailing CRC so that only a deliberate edit is wrong.
void fix_crc(std::vector<unsigned char> &b) {
  put_u32(b, b.size() - 4, crc32_reference(b.data(), b.size() - 4));
}

// A small model 5-4-3 with distinctive values (including a negative zero and a denormal).
struct Fixture {
  CkptMeta meta{};
  std::vector<float> params, opt;
  Fixture(int in = 5, int hid = 4, int out = 3) {
    meta.epoch = 2;
    meta.epoch_step = 17;
    meta.step = 0x1234567890ull;
    meta.seed = 0xfedcba9876543210ull;
    meta.world_size = 4;
    meta.optim = 1;
    meta.optim_steps = 99;
    meta.n_layers = 2;
    meta.sizes[0] = in;
    meta.sizes[1] = hid;
    meta.sizes[2] = out;
    meta.data = DataId{2, 256, 100, (uint32_t)in, (uint32_t)out, 0xabcdef01u, 0x5eedf00du};
    meta.batch_size = 3;  // 17 steps of 3 x 2 samples into the epoch
    meta.grad_accum = 2;
    meta.drop_last = 1;
    meta.epoch_samples = 102;
    size_t n = ckpt_param_count(&meta);
    params.resize(n);
    opt.resize(n);
    for (size_t i = 0; i < n; i++) {
      params[i] = 0.001f * (float)i - 0.37f;
      opt[i] = -1.0f / (float)(i + 3);
    }
    params[0] = -0.0f;
    opt[1] = 1e-41f;
  }
  int save(const std::string &path, std::string *msg = nullptr) const {
    char err[512] = "";
    int rc = ckpt_save(path.c_str(), &meta, params.data(), opt.data(), err, sizeof err);
    if (msg) *msg = err;
    return rc;
  }
  // Loads into fresh buffers with this fixture's shape as the expectation.
  int load(const std::string &path, std::string *msg, CkptMeta *out = nullptr,
           std::vector<float> *p = nullptr, std::vector<float> *o = nullptr) const {
    CkptMeta m{};
    std::vector<float> pp(params.size()), oo(opt.size());
    char err[512] = "";
    int rc = ckpt_load(path.c_str(), &meta, &m, pp.data(), oo.data(), err, sizeof err);
    *msg = err;
    if (out) *out = m;
    if (p) *p = pp;
    if (o) *o = oo;
    return rc;
  }
};

// Header size of the 2-layer fixture: 56 + 4 * 3, then the data set's identity (6 x u32), then how
// the epoch is cut into steps (4 x u32, version 3), then the pixels CRC (u32, version 4), then the
// global batch and the epoch's world size (2 x u32, version 5).
constexpr size_t kHeader = 120;
// The CRC of the fixture's version 5 file (Python's zlib.crc32 of its bytes agrees): the format,
// CRC included, must not change without a new version.
constexpr uint32_t kFixtureCrc = 0x3563f1cdu;

}  // namespace

TEST(Ckpt, ParamCount) {
  CkptMeta m{};
  m.n_layers = 3;
  m.sizes[0] = 784;
  m.sizes[1] = 1024;
  m.sizes[2] = 1024;
  m.sizes[3] = 10;
  EXPECT_EQ(ckpt_param_count(&m), 784u * 1024 + 1024 + 1024u * 1024 + 1024 + 1024u * 10 + 10);
  m.n_layers = 0;
  EXPECT_EQ(ckpt_param_count(&m), 0u);
  m.n_layers = MLP_MAX_LAYERS + 1;
  EXPECT_EQ(ckpt_param_count(&m), 0u);
  m.n_layers = 2;
  m.sizes[1] = 0;
  EXPECT_EQ(ckpt_param_count(&m), 0u);
}

TEST(Ckpt, RoundTripIsBitExact) {
  Fixture fx;
  std::string path = tmp_path("ckpt_roundtrip.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  EXPECT_FALSE(exists(path + ".tmp." + std::to_string(getpid())));
  EXPECT_EQ(read_bytes(path).size(), kHeader + 2 * fx.params.size() * 4 + 4);

  CkptMeta m;
  std::vector<float> p, o;
  ASSERT_EQ(fx.load(path, &msg, &m, &p, &o), 0) << msg;
  EXPECT_EQ(m.epoch, fx.meta.epoch);
  EXPECT_EQ(m.epoch_step, fx.meta.epoch_step);
  EXPECT_EQ(m.step, fx.meta.step);
  EXPECT_EQ(m.seed, fx.meta.seed);
  EXPECT_EQ(m.world_size, fx.meta.world_size);
  EXPECT_EQ(m.optim, fx.meta.optim);
  EXPECT_EQ(m.optim_steps, fx.meta.optim_steps);
  EXPECT_EQ(m.version, (uint32_t)CKPT_VERSION);
  EXPECT_EQ(m.batch_size, 3u);
  EXPECT_EQ(m.grad_accum, 2u);
  EXPECT_EQ(m.drop_last, 1u);
  EXPECT_EQ(m.epoch_samples, 102u);
  ASSERT_EQ(m.n_layers, 2);
  for (int l = 0; l <= 2; l++) EXPECT_EQ(m.sizes[l], fx.meta.sizes[l]);
  ASSERT_EQ(p.size(), fx.params.size());
  EXPECT_EQ(std::memcmp(p.data(), fx.params.data(), p.size() * 4), 0);
  EXPECT_EQ(std::memcmp(o.data(), fx.opt.data(), o.size() * 4), 0);
}

// A saver killed mid-write leaves PATH.tmp.PID behind; the next successful save removes those of
// processes that are gone and older than 5 minutes, and no other file.
TEST(Ckpt, SaveRemovesStaleTemporaryFiles) {
  Fixture fx;
  std::string path = tmp_path("ckpt_stale.bin"), msg;
  pid_t dead = fork();  // a process id that is surely gone once reaped
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string d = std::to_string(dead), alive = std::to_string(getppid());
  const std::vector<std::string> old_dead = {path + ".tmp." + d},
                                 kept = {path + ".tmp." + alive,             // its process runs
                                         path + ".tmp.x" + d,                // not a PID
                                         tmp_path("other.bin.tmp." + d)};    // another checkpoint's
  std::string young_dead = path + ".tmp." + std::to_string(dead + 1000000);  // surely no such PID
  for (const std::string &f : old_dead) write_bytes(f, {1, 2, 3});
  for (const std::string &f : kept) write_bytes(f, {1, 2, 3});
  write_bytes(young_dead, {1, 2, 3});
  struct utimbuf hour_ago = {time(nullptr) - 3600, time(nullptr) - 3600};
  for (const std::string &f : old_dead) ASSERT_EQ(utime(f.c_str(), &hour_ago), 0);
  for (const std::string &f : kept) ASSERT_EQ(utime(f.c_str(), &hour_ago), 0);
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  for (const std::string &f : old_dead) EXPECT_FALSE(exists(f)) << f;
  for (const std::string &f : kept) EXPECT_TRUE(exists(f)) << f;
  EXPECT_TRUE(exists(young_dead)) << "a recent file may belong to a saver on another node";
  for (const std::string &f : kept) std::remove(f.c_str());
  std::remove(young_dead.c_str());
}

TEST(Ckpt, LayoutIsLittleEndianAsDocumented) {
  Fixture fx;
  std::string path = tmp_path("ckpt_layout.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  ASSERT_GE(b.size(), kHeader);
  EXPECT_EQ(std::memcmp(b.data(), "DDPCKPT\0", 8), 0);
  auto u32 = [&](size_t o) {
    return (uint32_t)b[o] | (uint32_t)b[o + 1] << 8 | (uint32_t)b[o + 2] << 16 | (uint32_t)b[o + 3] << 24;
  };
  EXPECT_EQ(u32(8), (uint32_t)CKPT_VERSION);
  EXPECT_EQ(u32(12), kHeader);
  EXPECT_EQ(u32(16), 2u);
  EXPECT_EQ(u32(20), 17u);
  EXPECT_EQ(u32(24), 0x34567890u);
  EXPECT_EQ(u32(28), 0x12u);
  EXPECT_EQ(u32(32), 0x76543210u);
  EXPECT_EQ(u32(36), 0xfedcba98u);
  EXPECT_EQ(u32(40), 4u);
  EXPECT_EQ(u32(44), 1u);
  EXPECT_EQ(u32(48), 99u);
  EXPECT_EQ(u32(52), 2u);
  EXPECT_EQ(u32(56), 5u);
  EXPECT_EQ(u32(60), 4u);
  EXPECT_EQ(u32(64), 3u);
  EXPECT_EQ(u32(68), 2u);  // DataId: kind, train and test samples, features, classes, labels CRC
  EXPECT_EQ(u32(72), 256u);
  EXPECT_EQ(u32(76), 100u);
  EXPECT_EQ(u32(80), 5u);
  EXPECT_EQ(u32(84), 3u);
  EXPECT_EQ(u32(88), 0xabcdef01u);
  EXPECT_EQ(u32(92), 3u);  // batch size, accumulation, drop_last, samples of the epoch consumed
  EXPECT_EQ(u32(96), 2u);
  EXPECT_EQ(u32(100), 1u);
  EXPECT_EQ(u32(104), 102u);
  EXPECT_EQ(u32(108), 0x5eedf00du);  // version 4: the DataId's pixels CRC
  EXPECT_EQ(u32(112), 24u);          // version 5: the global batch, 3 x 2 x 4 ranks (the meta leaves it 0)
  EXPECT_EQ(u32(116), 4u);           // and the world size the epoch was laid out for
  float second;
  uint32_t bits = u32(kHeader + 4);
  std::memcpy(&second, &bits, 4);
  EXPECT_EQ(second, fx.params[1]);
  EXPECT_EQ(u32(b.size() - 4), crc32_reference(b.data(), b.size() - 4));
}

// The trailing CRC is the standard CRC-32, the one docs/load_checkpoint.py checks with Python's
// zlib.crc32: the reference above gives the standard check value, and a saved file's CRC is a
// constant that any change of the CRC-32 or of the layout would change.
TEST(Ckpt, CrcIsTheStandardCrc32) {
  const char check[] = "123456789";
  EXPECT_EQ(crc32_reference(reinterpret_cast<const unsigned char *>(check), 9), 0xCBF43926u);
  Fixture fx;
  std::string path = tmp_path("ckpt_crc.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  ASSERT_GE(b.size(), 4u);
  uint32_t stored = (uint32_t)b[b.size() - 4] | (uint32_t)b[b.size() - 3] << 8 |
                    (uint32_t)b[b.size() - 2] << 16 | (uint32_t)b[b.size() - 1] << 24;
  EXPECT_EQ(stored, crc32_reference(b.data(), b.size() - 4));
  EXPECT_EQ(stored, kFixtureCrc) << std::hex << "0x" << stored;
}

TEST(Ckpt, MissingFile) {
  Fixture fx;
  std::string path = tmp_path("ckpt_does_not_exist.bin"), msg;
  std::remove(path.c_str());
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Ckpt, TruncationAtSeveralOffsets) {
  Fixture fx;
  std::string good = tmp_path("ckpt_trunc_src.bin"), bad = tmp_path("ckpt_trunc.bin"), msg;
  ASSERT_EQ(fx.save(good, &msg), 0) << msg;
  auto b = read_bytes(good);
  size_t n = fx.params.size();
  struct Case {
    size_t len;
    const char *expect;
  } cases[] = {
      {0, "too short for a header"},
      {30, "too short for a header"},                 // inside the fixed header
      {60, "header needs 120 bytes, file has 60"},    // inside the layer sizes
      {80, "header needs 120 bytes, file has 80"},    // inside the data set's identity
      {100, "header needs 120 bytes, file has 100"},  // inside the step fields
      {110, "header needs 120 bytes, file has 110"},  // inside the pixels CRC
      {116, "header needs 120 bytes, file has 116"},  // inside the global batch fields
      {kHeader, "truncated: expected"},               // no arrays at all
      {kHeader + 4 * n / 2, "truncated: expected"},   // inside params
      {kHeader + 4 * n + 12, "truncated: expected"},  // inside the optimizer state
      {b.size() - 4, "truncated: expected"},          // missing CRC
      {b.size() - 1, "truncated: expected"},          // partial CRC
  };
  for (const Case &c : cases) {
    write_bytes(bad, std::vector<unsigned char>(b.begin(), b.begin() + (long)c.len));
    EXPECT_EQ(fx.load(bad, &msg), -1) << "length " << c.len;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "length " << c.len << ": " << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  }
  // The truncation message gives both sizes.
  write_bytes(bad, std::vector<unsigned char>(b.begin(), b.end() - 4));
  fx.load(bad, &msg);
  EXPECT_NE(
      msg.find("expected " + std::to_string(b.size()) + " bytes, file has " + std::to_string(b.size() - 4)),
      std::string::npos)
      << msg;
}

TEST(Ckpt, TrailingBytesAreRejected) {
  Fixture fx;
  std::string path = tmp_path("ckpt_trailing.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  b.push_back(0);
  write_bytes(path, b);
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("wrong size"), std::string::npos) << msg;
}

TEST(Ckpt, BitFlipsFailTheCrc) {
  Fixture fx;
  std::string good = tmp_path("ckpt_flip_src.bin"), bad = tmp_path("ckpt_flip.bin"), msg;
  ASSERT_EQ(fx.save(good, &msg), 0) << msg;
  auto b = read_bytes(good);
  size_t offsets[] = {
      kHeader + 9,   // params
      b.size() - 7,  // optimizer state
      33,            // header: the seed
      17,            // header: the epoch
      b.size() - 2,  // the CRC itself
  };
  for (size_t off : offsets) {
    auto c = b;
    c[off] ^= 0x10;
    write_bytes(bad, c);
    EXPECT_EQ(fx.load(bad, &msg), -1) << "offset " << off;
    EXPECT_NE(msg.find("CRC mismatch: file is corrupt (stored 0x"), std::string::npos)
        << "offset " << off << ": " << msg;
    EXPECT_NE(msg.find(", computed 0x"), std::string::npos) << msg;
  }
}

TEST(Ckpt, WrongVersion) {
  Fixture fx;
  std::string path = tmp_path("ckpt_version.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  put_u32(b, 8, 7);
  fix_crc(b);  // only the version is wrong
  write_bytes(path, b);
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("format version 7, this program reads versions 1 to 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Ckpt, WrongMagic) {
  Fixture fx;
  std::string path = tmp_path("ckpt_magic.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  std::memcpy(b.data(), "PK\x03\x04xxxx", 8);
  fix_crc(b);
  write_bytes(path, b);
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("not a ddp-in-c checkpoint (magic 50 4b 03 04"), std::string::npos) << msg;
}

TEST(Ckpt, InconsistentHeaderSize) {
  Fixture fx;
  std::string path = tmp_path("ckpt_hsize.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  put_u32(b, 12, 100);
  fix_crc(b);
  write_bytes(path, b);
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("header size 100 does not match 2 layers"), std::string::npos) << msg;
}

TEST(Ckpt, LayerCountOutOfRange) {
  Fixture fx;
  std::string path = tmp_path("ckpt_layers.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  put_u32(b, 52, 0);
  put_u32(b, 12, 56 + 4 + 24 + 16 + 4 + 8);  // consistent with 0 layers, so the range check is what fails
  fix_crc(b);
  write_bytes(path, b);
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("0 layers, out of range"), std::string::npos) << msg;
}

TEST(Ckpt, ShapeMismatchListsBothShapes) {
  Fixture saved(784, 1024, 10);
  saved.meta.n_layers = 3;
  saved.meta.sizes[2] = 1024;
  saved.meta.sizes[3] = 10;
  saved.params.assign(ckpt_param_count(&saved.meta), 0.5f);
  saved.opt.assign(saved.params.size(), 0.0f);
  std::string path = tmp_path("ckpt_shape.bin"), msg;
  ASSERT_EQ(saved.save(path, &msg), 0) << msg;

  Fixture run(784, 512, 10);
  std::vector<float> p(saved.params.size()), o(saved.params.size());  // big enough either way
  CkptMeta m{};
  char err[512] = "";
  EXPECT_EQ(ckpt_load(path.c_str(), &run.meta, &m, p.data(), o.data(), err, sizeof err), -1);
  EXPECT_NE(std::string(err).find("model shape mismatch: checkpoint has 784-1024-1024-10, this run "
                                  "has 784-512-10; pass the same --hidden"),
            std::string::npos)
      << err;
}

TEST(Ckpt, SaveIntoMissingDirectoryNamesIt) {
  Fixture fx;
  std::string dir = tmp_path("no_such_dir_ckpt"), msg;
  rmdir(dir.c_str());
  EXPECT_EQ(fx.save(dir + "/model.bin", &msg), -1);
  EXPECT_NE(msg.find("directory '" + dir + "' does not exist"), std::string::npos) << msg;
  EXPECT_FALSE(exists(dir));
}

TEST(Ckpt, SaveOverExistingFile) {
  Fixture fx;
  std::string path = tmp_path("ckpt_overwrite.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  fx.meta.epoch = 3;
  fx.params[2] = 42.0f;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  EXPECT_FALSE(exists(path + ".tmp." + std::to_string(getpid())));
  CkptMeta m;
  std::vector<float> p, o;
  ASSERT_EQ(fx.load(path, &msg, &m, &p, &o), 0) << msg;
  EXPECT_EQ(m.epoch, 3u);
  EXPECT_EQ(p[2], 42.0f);
}

TEST(Ckpt, SaveFailureLeavesPreviousFileIntact) {
  Fixture fx;
  std::string path = tmp_path("ckpt_keep.bin"), tmp = path + ".tmp." + std::to_string(getpid()), msg;
  rmdir(tmp.c_str());
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto before = read_bytes(path);

  // A directory in the way of PATH.tmp makes the save fail (this works even as root).
  ASSERT_EQ(mkdir(tmp.c_str(), 0755), 0);
  Fixture other;
  other.meta.epoch = 9;
  other.params.assign(other.params.size(), 1.0f);
  EXPECT_EQ(other.save(path, &msg), -1);
  EXPECT_NE(msg.find(tmp), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);
  rmdir(tmp.c_str());

  // An invalid shape fails before touching anything.
  other.meta.n_layers = 0;
  EXPECT_EQ(other.save(path, &msg), -1);
  EXPECT_NE(msg.find("invalid model shape"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(exists(tmp));

  CkptMeta m;
  ASSERT_EQ(fx.load(path, &msg, &m), 0) << msg;
  EXPECT_EQ(m.epoch, fx.meta.epoch);
}

// A version 1 file (written before checkpoints recorded their data) still loads, with no DataId.
TEST(Ckpt, VersionOneStillLoads) {
  Fixture fx;
  std::string path = tmp_path("ckpt_v1.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  b.erase(b.begin() + 68, b.begin() + 120);  // version 1 has no DataId, step fields, pixels CRC, batch
  put_u32(b, 8, 1);
  put_u32(b, 12, 68);
  fix_crc(b);
  write_bytes(path, b);
  CkptMeta m{};
  std::vector<float> p, o;
  ASSERT_EQ(fx.load(path, &msg, &m, &p, &o), 0) << msg;
  EXPECT_EQ(m.data.n_train, 0u);
  EXPECT_EQ(m.step, fx.meta.step);
  EXPECT_EQ(m.version, 1u);
  EXPECT_EQ(m.batch_size, 0u);  // not recorded: ckpt_load_model refuses it inside an epoch
  EXPECT_EQ(std::memcmp(p.data(), fx.params.data(), 4 * p.size()), 0);
  EXPECT_EQ(std::memcmp(o.data(), fx.opt.data(), 4 * o.size()), 0);
}

// A version 2 file (the DataId, but not how the epoch was cut into steps) still loads: its step
// fields read as 0, "not recorded".
TEST(Ckpt, VersionTwoStillLoads) {
  Fixture fx;
  std::string path = tmp_path("ckpt_v2.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  b.erase(b.begin() + 92, b.begin() + 120);
  put_u32(b, 8, 2);
  put_u32(b, 12, 92);
  fix_crc(b);
  write_bytes(path, b);
  CkptMeta m{};
  std::vector<float> p;
  ASSERT_EQ(fx.load(path, &msg, &m, &p), 0) << msg;
  EXPECT_EQ(m.version, 2u);
  EXPECT_EQ(m.data.labels_crc, 0xabcdef01u);
  EXPECT_EQ(m.epoch_step, 17u);
  EXPECT_EQ(m.batch_size, 0u);
  EXPECT_EQ(m.grad_accum, 0u);
  EXPECT_EQ(m.epoch_samples, 0u);
  EXPECT_EQ(m.data.pixels_crc, 0u);
  EXPECT_EQ(std::memcmp(p.data(), fx.params.data(), 4 * p.size()), 0);
}

// A version 3 file (no pixels CRC) still loads, and resumes on other pixels: it cannot tell them
// apart. Other labels are still refused, and the message says the file did not record its pixels.
TEST(Ckpt, VersionThreeStillLoadsWithoutThePixelCheck) {
  Fixture fx;
  std::string path = tmp_path("ckpt_v3.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  b.erase(b.begin() + 108, b.begin() + 120);
  put_u32(b, 8, 3);
  put_u32(b, 12, 108);
  fix_crc(b);
  write_bytes(path, b);
  Fixture other_pixels;
  other_pixels.meta.data.pixels_crc ^= 1;
  CkptMeta m{};
  ASSERT_EQ(other_pixels.load(path, &msg, &m), 0) << msg;
  EXPECT_EQ(m.version, 3u);
  EXPECT_EQ(m.data.pixels_crc, 0u);
  EXPECT_EQ(m.epoch_samples, 102u);
  EXPECT_EQ(m.global_batch, 24u);  // before version 5: its own run's, batch x accumulation x world size
  EXPECT_EQ(m.epoch_world, 4u);
  Fixture other_labels;
  other_labels.meta.data.labels_crc ^= 1;
  EXPECT_EQ(other_labels.load(path, &msg), -1);
  EXPECT_NE(msg.find("labels crc abcdef01, pixels not recorded (format version 3))"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("labels crc abcdef00, pixels crc 5eedf00d"), std::string::npos) << msg;
}

// A version 4 file (no global batch) still loads: its global batch and epoch world size are its own
// run's, which kept its world size.
TEST(Ckpt, VersionFourStillLoadsWithItsRunsGlobalBatch) {
  Fixture fx;
  std::string path = tmp_path("ckpt_v4.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto b = read_bytes(path);
  b.erase(b.begin() + 112, b.begin() + 120);
  put_u32(b, 8, 4);
  put_u32(b, 12, 112);
  fix_crc(b);
  write_bytes(path, b);
  CkptMeta m{};
  ASSERT_EQ(fx.load(path, &msg, &m), 0) << msg;
  EXPECT_EQ(m.version, 4u);
  EXPECT_EQ(m.data.pixels_crc, 0x5eedf00du);
  EXPECT_EQ(m.global_batch, 24u);
  EXPECT_EQ(m.epoch_world, 4u);
}

// A run that changed its world size (step 09) records its own global batch and the epoch's world size,
// which need not be batch x accumulation x world size; a zero in either is refused as corrupt.
TEST(Ckpt, GlobalBatchOfAChangedWorldRoundTrips) {
  Fixture fx;
  fx.meta.world_size = 3;  // resumed at 3 ranks: G = 24 from the 4-rank run, the epoch laid out for 4
  fx.meta.global_batch = 24;
  fx.meta.epoch_world = 4;
  std::string path = tmp_path("ckpt_v5.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  CkptMeta m{};
  Fixture at3;
  at3.meta.world_size = 3;
  ASSERT_EQ(at3.load(path, &msg, &m), 0) << msg;
  EXPECT_EQ(m.world_size, 3u);
  EXPECT_EQ(m.global_batch, 24u);
  EXPECT_EQ(m.epoch_world, 4u);
  for (size_t at : {112, 116}) {
    auto b = read_bytes(path);
    put_u32(b, at, 0);
    fix_crc(b);
    std::string bad = tmp_path("ckpt_v5_zero.bin");
    write_bytes(bad, b);
    EXPECT_EQ(at3.load(bad, &msg), -1) << at;
    EXPECT_NE(msg.find("is corrupt: global batch"), std::string::npos) << msg;
  }
}

// Version 3's step fields must be consistent: a batch or accumulation of 0, a drop_last other than
// 0 or 1, or consumed samples other than steps x batch x accumulation are refused as corrupt.
TEST(Ckpt, LoadRefusesInconsistentStepFields) {
  Fixture fx;
  std::string path = tmp_path("ckpt_stepfields.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto good = read_bytes(path);
  struct Case {
    size_t offset;
    uint32_t value;
    const char *says;
  } cases[] = {
      {92, 0, "is corrupt: --batch_size 0, --grad_accum 2, --drop_last 1"},
      {96, 0, "is corrupt: --batch_size 3, --grad_accum 0, --drop_last 1"},
      {100, 2, "is corrupt: --batch_size 3, --grad_accum 2, --drop_last 2"},
      {104, 101, "is corrupt: 101 samples consumed in the epoch, but 17 steps of batch 3 x 2 make 102"},
  };
  for (const Case &c : cases) {
    auto b = good;
    put_u32(b, c.offset, c.value);
    fix_crc(b);
    write_bytes(path, b);
    EXPECT_EQ(fx.load(path, &msg), -1) << c.says;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
  write_bytes(path, good);
  EXPECT_EQ(fx.load(path, &msg), 0) << msg;
}

// Resuming on other data is refused, and the message names both data sets.
TEST(Ckpt, OtherDataIsRefused) {
  Fixture saved;
  std::string path = tmp_path("ckpt_data.bin"), msg;
  ASSERT_EQ(saved.save(path, &msg), 0) << msg;
  struct Case {
    DataId data;
    const char *expect;
  } cases[] = {
      {{0, 256, 100, 5, 3, 0xabcdef01u, 0x5eedf00du}, "fashion-mnist: 256 train"},  // another kind
      {{2, 255, 100, 5, 3, 0xabcdef01u, 0x5eedf00du}, "255 train"},                 // another --dataset_size
      {{2, 256, 100, 5, 3, 0xabcdef02u, 0x5eedf00du}, "labels crc abcdef02"},       // other labels
      {{2, 256, 100, 5, 3, 0xabcdef01u, 0x5eedf00cu}, "pixels crc 5eedf00c"},  // other pixels, same labels
  };
  for (const Case &c : cases) {
    Fixture run;
    run.meta.data = c.data;
    EXPECT_EQ(run.load(path, &msg), -1);
    EXPECT_NE(msg.find("was trained on other data (synthetic: 256 train / 100 test samples of 5 "
                       "features, 3 classes, labels crc abcdef01, pixels crc 5eedf00d)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_NE(msg.find("--dataset_size"), std::string::npos) << msg;
  }
}

// ---- non-finite values: a diverged run never replaces a good checkpoint, and is never resumed ----

TEST(Ckpt, SaveRefusesNonFiniteValuesAndKeepsThePreviousFile) {
  Fixture fx;
  std::string path = tmp_path("ckpt_nonfinite.bin"), tmp = path + ".tmp." + std::to_string(getpid());
  std::string msg, n = std::to_string(fx.params.size());
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto before = read_bytes(path);

  Fixture nan_params;
  nan_params.params[5] = std::nanf("");
  nan_params.params[9] = INFINITY;  // only the first bad index is named
  EXPECT_EQ(nan_params.save(path, &msg), -1);
  EXPECT_NE(msg.find("cannot save checkpoint '" + path + "': parameter 5 of " + n +
                     " is nan: training diverged (try a smaller --lr); the previous checkpoint "
                     "is kept"),
            std::string::npos)
      << msg;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(exists(tmp));

  Fixture inf_state;
  inf_state.opt[3] = -INFINITY;
  EXPECT_EQ(inf_state.save(path, &msg), -1);
  EXPECT_NE(msg.find("optimizer state (momentum) value 3 of " + n + " is -inf"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(exists(tmp));
}

// A checkpoint with NaN or infinite values and a valid CRC (written by another tool, or before saves
// refused them) is refused by the loader, naming the array and the first bad index.
TEST(Ckpt, LoadRefusesNonFiniteValues) {
  Fixture fx;
  std::string path = tmp_path("ckpt_nonfinite_load.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto good = read_bytes(path);
  size_t n = fx.params.size();
  struct Case {
    size_t offset;
    uint32_t bits;
    std::string says;
  } cases[] = {
      {kHeader + 4 * 2, 0x7fc00000u,
       "holds a non-finite parameter: index 2 of " + std::to_string(n) + " is nan"},
      {kHeader + 4 * (n - 1), 0xff800000u, "non-finite parameter: index " + std::to_string(n - 1)},
      {kHeader + 4 * n + 4 * 1, 0x7f800000u,
       "non-finite optimizer state (momentum) value: index 1 "
       "of " +
           std::to_string(n) + " is inf"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.says);
    auto b = good;
    put_u32(b, c.offset, c.bits);
    fix_crc(b);
    write_bytes(path, b);
    EXPECT_EQ(fx.load(path, &msg), -1);
    EXPECT_NE(msg.find("checkpoint '" + path + "' holds a non-finite"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

// Counters a run cannot have written: refused, never wrapped into a negative int by the trainer.
TEST(Ckpt, LoadRefusesImpossibleCounters) {
  Fixture fx;
  std::string path = tmp_path("ckpt_counters.bin"), msg;
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  auto good = read_bytes(path);
  auto edit = [&](size_t offset, uint64_t v, int bytes) {
    auto b = good;
    for (int i = 0; i < bytes; i++) b.at(offset + i) = (unsigned char)(v >> (8 * i));
    fix_crc(b);
    write_bytes(path, b);
  };
  edit(16, 0x80000000u, 4);  // epoch 2^31
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("checkpoint '" + path +
                     "' is corrupt: epoch 2147483648 is more than "
                     "2147483647"),
            std::string::npos)
      << msg;
  edit(16, 0x7fffffffu, 4);  // the largest epoch an int holds is fine
  EXPECT_EQ(fx.load(path, &msg), 0) << msg;
  edit(24, 1ull << 63, 8);  // global step 2^63
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("is corrupt: step 9223372036854775808 is more than"), std::string::npos) << msg;
  edit(24, 16, 8);  // 17 steps into the epoch, 16 steps in all
  EXPECT_EQ(fx.load(path, &msg), -1);
  EXPECT_NE(msg.find("is corrupt: 17 steps into epoch 2 cannot be right at global step 16"),
            std::string::npos)
      << msg;
}

// ---- files that are not what they seem ----

// A symlink planted under the temporary file's name must not make the save write through it.
TEST(Ckpt, SaveDoesNotFollowAPlantedSymlink) {
  Fixture fx;
  std::string path = tmp_path("ckpt_symlink.bin"), tmp = path + ".tmp." + std::to_string(getpid());
  std::string victim = tmp_path("ckpt_symlink_victim.txt"), msg;
  write_bytes(victim, {'p', 'r', 'e', 'c', 'i', 'o', 'u', 's'});
  unlink(tmp.c_str());
  ASSERT_EQ(symlink(victim.c_str(), tmp.c_str()), 0);
  ASSERT_EQ(fx.save(path, &msg), 0) << msg;
  EXPECT_EQ(read_bytes(victim), std::vector<unsigned char>({'p', 'r', 'e', 'c', 'i', 'o', 'u', 's'}));
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the checkpoint must be a regular file, not the symlink";
  EXPECT_NE(lstat(tmp.c_str(), &st), 0) << "the planted symlink was renamed or left behind";
  ASSERT_EQ(fx.load(path, &msg), 0) << msg;
}

// --resume of a FIFO would block every rank, of /dev/zero would read until memory runs out.
TEST(Ckpt, LoadRefusesNonRegularFiles) {
  Fixture fx;
  std::string fifo = tmp_path("ckpt_fifo"), dir = tmp_path("ckpt_as_dir"), msg;
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  mkdir(dir.c_str(), 0755);
  struct {
    std::string path, says;
  } cases[] = {{fifo, "cannot read checkpoint '" + fifo + "': not a regular file (it is a FIFO)"},
               {"/dev/zero", "'/dev/zero': not a regular file (it is a character device)"},
               {dir, "'" + dir + "': not a regular file (it is a directory)"}};
  for (const auto &c : cases) {
    EXPECT_EQ(fx.load(c.path, &msg), -1);
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
  unlink(fifo.c_str());
}

// ---- ckpt_dir_check: at start-up, not at the first save ----

TEST(CkptDir, CreatesAMissingDirectoryAndLeavesNoProbe) {
  std::string dir = tmp_path("ckpt_dir_new");
  rmdir(dir.c_str());
  char err[512] = "";
  ASSERT_EQ(ckpt_dir_check(dir.c_str(), err, sizeof err), 0) << err;
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_EQ(ckpt_dir_check(dir.c_str(), err, sizeof err), 0) << err;  // existing: fine too
  EXPECT_EQ(rmdir(dir.c_str()), 0) << "the directory should be empty: the probe file was left";
}

// The default --ckpt_dir is checkpoints/<step>: missing parents are created too, like mkdir -p.
TEST(CkptDir, CreatesMissingParents) {
  std::string top = tmp_path("ckpt_dir_parents"), dir = top + "/a/b";
  rmdir(dir.c_str());
  rmdir((top + "/a").c_str());
  rmdir(top.c_str());
  char err[512] = "";
  ASSERT_EQ(ckpt_dir_check(dir.c_str(), err, sizeof err), 0) << err;
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(rmdir(dir.c_str()), 0);
  EXPECT_EQ(rmdir((top + "/a").c_str()), 0);
  EXPECT_EQ(rmdir(top.c_str()), 0);
}

TEST(CkptDir, RefusesWhatCannotHoldCheckpoints) {
  std::string file = tmp_path("ckpt_dir_file"), under_file = file + "/sub";
  write_bytes(file, {'x'});
  struct {
    std::string dir, says;
  } cases[] = {
      {file, "the checkpoint directory '" + file + "' is not a directory"},
      {under_file, "cannot create the checkpoint directory '" + under_file + "': Not a directory"},
      // procfs refuses new files even to root, whom permission bits would not stop
      {"/proc/self", "the checkpoint directory '/proc/self' is not writable: cannot create a file"},
  };
  for (const auto &c : cases) {
    char err[512] = "";
    EXPECT_EQ(ckpt_dir_check(c.dir.c_str(), err, sizeof err), -1) << c.dir;
    EXPECT_NE(std::string(err).find(c.says), std::string::npos) << err;
  }
}

// The resume line names the file and where it goes on; a checkpoint with --epochs already done adds
// a warning that there is nothing to train.
TEST(CkptModel, LogResumeSaysWhereAndWarnsWhenNothingIsLeft) {
  CkptMeta meta{};
  meta.epoch = 2;
  meta.step = 80;
  testing::internal::CaptureStdout();
  ckpt_log_resume("ck/checkpoint.bin", &meta, 3);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "resumed from ck/checkpoint.bin at epoch 2, step 80\n");
  testing::internal::CaptureStdout();
  ckpt_log_resume("ck/checkpoint.bin", &meta, 2);
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "resumed from ck/checkpoint.bin at epoch 2, step 80\n"
            "warning: ck/checkpoint.bin has already completed 2 epochs and --epochs is 2: nothing to "
            "train (raise --epochs to go on)\n");
}
