/*
 * The math of the device kernels, written once for two compilers: nvcc
 * builds it into the CUDA kernels (kernels.cu), the C compiler into their
 * twins (twins.c), which the emulation runs.  Every function computes one
 * work item (an element, a column of a row group, a row's dot product) of
 * one launch; a kernel maps its threads to the items, a twin loops over
 * them.  The results are the host table's (reduce.c, rows.c) bit for bit:
 * products and sums are rounded one at a time (DM_MULF and the like: no
 * fused multiply-add on either side), in the same order.  On a GPU a NaN
 * result is a NaN, but with the device's payload (CUDA returns the
 * canonical NaN where x86 keeps the operand's).
 *
 * The argument structs are passed by value to the kernels (one kernel
 * parameter); pointers in them are device addresses (or pinned host
 * memory the device reads, for the row programs' terms).
 */
#ifndef MOECCL_KERNELS_DEVMATH_H_
#define MOECCL_KERNELS_DEVMATH_H_

#include <stdint.h>

#include "kernels/floatfmt.h"

#ifdef __CUDACC__
#define DM_FN static __host__ __device__ inline
#else
#define DM_FN static inline
#endif

/* moecclDataType_t values (moeccl.h; devkern.c checks they agree). */
enum {
  DM_I8 = 0,
  DM_U8,
  DM_I32,
  DM_U32,
  DM_I64,
  DM_U64,
  DM_F16,
  DM_F32,
  DM_F64,
  DM_BF16,
  DM_E4M3,
  DM_E5M2
};
/* moeccl_red_op_t values (reduce.h). */
enum { DM_SUM = 0, DM_PROD, DM_MAX, DM_MIN };
/* What a reduce launch computes. */
enum { DM_REDUCE = 0, DM_SCALE = 1, DM_POSTDIV = 2 };
#define DM_ROW_NONE 0xffffffffu

/* moeccl_k_reduce: for i < n, REDUCE: dst[i] = A (+) B (A = s*a[i] when
 * premul and flags & 1, B likewise with 2); SCALE: dst[i] = s*a[i] (a copy
 * without premul); POSTDIV: dst[i] = dst[i] / postdiv.  s is sf, si or su,
 * or, when sdev is not NULL, the element of the type at sdev (a PreMulSum's
 * scalar in device memory), read as the kernel runs: its value when the
 * stream reaches the launch. */
typedef struct {
  void* dst;
  const void* a;
  const void* b;
  const void* sdev;
  uint64_t n;
  int32_t type, op, what, flags, premul, postdiv;
  double sf;   /* the pre-multiplier of the floating types */
  int64_t si;  /* of the signed ones */
  uint64_t su; /* of the unsigned ones */
} moeccl_kred_args_t;

/* moeccl_k_reduce_fold: a left fold of up to 2 + DM_FOLD_MORE operands
 * in one launch, for i < first.n: first's REDUCE (dst[i] = A (+) B), then
 * dst[i] = dst[i] (+) more[k][i] for k < nmore, more[k] pre-multiplied
 * when bit k of more_pre is set.  Each element goes through the same
 * steps as that many moeccl_k_reduce launches, so the bits are theirs. */
#define DM_FOLD_MORE 14
typedef struct {
  moeccl_kred_args_t first;
  const void* more[DM_FOLD_MORE];
  int32_t nmore, more_pre;
} moeccl_kfold_args_t;

/* A row program's term (rows.h's moeccl_row_term_t). */
typedef struct {
  uint32_t dst, src, aux;
} dm_term_t;

/* moeccl_k_rows_*: a row program of rows.h on device memory.  SUM: item
 * (group g, column k) of ngroups groups, group g = terms[first[g]..
 * first[g+1]); ADD: item (term or column); DOT: item = term; COPY: item
 * (term, unit) of rows of elems bytes moved in units of `unit` bytes. */
typedef struct {
  void* dst;
  const void* src;
  const void* aux; /* SUM: float32 weights; DOT: the second rows; NULL: none */
  const dm_term_t* terms;
  const uint32_t* first; /* SUM: ngroups + 1 group starts */
  uint64_t nterms, ngroups, elems;
  int32_t type;   /* of the rows: DM_F32, DM_F16, DM_BF16 */
  int32_t unit;   /* COPY: 1, 2, 4, 8 or 16 */
  int32_t serial; /* ADD: 1 when a dst repeats (an item is a column, terms in order) */
} moeccl_krows_args_t;

/* ---- rounding one operation at a time ------------------------------------ */

