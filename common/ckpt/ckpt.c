// ckpt.c: the checkpoint file of ckpt.h. Every field is written byte by byte in little-endian order
// (never an fwrite of a struct), so the file is the same on every host and compiler.
#define _POSIX_C_SOURCE 200809L
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libdeflate.h>

#include "check.h"
#include "file.h"

#define CKPT_MAGIC "DDPCKPT"  // 7 characters + NUL = 8 bytes
#define CKPT_FIXED 56         // header bytes before the layer sizes
#define CKPT_DATA_ID 24       // version 2: the DataId's six u32 after the layer sizes
#define CKPT_STEPS 16         // version 3: batch size, accumulation, drop_last, epoch samples (u32 each)
#define CKPT_PIXELS 4         // version 4: the DataId's pixels CRC (u32), after the step fields
#define CKPT_BATCH 8          // version 5: the global batch and the epoch's world size (u32 each)
#define CKPT_CHUNK 16384      // floats converted per fwrite when saving

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p) {
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void set_err(char *err, size_t err_len, const char *fmt, ...) {
  if (!err || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

static size_t header_bytes(uint32_t version, int n_layers) {
  return CKPT_FIXED + 4 * ((size_t)n_layers + 1) + (version >= 2 ? CKPT_DATA_ID : 0) +
         (version >= 3 ? CKPT_STEPS : 0) + (version >= 4 ? CKPT_PIXELS : 0) + (version >= 5 ? CKPT_BATCH : 0);
}

// The DataId's first six fields, in file order (version 2's; the pixels CRC came with version 4).
static void data_id_fields(const DataId *id, uint32_t out[6]) {
  uint32_t v[6] = {id->kind, id->n_train, id->n_test, id->dim, id->n_classes, id->labels_crc};
  memcpy(out, v, sizeof v);
}

size_t ckpt_param_count(const CkptMeta *meta) {
  if (meta->n_layers < 1 || meta->n_layers > MLP_MAX_LAYERS) return 0;
  size_t n = 0;
  for (int l = 0; l < meta->n_layers; l++) {
    int in = meta->sizes[l], out = meta->sizes[l + 1];
    if (in < 1 || out < 1) return 0;
    n += (size_t)out * (size_t)in + (size_t)out;
  }
  return n;
}

// Writes "784-1024-10" into buf.
static void shape_str(char *buf, size_t len, int n_layers, const int *sizes) {
  size_t used = 0;
  buf[0] = '\0';
  for (int l = 0; l <= n_layers && used < len; l++) {
    int k = snprintf(buf + used, len - used, l ? "-%d" : "%d", sizes[l]);
    if (k < 0) break;
    used += (size_t)k;
  }
}

// ---- save -----------------------------------------------------------------------------------------

// The directory that holds path ("." when path has no '/'), for the existence check and the fsync.
static void parent_dir(char *dir, size_t len, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, len, ".");
  } else if (slash == path) {
    snprintf(dir, len, "/");
  } else {
    snprintf(dir, len, "%.*s", (int)(slash - path), path);
  }
}

// fwrite that also extends the running CRC.
static int write_crc(FILE *f, const void *buf, size_t len, uint32_t *crc) {
  *crc = libdeflate_crc32(*crc, buf, len);
  return fwrite(buf, 1, len, f) == len ? 0 : -1;
}

// Writes n floats as little-endian u32 bit patterns, a chunk at a time.
static int write_floats(FILE *f, const float *x, size_t n, uint32_t *crc, unsigned char *chunk) {
  for (size_t i = 0; i < n; i += CKPT_CHUNK) {
    size_t m = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
    for (size_t j = 0; j < m; j++) {
      uint32_t bits;
      memcpy(&bits, &x[i + j], 4);
      put_u32(chunk + 4 * j, bits);
    }
    if (write_crc(f, chunk, 4 * m, crc)) return -1;
  }
  return 0;
}

// Writes header, arrays and CRC to an open stream; 0 or -1 (errno set by the failing call).
static int write_body(FILE *f, const CkptMeta *meta, size_t n, const float *params, const float *opt_state) {
  unsigned char
      hdr[CKPT_FIXED + 4 * (MLP_MAX_LAYERS + 1) + CKPT_DATA_ID + CKPT_STEPS + CKPT_PIXELS + CKPT_BATCH] = {0};
  size_t hsize = header_bytes(CKPT_VERSION, meta->n_layers);
  memcpy(hdr, CKPT_MAGIC, 8);
  put_u32(hdr + 8, CKPT_VERSION);
  put_u32(hdr + 12, (uint32_t)hsize);
  put_u32(hdr + 16, meta->epoch);
  put_u32(hdr + 20, meta->epoch_step);
  put_u64(hdr + 24, meta->step);
  put_u64(hdr + 32, meta->seed);
  put_u32(hdr + 40, meta->world_size);
  put_u32(hdr + 44, meta->optim);
  put_u32(hdr + 48, meta->optim_steps);
  put_u32(hdr + 52, (uint32_t)meta->n_layers);
  for (int l = 0; l <= meta->n_layers; l++) put_u32(hdr + CKPT_FIXED + 4 * l, (uint32_t)meta->sizes[l]);
  uint32_t data[6];
  data_id_fields(&meta->data, data);
  unsigned char *d = hdr + CKPT_FIXED + 4 * (meta->n_layers + 1);
  for (int i = 0; i < 6; i++) put_u32(d + 4 * i, data[i]);
  uint32_t steps[4] = {meta->batch_size, meta->grad_accum, meta->drop_last, meta->epoch_samples};
  for (int i = 0; i < 4; i++) put_u32(d + CKPT_DATA_ID + 4 * i, steps[i]);
  put_u32(d + CKPT_DATA_ID + CKPT_STEPS, meta->data.pixels_crc);
  // a run that kept its world size (all but step 09's) leaves them 0: they follow from it
  uint32_t G =
      meta->global_batch ? meta->global_batch : meta->batch_size * meta->grad_accum * meta->world_size;
  put_u32(d + CKPT_DATA_ID + CKPT_STEPS + CKPT_PIXELS, G);
  put_u32(d + CKPT_DATA_ID + CKPT_STEPS + CKPT_PIXELS + 4,
          meta->epoch_world ? meta->epoch_world : meta->world_size);

  unsigned char *chunk = malloc(4 * CKPT_CHUNK);
  if (!chunk) return -1;
  uint32_t crc = 0;  // CRC-32's initial value
  int rc = -1;
  if (write_crc(f, hdr, hsize, &crc) || write_floats(f, params, n, &crc, chunk) ||
      write_floats(f, opt_state, n, &crc, chunk))
    goto out_free_chunk;
  unsigned char tail[4];
  put_u32(tail, crc);
  if (fwrite(tail, 1, 4, f) != 4) goto out_free_chunk;
  rc = 0;
out_free_chunk:
  free(chunk);
  return rc;
}

// Removes the temporary files `PATH.tmp.PID` that savers killed mid-write left next to @p path: those
// of a process that no longer exists on this machine, untouched for CKPT_STALE_SECONDS (the age
// spares a saver on another node of a shared file system, whose PID means nothing here). Best effort:
// a file that cannot be removed stays.
#define CKPT_STALE_SECONDS 300
static void remove_stale_tmp(const char *dir, const char *path) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  size_t base_len = strlen(base);
  DIR *d = opendir(dir);
  if (!d) return;
  time_t now = time(NULL);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const char *name = e->d_name;
    if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, ".tmp.", 5) != 0) continue;
    const char *digits = name + base_len + 5;
    char *end;
    long pid = strtol(digits, &end, 10);
    if (end == digits || *end != '\0' || pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal)
    char full[4096];
    struct stat st;
    if (snprintf(full, sizeof full, "%s/%s", dir, name) >= (int)sizeof full) continue;
    if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime >= CKPT_STALE_SECONDS) remove(full);
  }
  closedir(d);
}

