/*
 * mp_coll.c - conformance of the NCCL-style collectives on 1..8 forked ranks:
 * moecclAllReduce, moecclReduceScatter, moecclAllGather, moecclBroadcast,
 * moecclBcast, moecclReduce, moecclGather and moecclScatter, written from the
 * semantics in moeccl.h (NCCL's), not from the implementation.
 *
 *   matrix       every collective x every datatype x every op (Sum, Prod,
 *                Max, Min, Avg, PreMulSum with a host-immediate scalar and
 *                with a "device" scalar read when the op runs) x counts 0, 1,
 *                7, 1000, in place and out of place (Bcast as well; Gather
 *                and Scatter in place on the root), roots
 *                rotating over all ranks, buffers alternating between malloc
 *                and moecclMemAlloc, at element offsets 0..2 inside them;
 *                guard bytes around every buffer; send buffers unchanged;
 *                root-only buffers NULL on the other ranks (or, every other
 *                call, a buffer that must stay untouched);
 *   roots        every root of Broadcast, Bcast, Reduce, Gather, Scatter;
 *   zero         count 0 with NULL buffers is a no-op;
 *   large        a few type/op combinations with 300,000 elements;
 *   group        several collectives in one group with AlltoAll and a
 *                send/recv ring;
 *   stream       collectives on a host stream, one depending on another;
 *   split        AllReduce, ReduceScatter and Broadcast (child's root) on a
 *                communicator split by rank parity, PreMulSum made on it;
 *   consistency  AllReduce of inexact floats: the result is bitwise the same
 *                on every rank and in repeated calls, and close to the sum;
 *   nan          a NaN input propagates through Max and Min;
 *   saturate     fp8 sums past the largest finite value saturate to it.
 *
 * Expected values are computed here.  Inputs keep the exact result
 * representable and independent of the order of summation: integers wrap
 * (exact modulo 2^bits); floats are small integers whose partial sums are
 * exact in the type, products are of {1,-1,2,0.5,-2}, Max/Min see any finite
 * bit pattern.  Avg and PreMulSum on floats are compared with a tolerance of
 * (nranks+2) units of roundoff of the sum of magnitudes; Avg on integers is
 * the wrapped sum divided by nranks (C division), as the header says.
 *
 * Re-run under MOECCL_SHM_DISABLE=1, simulated nodes (MP_RANKS_PER_NODE=2)
 * and every forced algorithm of each collective, with a reduced matrix
 * (MP_COLL_QUICK=1, set by the variants; MP_COLL_QUICK=0 forces the full one).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.h"

#define GUARD 64
#define LARGE_COUNT 300000
#define MAX_OFF 2 /* buffers start 0..MAX_OFF elements into their region */

/* ---- Datatypes: encoders, decoders ---------------------------------------- */

typedef struct {
  int flt, sgn;
  size_t size;
  int ebits, mbits, fn; /* minifloats: exponent and mantissa bits; fn: e4m3 "fn" (no inf) */
  double exact;         /* integers up to this are exact */
} tinfo;

static const tinfo TI[moecclNumTypes] = {
    [moecclInt8] = {0, 1, 1, 0, 0, 0, 0},
    [moecclUint8] = {0, 0, 1, 0, 0, 0, 0},
    [moecclInt32] = {0, 1, 4, 0, 0, 0, 0},
    [moecclUint32] = {0, 0, 4, 0, 0, 0, 0},
    [moecclInt64] = {0, 1, 8, 0, 0, 0, 0},
    [moecclUint64] = {0, 0, 8, 0, 0, 0, 0},
    [moecclFloat16] = {1, 1, 2, 5, 10, 0, 2048.0},
    [moecclFloat32] = {1, 1, 4, 8, 23, 0, 16777216.0},
    [moecclFloat64] = {1, 1, 8, 11, 52, 0, 9007199254740992.0},
    [moecclBfloat16] = {1, 1, 2, 8, 7, 0, 256.0},
    [moecclFloat8e4m3] = {1, 1, 1, 4, 3, 1, 16.0},
    [moecclFloat8e5m2] = {1, 1, 1, 5, 2, 0, 8.0},
};

static double mf_decode(uint32_t b, int E, int M, int fn) {
  int bias = (1 << (E - 1)) - 1;
  uint32_t sign = (b >> (E + M)) & 1u, ex = (b >> M) & ((1u << E) - 1), man = b & ((1u << M) - 1);
  double v;
  if (ex == 0)
    v = ldexp((double)man, 1 - bias - M);
  else if (!fn && ex == (1u << E) - 1)
    v = man ? NAN : INFINITY;
  else if (fn && ex == (1u << E) - 1 && man == (1u << M) - 1)
    v = NAN;
  else
    v = ldexp((double)(man | (1u << M)), (int)ex - bias - M);
  return sign ? -v : v;
}

/* Round to nearest even; out of range gives inf (IEEE-like) or NaN (fn). */
static uint32_t mf_encode(double x, int E, int M, int fn) {
  int bias = (1 << (E - 1)) - 1;
  uint32_t sign = signbit(x) ? 1u << (E + M) : 0;
  uint32_t inf = ((1u << E) - 1) << M, nan = fn ? (1u << (E + M)) - 1 : inf | (1u << (M - 1));
  if (isnan(x)) return sign | nan;
  double a = fabs(x);
  if (a == 0) return sign;
  int maxex = fn ? (1 << E) - 1 : (1 << E) - 2;
  uint32_t maxman = fn ? (1u << M) - 2 : (1u << M) - 1;
  double maxval = ldexp((double)(maxman | (1u << M)), maxex - bias - M);
  if (isinf(a)) return sign | (fn ? nan : inf);
  int e;
  (void)frexp(a, &e);
  int ue = e - 1;
  if (ue < 1 - bias) ue = 1 - bias;
  double q = ldexp(1.0, ue - M);
  double r = rint(a / q) * q;
  if (r > maxval) return sign | (fn ? nan : inf);
  if (r < ldexp(1.0, 1 - bias)) return sign | (uint32_t)(r / ldexp(1.0, 1 - bias - M));
  (void)frexp(r, &e);
  ue = e - 1;
  uint32_t man = (uint32_t)(r / ldexp(1.0, ue - M)) - (1u << M);
  return sign | ((uint32_t)(ue + bias) << M) | man;
}

static uint64_t tmask(int t, uint64_t v) {
  size_t sz = TI[t].size;
  return sz == 8 ? v : v & ((1ull << (8 * sz)) - 1);
}

static int64_t sext(int t, uint64_t v) {
  size_t sz = TI[t].size;
  if (sz == 8) return (int64_t)v;
  uint64_t m = 1ull << (8 * sz - 1);
  return (int64_t)((tmask(t, v) ^ m) - m);
}

/* Decoding tables of the 16- and 8-bit floating types (dec_init fills them). */
static double dec_f16[65536], dec_bf16[65536], dec_e4m3[256], dec_e5m2[256];

static void dec_init(void) {
  for (uint32_t b = 0; b < 65536; b++) {
    dec_f16[b] = mf_decode(b, 5, 10, 0);
    dec_bf16[b] = mf_decode(b, 8, 7, 0);
    if (b < 256) dec_e4m3[b] = mf_decode(b, 4, 3, 1), dec_e5m2[b] = mf_decode(b, 5, 2, 0);
  }
}

static double dec(int t, uint64_t bits) {
  switch (t) {
    case moecclFloat32: {
      uint32_t b = (uint32_t)bits;
      float f;
      memcpy(&f, &b, 4);
      return f;
    }
    case moecclFloat64: {
      double d;
      memcpy(&d, &bits, 8);
      return d;
    }
    case moecclFloat16: return dec_f16[bits & 0xFFFF];
    case moecclBfloat16: return dec_bf16[bits & 0xFFFF];
    case moecclFloat8e4m3: return dec_e4m3[bits & 0xFF];
    default: return dec_e5m2[bits & 0xFF];
  }
}

static uint64_t enc(int t, double x) {
  if (t == moecclFloat32) {
    float f = (float)x;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }
  if (t == moecclFloat64) {
    uint64_t b;
    memcpy(&b, &x, 8);
    return b;
  }
  return mf_encode(x, TI[t].ebits, TI[t].mbits, TI[t].fn);
}

static double unit_roundoff(int t) { return ldexp(1.0, -(TI[t].mbits + 1)); }
static double min_subnormal(int t) {
  int bias = (1 << (TI[t].ebits - 1)) - 1;
  return ldexp(1.0, 1 - bias - TI[t].mbits);
}

static void put_u(void* buf, size_t i, size_t sz, uint64_t v) { memcpy((char*)buf + i * sz, &v, sz); }
static uint64_t get_u(const void* buf, size_t i, size_t sz) {
  uint64_t v = 0;
  memcpy(&v, (const char*)buf + i * sz, sz);
  return v;
}

