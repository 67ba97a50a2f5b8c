/*
 * Unit test of the host reduction kernels (src/kernels/reduce.c).
 *
 * The reference is written independently of reduce.c: the 16- and 8-bit
 * float formats are decoded from their field definitions with ldexp, and a
 * double is rounded into them by searching the sorted table of all their
 * codes for the nearest value (ties to the even code), which also checks
 * the library's conversion functions on every code and every midpoint.
 * Each kernel output is compared with the exact result computed in double
 * and rounded once into the type (for the pre-multiplied sum, with the
 * products and the sum rounded to float32 first, as reduce.h defines it).
 *
 * Every datatype x op x pre-multiplier flags runs over lengths 0..4099, with
 * unaligned pointers and in place (dst == a, dst == b), on the kernels the
 * CPU selects and on the portable ones; guard bytes catch writes past n.
 * The throughput printed at the end is information, not a check.
 *
 * Exit status 0 when everything passed, 1 otherwise.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/reduce.h"
#include "unit_check.h"

/* Test hook in reduce.c: later moeccl_red_init calls take the portable
 * kernels. */
void moeccl_red_force_portable(int on);

/* Each group prints its first 8 failures, and counts them and its checks
 * from these readings of unit_check.h's counters. */
static int group_first_failure, group_first_check;

static void group_begin(void) {
  group_first_failure = failures, group_first_check = checks, check_print_budget = 8;
}

static void group_end(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void group_end(const char* fmt, ...) {
  int group_fails = failures - group_first_failure;
  long group_checks = checks - group_first_check;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  if (group_fails) printf(": FAIL (%d of %ld checks)\n", group_fails, group_checks);
  else printf(": ok (%ld checks)\n", group_checks);
}

/* xorshift64*: fixed seed, so a failure reproduces. */
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}
static double urand(void) { return (double)(rnd() >> 11) * 0x1p-53; }

/* ---- Reference formats ------------------------------------------------- */

typedef struct {
  const char* name;
  int ebits, mbits, bias;
  int ieee;     /* all-ones exponent is inf / NaN; else only all-ones magnitude is NaN */
  int saturate; /* beyond the largest finite value rounds to it (float8) */
  uint32_t sign;
  uint32_t top; /* largest finite positive code */
  double* val;  /* value of every code */
} fmt_t;

static double fmt_formula(const fmt_t* f, uint32_t c) {
  uint32_t mag = c & (f->sign - 1);
  int e = (int)(mag >> f->mbits), m = (int)(mag & ((1u << f->mbits) - 1));
  double v;
  if (f->ieee && e == (1 << f->ebits) - 1) v = m ? NAN : INFINITY;
  else if (!f->ieee && mag == f->sign - 1) v = NAN;
  else if (e == 0) v = ldexp(m, 1 - f->bias - f->mbits);
  else v = ldexp(m + (1 << f->mbits), e - f->bias - f->mbits);
  return (c & f->sign) ? -v : v;
}

static void fmt_setup(fmt_t* f) {
  uint32_t n = f->sign * 2;
  f->val = malloc(n * sizeof *f->val);
  for (uint32_t c = 0; c < n; c++) f->val[c] = fmt_formula(f, c);
  f->top = 0;
  for (uint32_t c = 0; c < f->sign; c++)
    if (isfinite(f->val[c])) f->top = c;
}

/* x rounded to the nearest code, ties to even; beyond the largest finite
 * value: inf (IEEE rounding) or the largest finite value (saturating). */
static uint32_t ref_encode(const fmt_t* f, double x) {
  if (isnan(x)) return f->sign - 1;
  uint32_t s = signbit(x) ? f->sign : 0, top = f->top;
  const double* v = f->val;
  double ax = fabs(x);
  if (ax > v[top]) {
    if (f->saturate) return s | top;
    return s | (ax >= v[top] + (v[top] - v[top - 1]) / 2 ? top + 1 : top);
  }
  uint32_t lo = 0, hi = top; /* v[lo] <= ax */
  while (lo < hi) {
    uint32_t mid = (lo + hi + 1) / 2;
    if (v[mid] <= ax) lo = mid;
    else hi = mid - 1;
  }
  if (v[lo] == ax) return s | lo;
  double below = ax - v[lo], above = v[lo + 1] - ax; /* exact (Sterbenz) */
  if (below < above) return s | lo;
  if (above < below) return s | (lo + 1);
  return s | (lo & 1 ? lo + 1 : lo);
}

