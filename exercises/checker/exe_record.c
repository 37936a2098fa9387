// LD_PRELOAD library for scripts/check_exercise.sh: every program image that loads it (each process at
// its start, and again after each exec) appends one line to the file $DDP_EXE_RECORD:
//   PID START PPID PARENT_START EXE
// START is the process's start time (/proc/PID/stat, field 22: the same across an exec, so PID and
// START name one process even if its pid is reused), EXE what /proc/self/exe shows now. The checker
// reads the lines after each claim: an image other than the learner's program in a process that ran
// the learner's program (an exec), or a step program started below it, is another build's program
// answering for the learner's (e.g. main execs the main build's own step program).
//   cc -shared -fPIC -o ddp_exe_record.so exe_record.c
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Field 22 of /proc/PID/stat (the start time in clock ticks since boot), or 0.
static unsigned long long start_time(long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');  // the name before it may hold spaces and parentheses
  if (!p) return 0;
  int field = 2;  // the ")" ends field 2
  for (p++; *p && field < 21; p++)
    if (*p == ' ') field++;
  return strtoull(p, NULL, 10);
}

__attribute__((constructor)) static void record(void) {
  int saved = errno;
  const char *file = getenv("DDP_EXE_RECORD");
  if (file && *file) {
    char exe[4096], line[4400];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = '\0';
      long pid = (long)getpid(), ppid = (long)getppid();
      int len = snprintf(line, sizeof line, "%ld %llu %ld %llu %s\n", pid, start_time(pid), ppid,
                         start_time(ppid), exe);
      int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      if (fd >= 0 && len > 0 && len < (int)sizeof line) {
        ssize_t w = write(fd, line, (size_t)len);  // one write: the lines of processes do not mix
        (void)w;
      }
      if (fd >= 0) close(fd);
    }
  }
  errno = saved;
}