// Index of the first NaN or infinity in x[0..n), or n when every value is finite.
static size_t first_non_finite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return n;
}

// "nan", "inf" or "-inf".
static const char *non_finite_name(float x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

// The first NaN or infinity of params, then of opt_state: 1 with what it is and where, else 0.
static int find_non_finite(const float *params, const float *opt_state, size_t n, const char **what,
                           size_t *index, const char **name) {
  const float *x[2] = {params, opt_state};
  const char *whats[2] = {"parameter", "optimizer state (momentum) value"};
  for (int k = 0; k < 2; k++) {
    size_t i = first_non_finite(x[k], n);
    if (i == n) continue;
    *what = whats[k];
    *index = i;
    *name = non_finite_name(x[k][i]);
    return 1;
  }
  return 0;
}

// A diverged run must not replace a good checkpoint with NaN parameters: refuse before any file is
// touched. Returns 0 when both arrays are finite.
static int refuse_non_finite(const char *path, const float *params, const float *opt_state, size_t n,
                             char *err, size_t err_len) {
  const char *what, *name;
  size_t i;
  if (!find_non_finite(params, opt_state, n, &what, &i, &name)) return 0;
  set_err(err, err_len,
          "cannot save checkpoint '%s': %s %zu of %zu is %s: training diverged (try a smaller "
          "--lr); the previous checkpoint is kept",
          path, what, i, n, name);
  return -1;
}

// Creates the temporary file exclusively: O_EXCL|O_NOFOLLOW, so that a file or a symlink planted
// under its name cannot make the save write somewhere else. Such a leftover (our PID's name: a
// crashed saver that had the same PID, or a plant) is removed once -- unlink removes a symlink,
// never its target -- and the creation retried. NULL with errno set on failure.
static FILE *create_tmp(const char *tmp) {
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = open(tmp, flags, 0666);
  if (fd < 0 && errno == EEXIST) {
    if (unlink(tmp) == 0)
      fd = open(tmp, flags, 0666);
    else
      errno = EEXIST;  // e.g. a directory in the way: report the creation's failure
  }
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int saved = errno;
    close(fd);
    unlink(tmp);
    errno = saved;
  }
  return f;
}

