// file.c: the file kinds of file.h.
#define _POSIX_C_SOURCE 200809L  // S_ISSOCK
#include "file.h"

#include <sys/stat.h>

const char *file_kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a plain file";
}