/* DM_MUL<S>, DM_ADD<S> and DM_DIV<S> of type T (S: F float, D double). */
#ifdef __CUDA_ARCH__
#define DM_ROUNDED_OPS(T, S, MUL, ADD, DIV)                                                        \
  DM_FN T DM_MUL##S(T x, T y) { return MUL(x, y); }                                                \
  DM_FN T DM_ADD##S(T x, T y) { return ADD(x, y); }                                                \
  DM_FN T DM_DIV##S(T x, T y) { return DIV(x, y); }
DM_ROUNDED_OPS(float, F, __fmul_rn, __fadd_rn, __fdiv_rn)
DM_ROUNDED_OPS(double, D, __dmul_rn, __dadd_rn, __ddiv_rn)
#else
/* An empty asm that claims to change the value keeps gcc from fusing the
 * product into a later add (reduce.c's FP_ROUNDED). */
#if defined(__x86_64__) && !defined(__CUDACC__)
#define DM_KEEP(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__) && !defined(__CUDACC__)
#define DM_KEEP(v) __asm__("" : "+w"(v))
#else
#define DM_KEEP(v) ((void)0)
#endif
#define DM_ROUNDED_OPS(T, S)                                                                       \
  DM_FN T DM_MUL##S(T x, T y) {                                                                    \
    T p = x * y;                                                                                   \
    DM_KEEP(p);                                                                                    \
    return p;                                                                                      \
  }                                                                                                \
  DM_FN T DM_ADD##S(T x, T y) { return x + y; }                                                    \
  DM_FN T DM_DIV##S(T x, T y) { return x / y; }
DM_ROUNDED_OPS(float, F)
DM_ROUNDED_OPS(double, D)
#endif
#undef DM_ROUNDED_OPS

/* ---- reductions ---------------------------------------------------------- */

/* Integer types: arithmetic in the unsigned type of the width (wraps). */
#define DM_INT_ITEM(T, U, S, SIGNED)                                                               \
  {                                                                                                \
    const T* pa = (const T*)g->a;                                                                  \
    const T* pb = (const T*)g->b;                                                                  \
    T* pd = (T*)g->dst;                                                                            \
    const T s = g->sdev ? *(const T*)g->sdev : (T)g->S;                                            \
    if (g->what == DM_POSTDIV) {                                                                   \
      T v = pd[i];                                                                                 \
      pd[i] = SIGNED && g->postdiv == -1 ? (T)(U)(0 - (U)v) : (T)(v / g->postdiv);                 \
      return;                                                                                      \
    }                                                                                              \
    if (g->what == DM_SCALE) {                                                                     \
      pd[i] = g->premul ? (T)(U)((U)s * (U)pa[i]) : pa[i];                                         \
      return;                                                                                      \
    }                                                                                              \
    T x = pa[i], y = pb[i];                                                                        \
    switch (g->op) {                                                                               \
      case DM_SUM:                                                                                 \
        if (g->premul && (g->flags & 1)) x = (T)(U)((U)s * (U)x);                                  \
        if (g->premul && (g->flags & 2)) y = (T)(U)((U)s * (U)y);                                  \
        pd[i] = (T)(U)((U)x + (U)y);                                                               \
        break;                                                                                     \
      case DM_PROD: pd[i] = (T)(U)((U)x * (U)y); break;                                            \
      case DM_MAX: pd[i] = x > y ? x : y; break;                                                   \
      default: pd[i] = x < y ? x : y; break;                                                       \
    }                                                                                              \
    return;                                                                                        \
  }

/* Floating types: RAW stored, CT computed (float, or double for float64);
 * MAX/MIN keep the chosen input's bits (a NaN on either side wins, equal
 * values give b). */