int ckpt_save(const char *path, const CkptMeta *meta, const float *params, const float *opt_state, char *err,
              size_t err_len) {
  check_stop_if_ending();  // an abort is under way: the parameters may be partly reduced
  size_t n = ckpt_param_count(meta);
  if (n == 0) {
    set_err(err, err_len, "cannot save checkpoint '%s': invalid model shape (%d layers)", path,
            meta->n_layers);
    return -1;
  }
  if (refuse_non_finite(path, params, opt_state, n, err, err_len) != 0) return -1;
  char dir[4096];
  parent_dir(dir, sizeof dir, path);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    set_err(err, err_len, "cannot save checkpoint '%s': directory '%s' does not exist", path, dir);
    return -1;
  }
  char tmp[4096];
  // The process id keeps concurrent savers (e.g. every rank, before step 05) from sharing a file.
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
    set_err(err, err_len, "cannot save checkpoint '%s': path too long", path);
    return -1;
  }
  FILE *f = create_tmp(tmp);
  if (!f) {
    set_err(err, err_len, "cannot save checkpoint: cannot create '%s': %s", tmp, strerror(errno));
    return -1;
  }
  const char *what = "write";
  int closed = 0;
  if (write_body(f, meta, n, params, opt_state)) goto out_fail;
  what = "flush";
  if (fflush(f) != 0) goto out_fail;
  what = "fsync";
  if (fsync(fileno(f)) != 0) goto out_fail;
  what = "close";
  closed = 1;
  if (fclose(f) != 0) goto out_fail;
  what = "rename";
  if (rename(tmp, path) != 0) goto out_fail;
  remove_stale_tmp(dir, path);
  // The new file is already in place; a failed directory fsync only weakens durability across a
  // power loss. EINVAL means the file system cannot fsync directories at all, which is not an error.
  if (file_sync_dir(dir) != 0 && errno != EINVAL) {
    set_err(err, err_len, "checkpoint '%s' written, but fsync of directory '%s' failed: %s", path, dir,
            strerror(errno));
    return -1;
  }
  return 0;
