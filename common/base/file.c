// file.c: the file kinds and folder operations of file.h.
#define _POSIX_C_SOURCE 200809L  // S_ISSOCK
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

const char *file_kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a plain file";
}

int file_make_dirs(const char *dir) {
  char path[4096];
  if (!*dir) {
    errno = ENOENT;  // as mkdir("") says
    return -1;
  }
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(path, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

int file_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  errno = saved;
  return rc;
}
