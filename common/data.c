// data.c: IDX files (gzip or plain) and the synthetic dataset.
//
// One way to read an IDX file: whole, into memory. A plain file is taken as it is; a gzip file is
// inflated by libdeflate, member after member, into one buffer sized from its trailer, which becomes
// the dataset's pixels (no copy). libdeflate checks every member's CRC-32 and size; the header CRC,
// which it skips, is checked here. libdeflate is about 3x faster than zlib (Fashion-MNIST's 47 MB
// of train images: 0.10 s instead of 0.30 s here, every rank at every launch). Parsing then works
// on the bytes in memory. The file's CRC-32 (the data's identity, DataId.pixels_crc) comes with it:
// a one-member gzip file's trailer holds it, a plain file is hashed once in memory.
#define _POSIX_C_SOURCE 200809L  // open(), fstat(), O_NOFOLLOW, O_CLOEXEC

#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libdeflate.h>

#include "check.h"
#include "file.h"
#include "rng.h"

#define IDX_MAGIC_IMAGES 2051u  // 0x00000803: unsigned bytes, 3 dimensions
#define IDX_MAGIC_LABELS 2049u  // 0x00000801: unsigned bytes, 1 dimension
#define IDX_CLASSES 10
// Sanity bounds on the header, so that a corrupt file is reported instead of allocating terabytes.
#define IDX_MAX_ITEMS 100000000u
#define IDX_MAX_SIDE 4096u
#define IDX_MAX_BYTES (UINT64_C(1) << 33)  // 8 GiB of pixels; Fashion-MNIST train is 47 MB
#define IDX_MAX_HEADER 16                  // the magic and three dimensions

#define FASHION_MEAN 0.2860f
#define FASHION_STD 0.3530f
#define MNIST_MEAN 0.1307f
#define MNIST_STD 0.3081f
#define MNIST_DIR "/usr/share/datasets/mnist"

#define SYN_TRAIN_DEFAULT 10000
#define SYN_TEST 2000  // fixed, like the real test sets: it does not shrink with the train size
#define SYN_DIM 784
#define SYN_CLASSES 10

int data_parse(const char *name, DataKind *out) {
  if (strcmp(name, "fashion-mnist") == 0) {
    *out = DATA_FASHION_MNIST;
  } else if (strcmp(name, "mnist") == 0) {
    *out = DATA_MNIST;
  } else if (strcmp(name, "synthetic") == 0) {
    *out = DATA_SYNTHETIC;
  } else {
    return -1;
  }
  return 0;
}

// ---- IDX reading --------------------------------------------------------------------------------

static int fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// An open IDX file: its whole content in memory (inflated, for a gzip file), and the read position.
typedef struct IdxFile {
  unsigned char *mem;  // the file's bytes; NULL once handed over to the dataset
  size_t len, pos;     // their number and the read position
  uint32_t crc;        // CRC-32 of all len bytes
} IdxFile;

// ---- gzip: every member inflated by libdeflate, which checks its CRC-32 and size -----------------

#define GZIP_ID1 0x1f
#define GZIP_ID2 0x8b
#define GZIP_CM_DEFLATE 8
#define GZIP_FHCRC 0x02  // FLG bits (RFC 1952)
#define GZIP_FEXTRA 0x04
#define GZIP_FNAME 0x08
#define GZIP_FCOMMENT 0x10
#define GZIP_FRESERVED 0xe0
#define GZIP_HEADER_MIN 10  // ID1 ID2 CM FLG MTIME(4) XFL OS
#define GZIP_TRAILER 8      // CRC-32 and ISIZE, little-endian
// The inflated file is allocated from the last member's ISIZE (the size modulo 2^32: exact for a
// file of one member under 4 GiB, like every Fashion-MNIST file), and grows when several members or
// a damaged trailer need more. It never grows past what the file can hold: deflate never expands
// data more than 1032 times, and no IDX file is larger than IDX_MAX_BYTES of pixels and its header.
#define GZIP_MAX_RATIO 1032u
#define GZIP_OUT_MIN ((size_t)4096)
#define GZIP_OUT_MAX ((size_t)IDX_MAX_BYTES + IDX_MAX_HEADER)
// Outcomes of a member's inflate besides libdeflate's own (enum libdeflate_result, all >= 0).
#define GZ_TOO_BIG (-1)    // it would inflate past the limit above
#define GZ_NO_MEMORY (-2)  // the output could not grow