static fmt_t fmt_f16 = {"float16", 5, 10, 15, 1, 0, 0x8000, 0, NULL};
static fmt_t fmt_bf16 = {"bfloat16", 8, 7, 127, 1, 0, 0x8000, 0, NULL};
static fmt_t fmt_e4m3 = {"fp8e4m3", 4, 3, 7, 0, 1, 0x80, 0, NULL};
static fmt_t fmt_e5m2 = {"fp8e5m2", 5, 2, 15, 1, 1, 0x80, 0, NULL};

/* ---- Conversion functions ---------------------------------------------- */

typedef struct {
  fmt_t* fmt;
  float (*dec)(uint32_t);
  uint32_t (*enc)(float);
} conv_t;

static float dec_f16(uint32_t c) { return moeccl_half_to_float((uint16_t)c); }
static uint32_t enc_f16(float f) { return moeccl_float_to_half(f); }
static float dec_bf16(uint32_t c) { return moeccl_bf16_to_float((uint16_t)c); }
static uint32_t enc_bf16(float f) { return moeccl_float_to_bf16(f); }
static float dec_e4m3(uint32_t c) { return moeccl_fp8e4m3_to_float((uint8_t)c); }
static uint32_t enc_e4m3(float f) { return moeccl_float_to_fp8e4m3(f); }
static float dec_e5m2(uint32_t c) { return moeccl_fp8e5m2_to_float((uint8_t)c); }
static uint32_t enc_e5m2(float f) { return moeccl_float_to_fp8e5m2(f); }

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void check_enc(const conv_t* cv, float x) {
  const fmt_t* f = cv->fmt;
  uint32_t got = cv->enc(x), want = ref_encode(f, x);
  if (isnan(f->val[want]))
    CHECK_EXPR(got < 2 * f->sign && isnan(f->val[got]), "%s(%a) = 0x%x, want a NaN", f->name, x,
               got);
  else CHECK_EXPR(got == want, "%s(%a) = 0x%x, want 0x%x", f->name, x, got, want);
}

static void test_conversions(const conv_t* cv) {
  const fmt_t* f = cv->fmt;
  group_begin();
  for (uint32_t c = 0; c < 2 * f->sign; c++) { /* decoding, every code */
    float got = cv->dec(c);
    double want = f->val[c];
    if (isnan(want)) CHECK_EXPR(isnan(got), "decode %s 0x%x = %a, want NaN", f->name, c, got);
    else
      CHECK_EXPR(got == want && !signbit(got) == !signbit(want), "decode %s 0x%x = %a, want %a",
                 f->name, c, got, want);
  }
  for (uint32_t c = 0; c <= f->top; c++) { /* every value, midpoint and its neighbours */
    for (int neg = 0; neg < 2; neg++) {
      float v = (float)f->val[c];
      check_enc(cv, neg ? -v : v);
      if (c == f->top) continue;
      double mid = (f->val[c] + f->val[c + 1]) / 2;
      float m = (float)mid;
      CHECK_EXPR((double)m == mid, "%s midpoint %a not a float", f->name, mid);
      float xs[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
      for (int k = 0; k < 3; k++) check_enc(cv, neg ? -xs[k] : xs[k]);
    }
  }
  double top = f->val[f->top], edge = top + (top - f->val[f->top - 1]) / 2;
  float specials[] = {INFINITY,
                      -INFINITY,
                      NAN,
                      -NAN,
                      bits_to_float(0x7f800001),
                      bits_to_float(0xffbfffff),
                      FLT_MAX,
                      -FLT_MAX,
                      0.0f,
                      -0.0f,
                      FLT_MIN,
                      0x1p-149f,
                      -0x1p-149f,
                      0x1p-140f,
                      (float)top,
                      (float)(2 * top),
                      (float)edge,
                      nextafterf((float)edge, 0.0f),
                      nextafterf((float)edge, INFINITY),
                      -(float)edge,
                      1e30f,
                      -1e-30f};
  for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) check_enc(cv, specials[k]);
  for (int k = 0; k < 1 << 20; k++) check_enc(cv, bits_to_float((uint32_t)rnd()));
  for (int k = 0; k < 1 << 18; k++) /* the exponents the format covers, densely */
    check_enc(cv, (float)ldexp(urand() * 2 - 1, (int)(rnd() % 40) - f->bias - f->mbits - 2 +
                                                    (f->ebits > 5 ? (int)(rnd() % 200) : 0)));
  group_end("conversions %s (all %u codes, midpoints, random floats)", f->name, 2 * f->sign);
}

/* ---- Datatypes --------------------------------------------------------- */

enum { K_SINT, K_UINT, K_F32, K_F64, K_NARROW };

