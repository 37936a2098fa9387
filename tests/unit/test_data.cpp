// test_data.cpp: IDX loading (plain and gzip, and every malformed-file message), the synthetic
// dataset, dataset_load's fallbacks and errors, and the installed Fashion-MNIST when it is present.
#include <gtest/gtest.h>
#include <libdeflate.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data.h"
#include "test_files.h"

namespace {

const float kMean = 0.2860f, kStd = 0.3530f;

// A per-test path in the build's temp dir, so tests can run in parallel.
std::string tmp(const std::string &name) {
  const ::testing::TestInfo *t = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(DDP_TEST_TMPDIR) + "/" + t->test_suite_name() + "_" + t->name() + "_" + name;
}

void put_be32(std::vector<unsigned char> &b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back((unsigned char)(v >> s));
}

// One gzip member holding @p bytes (libdeflate, level 6: header FLG 0, no optional fields).
std::vector<unsigned char> gzip_member(const std::vector<unsigned char> &bytes) {
  struct libdeflate_compressor *c = libdeflate_alloc_compressor(6);
  EXPECT_NE(c, nullptr);
  std::vector<unsigned char> z(libdeflate_gzip_compress_bound(c, bytes.size()));
  z.resize(libdeflate_gzip_compress(c, bytes.data(), bytes.size(), z.data(), z.size()));
  libdeflate_free_compressor(c);
  EXPECT_GT(z.size(), 0u);
  return z;
}

void write_file(const std::string &path, const std::vector<unsigned char> &bytes, bool gz) {
  std::vector<unsigned char> out = gz ? gzip_member(bytes) : bytes;
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(out.data(), 1, out.size(), f), out.size());
  std::fclose(f);
}

// An IDX image file's bytes: header (magic, n, rows, cols), then the pixels; @p drop bytes cut off.
std::vector<unsigned char> idx_images(uint32_t n, uint32_t rows, uint32_t cols,
                                      const std::vector<unsigned char> &pix, size_t drop = 0,
                                      uint32_t magic = 2051) {
  std::vector<unsigned char> b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pix.begin(), pix.end() - (long)drop);
  return b;
}

std::vector<unsigned char> idx_labels(const std::vector<unsigned char> &lab, size_t drop = 0,
                                      uint32_t n_override = 0) {
  std::vector<unsigned char> b;
  put_be32(b, 2049);
  put_be32(b, n_override ? n_override : (uint32_t)lab.size());
  b.insert(b.end(), lab.begin(), lab.end() - (long)drop);
  return b;
}

// 5 images of 3x4 pixels covering 0 and 255; labels 0..4.
const uint32_t kN = 5, kRows = 3, kCols = 4;
std::vector<unsigned char> pixels() {
  std::vector<unsigned char> p(kN * kRows * kCols);
  for (size_t i = 0; i < p.size(); i++) p[i] = (unsigned char)(i * 37 % 256);
  p[0] = 0;
  p[1] = 255;
  return p;
}
const std::vector<unsigned char> kLabels = {3, 0, 9, 1, 4};

struct Files {
  std::string images, labels;
};

Files write_good(bool gz) {
  Files f{tmp(gz ? "img.gz" : "img"), tmp(gz ? "lab.gz" : "lab")};
  write_file(f.images, idx_images(kN, kRows, kCols, pixels()), gz);
  write_file(f.labels, idx_labels(kLabels), gz);
  return f;
}

// Loads and expects failure; returns the message and checks that the dataset was not touched.
std::string load_error(const std::string &images, const std::string &labels) {
  Dataset ds;
  std::memset(&ds, 0x5a, sizeof ds);
  Dataset before = ds;
  char err[1024] = "";
  EXPECT_EQ(dataset_load_idx(&ds, images.c_str(), labels.c_str(), 0, kMean, kStd, err, sizeof err), -1);
  EXPECT_EQ(std::memcmp(&ds, &before, sizeof ds), 0) << "dataset touched on error";
  EXPECT_EQ(std::strchr(err, '\n'), nullptr) << "message must be one line: " << err;
  return err;
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

}  // namespace

TEST(Data, ParseNames) {
  DataKind k;
  EXPECT_EQ(data_parse("fashion-mnist", &k), 0);
  EXPECT_EQ(k, DATA_FASHION_MNIST);
  EXPECT_EQ(data_parse("mnist", &k), 0);
  EXPECT_EQ(k, DATA_MNIST);
  EXPECT_EQ(data_parse("synthetic", &k), 0);
  EXPECT_EQ(k, DATA_SYNTHETIC);
  EXPECT_EQ(data_parse("cifar", &k), -1);
}

