/* Row programs of the MoE combine (rows.h): weighted row sums and row dot
 * products, in float32 with the conversions of reduce.h for 16-bit rows.
 *
 * The sums are the hot loop of combine (the partial sums on the expert side,
 * the sums over ranks on the token side) and of the weighted expansion: each
 * chunk of a group is accumulated in a float32 buffer on the stack, the first
 * term initialising it (0 + w*x, the same rounding as adding to a zeroed
 * buffer), and rounded to the row type once.  On x86-64 the same loops are
 * also compiled for AVX2 (without FMA: products stay rounded before they are
 * added, so both variants give the same bits) and chosen at run time. */
#include "kernels/rows.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"

#include <string.h>

#define CHUNK 256 /* columns accumulated at a time (a float32 buffer on the stack) */

int moeccl_rows_type_ok(moecclDataType_t type) {
  return type == moecclFloat32 || type == moecclBfloat16 || type == moecclFloat16;
}

static size_t elem_size(moecclDataType_t type) { return type == moecclFloat32 ? 4 : 2; }

/* bfloat16 is the top half of a float32 (reduce.c's conversions, inlined so
 * that the loops vectorise): decoding is a shift, encoding rounds to
 * nearest even and keeps NaNs quiet. */
static inline float bf16_dec(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t bf16_enc(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float weight_of(const moeccl_row_term_t* t, const float* weights) {
  return weights && t->aux != MOECCL_ROW_NONE ? weights[t->aux] : 1.0f;
}

/* Whether out (one row of rb bytes) overlaps a source row of group t[0..n):
 * then the sums go through a buffer, since out is written before the
 * group's later rows are read. */
static int row_aliases(const char* out, const char* src, const moeccl_row_term_t* t, size_t n,
                       size_t rb) {
  for (size_t i = 0; i < n; i++) {
    if (t[i].src == MOECCL_ROW_NONE) continue;
    const char* row = src + (size_t)t[i].src * rb;
    if (row < out + rb && out < row + rb) return 1;
  }
  return 0;
}

/* The kernels, instantiated per target.  ACC(n): acc[k] (=|+=) w * x[k]
 * for k < n; a constant trip count (n == CHUNK) is what gcc vectorises. */
#define ROWS_KERNELS(ATTR, SFX)                                                                    \
  ATTR static void acc_f32##SFX(float* acc, const float* r, size_t n, float w, int first) {        \
    if (first && n == CHUNK)                                                                       \
      for (size_t k = 0; k < CHUNK; k++) acc[k] = 0.0f + w * r[k];                                 \
    else if (n == CHUNK)                                                                           \
      for (size_t k = 0; k < CHUNK; k++) acc[k] += w * r[k];                                       \
    else if (first)                                                                                \
      for (size_t k = 0; k < n; k++) acc[k] = 0.0f + w * r[k];                                     \
    else                                                                                           \
      for (size_t k = 0; k < n; k++) acc[k] += w * r[k];                                           \
  }                                                                                                \
  ATTR static void acc_bf16##SFX(float* acc, const uint16_t* r, size_t n, float w, int first) {    \
    if (first && n == CHUNK)                                                                       \
      for (size_t k = 0; k < CHUNK; k++) acc[k] = 0.0f + w * bf16_dec(r[k]);                       \
    else if (n == CHUNK)                                                                           \
      for (size_t k = 0; k < CHUNK; k++) acc[k] += w * bf16_dec(r[k]);                             \
    else if (first)                                                                                \
      for (size_t k = 0; k < n; k++) acc[k] = 0.0f + w * bf16_dec(r[k]);                           \
    else                                                                                           \
      for (size_t k = 0; k < n; k++) acc[k] += w * bf16_dec(r[k]);                                 \
  }                                                                                                \
  ATTR static void add_row##SFX(float* restrict out, const float* restrict in, size_t n,           \
                                int init) {                                                        \
    if (init)                                                                                      \
      for (size_t k = 0; k < n; k++) out[k] = 0.0f + in[k];                                        \
    else                                                                                           \
      for (size_t k = 0; k < n; k++) out[k] += in[k];                                              \
  }                                                                                                \
  ATTR static void st_bf16##SFX(uint16_t* r, const float* acc, size_t n) {                         \
    if (n == CHUNK)                                                                                \
      for (size_t k = 0; k < CHUNK; k++) r[k] = bf16_enc(acc[k]);                                  \
    else                                                                                           \
      for (size_t k = 0; k < n; k++) r[k] = bf16_enc(acc[k]);                                      \
  }                                                                                                \
  /* One group of a SUM program: terms [0, n) share dst. */                                        \
  ATTR static void sum_group##SFX(const moeccl_rows_t* p, char* dst, const char* src,              \
                                  const float* weights, const moeccl_row_term_t* t, size_t n) {    \
    size_t rb = p->elems * elem_size(p->type);                                                     \
    char* out = dst + (size_t)t[0].dst * rb;                                                       \
    if (n == 1 && t[0].src != MOECCL_ROW_NONE && weight_of(&t[0], weights) == 1.0f) {              \
      memmove(out, src + (size_t)t[0].src * rb, rb); /* a copy: exact in every type */             \
      return;                                                                                      \
    }                                                                                              \
    if (p->type == moecclFloat32 && !row_aliases(out, src, t, n, rb)) {                            \
      /* straight into out, chunk by chunk: the same operations in the same                        \
       * order as through acc, without acc's copy to out */                                        \
      float* o = (float*)out;                                                                      \
      for (size_t c0 = 0; c0 < p->elems; c0 += CHUNK) {                                            \
        size_t m = p->elems - c0 < CHUNK ? p->elems - c0 : CHUNK;                                  \
        int first = 1;                                                                             \
        for (size_t i = 0; i < n; i++) {                                                           \
          if (t[i].src == MOECCL_ROW_NONE) continue;                                               \
          const float* row = (const float*)(src + (size_t)t[i].src * rb);                          \
          acc_f32##SFX(o + c0, row + c0, m, weight_of(&t[i], weights), first);                     \
          first = 0;                                                                               \
        }                                                                                          \
        if (first) memset(o + c0, 0, m * sizeof(float));                                           \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    float acc[CHUNK];                                                                              \
    for (size_t c0 = 0; c0 < p->elems; c0 += CHUNK) {                                              \
      size_t m = p->elems - c0 < CHUNK ? p->elems - c0 : CHUNK;                                    \
      int first = 1;                                                                               \
      for (size_t i = 0; i < n; i++) {                                                             \
        if (t[i].src == MOECCL_ROW_NONE) continue;                                                 \
        const char* row = src + (size_t)t[i].src * rb;                                             \
        float w = weight_of(&t[i], weights);                                                       \
        if (p->type == moecclFloat32) {                                                            \
          acc_f32##SFX(acc, (const float*)row + c0, m, w, first);                                  \
        } else if (p->type == moecclBfloat16) {                                                    \
          acc_bf16##SFX(acc, (const uint16_t*)row + c0, m, w, first);                              \
        } else {                                                                                   \
          const uint16_t* r = (const uint16_t*)row + c0;                                           \
          if (first)                                                                               \
            for (size_t k = 0; k < m; k++) acc[k] = 0.0f + w * moeccl_half_to_float(r[k]);         \
          else                                                                                     \
            for (size_t k = 0; k < m; k++) acc[k] += w * moeccl_half_to_float(r[k]);               \
        }                                                                                          \
        first = 0;                                                                                 \
      }                                                                                            \
      if (first) memset(acc, 0, m * sizeof(float)); /* no term adds anything: a zero row */        \
      if (p->type == moecclFloat32) {                                                              \
        memcpy((float*)out + c0, acc, m * sizeof(float));                                          \
      } else if (p->type == moecclBfloat16) {                                                      \
        st_bf16##SFX((uint16_t*)out + c0, acc, m);                                                 \
      } else {                                                                                     \
        uint16_t* r = (uint16_t*)out + c0;                                                         \
        for (size_t k = 0; k < m; k++) r[k] = moeccl_float_to_half(acc[k]);                        \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  ATTR static void sum_run##SFX(const moeccl_rows_t* p, void* dst, const void* src,                \
                                const void* aux) {                                                 \
    const moeccl_row_term_t* t = p->terms;                                                         \
    for (size_t i = 0; i < p->nterms;) {                                                           \
      size_t j = i + 1;                                                                            \
      while (j < p->nterms && t[j].dst == t[i].dst) j++;                                           \
      sum_group##SFX(p, dst, src, aux, &t[i], j - i);                                              \
      i = j;                                                                                       \
    }                                                                                              \
  }

ROWS_KERNELS(, _c)

#if defined(__x86_64__) && defined(__GNUC__)
#define ROWS_AVX2 1
#if defined(__clang__)
#define ROWS_AVX2_FN __attribute__((target("avx2")))
#else
/* tree-vectorize lifts -O2's "very cheap" cost model (as in reduce.c) */
#define ROWS_AVX2_FN __attribute__((target("avx2"), optimize("tree-vectorize")))
#endif
ROWS_KERNELS(ROWS_AVX2_FN, _avx2)
#else
#define ROWS_AVX2 0
#endif

static float dot(moecclDataType_t type, const void* a, const void* b, size_t n) {
  float s = 0;
  if (type == moecclFloat32) {
    const float *x = a, *y = b;
    for (size_t k = 0; k < n; k++) s += x[k] * y[k];
  } else {
    float (*dec)(uint16_t) = type == moecclBfloat16 ? moeccl_bf16_to_float : moeccl_half_to_float;
    const uint16_t *x = a, *y = b;
    for (size_t k = 0; k < n; k++) s += dec(x[k]) * dec(y[k]);
  }
  return s;
}

void moeccl_rows_span(const moeccl_rows_t* p, int field, uint32_t* lo, uint32_t* hi) {
  *lo = UINT32_MAX, *hi = 0;
  for (size_t i = 0; i < p->nterms; i++) {
    const moeccl_row_term_t* t = &p->terms[i];
    uint32_t v = field == MOECCL_ROWS_FIELD_DST   ? t->dst
                 : field == MOECCL_ROWS_FIELD_SRC ? t->src
                                                  : t->aux;
    if (v == MOECCL_ROW_NONE) continue;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
  }
}

size_t moeccl_rows_row_bytes(const moeccl_rows_t* p) {
  return p->mode == MOECCL_ROWS_COPY ? p->elems : p->elems * elem_size(p->type);
}

static void copy_run(const moeccl_rows_t* p, char* dst, const char* src) {
  const moeccl_row_term_t* t = p->terms;
  size_t rb = p->elems;
  int stream = moeccl_copy_streaming(p->nterms * rb);
  for (size_t i = 0, n; i < p->nterms; i += n) {
    for (n = 1; i + n < p->nterms && t[i + n].dst == t[i].dst + n && t[i + n].src == t[i].src + n;)
      n++;
    moeccl_copy(dst + (size_t)t[i].dst * rb, src + (size_t)t[i].src * rb, n * rb, stream);
  }
}

static void add_run(const moeccl_rows_t* p, float* dst, const float* src) {
  size_t n = p->elems;
  void (*add)(float* restrict, const float* restrict, size_t, int) = add_row_c;
#if ROWS_AVX2
  if (__builtin_cpu_supports("avx2")) add = add_row_avx2;
#endif
  for (size_t i = 0; i < p->nterms; i++) {
    const moeccl_row_term_t* t = &p->terms[i];
    add(dst + (size_t)t->dst * n, src + (size_t)t->src * n, n, t->aux != MOECCL_ROW_NONE);
  }
}

void moeccl_rows_run(const moeccl_rows_t* p, void* dst, const void* src, const void* aux) {
  const moeccl_row_term_t* t = p->terms;
  if (p->mode == MOECCL_ROWS_COPY) {
    copy_run(p, dst, src);
    return;
  }
  if (p->mode == MOECCL_ROWS_ADD) {
    add_run(p, dst, src);
    return;
  }
  size_t rb = p->elems * elem_size(p->type);
  if (p->mode == MOECCL_ROWS_DOT) {
    float* out = dst;
    for (size_t i = 0; i < p->nterms; i++)
      out[t[i].dst] = t[i].src == MOECCL_ROW_NONE || t[i].aux == MOECCL_ROW_NONE
                          ? 0.0f
                          : dot(p->type, (const char*)src + (size_t)t[i].src * rb,
                                (const char*)aux + (size_t)t[i].aux * rb, p->elems);
    return;
  }
#if ROWS_AVX2
  if (__builtin_cpu_supports("avx2")) {
    sum_run_avx2(p, dst, src, aux);
    return;
  }
#endif
  sum_run_c(p, dst, src, aux);
}