typedef struct {
  moecclDataType_t type;
  const char* name;
  size_t size;
  int kind;
  fmt_t* fmt;
} tdesc_t;

static const tdesc_t types[] = {
    {moecclInt8, "int8", 1, K_SINT, NULL},
    {moecclUint8, "uint8", 1, K_UINT, NULL},
    {moecclInt32, "int32", 4, K_SINT, NULL},
    {moecclUint32, "uint32", 4, K_UINT, NULL},
    {moecclInt64, "int64", 8, K_SINT, NULL},
    {moecclUint64, "uint64", 8, K_UINT, NULL},
    {moecclFloat16, "float16", 2, K_NARROW, &fmt_f16},
    {moecclFloat32, "float32", 4, K_F32, NULL},
    {moecclFloat64, "float64", 8, K_F64, NULL},
    {moecclBfloat16, "bfloat16", 2, K_NARROW, &fmt_bf16},
    {moecclFloat8e4m3, "fp8e4m3", 1, K_NARROW, &fmt_e4m3},
    {moecclFloat8e5m2, "fp8e5m2", 1, K_NARROW, &fmt_e5m2},
};
#define NTYPES (sizeof types / sizeof types[0])

static uint64_t mask_of(const tdesc_t* t) {
  return t->size == 8 ? ~0ull : (1ull << (8 * t->size)) - 1;
}
static int64_t sext(const tdesc_t* t, uint64_t v) {
  int sh = 64 - 8 * (int)t->size;
  return (int64_t)(v << sh) >> sh;
}
static uint64_t ld_raw(const tdesc_t* t, const void* p, size_t i) {
  uint64_t v = 0;
  memcpy(&v, (const char*)p + i * t->size, t->size); /* little endian */
  return v;
}
static void st_raw(const tdesc_t* t, void* p, size_t i, uint64_t v) {
  memcpy((char*)p + i * t->size, &v, t->size);
}

static double to_double(const tdesc_t* t, uint64_t raw) {
  if (t->kind == K_F32) return bits_to_float((uint32_t)raw);
  if (t->kind == K_F64) {
    double d;
    memcpy(&d, &raw, sizeof d);
    return d;
  }
  if (t->kind == K_NARROW) return t->fmt->val[raw];
  return t->kind == K_SINT ? (double)sext(t, raw) : (double)raw;
}

/* Rounded once into a floating type. */
static uint64_t from_double(const tdesc_t* t, double x) {
  if (t->kind == K_F32) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
  }
  if (t->kind == K_F64) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
  }
  return ref_encode(t->fmt, x);
}

static int is_float(const tdesc_t* t) { return t->kind >= K_F32; }

/* Random element: many moderate values (sums and products that round),
 * zeros of both signs, NaN, inf, values near the largest finite one, tiny
 * and subnormal ones, raw random bits. */
static uint64_t gen_value(const tdesc_t* t) {
  unsigned c = (unsigned)(rnd() % 100);
  uint64_t m = mask_of(t), sign = 1ull << (8 * t->size - 1);
  if (!is_float(t)) {
    static const int64_t edge[] = {0, 1, -1, INT64_MIN, INT64_MAX, 2, -2};
    if (c < 40) return rnd() & m;
    if (c < 75) return (uint64_t)((int64_t)(rnd() % 201) - 100) & m;
    if (c < 85) return 0;
    uint64_t e = (uint64_t)edge[rnd() % 7];
    if (e == (uint64_t)INT64_MIN) return sign;
    if (e == (uint64_t)INT64_MAX) return sign - 1;
    return e & m;
  }
  double big = t->kind == K_F32 ? FLT_MAX : t->kind == K_F64 ? DBL_MAX : t->fmt->val[t->fmt->top];
  uint64_t s = rnd() & 1 ? sign : 0;
  if (c < 45) return from_double(t, urand() * 16 - 8);
  if (c < 55) return s;
  if (c < 60) { /* NaN, with a random payload */
    if (t->kind == K_NARROW && !t->fmt->ieee) return s | (sign - 1);
    int mbits = t->kind == K_F32 ? 23 : t->kind == K_F64 ? 52 : t->fmt->mbits;
    uint64_t mant = (1ull << mbits) - 1, expo = (sign - 1) & ~mant;
    uint64_t payload = rnd() & mant;
    return s | expo | (payload ? payload : 1);
  }
  if (c < 63) return from_double(t, s ? -INFINITY : INFINITY);
  if (c < 75) return from_double(t, (s ? -big : big) * (0.5 + 0.5 * urand()));
  if (c < 85) { /* subnormal */
    int mbits = t->kind == K_F32 ? 23 : t->kind == K_F64 ? 52 : t->fmt->mbits;
    return s | (rnd() & ((1ull << mbits) - 1));
  }
  return rnd() & m;
}