TEST(DataIdx, LoadsPixelsAndNormalisation) {
  Files f = write_good(false);
  Dataset ds{};
  char err[256];
  int rc = dataset_load_idx(&ds, f.images.c_str(), f.labels.c_str(), 0, kMean, kStd, err, sizeof err);
  ASSERT_EQ(rc, 0) << err;
  ASSERT_EQ(ds.n, (int)kN);
  ASSERT_EQ(ds.dim, (int)(kRows * kCols));
  EXPECT_EQ(ds.rows, (int)kRows);
  EXPECT_EQ(ds.cols, (int)kCols);
  EXPECT_EQ(ds.n_classes, 10);
  std::vector<unsigned char> p = pixels();
  ASSERT_EQ(ds.x, nullptr);  // images stay 8-bit: the loader normalises them (test_loader.cpp)
  ASSERT_NE(ds.pixels, nullptr);
  for (size_t i = 0; i < p.size(); i++) ASSERT_EQ(ds.pixels[i], p[i]) << "pixel " << i;
  EXPECT_EQ(ds.mean, kMean);
  EXPECT_EQ(ds.std, kStd);
  for (size_t i = 0; i < kN; i++) EXPECT_EQ(ds.y[i], kLabels[i]);
  dataset_free(&ds);
  EXPECT_EQ(ds.pixels, nullptr);
  EXPECT_EQ(ds.n, 0);
  dataset_free(&ds);  // safe twice (zeroed)
}

TEST(DataIdx, LimitKeepsFirstSamples) {
  for (bool gz : {false, true}) {
    Files f = write_good(gz);
    std::vector<unsigned char> p = pixels();
    for (int limit : {1, 2, 5, 100}) {
      Dataset ds{};
      char err[256];
      int rc = dataset_load_idx(&ds, f.images.c_str(), f.labels.c_str(), limit, kMean, kStd, err, sizeof err);
      ASSERT_EQ(rc, 0) << err;
      int want = limit < (int)kN ? limit : (int)kN;
      ASSERT_EQ(ds.n, want);
      for (int i = 0; i < want * ds.dim; i++) ASSERT_EQ(ds.pixels[i], p[i]);
      for (int i = 0; i < want; i++) ASSERT_EQ(ds.y[i], kLabels[i]);
      dataset_free(&ds);
    }
  }
}

TEST(DataIdx, GzipEqualsPlain) {
  Files plain = write_good(false), gz = write_good(true);
  Dataset a{}, b{};
  char err[256];
  ASSERT_EQ(dataset_load_idx(&a, plain.images.c_str(), plain.labels.c_str(), 0, kMean, kStd, err, sizeof err),
            0)
      << err;
  int rc = dataset_load_idx(&b, gz.images.c_str(), gz.labels.c_str(), 0, kMean, kStd, err, sizeof err);
  ASSERT_EQ(rc, 0) << err;
  ASSERT_EQ(a.n, b.n);
  ASSERT_EQ(a.dim, b.dim);
  EXPECT_EQ(std::memcmp(a.pixels, b.pixels, (size_t)a.n * a.dim), 0);
  EXPECT_EQ(std::memcmp(a.y, b.y, sizeof(int) * a.n), 0);
  dataset_free(&a);
  dataset_free(&b);
}

// The data's identity covers the pixels: two image files with the same labels that differ in one
// pixel give other DataIds, plain and gzip alike; the same file loaded twice gives the same one, and
// the CRC is that of the image file's (inflated) bytes, so a .gz file and its plain copy agree.
TEST(DataIdx, OnePixelChangesTheDataId) {
  std::vector<unsigned char> other = pixels();
  other[2 * kRows * kCols + 5] ^= 0x01;  // one bit of one pixel of the third image
  uint32_t want = crc32_reference(idx_images(kN, kRows, kCols, pixels()).data(), 16 + pixels().size());
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    Files f = write_good(gz);
    std::string changed = tmp(gz ? "changed.gz" : "changed");
    write_file(changed, idx_images(kN, kRows, kCols, other), gz);
    Dataset a{}, again{}, b{};
    char err[256];
    ASSERT_EQ(dataset_load_idx(&a, f.images.c_str(), f.labels.c_str(), 0, kMean, kStd, err, sizeof err), 0)
        << err;
    ASSERT_EQ(dataset_load_idx(&again, f.images.c_str(), f.labels.c_str(), 0, kMean, kStd, err, sizeof err),
              0)
        << err;
    ASSERT_EQ(dataset_load_idx(&b, changed.c_str(), f.labels.c_str(), 0, kMean, kStd, err, sizeof err), 0)
        << err;
    EXPECT_EQ(a.crc, want);
    EXPECT_EQ(again.crc, a.crc);
    EXPECT_NE(b.crc, a.crc);
    DataId ia = dataset_id(DATA_FASHION_MNIST, &a, &a),
           iagain = dataset_id(DATA_FASHION_MNIST, &again, &again);
    DataId ib = dataset_id(DATA_FASHION_MNIST, &b, &a);  // the training images differ
    DataId ic = dataset_id(DATA_FASHION_MNIST, &a, &b);  // the test images differ
    EXPECT_EQ(ia.labels_crc, ib.labels_crc);
    EXPECT_EQ(ia.pixels_crc, iagain.pixels_crc);
    EXPECT_NE(ia.pixels_crc, ib.pixels_crc);
    EXPECT_NE(ia.pixels_crc, ic.pixels_crc);
    EXPECT_NE(ib.pixels_crc, ic.pixels_crc);  // which split holds which images counts
    char ta[192], tb[192];
    dataset_id_str(ta, sizeof ta, &ia);
    dataset_id_str(tb, sizeof tb, &ib);
    EXPECT_STRNE(ta, tb);
    EXPECT_NE(std::string(tb).find(", pixels crc "), std::string::npos) << tb;
    for (Dataset *d : {&a, &again, &b}) dataset_free(d);
  }
}