/* Self-check of the codecs on values whose encodings are known. */
static int codec_selftest(void) {
  static const struct {
    int t;
    double v;
    uint32_t bits;
  } k[] = {
      {moecclFloat16, 1.0, 0x3C00},       {moecclFloat16, -2.0, 0xC000},   {moecclFloat16, 65504.0, 0x7BFF},
      {moecclFloat16, 0x1p-24, 0x0001}, {moecclBfloat16, 1.0, 0x3F80}, {moecclBfloat16, -3.0, 0xC040},
      {moecclFloat8e4m3, 448.0, 0x7E},    {moecclFloat8e4m3, 1.0, 0x38},   {moecclFloat8e4m3, 0x1p-9, 0x01},
      {moecclFloat8e4m3, -1.5, 0xBC},     {moecclFloat8e5m2, 57344.0, 0x7B}, {moecclFloat8e5m2, 1.0, 0x3C},
      {moecclFloat8e5m2, 0x1p-16, 0x01}, {moecclFloat8e5m2, -0.75, 0xBA},
  };
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
    MP_CHECK(enc(k[i].t, k[i].v) == k[i].bits, "codec: enc(%s, %g) = 0x%llx, expected 0x%x", mp_dtypes[k[i].t].name,
             k[i].v, (unsigned long long)enc(k[i].t, k[i].v), k[i].bits);
    MP_CHECK(dec(k[i].t, k[i].bits) == k[i].v, "codec: dec(%s, 0x%x) = %g, expected %g", mp_dtypes[k[i].t].name,
             k[i].bits, dec(k[i].t, k[i].bits), k[i].v);
  }
  /* Every finite pattern of the small types decodes and encodes back. */
  static const int small[] = {moecclFloat16, moecclBfloat16, moecclFloat8e4m3, moecclFloat8e5m2};
  for (int s = 0; s < 4; s++) {
    int t = small[s];
    uint32_t top = 1u << (8 * TI[t].size);
    for (uint32_t b = 0; b < top; b++) {
      double v = dec(t, b);
      if (isnan(v)) continue;
      MP_CHECK(enc(t, v) == b, "codec: %s 0x%x -> %g -> 0x%llx", mp_dtypes[t].name, b, v,
               (unsigned long long)enc(t, v));
    }
  }
  MP_CHECK(enc(moecclFloat8e4m3, 1.0625) == 0x38 && enc(moecclFloat8e4m3, 1.1875) == 0x3A,
           "codec: e4m3 round to nearest even");
  MP_CHECK(isnan(dec(moecclFloat8e4m3, 0x7F)) && isinf(dec(moecclFloat8e5m2, 0x7C)), "codec: special values");
  return 0;
}