/* ---- Kernel reference -------------------------------------------------- */

enum { V_SUM, V_PRE0, V_PRE_A, V_PRE_B, V_PRE_AB, V_PROD, V_MAX, V_MIN, NVARIANTS };
static const char* const variant_name[NVARIANTS] = {"sum",      "presum0", "presumA", "presumB",
                                                    "presumAB", "prod",    "max",     "min"};

typedef struct {
  double f;   /* floating types: the scalar as the kernels hold it */
  uint64_t u; /* integer types: its bits */
} scal_t;

static unsigned variant_flags(int v) {
  return v == V_PRE_A ? 1 : v == V_PRE_B ? 2 : v == V_PRE_AB ? 3 : 0;
}

/* s * x as reduce.h defines the pre-multiplied operand: wrapping for
 * integers, float64 for float64, float32 for the others (a product of two
 * float32 values is exact in double, so the cast rounds it once). */
static double premul_float(const tdesc_t* t, double s, double x) {
  if (t->kind == K_F64) {
    volatile double p = s * x;
    return p;
  }
  return (double)(float)((double)(float)s * x);
}

static uint64_t expected(const tdesc_t* t, int v, uint64_t ra, uint64_t rb, const scal_t* sc) {
  unsigned fl = variant_flags(v);
  if (!is_float(t)) {
    uint64_t m = mask_of(t), x = ra, y = rb;
    int pick;
    switch (v) {
      case V_PROD: return (x * y) & m;
      case V_MAX:
      case V_MIN:
        pick = t->kind == K_SINT ? sext(t, ra) > sext(t, rb) : ra > rb;
        if (v == V_MIN) pick = t->kind == K_SINT ? sext(t, ra) < sext(t, rb) : ra < rb;
        return pick ? ra : rb;
      default:
        if (fl & 1) x = sc->u * x;
        if (fl & 2) y = sc->u * y;
        return (x + y) & m;
    }
  }
  double x = to_double(t, ra), y = to_double(t, rb);
  switch (v) {
    case V_MAX: return (x > y || isnan(x)) ? ra : rb;
    case V_MIN: return (x < y || isnan(x)) ? ra : rb;
    case V_PROD: return from_double(t, x * y);
    default:
      if (!fl) return from_double(t, x + y);
      if (fl & 1) x = premul_float(t, sc->f, x);
      if (fl & 2) y = premul_float(t, sc->f, y);
      if (t->kind == K_F64) return from_double(t, x + y);
      return from_double(t, (double)(float)(x + y)); /* the float32 sum, then once more */
  }
}

static int raw_is_nan(const tdesc_t* t, uint64_t raw) {
  return is_float(t) && isnan(to_double(t, raw));
}

/* The result must be want's bits, or any NaN where want is a NaN that
 * arithmetic produced (MAX/MIN return an input's exact bits). */
static int same_result(const tdesc_t* t, int v, uint64_t got, uint64_t want) {
  if (v != V_MAX && v != V_MIN && raw_is_nan(t, want)) return raw_is_nan(t, got);
  return got == want;
}

/* ---- Kernel runs ------------------------------------------------------- */

#define MAXN 65536
#define GUARD 64
static unsigned char* buf_a;
static unsigned char* buf_b;
static unsigned char* buf_d;
static unsigned char* src_a; /* the inputs, kept for the reference */
static unsigned char* src_b;

enum { M_APART, M_UNALIGNED, M_DST_A, M_DST_B, NMODES };
static const char* const mode_name[NMODES] = {"apart", "unaligned", "dst=a", "dst=b"};

