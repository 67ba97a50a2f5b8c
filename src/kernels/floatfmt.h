/* Scalar conversions between float32 and the narrow floats the reductions
 * take (float16, bfloat16, float8 e4m3 and e5m2), rounding to nearest even;
 * static inline, since every kernel of reduce.c calls them per element.
 * The same text compiles as CUDA (kernels.cu, through devmath.h): there
 * every function is also a device function and the float8 decoders compute
 * the value their host tables hold. */
#ifndef MOECCL_KERNELS_FLOATFMT_H_
#define MOECCL_KERNELS_FLOATFMT_H_

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FF_FN static __host__ __device__ inline
#define FF_NAN __int_as_float(0x7fc00000)
#define FF_INF __int_as_float(0x7f800000)
#else
#define FF_FN static inline
#define FF_NAN __builtin_nanf("")
#define FF_INF __builtin_inff()
#endif

FF_FN uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

FF_FN float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* m >> s rounded to nearest, ties to even (1 <= s <= 24). */
FF_FN uint32_t shr_rne(uint32_t m, unsigned s) {
  uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

/* The magnitude code (exponent << mbits | mantissa) nearest to the float
 * whose |bits| are ax (not NaN), ties to even, in a binary format with mbits
 * mantissa bits and exponent bias `bias`.  It can exceed the format's largest
 * finite code (inf in, or overflow); callers saturate or make inf. */
FF_FN uint32_t narrow_code(uint32_t ax, unsigned mbits, int bias) {
  unsigned s = 23 - mbits;
  if (ax >= (uint32_t)(128 - bias) << 23) { /* a normal number of the format */
    /* Adding half an ulp less one, plus the kept lsb, carries into the kept
     * bits exactly when nearest-even rounds up (into the exponent too). */
    uint32_t rnd = ax + ((1u << (s - 1)) - 1) + ((ax >> s) & 1);
    return (rnd >> s) - ((uint32_t)(127 - bias) << mbits);
  }
  /* A subnormal of the format: |f| = m * 2^(e-150) in units of its smallest
   * step 2^(1-bias-mbits). */
  uint32_t e = ax >> 23, m = ax & 0x7fffff;
  if (e) m |= 0x800000;
  else e = 1;
  unsigned sh = (unsigned)(151 - bias - (int)mbits) - e; /* >= 24 - mbits */
  return sh > 24 ? 0 : shr_rne(m, sh);
}

/* The finite value of magnitude code mag (see narrow_code). */
FF_FN float widen_code(uint32_t mag, unsigned mbits, int bias) {
  uint32_t e = mag >> mbits, m = mag & ((1u << mbits) - 1);
  if (e) return bits_f32((e + 127 - (uint32_t)bias) << 23 | m << (23 - mbits));
  return (float)m * bits_f32((uint32_t)(128 - bias - (int)mbits) << 23);
}

FF_FN float half_dec(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, mag = h & 0x7fff;
  if (mag >= 0x7c00) return bits_f32(sign | 0x7f800000 | (mag & 0x3ff) << 13); /* inf, NaN */
  return bits_f32(sign | f32_bits(widen_code(mag, 10, 15)));
}

FF_FN uint16_t half_enc(float f) {
  uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* quiet NaN */
  uint32_t c = narrow_code(ax, 10, 15);
  return (uint16_t)(sign | (c < 0x7c00 ? c : 0x7c00)); /* overflow is inf */
}

/* bfloat16 is the top half of a float32, so only the rounding is work. */
FF_FN float bf16_dec(uint16_t h) { return bits_f32((uint32_t)h << 16); }

FF_FN uint16_t bf16_enc(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* float8 decoding tables, constant so that no initialisation races. */
#define E4M3_MAG(c)                                                                                \
  (((c)&0x7f) == 0x7f ? FF_NAN                                                         \
   : ((c)&0x78)       ? (float)((8 + ((c)&7)) << (((c) >> 3) & 15)) / 1024.0f                      \
                      : (float)((c)&7) / 512.0f)
#define E5M2_MAG(c)                                                                                \
  (((c)&0x7c) == 0x7c ? (((c)&3) ? FF_NAN : FF_INF)                          \
   : ((c)&0x7c)       ? (float)((4ull + ((c)&3)) << (((c) >> 2) & 31)) / 131072.0f                 \
                      : (float)((c)&3) / 65536.0f)
#define E4M3_VAL(c) ((c)&0x80 ? -E4M3_MAG(c) : E4M3_MAG(c))
#define E5M2_VAL(c) ((c)&0x80 ? -E5M2_MAG(c) : E5M2_MAG(c))
#define REP4(F, c) F(c), F((c) + 1), F((c) + 2), F((c) + 3)
#define REP16(F, c) REP4(F, c), REP4(F, (c) + 4), REP4(F, (c) + 8), REP4(F, (c) + 12)
#define REP64(F, c) REP16(F, c), REP16(F, (c) + 16), REP16(F, (c) + 32), REP16(F, (c) + 48)
#define REP256(F) REP64(F, 0), REP64(F, 64), REP64(F, 128), REP64(F, 192)
#ifdef __CUDACC__
FF_FN float e4m3_dec(uint8_t v) { return E4M3_VAL(v); }
FF_FN float e5m2_dec(uint8_t v) { return E5M2_VAL(v); }
#else
static const float e4m3_table[256] = {REP256(E4M3_VAL)};
static const float e5m2_table[256] = {REP256(E5M2_VAL)};

FF_FN float e4m3_dec(uint8_t v) { return e4m3_table[v]; }
FF_FN float e5m2_dec(uint8_t v) { return e5m2_table[v]; }
#endif

/* float8 has no inf on the way back: anything past the largest finite value
 * (448 for e4m3, 57344 for e5m2), inf included, saturates to it. */
FF_FN uint8_t e4m3_enc(float f) {
  uint32_t x = f32_bits(f), sign = (x >> 24) & 0x80, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return (uint8_t)(sign | 0x7f);
  uint32_t c = narrow_code(ax, 3, 7);
  return (uint8_t)(sign | (c < 0x7e ? c : 0x7e));
}

FF_FN uint8_t e5m2_enc(float f) {
  uint32_t x = f32_bits(f), sign = (x >> 24) & 0x80, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return (uint8_t)(sign | 0x7f);
  uint32_t c = narrow_code(ax, 2, 15);
  return (uint8_t)(sign | (c < 0x7b ? c : 0x7b));
}

#endif