/* ---- Ops, inputs, expected results --------------------------------------- */

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMI, OP_PMD, NOPS };
static const char* op_name[NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum-imm", "premulsum-dev"};
static const moecclRedOp_t builtin_op[5] = {moecclSum, moecclProd, moecclMax, moecclMin, moecclAvg};

/* PreMulSum scalars: the immediate one as created (its storage is overwritten
 * right after creation), the device one as stored before each call (another
 * value was there at creation). */
static double scalar_f(int op) { return op == OP_PMI ? 1.5 : 2.0; }
static uint64_t scalar_i(int t, int op) {
  int64_t s = op == OP_PMI ? 3 : 7;
  return tmask(t, (uint64_t)(TI[t].sgn ? -s : s));
}

static uint64_t h3(uint64_t seed, int rank, size_t idx) {
  return mp_mix64(seed ^ mp_mix64(((uint64_t)(unsigned)rank << 40) ^ (uint64_t)idx));
}

static long sum_limit(int t, int n) {
  double l = TI[t].exact / n;
  if (l > 1000) l = 1000;
  return l < 1 ? 1 : (long)l;
}

/* The bits rank puts at element idx of the input (idx counts over the whole
 * logical vector: nranks*recvcount for ReduceScatter). */
static uint64_t gen_bits(int t, int op, uint64_t seed, int rank, size_t idx, int n) {
  uint64_t h = h3(seed, rank, idx);
  if (!TI[t].flt) {
    if (op == OP_PROD) {
      static const int64_t set[] = {1, -1, 2, 3, -3};
      return tmask(t, (uint64_t)set[h % 5]);
    }
    return tmask(t, h);
  }
  if (op == OP_MAX || op == OP_MIN) {
    uint64_t b = tmask(t, h);
    if (!isfinite(dec(t, b))) b ^= 1ull << (TI[t].ebits + TI[t].mbits - 1); /* top exponent bit */
    return b;
  }
  if (op == OP_PROD) {
    static const double set[] = {1, -1, 2, 0.5, -2};
    static uint64_t ptab[moecclNumTypes][5];
    static int pready[moecclNumTypes];
    if (!pready[t])
      for (int k = 0; k < 5; k++) ptab[t][k] = enc(t, set[k]), pready[t] = 1;
    return n <= 8 ? ptab[t][h % 5] : ptab[t][h & 1]; /* more ranks: only 1 and -1 */
  }
  /* small integers in [-l, l], encoded once per type */
  static uint64_t itab[moecclNumTypes][2001];
  static long itab_l[moecclNumTypes];
  long l = sum_limit(t, n);
  if (itab_l[t] != l) {
    for (long k = -l; k <= l; k++) itab[t][k + l] = enc(t, (double)k);
    itab_l[t] = l;
  }
  return itab[t][h % (uint64_t)(2 * l + 1)];
}

/* Random reals in [-1, 1) rounded to the type (inexact sums). */
static uint64_t gen_real(int t, uint64_t seed, int rank, size_t idx) {
  uint64_t h = h3(seed ^ 0x5EA1, rank, idx);
  return enc(t, ldexp((double)(h >> 11), -52) - 1.0);
}

static void fill_input(void* buf, int t, int op, uint64_t seed, int rank, size_t gidx0, size_t cnt, int n) {
  for (size_t i = 0; i < cnt; i++) put_u(buf, i, TI[t].size, gen_bits(t, op, seed, rank, gidx0 + i, n));
}

/* First element of buf that differs from the input, or SIZE_MAX. */
static size_t input_differs(const void* buf, int t, int op, uint64_t seed, int rank, size_t gidx0, size_t cnt,
                            int n) {
  for (size_t i = 0; i < cnt; i++)
    if (get_u(buf, i, TI[t].size) != gen_bits(t, op, seed, rank, gidx0 + i, n)) return i;
  return SIZE_MAX;
}

typedef struct {
  uint64_t ibits; /* integers: expected bits */
  double f, tol;  /* floats: expected value, tolerance */
} expect_t;

static expect_t expected(int t, int op, uint64_t seed, int n, size_t gidx) {
  expect_t e = {0, 0, 0};
  if (!TI[t].flt) {
    uint64_t acc = op == OP_PROD ? 1 : 0;
    for (int r = 0; r < n; r++) {
      uint64_t v = gen_bits(t, op, seed, r, gidx, n);
      switch (op) {
        case OP_SUM:
        case OP_AVG: acc += v; break;
        case OP_PROD: acc *= v; break;
        case OP_PMI:
        case OP_PMD: acc += v * scalar_i(t, op); break;
        case OP_MAX:
        case OP_MIN: {
          if (r == 0) {
            acc = v;
            break;
          }
          int gt = TI[t].sgn ? sext(t, v) > sext(t, acc) : v > acc;
          int lt = TI[t].sgn ? sext(t, v) < sext(t, acc) : v < acc;
          if ((op == OP_MAX && gt) || (op == OP_MIN && lt)) acc = v;
          break;
        }
      }
    }
    acc = tmask(t, acc);
    if (op == OP_AVG) acc = TI[t].sgn ? (uint64_t)(sext(t, acc) / n) : acc / (uint64_t)n;
    e.ibits = tmask(t, acc);
    return e;
  }
  double acc = op == OP_PROD ? 1 : 0, mag = 0;
  for (int r = 0; r < n; r++) {
    double v = dec(t, gen_bits(t, op, seed, r, gidx, n));
    switch (op) {
      case OP_SUM: acc += v; break;
      case OP_PROD: acc *= v; break;
      case OP_MAX: acc = (r == 0 || v > acc) ? v : acc; break;
      case OP_MIN: acc = (r == 0 || v < acc) ? v : acc; break;
      case OP_AVG: acc += v, mag += fabs(v); break;
      default: acc += v * scalar_f(op), mag += fabs(v * scalar_f(op)); break;
    }
  }
  if (op == OP_AVG) acc /= n, mag /= n;
  e.f = acc;
  if (op == OP_AVG || op == OP_PMI || op == OP_PMD) e.tol = (n + 2) * unit_roundoff(t) * mag + n * min_subnormal(t);
  return e;
}

/* ---- Context, buffers ------------------------------------------------------ */

typedef struct {
  moecclComm_t comm;
  int rank, n;
  int quick;
  unsigned long ctr; /* calls so far: the same sequence on every rank */
  unsigned long checked;
  int failures; /* failed checks so far (the matrix goes on after one) */
  size_t cap;                 /* bytes in each region, guards and offsets included */
  unsigned char* reg[2][3];   /* [0] malloc, [1] moecclMemAlloc; three regions each */
  unsigned char scal[NOPS][8]; /* PreMulSum scalar storage */
  moecclRedOp_t pm[2];        /* the PreMulSum ops of the current datatype */
  char what[200];
} ctx;

static uint64_t next_seed(ctx* c) { return mp_mix64(((uint64_t)c->n << 48) ^ (uint64_t)c->ctr ^ 0xC011); }

/* A buffer of bytes in region which of kind, with sentinel guards of GUARD
 * bytes on both sides; the payload is filled with the sentinel too. */
/* Per call, the same on every rank: the kind of each buffer (0 malloc, 1
 * moecclMemAlloc), whether a non-root passes a buffer it need not pass. */
#define KIND_S(c) ((int)(mp_mix64((c)->ctr ^ 0x0FF) & 1))
#define KIND_R(c) ((int)((mp_mix64((c)->ctr ^ 0x0FF) >> 1) & 1))
#define NONROOT_BUF(c) ((int)((mp_mix64((c)->ctr ^ 0x0FF) >> 2) & 1))

static unsigned char* gbuf(ctx* c, int kind, int which, size_t bytes, size_t es) {
  size_t off = (size_t)((mp_mix64(c->ctr ^ 0x0FF) >> 3) % (MAX_OFF + 1)) * es;
  unsigned char* p = c->reg[kind][which] + GUARD + off;
  if (bytes + off + 2 * GUARD > c->cap) {
    fprintf(stderr, "rank %d: buffer of %zu bytes does not fit the regions of %zu\n", c->rank, bytes, c->cap);
    abort();
  }
  mp_fill_sentinel(p - GUARD, bytes + 2 * GUARD);
  return p;
}

static int guards_ok(ctx* c, const unsigned char* p, size_t bytes, const char* which) {
  char w[300];
  snprintf(w, sizeof(w), "%s: guard before %s", c->what, which);
  MP_CHECK_SENTINEL(w, p - GUARD, GUARD);
  snprintf(w, sizeof(w), "%s: guard after %s", c->what, which);
  MP_CHECK_SENTINEL(w, p + bytes, GUARD);
  return 0;
}

static moecclRedOp_t rop_of(ctx* c, int t, int op) {
  if (op < OP_PMI) return builtin_op[op];
  if (op == OP_PMD) { /* the value the op must read when it runs */
    if (TI[t].flt)
      put_u(c->scal[OP_PMD], 0, TI[t].size, enc(t, scalar_f(OP_PMD)));
    else
      put_u(c->scal[OP_PMD], 0, TI[t].size, scalar_i(t, OP_PMD));
  }
  return c->pm[op - OP_PMI];
}

/* Makes the two PreMulSum ops of datatype t on c->comm. */
static int make_premul(ctx* c, int t) {
  size_t es = TI[t].size;
  put_u(c->scal[OP_PMI], 0, es, TI[t].flt ? enc(t, scalar_f(OP_PMI)) : scalar_i(t, OP_PMI));
  MP_OK_COMM(c->comm, moecclRedOpCreatePreMulSum(&c->pm[0], c->scal[OP_PMI], (moecclDataType_t)t,
                                                 moecclScalarHostImmediate, c->comm));
  put_u(c->scal[OP_PMI], 0, es, TI[t].flt ? enc(t, 99.0) : 77); /* must not matter any more */
  put_u(c->scal[OP_PMD], 0, es, TI[t].flt ? enc(t, 0.25) : 5);  /* replaced before each call */
  MP_OK_COMM(c->comm, moecclRedOpCreatePreMulSum(&c->pm[1], c->scal[OP_PMD], (moecclDataType_t)t,
                                                 moecclScalarDevice, c->comm));
  MP_CHECK((int)c->pm[0] >= (int)moecclNumOps && (int)c->pm[1] >= (int)moecclNumOps && c->pm[0] != c->pm[1],
           "moecclRedOpCreatePreMulSum(%s) gave ops %d and %d", mp_dtypes[t].name, (int)c->pm[0], (int)c->pm[1]);
  return 0;
}

static int drop_premul(ctx* c) {
  MP_OK_COMM(c->comm, moecclRedOpDestroy(c->pm[0], c->comm));
  MP_OK_COMM(c->comm, moecclRedOpDestroy(c->pm[1], c->comm));
  return 0;
}

/* Checks cnt reduced elements at buf (logical indices gidx0..). */
static int check_reduced(ctx* c, const void* buf, int t, int op, uint64_t seed, size_t gidx0, size_t cnt) {
  size_t es = TI[t].size;
  for (size_t i = 0; i < cnt; i++) {
    expect_t e = expected(t, op, seed, c->n, gidx0 + i);
    uint64_t got = get_u(buf, i, es);
    if (!TI[t].flt) {
      if (got == e.ibits) continue;
      char g[32], x[32];
      if (TI[t].sgn)
        snprintf(g, sizeof(g), "%lld", (long long)sext(t, got)), snprintf(x, sizeof(x), "%lld", (long long)sext(t, e.ibits));
      else
        snprintf(g, sizeof(g), "%llu", (unsigned long long)got), snprintf(x, sizeof(x), "%llu", (unsigned long long)e.ibits);
      MP_CHECK(0, "%s: element %zu is 0x%llx (%s), expected 0x%llx (%s)", c->what, i,
               (unsigned long long)got, g, (unsigned long long)e.ibits, x);
    } else {
      double g = dec(t, got);
      int ok = e.tol > 0 ? fabs(g - e.f) <= e.tol : g == e.f;
      MP_CHECK(ok, "%s: element %zu is %.10g (0x%llx), expected %.10g (0x%llx)%s", c->what, i, g,
               (unsigned long long)got, e.f, (unsigned long long)enc(t, e.f), e.tol > 0 ? " within tolerance" : "");
    }
  }
  c->checked++;
  return 0;
}

static int check_input_kept(ctx* c, const void* buf, int t, int op, uint64_t seed, size_t gidx0, size_t cnt,
                            const char* which) {
  size_t bad = input_differs(buf, t, op, seed, c->rank, gidx0, cnt, c->n);
  MP_CHECK(bad == SIZE_MAX, "%s: %s changed at element %zu", c->what, which, bad);
  return 0;
}

static int all_sentinel(ctx* c, const void* buf, size_t bytes, const char* which) {
  size_t off = mp_find_not_sentinel(buf, bytes);
  MP_CHECK(off == SIZE_MAX, "%s: %s (must stay untouched) changed at byte %zu", c->what, which, off);
  return 0;
}

/* ---- One checked call of each collective ------------------------------------ */

#define WHAT(...) snprintf(c->what, sizeof(c->what), __VA_ARGS__)
/* A failed call returns 2 (the ranks may be out of step: stop), a failed
 * check 1 (the calls stay in step: count it and go on). */
#define CALL(call)                                                                                     \
  do {                                                                                                 \
    moecclResult_t call_res_ = (call);                                                                 \
    if (call_res_ != moecclSuccess) {                                                                  \
      mp_failf(__FILE__, __LINE__, "%s: %s returned %d (%s): %s", c->what, #call, (int)call_res_,      \
               moecclGetErrorString(call_res_), mp_last_error_text(c->comm));                          \
      return 2;                                                                                        \
    }                                                                                                  \
  } while (0)
/* In the subtests after the matrix: a failed call ends the subtest, a failed
 * check is counted and the sequence of calls goes on (the ranks stay in step). */
#define STEP(x)                     \
  do {                              \
    int step_rc_ = (x);             \
    if (step_rc_ == 2) return 1;    \
    if (step_rc_) c->failures++;    \
  } while (0)

static const char* place_name[] = {"out-of-place", "in-place", "bcast"};

static int do_allreduce(ctx* c, int t, int op, size_t count, int inplace) {
  size_t es = TI[t].size, bytes = count * es;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c);
  WHAT("AllReduce %s %s count %zu %s (call %lu, %s/%s)", mp_dtypes[t].name, op_name[op], count, place_name[inplace],
       c->ctr, ks ? "memalloc" : "malloc", kr ? "memalloc" : "malloc");
  unsigned char* s = gbuf(c, ks, 0, bytes, es);
  unsigned char* r = inplace ? s : gbuf(c, kr, 1, bytes, es);
  fill_input(s, t, op, seed, c->rank, 0, count, c->n);
  moecclRedOp_t rop = rop_of(c, t, op);
  c->ctr++;
  CALL(moecclAllReduce(s, r, count, (moecclDataType_t)t, rop, c->comm, NULL));
  if (check_reduced(c, r, t, op, seed, 0, count)) return 1;
  if (!inplace && check_input_kept(c, s, t, op, seed, 0, count, "sendbuff")) return 1;
  if (guards_ok(c, s, bytes, "sendbuff") || guards_ok(c, r, bytes, "recvbuff")) return 1;
  return 0;
}