static void run_case(const tdesc_t* t, const moeccl_red_t* r, int v, const scal_t* sc, size_t n,
                     int mode) {
  size_t bytes = n * t->size, span = MAXN * 8 + 2 * GUARD;
  memset(buf_a, 0xa5, span), memset(buf_b, 0xa5, span), memset(buf_d, 0xa5, span);
  unsigned char* a = buf_a + GUARD + (mode == M_UNALIGNED || mode == M_DST_A ? 1 : 0);
  unsigned char* b = buf_b + GUARD + (mode == M_UNALIGNED ? 3 : 0);
  unsigned char* d = buf_d + GUARD + (mode == M_UNALIGNED ? 5 : 0);
  if (mode == M_DST_A) d = a;
  if (mode == M_DST_B) d = b;
  memcpy(a, src_a, bytes), memcpy(b, src_b, bytes);
  moeccl_reduce(r, d, a, b, n, variant_flags(v));
  int shown = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t ra = ld_raw(t, src_a, i), rb = ld_raw(t, src_b, i);
    uint64_t want = expected(t, v, ra, rb, sc), got = ld_raw(t, d, i);
    if (!same_result(t, v, got, want) && shown++ < 3)
      CHECK_EXPR(0, "%s %s n=%zu %s [%zu]: a=0x%llx b=0x%llx s=%g: got 0x%llx, want 0x%llx",
                 t->name, variant_name[v], n, mode_name[mode], i, (unsigned long long)ra,
                 (unsigned long long)rb, sc->f, (unsigned long long)got, (unsigned long long)want);
    checks++;
  }
  /* Nothing written before dst or past its n elements. */
  size_t past = 0;
  while (past < GUARD && d[bytes + past] == 0xa5) past++;
  CHECK_EXPR(past == GUARD, "%s %s n=%zu %s: byte %zu past the end written", t->name,
             variant_name[v], n, mode_name[mode], past);
  CHECK_EXPR(d[-1] == 0xa5, "%s %s n=%zu %s: byte before dst written", t->name, variant_name[v], n,
             mode_name[mode]);
}

/* Scalars for the pre-multiplied sums: a few values in the type (rounded
 * into it) through moeccl_red_set_premul, and 1/3, 1/7 through
 * moeccl_red_set_premul_inverse (floating types). */
static const double float_scalars[] = {0.5, -1.75, 0.3, 3.0, 1e-3};
static const int64_t int_scalars[] = {3, -1, -7, 200};

static void setup_premul(const tdesc_t* t, moeccl_red_t* r, int choice, scal_t* sc) {
  int nf = (int)(sizeof float_scalars / sizeof float_scalars[0]);
  if (is_float(t) && choice % (nf + 2) >= nf) {
    int n = choice % (nf + 2) == nf ? 3 : 7;
    moeccl_red_set_premul_inverse(r, n);
    sc->f = 1.0 / n;
    CHECK_EXPR(r->scalar.f == sc->f, "%s: inverse scalar %g, want %g", t->name, r->scalar.f, sc->f);
  } else {
    uint64_t raw = is_float(t) ? from_double(t, float_scalars[choice % nf])
                               : (uint64_t)int_scalars[choice % 4] & mask_of(t);
    unsigned char elem[8];
    st_raw(t, elem, 0, raw);
    moeccl_red_set_premul(r, elem);
    sc->u = raw;
    sc->f = is_float(t) ? to_double(t, raw) : 0;
    if (is_float(t))
      CHECK_EXPR(r->scalar.f == sc->f, "%s: scalar %g, want %g", t->name, r->scalar.f, sc->f);
    else if (t->kind == K_SINT)
      CHECK_EXPR(r->scalar.i == sext(t, raw), "%s: scalar %lld", t->name, (long long)r->scalar.i);
    else
      CHECK_EXPR(r->scalar.u == raw, "%s: scalar %llu", t->name, (unsigned long long)r->scalar.u);
  }
  CHECK_EXPR(r->premul == 1, "%s: premul not set", t->name);
}

static void fill_random(const tdesc_t* t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    st_raw(t, src_a, i, gen_value(t));
    st_raw(t, src_b, i, gen_value(t));
  }
}

static const size_t lengths[] = {0, 1, 7, 31, 33, 1000, 4099};
#define NLEN (sizeof lengths / sizeof lengths[0])

static void test_kernels(const tdesc_t* t, const char* path) {
  group_begin();
  for (int v = 0; v < NVARIANTS; v++) {
    moeccl_red_op_t op = v == V_PROD  ? MOECCL_RED_PROD
                         : v == V_MAX ? MOECCL_RED_MAX
                         : v == V_MIN ? MOECCL_RED_MIN
                                      : MOECCL_RED_SUM;
    int premul = v >= V_PRE0 && v <= V_PRE_AB;
    for (size_t li = 0; li < NLEN; li++) {
      for (int mode = 0; mode < NMODES; mode++) {
        moeccl_red_t r;
        scal_t sc = {1.0, 1};
        CHECK_EXPR(moeccl_red_init(&r, t->type, op) == moecclSuccess, "%s init", t->name);
        CHECK_EXPR(r.type == t->type && r.elem_size == t->size && r.op == op && !r.premul &&
                       !r.postdiv && r.kernel[0] && r.kernel[1] == r.kernel[0] &&
                       r.kernel[2] == r.kernel[0] && r.kernel[3] == r.kernel[0],
                   "%s: init fields", t->name);
        if (premul) setup_premul(t, &r, (int)(li * NMODES + mode), &sc);
        fill_random(t, lengths[li]);
        run_case(t, &r, v, &sc, lengths[li], mode);
      }
    }
    /* Every pair of float8 operands, once. */
    if (t->size == 1 && is_float(t)) {
      moeccl_red_t r;
      scal_t sc = {1.0, 1};
      moeccl_red_init(&r, t->type, op);
      if (premul) setup_premul(t, &r, v, &sc);
      for (size_t i = 0; i < 65536; i++)
        src_a[i] = (unsigned char)i, src_b[i] = (unsigned char)(i >> 8);
      run_case(t, &r, v, &sc, 65536, M_APART);
    }
  }
  group_end("kernels %s %-8s (%d variants x %zu lengths x %d layouts%s)", path, t->name, NVARIANTS,
            NLEN, NMODES, t->size == 1 && is_float(t) ? " + all operand pairs" : "");
}