#define DM_FLT_ITEM(RAW, CT, DEC, ENC, MUL, ADD, DIV)                                              \
  {                                                                                                \
    const RAW* pa = (const RAW*)g->a;                                                              \
    const RAW* pb = (const RAW*)g->b;                                                              \
    RAW* pd = (RAW*)g->dst;                                                                        \
    const CT s = g->sdev ? DEC(*(const RAW*)g->sdev) : (CT)g->sf;                                  \
    if (g->what == DM_POSTDIV) {                                                                   \
      pd[i] = ENC(DIV(DEC(pd[i]), (CT)g->postdiv));                                                \
      return;                                                                                      \
    }                                                                                              \
    if (g->what == DM_SCALE) {                                                                     \
      pd[i] = g->premul ? ENC(MUL(s, DEC(pa[i]))) : pa[i];                                         \
      return;                                                                                      \
    }                                                                                              \
    RAW ra = pa[i], rb = pb[i];                                                                    \
    CT x = DEC(ra), y = DEC(rb);                                                                   \
    switch (g->op) {                                                                               \
      case DM_SUM:                                                                                 \
        if (g->premul && (g->flags & 1)) x = MUL(s, x);                                            \
        if (g->premul && (g->flags & 2)) y = MUL(s, y);                                            \
        pd[i] = ENC(ADD(x, y));                                                                    \
        break;                                                                                     \
      case DM_PROD: pd[i] = ENC(MUL(x, y)); break;                                                 \
      case DM_MAX: pd[i] = (x > y || x != x) ? ra : rb; break;                                     \
      default: pd[i] = (x < y || x != x) ? ra : rb; break;                                         \
    }                                                                                              \
    return;                                                                                        \
  }

DM_FN float dm_same_f(float v) { return v; }
DM_FN double dm_same_d(double v) { return v; }

/* Element i of a moeccl_k_reduce launch. */
DM_FN void dm_reduce_item(const moeccl_kred_args_t* g, uint64_t i) {
  switch (g->type) {
    case DM_I8: DM_INT_ITEM(int8_t, uint8_t, si, 1)
    case DM_U8: DM_INT_ITEM(uint8_t, uint8_t, su, 0)
    case DM_I32: DM_INT_ITEM(int32_t, uint32_t, si, 1)
    case DM_U32: DM_INT_ITEM(uint32_t, uint32_t, su, 0)
    case DM_I64: DM_INT_ITEM(int64_t, uint64_t, si, 1)
    case DM_U64: DM_INT_ITEM(uint64_t, uint64_t, su, 0)
    case DM_F16: DM_FLT_ITEM(uint16_t, float, half_dec, half_enc, DM_MULF, DM_ADDF, DM_DIVF)
    case DM_F32: DM_FLT_ITEM(float, float, dm_same_f, dm_same_f, DM_MULF, DM_ADDF, DM_DIVF)
    case DM_F64: DM_FLT_ITEM(double, double, dm_same_d, dm_same_d, DM_MULD, DM_ADDD, DM_DIVD)
    case DM_BF16: DM_FLT_ITEM(uint16_t, float, bf16_dec, bf16_enc, DM_MULF, DM_ADDF, DM_DIVF)
    case DM_E4M3: DM_FLT_ITEM(uint8_t, float, e4m3_dec, e4m3_enc, DM_MULF, DM_ADDF, DM_DIVF)
    case DM_E5M2: DM_FLT_ITEM(uint8_t, float, e5m2_dec, e5m2_enc, DM_MULF, DM_ADDF, DM_DIVF)
    default: return;
  }
}

/* Element i of a moeccl_k_reduce_fold launch. */
DM_FN void dm_fold_item(const moeccl_kfold_args_t* g, uint64_t i) {
  dm_reduce_item(&g->first, i);
  moeccl_kred_args_t next = g->first;
  next.a = next.dst;
  for (int32_t k = 0; k < g->nmore; k++) {
    next.b = g->more[k];
    next.flags = (g->more_pre >> k & 1) ? 2 : 0;
    dm_reduce_item(&next, i);
  }
}

/* ---- row programs -------------------------------------------------------- */

DM_FN float dm_row_load(int32_t type, const void* row, uint64_t k) {
  if (type == DM_F32) return ((const float*)row)[k];
  uint16_t v = ((const uint16_t*)row)[k];
  return type == DM_BF16 ? bf16_dec(v) : half_dec(v);
}

DM_FN void dm_row_store(int32_t type, void* row, uint64_t k, float v) {
  if (type == DM_F32) ((float*)row)[k] = v;
  else ((uint16_t*)row)[k] = type == DM_BF16 ? bf16_enc(v) : half_enc(v);
}

DM_FN uint64_t dm_row_bytes(const moeccl_krows_args_t* g) {
  return g->elems * (g->type == DM_F32 ? 4 : 2);
}

/* SUM, item (group, column): the group's weighted sum, accumulated in
 * float32 in term order, the first term as 0 + w*x (rows.c); a group of
 * one unweighted term is a copy of its row's bits. */