// With --dataset_size the CRC is still the whole file's: it names the file, not the kept images.
TEST(DataIdx, LimitKeepsTheFileCrc) {
  for (bool gz : {false, true}) {
    Files f = write_good(gz);
    Dataset all{}, two{};
    char err[256];
    ASSERT_EQ(dataset_load_idx(&all, f.images.c_str(), f.labels.c_str(), 0, kMean, kStd, err, sizeof err), 0)
        << err;
    ASSERT_EQ(dataset_load_idx(&two, f.images.c_str(), f.labels.c_str(), 2, kMean, kStd, err, sizeof err), 0)
        << err;
    EXPECT_EQ(two.crc, all.crc);
    dataset_free(&all);
    dataset_free(&two);
  }
}

// ---- gzip: several members, damaged headers and trailers, bytes after the last member ----

namespace {

// The file @p parts as consecutive gzip members, one per part.
std::vector<unsigned char> gzip_members(const std::vector<std::vector<unsigned char>> &parts) {
  std::vector<unsigned char> z;
  for (const auto &part : parts) {
    std::vector<unsigned char> m = gzip_member(part);
    z.insert(z.end(), m.begin(), m.end());
  }
  return z;
}

// @p b cut into pieces that end at @p ends (the last piece runs to the end).
std::vector<std::vector<unsigned char>> split(const std::vector<unsigned char> &b, std::vector<size_t> ends) {
  std::vector<std::vector<unsigned char>> parts;
  size_t from = 0;
  ends.push_back(b.size());
  for (size_t end : ends) {
    parts.emplace_back(b.begin() + (long)from, b.begin() + (long)end);
    from = end;
  }
  return parts;
}

// Loads @p images (gzip) with @p labels and expects the pixels of @p plain.
void expect_loads_as(const std::string &images, const std::string &labels, const Files &plain) {
  Dataset x{}, y{};
  char err[512];
  ASSERT_EQ(dataset_load_idx(&x, plain.images.c_str(), plain.labels.c_str(), 0, kMean, kStd, err, sizeof err),
            0)
      << err;
  ASSERT_EQ(dataset_load_idx(&y, images.c_str(), labels.c_str(), 0, kMean, kStd, err, sizeof err), 0) << err;
  ASSERT_EQ(x.n, y.n);
  ASSERT_EQ(x.dim, y.dim);
  EXPECT_EQ(std::memcmp(x.pixels, y.pixels, (size_t)x.n * x.dim), 0);
  EXPECT_EQ(std::memcmp(x.y, y.y, sizeof(int) * x.n), 0);
  EXPECT_EQ(x.crc, y.crc) << "the CRC of a file of several members is that of the whole inflated file";
  dataset_free(&x);
  dataset_free(&y);
}

// The 10-byte header of @p z (FLG 0) with @p flags and @p fields after it, then z's payload and trailer.
std::vector<unsigned char> with_header_fields(const std::vector<unsigned char> &z, unsigned char flags,
                                              const std::vector<unsigned char> &fields) {
  std::vector<unsigned char> b(z.size() + fields.size());  // (vector::insert: GCC 12 warns wrongly)
  std::copy(z.begin(), z.begin() + 10, b.begin());
  b[3] = flags;
  std::copy(fields.begin(), fields.end(), b.begin() + 10);
  std::copy(z.begin() + 10, z.end(), b.begin() + 10 + (long)fields.size());
  return b;
}

// The same gzip member with FLG.FHCRC and a correct header CRC (the low 16 bits of the CRC-32 of the
// 10 header bytes), which moves the payload by 2 bytes; @p wrong makes the CRC wrong instead.
std::vector<unsigned char> with_header_crc(const std::vector<unsigned char> &z, bool wrong = false) {
  std::vector<unsigned char> head(z.begin(), z.begin() + 10);
  head[3] |= 0x02;
  uint32_t crc = crc32_reference(head.data(), head.size()) ^ (wrong ? 1u : 0u);
  return with_header_fields(z, head[3], {(unsigned char)(crc & 0xff), (unsigned char)((crc >> 8) & 0xff)});
}

}  // namespace

// Several members load as one file, also when the last member's size (the first guess of the
// inflated size) is far too small, or a member is empty.
TEST(DataGzip, SeveralMembersLoadAsOneFile) {
  Files plain = write_good(false);
  std::vector<unsigned char> img = idx_images(kN, kRows, kCols, pixels());
  std::string two = tmp("two.gz"), many = tmp("many.gz");
  write_bytes(two, gzip_members(split(img, {21})));
  write_bytes(many, gzip_members(split(img, {0, 3, 16, 16, 70, img.size() - 1})));
  expect_loads_as(two, plain.labels, plain);
  expect_loads_as(many, plain.labels, plain);
}