// A gzip file being inflated: the compressed bytes, libdeflate's decompressor and the output.
typedef struct Gz {
  const char *path;
  const unsigned char *z;  // the whole gzip file
  size_t size;             // its size
  struct libdeflate_decompressor *d;
  unsigned char *out;  // the inflated bytes of the members so far
  size_t len, cap;     // their number and the allocation
  size_t limit;        // the most the file may inflate to
  uint32_t crc;        // the first member's CRC-32, from its trailer (libdeflate verified it)
  char *err;
  size_t err_len;
} Gz;

// Doubles the output, up to g->limit; 0, GZ_TOO_BIG or GZ_NO_MEMORY.
static int gz_grow(Gz *g) {
  if (g->cap >= g->limit) return GZ_TOO_BIG;
  size_t next = g->cap < GZIP_OUT_MIN ? GZIP_OUT_MIN : g->cap <= g->limit / 2 ? 2 * g->cap : g->limit;
  next = min_size(next, g->limit);
  unsigned char *bigger = realloc(g->out, next);
  if (!bigger) return GZ_NO_MEMORY;
  g->out = bigger;
  g->cap = next;
  return 0;
}

// Inflates the gzip member at @p in (@p n bytes: the rest of the file) onto the output, growing it
// until it fits; with @p raw, @p in is the member's deflate data only (no header, no trailer check).
// Returns libdeflate's result, GZ_TOO_BIG or GZ_NO_MEMORY; on success *used is the member's size
// in the file (raw: its deflate data's) and g->len has grown by its inflated size.
static int gz_member(Gz *g, const unsigned char *in, size_t n, bool raw, size_t *used) {
  for (;;) {
    size_t got = 0;
    enum libdeflate_result r =
        raw ? libdeflate_deflate_decompress_ex(g->d, in, n, g->out + g->len, g->cap - g->len, used, &got)
            : libdeflate_gzip_decompress_ex(g->d, in, n, g->out + g->len, g->cap - g->len, used, &got);
    if (r == LIBDEFLATE_SUCCESS) g->len += got;
    if (r != LIBDEFLATE_INSUFFICIENT_SPACE) return (int)r;
    int grown = gz_grow(g);
    if (grown != 0) return grown;
  }
}

// The size of the member header at @p p (@p n bytes left in the file) in *hlen; NULL, or what is
// wrong with it (*cut: it is cut short). libdeflate skips the optional header CRC (FLG.FHCRC), so it
// is checked here: the low 16 bits of the CRC-32 of the header bytes before it.
static const char *gz_parse_header(const unsigned char *p, size_t n, size_t *hlen, bool *cut) {
  *cut = n < GZIP_HEADER_MIN;
  if (*cut) return "its gzip header is cut short";
  if (p[2] != GZIP_CM_DEFLATE) return "its gzip header names a compression method other than deflate";
  unsigned flg = p[3];
  if (flg & GZIP_FRESERVED) return "its gzip header sets reserved flags";
  size_t at = GZIP_HEADER_MIN;
  *cut = true;
  if (flg & GZIP_FEXTRA) {
    if (n - at < 2 || n - at - 2 < le16(p + at)) return "its gzip header's extra field is cut short";
    at += 2 + (size_t)le16(p + at);
  }
  for (unsigned field = GZIP_FNAME; field <= GZIP_FCOMMENT; field <<= 1) {  // zero-terminated strings
    if (!(flg & field)) continue;
    const unsigned char *nul = memchr(p + at, 0, n - at);
    if (!nul) return "its gzip header's file name or comment is cut short";
    at = (size_t)(nul - p) + 1;
  }
  if (flg & GZIP_FHCRC) {
    if (n - at < 2) return "its gzip header's CRC is cut short";
    *cut = false;
    if ((libdeflate_crc32(0, p, at) & 0xffffu) != le16(p + at))
      return "the CRC in its gzip header does not match the header";
    at += 2;
  }
  *cut = false;
  *hlen = at;
  return NULL;
}

