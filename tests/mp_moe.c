/*
 * mp_moe.c - the MoE dispatch and combine (moeccl_moe.h) on 1..5 forked
 * ranks, written from the header's semantics, not from the implementation.
 *
 * Every case: each rank draws its own tokens, top-k ids (with -1s), gate
 * weights and output gradients; an AllGather gives every rank everyone's;
 * each rank then computes by brute force, over the global (rank, token,
 * slot) order, which slots each expert keeps under the capacity, the
 * expert-major rows it must receive, and the combine, the dispatch
 * backward and the combine backward (rows and gate gradients) of expert
 * outputs it makes from its expected rows.  Values are small integers
 * and weights halves, so every sum is exact in every row type and
 * results are compared bit for bit.
 *
 *   random     random top-k with -1s and repeated ids, several layouts on
 *              one plan (growing and shrinking: memory reused)
 *   zero       a rank with no tokens
 *   one        every token to expert 0
 *   all        K = E
 *   capacity   capacity drops (drop counts checked)
 *   placement  a scattered expert table, and ranks holding no expert
 *   stream     every call on a host stream
 *   large      ~2,000 tokens of 128-256 elements per rank (blocks past the
 *              shared-memory eager size), with and without a capacity
 *   order      the float32 combine of inexact values, ranks late by random
 *              delays: the same bits every call
 *   tuner      (variant moe-tuner) the tuner picks hier where node dedup
 *              halves the rows across nodes, flat where it saves nothing
 *   badargs    bad input is moecclInvalidArgument with a text, nothing sent;
 *              a layout in a group or with disagreeing ranks is refused;
 *              data calls in a group
 *
 * Each in float32, bfloat16 and float16.  Re-run with simulated nodes of 2 ranks
 * (the network transport carries part of every call), without shared
 * memory, and with the layout's exchanges under bruck and hier2.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moeccl_moe.h"
#include "mp_harness.h"

#define GUARD_ROWS 2

/* ---- values ------------------------------------------------------------ */

/* float16 of a value exact in it (the tests' small integers and halves). */
static uint16_t half_of(double v) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  if (v == 0) return sign;
  int e;
  double m = frexp(fabs(v), &e); /* |v| = 2m * 2^(e-1), 2m in [1, 2) */
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((2 * m - 1) * 1024));
}

static double half_value(uint16_t h) {
  int ex = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = ex ? ldexp(1024 + man, ex - 25) : ldexp(man, -24);
  return h & 0x8000 ? -v : v;
}

static void put(void* buf, size_t i, double v, moecclDataType_t t) {
  float f = (float)v;
  uint16_t h;
  if (t == moecclFloat32) {
    memcpy((char*)buf + 4 * i, &f, 4);
    return;
  }
  if (t == moecclFloat16) {
    h = half_of(v);
  } else { /* bfloat16: the values used are exact in it */
    uint32_t b;
    memcpy(&b, &f, 4);
    h = (uint16_t)(b >> 16);
  }
  memcpy((char*)buf + 2 * i, &h, 2);
}