static int do_reducescatter(ctx* c, int t, int op, size_t rc, int inplace) {
  size_t es = TI[t].size, bytes = rc * es, total = bytes * (size_t)c->n;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c);
  WHAT("ReduceScatter %s %s recvcount %zu %s (call %lu)", mp_dtypes[t].name, op_name[op], rc, place_name[inplace],
       c->ctr);
  unsigned char* s = gbuf(c, ks, 0, total, es);
  unsigned char* r = inplace ? s + (size_t)c->rank * bytes : gbuf(c, kr, 1, bytes, es);
  fill_input(s, t, op, seed, c->rank, 0, rc * (size_t)c->n, c->n);
  moecclRedOp_t rop = rop_of(c, t, op);
  c->ctr++;
  CALL(moecclReduceScatter(s, r, rc, (moecclDataType_t)t, rop, c->comm, NULL));
  if (check_reduced(c, r, t, op, seed, (size_t)c->rank * rc, rc)) return 1;
  if (!inplace && check_input_kept(c, s, t, op, seed, 0, rc * (size_t)c->n, "sendbuff")) return 1;
  if (guards_ok(c, s, total, "sendbuff") || (!inplace && guards_ok(c, r, bytes, "recvbuff"))) return 1;
  return 0;
}

static int do_reduce(ctx* c, int t, int op, size_t count, int root, int inplace) {
  size_t es = TI[t].size, bytes = count * es;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c), give_nonroot_buf = NONROOT_BUF(c);
  int me_root = c->rank == root;
  WHAT("Reduce %s %s count %zu root %d %s (call %lu)", mp_dtypes[t].name, op_name[op], count, root,
       place_name[inplace], c->ctr);
  unsigned char *s, *r;
  if (inplace) {
    s = r = gbuf(c, kr, 1, bytes, es);
  } else {
    s = gbuf(c, ks, 0, bytes, es);
    r = (me_root || give_nonroot_buf) ? gbuf(c, kr, 1, bytes, es) : NULL;
  }
  fill_input(s, t, op, seed, c->rank, 0, count, c->n);
  moecclRedOp_t rop = rop_of(c, t, op);
  c->ctr++;
  CALL(moecclReduce(s, r, count, (moecclDataType_t)t, rop, root, c->comm, NULL));
  if (me_root) {
    if (check_reduced(c, r, t, op, seed, 0, count)) return 1;
  } else if (inplace) {
    if (check_input_kept(c, r, t, op, seed, 0, count, "buffer of a non-root (in place)")) return 1;
  } else if (r && all_sentinel(c, r, bytes, "recvbuff of a non-root")) {
    return 1;
  }
  if (!inplace && check_input_kept(c, s, t, op, seed, 0, count, "sendbuff")) return 1;
  if (guards_ok(c, s, bytes, "sendbuff") || (r && guards_ok(c, r, bytes, "recvbuff"))) return 1;
  return 0;
}

static int do_allgather(ctx* c, int t, size_t sc, int inplace) {
  size_t es = TI[t].size, bytes = sc * es, total = bytes * (size_t)c->n;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c);
  WHAT("AllGather %s sendcount %zu %s (call %lu)", mp_dtypes[t].name, sc, place_name[inplace], c->ctr);
  unsigned char* r = gbuf(c, kr, 1, total, es);
  unsigned char* s = inplace ? r + (size_t)c->rank * bytes : gbuf(c, ks, 0, bytes, es);
  mp_fill(s, es, sc, seed, c->rank, 0, 0);
  c->ctr++;
  CALL(moecclAllGather(s, r, sc, (moecclDataType_t)t, c->comm, NULL));
  char w[300];
  for (int i = 0; i < c->n; i++) {
    snprintf(w, sizeof(w), "%s: block %d", c->what, i);
    MP_CHECK_BLOCK(w, r + (size_t)i * bytes, es, sc, seed, i, 0, 0);
  }
  if (!inplace) {
    snprintf(w, sizeof(w), "%s: sendbuff changed", c->what);
    MP_CHECK_BLOCK(w, s, es, sc, seed, c->rank, 0, 0);
    if (guards_ok(c, s, bytes, "sendbuff")) return 1;
  }
  c->checked++;
  return guards_ok(c, r, total, "recvbuff");
}

/* mode 0: out of place, 1: in place (sendbuff == recvbuff), 2: moecclBcast. */
static int do_broadcast(ctx* c, int t, size_t count, int root, int mode) {
  size_t es = TI[t].size, bytes = count * es;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c), give_nonroot_buf = NONROOT_BUF(c);
  int me_root = c->rank == root;
  WHAT("Broadcast %s count %zu root %d %s (call %lu)", mp_dtypes[t].name, count, root, place_name[mode], c->ctr);
  unsigned char* r = gbuf(c, kr, 1, bytes, es);
  unsigned char* s = NULL;
  if (mode == 0 && (me_root || give_nonroot_buf)) s = gbuf(c, ks, 0, bytes, es); /* non-root: never read */
  if (mode != 0) s = r;
  if (me_root) mp_fill(s, es, count, seed, root, 0, 0);
  c->ctr++;
  if (mode == 2)
    CALL(moecclBcast(r, count, (moecclDataType_t)t, root, c->comm, NULL));
  else
    CALL(moecclBroadcast(s, r, count, (moecclDataType_t)t, root, c->comm, NULL));
  char w[300];
  snprintf(w, sizeof(w), "%s: recvbuff", c->what);
  MP_CHECK_BLOCK(w, r, es, count, seed, root, 0, 0);
  if (mode == 0 && me_root) {
    snprintf(w, sizeof(w), "%s: sendbuff changed", c->what);
    MP_CHECK_BLOCK(w, s, es, count, seed, root, 0, 0);
  }
  if (mode == 0 && s && !me_root && all_sentinel(c, s, bytes, "sendbuff of a non-root")) return 1;
  if (s && s != r && guards_ok(c, s, bytes, "sendbuff")) return 1;
  c->checked++;
  return guards_ok(c, r, bytes, "recvbuff");
}

/* inplace: on the root, sendbuff == recvbuff + root*count. */
static int do_gather(ctx* c, int t, size_t count, int root, int inplace) {
  size_t es = TI[t].size, bytes = count * es, total = bytes * (size_t)c->n;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c), give_nonroot_buf = NONROOT_BUF(c);
  int me_root = c->rank == root;
  WHAT("Gather %s count %zu root %d %s (call %lu)", mp_dtypes[t].name, count, root, place_name[inplace], c->ctr);
  unsigned char* r = (me_root || give_nonroot_buf) ? gbuf(c, kr, 1, total, es) : NULL;
  unsigned char* s = inplace && me_root ? r + (size_t)root * bytes : gbuf(c, ks, 0, bytes, es);
  mp_fill(s, es, count, seed, c->rank, 0, 0);
  c->ctr++;
  CALL(moecclGather(s, r, count, (moecclDataType_t)t, root, c->comm, NULL));
  char w[300];
  if (me_root) {
    for (int i = 0; i < c->n; i++) {
      snprintf(w, sizeof(w), "%s: block %d", c->what, i);
      MP_CHECK_BLOCK(w, r + (size_t)i * bytes, es, count, seed, i, 0, 0);
    }
  } else if (r && all_sentinel(c, r, total, "recvbuff of a non-root")) {
    return 1;
  }
  if (!(inplace && me_root)) {
    snprintf(w, sizeof(w), "%s: sendbuff changed", c->what);
    MP_CHECK_BLOCK(w, s, es, count, seed, c->rank, 0, 0);
    if (guards_ok(c, s, bytes, "sendbuff")) return 1;
  }
  if (r && guards_ok(c, r, total, "recvbuff")) return 1;
  c->checked++;
  return 0;
}

/* inplace: on the root, recvbuff == sendbuff + root*count. */
static int do_scatter(ctx* c, int t, size_t count, int root, int inplace) {
  size_t es = TI[t].size, bytes = count * es, total = bytes * (size_t)c->n;
  uint64_t seed = next_seed(c);
  int ks = KIND_S(c), kr = KIND_R(c), give_nonroot_buf = NONROOT_BUF(c);
  int me_root = c->rank == root;
  WHAT("Scatter %s count %zu root %d %s (call %lu)", mp_dtypes[t].name, count, root, place_name[inplace], c->ctr);
  unsigned char* s = (me_root || give_nonroot_buf) ? gbuf(c, ks, 0, total, es) : NULL;
  unsigned char* r = inplace && me_root ? s + (size_t)root * bytes : gbuf(c, kr, 1, bytes, es);
  if (me_root)
    for (int i = 0; i < c->n; i++) mp_fill(s + (size_t)i * bytes, es, count, seed, root, i, 0);
  c->ctr++;
  CALL(moecclScatter(s, r, count, (moecclDataType_t)t, root, c->comm, NULL));
  char w[300];
  snprintf(w, sizeof(w), "%s: recvbuff", c->what);
  MP_CHECK_BLOCK(w, r, es, count, seed, root, c->rank, 0);
  if (me_root) {
    for (int i = 0; i < c->n; i++) {
      snprintf(w, sizeof(w), "%s: sendbuff block %d changed", c->what, i);
      MP_CHECK_BLOCK(w, s + (size_t)i * bytes, es, count, seed, root, i, 0);
    }
  } else if (s && all_sentinel(c, s, total, "sendbuff of a non-root")) {
    return 1;
  }
  if (s && guards_ok(c, s, total, "sendbuff")) return 1;
  if (!(inplace && me_root) && guards_ok(c, r, bytes, "recvbuff")) return 1;
  c->checked++;
  return 0;
}