// The message for a member (at byte @p at, number @p k) that did not inflate (@p r): for
// libdeflate's LIBDEFLATE_BAD_DATA, which does not say what was wrong, the member's deflate data
// (after its @p hlen header bytes) are inflated again, alone, to tell a damaged payload from a cut
// or wrong trailer. Only a failing file pays for this second pass. Returns -1.
static int gz_member_fail(Gz *g, int r, size_t at, size_t k, size_t hlen) {
  const unsigned char *data = g->z + at + hlen;
  size_t n = g->size - at - hlen, used = 0, len0 = g->len;
  if (r == LIBDEFLATE_BAD_DATA) r = gz_member(g, data, n, true, &used);
  if (r == GZ_NO_MEMORY) return fail(g->err, g->err_len, "cannot read '%s': out of memory", g->path);
  if (r == GZ_TOO_BIG)
    return fail(g->err, g->err_len,
                "'%s' is corrupt: its gzip data inflate to more than %zu bytes, more than an IDX file "
                "of this size can hold",
                g->path, g->limit);
  if (r != LIBDEFLATE_SUCCESS)
    return fail(g->err, g->err_len,
                "'%s' is corrupt or truncated: the deflate data of gzip member %zu (from byte %zu) do not "
                "inflate",
                g->path, k, at);
  if (n - used < GZIP_TRAILER)
    return fail(g->err, g->err_len,
                "'%s' is truncated: gzip member %zu (from byte %zu) ends before its %d-byte trailer", g->path,
                k, at, GZIP_TRAILER);
  uint32_t crc = libdeflate_crc32(0, g->out + len0, g->len - len0), isize = le32(data + used + 4);
  if (crc != le32(data + used))
    return fail(g->err, g->err_len,
                "'%s' is corrupt: the CRC-32 in the trailer of gzip member %zu (from byte %zu) is %08x, "
                "its data's is %08x",
                g->path, k, at, le32(data + used), crc);
  if (isize != (uint32_t)(g->len - len0))
    return fail(g->err, g->err_len,
                "'%s' is corrupt: the trailer of gzip member %zu (from byte %zu) says %u bytes, its data "
                "inflate to %zu",
                g->path, k, at, isize, g->len - len0);
  return fail(g->err, g->err_len, "'%s' is corrupt: libdeflate refuses gzip member %zu (from byte %zu)",
              g->path, k, at);
}

// Checks the header of member @p k at byte *at and inflates the member; *at moves past it. 0, or -1
// with the message set.
static int gz_next_member(Gz *g, size_t *at, size_t k) {
  const unsigned char *p = g->z + *at;
  size_t n = g->size - *at, hlen = 0, used = 0;
  if (k > 1 && (n < 2 || p[0] != GZIP_ID1 || p[1] != GZIP_ID2))
    return fail(g->err, g->err_len,
                "'%s' is corrupt: the %zu bytes after its last gzip member (from byte %zu) are not gzip",
                g->path, n, *at);
  bool cut;
  const char *bad = gz_parse_header(p, n, &hlen, &cut);
  if (bad)
    return fail(g->err, g->err_len, "'%s' is %s: %s (gzip member %zu, from byte %zu)", g->path,
                cut ? "truncated" : "corrupt", bad, k, *at);
  int r = gz_member(g, p, n, false, &used);
  if (r != LIBDEFLATE_SUCCESS) return gz_member_fail(g, r, *at, k, hlen);
  if (k == 1) g->crc = le32(p + used - GZIP_TRAILER);
  *at += used;
  return 0;
}

