// test_files.h: whole-file byte helpers shared by the unit tests that build and damage files.
#ifndef DDP_TEST_FILES_H
#define DDP_TEST_FILES_H

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// The file's bytes (empty when it cannot be read).
inline std::vector<unsigned char> read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file with @p b.
inline void write_bytes(const std::string &path, const std::vector<unsigned char> &b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(b.data()), (std::streamsize)b.size());
}

// The standard CRC-32 (reflected polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF: gzip's,
// zlib's crc32 and Python's zlib.crc32), bit by bit: a reference written apart from the library the
// code uses, so that the checkpoint's CRC stays this one whatever computes it.
inline uint32_t crc32_reference(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

#endif