/* The 8-bit floating types saturate to their largest finite value
 * (moecclAllReduce(3)): sums past it give +-448 (e4m3) and +-57344 (e5m2). */
static int saturate(ctx* c) {
  static const struct {
    int t;
    double v, max;
  } k[] = {{moecclFloat8e4m3, 256.0, 448.0}, {moecclFloat8e5m2, 49152.0, 57344.0}};
  for (int i = 0; i < 2; i++) {
    int t = k[i].t;
    unsigned char s[16], r[16];
    for (int j = 0; j < 16; j++) s[j] = (unsigned char)enc(t, (j % 2 ? -1 : 1) * k[i].v);
    WHAT("AllReduce %s sum past the largest finite value", mp_dtypes[t].name);
    c->ctr++;
    MP_OK_COMM(c->comm, moecclAllReduce(s, r, 16, (moecclDataType_t)t, moecclSum, c->comm, NULL));
    double want = c->n == 1 ? k[i].v : k[i].max;
    for (int j = 0; j < 16; j++) {
      double g = dec(t, r[j]), w = (j % 2 ? -1 : 1) * want;
      if (g != w) {
        mp_failf(__FILE__, __LINE__, "%s: element %d is %g (0x%02x), expected %g", c->what, j, g, r[j], w);
        c->failures++;
        break;
      }
    }
    c->checked++;
  }
  return 0;
}

/* NaN inputs propagate through Max and Min (moecclAllReduce(3)). */
static int nan_check(ctx* c, int t, int op, uint64_t seed, const unsigned char* r, size_t count) {
  size_t es = TI[t].size;
  for (size_t i = 0; i < count; i++) {
    double g = dec(t, get_u(r, i, es));
    if (i == 3 || i == 5) {
      MP_CHECK(isnan(g), "%s: element %zu is %g, expected NaN", c->what, i, g);
    } else {
      expect_t e = expected(t, op, seed, c->n, i);
      MP_CHECK(g == e.f, "%s: element %zu is %g, expected %g", c->what, i, g, e.f);
    }
  }
  return 0;
}

static int nan_maxmin(ctx* c) {
  static const int types[] = {moecclFloat16, moecclFloat32, moecclFloat64, moecclBfloat16, moecclFloat8e4m3,
                              moecclFloat8e5m2};
  for (int ti = 0; ti < 6; ti++) {
    int t = types[ti];
    size_t es = TI[t].size, count = 9;
    for (int op = OP_MAX; op <= OP_MIN; op++) {
      uint64_t seed = next_seed(c);
      c->ctr++;
      unsigned char s[9 * 8], r[9 * 8];
      fill_input(s, t, op, seed, c->rank, 0, count, c->n);
      if (c->rank == c->n - 1) put_u(s, 3, es, enc(t, NAN));
      if (c->rank == 0) put_u(s, 5, es, enc(t, -NAN));
      WHAT("AllReduce %s %s with NaN inputs", mp_dtypes[t].name, op_name[op]);
      MP_OK_COMM(c->comm, moecclAllReduce(s, r, count, (moecclDataType_t)t, builtin_op[op], c->comm, NULL));
      if (nan_check(c, t, op, seed, r, count)) c->failures++;
      c->checked++;
    }
  }
  return 0;
}

/* ---- The matrix --------------------------------------------------------------- */

enum { C_ALLREDUCE, C_REDUCESCATTER, C_REDUCE, C_ALLGATHER, C_BROADCAST, C_GATHER, C_SCATTER, NCOLLS };
static const char* coll_name[NCOLLS] = {"allreduce", "reducescatter", "reduce", "allgather",
                                        "broadcast", "gather",        "scatter"};

static const size_t full_counts[] = {0, 1, 7, 1000};
static const size_t quick_counts[] = {1, 7, 1000};

static int matrix(ctx* c, int coll) {
  const size_t* counts = c->quick ? quick_counts : full_counts;
  int ncounts = c->quick ? 3 : 4;
  int reduction = coll <= C_REDUCE;
  for (int t = 0; t < moecclNumTypes; t++) {
    if (reduction && make_premul(c, t)) return 1;
    for (int op = 0; op < (reduction ? NOPS : 1); op++) {
      for (int ci = 0; ci < ncounts; ci++) {
        int nplaces = coll == C_BROADCAST ? 3 : 2;
        for (int place = 0; place < nplaces; place++) {
          /* The quick matrix: one place per (type, op, count), in turn. */
          if (c->quick && nplaces > 1 && place != (int)((t + op + ci) % (unsigned)nplaces)) continue;
          int root = (int)((c->ctr + c->ctr / 7) % (unsigned long)c->n); /* every root, both places */
          size_t cnt = counts[ci];
          int rc = 0;
          switch (coll) {
            case C_ALLREDUCE: rc = do_allreduce(c, t, op, cnt, place); break;
            case C_REDUCESCATTER: rc = do_reducescatter(c, t, op, cnt, place); break;
            case C_REDUCE: rc = do_reduce(c, t, op, cnt, root, place); break;
            case C_ALLGATHER: rc = do_allgather(c, t, cnt, place); break;
            case C_BROADCAST: rc = do_broadcast(c, t, cnt, root, place); break;
            case C_GATHER: rc = do_gather(c, t, cnt, root, place); break;
            case C_SCATTER: rc = do_scatter(c, t, cnt, root, place); break;
          }
          if (rc == 1 && ++c->failures < 40) continue;
          if (rc) return 1;
        }
      }
    }
    if (reduction && drop_premul(c)) return 1;
  }
  return 0;
}

/* Every root of the rooted collectives, explicitly. */
static int every_root(ctx* c) {
  if (make_premul(c, moecclFloat32)) return 1;
  for (int root = 0; root < c->n; root++) {
    for (int mode = 0; mode < 3; mode++) STEP(do_broadcast(c, moecclFloat32, 1000, root, mode));
    STEP(do_broadcast(c, moecclUint8, 7, root, 0));
    STEP(do_reduce(c, moecclFloat32, OP_SUM, 1000, root, 0));
    STEP(do_reduce(c, moecclFloat32, OP_PMD, 7, root, 1));
    STEP(do_gather(c, moecclFloat32, 1000, root, 0));
    STEP(do_gather(c, moecclInt8, 7, root, 1));
    STEP(do_scatter(c, moecclFloat32, 1000, root, 0));
    STEP(do_scatter(c, moecclInt64, 7, root, 1));
  }
  if (drop_premul(c)) return 1;
  if (make_premul(c, moecclInt32)) return 1;
  for (int root = 0; root < c->n; root++) {
    STEP(do_reduce(c, moecclInt32, OP_MAX, 7, root, 1));
    STEP(do_reduce(c, moecclInt32, OP_PMI, 1000, root, 0));
  }
  return drop_premul(c);
}

/* count 0 with NULL buffers: a no-op for every collective. */
static int zero_null(ctx* c) {
  moecclComm_t m = c->comm;
  MP_OK_COMM(m, moecclAllReduce(NULL, NULL, 0, moecclFloat32, moecclSum, m, NULL));
  MP_OK_COMM(m, moecclReduceScatter(NULL, NULL, 0, moecclInt32, moecclMax, m, NULL));
  MP_OK_COMM(m, moecclAllGather(NULL, NULL, 0, moecclUint8, m, NULL));
  MP_OK_COMM(m, moecclBroadcast(NULL, NULL, 0, moecclFloat64, 0, m, NULL));
  MP_OK_COMM(m, moecclBcast(NULL, 0, moecclFloat16, c->n - 1, m, NULL));
  MP_OK_COMM(m, moecclReduce(NULL, NULL, 0, moecclBfloat16, moecclAvg, c->n - 1, m, NULL));
  MP_OK_COMM(m, moecclGather(NULL, NULL, 0, moecclInt64, 0, m, NULL));
  MP_OK_COMM(m, moecclScatter(NULL, NULL, 0, moecclFloat8e4m3, c->n / 2, m, NULL));
  /* still in step: a real call afterwards */
  STEP(do_allreduce(c, moecclInt32, OP_SUM, 7, 0));
  return 0;
}