// The same with 39 KB of images in 5 members, the last one 16 bytes: the buffer grows several times.
TEST(DataGzip, SeveralMembersGrowTheBuffer) {
  std::vector<unsigned char> pix(50 * 784);
  for (size_t i = 0; i < pix.size(); i++) pix[i] = (unsigned char)((i * 2654435761u) >> 26);
  std::vector<unsigned char> img = idx_images(50, 28, 28, pix), labels(50, 3);
  Files plain{tmp("img"), tmp("lab")};
  write_file(plain.images, img, false);
  write_file(plain.labels, idx_labels(labels), false);
  std::string many = tmp("many.gz");
  size_t n = img.size();
  write_bytes(many, gzip_members(split(img, {n / 2, 3 * n / 4, n - 1000, n - 16})));
  expect_loads_as(many, plain.labels, plain);
}

// Bytes after the last member that do not start another one: the file is damaged (gzip itself would
// warn and ignore them; a data set that is not what it claims must not train). A second member cut
// inside its header is a truncated file.
TEST(DataGzip, BytesAfterTheLastMemberAreRefused) {
  std::vector<unsigned char> z = gzip_member(idx_images(kN, kRows, kCols, pixels()));
  std::string lab = tmp("lab"), junk = tmp("junk.gz"), cut = tmp("cut.gz");
  write_file(lab, idx_labels(kLabels), false);
  std::vector<unsigned char> b = z;
  b.insert(b.end(), {0, 0, 0});
  write_bytes(junk, b);
  EXPECT_HAS(load_error(junk, lab), "'" + junk +
                                        "' is corrupt: the 3 bytes after its last gzip member (from byte " +
                                        std::to_string(z.size()) + ") are not gzip");
  b = z;
  b.insert(b.end(), {0x1f, 0x8b, 8, 0, 0});
  write_bytes(cut, b);
  EXPECT_HAS(load_error(cut, lab),
             "'" + cut + "' is truncated: its gzip header is cut short (gzip member 2, from byte " +
                 std::to_string(z.size()) + ")");
}

// A file cut inside its deflate data or its trailer, and a wrong size (ISIZE) in the trailer; in a
// second member, the message says which member.
TEST(DataGzip, CutOrWrongLengthIsAnError) {
  std::vector<unsigned char> img = idx_images(kN, kRows, kCols, pixels());
  std::vector<unsigned char> z = gzip_member(img);
  std::string lab = tmp("lab"), path = tmp("bad.gz");
  write_file(lab, idx_labels(kLabels), false);
  ASSERT_GT(z.size(), 30u);
  write_bytes(path, std::vector<unsigned char>(z.begin(), z.end() - 3));
  EXPECT_HAS(load_error(path, lab),
             "'" + path + "' is truncated: gzip member 1 (from byte 0) ends before its 8-byte trailer");
  write_bytes(path, std::vector<unsigned char>(z.begin(), z.end() - 12));
  EXPECT_HAS(load_error(path, lab),
             "'" + path + "' is corrupt or truncated: the deflate data of gzip member 1");
  std::vector<unsigned char> wrong = z;
  wrong[wrong.size() - 4] ^= 1;  // ISIZE, the inflated length in the trailer
  write_bytes(path, wrong);
  EXPECT_HAS(load_error(path, lab), "'" + path +
                                        "' is corrupt: the trailer of gzip member 1 (from byte 0) says " +
                                        std::to_string(img.size() ^ 1) + " bytes, its data inflate to " +
                                        std::to_string(img.size()));
  std::vector<unsigned char> first = gzip_member(std::vector<unsigned char>(img.begin(), img.begin() + 21));
  std::vector<unsigned char> second = gzip_member(std::vector<unsigned char>(img.begin() + 21, img.end()));
  second[second.size() - 8] ^= 0x10;  // CRC-32
  std::vector<unsigned char> both = first;
  both.insert(both.end(), second.begin(), second.end());
  write_bytes(path, both);
  EXPECT_HAS(load_error(path, lab),
             "'" + path + "' is corrupt: the CRC-32 in the trailer of gzip member 2 (from byte " +
                 std::to_string(first.size()) + ") is ");
}

// The optional header fields (RFC 1952: extra field, file name, comment, header CRC) are skipped,
// and the header CRC is checked (libdeflate skips it: data.c checks it); a header cut inside a
// field, an unknown compression method or reserved flags are refused.
TEST(DataGzip, HeaderFieldsAndHeaderCrc) {
  Files plain = write_good(false);
  std::vector<unsigned char> z = gzip_member(idx_images(kN, kRows, kCols, pixels()));
  ASSERT_EQ(z[3], 0) << "expected no optional gzip header fields";
  std::string path = tmp("hdr.gz");
  write_bytes(path, with_header_crc(z));
  expect_loads_as(path, plain.labels, plain);
  // FEXTRA (2-byte length, then 3 bytes), FNAME "img", FCOMMENT "c"; then a CRC over all of it.
  std::vector<unsigned char> fields = {3, 0, 'a', 'b', 'c', 'i', 'm', 'g', 0, 'c', 0};
  std::vector<unsigned char> all = with_header_fields(z, 0x04 | 0x08 | 0x10 | 0x02, fields);
  uint32_t crc = crc32_reference(all.data(), 10 + fields.size());
  all.insert(all.begin() + 10 + (long)fields.size(),
             {(unsigned char)(crc & 0xff), (unsigned char)(crc >> 8)});
  write_bytes(path, all);
  expect_loads_as(path, plain.labels, plain);

  write_bytes(path, with_header_crc(z, true));
  EXPECT_HAS(
      load_error(path, plain.labels),
      "'" + path + "' is corrupt: the CRC in its gzip header does not match the header (gzip member 1");
  write_bytes(path, std::vector<unsigned char>(all.begin(), all.begin() + 16));  // inside the name
  EXPECT_HAS(load_error(path, plain.labels),
             "'" + path + "' is truncated: its gzip header's file name or comment is cut short");
  write_bytes(path, std::vector<unsigned char>(all.begin(), all.begin() + 12));  // inside the extra field
  EXPECT_HAS(load_error(path, plain.labels),
             "'" + path + "' is truncated: its gzip header's extra field is cut short");
  std::vector<unsigned char> bad = z;
  bad[2] = 7;  // CM: not deflate
  write_bytes(path, bad);
  EXPECT_HAS(load_error(path, plain.labels),
             "'" + path + "' is corrupt: its gzip header names a compression method other than deflate");
  bad = z;
  bad[3] = 0x20;  // a reserved FLG bit
  write_bytes(path, bad);
  EXPECT_HAS(load_error(path, plain.labels),
             "'" + path + "' is corrupt: its gzip header sets reserved flags");
}