out_fail : {
  int saved = errno;
  if (!closed) fclose(f);
  remove(tmp);
  set_err(err, err_len, "cannot save checkpoint '%s': %s of '%s' failed: %s", path, what, tmp,
          strerror(saved));
}
  return -1;
}

int ckpt_dir_check(const char *dir, char *err, size_t err_len) {
  if (file_make_dirs(dir) != 0) {
    set_err(err, err_len, "cannot create the checkpoint directory '%s': %s", dir, strerror(errno));
    return -1;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    set_err(err, err_len, "the checkpoint directory '%s' is not a directory", dir);
    return -1;
  }
  // access(W_OK) answers for the real user id and says nothing about a read-only mount or a full
  // quota of files: create and remove a file, as a save will.
  char probe[4096];
  if (snprintf(probe, sizeof probe, "%s/.ddp_write_check.%ld", dir, (long)getpid()) >= (int)sizeof probe) {
    set_err(err, err_len, "the checkpoint directory '%s': path too long", dir);
    return -1;
  }
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0 && errno == EEXIST && unlink(probe) == 0)
    fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    set_err(err, err_len, "the checkpoint directory '%s' is not writable: cannot create a file in it: %s",
            dir, strerror(errno));
    return -1;
  }
  close(fd);
  if (unlink(probe) != 0) {
    set_err(err, err_len, "the checkpoint directory '%s': cannot remove the test file '%s': %s", dir, probe,
            strerror(errno));
    return -1;
  }
  return 0;
}

// ---- load -----------------------------------------------------------------------------------------

// Reads the whole file into a malloc'ed buffer; NULL with err set on failure. Only a regular file:
// /dev/zero would be read until memory runs out and a FIFO would block (O_NONBLOCK lets its open
// return, so that fstat can tell).
static unsigned char *read_all(const char *path, size_t *size, char *err, size_t err_len) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    set_err(err, err_len, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    set_err(err, err_len, "cannot read checkpoint '%s': not a regular file (it is %s)", path,
            file_kind(st.st_mode));
    close(fd);
    return NULL;
  }
  // One byte more than fstat says, to notice a file that grows while it is read.
  size_t cap = (size_t)st.st_size + 1, len = 0;
  unsigned char *buf = malloc(cap);
  if (!buf) {
    set_err(err, err_len, "cannot read checkpoint '%s': out of memory for %zu bytes", path, cap);
    close(fd);
    return NULL;
  }
  while (len < cap) {
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      set_err(err, err_len, "cannot read checkpoint '%s': %s", path, strerror(errno));
      free(buf);
      close(fd);
      return NULL;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (len == cap) {
    set_err(err, err_len, "cannot read checkpoint '%s': it changed while it was read", path);
    free(buf);
    return NULL;
  }
  *size = len;
  return buf;
}

static void read_floats(float *x, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t bits = get_u32(p + 4 * i);
    memcpy(&x[i], &bits, 4);
  }
}

