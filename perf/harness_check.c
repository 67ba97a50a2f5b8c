/*
 * harness_check.c - the values the MPI harness's checks put and expect
 * (perf_common.h): raw elements of any width, values of every type (the
 * small floats included), the moving collectives' pattern, the reductions'
 * exact inputs and results, and counts of wrong elements.
 */
#include "perf_common.h"

#include <math.h>
#include <string.h>

/* Typed stores and loads keep the check independent of byte order. */
void perf_put_bits(char* p, size_t ts, uint64_t v)
{
  uint8_t b = (uint8_t)v;
  uint16_t h = (uint16_t)v;
  uint32_t w = (uint32_t)v;
  switch (ts) {
  case 1: memcpy(p, &b, 1); break;
  case 2: memcpy(p, &h, 2); break;
  case 4: memcpy(p, &w, 4); break;
  default: memcpy(p, &v, 8); break;
  }
}

uint64_t perf_get_bits(const char* p, size_t ts)
{
  uint8_t b;
  uint16_t h;
  uint32_t w;
  uint64_t v;
  switch (ts) {
  case 1: memcpy(&b, p, 1); return b;
  case 2: memcpy(&h, p, 2); return h;
  case 4: memcpy(&w, p, 4); return w;
  default: memcpy(&v, p, 8); return v;
  }
}

uint64_t perf_bits_mask(size_t ts) { return ts >= 8 ? ~0ULL : (1ULL << (8 * ts)) - 1; }

uint64_t perf_pattern(int rank, size_t k)
{
  return perf_mix64(perf_mix64(PERF_SEED ^ (uint64_t)(uint32_t)rank) + k);
}

/* The small floats: exponent and mantissa bits, bias; ieee: the top
 * exponent is infinity/NaN (else only all ones is NaN, as in fp8e4m3). */
struct minifloat {
  int ebits, mbits, bias, ieee;
};

static const struct minifloat* minifloat_of(moecclDataType_t t)
{
  static const struct minifloat half = {5, 10, 15, 1}, bf16 = {8, 7, 127, 1},
                                e4m3 = {4, 3, 7, 0}, e5m2 = {5, 2, 15, 1};
  switch (t) {
  case moecclFloat16: return &half;
  case moecclBfloat16: return &bf16;
  case moecclFloat8e4m3: return &e4m3;
  case moecclFloat8e5m2: return &e5m2;
  default: return NULL;
  }
}

/* v >= 0 and representable (the inputs are small integers). */
static uint64_t minifloat_encode(const struct minifloat* f, double v)
{
  if (!(v > 0.0))
    return 0;
  int e;
  double m = frexp(v, &e); /* v = m * 2^e, 0.5 <= m < 1 */
  int ex = e - 1 + f->bias;
  if (ex <= 0) /* subnormal */
    return (uint64_t)llround(ldexp(v, f->mbits - 1 + f->bias));
  return (uint64_t)ex << f->mbits | ((uint64_t)llround(ldexp(m * 2.0 - 1.0, f->mbits)) &
                                     ((1ULL << f->mbits) - 1));
}

static double minifloat_decode(const struct minifloat* f, uint64_t bits)
{
  uint64_t mmask = (1ULL << f->mbits) - 1, emax = (1ULL << f->ebits) - 1;
  uint64_t m = bits & mmask, e = bits >> f->mbits & emax;
  int neg = (int)(bits >> (f->mbits + f->ebits) & 1);
  double v;
  if ((f->ieee && e == emax) || (!f->ieee && e == emax && m == mmask))
    v = m || !f->ieee ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  else
    v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
  return neg ? -v : v;
}

void perf_put_value(char* p, const struct perf_dtype* dt, double v)
{
  const struct minifloat* mf = minifloat_of(dt->type);
  if (mf) {
    perf_put_bits(p, dt->size, minifloat_encode(mf, v));
  } else if (dt->type == moecclFloat32) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else if (dt->type == moecclFloat64) {
    memcpy(p, &v, 8);
  } else {
    perf_put_bits(p, dt->size, (uint64_t)(int64_t)v);
  }
}

double perf_get_value(const char* p, const struct perf_dtype* dt)
{
  const struct minifloat* mf = minifloat_of(dt->type);
  uint64_t b = perf_get_bits(p, dt->size);
  float f;
  double d;
  if (mf)
    return minifloat_decode(mf, b);
  switch (dt->type) {
  case moecclFloat32: memcpy(&f, p, 4); return f;
  case moecclFloat64: memcpy(&d, p, 8); return d;
  case moecclInt8: return (int8_t)b;
  case moecclInt32: return (int32_t)b;
  case moecclInt64: return (double)(int64_t)b;
  default: return (double)b;
  }
}

/* The largest L such that every integer 0..L is exact in the type. */
static double exact_limit(moecclDataType_t t)
{
  switch (t) {
  case moecclInt8: return 127;
  case moecclUint8: return 255;
  case moecclFloat16: return 2048;
  case moecclBfloat16: return 256;
  case moecclFloat8e4m3: return 16;
  case moecclFloat8e5m2: return 8;
  default: return 1 << 20; /* wide enough for any rank count that runs */
  }
}