// ---- gzip trailers: the CRC-32 and the size are verified ----

namespace {

// 50 images of 28x28 with noisy 6-bit pixels (about 30 KB of gzip in several deflate blocks) and
// their labels, as a gzip image file and a plain label file; returns the image file's gzip bytes.
std::vector<unsigned char> big_gzip(const std::string &img, const std::string &lab) {
  std::vector<unsigned char> pix(50 * 784), labels(50);
  uint32_t x = 12345;
  for (size_t i = 0; i < pix.size(); i++) {
    x = x * 1664525u + 1013904223u;
    pix[i] = (unsigned char)((x >> 24) & 0x3f);
  }
  for (size_t i = 0; i < labels.size(); i++) labels[i] = (unsigned char)(i % 10);
  write_file(img, idx_images(50, 28, 28, pix), true);
  write_file(lab, idx_labels(labels), false);
  return read_bytes(img);
}

// A flipped bit anywhere in the compressed payload, a wrong CRC-32 and a wrong ISIZE in the
// trailer: each is refused with a one-line message that names the file, and the good copy loads.
// (Before the trailer was always read, about 2 % of the single-bit flips in the payload loaded:
// they still inflate, to different pixels, and only the CRC tells.)
void expect_trailer_checked(const std::vector<unsigned char> &good, const std::string &lab,
                            size_t payload_start, const std::string &prefix) {
  ASSERT_GT(good.size(), 10000u);
  std::string ok = tmp(prefix + "ok.gz"), bad_path = tmp(prefix + "bad.gz");
  write_bytes(ok, good);
  Dataset ds{};
  char err[512];
  ASSERT_EQ(dataset_load_idx(&ds, ok.c_str(), lab.c_str(), 0, kMean, kStd, err, sizeof err), 0) << err;
  dataset_free(&ds);
  size_t loaded = 0, first_loaded = 0;
  for (size_t pos = payload_start; pos < good.size() - 8; pos += 17) {  // 1 payload byte in 17
    std::vector<unsigned char> bad = good;
    bad[pos] ^= 0x01;
    write_bytes(bad_path, bad);
    if (dataset_load_idx(&ds, bad_path.c_str(), lab.c_str(), 0, kMean, kStd, err, sizeof err) == 0) {
      if (!loaded++) first_loaded = pos;
      dataset_free(&ds);
    } else {
      ASSERT_NE(std::string(err).find("'" + bad_path + "' is corrupt"), std::string::npos) << err;
    }
  }
  EXPECT_EQ(loaded, 0u) << "payload bit flips that loaded, the first at byte " << first_loaded;
  for (size_t offset : {good.size() - 8, good.size() - 4}) {  // CRC-32, ISIZE
    bool crc = offset == good.size() - 8;
    SCOPED_TRACE(crc ? "crc" : "isize");
    std::vector<unsigned char> bad = good;
    bad[offset] ^= 0x20;
    write_bytes(bad_path, bad);
    std::string msg = load_error(bad_path, lab);
    EXPECT_HAS(msg, "'" + bad_path + "' is corrupt: the " + (crc ? "CRC-32 in the trailer" : "trailer") +
                        " of gzip member 1 (from byte 0)");
  }
}

}  // namespace

// Flipped payload bits (one byte in 17), a wrong CRC-32 and a wrong size in the trailer: all caught.
TEST(DataGzip, TrailerIsVerified) {
  std::string img = tmp("img.gz"), lab = tmp("lab");
  std::vector<unsigned char> z = big_gzip(img, lab);
  ASSERT_EQ(z[3], 0) << "expected no optional gzip header fields";
  expect_trailer_checked(z, lab, 10, "member_");
}

// The same with a header CRC in front of the payload.
TEST(DataGzip, TrailerIsVerifiedWithHeaderCrc) {
  std::string img = tmp("img.gz"), lab = tmp("lab");
  expect_trailer_checked(with_header_crc(big_gzip(img, lab)), lab, 12, "hcrc_");
}