// Inflates the gzip file @p z (@p size bytes, starting with the gzip magic) into *f, every member in
// turn; bytes after the last member that do not start another one are an error (gzip itself would
// warn and ignore them; a data set that is not what it claims must not train). 0, or -1 with err set.
static int gzip_inflate(const unsigned char *z, size_t size, const char *path, IdxFile *f, char *err,
                        size_t err_len) {
  Gz g = {.path = path, .z = z, .size = size, .err = err, .err_len = err_len};
  g.limit = size > GZIP_OUT_MAX / GZIP_MAX_RATIO ? GZIP_OUT_MAX : size * GZIP_MAX_RATIO;
  g.cap = size >= GZIP_HEADER_MIN + GZIP_TRAILER ? min_size(le32(z + size - 4), g.limit) : 0;
  g.out = malloc(g.cap ? g.cap : 1);
  g.d = g.out ? libdeflate_alloc_decompressor() : NULL;
  int rc = g.d ? 0 : fail(err, err_len, "cannot read '%s': out of memory", path);
  size_t k = 1;
  for (size_t at = 0; rc == 0 && at < size; k++) rc = gz_next_member(&g, &at, k);
  libdeflate_free_decompressor(g.d);
  // One member: its trailer's CRC is the file's. Several: libdeflate cannot join their CRCs, so the
  // inflated bytes are hashed once (no Fashion-MNIST or MNIST file has more than one member).
  if (rc == 0 && k > 2) g.crc = libdeflate_crc32(0, g.out, g.len);
  if (rc == 0)
    *f = (IdxFile){.mem = g.out, .len = g.len, .crc = g.crc};
  else
    free(g.out);
  return rc;
}

// Reads the regular file open as @p fd, @p size bytes by fstat, into a new buffer; NULL with err set.
static unsigned char *read_whole(int fd, size_t size, const char *path, char *err, size_t err_len) {
  unsigned char *buf = malloc(size ? size : 1);
  if (!buf) {
    fail(err, err_len, "cannot read '%s': out of memory for its %zu bytes", path, size);
    return NULL;
  }
  for (size_t got = 0; got < size;) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r < 0)
        fail(err, err_len, "cannot read '%s': %s", path, strerror(errno));
      else
        fail(err, err_len, "cannot read '%s': it shrank from %zu to %zu bytes while it was read", path, size,
             got);
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  return buf;
}

