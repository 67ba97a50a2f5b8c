/*
 * test_dev_kernels.c - the device kernels (src/kernels/kernels.cu, their C
 * twins in twins.c, devkern.h) against the host tables, bit for bit: every
 * datatype x sum, prod, max, min, pre-multiplied sum (each operand flag),
 * scale and post-divide, out of place and in place, on random bit patterns
 * (NaN, inf, subnormals included); the MoE row programs (SUM with weights,
 * missing rows and groups, DOT, COPY, ADD with and without repeated rows)
 * on float32, bfloat16 and float16 rows; a launch in stream order behind a
 * flag wait and a copy, before a copy; the staging path where no kernel
 * applies (a host operand, rows in place); the stream path's launches:
 * row programs with their terms in pinned memory (the combine backward's
 * dots on device rows), and pre-multiplied sums whose scalar is device
 * memory, read as the kernel runs (every type; the scalar changed on the
 * stream between two launches).  On the emulation (the default) the
 * twins run; MOECCL_DEVICE=cuda runs the CUDA kernels on a GPU
 * (scripts/gpu-check.sh).  A NaN result equals any NaN (its sign and
 * payload are the hardware's).  It prints the kernels launched and the bytes
 * the device table moved through host memory (0 where the kernels ran).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "kernels/devkern.h"
#include "kernels/devmath.h"
#include "kernels/mem.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"
#include "moeccl.h"
#include "unit_check.h"

#define OK(call) CHECK((call) == moecclSuccess, "%s failed", #call)

static const moeccl_device_ops_t* D;
static const moeccl_mem_ops_t* M;
static void* S; /* the test's stream */
static int on_gpu;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static void fill(void* p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++) ((unsigned char*)p)[i] = (unsigned char)next();
}

static void* dalloc(size_t bytes) {
  void* p = NULL;
  OK(D->alloc(&p, bytes ? bytes : 1, 0));
  return p;
}
static void put(void* d, const void* h, size_t n) {
  OK(D->copy_async(d, h, n, S));
  OK(D->synchronize(S));
}
static void get(void* h, const void* d, size_t n) {
  OK(D->copy_async(h, d, n, S));
  OK(D->synchronize(S));
}