static int large(ctx* c) {
  size_t per = LARGE_COUNT / (size_t)c->n + 1;
  int n = c->n;
  STEP(do_allreduce(c, moecclFloat32, OP_SUM, LARGE_COUNT, 0));
  STEP(do_allreduce(c, moecclInt64, OP_MAX, LARGE_COUNT + 1, 1));
  if (make_premul(c, moecclBfloat16)) return 1;
  STEP(do_allreduce(c, moecclBfloat16, OP_AVG, LARGE_COUNT, 0));
  STEP(do_allreduce(c, moecclBfloat16, OP_PMD, LARGE_COUNT - 1, 1));
  STEP(do_reduce(c, moecclBfloat16, OP_PMI, LARGE_COUNT, n - 1, 0));
  if (drop_premul(c)) return 1;
  STEP(do_allreduce(c, moecclUint8, OP_PROD, LARGE_COUNT + 3, 0));
  STEP(do_reducescatter(c, moecclInt32, OP_SUM, per, 0));
  STEP(do_reducescatter(c, moecclFloat16, OP_MIN, per + 2, 1));
  STEP(do_reduce(c, moecclFloat64, OP_SUM, LARGE_COUNT, 0, 1));
  STEP(do_allgather(c, moecclUint8, per + 1, 0));
  STEP(do_allgather(c, moecclFloat64, per, 1));
  STEP(do_broadcast(c, moecclFloat64, LARGE_COUNT, n - 1, 0));
  STEP(do_broadcast(c, moecclInt32, LARGE_COUNT + 1, 0, 2));
  STEP(do_gather(c, moecclInt32, per, n / 2, 0));
  STEP(do_scatter(c, moecclFloat32, per, (n - 1) / 2, 1));
  return 0;
}

/* ---- Groups, streams, split -------------------------------------------------- */

/* Buffers of one call prepared here, issued inside a group or on a stream,
 * checked after. */
typedef struct {
  int kind; /* collective */
  int t, op, root;
  size_t count;
  uint64_t seed;
  unsigned char *s, *r;
  size_t sbytes, rbytes;
} pending;

static void pend_free(pending* p) {
  free(p->s - GUARD);
  free(p->r - GUARD);
}

static unsigned char* gmalloc(size_t bytes) {
  unsigned char* p = mp_xmalloc(bytes + 2 * GUARD);
  mp_fill_sentinel(p, bytes + 2 * GUARD);
  return p + GUARD;
}

/* Prepares buffers and input of a call; rop is the op to pass. */
static void pend_prepare(ctx* c, pending* p, int kind, int t, int op, size_t count, int root) {
  size_t es = TI[t].size, n = (size_t)c->n;
  memset(p, 0, sizeof(*p));
  p->kind = kind, p->t = t, p->op = op, p->count = count, p->root = root;
  p->seed = next_seed(c);
  c->ctr++;
  size_t sb = count * es, rb = count * es;
  if (kind == C_REDUCESCATTER || kind == C_SCATTER) sb *= n;
  if (kind == C_ALLGATHER || kind == C_GATHER) rb *= n;
  p->sbytes = sb, p->rbytes = rb;
  p->s = gmalloc(sb);
  p->r = gmalloc(rb);
  switch (kind) {
    case C_ALLREDUCE:
    case C_REDUCE: fill_input(p->s, t, op, p->seed, c->rank, 0, count, c->n); break;
    case C_REDUCESCATTER: fill_input(p->s, t, op, p->seed, c->rank, 0, count * n, c->n); break;
    case C_ALLGATHER:
    case C_GATHER: mp_fill(p->s, es, count, p->seed, c->rank, 0, 0); break;
    case C_BROADCAST: mp_fill(p->s, es, count, p->seed, root, 0, 0); break;
    case C_SCATTER:
      for (size_t i = 0; i < n; i++) mp_fill(p->s + i * count * es, es, count, p->seed, root, (int)i, 0);
      break;
  }
}

static moecclResult_t pend_issue(ctx* c, pending* p, moecclRedOp_t rop, moecclStream_t st) {
  moecclDataType_t dt = (moecclDataType_t)p->t;
  int me_root = c->rank == p->root;
  switch (p->kind) {
    case C_ALLREDUCE: return moecclAllReduce(p->s, p->r, p->count, dt, rop, c->comm, st);
    case C_REDUCESCATTER: return moecclReduceScatter(p->s, p->r, p->count, dt, rop, c->comm, st);
    case C_REDUCE: return moecclReduce(p->s, me_root ? p->r : NULL, p->count, dt, rop, p->root, c->comm, st);
    case C_ALLGATHER: return moecclAllGather(p->s, p->r, p->count, dt, c->comm, st);
    case C_BROADCAST: return moecclBroadcast(me_root ? p->s : NULL, p->r, p->count, dt, p->root, c->comm, st);
    case C_GATHER: return moecclGather(p->s, me_root ? p->r : NULL, p->count, dt, p->root, c->comm, st);
    case C_SCATTER: return moecclScatter(me_root ? p->s : NULL, p->r, p->count, dt, p->root, c->comm, st);
  }
  return moecclInternalError;
}

static int pend_check(ctx* c, pending* p, const char* how) {
  size_t es = TI[p->t].size;
  int me_root = c->rank == p->root;
  char w[300];
  WHAT("%s %s %s count %zu root %d (%s)", coll_name[p->kind], mp_dtypes[p->t].name, op_name[p->op], p->count,
       p->root, how);
  switch (p->kind) {
    case C_ALLREDUCE:
      if (check_reduced(c, p->r, p->t, p->op, p->seed, 0, p->count)) return 1;
      break;
    case C_REDUCESCATTER:
      if (check_reduced(c, p->r, p->t, p->op, p->seed, (size_t)c->rank * p->count, p->count)) return 1;
      break;
    case C_REDUCE:
      if (me_root ? check_reduced(c, p->r, p->t, p->op, p->seed, 0, p->count)
                  : all_sentinel(c, p->r, p->rbytes, "recvbuff of a non-root"))
        return 1;
      break;
    case C_ALLGATHER:
    case C_GATHER:
      if (p->kind == C_GATHER && !me_root) {
        if (all_sentinel(c, p->r, p->rbytes, "recvbuff of a non-root")) return 1;
        break;
      }
      for (int i = 0; i < c->n; i++) {
        snprintf(w, sizeof(w), "%s: block %d", c->what, i);
        MP_CHECK_BLOCK(w, p->r + (size_t)i * p->count * es, es, p->count, p->seed, i, 0, 0);
      }
      break;
    case C_BROADCAST:
      snprintf(w, sizeof(w), "%s: recvbuff", c->what);
      MP_CHECK_BLOCK(w, p->r, es, p->count, p->seed, p->root, 0, 0);
      break;
    case C_SCATTER:
      snprintf(w, sizeof(w), "%s: recvbuff", c->what);
      MP_CHECK_BLOCK(w, p->r, es, p->count, p->seed, p->root, c->rank, 0);
      break;
  }
  if (guards_ok(c, p->s, p->sbytes, "sendbuff") || guards_ok(c, p->r, p->rbytes, "recvbuff")) return 1;
  c->checked++;
  return 0;
}

#define NPEND 9
/* The calls of the group and stream tests. */
static void prepare_set(ctx* c, pending* p) {
  int n = c->n;
  pend_prepare(c, &p[0], C_ALLREDUCE, moecclInt32, OP_SUM, 1000, 0);
  pend_prepare(c, &p[1], C_BROADCAST, moecclFloat64, OP_SUM, 777, n - 1);
  pend_prepare(c, &p[2], C_REDUCESCATTER, moecclFloat32, OP_MAX, 100, 0);
  pend_prepare(c, &p[3], C_ALLGATHER, moecclUint8, OP_SUM, 333, 0);
  pend_prepare(c, &p[4], C_REDUCE, moecclInt64, OP_PROD, 10, 0);
  pend_prepare(c, &p[5], C_GATHER, moecclBfloat16, OP_SUM, 55, n / 2);
  pend_prepare(c, &p[6], C_SCATTER, moecclFloat16, OP_SUM, 66, (n - 1) / 2);
  pend_prepare(c, &p[7], C_ALLREDUCE, moecclFloat32, OP_PMD, 64, 0);
  pend_prepare(c, &p[8], C_REDUCE, moecclFloat8e4m3, OP_MIN, 4099, n - 1);
}