/* ---- Scale and postdiv ------------------------------------------------- */

static void test_scale(const tdesc_t* t, const char* path) {
  group_begin();
  size_t n = 1003;
  for (int choice = 0; choice < 7; choice++) {
    moeccl_red_t r;
    scal_t sc = {1.0, 1};
    moeccl_red_init(&r, t->type, MOECCL_RED_SUM);
    /* Without a pre-multiplier: a copy, in place, and overlapping. */
    fill_random(t, n);
    memcpy(buf_a, src_a, n * t->size);
    moeccl_reduce_scale(&r, buf_d + 1, buf_a, n);
    CHECK_EXPR(memcmp(buf_d + 1, src_a, n * t->size) == 0, "%s: plain scale copy", t->name);
    moeccl_reduce_scale(&r, buf_a, buf_a, n);
    CHECK_EXPR(memcmp(buf_a, src_a, n * t->size) == 0, "%s: plain scale in place", t->name);
    moeccl_reduce_scale(&r, buf_a + 3 * t->size, buf_a, n - 3);
    CHECK_EXPR(memcmp(buf_a + 3 * t->size, src_a, (n - 3) * t->size) == 0, "%s: overlapping copy",
               t->name);

    setup_premul(t, &r, choice, &sc);
    for (int inplace = 0; inplace < 2; inplace++) {
      unsigned char* src = buf_a + 1;
      unsigned char* dst = inplace ? src : buf_d + 7;
      memcpy(src, src_a, n * t->size);
      moeccl_reduce_scale(&r, dst, src, n);
      for (size_t i = 0; i < n; i++) {
        uint64_t x = ld_raw(t, src_a, i), got = ld_raw(t, dst, i), want;
        if (is_float(t)) want = from_double(t, premul_float(t, sc.f, to_double(t, x)));
        else want = (sc.u * x) & mask_of(t);
        CHECK_EXPR(same_result(t, V_SUM, got, want),
                   "%s scale %s [%zu]: s=%g x=0x%llx: got 0x%llx, want 0x%llx", t->name,
                   inplace ? "in place" : "apart", i, sc.f, (unsigned long long)x,
                   (unsigned long long)got, (unsigned long long)want);
      }
    }
  }
  group_end("scale   %s %-8s", path, t->name);
}

