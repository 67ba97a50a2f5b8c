/* moe/'s .npy reader and writer and its Adam, without files from elsewhere:
 * a round trip of every rank 0..3 shape, the refusals (another version,
 * dtype, byte order, Fortran order, short and long data, wrong shape on
 * load, no magic), and Adam's first steps against the formula.
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adam.h"
#include "npy.h"
#include "unit_check.h"

static char dir[] = "/tmp/test_moe_io.XXXXXX";
static char path[256];

static void check_roundtrip(void) {
  static const size_t shapes[4][3] = {{0}, {5}, {3, 4}, {2, 3, 2}};
  float data[24];
  char err[256];
  for (int i = 0; i < 24; i++) data[i] = (float)i * 0.5f - 3.0f;
  for (int nd = 0; nd <= 3; nd++) {
    moe_npy_t a;
    CHECK_STDOUT(moe_npy_write(path, data, nd, shapes[nd], err, sizeof(err)) == 0, "write: %s",
                 err);
    CHECK_STDOUT(moe_npy_read(path, &a, err, sizeof(err)) == 0, "read: %s", err);
    if (failures) return;
    size_t count = 1;
    for (int d = 0; d < nd; d++) count *= shapes[nd][d];
    CHECK_STDOUT(a.ndim == nd && a.count == count, "ndim %d: read back ndim %d, %zu values", nd,
                 a.ndim, a.count);
    CHECK_STDOUT(memcmp(a.data, data, count * sizeof(float)) == 0, "ndim %d: values differ", nd);
    moe_npy_free(&a);
    FILE* f = fopen(path, "rb");
    unsigned char pre[10];
    CHECK_STDOUT(fread(pre, 1, 10, f) == 10 && (10 + (pre[8] | pre[9] << 8)) % 64 == 0,
                 "header not padded to 64");
    fclose(f);
  }
  float back[12];
  const size_t want[2] = {4, 3};
  CHECK_STDOUT(moe_npy_load(path, back, 2, want, err, sizeof(err)) != 0 && strstr(err, "shape"),
               "load of a (2, 3, 2) file as (4, 3) accepted or unclear: %s", err);
}

/* A file of header text and data_bytes bytes of data (version major.minor). */
static void write_raw(int major, const char* header, size_t data_bytes) {
  char padded[128];
  size_t n = (size_t)snprintf(padded, sizeof(padded), "%-117s\n", header);
  FILE* f = fopen(path, "wb");
  fwrite("\x93NUMPY", 1, 6, f);
  unsigned char v[4] = {(unsigned char)major, 0, (unsigned char)(n & 0xff),
                        (unsigned char)(n >> 8)};
  fwrite(v, 1, 4, f);
  fwrite(padded, 1, n, f);
  for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
  fclose(f);
}

static void check_refusals(void) {
  static const struct {
    int major;
    const char* header;
    size_t bytes;
    const char* why;
  } bad[] = {
      {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, "version"},
      {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16, "dtype"},
      {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "dtype"},
      {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8, "dtype"},
      {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, "C order"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 12, "shorter"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 20, "longer"},
      {1, "{'descr': '<f4', 'fortran_order': False}", 4, "lacks"},
  };
  char err[256];
  moe_npy_t a;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    write_raw(bad[i].major, bad[i].header, bad[i].bytes);
    err[0] = '\0';
    CHECK_STDOUT(moe_npy_read(path, &a, err, sizeof(err)) != 0 && strstr(err, bad[i].why),
                 "%s: accepted or unclear: \"%s\"", bad[i].header, err);
  }
  FILE* f = fopen(path, "wb");
  fputs("not numpy at all", f);
  fclose(f);
  CHECK_STDOUT(moe_npy_read(path, &a, err, sizeof(err)) != 0 && strstr(err, "magic"),
               "no magic: %s", err);
  CHECK_STDOUT(moe_npy_read("/nonexistent/x.npy", &a, err, sizeof(err)) != 0 &&
                   strstr(err, "/nonexistent"),
               "missing file: %s", err);
}

/* Adam's first step moves each parameter by lr * g / (|g| + eps), the
 * second by lr * m_hat / (sqrt(v_hat) + eps) computed here in double. */
static void check_adam(void) {
  moe_adam_t adam;
  float p[3] = {1, -2, 0.5f}, g1[3] = {0.1f, -3, 0}, g2[3] = {-0.2f, 1, 4};
  double ref[3], m[3] = {0}, v[3] = {0};
  CHECK_STDOUT(moe_adam_init(&adam, 3, 0.01f) == 0, "adam init");
  for (int i = 0; i < 3; i++) ref[i] = p[i];
  for (int t = 1; t <= 2; t++) {
    const float* g = t == 1 ? g1 : g2;
    moe_adam_step(&adam, moe_backend_blas(1), p, g);
    for (int i = 0; i < 3; i++) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * (double)g[i] * g[i];
      ref[i] -= 0.01 * (m[i] / (1 - pow(0.9, t))) / (sqrt(v[i] / (1 - pow(0.999, t))) + 1e-8);
    }
    for (int i = 0; i < 3; i++)
      CHECK_STDOUT(fabs(p[i] - ref[i]) <= 1e-6, "adam step %d: p[%d] = %.8f, want %.8f", t, i, p[i],
                   ref[i]);
  }
  moe_adam_free(&adam);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(path, sizeof(path), "%s/a.npy", dir);
  check_roundtrip();
  check_refusals();
  check_adam();
  unlink(path);
  rmdir(dir);
  if (failures) printf("%d check(s) failed\n", failures);
  else printf("npy round trips and refusals, Adam steps: ok\n");
  return failures ? 1 : 0;
}