// Opens an IDX file and reads it whole: a plain file as it is, a gzip file (told by its magic bytes,
// not its name) inflated. Only regular files: a FIFO would block every rank and /dev/zero would be
// read until memory runs out. O_NONBLOCK makes opening a FIFO return at once, so that fstat can tell.
static int idx_open(const char *path, IdxFile *out, char *err, size_t err_len) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(err, err_len, "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int saved = errno;
    close(fd);
    return fail(err, err_len, "cannot stat '%s': %s", path, strerror(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    if (S_ISDIR(st.st_mode)) return fail(err, err_len, "'%s' is a directory, expected an IDX file", path);
    return fail(err, err_len, "'%s' is not a regular file (it is %s), expected an IDX file", path,
                file_kind(st.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags != -1) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size_t size = (size_t)st.st_size;
  unsigned char *bytes = read_whole(fd, size, path, err, err_len);
  close(fd);
  if (!bytes) return -1;
  if (size < 2 || bytes[0] != GZIP_ID1 || bytes[1] != GZIP_ID2) {
    *out = (IdxFile){.mem = bytes, .len = size, .crc = libdeflate_crc32(0, bytes, size)};
    return 0;
  }
  int rc = gzip_inflate(bytes, size, path, out, err, err_len);
  free(bytes);
  return rc;
}

static void idx_close(IdxFile *f) {
  free(f->mem);
  *f = (IdxFile){0};
}

// Takes up to @p bytes; *got is what the file had left.
static void idx_read(IdxFile *f, void *buf, size_t bytes, size_t *got) {
  *got = min_size(f->len - f->pos, bytes);
  if (*got) memcpy(buf, f->mem + f->pos, *got);
  f->pos += *got;
}

// Checks that the file ends where its header says.
static int idx_expect_end(const IdxFile *f, const char *path, const char *what, char *err, size_t err_len) {
  if (f->pos < f->len)
    return fail(err, err_len,
                "'%s' has more bytes than its header announces (%s): the header is wrong or the "
                "file is damaged",
                path, what);
  return 0;
}

static uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

// Reads the magic number and @p ndims big-endian dimensions, and checks the magic.
static int idx_header(IdxFile *f, const char *path, uint32_t magic, int ndims, uint32_t *dims, char *err,
                      size_t err_len) {
  unsigned char h[IDX_MAX_HEADER];
  size_t want = 4 + 4 * (size_t)ndims, got;
  const char *kind = magic == IDX_MAGIC_IMAGES ? "image" : "label";
  idx_read(f, h, want, &got);
  if (got < 4)
    return fail(err, err_len, "'%s' is truncated: expected an IDX %s header, found %zu bytes", path, kind,
                got);
  uint32_t found = be32(h);
  if (found != magic)
    return fail(err, err_len, "'%s' has magic number %u, expected %u: it is probably not an IDX %s file",
                path, found, magic, kind);
  if (got < want)
    return fail(err, err_len, "'%s' is truncated: expected a %zu-byte IDX header, found %zu bytes", path,
                want, got);
  for (int i = 0; i < ndims; i++) dims[i] = be32(h + 4 + 4 * i);
  return 0;
}

// Takes @p total image bytes, keeping the first @p keep in *px (allocated here). Nothing is
// allocated from the header alone: a file that claims 10^8 images must hold them first (found by
// fuzz/fuzz_idx.c, when the arrays were allocated from the header).
static int idx_read_images(IdxFile *f, const char *path, size_t total, size_t keep, uint8_t **px, char *err,
                           size_t err_len) {
  size_t have = f->len - f->pos;
  if (have < total)
    return fail(err, err_len, "'%s' is truncated: expected %zu bytes of image data, found %zu", path, total,
                have);
  if (keep == total && have == total) {
    // The file is the header and exactly the pixels: slide the pixels to the front and keep the
    // buffer, instead of touching another 47 MB of fresh pages for a copy.
    memmove(f->mem, f->mem + f->pos, total);
    uint8_t *x = realloc(f->mem, total);  // gives the header bytes (and any spare room) back
    *px = x ? x : f->mem;
    *f = (IdxFile){0};
    return 0;
  }
  uint8_t *x = malloc(keep);
  if (!x) return fail(err, err_len, "'%s': out of memory for %zu pixels", path, keep);
  memcpy(x, f->mem + f->pos, keep);
  f->pos += total;
  *px = x;
  return 0;
}

// Checks all @p n labels and takes them, keeping the first @p keep in *py (allocated here).
static int idx_read_labels(IdxFile *f, const char *path, size_t n, size_t keep, int **py, char *err,
                           size_t err_len) {
  const unsigned char *b = f->mem + f->pos;
  size_t have = min_size(f->len - f->pos, n);
  for (size_t i = 0; i < have; i++)
    if (b[i] >= IDX_CLASSES)
      return fail(err, err_len, "'%s': label %u at index %zu is out of range [0, %d)", path, (unsigned)b[i],
                  i, IDX_CLASSES);
  if (have < n)
    return fail(err, err_len, "'%s' is truncated: expected %zu bytes of label data, found %zu", path, n,
                have);
  int *y = malloc(keep * sizeof *y);
  if (!y) return fail(err, err_len, "'%s': out of memory for %zu labels", path, keep);
  for (size_t i = 0; i < keep; i++) y[i] = b[i];
  f->pos += n;
  *py = y;
  return 0;
}

int dataset_load_idx(Dataset *ds, const char *images, const char *labels, int limit, float mean, float std,
                     char *err, size_t err_len) {
  IdxFile fi = {0}, fl = {0};
  uint32_t di[3] = {0}, dl[1] = {0};
  uint8_t *x = NULL;
  int *y = NULL;
  int rc = -1;
  if (idx_open(images, &fi, err, err_len) != 0) goto out_close;
  if (idx_header(&fi, images, IDX_MAGIC_IMAGES, 3, di, err, err_len) != 0) goto out_close;
  if (di[0] == 0 || di[0] > IDX_MAX_ITEMS || di[1] == 0 || di[1] > IDX_MAX_SIDE || di[2] == 0 ||
      di[2] > IDX_MAX_SIDE || (uint64_t)di[0] * di[1] * di[2] > IDX_MAX_BYTES) {
    fail(err, err_len,
         "'%s' has implausible dimensions %u x %u x %u (expected 1..%u images of 1..%u x 1..%u "
         "pixels, at most %llu bytes): the header is corrupt",
         images, di[0], di[1], di[2], IDX_MAX_ITEMS, IDX_MAX_SIDE, IDX_MAX_SIDE,
         (unsigned long long)IDX_MAX_BYTES);
    goto out_close;
  }
  if (idx_open(labels, &fl, err, err_len) != 0) goto out_close;
  if (idx_header(&fl, labels, IDX_MAGIC_LABELS, 1, dl, err, err_len) != 0) goto out_close;
  if (dl[0] != di[0]) {
    fail(err, err_len, "'%s' has %u images but '%s' has %u labels: the two files do not belong together",
         images, di[0], labels, dl[0]);
    goto out_close;
  }
  uint32_t crc = fi.crc;  // before idx_read_images may take the file's buffer
  size_t n = di[0], dim = (size_t)di[1] * di[2];
  size_t keep = limit > 0 && (size_t)limit < n ? (size_t)limit : n;
  char what[96];
  if (idx_read_labels(&fl, labels, n, keep, &y, err, err_len) != 0) goto out_free;
  snprintf(what, sizeof what, "%u labels", dl[0]);
  if (idx_expect_end(&fl, labels, what, err, err_len) != 0) goto out_free;
  if (idx_read_images(&fi, images, n * dim, keep * dim, &x, err, err_len) != 0) goto out_free;
  snprintf(what, sizeof what, "%u images of %u x %u pixels", di[0], di[1], di[2]);
  if (idx_expect_end(&fi, images, what, err, err_len) != 0) goto out_free;
  *ds = (Dataset){.n = (int)keep,
                  .dim = (int)dim,
                  .rows = (int)di[1],
                  .cols = (int)di[2],
                  .n_classes = IDX_CLASSES,
                  .pixels = x,
                  .mean = mean,
                  .std = std,
                  .y = y,
                  .crc = crc};
  x = NULL;
  y = NULL;
  rc = 0;
out_free:
  free(y);
  free(x);
out_close:
  idx_close(&fl);
  idx_close(&fi);
  return rc;
}

// ---- synthetic data -----------------------------------------------------------------------------

// Centre entries are N(0, 1)·SYN_CENTRE_SCALE and the noise is N(0, 1). Two centres are then about
// SYN_CENTRE_SCALE·sqrt(2·dim) ≈ 4.75 apart for dim 784, so along the line between them the
// classes overlap by Φ(-2.38) ≈ 0.9 %, and over 10 classes the best possible accuracy is about
// 94 %. The signal per feature is small next to the noise (0.12 vs 1), so a classifier must combine
// many features, takes a few hundred steps to learn, and never reaches 100 %. Measured with seed
// 1337, 10000 train and 2000 test samples: softmax regression (SGD, batch 64, lr 0.1) reaches 75 %
// test accuracy after 10 steps, 90 % after 50 and 92 % after 100; nearest centroid from the train
// split reaches 93 %. (0.15 made it too easy, 91 % after 10 steps; 0.10 too hard, 85 % at best.)
#define SYN_CENTRE_SCALE 0.12f
// The noise of split s comes from its own PCG stream, so train and test share the centres (drawn
// from RNG_STREAM_DATA) and differ only in their samples.
#define SYN_NOISE_STREAM(split) (RNG_STREAM_DATA + 100u + (uint64_t)(split))

void dataset_synthetic(Dataset *ds, int n, int dim, int n_classes, uint64_t seed, int split) {
  if (n <= 0 || dim <= 0 || n_classes < 2 || n_classes > 1000 || (split != 0 && split != 1))
    check_fail("DATA", __FILE__, __LINE__,
               "dataset_synthetic: bad arguments n=%d dim=%d n_classes=%d split=%d", n, dim, n_classes,
               split);
  float *centres = mallocCheck((size_t)n_classes * dim * sizeof *centres);
  Rng r;
  rng_init(&r, seed, RNG_STREAM_DATA);
  for (size_t i = 0; i < (size_t)n_classes * dim; i++) centres[i] = SYN_CENTRE_SCALE * rng_normal(&r);
  *ds = (Dataset){.n = n,
                  .dim = dim,
                  .n_classes = n_classes,
                  .x = mallocCheck((size_t)n * dim * sizeof *ds->x),
                  .y = mallocCheck((size_t)n * sizeof *ds->y)};
  // Labels cycle 0, 1, ..., n_classes-1 so that every class has n/n_classes samples (±1); the order
  // does not matter because every epoch shuffles.
  rng_init(&r, seed, SYN_NOISE_STREAM(split));
  for (int i = 0; i < n; i++) {
    int k = i % n_classes;
    const float *c = centres + (size_t)k * dim;
    float *row = ds->x + (size_t)i * dim;
    for (int d = 0; d < dim; d++) row[d] = c[d] + rng_normal(&r);
    ds->y[i] = k;
  }
  free(centres);
  ds->crc = libdeflate_crc32(0, ds->x, (size_t)n * dim * sizeof *ds->x);  // 0: CRC-32's initial value
}

// ---- dataset_load -------------------------------------------------------------------------------

// Builds dir/name, falling back to dir/name-without-".gz" when the .gz is absent. Ends the job,
// naming what was tried, when neither exists.
static void data_path(char *out, size_t len, const char *dir, const char *name, const char *what,
                      const char *hint) {
  struct stat st;
  if (stat(dir, &st) != 0) die(1, "%s data directory '%s': %s; %s", what, dir, strerror(errno), hint);
  if (!S_ISDIR(st.st_mode)) die(1, "%s data directory '%s' is not a directory; %s", what, dir, hint);
  if ((size_t)snprintf(out, len, "%s/%s", dir, name) >= len)
    die(1, "data path '%s/%s' is too long", dir, name);
  if (stat(out, &st) == 0) return;
  size_t k = strlen(out);
  out[k - 3] = '\0';  // strip ".gz"
  if (stat(out, &st) == 0) return;
  die(1, "%s: cannot find '%s/%s' (nor '%s'); %s", what, dir, name, out, hint);
}

// Loads one split; @p pi receives the image file's path (for load_idx_check's message).
static void load_idx_split(Dataset *ds, char pi[4096], const char *dir, const char *images,
                           const char *labels, int limit, float mean, float std, const char *what,
                           const char *hint) {
  char pl[4096], err[1024];
  data_path(pi, 4096, dir, images, what, hint);
  data_path(pl, sizeof pl, dir, labels, what, hint);
  // The files exist (data_path checked): they are damaged or not the right data, so the hint is
  // about replacing them rather than installing.
  if (dataset_load_idx(ds, pi, pl, limit, mean, std, err, sizeof err) != 0)
    die(1, "%s; replace the %s files with good copies, or use --data synthetic", err, what);
}

// The model is built for the training set's images and classes: a test set of another image size
// would be read past the end of its rows, and other classes would be scored wrongly.
static void load_idx_check(const Dataset *train, const char *train_path, const Dataset *test,
                           const char *test_path, const char *what) {
  if (test->rows != train->rows || test->cols != train->cols || test->dim != train->dim)
    die(1,
        "%s: the test images '%s' are %d x %d pixels but the training images '%s' are %d x %d: "
        "the model takes one image size; replace the files with a matching set",
        what, test_path, test->rows, test->cols, train_path, train->rows, train->cols);
  if (test->n_classes != train->n_classes)
    die(1, "%s: the test set '%s' has %d classes but the training set '%s' has %d", what, test_path,
        test->n_classes, train_path, train->n_classes);
}

void dataset_load(DataKind kind, const char *dir, int train_limit, uint64_t seed, Dataset *train,
                  Dataset *test) {
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  if (kind == DATA_SYNTHETIC) {
    int n = train_limit > 0 ? train_limit : SYN_TRAIN_DEFAULT;
    dataset_synthetic(train, n, SYN_DIM, SYN_CLASSES, seed, 0);
    dataset_synthetic(test, SYN_TEST, SYN_DIM, SYN_CLASSES, seed, 1);
    return;
  }
  bool fashion = kind == DATA_FASHION_MNIST;
  const char *hint =
      fashion ? "install it with `sudo apt-get install dataset-fashion-mnist`, pass --data_dir "
                "DIR, or use --data synthetic"
              : "put the four MNIST IDX files (train-images-idx3-ubyte.gz, ...) in a directory and "
                "pass --data_dir DIR, or use --data synthetic";
  const char *what = fashion ? "Fashion-MNIST" : "MNIST";
  if (!dir) dir = fashion ? DATA_FASHION_MNIST_DIR : MNIST_DIR;
  float mean = fashion ? FASHION_MEAN : MNIST_MEAN, std = fashion ? FASHION_STD : MNIST_STD;
  char train_path[4096], test_path[4096];
  load_idx_split(train, train_path, dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 train_limit, mean, std, what, hint);
  load_idx_split(test, test_path, dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 0, mean, std,
                 what, hint);
  load_idx_check(train, train_path, test, test_path, what);
}

void dataset_free(Dataset *ds) {
  free(ds->x);
  free(ds->pixels);
  free(ds->y);
  memset(ds, 0, sizeof *ds);
}

// ---- identity -----------------------------------------------------------------------------------

static uint32_t crc_labels(uint32_t crc, const Dataset *ds) {
  unsigned char chunk[4096];
  for (int i = 0; i < ds->n;) {
    int m = 0;
    for (; m < (int)sizeof chunk && i < ds->n; m++, i++) chunk[m] = (unsigned char)ds->y[i];
    crc = libdeflate_crc32(crc, chunk, (size_t)m);
  }
  return crc;
}

// The two splits' feature CRCs joined into one: the CRC-32 of both, as little-endian u32.
static uint32_t crc_pixels(const Dataset *train, const Dataset *test) {
  unsigned char both[8];
  for (int i = 0; i < 4; i++) {
    both[i] = (unsigned char)(train->crc >> (8 * i));
    both[4 + i] = (unsigned char)(test->crc >> (8 * i));
  }
  return libdeflate_crc32(0, both, sizeof both);
}

DataId dataset_id(DataKind kind, const Dataset *train, const Dataset *test) {
  DataId id = {.kind = (uint32_t)kind,
               .n_train = (uint32_t)train->n,
               .n_test = (uint32_t)test->n,
               .dim = (uint32_t)train->dim,
               .n_classes = (uint32_t)train->n_classes};
  id.labels_crc = crc_labels(crc_labels(0, train), test);  // 0: CRC-32's initial value
  id.pixels_crc = crc_pixels(train, test);
  return id;
}

void dataset_id_str(char *buf, size_t len, const DataId *id) {
  static const char *const names[] = {"fashion-mnist", "mnist", "synthetic"};
  const char *name = id->kind < 3 ? names[id->kind] : "unknown data";
  snprintf(buf, len,
           "%s: %u train / %u test samples of %u features, %u classes, labels crc %08x, pixels crc %08x",
           name, id->n_train, id->n_test, id->dim, id->n_classes, id->labels_crc, id->pixels_crc);
}