static double get(const void* buf, size_t i, moecclDataType_t t) {
  float f;
  if (t == moecclFloat32) {
    memcpy(&f, (const char*)buf + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, (const char*)buf + 2 * i, 2);
  if (t == moecclFloat16) return half_value(h);
  uint32_t b = (uint32_t)h << 16;
  memcpy(&f, &b, 4);
  return f;
}

static double mult(int e) { return (double[]){1, -1, 2, -2}[e % 4]; }   /* expert outputs */
static double mult2(int e) { return (double[]){2, 1, -1, 0.5}[e % 4]; } /* their gradients */

/* ---- one case ------------------------------------------------------------ */

typedef struct {
  const char* name;
  int E, K;
  size_t capacity;
  size_t hidden;
  moecclDataType_t type;
  int placement; /* 0: NULL (blocks); 1: scattered table */
  int stream;
  int layouts; /* layouts made on one plan, the last one checked */
  enum { GEN_RANDOM, GEN_ZERO_RANK, GEN_ONE, GEN_ALL, GEN_LARGE } gen;
} mcase;

typedef struct {
  moecclComm_t comm;
  int rank, n;
  uint64_t seed;
  /* global inputs after the AllGather, padded to tmax tokens per rank */
  size_t tmax;
  size_t* T;    /* [n] */
  int32_t* ids; /* [n][tmax][K] */
  double* tok;  /* [n][tmax][H] */
  double* w;    /* [n][tmax][K] */
  double* g;    /* [n][tmax][H] */
  int* kept;    /* [n][tmax][K] */
  int* owner;   /* [E] */
} world;

static int owner_of(const mcase* c, int n, int e) {
  if (c->placement) return (e * 3 + 1) % n;
  int r = 0;
  while ((long)(r + 1) * c->E / n <= e) r++;
  return r;
}

/* This rank's tokens, ids, weights and gradients for the case. */
static size_t draw(const mcase* c, world* wd, mp_rng* rng, int32_t** ids, double** tok, double** w,
                   double** g) {
  size_t T = (size_t)mp_rng_below(rng, 40) + (wd->rank % 2 ? 0 : 25);
  if (c->gen == GEN_ZERO_RANK && wd->rank == wd->n - 1) T = 0;
  if (c->gen == GEN_LARGE) T = 1500 + (size_t)mp_rng_below(rng, 500); /* rendezvous-sized blocks */
  size_t K = (size_t)c->K, H = c->hidden;
  *ids = mp_xmalloc(T * K * sizeof(int32_t) + 1);
  *tok = mp_xmalloc(T * H * sizeof(double) + 1);
  *w = mp_xmalloc(T * K * sizeof(double) + 1);
  *g = mp_xmalloc(T * H * sizeof(double) + 1);
  for (size_t t = 0; t < T; t++) {
    for (size_t j = 0; j < K; j++) {
      int32_t e = (int32_t)mp_rng_below(rng, (uint64_t)c->E);
      if ((c->gen == GEN_RANDOM || c->gen == GEN_LARGE) && mp_rng_below(rng, 5) == 0) e = -1;
      if (c->gen == GEN_ONE) e = j == 0 ? 0 : -1;
      if (c->gen == GEN_ALL) e = (int32_t)((t + j) % (size_t)c->E);
      (*ids)[t * K + j] = e;
      (*w)[t * K + j] = (double[]){0.5, 1, 2, -0.5}[mp_rng_below(rng, 4)];
    }
    for (size_t h = 0; h < H; h++) {
      (*tok)[t * H + h] = (double)((int)mp_rng_below(rng, 9) - 4);
      (*g)[t * H + h] = (double)((int)mp_rng_below(rng, 9) - 4);
    }
  }
  return T;
}

/* AllGather of n blocks of `count` doubles (or int32 given as bytes). */
static int gather(world* wd, const void* mine, size_t bytes, void* all) {
  MP_OK_COMM(wd->comm, moecclAllGather(mine, all, bytes, moecclUint8, wd->comm, NULL));
  return 0;
}

static int share(const mcase* c, world* wd, size_t T, const int32_t* ids, const double* tok,
                 const double* w, const double* g) {
  size_t n = (size_t)wd->n, K = (size_t)c->K, H = c->hidden;
  uint64_t t64 = T, *all = mp_xmalloc(n * 8);
  if (gather(wd, &t64, 8, all)) return 1;
  wd->T = mp_xmalloc(n * sizeof(size_t));
  wd->tmax = 1;
  for (size_t r = 0; r < n; r++) {
    wd->T[r] = (size_t)all[r];
    if (wd->T[r] > wd->tmax) wd->tmax = wd->T[r];
  }
  free(all);
  size_t tm = wd->tmax;
  int32_t* pid = calloc(tm * K, sizeof(int32_t));
  double *ptok = calloc(tm * H, 8), *pw = calloc(tm * K, 8), *pg = calloc(tm * H, 8);
  memcpy(pid, ids, T * K * sizeof(int32_t));
  memcpy(ptok, tok, T * H * 8), memcpy(pw, w, T * K * 8), memcpy(pg, g, T * H * 8);
  wd->ids = mp_xmalloc(n * tm * K * sizeof(int32_t));
  wd->tok = mp_xmalloc(n * tm * H * 8);
  wd->w = mp_xmalloc(n * tm * K * 8);
  wd->g = mp_xmalloc(n * tm * H * 8);
  int rc = gather(wd, pid, tm * K * sizeof(int32_t), wd->ids) ||
           gather(wd, ptok, tm * H * 8, wd->tok) || gather(wd, pw, tm * K * 8, wd->w) ||
           gather(wd, pg, tm * H * 8, wd->g);
  free(pid), free(ptok), free(pw), free(pg);
  return rc;
}

#define IDS(wd, K, s, t, j) (wd)->ids[((size_t)(s) * (wd)->tmax + (t)) * (K) + (j)]
#define KEPT(wd, K, s, t, j) (wd)->kept[((size_t)(s) * (wd)->tmax + (t)) * (K) + (j)]

/* Which slots the experts keep: the first `capacity` in (rank, token, slot) order. */
static void brute_kept(const mcase* c, world* wd) {
  size_t K = (size_t)c->K;
  wd->kept = calloc((size_t)wd->n * wd->tmax * K, sizeof(int));
  size_t* used = calloc((size_t)c->E, sizeof(size_t));
  for (int s = 0; s < wd->n; s++)
    for (size_t t = 0; t < wd->T[s]; t++)
      for (size_t j = 0; j < K; j++) {
        int e = IDS(wd, K, s, t, j);
        if (e < 0) continue;
        if (c->capacity && used[e] >= c->capacity) continue;
        used[e]++;
        KEPT(wd, K, s, t, j) = 1;
      }
  free(used);
}

/* The expected expert-major rows of this rank: (source, token, slot, expert) per row. */
typedef struct {
  int s, e;
  size_t t, j;
} rowid;

static size_t brute_rows(const mcase* c, world* wd, rowid* rows, size_t* counts) {
  size_t K = (size_t)c->K, R = 0;
  int li = 0;
  for (int e = 0; e < c->E; e++) {
    if (wd->owner[e] != wd->rank) continue;
    size_t before = R;
    for (int s = 0; s < wd->n; s++)
      for (size_t t = 0; t < wd->T[s]; t++)
        for (size_t j = 0; j < K; j++)
          if (IDS(wd, K, s, t, j) == e && KEPT(wd, K, s, t, j)) {
            if (rows) rows[R] = (rowid){s, e, t, j};
            R++;
          }
    counts[li++] = R - before;
  }
  return R;
}

/* Row buffers: malloc, or with MP_MOE_MEMALLOC=1 moecclMemAlloc memory (the
 * gathered dispatch reads the senders' tokens straight from it). */
static int use_memalloc(void) {
  const char* e = getenv("MP_MOE_MEMALLOC");
  return e && *e == '1';
}

static void* rows_alloc(size_t rows, size_t rb) {
  size_t bytes = (rows + GUARD_ROWS) * rb + 1;
  void* p = NULL;
  if (use_memalloc()) {
    if (moecclMemAlloc(&p, bytes) != moecclSuccess) p = NULL;
  } else {
    p = mp_xmalloc(bytes);
  }
  if (!p) {
    fprintf(stderr, "rows_alloc: no memory for %zu bytes\n", bytes);
    abort();
  }
  mp_fill_sentinel(p, (rows + GUARD_ROWS) * rb);
  return p;
}

static void rows_free(void* p) {
  if (use_memalloc()) moecclMemFree(p);
  else free(p);
}

/* Runs every call of the case and checks each result. */
static int check_case(const mcase* c, world* wd, moecclMoePlan_t plan, size_t T, size_t R,
                      const rowid* rows, moecclStream_t st) {
  size_t K = (size_t)c->K, H = c->hidden, es = c->type == moecclFloat32 ? 4 : 2, rb = H * es;
  size_t me = (size_t)wd->rank, tm = wd->tmax;
  const double *tok = wd->tok + me * tm * H, *g = wd->g + me * tm * H;
  void *in = rows_alloc(T, rb), *xin = rows_alloc(R, rb), *xout = rows_alloc(R, rb);
  void *out = rows_alloc(T, rb), *gx = rows_alloc(R, rb), *gt = rows_alloc(T, rb);
  void *gin = rows_alloc(T, rb), *gxo = rows_alloc(R, rb);
  float* w = mp_xmalloc(T * K * 4 + 4);
  float* gw = mp_xmalloc(T * K * 4 + 4);
  for (size_t i = 0; i < T * H; i++) put(in, i, tok[i], c->type), put(gin, i, g[i], c->type);
  for (size_t i = 0; i < T * K; i++) w[i] = (float)wd->w[me * tm * K + i], gw[i] = NAN;
  /* expert outputs and their gradients, from the expected rows */
  for (size_t x = 0; x < R; x++) {
    const double* src = wd->tok + ((size_t)rows[x].s * tm + rows[x].t) * H;
    for (size_t h = 0; h < H; h++) {
      put(xout, x * H + h, src[h] * mult(rows[x].e), c->type);
      put(gx, x * H + h, src[h] * mult2(rows[x].e), c->type);
    }
  }
  MP_OK_COMM(wd->comm, moecclMoeDispatch(plan, in, xin, R, H, c->type, st));
  MP_OK_COMM(wd->comm, moecclMoeCombine(plan, xout, R, w, out, H, c->type, st));
  MP_OK_COMM(wd->comm, moecclMoeDispatchBackward(plan, gx, R, gt, H, c->type, st));
  MP_OK_COMM(wd->comm, moecclMoeCombineBackward(plan, gin, w, xout, gxo, R, gw, H, c->type, st));
  if (st) MP_OK_COMM(wd->comm, moecclHostStreamSynchronize(st));
  for (size_t x = 0; x < R; x++) {
    const rowid* r = &rows[x];
    size_t base = (size_t)r->s * tm + r->t;
    double wt = wd->w[base * K + r->j];
    for (size_t h = 0; h < H; h++) {
      double want = wd->tok[base * H + h], got = get(xin, x * H + h, c->type);
      MP_CHECK(
          got == want,
          "%s: dispatch row %zu (rank %d token %zu slot %zu expert %d) element %zu is %g, want %g",
          c->name, x, r->s, r->t, r->j, r->e, h, got, want);
      want = wt * wd->g[base * H + h], got = get(gxo, x * H + h, c->type);
      MP_CHECK(got == want, "%s: combine backward row %zu element %zu is %g, want %g", c->name, x,
               h, got, want);
    }
  }
  MP_CHECK_SENTINEL("dispatch: rows past R", (char*)xin + R * rb, GUARD_ROWS * rb);
  MP_CHECK_SENTINEL("combine backward: rows past R", (char*)gxo + R * rb, GUARD_ROWS * rb);
  for (size_t t = 0; t < T; t++) {
    double sw = 0, s2 = 0, dotg = 0;
    for (size_t h = 0; h < H; h++) dotg += g[t * H + h] * tok[t * H + h];
    for (size_t j = 0; j < K; j++) {
      int e = IDS(wd, K, me, t, j);
      int kept = e >= 0 && KEPT(wd, K, me, t, j);
      if (kept) sw += w[t * K + j] * mult(e), s2 += mult2(e);
      double want = kept ? mult(e) * dotg : 0;
      MP_CHECK(gw[t * K + j] == (float)want, "%s: gate gradient [%zu][%zu] is %g, want %g", c->name,
               t, j, (double)gw[t * K + j], want);
    }
    for (size_t h = 0; h < H; h++) {
      double want = tok[t * H + h] * sw, got = get(out, t * H + h, c->type);
      MP_CHECK(got == want, "%s: combine token %zu element %zu is %g, want %g", c->name, t, h, got,
               want);
      want = tok[t * H + h] * s2, got = get(gt, t * H + h, c->type);
      MP_CHECK(got == want, "%s: dispatch backward token %zu element %zu is %g, want %g", c->name,
               t, h, got, want);
    }
  }
  MP_CHECK_SENTINEL("combine: tokens past T", (char*)out + T * rb, GUARD_ROWS * rb);
  rows_free(in), rows_free(xin), rows_free(xout), rows_free(out);
  rows_free(gx), rows_free(gt), rows_free(gin), rows_free(gxo);
  free(w), free(gw);
  return 0;
}

static void world_free(world* wd) {
  free(wd->T), free(wd->ids), free(wd->tok), free(wd->w), free(wd->g), free(wd->kept);
  wd->T = NULL, wd->ids = NULL, wd->tok = NULL, wd->w = NULL, wd->g = NULL, wd->kept = NULL;
}

static int run_case(moecclComm_t comm, int rank, int n, const mcase* c, uint64_t seed) {
  world wd = {.comm = comm, .rank = rank, .n = n, .seed = seed};
  wd.owner = mp_xmalloc(sizeof(int) * (size_t)c->E);
  for (int e = 0; e < c->E; e++) wd.owner[e] = owner_of(c, n, e);
  moecclMoePlan_t plan;
  MP_OK_COMM(comm, moecclMoePlanCreate(&plan, c->E, c->placement ? wd.owner : NULL, comm));
  int nlocal = -1, local[64];
  MP_OK_COMM(comm, moecclMoeLocalExperts(plan, &nlocal, local));
  for (int e = 0, i = 0; e < c->E; e++)
    if (wd.owner[e] == rank) {
      MP_CHECK(i < nlocal && local[i] == e, "%s: local expert %d is %d, want %d", c->name, i,
               i < nlocal ? local[i] : -1, e);
      i++;
    }
  moecclStream_t st = NULL;
  if (c->stream) MP_OK_COMM(comm, moecclHostStreamCreate(&st));
  mp_rng rng;
  mp_rng_seed(&rng, seed * 131 + (uint64_t)rank);
  for (int it = 0; it < c->layouts; it++) {
    int32_t* ids;
    double *tok, *w, *g;
    size_t T = draw(c, &wd, &rng, &ids, &tok, &w, &g);
    size_t counts[64], want[64], dropped = 12345;
    MP_OK_COMM(comm, moecclMoeLayout(plan, ids, T, c->K, c->capacity, counts, &dropped));
    if (share(c, &wd, T, ids, tok, w, g)) return 1;
    brute_kept(c, &wd);
    size_t R = brute_rows(c, &wd, NULL, want);
    rowid* rows = mp_xmalloc((R + 1) * sizeof(rowid));
    brute_rows(c, &wd, rows, want);
    for (int i = 0; i < nlocal; i++)
      MP_CHECK(counts[i] == want[i], "%s: local expert %d receives %zu rows, want %zu", c->name,
               local[i], counts[i], want[i]);
    size_t drops = 0;
    for (size_t t = 0; t < T; t++)
      for (size_t j = 0; j < (size_t)c->K; j++)
        drops += ids[t * (size_t)c->K + j] >= 0 && !KEPT(&wd, (size_t)c->K, rank, t, j);
    MP_CHECK(dropped == drops, "%s: %zu dropped, want %zu", c->name, dropped, drops);
    if (c->capacity == 0) MP_CHECK(drops == 0, "%s: drops without a capacity", c->name);
    if (it == c->layouts - 1 && check_case(c, &wd, plan, T, R, rows, st)) return 1;
    free(rows), free(ids), free(tok), free(w), free(g);
    world_free(&wd);
  }
  if (st) MP_OK_COMM(comm, moecclHostStreamDestroy(st));
  MP_OK_COMM(comm, moecclMoePlanDestroy(plan));
  free(wd.owner);
  return 0;
}

/* ---- summation order ---------------------------------------------------- */

static float unit_float(mp_rng* rng) {
  return (float)((double)(mp_rng_next(rng) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* The float32 combine of values whose sums round differently in another
 * order, repeated with every rank late by a random 0-3 ms before each
 * call (so the peers' rows arrive in another order each time): the result
 * must be the same bit for bit every time (moecclMoe(3): a fixed order,
 * independent of timing). */
static int order(moecclComm_t comm, int rank, int n) {
  const int E = 2 * n, K = 3, reps = 12;
  const size_t H = 40, T = 200, rb = H * sizeof(float);
  mp_rng rng;
  mp_rng_seed(&rng, 7777 + (uint64_t)rank);
  int32_t* ids = mp_xmalloc(sizeof(int32_t) * T * K);
  float* w = mp_xmalloc(sizeof(float) * T * K);
  float* tok = rows_alloc(T, rb);
  for (size_t t = 0; t < T; t++) {
    int32_t first = (int32_t)mp_rng_below(&rng, (uint64_t)E);
    for (int j = 0; j < K; j++) { /* distinct experts, spread over the ranks */
      ids[t * K + j] = (first + j * (E / K + 1)) % E;
      w[t * K + j] = unit_float(&rng);
    }
    for (size_t h = 0; h < H; h++) tok[t * H + h] = unit_float(&rng);
  }
  moecclMoePlan_t plan;
  MP_OK_COMM(comm, moecclMoePlanCreate(&plan, E, NULL, comm));
  size_t counts[64], R = 0;
  MP_OK_COMM(comm, moecclMoeLayout(plan, ids, T, K, 0, counts, NULL));
  for (int i = 0; i < 2; i++) R += counts[i];
  float* rows = rows_alloc(R, rb);
  float* out = rows_alloc(T, rb);
  float* first = mp_xmalloc(T * rb);
  MP_OK_COMM(comm, moecclMoeDispatch(plan, tok, rows, R, H, moecclFloat32, NULL));
  for (size_t i = 0; i < R * H; i++) rows[i] = rows[i] * 1.1f + unit_float(&rng) * 1e-3f;
  for (int it = 0; it < reps; it++) {
    usleep((useconds_t)mp_rng_below(&rng, 3000));
    MP_OK_COMM(comm, moecclMoeCombine(plan, rows, R, w, out, H, moecclFloat32, NULL));
    if (it == 0) memcpy(first, out, T * rb);
    else
      MP_CHECK(memcmp(first, out, T * rb) == 0,
               "order: combine %d on rank %d differs from the first (the sums' order changed)", it,
               rank);
  }
  MP_OK_COMM(comm, moecclMoePlanDestroy(plan));
  rows_free(rows), rows_free(out), rows_free(tok);
  free(first), free(ids), free(w);
  return 0;
}

/* ---- the tuner's path ---------------------------------------------------- */

/* The path rank 0 logged for its last dispatch (MOECCL_DEBUG_FILE of the
 * variant, %p expanded): 'h', 'f', or 0 when none was logged. */
static int logged_path(int* loopback) {
  char path[256], line[512];
  snprintf(path, sizeof(path), "/tmp/mp_moe_tuner.%d.log", (int)getpid());
  fflush(NULL); /* the library's log file is this process's stdio */
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  int got = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strstr(line, "share one machine: the network is priced as loopback")) *loopback = 1;
    const char* at = strstr(line, "moecclMoeDispatch of ");
    if (!at || !(at = strstr(at, "rows: "))) continue;
    got = strncmp(at + 6, "hier", 4) == 0 ? 'h' : strncmp(at + 6, "flat", 4) == 0 ? 'f' : '?';
  }
  fclose(f);
  return got;
}

/* On 2 simulated nodes of 2 ranks (variant moe-tuner: ALGO logs into a
 * file): every token to one expert on each rank of the other node, where
 * the hierarchical path sends half the rows across, must run hier; every
 * token to one expert on the other node's rank that is not this rank's
 * forwarder, where it only adds the forwarding, must run flat.  Rank 0
 * must also have logged that the network is priced as loopback. */
static int tuner(moecclComm_t comm, int rank, int n) {
  const int E = 2 * n;
  const size_t T = 512, H = 1024, rb = H * sizeof(float);
  int32_t* ids = mp_xmalloc(sizeof(int32_t) * T * 2);
  float* tok = mp_xmalloc(T * rb);
  float* rows = mp_xmalloc(2 * T * rb * (size_t)n);
  for (size_t i = 0; i < T * H; i++) tok[i] = (float)(i % 7);
  int other = (rank / 2 + 1) % 2; /* the other node: ranks 2*other, 2*other+1 */
  moecclMoePlan_t plan;
  MP_OK_COMM(comm, moecclMoePlanCreate(&plan, E, NULL, comm));
  for (int pass = 0; pass < 2; pass++) {
    int K = pass == 0 ? 2 : 1;
    for (size_t t = 0; t < T; t++)
      for (int j = 0; j < K; j++) /* rank q holds experts 2q, 2q+1 */
        ids[t * (size_t)K + j] =
            pass == 0 ? 2 * (2 * other + j) + (int)(t % 2) : 2 * (2 * other + 1 - rank % 2);
    size_t counts[2];
    MP_OK_COMM(comm, moecclMoeLayout(plan, ids, T, K, 0, counts, NULL));
    MP_OK_COMM(comm, moecclMoeDispatch(plan, tok, rows, 2 * T * (size_t)n, H, moecclFloat32, NULL));
    if (rank != 0) continue;
    int loopback = 0, got = logged_path(&loopback), want = pass == 0 ? 'h' : 'f';
    MP_CHECK(loopback, "tuner: rank 0 did not log that the simulated nodes' network is loopback");
    MP_CHECK(got == want, "tuner: pass %d ran %s, want %s (rank 0's ALGO log)", pass,
             got == 'h'   ? "hier"
             : got == 'f' ? "flat"
                          : "nothing logged",
             want == 'h' ? "hier" : "flat");
  }
  MP_OK_COMM(comm, moecclMoePlanDestroy(plan));
  char path[256]; /* every rank's log, and the harness's (rank 0) */
  snprintf(path, sizeof(path), "/tmp/mp_moe_tuner.%d.log", (int)getpid());
  unlink(path);
  snprintf(path, sizeof(path), "/tmp/mp_moe_tuner.%d.log", (int)getppid());
  if (rank == 0) unlink(path);
  free(ids), free(tok), free(rows);
  return 0;
}

/* ---- bad input ------------------------------------------------------------- */

#define EXPECT_BAD(call)                                                                           \
  do {                                                                                             \
    MP_EXPECT_RES(comm, moecclInvalidArgument, call);                                              \
    MP_CHECK(strstr(mp_last_error_text(comm), "moecclMoe") != NULL,                                \
             "%s: the error text does not name the function: %s", #call,                           \
             mp_last_error_text(comm));                                                            \
  } while (0)

/* Every rank holds one expert and every token goes to all of them, so every
 * rank has tokens and rows and every check fails on every rank alike. */
static int badargs(moecclComm_t comm, int rank, int n) {
  int E = n, K = n, bad[64];
  size_t T = 5, H = 3, R = T * (size_t)n, rb = H * 4;
  moecclMoePlan_t plan = NULL;
  for (int e = 0; e < E; e++) bad[e] = e;
  bad[E - 1] = -1;
  EXPECT_BAD(moecclMoePlanCreate(&plan, E, bad, comm));
  bad[E - 1] = n;
  EXPECT_BAD(moecclMoePlanCreate(&plan, E, bad, comm));
  EXPECT_BAD(moecclMoePlanCreate(&plan, 0, NULL, comm));
  EXPECT_BAD(moecclMoePlanCreate(NULL, E, NULL, comm));
  MP_OK_COMM(comm, moecclMoePlanCreate(&plan, E, NULL, comm));
  int32_t* ids = mp_xmalloc(T * (size_t)K * sizeof(int32_t));
  for (size_t i = 0; i < T * (size_t)K; i++) ids[i] = (int32_t)(i % (size_t)K);
  ids[3] = E;
  EXPECT_BAD(moecclMoeLayout(plan, ids, T, K, 0, NULL, NULL));
  ids[3] = -2;
  EXPECT_BAD(moecclMoeLayout(plan, ids, T, K, 0, NULL, NULL));
  ids[3] = 3 % K;
  EXPECT_BAD(moecclMoeLayout(plan, ids, T, 0, 0, NULL, NULL));
  EXPECT_BAD(moecclMoeLayout(plan, NULL, T, K, 0, NULL, NULL));
  EXPECT_BAD(moecclMoeLayout(NULL, ids, T, K, 0, NULL, NULL));
  MP_EXPECT_RES(comm, moecclInvalidUsage,
                moecclMoeDispatch(plan, ids, ids, R, H, moecclFloat32, NULL));
  MP_OK_COMM(comm, moecclGroupStart());
  MP_EXPECT_RES(comm, moecclInvalidUsage, moecclMoeLayout(plan, ids, T, K, 0, NULL, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  if (n > 1) /* ranks that disagree on the capacity all hear of it */
    MP_EXPECT_RES(comm, moecclInvalidUsage,
                  moecclMoeLayout(plan, ids, T, K, (size_t)rank, NULL, NULL));
  size_t counts[64];
  MP_OK_COMM(comm, moecclMoeLayout(plan, ids, T, K, 0, counts, NULL));
  MP_CHECK(counts[0] == R, "badargs: %zu rows, want %zu", counts[0], R);
  float *in = mp_xmalloc(T * rb), *x = mp_xmalloc(R * rb), *out = mp_xmalloc(T * rb);
  float *w = mp_xmalloc(T * (size_t)K * 4), *gw = mp_xmalloc(T * (size_t)K * 4);
  for (size_t i = 0; i < T * H; i++) in[i] = (float)(rank * 100 + (int)i);
  for (size_t i = 0; i < T * (size_t)K; i++) w[i] = 1;
  EXPECT_BAD(moecclMoeDispatch(plan, NULL, x, R, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeDispatch(plan, in, NULL, R, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeDispatch(plan, in, x, R - 1, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeDispatch(plan, in, x, R, 0, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeDispatch(plan, in, x, R, H, (moecclDataType_t)99, NULL));
  EXPECT_BAD(moecclMoeDispatch(plan, in, in, R, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeDispatch(plan, in, x, R, H, moecclFloat32, (moecclStream_t)in));
  EXPECT_BAD(moecclMoeDispatch(NULL, in, x, R, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeCombine(plan, x, R, NULL, out, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeCombine(plan, x, R, w, out, H, moecclInt32, NULL));
  EXPECT_BAD(moecclMoeCombine(plan, x, R - 1, w, out, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeDispatchBackward(plan, x, R, NULL, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeCombineBackward(plan, in, w, NULL, x, R, gw, H, moecclFloat32, NULL));
  EXPECT_BAD(moecclMoeCombineBackward(plan, in, w, x, x, R, NULL, H, moecclFloat32, NULL));
  /* Issue 25, item 1: a hidden whose rows reach memory no buffer of the
   * caller's can cover (2^36 floats a row from small heap buffers) is
   * refused naming the buffer, not copied from until it faults. */
  size_t huge = (size_t)1 << 36;
  static const char* const first[] = {"tokens", "expertRows", "gradExpertRows"};
  for (int i = 0; i < 3; i++) {
    if (i == 0) EXPECT_BAD(moecclMoeDispatch(plan, in, x, R, huge, moecclFloat32, NULL));
    if (i == 1) EXPECT_BAD(moecclMoeCombine(plan, x, R, w, out, huge, moecclFloat32, NULL));
    if (i == 2) EXPECT_BAD(moecclMoeDispatchBackward(plan, x, R, out, huge, moecclFloat32, NULL));
    const char* text = mp_last_error_text(comm);
#ifndef __SANITIZE_ADDRESS__
    MP_CHECK(strstr(text, first[i]) &&
                 (strstr(text, "not mapped") || strstr(text, "address space")),
             "hidden 2^36: the text does not name %s and why: %s", first[i], text);
#else
    /* AddressSanitizer's shadow maps readable memory far above the heap,
     * where such a span may end: refused (above), maybe for another
     * buffer or as an overlap */
    (void)text, (void)first;
#endif
  }
  /* nothing was sent: a good round trip still works (in one group) */
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclMoeDispatch(plan, in, x, R, H, moecclFloat32, NULL));
  MP_OK_COMM(comm, moecclMoeDispatchBackward(plan, x, R, out, H, moecclFloat32, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  for (size_t t = 0; t < T; t++)
    for (size_t h = 0; h < H; h++)
      MP_CHECK(out[t * H + h] == (float)K * in[t * H + h],
               "badargs: round trip token %zu is %g, want %g", t, (double)out[t * H + h],
               (double)K * in[t * H + h]);
  moecclResult_t async = moecclInternalError;
  MP_OK_COMM(comm, moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "badargs: async error %d", (int)async);
  MP_OK_COMM(comm, moecclMoePlanDestroy(plan));
  EXPECT_BAD(moecclMoePlanDestroy(NULL));
  free(ids), free(in), free(x), free(out), free(w), free(gw);
  return 0;
}

/* ---- body -------------------------------------------------------------------- */

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  static const moecclDataType_t types[] = {moecclFloat32, moecclBfloat16, moecclFloat16};
  static const char* const type_names[] = {"float32", "bfloat16", "float16"};
  double t0 = mp_now();
  uint64_t seed = 1000 + (uint64_t)n * 17;
  for (int ti = 0; ti < 3; ti++) {
    moecclDataType_t ty = types[ti];
    const mcase cases[] = {
        {"random", 2 * n, 2, 0, 7, ty, 0, 0, 3, GEN_RANDOM},
        {"random", 4, 3, 0, 64, ty, 0, 0, 2, GEN_RANDOM},
        {"zero", 2 * n, 2, 0, 5, ty, 0, 0, 1, GEN_ZERO_RANK},
        {"one", 2 * n, 2, 0, 3, ty, 0, 0, 1, GEN_ONE},
        {"all", 4, 4, 0, 6, ty, 0, 0, 1, GEN_ALL},
        {"capacity", 4, 2, 3, 5, ty, 0, 0, 2, GEN_RANDOM},
        {"capacity", 2 * n, 3, 1, 4, ty, 1, 0, 1, GEN_ALL},
        {"placement", 3, 2, 0, 9, ty, 1, 0, 1, GEN_RANDOM},
        {"placement", 2, 1, 0, 1, ty, 0, 0, 1, GEN_RANDOM},
        {"stream", 2 * n, 2, 0, 33, ty, 0, 1, 2, GEN_RANDOM},
        {"stream", 4, 2, 2, 8, ty, 1, 1, 1, GEN_ZERO_RANK},
        {"large", 8, 2, 0, 256, ty, 0, 0, 1, GEN_LARGE},
        {"large", 8, 3, 300, 128, ty, 1, 1, 1, GEN_LARGE},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
      if (!mp_want(cases[k].name)) continue;
      if (run_case(comm, rank, n, &cases[k], seed++)) {
        mp_failf(__FILE__, __LINE__, "case %zu (%s, %s) failed", k, cases[k].name, type_names[ti]);
        return 1;
      }
    }
  }
  if (getenv("MP_MOE_TUNER")) return n == 4 ? tuner(comm, rank, n) : 0;
  if (mp_want("order") && n > 2 && order(comm, rank, n)) return 1;
  if (mp_want("badargs") && badargs(comm, rank, n)) return 1;
  moecclResult_t async = moecclInternalError;
  MP_OK(moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "async error %d after the MoE calls", (int)async);
  if (rank == 0) printf("rank 0: nranks %d: MoE cases checked in %.2f s\n", n, mp_now() - t0);
  return 0;
}

static const mp_variant variants[] = {
    {"ppn2", {"MP_RANKS_PER_NODE=2"}, "2,3,4,5"},
    {"no-shm", {"MOECCL_SHM_DISABLE=1"}, "3"},
    /* the layout's count and route exchanges under other all-to-all algorithms */
    {"bruck", {"MOECCL_ALGO=bruck"}, "3,5"},
    {"hier2-ppn2", {"MOECCL_ALGO=hier2", "MP_RANKS_PER_NODE=2"}, "4"},
    /* the hierarchical dispatch/combine (node dedup) on simulated nodes:
     * regular, uneven (5 = 2+2+1, 5 = 3+2) and one rank per node */
    /* moecclMemAlloc buffers: gathered dispatch messages picked from the
     * senders' mapped tokens; also when shm must fall back to CMA */
    {"memalloc", {"MP_MOE_MEMALLOC=1"}, "2,4"},
    {"memalloc-ppn2", {"MP_MOE_MEMALLOC=1", "MP_RANKS_PER_NODE=2"}, "4"},
    {"memalloc-nomap", {"MP_MOE_MEMALLOC=1", "MOECCL_SHM_MAP_DISABLE=1"}, "3"},
    {"memalloc-slots", {"MP_MOE_MEMALLOC=1", "MOECCL_SHM_MAP_SMALL_DISABLE=1"}, "2,3"},
    {"moe-hier-ppn2", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=2"}, "4,5"},
    {"moe-hier-ppn3", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=3"}, "5"},
    {"moe-hier-ppn1", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=1"}, "3"},
    /* the hierarchical path pipelined in chunks: the same bits as flat */
    {"moe-hier-c1", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=2", "MOECCL_MOE_CHUNKS=1"}, "4"},
    {"moe-hier-c2", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=2", "MOECCL_MOE_CHUNKS=2"}, "4,5"},
    {"moe-hier-c3", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=3", "MOECCL_MOE_CHUNKS=3"}, "5"},
    {"moe-hier-c8", {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=2", "MOECCL_MOE_CHUNKS=8"}, "4"},
    {"moe-hier-c8-ppn1",
     {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=1", "MOECCL_MOE_CHUNKS=8"},
     "3"},
    {"moe-hier-c3-no-shm",
     {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=2", "MOECCL_MOE_CHUNKS=3", "MOECCL_SHM_DISABLE=1"},
     "4"},
    /* the tuner's choice between the paths, read from rank 0's ALGO log */
    {"moe-tuner",
     {"MP_MOE_TUNER=1", "MP_RANKS_PER_NODE=2", "MOECCL_DEBUG=INFO", "MOECCL_DEBUG_SUBSYS=ALGO",
      "MOECCL_DEBUG_FILE=/tmp/mp_moe_tuner.%p.log", "MOECCL_TUNE_PROBE=none"},
     "4"},
    {"moe-hier-no-shm",
     {"MOECCL_MOE_ALGO=hier", "MP_RANKS_PER_NODE=2", "MOECCL_SHM_DISABLE=1"},
     "4"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  static const int ranks[] = {1, 2, 3, 4, 5, 0};
  return mp_main(argc, argv, ranks, body, NULL, 120, variants);
}