DM_FN void dm_rows_sum_item(const moeccl_krows_args_t* g, uint64_t item) {
  uint64_t grp = item / g->elems, k = item % g->elems, rb = dm_row_bytes(g);
  const dm_term_t* t = g->terms + g->first[grp];
  uint32_t n = g->first[grp + 1] - g->first[grp];
  const float* w = (const float*)g->aux;
  char* out = (char*)g->dst + (uint64_t)t[0].dst * rb;
  const char* src = (const char*)g->src;
  if (n == 1 && t[0].src != DM_ROW_NONE && (!w || t[0].aux == DM_ROW_NONE || w[t[0].aux] == 1.0f)) {
    const char* row = src + (uint64_t)t[0].src * rb;
    if (g->type == DM_F32) ((float*)out)[k] = ((const float*)row)[k];
    else ((uint16_t*)out)[k] = ((const uint16_t*)row)[k];
    return;
  }
  float acc = 0.0f;
  int first = 1;
  for (uint32_t i = 0; i < n; i++) {
    if (t[i].src == DM_ROW_NONE) continue;
    float wi = w && t[i].aux != DM_ROW_NONE ? w[t[i].aux] : 1.0f;
    float p = DM_MULF(wi, dm_row_load(g->type, src + (uint64_t)t[i].src * rb, k));
    acc = DM_ADDF(first ? 0.0f : acc, p);
    first = 0;
  }
  dm_row_store(g->type, out, k, acc); /* no term: a zero row */
}

/* ADD (float32 rows): item (term, column), or column k with the terms in
 * order when a dst repeats. */
DM_FN void dm_rows_add_one(const moeccl_krows_args_t* g, const dm_term_t* t, uint64_t k) {
  float* out = (float*)g->dst + (uint64_t)t->dst * g->elems + k;
  float in = ((const float*)g->src)[(uint64_t)t->src * g->elems + k];
  *out = DM_ADDF(t->aux != DM_ROW_NONE ? 0.0f : *out, in);
}

DM_FN void dm_rows_add_item(const moeccl_krows_args_t* g, uint64_t item) {
  if (!g->serial) {
    dm_rows_add_one(g, &g->terms[item / g->elems], item % g->elems);
    return;
  }
  for (uint64_t i = 0; i < g->nterms; i++) dm_rows_add_one(g, &g->terms[i], item);
}

/* DOT, item = term: float32 element dst = src row . aux row, in element
 * order (0 when either is missing). */
DM_FN void dm_rows_dot_item(const moeccl_krows_args_t* g, uint64_t item) {
  const dm_term_t* t = &g->terms[item];
  float s = 0.0f;
  if (t->src != DM_ROW_NONE && t->aux != DM_ROW_NONE) {
    uint64_t rb = dm_row_bytes(g);
    const char* x = (const char*)g->src + (uint64_t)t->src * rb;
    const char* y = (const char*)g->aux + (uint64_t)t->aux * rb;
    for (uint64_t k = 0; k < g->elems; k++)
      s = DM_ADDF(s, DM_MULF(dm_row_load(g->type, x, k), dm_row_load(g->type, y, k)));
  }
  ((float*)g->dst)[t->dst] = s;
}

/* COPY, item (term, unit): rows of elems bytes. */
DM_FN void dm_rows_copy_item(const moeccl_krows_args_t* g, uint64_t item) {
  uint64_t per = g->elems / (uint64_t)g->unit, k = item % per;
  const dm_term_t* t = &g->terms[item / per];
  char* d = (char*)g->dst + (uint64_t)t->dst * g->elems + k * (uint64_t)g->unit;
  const char* s = (const char*)g->src + (uint64_t)t->src * g->elems + k * (uint64_t)g->unit;
  switch (g->unit) {
    case 16:
      ((uint64_t*)d)[0] = ((const uint64_t*)s)[0];
      ((uint64_t*)d)[1] = ((const uint64_t*)s)[1];
      break;
    case 8: *(uint64_t*)d = *(const uint64_t*)s; break;
    case 4: *(uint32_t*)d = *(const uint32_t*)s; break;
    case 2: *(uint16_t*)d = *(const uint16_t*)s; break;
    default: *d = *s; break;
  }
}

/* Work items of a launch of each family. */
DM_FN uint64_t dm_rows_items(int mode, const moeccl_krows_args_t* g) {
  switch (mode) {
    case 0: return g->ngroups * g->elems;                        /* SUM */
    case 1: return g->nterms;                                    /* DOT */
    case 2: return g->nterms * (g->elems / (uint64_t)g->unit);   /* COPY */
    default: return g->serial ? g->elems : g->nterms * g->elems; /* ADD */
  }
}

#endif
