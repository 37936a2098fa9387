// test_files.h: whole-file byte helpers shared by the unit tests that build and damage files.
#ifndef DDP_TEST_FILES_H
#define DDP_TEST_FILES_H

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

#endif
