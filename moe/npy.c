/* NumPy .npy version 1.0, float32 little-endian C order (see npy.h).
 * Layout: "\x93NUMPY", major 1, minor 0, a little-endian uint16 header
 * length, then an ASCII Python dict literal padded with spaces to a
 * multiple of 64 bytes in all and ended by '\n', then the raw data. */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static int host_is_little_endian(void) {
  uint16_t one = 1;
  unsigned char first;
  memcpy(&first, &one, 1);
  return first == 1;
}

/* The text after 'key': (spaces and a colon skipped), or NULL. */
static const char* header_value(const char* header, const char* key) {
  char quoted[32];
  snprintf(quoted, sizeof(quoted), "'%s'", key);
  const char* p = strstr(header, quoted);
  if (!p) return NULL;
  p += strlen(quoted);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

/* "(2, 3)", "(5,)", "()" into a; 0 or -1. */
static int parse_shape(const char* p, moe_npy_t* a) {
  if (*p++ != '(') return -1;
  a->ndim = 0;
  a->count = 1;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') return 0;
    if (!isdigit((unsigned char)*p) || a->ndim == MOE_NPY_MAX_DIMS) return -1;
    char* end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || (v && a->count > SIZE_MAX / sizeof(float) / v)) return -1;
    a->shape[a->ndim++] = (size_t)v;
    a->count *= (size_t)v;
    p = end;
    if (*p != ',' && *p != ')' && *p != ' ') return -1;
  }
}

static int parse_header(const char* header, moe_npy_t* a, const char** why) {
  const char* descr = header_value(header, "descr");
  const char* order = header_value(header, "fortran_order");
  const char* shape = header_value(header, "shape");
  if (!descr || !order || !shape) *why = "header lacks descr, fortran_order or shape";
  else if (strncmp(descr, "'<f4'", 5) != 0) *why = "dtype is not '<f4' (float32 little-endian)";
  else if (strncmp(order, "False", 5) != 0)
    *why = "array is not in C order (fortran_order is not False)";
  else if (parse_shape(shape, a)) *why = "shape is not a tuple of at most 8 sizes";
  else return 0;
  return -1;
}

static int read_fail(FILE* f, moe_npy_t* a, char* err, size_t len, const char* path,
                     const char* why) {
  if (f) fclose(f);
  moe_npy_free(a);
  snprintf(err, len, "%s: %s", path, why);
  return -1;
}

int moe_npy_read(const char* path, moe_npy_t* a, char* err, size_t len) {
  unsigned char pre[10];
  memset(a, 0, sizeof(*a));
  FILE* f = fopen(path, "rb");
  if (!f) return read_fail(NULL, a, err, len, path, strerror(errno));
  if (fread(pre, 1, sizeof(pre), f) != sizeof(pre) || memcmp(pre, npy_magic, 6) != 0)
    return read_fail(f, a, err, len, path, "not a .npy file (no \\x93NUMPY magic)");
  if (pre[6] != 1 || pre[7] != 0)
    return read_fail(f, a, err, len, path, "not .npy format version 1.0");
  if (!host_is_little_endian())
    return read_fail(f, a, err, len, path, "this host is not little-endian");
  size_t hlen = pre[8] | (size_t)pre[9] << 8;
  char header[65536];
  const char* why = NULL;
  if (fread(header, 1, hlen, f) != hlen)
    return read_fail(f, a, err, len, path, "header is truncated");
  header[hlen] = '\0';
  if (parse_header(header, a, &why)) return read_fail(f, a, err, len, path, why);
  a->data = malloc(a->count ? a->count * sizeof(float) : 1);
  if (!a->data) return read_fail(f, a, err, len, path, "out of memory");
  if (fread(a->data, sizeof(float), a->count, f) != a->count)
    return read_fail(f, a, err, len, path, "data part is shorter than the shape says");
  if (fgetc(f) != EOF)
    return read_fail(f, a, err, len, path, "data part is longer than the shape says");
  fclose(f);
  return 0;
}

void moe_npy_free(moe_npy_t* a) {
  free(a->data);
  a->data = NULL;
}

static void shape_text(char* buf, size_t len, int ndim, const size_t* shape) {
  size_t used = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%zu%s", shape[d],
                             ndim == 1      ? ","
                             : d + 1 < ndim ? ", "
                                            : "");
  if (used < len) snprintf(buf + used, len - used, ")");
}

int moe_npy_load(const char* path, float* dst, int ndim, const size_t* shape, char* err,
                 size_t len) {
  moe_npy_t a;
  if (moe_npy_read(path, &a, err, len)) return -1;
  int same = a.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = a.shape[d] == shape[d];
  if (!same) {
    char got[160], want[160];
    shape_text(got, sizeof(got), a.ndim, a.shape);
    shape_text(want, sizeof(want), ndim, shape);
    snprintf(err, len, "%s: shape %s, expected %s", path, got, want);
    moe_npy_free(&a);
    return -1;
  }
  memcpy(dst, a.data, a.count * sizeof(float));
  moe_npy_free(&a);
  return 0;
}

int moe_npy_write(const char* path, const float* data, int ndim, const size_t* shape, char* err,
                  size_t len) {
  char shp[256], header[512];
  size_t count = 1;
  if (ndim < 0 || ndim > MOE_NPY_MAX_DIMS) {
    snprintf(err, len, "%s: %d dimensions (at most %d)", path, ndim, MOE_NPY_MAX_DIMS);
    return -1;
  }
  for (int d = 0; d < ndim; d++) count *= shape[d];
  shape_text(shp, sizeof(shp), ndim, shape);
  int n = snprintf(header, sizeof(header),
                   "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shp);
  size_t total = 10 + (size_t)n + 1, padded = (total + 63) / 64 * 64;
  memset(header + n, ' ', padded - total);
  header[padded - 10 - 1] = '\n';
  size_t hlen = padded - 10;
  unsigned char pre[10];
  memcpy(pre, npy_magic, 6);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = hlen & 0xff;
  pre[9] = hlen >> 8;
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(pre, 1, 10, f) != 10 || fwrite(header, 1, hlen, f) != hlen ||
      fwrite(data, sizeof(float), count, f) != count) {
    snprintf(err, len, "%s: %s", path, strerror(errno ? errno : EIO));
    if (f) fclose(f);
    return -1;
  }
  if (fclose(f)) {
    snprintf(err, len, "%s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