// Checks the header of buf (size bytes) and fills meta; the order of the checks is the order in which
// a damaged or foreign file would first show a problem.
static int parse_header(const char *path, const unsigned char *buf, size_t size, CkptMeta *meta, char *err,
                        size_t err_len) {
  if (size < CKPT_FIXED) {
    set_err(err, err_len,
            "checkpoint '%s' is truncated: file has %zu bytes, too short for a header (%d bytes)", path, size,
            CKPT_FIXED);
    return -1;
  }
  if (memcmp(buf, CKPT_MAGIC, 8) != 0) {
    set_err(err, err_len,
            "'%s' is not a ddp-in-c checkpoint (magic %02x %02x %02x %02x %02x %02x %02x %02x, "
            "expected \"%s\")",
            path, buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7], CKPT_MAGIC);
    return -1;
  }
  uint32_t version = get_u32(buf + 8);
  if (version < 1 || version > CKPT_VERSION) {
    set_err(err, err_len, "checkpoint '%s' has format version %u, this program reads versions 1 to %d", path,
            version, CKPT_VERSION);
    return -1;
  }
  uint32_t hsize = get_u32(buf + 12), n_layers = get_u32(buf + 52);
  uint64_t want = CKPT_FIXED + 4 * ((uint64_t)n_layers + 1) + (version >= 2 ? CKPT_DATA_ID : 0) +
                  (version >= 3 ? CKPT_STEPS : 0) + (version >= 4 ? CKPT_PIXELS : 0) +
                  (version >= 5 ? CKPT_BATCH : 0);
  if (hsize != want) {
    set_err(err, err_len,
            "checkpoint '%s' is corrupt: header size %u does not match %u layers (expected %llu)", path,
            hsize, n_layers, (unsigned long long)want);
    return -1;
  }
  if (n_layers < 1 || n_layers > MLP_MAX_LAYERS) {
    set_err(err, err_len, "checkpoint '%s' has %u layers, out of range 1..%d", path, n_layers,
            MLP_MAX_LAYERS);
    return -1;
  }
  if (size < hsize) {
    set_err(err, err_len, "checkpoint '%s' is truncated: header needs %u bytes, file has %zu", path, hsize,
            size);
    return -1;
  }
  memset(meta, 0, sizeof *meta);
  meta->version = version;
  meta->epoch = get_u32(buf + 16);
  meta->epoch_step = get_u32(buf + 20);
  meta->step = get_u64(buf + 24);
  meta->seed = get_u64(buf + 32);
  meta->world_size = get_u32(buf + 40);
  meta->optim = get_u32(buf + 44);
  meta->optim_steps = get_u32(buf + 48);
  meta->n_layers = (int)n_layers;
  for (uint32_t l = 0; l <= n_layers; l++) {
    uint32_t s = get_u32(buf + CKPT_FIXED + 4 * l);
    if (s < 1 || s > (1u << 24)) {
      set_err(err, err_len, "checkpoint '%s' is corrupt: layer size %u at position %u", path, s, l);
      return -1;
    }
    meta->sizes[l] = (int)s;
  }
  const unsigned char *d = buf + CKPT_FIXED + 4 * (n_layers + 1);
  if (version >= 2)
    meta->data = (DataId){.kind = get_u32(d),
                          .n_train = get_u32(d + 4),
                          .n_test = get_u32(d + 8),
                          .dim = get_u32(d + 12),
                          .n_classes = get_u32(d + 16),
                          .labels_crc = get_u32(d + 20)};
  if (version >= 4) meta->data.pixels_crc = get_u32(d + CKPT_DATA_ID + CKPT_STEPS);  // else 0: not recorded
  if (version >= 3) {
    meta->batch_size = get_u32(d + CKPT_DATA_ID);
    meta->grad_accum = get_u32(d + CKPT_DATA_ID + 4);
    meta->drop_last = get_u32(d + CKPT_DATA_ID + 8);
    meta->epoch_samples = get_u32(d + CKPT_DATA_ID + 12);
    // before version 5, a run kept its world size: its global batch and epoch follow from it
    meta->global_batch = meta->batch_size * meta->grad_accum * meta->world_size;
    meta->epoch_world = meta->world_size;
  }
  if (version >= 5) {
    meta->global_batch = get_u32(d + CKPT_DATA_ID + CKPT_STEPS + CKPT_PIXELS);
    meta->epoch_world = get_u32(d + CKPT_DATA_ID + CKPT_STEPS + CKPT_PIXELS + 4);
  }
  return 0;
}