static int group_mixed(ctx* c) {
  int n = c->n, rank = c->rank;
  pending p[NPEND];
  if (make_premul(c, moecclFloat32)) return 1;
  prepare_set(c, p);
  /* AlltoAll and a send/recv ring in the same group. */
  size_t ac = 50, pc = 500;
  uint64_t aseed = next_seed(c) ^ 0xA2A, pseed = aseed ^ 0x2020;
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  unsigned char* as = mp_xmalloc(ac * 4 * (size_t)n);
  unsigned char* ar = mp_xmalloc(ac * 4 * (size_t)n);
  unsigned char* ps = mp_xmalloc(pc * 8);
  unsigned char* pr = mp_xmalloc(pc * 8);
  for (int j = 0; j < n; j++) mp_fill(as + (size_t)j * ac * 4, 4, ac, aseed, rank, j, 0);
  mp_fill(ps, 8, pc, pseed, rank, next, 0);
  MP_OK_COMM(c->comm, moecclGroupStart());
  for (int i = 0; i < NPEND; i++) {
    if (i == 3) MP_OK_COMM(c->comm, moecclAlltoAll(as, ar, ac, moecclInt32, c->comm, NULL));
    if (i == 5) {
      MP_OK_COMM(c->comm, moecclSend(ps, pc, moecclUint64, next, c->comm, NULL));
      MP_OK_COMM(c->comm, moecclRecv(pr, pc, moecclUint64, prev, c->comm, NULL));
    }
    MP_OK_COMM(c->comm, pend_issue(c, &p[i], rop_of(c, p[i].t, p[i].op), NULL));
  }
  MP_OK_COMM(c->comm, moecclGroupEnd());
  for (int i = 0; i < NPEND; i++) {
    if (pend_check(c, &p[i], "in a group")) c->failures++;
    pend_free(&p[i]);
  }
  for (int i = 0; i < n; i++)
    if (mp_check_block(__FILE__, __LINE__, "grouped alltoall", ar + (size_t)i * ac * 4, 4, ac, aseed, i, rank, 0))
      c->failures++;
  if (mp_check_block(__FILE__, __LINE__, "grouped send/recv ring", pr, 8, pc, pseed, prev, rank, 0)) c->failures++;
  free(as), free(ar), free(ps), free(pr);
  /* Nested group of two AllReduces, outer end issues. */
  pending q[2];
  pend_prepare(c, &q[0], C_ALLREDUCE, moecclUint32, OP_MIN, 123, 0);
  pend_prepare(c, &q[1], C_ALLREDUCE, moecclFloat64, OP_AVG, 321, 0);
  MP_OK_COMM(c->comm, moecclGroupStart());
  MP_OK_COMM(c->comm, moecclGroupStart());
  MP_OK_COMM(c->comm, pend_issue(c, &q[0], moecclMin, NULL));
  MP_OK_COMM(c->comm, moecclGroupEnd());
  MP_OK_COMM(c->comm, pend_issue(c, &q[1], moecclAvg, NULL));
  MP_OK_COMM(c->comm, moecclGroupEnd());
  for (int i = 0; i < 2; i++) {
    if (pend_check(c, &q[i], "in a nested group")) c->failures++;
    pend_free(&q[i]);
  }
  return drop_premul(c);
}

static int host_stream(ctx* c) {
  pending p[NPEND];
  moecclStream_t st = NULL;
  MP_OK_COMM(c->comm, moecclHostStreamCreate(&st));
  if (make_premul(c, moecclFloat32)) return 1;
  prepare_set(c, p);
  for (int i = 0; i < NPEND; i++) MP_OK_COMM(c->comm, pend_issue(c, &p[i], rop_of(c, p[i].t, p[i].op), st));
  /* A dependent pair: AllReduce into B, then AllGather of B's first elements
   * (every rank's B holds the same sum, so every block must be that sum). */
  size_t count = 2000, k = 600;
  uint64_t seed = next_seed(c);
  c->ctr++;
  int32_t* a = mp_xmalloc(count * 4);
  int32_t* b = mp_xmalloc(count * 4);
  int32_t* g = mp_xmalloc(k * 4 * (size_t)c->n);
  fill_input(a, moecclInt32, OP_SUM, seed, c->rank, 0, count, c->n);
  memset(b, 0, count * 4);
  MP_OK_COMM(c->comm, moecclAllReduce(a, b, count, moecclInt32, moecclSum, c->comm, st));
  MP_OK_COMM(c->comm, moecclAllGather(b, g, k, moecclInt32, c->comm, st));
  MP_OK_COMM(c->comm, moecclBcast(b, count, moecclInt32, c->n - 1, c->comm, st));
  moecclResult_t q = moecclHostStreamQuery(st);
  MP_CHECK(q == moecclSuccess || q == moecclInProgress, "moecclHostStreamQuery returned %d (%s)", (int)q,
           moecclGetErrorString(q));
  MP_OK_COMM(c->comm, moecclHostStreamSynchronize(st));
  for (int i = 0; i < NPEND; i++) {
    if (pend_check(c, &p[i], "on a host stream")) c->failures++;
    pend_free(&p[i]);
  }
  WHAT("host stream: AllReduce then AllGather of its result");
  if (check_reduced(c, b, moecclInt32, OP_SUM, seed, 0, count)) c->failures++;
  for (int r = 0; r < c->n; r++) {
    WHAT("host stream: AllGather block %d of the AllReduce result", r);
    if (check_reduced(c, g + (size_t)r * k, moecclInt32, OP_SUM, seed, 0, k)) c->failures++;
  }
  free(a), free(b), free(g);
  if (drop_premul(c)) return 1;
  MP_OK_COMM(c->comm, moecclHostStreamDestroy(st));
  return 0;
}

static int split_child_calls(ctx* c, int csize) {
  STEP(do_allreduce(c, moecclInt32, OP_SUM, 1000, 0));
  STEP(do_allreduce(c, moecclFloat32, OP_MAX, 77, 1));
  STEP(do_broadcast(c, moecclFloat64, 500, csize - 1, 0));
  STEP(do_broadcast(c, moecclInt8, 33, csize - 1, 2));
  STEP(do_reducescatter(c, moecclUint64, OP_PROD, 21, 0));
  if (make_premul(c, moecclFloat16)) return 1;
  STEP(do_allreduce(c, moecclFloat16, OP_PMI, 99, 0));
  STEP(do_reduce(c, moecclFloat16, OP_PMD, 99, csize - 1, 1));
  return drop_premul(c);
}

static int split_parity(ctx* c) {
  moecclComm_t child = NULL;
  MP_OK_COMM(c->comm, moecclCommSplit(c->comm, c->rank % 2, c->rank, &child, NULL));
  MP_CHECK(child != NULL, "split by parity gave no communicator");
  ctx saved = *c;
  int crank = c->rank / 2, csize = (c->n + 1 - c->rank % 2) / 2;
  int cr = -1, cn = -1;
  MP_OK_COMM(child, moecclCommUserRank(child, &cr));
  MP_OK_COMM(child, moecclCommCount(child, &cn));
  MP_CHECK(cr == crank && cn == csize, "split child: rank %d of %d, expected %d of %d", cr, cn, crank, csize);
  c->comm = child, c->rank = crank, c->n = csize;
  int rc = split_child_calls(c, csize);
  unsigned long ctr = c->ctr, checked = c->checked;
  int failures = c->failures;
  *c = saved;
  c->ctr = ctr, c->checked = checked, c->failures = failures;
  if (rc) return 1;
  STEP(do_allreduce(c, moecclInt32, OP_SUM, 100, 0)); /* the parent still works */
  MP_OK_COMM(NULL, moecclCommDestroy(child));
  return 0;
}

/* ---- Consistency -------------------------------------------------------------- */

/* The checks of one consistency case: 1 on the first difference. */
static int consistency_check(ctx* c, int t, int op, uint64_t seed, size_t count, unsigned char* r[3],
                             const unsigned char* g) {
  size_t es = TI[t].size, bytes = count * es;
  for (int k = 1; k < 3; k++)
    for (size_t i = 0; i < count; i++)
      MP_CHECK(get_u(r[k], i, es) == get_u(r[0], i, es), "%s: call %d gave 0x%llx at element %zu, the first call 0x%llx",
               c->what, k + 1, (unsigned long long)get_u(r[k], i, es), i, (unsigned long long)get_u(r[0], i, es));
  for (int p = 0; p < c->n; p++)
    for (size_t i = 0; i < count; i++)
      MP_CHECK(get_u(g + (size_t)p * bytes, i, es) == get_u(r[0], i, es),
               "%s: rank %d's result is 0x%llx at element %zu, this rank's 0x%llx", c->what, p,
               (unsigned long long)get_u(g + (size_t)p * bytes, i, es), i, (unsigned long long)get_u(r[0], i, es));
  /* and close to the exact value */
  for (size_t i = 0; i < count; i++) {
    double exact = 0, mag = 0, sc = op == OP_PMI ? scalar_f(OP_PMI) : op == OP_AVG ? 1.0 / c->n : 1.0;
    for (int p = 0; p < c->n; p++) {
      double v = dec(t, gen_real(t, seed, p, i)) * sc;
      exact += v, mag += fabs(v);
    }
    double got = dec(t, get_u(r[0], i, es));
    double tol = (c->n + 2) * unit_roundoff(t) * mag + c->n * min_subnormal(t);
    MP_CHECK(fabs(got - exact) <= tol, "%s: element %zu is %.10g, exact %.10g, tolerance %.3g", c->what, i, got, exact,
             tol);
  }
  return 0;
}

/* AllReduce of inexact values three times (the third into moecclMemAlloc
 * memory), then an AllGather of the first result: all bitwise equal. */