static int mantissa_bits(moecclDataType_t t)
{
  const struct minifloat* mf = minifloat_of(t);
  return mf ? mf->mbits : t == moecclFloat32 ? 23 : 52;
}

static int is_float(moecclDataType_t t)
{
  return minifloat_of(t) || t == moecclFloat32 || t == moecclFloat64;
}

/* Sums (and avg): ranks below nz hold (k + 3*rank) mod K, the others 0,
 * with nz * (K - 1) <= L so that every partial sum is exact.  Prod: element
 * k has k mod min(n,4) ranks holding 2 (the others 1), so the product is
 * 2^(k mod 4) at most 8.  Max, min: (5k + 3*rank) mod K with K - 1 <= L. */
double perf_red_input(const struct perf_ctx* c, int rank, size_t k)
{
  double L = exact_limit(c->dt->type);
  int n = c->n;
  if (c->op == moecclProd) {
    int m = n < 4 ? n : 4, twos = (int)(k % (size_t)m);
    int d = (int)(((size_t)rank + (size_t)n - k % (size_t)n) % (size_t)n); /* (rank - k) mod n */
    return d < twos ? 2.0 : 1.0;
  }
  if (c->op == moecclMax || c->op == moecclMin) {
    size_t K = L >= 15 ? 16 : (size_t)L + 1;
    return (double)((5 * k + 3 * (size_t)rank) % K);
  }
  int nz = n < L ? n : (int)L;
  size_t K = (size_t)(L / nz) + 1;
  if (K > 16)
    K = 16;
  if (rank >= nz)
    return 0.0;
  return (double)((k + 3 * (size_t)rank) % K);
}

double perf_red_expect(const struct perf_ctx* c, size_t k)
{
  double acc = perf_red_input(c, 0, k);
  for (int r = 1; r < c->n; r++) {
    double v = perf_red_input(c, r, k);
    switch (c->op) {
    case moecclProd: acc *= v; break;
    case moecclMax: acc = v > acc ? v : acc; break;
    case moecclMin: acc = v < acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (c->op == moecclAvg)
    acc = is_float(c->dt->type) ? acc / c->n : floor(acc / c->n);
  return acc;
}

int perf_red_ok(const struct perf_ctx* c, double got, double want)
{
  if (got == want)
    return 1;
  if (c->op != moecclAvg || !is_float(c->dt->type) || !(want > 0.0) || isnan(got))
    return 0;
  int e;
  frexp(want, &e); /* 2^(e-1) <= want < 2^e */
  /* n rounded products x * fl(1/n) summed with n - 1 roundings: at most
   * about n+1 units in the last place of the non-negative result. */
  return fabs(got - want) <= (c->n + 1) * ldexp(1.0, e - 1 - mantissa_bits(c->dt->type));
}

long long perf_untouched_wrong(const struct perf_ctx* c, const char* p, size_t len)
{
  size_t ts = c->dt->size;
  const unsigned char* g = (const unsigned char*)p;
  long long wrong = 0;
  for (size_t off = 0; off + ts <= len; off += ts) {
    int bad = 0;
    for (size_t i = 0; i < ts; i++)
      bad |= g[off + i] != PERF_SENTINEL;
    wrong += bad;
  }
  return wrong;
}

long long perf_guard_wrong(const struct perf_ctx* c)
{
  return perf_untouched_wrong(c, c->B.recv + c->recv_bytes, PERF_GUARD_BYTES);
}

void perf_pattern_fill(const struct perf_ctx* c, char* p, int rank, size_t k0, size_t count)
{
  size_t ts = c->dt->size;
  for (size_t k = 0; k < count; k++)
    perf_put_bits(p + k * ts, ts, perf_pattern(rank, k0 + k));
}

long long perf_pattern_wrong(const struct perf_ctx* c, const char* p, int rank, size_t k0,
                             size_t count)
{
  size_t ts = c->dt->size;
  uint64_t mask = perf_bits_mask(ts);
  long long wrong = 0;
  for (size_t k = 0; k < count; k++)
    wrong += perf_get_bits(p + k * ts, ts) != (perf_pattern(rank, k0 + k) & mask);
  return wrong;
}

void perf_red_fill(const struct perf_ctx* c, char* p, size_t k0, size_t count)
{
  size_t ts = c->dt->size;
  for (size_t k = 0; k < count; k++)
    perf_put_value(p + k * ts, c->dt, perf_red_input(c, c->me, k0 + k));
}

long long perf_red_wrong(const struct perf_ctx* c, const char* p, size_t k0, size_t count)
{
  size_t ts = c->dt->size;
  long long wrong = 0;
  for (size_t k = 0; k < count; k++)
    wrong += !perf_red_ok(c, perf_get_value(p + k * ts, c->dt), perf_red_expect(c, k0 + k));
  return wrong;
}