static void test_postdiv(void) {
  group_begin();
  static const int divisors[] = {1, 2, 3, 7, 1024, -2, -1};
  for (size_t ti = 0; ti < NTYPES; ti++) {
    const tdesc_t* t = &types[ti];
    if (is_float(t)) continue;
    for (size_t di = 0; di < sizeof divisors / sizeof divisors[0]; di++) {
      int d = divisors[di];
      if (d < 0 && t->kind == K_UINT) continue; /* Avg divides by nranks */
      moeccl_red_t r;
      moeccl_red_init(&r, t->type, MOECCL_RED_SUM);
      size_t n = 517;
      fill_random(t, n);
      memcpy(buf_a, src_a, n * t->size);
      r.postdiv = 0;
      moeccl_reduce_postdiv(&r, buf_a, n);
      CHECK_EXPR(memcmp(buf_a, src_a, n * t->size) == 0, "%s: postdiv 0 changed the buffer",
                 t->name);
      r.postdiv = d;
      memcpy(buf_a + 1, src_a, n * t->size); /* unaligned */
      moeccl_reduce_postdiv(&r, buf_a + 1, n);
      for (size_t i = 0; i < n; i++) {
        uint64_t x = ld_raw(t, src_a, i), got = ld_raw(t, buf_a + 1, i), want;
        if (t->kind == K_SINT)
          want = d == -1 ? (0 - x) & mask_of(t) : (uint64_t)(sext(t, x) / d) & mask_of(t);
        else want = x / (uint64_t)d;
        CHECK_EXPR(got == want, "%s %lld / %d: got %lld, want %lld", t->name, (long long)sext(t, x),
                   d, (long long)sext(t, got), (long long)sext(t, want));
      }
    }
  }
  /* Fixed cases: truncation toward zero, MIN / -1 wraps. */
  moeccl_red_t r;
  int32_t v32[] = {-7, 7, -1, INT32_MIN, 5};
  moeccl_red_init(&r, moecclInt32, MOECCL_RED_SUM);
  r.postdiv = 2;
  moeccl_reduce_postdiv(&r, v32, 5);
  CHECK_EXPR(v32[0] == -3 && v32[1] == 3 && v32[2] == 0 && v32[3] == INT32_MIN / 2 && v32[4] == 2,
             "int32 / 2: %d %d %d %d %d", v32[0], v32[1], v32[2], v32[3], v32[4]);
  int8_t v8[] = {-128, 127, -7};
  moeccl_red_init(&r, moecclInt8, MOECCL_RED_SUM);
  r.postdiv = -1;
  moeccl_reduce_postdiv(&r, v8, 3);
  CHECK_EXPR(v8[0] == -128 && v8[1] == -127 && v8[2] == 7, "int8 / -1: %d %d %d", v8[0], v8[1],
             v8[2]);
  int64_t v64[] = {-9, INT64_MIN};
  moeccl_red_init(&r, moecclInt64, MOECCL_RED_SUM);
  r.postdiv = 4;
  moeccl_reduce_postdiv(&r, v64, 2);
  CHECK_EXPR(v64[0] == -2 && v64[1] == INT64_MIN / 4, "int64 / 4: %lld", (long long)v64[0]);
  uint8_t u8[] = {250, 3};
  moeccl_red_init(&r, moecclUint8, MOECCL_RED_SUM);
  r.postdiv = 3;
  moeccl_reduce_postdiv(&r, u8, 2);
  CHECK_EXPR(u8[0] == 83 && u8[1] == 1, "uint8 / 3: %d %d", u8[0], u8[1]);
  float f32[] = {7.0f, -1.0f};
  moeccl_red_init(&r, moecclFloat32, MOECCL_RED_SUM);
  r.postdiv = 2;
  moeccl_reduce_postdiv(&r, f32, 2);
  CHECK_EXPR(f32[0] == 3.5f && f32[1] == -0.5f, "float32 / 2: %g %g", f32[0], f32[1]);
  uint16_t h = moeccl_float_to_half(1.0f);
  moeccl_red_init(&r, moecclFloat16, MOECCL_RED_SUM);
  r.postdiv = 3;
  moeccl_reduce_postdiv(&r, &h, 1);
  CHECK_EXPR(h == ref_encode(&fmt_f16, 1.0 / 3), "float16 1 / 3: 0x%x", h);
  group_end("postdiv (integer types, divisors 1..1024 and negative, fixed cases)");
}

static void test_invalid(void) {
  group_begin();
  moeccl_red_t r;
  CHECK_EXPR(moeccl_red_init(&r, (moecclDataType_t)moecclNumTypes, MOECCL_RED_SUM) ==
                 moecclInvalidArgument,
             "type 12");
  CHECK_EXPR(moeccl_red_init(&r, (moecclDataType_t)-1, MOECCL_RED_SUM) == moecclInvalidArgument,
             "type -1");
  CHECK_EXPR(moeccl_red_init(&r, moecclFloat32, MOECCL_RED_NOPS) == moecclInvalidArgument, "op 4");
  CHECK_EXPR(moeccl_red_init(&r, moecclFloat32, (moeccl_red_op_t)-1) == moecclInvalidArgument,
             "op -1");
  CHECK_EXPR(moeccl_red_init(NULL, moecclFloat32, MOECCL_RED_SUM) == moecclInvalidArgument, "NULL");
  for (size_t ti = 0; ti < NTYPES; ti++)
    for (int op = 0; op < MOECCL_RED_NOPS; op++)
      CHECK_EXPR(moeccl_red_init(&r, types[ti].type, (moeccl_red_op_t)op) == moecclSuccess,
                 "%s op %d", types[ti].name, op);
  /* A pre-multiplier is for SUM only; on MAX it changes nothing. */
  float s = 2.0f;
  moeccl_red_init(&r, moecclFloat32, MOECCL_RED_MAX);
  moeccl_reduce_kernel_t k = r.kernel[0];
  moeccl_red_set_premul(&r, &s);
  moeccl_red_set_premul_inverse(&r, 4);
  CHECK_EXPR(!r.premul && r.kernel[1] == k, "premul on MAX");
  moeccl_red_init(&r, moecclInt32, MOECCL_RED_SUM);
  moeccl_red_set_premul_inverse(&r, 4);
  CHECK_EXPR(!r.premul, "premul inverse on int32");
  group_end("init (unknown type / op rejected, every type x op accepted)");
}