static int consistency(ctx* c) {
  static const int types[] = {moecclFloat32, moecclFloat64, moecclFloat16, moecclBfloat16, moecclFloat8e4m3,
                              moecclFloat8e5m2};
  static const int ops[] = {OP_SUM, OP_AVG, OP_PMI};
  size_t count = 4099;
  for (int ti = 0; ti < 6; ti++) {
    int t = types[ti];
    size_t es = TI[t].size, bytes = count * es;
    if (make_premul(c, t)) return 1;
    for (int oi = 0; oi < 3; oi++) {
      int op = ops[oi];
      uint64_t seed = next_seed(c);
      c->ctr++;
      unsigned char* s = mp_xmalloc(bytes);
      unsigned char* r[3];
      unsigned char* g = mp_xmalloc(bytes * (size_t)c->n);
      for (size_t i = 0; i < count; i++) put_u(s, i, es, gen_real(t, seed, c->rank, i));
      WHAT("consistency AllReduce %s %s count %zu", mp_dtypes[t].name, op_name[op], count);
      for (int k = 0; k < 3; k++) {
        if (k < 2)
          r[k] = mp_xmalloc(bytes);
        else
          MP_OK_COMM(c->comm, moecclMemAlloc((void**)&r[k], bytes));
        MP_OK_COMM(c->comm, moecclAllReduce(s, r[k], count, (moecclDataType_t)t, rop_of(c, t, op), c->comm, NULL));
      }
      MP_OK_COMM(c->comm, moecclAllGather(r[0], g, count, (moecclDataType_t)t, c->comm, NULL));
      if (consistency_check(c, t, op, seed, count, r, g))
        c->failures++;
      else
        c->checked++;
      free(s), free(r[0]), free(r[1]), free(g);
      MP_OK_COMM(c->comm, moecclMemFree(r[2]));
    }
    if (drop_premul(c)) return 1;
  }
  return 0;
}

/* ---- Body ------------------------------------------------------------------------ */

/* Ranks may mix in-place and out-of-place buffers in one call (NCCL decides
 * per rank from the pointers); every rank must still run the same algorithm.
 * Sizes around where the in-place variants of the schedules price
 * differently (a few hundred KiB at most). */
static int mixed_inplace(ctx* c) {
  static const size_t counts[] = {1000, 14000, 20000, 40000, 100000};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    size_t cnt = counts[i];
    float* a = mp_xmalloc(cnt * sizeof(float));
    float* b = mp_xmalloc(cnt * sizeof(float));
    for (size_t e = 0; e < cnt; e++) a[e] = (float)((c->rank + 1) * (int)(e % 7 + 1));
    float* out = c->rank % 2 ? b : a;
    MP_OK(moecclAllReduce(a, out, cnt, moecclFloat, moecclSum, c->comm, NULL));
    float want_unit = (float)(c->n * (c->n + 1) / 2);
    for (size_t e = 0; e < cnt; e++)
      MP_CHECK(out[e] == want_unit * (float)(e % 7 + 1), "mixed in place, count %zu: element %zu is %g",
               cnt, e, (double)out[e]);
    free(a);
    free(b);
  }
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  ctx* c = calloc(1, sizeof(ctx));
  MP_CHECK(c != NULL, "out of memory");
  c->comm = comm, c->rank = rank, c->n = n;
  const char* q = getenv("MP_COLL_QUICK");
  c->quick = q ? atoi(q) != 0 : 0;
  c->cap = ((size_t)LARGE_COUNT + 8 * (size_t)n + 64) * 8 + 2 * GUARD + 8 * MAX_OFF;
  for (int w = 0; w < 3; w++) {
    c->reg[0][w] = mp_xmalloc(c->cap);
    MP_OK(moecclMemAlloc((void**)&c->reg[1][w], c->cap));
  }
  dec_init();
  if (rank == 0 && codec_selftest()) return 1;
  double t0 = mp_now();
  int rc = 0;
  for (int k = 0; k < NCOLLS && !rc; k++)
    if (mp_want(coll_name[k])) {
      double t1 = mp_now();
      rc = matrix(c, k);
      if (rank == 0 && !rc) printf("  nranks %d: %-13s matrix %5.2f s\n", n, coll_name[k], mp_now() - t1);
    }
  if (!rc && mp_want("roots")) rc = every_root(c);
  if (!rc && mp_want("zero")) rc = zero_null(c);
  if (!rc && mp_want("large")) rc = large(c);
  if (!rc && mp_want("group")) rc = group_mixed(c);
  if (!rc && mp_want("stream")) rc = host_stream(c);
  if (!rc && mp_want("split")) rc = split_parity(c);
  if (!rc && mp_want("consistency")) rc = consistency(c);
  if (!rc && mp_want("nan")) rc = nan_maxmin(c);
  if (!rc && mp_want("saturate")) rc = saturate(c);
  if (!rc && mp_want("mixed")) rc = mixed_inplace(c);
  if (!rc && c->failures) rc = 1;
  if (!rc) {
    moecclResult_t async = moecclInternalError;
    MP_OK(moecclCommGetAsyncError(comm, &async));
    MP_CHECK(async == moecclSuccess, "async error %d after the collectives", (int)async);
  }
  for (int w = 0; w < 3; w++) {
    free(c->reg[0][w]);
    MP_OK(moecclMemFree(c->reg[1][w]));
  }
  if (rank == 0 && !rc)
    printf("rank 0: nranks %d: %lu calls checked in %.2f s%s\n", n, c->checked, mp_now() - t0,
           c->quick ? " (quick matrix)" : "");
  free(c);
  return rc;
}

#define Q "MP_COLL_QUICK=1"
#define AR_SUB "MP_SUBTESTS=allreduce,large,group,consistency,split"
static const mp_variant variants[] = {
    {"no-shm", {"MOECCL_SHM_DISABLE=1", Q}, "3,4"},
    /* moecclMemAlloc messages that fit a slot through the slots (by default
     * the receiver copies them once) */
    {"map-small-off", {"MOECCL_SHM_MAP_SMALL_DISABLE=1", Q}, "3"},
    {"ppn2", {"MP_RANKS_PER_NODE=2", Q}, "4,5"},
    {"ar-ring", {"MOECCL_ALLREDUCE_ALGO=ring", Q, AR_SUB}, "2,3,5"},
    {"ar-rhd", {"MOECCL_ALLREDUCE_ALGO=rhd", Q, AR_SUB}, "3,4,5"},
    {"ar-rd", {"MOECCL_ALLREDUCE_ALGO=rd", Q, AR_SUB}, "3,4,5"},
    {"ar-tree", {"MOECCL_ALLREDUCE_ALGO=tree", Q, AR_SUB}, "2,4,5"},
    {"ar-direct", {"MOECCL_ALLREDUCE_ALGO=direct", Q, AR_SUB}, "3,4"},
    {"ar-hier", {"MOECCL_ALLREDUCE_ALGO=hier", Q, AR_SUB}, "3,4"},
    {"ar-hier-ppn2", {"MOECCL_ALLREDUCE_ALGO=hier", "MP_RANKS_PER_NODE=2", Q, AR_SUB}, "4,5"},
    {"rs-ring", {"MOECCL_REDUCESCATTER_ALGO=ring", Q, "MP_SUBTESTS=reducescatter,large,split"}, "3,4"},
    {"rs-rhd", {"MOECCL_REDUCESCATTER_ALGO=rhd", Q, "MP_SUBTESTS=reducescatter,large,split"}, "3,4,5"},
    {"rs-direct", {"MOECCL_REDUCESCATTER_ALGO=direct", Q, "MP_SUBTESTS=reducescatter,large,split"}, "3,4"},
    {"ag-ring", {"MOECCL_ALLGATHER_ALGO=ring", Q, "MP_SUBTESTS=allgather,large,group,stream"}, "3,4"},
    {"ag-rhd", {"MOECCL_ALLGATHER_ALGO=rhd", Q, "MP_SUBTESTS=allgather,large,group,stream"}, "3,4,5"},
    {"ag-direct", {"MOECCL_ALLGATHER_ALGO=direct", Q, "MP_SUBTESTS=allgather,large,group,stream"}, "3,4"},
    {"bc-tree", {"MOECCL_BROADCAST_ALGO=tree", Q, "MP_SUBTESTS=broadcast,roots,large,split"}, "3,5"},
    {"bc-direct", {"MOECCL_BROADCAST_ALGO=direct", Q, "MP_SUBTESTS=broadcast,roots,large,split"}, "3,5"},
    {"red-tree", {"MOECCL_REDUCE_ALGO=tree", Q, "MP_SUBTESTS=reduce,roots,large,group"}, "3,5"},
    {"red-direct", {"MOECCL_REDUCE_ALGO=direct", Q, "MP_SUBTESTS=reduce,roots,large,group"}, "3,5"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  return mp_main(argc, argv, mp_default_ranks, body, NULL, 300, variants);
}