// A file longer than its header says: the header's sizes (count, rows x cols) are wrong.
TEST(DataIdx, TrailingBytesAreRefused) {
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    std::vector<unsigned char> img = idx_images(kN, kRows, kCols, pixels());
    img.push_back(7);
    std::vector<unsigned char> lab = idx_labels(kLabels);
    Files good = write_good(gz);
    std::string long_img = tmp(gz ? "long_img.gz" : "long_img"), long_lab = tmp(gz ? "ll.gz" : "ll");
    write_file(long_img, img, gz);
    lab.push_back(1);
    write_file(long_lab, lab, gz);
    std::string msg = load_error(long_img, good.labels);
    EXPECT_HAS(msg, "'" + long_img + "' has more bytes than its header announces (5 images of 3 x 4");
    msg = load_error(good.images, long_lab);
    EXPECT_HAS(msg, "'" + long_lab + "' has more bytes than its header announces (5 labels)");
  }
}

// A FIFO would block every rank in open() or read() and /dev/zero would be read until memory runs
// out: both are refused at once (a hang here is the failure).
TEST(DataIdx, NonRegularFilesAreRefused) {
  Files good = write_good(false);
  std::string fifo = tmp("fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  std::string msg = load_error(fifo, good.labels);
  EXPECT_HAS(msg, "'" + fifo + "' is not a regular file (it is a FIFO)");
  msg = load_error(good.images, fifo);
  EXPECT_HAS(msg, "'" + fifo + "' is not a regular file (it is a FIFO)");
  msg = load_error("/dev/zero", good.labels);
  EXPECT_HAS(msg, "'/dev/zero' is not a regular file (it is a character device)");
  unlink(fifo.c_str());
}

TEST(DataIdx, TruncatedImages) {
  for (bool gz : {false, true}) {
    std::string img = tmp(gz ? "img.gz" : "img"), lab = tmp("lab");
    write_file(img, idx_images(kN, kRows, kCols, pixels(), 7), gz);
    write_file(lab, idx_labels(kLabels), false);
    std::string msg = load_error(img, lab);
    EXPECT_HAS(msg, img);
    EXPECT_HAS(msg, "truncated");
    EXPECT_HAS(msg, "expected 60 bytes of image data, found 53");
  }
}

TEST(DataIdx, TruncatedHeader) {
  std::string img = tmp("img"), lab = tmp("lab");
  write_file(img, {0, 0, 8, 3, 0, 0}, false);
  write_file(lab, idx_labels(kLabels), false);
  std::string msg = load_error(img, lab);
  EXPECT_HAS(msg, img);
  EXPECT_HAS(msg, "truncated");
}

TEST(DataIdx, TruncatedLabels) {
  for (bool gz : {false, true}) {
    std::string img = tmp("img"), lab = tmp(gz ? "lab.gz" : "lab");
    write_file(img, idx_images(kN, kRows, kCols, pixels()), false);
    write_file(lab, idx_labels(kLabels, 2), gz);
    std::string msg = load_error(img, lab);
    EXPECT_HAS(msg, lab);
    EXPECT_HAS(msg, "expected 5 bytes of label data, found 3");
  }
}

TEST(DataIdx, WrongMagic) {
  Files f = write_good(false);
  std::string msg = load_error(f.labels, f.images);  // swapped
  EXPECT_HAS(msg, f.labels);
  EXPECT_HAS(msg, "magic number 2049, expected 2051");
  EXPECT_HAS(msg, "probably not an IDX image file");

  std::string txt = tmp("notes.txt");
  const char text[] = "hello, world\n";
  write_file(txt, std::vector<unsigned char>(text, text + sizeof text - 1), false);
  msg = load_error(f.images, txt);
  EXPECT_HAS(msg, txt);
  EXPECT_HAS(msg, "probably not an IDX label file");
}

TEST(DataIdx, CountMismatch) {
  std::string img = tmp("img"), lab = tmp("lab");
  write_file(img, idx_images(kN, kRows, kCols, pixels()), false);
  write_file(lab, idx_labels({1, 2, 3, 4}), false);
  std::string msg = load_error(img, lab);
  EXPECT_HAS(msg, img);
  EXPECT_HAS(msg, lab);
  EXPECT_HAS(msg, "has 5 images");
  EXPECT_HAS(msg, "has 4 labels");
}

TEST(DataIdx, LabelOutOfRange) {
  std::string img = tmp("img"), lab = tmp("lab");
  write_file(img, idx_images(kN, kRows, kCols, pixels()), false);
  write_file(lab, idx_labels({1, 2, 10, 4, 5}), false);
  std::string msg = load_error(img, lab);
  EXPECT_HAS(msg, lab);
  EXPECT_HAS(msg, "label 10 at index 2 is out of range [0, 10)");
}

TEST(DataIdx, AbsurdDimensions) {
  std::string img = tmp("img"), lab = tmp("lab");
  write_file(lab, idx_labels(kLabels), false);
  const std::vector<std::vector<uint32_t>> bad = {
      {0, 3, 4}, {kN, 0, 4}, {kN, 3, 100000}, {0xffffffffu, 28, 28}, {90000000u, 300, 300}};
  for (const auto &dims : bad) {
    write_file(img, idx_images(dims[0], dims[1], dims[2], pixels()), false);
    std::string msg = load_error(img, lab);
    EXPECT_HAS(msg, img);
    EXPECT_HAS(msg, "implausible dimensions");
  }
}

TEST(DataIdx, DirectoryInsteadOfFile) {
  Files f = write_good(false);
  std::string dir = tmp("dir");
  mkdir(dir.c_str(), 0755);
  std::string msg = load_error(dir, f.labels);
  EXPECT_HAS(msg, dir);
  EXPECT_HAS(msg, "is a directory");
  msg = load_error(f.images, dir);
  EXPECT_HAS(msg, dir);
  EXPECT_HAS(msg, "is a directory");
}

TEST(DataIdx, MissingFile) {
  Files f = write_good(false);
  std::string missing = tmp("no-such-file.gz");
  std::string msg = load_error(missing, f.labels);
  EXPECT_HAS(msg, "cannot open '" + missing + "'");
  EXPECT_HAS(msg, "No such file or directory");
  msg = load_error(f.images, missing);
  EXPECT_HAS(msg, missing);
}

// ---- synthetic ----

TEST(DataSynthetic, DeterministicAndBalanced) {
  Dataset a{}, b{}, c{};
  dataset_synthetic(&a, 1003, 20, 10, 7, 0);
  dataset_synthetic(&b, 1003, 20, 10, 7, 0);
  dataset_synthetic(&c, 1003, 20, 10, 8, 0);
  ASSERT_EQ(a.n, 1003);
  ASSERT_EQ(a.dim, 20);
  ASSERT_EQ(a.n_classes, 10);
  EXPECT_EQ(std::memcmp(a.x, b.x, sizeof(float) * 1003 * 20), 0);
  EXPECT_EQ(std::memcmp(a.y, b.y, sizeof(int) * 1003), 0);
  EXPECT_NE(std::memcmp(a.x, c.x, sizeof(float) * 1003 * 20), 0);
  std::vector<int> count(10, 0);
  for (int i = 0; i < a.n; i++) {
    ASSERT_GE(a.y[i], 0);
    ASSERT_LT(a.y[i], 10);
    count[a.y[i]]++;
  }
  for (int k = 0; k < 10; k++) EXPECT_TRUE(count[k] == 100 || count[k] == 101) << count[k];
  dataset_free(&a);
  dataset_free(&b);
  dataset_free(&c);
}

// Train and test share the centres but not the samples: centroids estimated on train classify test
// well (the generator's comment derives a best possible accuracy of about 94 % at dim 784).
TEST(DataSynthetic, SplitsShareCentres) {
  Dataset tr{}, te{};
  dataset_load(DATA_SYNTHETIC, nullptr, 0, 1337, &tr, &te);
  ASSERT_EQ(tr.n, 10000);
  ASSERT_EQ(te.n, 2000);
  ASSERT_EQ(tr.dim, 784);
  ASSERT_EQ(te.dim, 784);
  ASSERT_EQ(tr.n_classes, 10);
  EXPECT_NE(std::memcmp(tr.x, te.x, sizeof(float) * 2000 * 784), 0);
  const int D = 784, K = 10;
  std::vector<double> cen(K * D, 0.0);
  std::vector<int> cnt(K, 0);
  for (int i = 0; i < tr.n; i++) {
    cnt[tr.y[i]]++;
    for (int d = 0; d < D; d++) cen[tr.y[i] * D + d] += tr.x[(size_t)i * D + d];
  }
  for (int k = 0; k < K; k++)
    for (int d = 0; d < D; d++) cen[k * D + d] /= cnt[k];
  int ok = 0;
  for (int i = 0; i < te.n; i++) {
    int best = 0;
    double bd = 1e300;
    for (int k = 0; k < K; k++) {
      double s = 0;
      for (int d = 0; d < D; d++) {
        double u = te.x[(size_t)i * D + d] - cen[k * D + d];
        s += u * u;
      }
      if (s < bd) bd = s, best = k;
    }
    ok += best == te.y[i];
  }
  double acc = (double)ok / te.n;
  EXPECT_GT(acc, 0.88);   // learnable (measured 0.93)
  EXPECT_LT(acc, 0.995);  // but not trivially separable
  dataset_free(&tr);
  dataset_free(&te);
}

TEST(DataSynthetic, LoadUsesTrainLimitAsSize) {
  Dataset tr{}, te{};
  dataset_load(DATA_SYNTHETIC, nullptr, 500, 1, &tr, &te);
  EXPECT_EQ(tr.n, 500);
  EXPECT_EQ(te.n, 2000);
  dataset_free(&tr);
  dataset_free(&te);
}

// ---- dataset_load with IDX directories ----

TEST(DataLoad, FallsBackToPlainFiles) {
  std::string dir = tmp("dir");
  mkdir(dir.c_str(), 0755);
  // train as .gz, test as plain files without the .gz suffix
  write_file(dir + "/train-images-idx3-ubyte.gz", idx_images(kN, kRows, kCols, pixels()), true);
  write_file(dir + "/train-labels-idx1-ubyte.gz", idx_labels(kLabels), true);
  write_file(dir + "/t10k-images-idx3-ubyte", idx_images(kN, kRows, kCols, pixels()), false);
  write_file(dir + "/t10k-labels-idx1-ubyte", idx_labels(kLabels), false);
  Dataset tr{}, te{};
  dataset_load(DATA_FASHION_MNIST, dir.c_str(), 3, 0, &tr, &te);
  EXPECT_EQ(tr.n, 3);
  EXPECT_EQ(te.n, (int)kN);  // the test split is never limited
  EXPECT_EQ(te.pixels[1], 255);
  EXPECT_EQ(te.y[2], 9);
  dataset_free(&tr);
  dataset_free(&te);
}

TEST(DataLoadDeathTest, MissingDirectoryExplainsHowToGetData) {
  std::string dir = tmp("absent");
  Dataset tr{}, te{};
  EXPECT_EXIT(dataset_load(DATA_FASHION_MNIST, dir.c_str(), 0, 0, &tr, &te), ::testing::ExitedWithCode(1),
              "absent.*sudo apt-get install dataset-fashion-mnist.*--data_dir DIR.*"
              "--data synthetic");
}

TEST(DataLoadDeathTest, MissingFilesNameThePath) {
  std::string dir = tmp("empty");
  mkdir(dir.c_str(), 0755);
  Dataset tr{}, te{};
  EXPECT_EXIT(dataset_load(DATA_MNIST, dir.c_str(), 0, 0, &tr, &te), ::testing::ExitedWithCode(1),
              "empty/train-images-idx3-ubyte.gz.*--data synthetic");
}

TEST(DataLoadDeathTest, CorruptFileNamesIt) {
  std::string dir = tmp("bad");
  mkdir(dir.c_str(), 0755);
  write_file(dir + "/train-images-idx3-ubyte.gz", idx_images(kN, kRows, kCols, pixels(), 1), true);
  write_file(dir + "/train-labels-idx1-ubyte.gz", idx_labels(kLabels), true);
  Dataset tr{}, te{};
  EXPECT_EXIT(dataset_load(DATA_FASHION_MNIST, dir.c_str(), 0, 0, &tr, &te), ::testing::ExitedWithCode(1),
              "train-images-idx3-ubyte.gz' is truncated");
}

// The model is built for the training images: a test set of another size (even with the same
// number of pixels) or another class count ends the job, naming both files.
TEST(DataLoadDeathTest, TestSetMustMatchTrainingImageSize) {
  struct Case {
    const char *name;
    uint32_t rows, cols;
    const char *says;
  } cases[] = {{"bigger", 5, 5, "are 5 x 5 pixels but the training images"},
               {"transposed", 4, 3, "are 4 x 3 pixels but the training images"}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    std::string dir = tmp(c.name);
    mkdir(dir.c_str(), 0755);
    write_file(dir + "/train-images-idx3-ubyte.gz", idx_images(kN, kRows, kCols, pixels()), true);
    write_file(dir + "/train-labels-idx1-ubyte.gz", idx_labels(kLabels), true);
    std::vector<unsigned char> p(kN * c.rows * c.cols, 9);
    write_file(dir + "/t10k-images-idx3-ubyte.gz", idx_images(kN, c.rows, c.cols, p), true);
    write_file(dir + "/t10k-labels-idx1-ubyte.gz", idx_labels(kLabels), true);
    Dataset tr{}, te{};
    EXPECT_EXIT(
        dataset_load(DATA_FASHION_MNIST, dir.c_str(), 0, 0, &tr, &te), ::testing::ExitedWithCode(1),
        std::string("t10k-images-idx3-ubyte.gz' ") + c.says + " '.*train-images-idx3-ubyte.gz' are 3 x 4");
  }
}

// ---- the installed Fashion-MNIST ----

TEST(DataReal, FashionMnistFirst1000) {
  std::string dir = DATA_FASHION_MNIST_DIR;  // data.h's, as the build set it
  std::string img = dir + "/train-images-idx3-ubyte.gz", lab = dir + "/train-labels-idx1-ubyte.gz";
  struct stat st;
  if (stat(img.c_str(), &st) != 0 || stat(lab.c_str(), &st) != 0)
    GTEST_SKIP() << "Fashion-MNIST not installed in " << dir;
  Dataset ds{};
  char err[512];
  ASSERT_EQ(dataset_load_idx(&ds, img.c_str(), lab.c_str(), 1000, kMean, kStd, err, sizeof err), 0) << err;
  ASSERT_EQ(ds.n, 1000);
  ASSERT_EQ(ds.dim, 784);
  std::vector<int> count(10, 0);
  for (int i = 0; i < ds.n; i++) {
    ASSERT_GE(ds.y[i], 0);
    ASSERT_LT(ds.y[i], 10);
    count[ds.y[i]]++;
  }
  for (int k = 0; k < 10; k++) EXPECT_GT(count[k], 50);  // Fashion-MNIST is balanced
  double sum = 0;
  for (size_t i = 0; i < (size_t)ds.n * ds.dim; i++) sum += (ds.pixels[i] / 255.0 - kMean) / kStd;
  EXPECT_LT(std::fabs(sum / ((double)ds.n * ds.dim)), 0.2);  // the constants fit the data
  dataset_free(&ds);
}
