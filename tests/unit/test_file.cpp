// Unit tests for common/base/file.c: what a path is, mkdir -p, and a folder's fsync.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

namespace {

void remove_tree(const std::string &d) {
  std::string cmd = "rm -rf '" + d + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
}

// A folder of this test's own (removed at the test's end by Fresh's destructor).
struct Fresh {
  std::string dir;
  explicit Fresh(const char *name)
      : dir(std::string(DDP_TEST_TMPDIR) + "/" + name + "." + std::to_string(getpid())) {
    remove_tree(dir);
  }
  ~Fresh() { remove_tree(dir); }
};

bool is_dir(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

TEST(File, KindNamesWhatIsNotARegularFile) {
  EXPECT_STREQ(file_kind(S_IFDIR), "a directory");
  EXPECT_STREQ(file_kind(S_IFIFO), "a FIFO");
  EXPECT_STREQ(file_kind(S_IFCHR), "a character device");
  EXPECT_STREQ(file_kind(S_IFBLK), "a block device");
  EXPECT_STREQ(file_kind(S_IFSOCK), "a socket");
}

TEST(File, MakeDirsCreatesEveryMissingParentAndAcceptsAnExistingFolder) {
  Fresh fresh("make_dirs");
  const std::string &top = fresh.dir;
  std::string deep = top + "/a/b/c";
  ASSERT_EQ(file_make_dirs(deep.c_str()), 0);
  EXPECT_TRUE(is_dir(top + "/a") && is_dir(top + "/a/b") && is_dir(deep));
  EXPECT_EQ(file_make_dirs(deep.c_str()), 0);  // already there: still 0
  EXPECT_EQ(file_make_dirs((deep + "/").c_str()), 0);
}

TEST(File, MakeDirsFailsWithErrnoWhereAFileStandsInTheWay) {
  Fresh fresh("make_dirs_file");
  const std::string &top = fresh.dir;
  ASSERT_EQ(file_make_dirs(top.c_str()), 0);
  std::string file = top + "/plain";
  FILE *f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  errno = 0;
  EXPECT_EQ(file_make_dirs((file + "/sub").c_str()), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(file_make_dirs(file.c_str()), 0);  // it exists: whether a folder is the caller's question
}

TEST(File, MakeDirsRefusesAnEmptyPath) {
  errno = 0;
  EXPECT_EQ(file_make_dirs(""), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST(File, MakeDirsRefusesAPathLongerThanItsBuffer) {
  std::string huge(5000, 'x');
  errno = 0;
  EXPECT_EQ(file_make_dirs(huge.c_str()), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
}

TEST(File, SyncDirSucceedsOnAFolderAndFailsOnAMissingOne) {
  Fresh fresh("sync_dir");
  const std::string &top = fresh.dir;
  ASSERT_EQ(file_make_dirs(top.c_str()), 0);
  EXPECT_EQ(file_sync_dir(top.c_str()), 0);
  errno = 0;
  EXPECT_EQ(file_sync_dir((top + "/missing").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
}