static const char* type_name[moecclNumTypes] = {"int8",    "uint8",    "int32",   "uint32",
                                                "int64",   "uint64",   "float16", "float32",
                                                "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
static const size_t type_size[moecclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

/* Whether element i of x is a NaN of type t. */
static int is_nan(moecclDataType_t t, const unsigned char* x) {
  uint16_t h;
  uint32_t f;
  uint64_t d;
  switch (t) {
    case moecclFloat16: memcpy(&h, x, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    case moecclBfloat16: memcpy(&h, x, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    case moecclFloat32: memcpy(&f, x, 4); return (f & 0x7f800000) == 0x7f800000 && (f & 0x7fffff);
    case moecclFloat64:
      memcpy(&d, x, 8);
      return (d & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (d & 0xfffffffffffffull);
    case moecclFloat8e4m3: return (x[0] & 0x7f) == 0x7f;
    case moecclFloat8e5m2: return (x[0] & 0x7c) == 0x7c && (x[0] & 3);
    default: return 0;
  }
}

/* Elements equal bit for bit, but two NaNs are equal: which NaN (sign,
 * payload) an operation on a NaN gives is the hardware's (x86's AVX2 table
 * and its portable one differ, a GPU gives its canonical NaN). */
static size_t first_diff(moecclDataType_t t, const void* got, const void* want, size_t n) {
  size_t es = type_size[t];
  for (size_t i = 0; i < n; i++) {
    const unsigned char *g = (const unsigned char*)got + i * es,
                        *w = (const unsigned char*)want + i * es;
    if (memcmp(g, w, es) == 0) continue;
    if (is_nan(t, g) && is_nan(t, w)) continue;
    return i;
  }
  return n;
}

enum { RUN_REDUCE, RUN_SCALE, RUN_POSTDIV };

/* One reduction through the device table against the host kernels. */
static void one_reduce(const moeccl_red_t* r, int what, unsigned flags, size_t n, int in_place,
                       const char* label) {
  size_t bytes = n * r->elem_size;
  unsigned char *ha = malloc(bytes), *hb = malloc(bytes), *want = malloc(bytes),
                *got = malloc(bytes);
  fill(ha, bytes), fill(hb, bytes);
  void *da = dalloc(bytes), *db = dalloc(bytes), *dd = in_place ? da : dalloc(bytes);
  put(da, ha, bytes), put(db, hb, bytes);
  memcpy(want, ha, bytes);
  if (what == RUN_REDUCE) {
    moeccl_reduce(r, want, ha, hb, n, flags);
    OK(M->reduce(r, dd, da, db, n, flags));
  } else if (what == RUN_SCALE) {
    moeccl_reduce_scale(r, want, ha, n);
    OK(M->scale(r, dd, da, n));
  } else {
    moeccl_reduce_postdiv(r, want, n);
    if (!in_place) put(dd, ha, bytes);
    OK(M->postdiv(r, dd, n));
  }
  get(got, dd, bytes);
  size_t i = first_diff(r->type, got, want, n);
  unsigned long long gv = 0, wv = 0, av = 0, bv = 0;
  if (i < n) {
    memcpy(&gv, got + i * r->elem_size, r->elem_size),
        memcpy(&wv, want + i * r->elem_size, r->elem_size);
    memcpy(&av, ha + i * r->elem_size, r->elem_size),
        memcpy(&bv, hb + i * r->elem_size, r->elem_size);
  }
  CHECK(i == n, "%s %s%s: element %zu of %zu is %#llx, the host's %#llx (a %#llx, b %#llx)",
        type_name[r->type], label, in_place ? " in place" : "", i, n, gv, wv, av, bv);
  if (!in_place) OK(D->free(dd));
  OK(D->free(da));
  OK(D->free(db));
  free(ha), free(hb), free(want), free(got);
}

static void reductions(void) {
  static const char* op_name[] = {"sum", "prod", "max", "min"};
  const size_t sizes[] = {1, 37, 4099};
  for (int t = 0; t < moecclNumTypes; t++) {
    for (int op = 0; op < MOECCL_RED_NOPS; op++)
      for (int k = 0; k < 3; k++) {
        moeccl_red_t r;
        OK(moeccl_red_init(&r, (moecclDataType_t)t, (moeccl_red_op_t)op));
        one_reduce(&r, RUN_REDUCE, 0, sizes[k], k == 1, op_name[op]);
      }
    /* a pre-multiplied sum by a scalar of the type (3 or 0.37-ish) */
    unsigned char scalar[8];
    fill(scalar, sizeof scalar);
    moeccl_red_t r;
    OK(moeccl_red_init(&r, (moecclDataType_t)t, MOECCL_RED_SUM));
    moeccl_red_set_premul(&r, scalar);
    for (unsigned f = 0; f < 4; f++) {
      char label[32];
      snprintf(label, sizeof label, "premulsum flags %u", f);
      one_reduce(&r, RUN_REDUCE, f, 1031, f == 3, label);
    }
    one_reduce(&r, RUN_SCALE, 0, 1031, 0, "scale");
    one_reduce(&r, RUN_SCALE, 0, 1031, 1, "scale");
    /* Avg: floats pre-multiply by 1/n, integers divide at the end */
    OK(moeccl_red_init(&r, (moecclDataType_t)t, MOECCL_RED_SUM));
    moeccl_red_set_premul_inverse(&r, 3);
    r.postdiv = r.premul ? 0 : 3;
    one_reduce(&r, RUN_REDUCE, 3, 1031, 0, "avg");
    one_reduce(&r, RUN_POSTDIV, 0, 1031, 1, "avg postdiv");
    r.postdiv = 7;
    one_reduce(&r, RUN_POSTDIV, 0, 1031, 0, "postdiv by 7");
  }
}

/* The stream path's fold (moeccl_devkern_fold_async: dst = src[0] (+)
 * src[1] (+) ..., a bit per raw operand) against the host kernels applied
 * operand by operand; 16 operands fit one launch, 17 and 32 take more. */
static void one_fold(const moeccl_red_t* r, int nsrc, uint32_t raw, size_t n, const char* label) {
  size_t bytes = n * r->elem_size;
  unsigned char *h[32], *want = malloc(bytes), *got = malloc(bytes);
  void* d[32];
  for (int k = 0; k < nsrc; k++) {
    h[k] = malloc(bytes), fill(h[k], bytes);
    d[k] = dalloc(bytes), put(d[k], h[k], bytes);
  }
  void* dd = dalloc(bytes);
  moeccl_reduce(r, want, h[0], h[1], n, raw & 3);
  for (int k = 2; k < nsrc; k++) moeccl_reduce(r, want, want, h[k], n, (raw >> k & 1) ? 2 : 0);
  uint64_t before = moeccl_devkern_launches();
  OK(moeccl_devkern_fold_async(r, dd, (const void* const*)d, nsrc, raw, n, S));
  OK(D->synchronize(S));
  uint64_t launches = moeccl_devkern_launches() - before;
  uint64_t want_launches = nsrc <= 16 ? 1 : nsrc <= 31 ? 2 : 3;
  CHECK(launches == want_launches, "fold of %d operands: %llu launches, want %llu", nsrc,
        (unsigned long long)launches, (unsigned long long)want_launches);
  get(got, dd, bytes);
  size_t i = first_diff(r->type, got, want, n);
  CHECK(i == n, "%s %s fold of %d (raw %#x): element %zu of %zu differs from the host's",
        type_name[r->type], label, nsrc, raw, i, n);
  for (int k = 0; k < nsrc; k++) {
    OK(D->free(d[k]));
    free(h[k]);
  }
  OK(D->free(dd));
  free(want), free(got);
}

static void folds(void) {
  if (!moeccl_devkern_ready()) {
    printf("test_dev_kernels: folds: no kernels for %s in this build\n", D->name);
    return;
  }
  static const char* op_name[] = {"sum", "prod", "max", "min"};
  static const int nsrcs[] = {2, 5, 16, 17, 32};
  for (int t = 0; t < moecclNumTypes; t++) {
    for (int op = 0; op < MOECCL_RED_NOPS; op++)
      for (int k = 0; k < 5; k++) {
        moeccl_red_t r;
        OK(moeccl_red_init(&r, (moecclDataType_t)t, (moeccl_red_op_t)op));
        one_fold(&r, nsrcs[k], 0, 257, op_name[op]);
      }
    unsigned char scalar[8];
    fill(scalar, sizeof scalar);
    moeccl_red_t r;
    OK(moeccl_red_init(&r, (moecclDataType_t)t, MOECCL_RED_SUM));
    moeccl_red_set_premul(&r, scalar);
    for (int k = 0; k < 5; k++) /* the direct reduce-scatter's mask: every operand raw */
      one_fold(&r, nsrcs[k], nsrcs[k] == 32 ? 0xffffffffu : (1u << nsrcs[k]) - 1, 1031,
               "premulsum");
    one_fold(&r, 17, (uint32_t)next(), 1031, "premulsum, some raw");
  }
}

/* ---- row programs ------------------------------------------------------- */

static float randf(void) { return (float)((int)(next() % 2001) - 1000) / 256.0f; }

/* Rows of type t with values (not bit patterns: the programs' inputs are
 * activations and weights). */
static void fill_rows(moecclDataType_t t, void* p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = randf();
    if (t == moecclFloat32) ((float*)p)[i] = v;
    else if (t == moecclBfloat16) ((uint16_t*)p)[i] = moeccl_float_to_bf16(v);
    else ((uint16_t*)p)[i] = moeccl_float_to_half(v);
  }
}

/* Runs p on the host and through the device table; dst starts as random
 * rows (a program writes part of it). */
static moeccl_dev_arena_t arena; /* pinned memory of the stream path's launches (none: NULL base) */

static void one_rows(const moeccl_rows_t* p, size_t dst_bytes, size_t src_rows, size_t aux_bytes,
                     const char* label) {
  size_t rb = moeccl_rows_row_bytes(p), sb = src_rows * rb;
  unsigned char *hd = malloc(dst_bytes), *hs = malloc(sb), *ha = malloc(aux_bytes + 1),
                *got = malloc(dst_bytes);
  moecclDataType_t t = p->mode == MOECCL_ROWS_COPY ? moecclUint8 : p->type;
  int dst_f32 =
      p->mode == MOECCL_ROWS_DOT || p->mode == MOECCL_ROWS_ADD || p->type == moecclFloat32;
  if (p->mode == MOECCL_ROWS_COPY) {
    fill(hs, sb), fill(hd, dst_bytes);
  } else {
    fill_rows(p->type, hs, sb / (p->type == moecclFloat32 ? 4 : 2));
    fill_rows(dst_f32 ? moecclFloat32 : p->type, hd, dst_bytes / (dst_f32 ? 4 : 2));
  }
  if (p->mode == MOECCL_ROWS_DOT)
    fill_rows(p->type, ha, aux_bytes / (p->type == moecclFloat32 ? 4 : 2));
  else fill_rows(moecclFloat32, ha, aux_bytes / 4);
  if (p->mode == MOECCL_ROWS_SUM && aux_bytes >= 8) ((float*)ha)[1] = 1.0f; /* an unweighted term */
  void *dd = dalloc(dst_bytes), *ds = dalloc(sb), *dx = aux_bytes ? dalloc(aux_bytes) : NULL;
  put(dd, hd, dst_bytes), put(ds, hs, sb);
  if (dx) put(dx, ha, aux_bytes);
  moeccl_rows_run(p, hd, hs, aux_bytes ? ha : NULL);
  if (arena.base) { /* the stream path: queued on S, terms in the arena */
    arena.used = 0;
    OK(moeccl_devkern_rows_async(p, p->terms, dd, ds, dx, &arena, S));
    OK(D->synchronize(S));
  } else {
    OK(M->rows(p, dd, ds, dx));
  }
  get(got, dd, dst_bytes);
  moecclDataType_t ct =
      p->mode == MOECCL_ROWS_DOT || p->mode == MOECCL_ROWS_ADD ? moecclFloat32 : t;
  size_t i = first_diff(ct, got, hd, dst_bytes / type_size[ct]);
  CHECK(i == dst_bytes / type_size[ct], "rows %s (%s)%s: element %zu differs from the host's",
        label, p->mode == MOECCL_ROWS_COPY ? "bytes" : type_name[p->type],
        arena.base ? " on the stream" : "", i);
  OK(D->free(dd));
  OK(D->free(ds));
  if (dx) OK(D->free(dx));
  free(hd), free(hs), free(ha), free(got);
}

#define NT 600
static void rows(void) {
  static moeccl_row_term_t t[NT];
  const moecclDataType_t types[] = {moecclFloat32, moecclBfloat16, moecclFloat16};
  const size_t elems = 300, nsrc = 200, ndst = 300;
  for (int k = 0; k < 3; k++) {
    moecclDataType_t ty = types[k];
    size_t rb = elems * (ty == moecclFloat32 ? 4 : 2);
    /* SUM: groups of 1..4 terms on distinct rows, some sources missing,
     * some weights missing */
    t[0] = (moeccl_row_term_t){0, 5, 1}; /* a lone term of weight 1.0: a copy */
    size_t n = 1;
    for (uint32_t d = 1; d < ndst && n + 4 <= NT; d++)
      for (uint32_t j = 0, g = 1 + (uint32_t)(next() % 4); j < g; j++)
        t[n++] =
            (moeccl_row_term_t){d, next() % 9 == 0 ? MOECCL_ROW_NONE : (uint32_t)(next() % nsrc),
                                next() % 7 == 0 ? MOECCL_ROW_NONE : (uint32_t)(next() % 64)};
    moeccl_rows_t p = {
        .mode = MOECCL_ROWS_SUM, .type = ty, .elems = elems, .terms = t, .nterms = n};
    one_rows(&p, ndst * rb, nsrc, 64 * 4, "sum weighted");
    one_rows(&p, ndst * rb, nsrc, 0, "sum unweighted");
    /* DOT: one float per term */
    for (size_t i = 0; i < 400; i++)
      t[i] = (moeccl_row_term_t){(uint32_t)i,
                                 next() % 11 == 0 ? MOECCL_ROW_NONE : (uint32_t)(next() % nsrc),
                                 (uint32_t)(next() % 50)};
    p = (moeccl_rows_t){
        .mode = MOECCL_ROWS_DOT, .type = ty, .elems = elems, .terms = t, .nterms = 400};
    one_rows(&p, 400 * 4, nsrc, 50 * rb, "dot");
  }
  /* ADD: float32 rows, distinct destinations (parallel) and repeated ones
   * (in order) */
  for (int rep = 0; rep < 2; rep++) {
    size_t n = 0;
    for (uint32_t i = 0; i < 250; i++)
      t[n++] = (moeccl_row_term_t){rep ? (uint32_t)(next() % 40) : i, (uint32_t)(next() % 200),
                                   next() % 3 == 0 ? 0 : MOECCL_ROW_NONE};
    moeccl_rows_t p = {
        .mode = MOECCL_ROWS_ADD, .type = moecclFloat32, .elems = 129, .terms = t, .nterms = n};
    one_rows(&p, 250 * 129 * 4, 200, 0, rep ? "add, rows repeated" : "add");
  }
  /* COPY: rows of bytes, runs of consecutive rows, odd and even sizes */
  const size_t row_bytes[] = {7, 64, 1200};
  for (int k = 0; k < 3; k++) {
    size_t n = 0;
    for (uint32_t i = 0; i < 300; i++)
      t[n++] = (moeccl_row_term_t){i, (uint32_t)((i * 7 + (i / 10)) % 150), 0};
    moeccl_rows_t p = {.mode = MOECCL_ROWS_COPY,
                       .type = moecclFloat32,
                       .elems = row_bytes[k],
                       .terms = t,
                       .nterms = n};
    one_rows(&p, 300 * row_bytes[k], 150, 0, "copy");
  }
}

/* The row programs again as the stream path launches them
 * (moeccl_devkern_rows_async: queued on the stream, terms in pinned
 * memory): the combine backward's dots read device rows on both sides. */
static void rows_on_stream(void) {
  if (!moeccl_devkern_ready()) {
    printf("test_dev_kernels: rows on the stream: no kernels for %s in this build\n", D->name);
    return;
  }
  arena.bytes = (size_t)1 << 20;
  OK(D->host_alloc((void**)&arena.base, arena.bytes));
  rows();
  D->host_free(arena.base);
  arena.base = NULL;
}

/* ---- a pre-multiplier in device memory ----------------------------------- */

/* A PreMulSum's scalar in device memory, as the stream path launches it
 * (moeccl_red_set_premul_device: each kernel reads it as it runs) against
 * the host kernels given its value: a reduction per operand flag, a scale
 * and a fold, every datatype, random scalars. */
static void one_devscalar(moecclDataType_t t) {
  size_t es = type_size[t], n = 1031, bytes = n * es;
  unsigned char scalar[8];
  fill(scalar, sizeof scalar);
  void* ds = dalloc(8);
  put(ds, scalar, 8);
  moeccl_red_t host, dev;
  OK(moeccl_red_init(&host, t, MOECCL_RED_SUM));
  moeccl_red_set_premul(&host, scalar);
  OK(moeccl_red_init(&dev, t, MOECCL_RED_SUM));
  moeccl_red_set_premul_device(&dev, ds);
  CHECK(dev.premul && dev.scalar_dev == ds, "%s: no device pre-multiplier was set", type_name[t]);
  unsigned char *ha = malloc(bytes), *hb = malloc(bytes), *want = malloc(bytes),
                *got = malloc(bytes);
  fill(ha, bytes), fill(hb, bytes);
  void *da = dalloc(bytes), *db = dalloc(bytes), *dd = dalloc(bytes);
  put(da, ha, bytes), put(db, hb, bytes);
  for (int k = 0; k < 6; k++) { /* flags 0..3, a scale, a fold of three */
    const char* what = k < 4 ? "reduce" : k == 4 ? "scale" : "fold";
    if (k < 4) {
      moeccl_reduce(&host, want, ha, hb, n, (unsigned)k);
      OK(moeccl_devkern_reduce_async(&dev, MOECCL_KRED_REDUCE, dd, da, db, n, (unsigned)k, S));
    } else if (k == 4) {
      moeccl_reduce_scale(&host, want, ha, n);
      OK(moeccl_devkern_reduce_async(&dev, MOECCL_KRED_SCALE, dd, da, NULL, n, 0, S));
    } else {
      const void* src[3] = {da, db, da};
      moeccl_reduce(&host, want, ha, hb, n, 3);
      moeccl_reduce(&host, want, want, ha, n, 2);
      OK(moeccl_devkern_fold_async(&dev, dd, src, 3, 7, n, S));
    }
    OK(D->synchronize(S));
    get(got, dd, bytes);
    size_t i = first_diff(t, got, want, n);
    CHECK(i == n, "%s premulsum by a device scalar, %s (flags %d): element %zu of %zu differs",
          type_name[t], what, k < 4 ? k : 3, i, n);
  }
  OK(D->free(da));
  OK(D->free(db));
  OK(D->free(dd));
  OK(D->free(ds));
  free(ha), free(hb), free(want), free(got);
}

/* The scalar changes on the stream between two launches that read it:
 * each reads the value the stream gave it before, not the one at launch
 * time nor the last one. */
static void devscalar_order(void) {
  enum { N = 4096 };
  float *vals = NULL, *in = NULL;
  OK(D->host_alloc((void**)&vals, 3 * sizeof(float)));
  OK(D->host_alloc((void**)&in, N * sizeof(float)));
  vals[0] = 3.0f, vals[1] = -0.5f, vals[2] = 1e30f;
  for (int i = 0; i < N; i++) in[i] = randf();
  float *ds = dalloc(sizeof(float)), *da = dalloc(N * 4), *d1 = dalloc(N * 4), *d2 = dalloc(N * 4);
  put(da, in, N * 4);
  moeccl_red_t dev;
  OK(moeccl_red_init(&dev, moecclFloat32, MOECCL_RED_SUM));
  moeccl_red_set_premul_device(&dev, ds);
  OK(D->copy_async(ds, &vals[0], sizeof(float), S));
  OK(moeccl_devkern_reduce_async(&dev, MOECCL_KRED_SCALE, d1, da, NULL, N, 0, S));
  OK(D->copy_async(ds, &vals[1], sizeof(float), S));
  OK(moeccl_devkern_reduce_async(&dev, MOECCL_KRED_SCALE, d2, da, NULL, N, 0, S));
  OK(D->copy_async(ds, &vals[2], sizeof(float), S));
  OK(D->synchronize(S));
  float* got = malloc(N * 4);
  for (int k = 0; k < 2; k++) {
    get(got, k ? d2 : d1, N * 4);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != vals[k] * in[i];
    CHECK(bad == 0,
          "a scale by the device scalar set to %g before it on the stream: %d of %d "
          "elements wrong",
          (double)vals[k], bad, N);
  }
  free(got);
  OK(D->free(ds));
  OK(D->free(da));
  OK(D->free(d1));
  OK(D->free(d2));
  D->host_free(vals), D->host_free(in);
}

static void devscalars(void) {
  if (!moeccl_devkern_ready()) {
    printf("test_dev_kernels: device scalars: no kernels for %s in this build\n", D->name);
    return;
  }
  for (int t = 0; t < moecclNumTypes; t++) one_devscalar((moecclDataType_t)t);
  devscalar_order();
}

/* Where no kernel applies the device table stages through host memory,
 * with the same results: an operand in host memory, a row program whose
 * destination overlaps its sources. */
static void fallbacks(void) {
  moeccl_mem_device_counts_t before, after;
  moeccl_mem_device_counts(&before);
  enum { N = 777 };
  float ha[N], hb[N], want[N], got[N];
  for (int i = 0; i < N; i++) ha[i] = randf(), hb[i] = randf();
  float* da = dalloc(sizeof ha);
  put(da, ha, sizeof ha);
  moeccl_red_t r;
  OK(moeccl_red_init(&r, moecclFloat32, MOECCL_RED_SUM));
  moeccl_reduce(&r, want, ha, hb, N, 0);
  OK(M->reduce(&r, da, da, hb, N, 0)); /* b: pageable host memory */
  get(got, da, sizeof got);
  CHECK(memcmp(got, want, sizeof got) == 0, "a reduction with a host operand differs");
  /* SUM in place: row i = row i + row i+1, in term order */
  static moeccl_row_term_t t[2 * 16];
  for (uint32_t i = 0; i < 16; i++)
    t[2 * i] = (moeccl_row_term_t){i, i, MOECCL_ROW_NONE},
          t[2 * i + 1] = (moeccl_row_term_t){i, i + 1, MOECCL_ROW_NONE};
  moeccl_rows_t p = {
      .mode = MOECCL_ROWS_SUM, .type = moecclFloat32, .elems = 40, .terms = t, .nterms = 32};
  float rows_h[17 * 40];
  fill_rows(moecclFloat32, rows_h, 17 * 40);
  float* dr = dalloc(sizeof rows_h);
  put(dr, rows_h, sizeof rows_h);
  moeccl_rows_run(&p, rows_h, rows_h, NULL);
  OK(M->rows(&p, dr, dr, NULL));
  float rows_got[17 * 40];
  get(rows_got, dr, sizeof rows_got);
  CHECK(memcmp(rows_got, rows_h, sizeof rows_h) == 0, "a row program in place differs");
  moeccl_mem_device_counts(&after);
  CHECK(after.staged_bytes > before.staged_bytes, "the fallbacks staged nothing");
  printf("test_dev_kernels: fallbacks (host operand, rows in place): %llu bytes staged\n",
         (unsigned long long)(after.staged_bytes - before.staged_bytes));
  OK(D->free(da));
  OK(D->free(dr));
}

/* A launch on the test's stream behind a flag wait and a copy into its
 * operand, followed by a copy out: it runs in stream order. */
static void stream_order(void) {
  const moeccl_dev_image_t image = {moeccl_kernels_fatbin, moeccl_kernels_fatbin_bytes,
                                    moeccl_kernel_twins, MOECCL_K_COUNT};
  void *module = NULL, *fn = NULL;
  if (D->module_load(&image, &module) != moecclSuccess) {
    printf("test_dev_kernels: stream order: no kernels for %s in this build\n", D->name);
    return;
  }
  OK(D->function(module, "moeccl_k_reduce", &fn));
  CHECK(D->function(module, "no_such_kernel", &fn) != moecclSuccess,
        "an unknown kernel name was found");
  OK(D->function(module, "moeccl_k_reduce", &fn));
  enum { N = 5000 };
  int32_t *in = NULL, *out = NULL;
  volatile uint64_t* flag = NULL;
  OK(D->host_alloc((void**)&in, N * 4));
  OK(D->host_alloc((void**)&out, N * 4));
  OK(D->host_flags((void**)&flag, 64));
  for (int i = 0; i < N; i++) in[i] = i;
  int32_t* a = dalloc(N * 4);
  int32_t* b = dalloc(N * 4);
  put(b, in, N * 4);
  moeccl_kred_args_t g = {
      .dst = a, .a = a, .b = b, .n = N, .type = moecclInt32, .op = MOECCL_RED_SUM};
  OK(D->wait_value(S, flag, 1));
  OK(D->copy_async(a, in, N * 4, S));
  OK(D->launch(fn, 8, 256, &g, sizeof g, S));
  g.n = 0; /* the launch took its own copy */
  OK(D->copy_async(out, a, N * 4, S));
  usleep(20000);
  CHECK(D->query(S) == moecclInProgress, "the launch did not wait behind the flag");
  D->host_write(flag, 1);
  OK(D->synchronize(S));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += out[i] != 2 * i;
  CHECK(bad == 0, "%d of %d elements of a launch between two copies are wrong", bad, N);
  CHECK(D->launch(fn, 0, 256, &g, sizeof g, S) != moecclSuccess,
        "a launch of 0 blocks was accepted");
  OK(D->free(a));
  OK(D->free(b));
  D->host_free(in), D->host_free(out), D->host_free((void*)flag);
}

int main(void) {
  alarm(300);
  const char* want = getenv("MOECCL_DEVICE");
  if (!want || !*want) setenv("MOECCL_DEVICE", "emu", 1), want = "emu";
  D = moeccl_device();
  if (!D) {
    printf("test_dev_kernels: SKIP (MOECCL_DEVICE=%s: no such backend here)\n", want);
    return 77;
  }
  on_gpu = D != &moeccl_device_emu_ops;
  M = moeccl_mem_ops((moeccl_mem_t){MOECCL_MEM_DEVICE, 0});
  OK(D->stream_create(&S));
  moeccl_mem_device_counts_t before, after;
  moeccl_mem_device_counts(&before);
  reductions();
  folds();
  devscalars();
  rows();
  rows_on_stream();
  moeccl_mem_device_counts(&after);
  uint64_t launched = after.launches - before.launches,
           staged = after.staged_bytes - before.staged_bytes;
  printf("test_dev_kernels: %s backend: %llu kernels launched, %llu bytes staged through host "
         "memory (fatbin %zu bytes)\n",
         D->name, (unsigned long long)launched, (unsigned long long)staged,
         moeccl_kernels_fatbin_bytes);
  if (!on_gpu || moeccl_kernels_fatbin_bytes) {
    CHECK(launched > 0, "no kernel was launched");
    CHECK(staged == 0, "%llu bytes went through host memory", (unsigned long long)staged);
  }
  fallbacks();
  stream_order();
  OK(D->stream_destroy(S));
  printf("test_dev_kernels: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