// The stored DataId as dataset_id_str() words it; a file before version 4 did not record the pixels
// CRC, so its phrase says that instead of showing the 0 it was read as.
static void stored_id_str(char *buf, size_t len, const CkptMeta *meta) {
  dataset_id_str(buf, len, &meta->data);
  char *pixels = strstr(buf, ", pixels crc ");
  if (meta->version < 4 && pixels)
    snprintf(pixels, len - (size_t)(pixels - buf), ", pixels not recorded (format version %u)",
             meta->version);
}

// A checkpoint must come from the data this run loaded: from version 2 its sizes and labels, from
// version 4 also its pixels. A version 1 file does not say what it was trained on, and a version 2
// or 3 file not its pixels: those parts are not compared (such a file resumes on other images).
static int check_data(const char *path, const CkptMeta *expect, const CkptMeta *meta, char *err,
                      size_t err_len) {
  uint32_t a[6], b[6];
  data_id_fields(&meta->data, a);
  data_id_fields(&expect->data, b);
  int pixels_differ = meta->version >= 4 && meta->data.pixels_crc != expect->data.pixels_crc;
  if (meta->data.n_train == 0 || (memcmp(a, b, sizeof a) == 0 && !pixels_differ)) return 0;
  char have[192], run[192];
  stored_id_str(have, sizeof have, meta);
  dataset_id_str(run, sizeof run, &expect->data);
  set_err(err, err_len,
          "checkpoint '%s' was trained on other data (%s); this run loaded %s; pass the same --data, "
          "--data_dir and --dataset_size%s",
          path, have, run, meta->data.kind == DATA_SYNTHETIC ? " (and, for synthetic data, --seed)" : "");
  return -1;
}

// Version 3: how the epoch was cut into steps. The samples consumed must be the steps times the
// samples per step (every step inside an epoch is a full one).
static int check_step_counters(const char *path, const CkptMeta *meta, char *err, size_t err_len) {
  if (meta->batch_size == 0 || meta->grad_accum == 0 || meta->drop_last > 1) {
    set_err(err, err_len, "checkpoint '%s' is corrupt: --batch_size %u, --grad_accum %u, --drop_last %u",
            path, meta->batch_size, meta->grad_accum, meta->drop_last);
    return -1;
  }
  uint64_t want = (uint64_t)meta->epoch_step * meta->batch_size * meta->grad_accum;
  if (meta->epoch_samples != want) {
    set_err(err, err_len,
            "checkpoint '%s' is corrupt: %u samples consumed in the epoch, but %u steps of batch %u x %u "
            "make %llu",
            path, meta->epoch_samples, meta->epoch_step, meta->batch_size, meta->grad_accum,
            (unsigned long long)want);
    return -1;
  }
  // Version 5: the global batch and the epoch's world size (derived from the run's own before it)
  if (meta->version >= 5 && (meta->global_batch == 0 || meta->epoch_world == 0 || meta->world_size == 0)) {
    set_err(err, err_len, "checkpoint '%s' is corrupt: global batch %u, epoch world size %u, world size %u",
            path, meta->global_batch, meta->epoch_world, meta->world_size);
    return -1;
  }
  return 0;
}