/* ---- Throughput (information only) ------------------------------------- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void throughput(const char* path) {
  static const moecclDataType_t tt[] = {moecclFloat32, moecclBfloat16, moecclFloat16};
  static const char* const tn[] = {"float32", "bfloat16", "float16"};
  size_t bytes = 4 << 20;
  unsigned char* a = aligned_alloc(64, bytes);
  unsigned char* b = aligned_alloc(64, bytes);
  unsigned char* d = aligned_alloc(64, bytes);
  for (int k = 0; k < 3; k++) {
    moeccl_red_t r;
    moeccl_red_init(&r, tt[k], MOECCL_RED_SUM);
    size_t n = bytes / r.elem_size;
    for (size_t i = 0; i < n; i++) { /* ordinary values: no subnormals, no NaN */
      float x = (float)(i % 1999) * 0.01f - 10.0f, y = (float)(i % 997) * 0.003f + 0.5f;
      if (tt[k] == moecclFloat32) {
        memcpy(a + 4 * i, &x, 4), memcpy(b + 4 * i, &y, 4);
      } else {
        uint16_t hx = tt[k] == moecclFloat16 ? moeccl_float_to_half(x) : moeccl_float_to_bf16(x);
        uint16_t hy = tt[k] == moecclFloat16 ? moeccl_float_to_half(y) : moeccl_float_to_bf16(y);
        memcpy(a + 2 * i, &hx, 2), memcpy(b + 2 * i, &hy, 2);
      }
    }
    moeccl_reduce(&r, d, a, b, n, 0);
    int iters = 0;
    double t0 = now(), t;
    do moeccl_reduce(&r, d, a, b, n, 0), iters++;
    while ((t = now() - t0) < 0.2 || iters < 3);
    printf("throughput %s %-8s SUM 4 MiB: %6.2f GB/s (a+b+dst bytes), %6.2f GB/s of dst\n", path,
           tn[k], 3.0 * (double)bytes * iters / t / 1e9, (double)bytes * iters / t / 1e9);
  }
  free(a), free(b), free(d);
}

int main(void) {
  size_t span = MAXN * 8 + 2 * GUARD;
  buf_a = aligned_alloc(64, span), buf_b = aligned_alloc(64, span), buf_d = aligned_alloc(64, span);
  src_a = aligned_alloc(64, span), src_b = aligned_alloc(64, span);
  fmt_setup(&fmt_f16), fmt_setup(&fmt_bf16), fmt_setup(&fmt_e4m3), fmt_setup(&fmt_e5m2);

  const conv_t convs[] = {{&fmt_f16, dec_f16, enc_f16},
                          {&fmt_bf16, dec_bf16, enc_bf16},
                          {&fmt_e4m3, dec_e4m3, enc_e4m3},
                          {&fmt_e5m2, dec_e5m2, enc_e5m2}};
  for (int i = 0; i < 4; i++) test_conversions(&convs[i]);
  test_invalid();
  test_postdiv();

  /* The kernels this CPU gets, then the portable ones if those differ. */
  moeccl_red_t best, portable;
  moeccl_red_init(&best, moecclFloat32, MOECCL_RED_SUM);
  moeccl_red_force_portable(1);
  moeccl_red_init(&portable, moecclFloat32, MOECCL_RED_SUM);
  moeccl_red_force_portable(0);
  int two_paths = best.kernel[0] != portable.kernel[0];
  for (int p = two_paths ? 0 : 1; p < 2; p++) {
    const char* path = p == 0 ? "avx2" : "portable";
    moeccl_red_force_portable(p);
    for (size_t ti = 0; ti < NTYPES; ti++) test_kernels(&types[ti], path);
    for (size_t ti = 0; ti < NTYPES; ti++) test_scale(&types[ti], path);
    throughput(path);
  }
  moeccl_red_force_portable(0);
  if (!two_paths) printf("(no AVX2 kernels on this CPU: the portable ones only)\n");

  printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  free(buf_a), free(buf_b), free(buf_d), free(src_a), free(src_b);
  for (int i = 0; i < 4; i++) free(convs[i].fmt->val);
  return failures ? 1 : 0;
}
