// snapshot.c: --save_steps and --resume auto (snapshot.h).
#define _POSIX_C_SOURCE 200809L
#include "snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "log.h"

bool snapshot_due(int save_steps, long long step) { return save_steps > 0 && step % save_steps == 0; }

const char *snapshot_resume_path(const char *resume, const char *ckpt_dir) {
  static char path[4096];
  if (!resume || strcmp(resume, ARGS_RESUME_AUTO) != 0) return resume;
  if (snprintf(path, sizeof path, "%s/checkpoint.bin", ckpt_dir) >= (int)sizeof path)
    die(2, "--ckpt_dir '%s' is too long", ckpt_dir);
  struct stat st;
  if (lstat(path, &st) == 0) {
    log0("--resume auto: found %s\n", path);
    // What the loader compares (ckpt_load_model()) is what the file records; no other flag is in it.
    log0(
        "--resume auto: compared with this run: the model, the data and --seed (saved inside an epoch, "
        "also the world size, samples per step and --drop_last); not recorded, so this run's apply: "
        "--lr, --momentum, --weight_decay, --epochs and every other flag\n");
    return path;
  }
  if (errno != ENOENT) die(1, "--resume auto: cannot look at %s: %s", path, strerror(errno));
  log0("--resume auto: no checkpoint in %s: starting from the beginning\n", ckpt_dir);
  return NULL;
}