// The counters that a trainer turns into ints: a checkpoint whose values cannot have been written by
// a run (an epoch >= 2^31, more steps into an epoch than steps in all) is refused, not wrapped.
static int check_counters(const char *path, const CkptMeta *meta, char *err, size_t err_len) {
  if (meta->epoch > (uint32_t)INT_MAX) {
    set_err(err, err_len, "checkpoint '%s' is corrupt: epoch %u is more than %d", path, meta->epoch, INT_MAX);
    return -1;
  }
  if (meta->step > (uint64_t)INT64_MAX) {
    set_err(err, err_len, "checkpoint '%s' is corrupt: step %llu is more than %lld", path,
            (unsigned long long)meta->step, (long long)INT64_MAX);
    return -1;
  }
  if (meta->epoch_step > (uint32_t)INT_MAX || meta->epoch_step > meta->step) {
    set_err(err, err_len,
            "checkpoint '%s' is corrupt: %u steps into epoch %u cannot be right at global step "
            "%llu",
            path, meta->epoch_step, meta->epoch, (unsigned long long)meta->step);
    return -1;
  }
  return meta->version >= 3 ? check_step_counters(path, meta, err, err_len) : 0;
}

// A checkpoint with NaN or infinite values (saved before ckpt_save refused them, or written by
// another tool) would resume a run that has already diverged.
static int check_finite(const char *path, const float *params, const float *opt_state, size_t n, char *err,
                        size_t err_len) {
  const char *what, *name;
  size_t i;
  if (!find_non_finite(params, opt_state, n, &what, &i, &name)) return 0;
  set_err(err, err_len,
          "checkpoint '%s' holds a non-finite %s: index %zu of %zu is %s (the run had diverged); "
          "resume from an earlier checkpoint",
          path, what, i, n, name);
  return -1;
}

int ckpt_load(const char *path, const CkptMeta *expect, CkptMeta *meta, float *params, float *opt_state,
              char *err, size_t err_len) {
  size_t size = 0;
  unsigned char *buf = read_all(path, &size, err, err_len);
  if (!buf) return -1;
  int rc = -1;
  if (parse_header(path, buf, size, meta, err, err_len)) goto out_free_buf;

  size_t hsize = header_bytes(get_u32(buf + 8), meta->n_layers), n = ckpt_param_count(meta);
  size_t want = hsize + 2 * n * 4 + 4;
  if (size != want) {
    if (size < want)
      set_err(err, err_len, "checkpoint '%s' is truncated: expected %zu bytes, file has %zu", path, want,
              size);
    else
      set_err(err, err_len, "checkpoint '%s' has the wrong size: expected %zu bytes, file has %zu", path,
              want, size);
    goto out_free_buf;
  }
  uint32_t stored = get_u32(buf + size - 4);
  uint32_t computed = libdeflate_crc32(0, buf, size - 4);
  if (stored != computed) {
    set_err(err, err_len, "checkpoint '%s': CRC mismatch: file is corrupt (stored 0x%08x, computed 0x%08x)",
            path, stored, computed);
    goto out_free_buf;
  }
  int same = expect->n_layers == meta->n_layers;
  for (int l = 0; same && l <= meta->n_layers; l++) same = expect->sizes[l] == meta->sizes[l];
  if (!same) {
    char have[128], run[128];
    shape_str(have, sizeof have, meta->n_layers, meta->sizes);
    int el = expect->n_layers < 0 ? 0 : expect->n_layers > MLP_MAX_LAYERS ? MLP_MAX_LAYERS : expect->n_layers;
    shape_str(run, sizeof run, el, expect->sizes);
    set_err(err, err_len,
            "checkpoint '%s': model shape mismatch: checkpoint has %s, this run has %s; pass the "
            "same --hidden",
            path, have, run);
    goto out_free_buf;
  }
  if (check_data(path, expect, meta, err, err_len)) goto out_free_buf;
  if (check_counters(path, meta, err, err_len) != 0) goto out_free_buf;
  read_floats(params, buf + hsize, n);
  read_floats(opt_state, buf + hsize + 4 * n, n);
  if (check_finite(path, params, opt_state, n, err, err_len) != 0) goto out_free_buf;
  rc = 0;
out_free_buf:
  free(buf);
  return rc;
}
