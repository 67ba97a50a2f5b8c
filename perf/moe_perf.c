/*
 * moe_perf - MoE dispatch + combine (moecclMoeLayout, moecclMoeDispatch,
 * moecclMoeCombine) against what a framework does without a dedicated
 * library: permute the rows on the host into send order (one row per
 * (token, expert)), MPI_Alltoall of the counts, MPI_Alltoallv of the rows,
 * MPI_Alltoallv back, unpermute with the weighted sum on the host.  Both run
 * on the same ranks, data and buffers, interleaved rep by rep (perf_time of
 * the shared harness, perf_common.h); the expert compute is the identity
 * (the expert rows are the expert outputs).
 *
 * Router output: per rank, top-K distinct experts per token drawn from a
 * seeded Zipf-ish distribution (p(e) ~ 1/(1+rank of e)^S over a seeded
 * expert order the same on every rank, so some experts are hot).  Inputs are
 * exact: token elements are -1, 0 or 1 and slot j's gate weight is
 * 2^-(j+1), so every sum is exact in float32 and bfloat16 and both results
 * must equal x[t] * sum_j w[t][j] bit for bit; they are also compared with
 * each other.
 *
 * Settings (--moe-algo, --moe-chunks): one communicator and plan per
 * (MOECCL_MOE_ALGO, MOECCL_MOE_CHUNKS), each a series of the same timing
 * loop, so that every setting and the one MPI baseline interleave rep by
 * rep and their ratios come from one run.  See moe_perf(1).
 */
#include "perf_common.h"

#include "moe_dev.h"
#include "moeccl_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_K 64
#define MAX_LIST 16
#define MAX_SET 16

/* One moeccl setting: MOECCL_MOE_ALGO (flat, hier, or auto: unset) and
 * MOECCL_MOE_CHUNKS (chunks < 0: as the environment has it). */
struct setting {
  char algo[8];
  int chunks;
  char label[24];
};

struct cfg {
  size_t T, H;
  int E, K;
  double skew;
  uint64_t seed;
  const struct perf_dtype* dt;
};

/* One configuration's state on this rank. */
struct moe_state {
  struct cfg g;
  int layout_only;      /* the last series: moecclMoeLayout alone */
  moecclMoePlan_t plan; /* the current setting's */
  moecclMoePlan_t plans[MAX_SET];
  moecclComm_t* comms;  /* [nset] */
  int nset;
  int nlocal;
  size_t* recv_counts;  /* [nlocal] */
  int32_t* ids;         /* [T][K] */
  float* weights;       /* [T][K] */
  char *tokens, *rows, *perm, *out_moe, *out_mpi;
  size_t rows_cap, perm_cap; /* rows */
  size_t rb;            /* row bytes */
  int lib;              /* buffers from moecclMemAlloc */
  /* the baseline */
  int* owner;           /* [E] */
  int *ecnt, *eoff;     /* [E] */
  int* pos;             /* [T][K]: the slot's row in perm */
  int *scnt, *sdsp, *rcnt, *rdsp; /* [n] rows */
  MPI_Datatype row_type;
};

static struct moe_state* S_of(struct perf_ctx* c) { return c->tool; }

/* ---- data ----------------------------------------------------------------- */

static uint16_t f2bf(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t b)
{
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float get_el(const struct moe_state* S, const char* row, size_t h)
{
  if (S->g.dt->type == moecclFloat32) {
    float f;
    memcpy(&f, row + 4 * h, 4);
    return f;
  }
  uint16_t b;
  memcpy(&b, row + 2 * h, 2);
  return bf2f(b);
}
static void put_el(const struct moe_state* S, char* row, size_t h, float v)
{
  if (S->g.dt->type == moecclFloat32) {
    memcpy(row + 4 * h, &v, 4);
  } else {
    uint16_t b = f2bf(v);
    memcpy(row + 2 * h, &b, 2);
  }
}

/* Top-K distinct experts per token, Zipf-ish, and the gate weights. */
static void make_router(struct moe_state* S, int me)
{
  const struct cfg* g = &S->g;
  if (perf_moe_router(g->E, g->K, g->T, g->skew, g->seed, me, S->ids, S->weights)) {
    fprintf(stderr, "%s: out of memory for the router output\n", perf_prog);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static void make_tokens(struct moe_state* S, int me)
{
  for (size_t t = 0; t < S->g.T; t++)
    for (size_t h = 0; h < S->g.H; h++) {
      uint64_t v = perf_mix64(S->g.seed ^ ((uint64_t)me << 48) ^ (t * 0x10001ULL + h));
      put_el(S, S->tokens + t * S->rb, h, (float)((int)(v % 3) - 1));
    }
}

/* The harness's buffers, never empty: a run without tokens still has one. */
static char* alloc_buf(size_t bytes, int lib) { return perf_buf_alloc(bytes ? bytes : 64, lib); }

/* ---- the two implementations ---------------------------------------------- */

static moecclResult_t moe_call(struct perf_ctx* c)
{
  struct moe_state* S = S_of(c);
  const struct cfg* g = &S->g;
  moecclResult_t r =
      moecclMoeLayout(S->plan, S->ids, g->T, g->K, 0, S->recv_counts, NULL);
  if (perf_moe_result(c, r, "MoeLayout", 0) != moecclSuccess || S->layout_only)
    return r;
  r = moecclMoeDispatch(S->plan, S->tokens, S->rows, S->rows_cap, g->H, g->dt->type, NULL);
  if (perf_moe_result(c, r, "MoeDispatch", 0) != moecclSuccess)
    return r;
  /* identity experts: the expert rows are the expert outputs */
  r = moecclMoeCombine(S->plan, S->rows, S->rows_cap, S->weights, S->out_moe, g->H, g->dt->type,
                       NULL);
  return perf_moe_result(c, r, "MoeCombine", 0);
}

/* Host permute: slots sorted by expert (so by destination rank, then
 * expert, then token), one row per (token, expert). */
static void mpi_permute(struct moe_state* S, int n)
{
  const struct cfg* g = &S->g;
  size_t TK = g->T * (size_t)g->K;
  memset(S->ecnt, 0, sizeof(int) * (size_t)g->E);
  for (size_t i = 0; i < TK; i++)
    if (S->ids[i] >= 0)
      S->ecnt[S->ids[i]]++;
  int off = 0;
  memset(S->scnt, 0, sizeof(int) * (size_t)n);
  for (int e = 0; e < g->E; e++) {
    S->eoff[e] = off, off += S->ecnt[e];
    S->scnt[S->owner[e]] += S->ecnt[e];
  }
  for (size_t i = 0; i < TK; i++) {
    int e = S->ids[i];
    if (e < 0) {
      S->pos[i] = -1;
      continue;
    }
    int q = S->eoff[e]++;
    S->pos[i] = q;
    memcpy(S->perm + (size_t)q * S->rb, S->tokens + (i / (size_t)g->K) * S->rb, S->rb);
  }
  int d = 0;
  for (int r = 0; r < n; r++) S->sdsp[r] = d, d += S->scnt[r];
}

static void mpi_call(struct perf_ctx* c)
{
  struct moe_state* S = S_of(c);
  const struct cfg* g = &S->g;
  int n = c->n;
  mpi_permute(S, n);
  MPI_Alltoall(S->scnt, 1, MPI_INT, S->rcnt, 1, MPI_INT, MPI_COMM_WORLD);
  int d = 0;
  for (int r = 0; r < n; r++) S->rdsp[r] = d, d += S->rcnt[r];
  if ((size_t)d > S->rows_cap) {
    fprintf(stderr, "%s: rank %d: the baseline receives %d rows, room for %zu\n", perf_prog,
            c->me, d, S->rows_cap);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Alltoallv(S->perm, S->scnt, S->sdsp, S->row_type, S->rows, S->rcnt, S->rdsp, S->row_type,
                MPI_COMM_WORLD);
  /* identity experts */
  MPI_Alltoallv(S->rows, S->rcnt, S->rdsp, S->row_type, S->perm, S->scnt, S->sdsp, S->row_type,
                MPI_COMM_WORLD);
  /* host unpermute with the weighted sum, float32, rounded once */
  float acc[256];
  for (size_t t = 0; t < g->T; t++) {
    char* out = S->out_mpi + t * S->rb;
    const int* pt = S->pos + t * (size_t)g->K;
    const float* wt = S->weights + t * (size_t)g->K;
    for (size_t h0 = 0; h0 < g->H; h0 += 256) {
      size_t m = g->H - h0 < 256 ? g->H - h0 : 256;
      memset(acc, 0, sizeof acc);
      for (int j = 0; j < g->K; j++) {
        if (pt[j] < 0)
          continue;
        const char* row = S->perm + (size_t)pt[j] * S->rb;
        if (g->dt->type == moecclFloat32) {
          const float* f = (const float*)row + h0;
          for (size_t k = 0; k < m; k++) acc[k] += wt[j] * f[k];
        } else {
          const uint16_t* b = (const uint16_t*)row + h0;
          for (size_t k = 0; k < m; k++) acc[k] += wt[j] * bf2f(b[k]);
        }
      }
      if (g->dt->type == moecclFloat32) {
        memcpy((float*)out + h0, acc, m * sizeof(float));
      } else {
        uint16_t* b = (uint16_t*)out + h0;
        for (size_t k = 0; k < m; k++) b[k] = f2bf(acc[k]);
      }
    }
  }
}

/* ---- checks ------------------------------------------------------------------ */

static void fill(struct perf_ctx* c) { (void)c; /* the inputs never change */ }

static void clear_outputs(struct perf_ctx* c)
{
  struct moe_state* S = S_of(c);
  /* perf_check_once calls clear_outputs before it says whose call runs: clear both */
  memset(S->out_moe, PERF_SENTINEL, S->g.T * S->rb);
  memset(S->out_mpi, PERF_SENTINEL, S->g.T * S->rb);
}

/* Elements of out that differ from x[t] * sum_j w[t][j]. */
static long long wrong_of(const struct moe_state* S, const char* out)
{
  long long bad = 0;
  for (size_t t = 0; t < S->g.T; t++) {
    float ws = 0;
    for (int j = 0; j < S->g.K; j++)
      if (S->ids[t * (size_t)S->g.K + (size_t)j] >= 0)
        ws += S->weights[t * (size_t)S->g.K + (size_t)j];
    for (size_t h = 0; h < S->g.H; h++) {
      float want = get_el(S, S->tokens + t * S->rb, h) * ws;
      float got = get_el(S, out + t * S->rb, h);
      bad += got != want;
    }
  }
  return bad;
}

static long long verify(struct perf_ctx* c)
{
  struct moe_state* S = S_of(c);
  if (c->lib == PERF_MOECCL && S->layout_only) {
    size_t sum = 0;
    for (int i = 0; i < S->nlocal; i++) sum += S->recv_counts[i];
    return sum > S->rows_cap;
  }
  return wrong_of(S, c->lib == PERF_MPI ? S->out_mpi : S->out_moe);
}

/* Series 0 .. nset-1: each setting's layer; nset: the first's layout alone. */
static void select_series(struct perf_ctx* c, int series)
{
  struct moe_state* S = S_of(c);
  int set = series < S->nset ? series : 0;
  S->layout_only = series == S->nset;
  S->plan = S->plans[set];
  c->comm = S->comms[set];
}

/* ---- setup ---------------------------------------------------------------- */

static void state_open(struct perf_ctx* c, struct moe_state* S, const struct cfg* g, int lib)
{
  memset(S, 0, sizeof *S);
  S->g = *g;
  S->lib = lib;
  int n = c->n;
  size_t TK = g->T * (size_t)g->K;
  S->rb = g->H * g->dt->size;
  S->ids = perf_xcalloc(TK ? TK : 1, sizeof *S->ids);
  S->weights = perf_xcalloc(TK ? TK : 1, sizeof *S->weights);
  S->owner = perf_xcalloc((size_t)g->E, sizeof(int));
  S->ecnt = perf_xcalloc((size_t)g->E, sizeof(int));
  S->eoff = perf_xcalloc((size_t)g->E, sizeof(int));
  S->pos = perf_xcalloc(TK ? TK : 1, sizeof(int));
  S->scnt = perf_xcalloc((size_t)n, sizeof(int));
  S->sdsp = perf_xcalloc((size_t)n, sizeof(int));
  S->rcnt = perf_xcalloc((size_t)n, sizeof(int));
  S->rdsp = perf_xcalloc((size_t)n, sizeof(int));
  for (int e = 0; e < g->E; e++) { /* the library's default placement */
    int r = 0;
    while ((long)(r + 1) * g->E / n <= e) r++;
    S->owner[e] = r;
  }
  make_router(S, c->me);
  S->tokens = alloc_buf(g->T * S->rb, lib);
  make_tokens(S, c->me);
  S->out_moe = alloc_buf(g->T * S->rb, lib);
  S->out_mpi = alloc_buf(g->T * S->rb, lib);
  S->perm_cap = TK;
  S->perm = alloc_buf(TK * S->rb, lib);
  MPI_Type_contiguous((int)S->rb, MPI_BYTE, &S->row_type);
  MPI_Type_commit(&S->row_type);
}

/* A plan per setting, the rows this rank receives (one layout, the same
 * on every path) and their buffer. */
static int state_plan(struct perf_ctx* c, struct moe_state* S, moecclComm_t* comms, int nset)
{
  moecclResult_t r = moecclSuccess;
  S->comms = comms, S->nset = nset;
  for (int i = 0; i < nset && r == moecclSuccess; i++) {
    c->comm = comms[i];
    r = moecclMoePlanCreate(&S->plans[i], S->g.E, NULL, comms[i]);
  }
  select_series(c, 0);
  if (r == moecclSuccess)
    r = moecclMoeLocalExperts(S->plan, &S->nlocal, NULL);
  S->recv_counts = perf_xcalloc((size_t)(S->nlocal > 0 ? S->nlocal : 1), sizeof(size_t));
  if (r == moecclSuccess)
    r = moecclMoeLayout(S->plan, S->ids, S->g.T, S->g.K, 0, S->recv_counts, NULL);
  perf_moe_result(c, r, "MoePlanCreate/Layout", 0);
  int bad = r != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (bad)
    return -1;
  size_t R = 0;
  for (int i = 0; i < S->nlocal; i++) R += S->recv_counts[i];
  S->rows_cap = R; /* the baseline receives the same (token, expert) rows */
  S->rows = alloc_buf(R * S->rb, S->lib);
  return 0;
}

static void state_close(struct moe_state* S)
{
  for (int i = 0; i < MAX_SET; i++)
    if (S->plans[i])
      moecclMoePlanDestroy(S->plans[i]);
  perf_buf_free(S->tokens, S->lib);
  perf_buf_free(S->out_moe, S->lib);
  perf_buf_free(S->out_mpi, S->lib);
  perf_buf_free(S->perm, S->lib);
  if (S->rows)
    perf_buf_free(S->rows, S->lib);
  MPI_Type_free(&S->row_type);
  free(S->ids), free(S->weights), free(S->owner), free(S->ecnt), free(S->eoff), free(S->pos);
  free(S->scnt), free(S->sdsp), free(S->rcnt), free(S->rdsp), free(S->recv_counts);
}

/* Rows sent to other ranks by dispatch (moeccl: one per (token, rank);
 * the baseline: one per (token, expert)), summed over the ranks. */
static void count_rows(struct perf_ctx* c, const struct moe_state* S, double* moe_rows,
                       double* mpi_rows)
{
  const struct cfg* g = &S->g;
  double v[2] = {0, 0};
  int seen[MAX_K];
  for (size_t t = 0; t < g->T; t++) {
    int ns = 0;
    for (int j = 0; j < g->K; j++) {
      int e = S->ids[t * (size_t)g->K + (size_t)j];
      if (e < 0 || S->owner[e] == c->me)
        continue;
      v[1] += 1;
      int r = S->owner[e], dup = 0;
      for (int i = 0; i < ns; i++) dup |= seen[i] == r;
      if (!dup)
        seen[ns++] = r, v[0] += 1;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  *moe_rows = v[0], *mpi_rows = v[1];
}

/* ---- options and output ------------------------------------------------------ */

struct result {
  const char* type;
  const char* setting;
  struct cfg g;
  double layout_us, moe_us, mpi_us;
  double first_us; /* the first setting's moe_us in the same run */
  double moe_bytes, mpi_bytes; /* dispatch, crossing ranks, all ranks */
  double hot;                  /* the busiest rank's received rows / the mean */
  long long moe_wrong, mpi_wrong, cross_wrong;
};

static void usage(void)
{
  printf("Usage: %s [options]\n"
         "  -t, --tokens T      tokens per rank (default 4096)\n"
         "  -H, --hidden H      elements per row (default 1024)\n"
         "  -E, --experts E     experts, placed in contiguous blocks (default 16)\n"
         "  -k, --topk K[,K..]  experts per token, distinct (default 2,6; <= 24, bfloat16 <= 8)\n"
         "  -s, --skew S        Zipf exponent of the expert popularity (default 1.0; 0 = uniform)\n"
         "  -d, --dtype D       float, bfloat16 or all (default float)\n"
         "  -n, --iters N       calls per timed rep (default 5)\n"
         "  -w, --warmup N      untimed calls first (default 2)\n"
         "      --reps N        timed reps; medians are reported (default 7)\n"
         "  -c, --check 0|1     check both results (default 1)\n"
         "  -M                  buffers from moecclMemAlloc (MPI uses the same)\n"
         "      --moe-algo L    settings timed in one run, each vs the same MPI baseline:\n"
         "                      flat, hier, auto, hier/C, auto/C (C: MOECCL_MOE_CHUNKS)\n"
         "      --moe-chunks L  chunk counts for the hier and auto settings without /C\n"
         "      --seed N        seed of the router output and tokens\n"
         "      --json FILE     rows as JSON (rank 0)\n"
         "      --device cuda   device buffers, forked ranks, no MPI (--device cuda -h)\n"
         "  -h, --help\n",
         perf_prog);
}

static int parse_list(const char* s, int* v, int max)
{
  int k = 0;
  char* end;
  while (*s && k < max) {
    long x = strtol(s, &end, 10);
    if (end == s || x < 1 || x > MAX_K)
      return -1;
    v[k++] = (int)x;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',')
      return -1;
  }
  return k;
}

/* parse_list, for chunk counts: 0 .. MOECCL_MOE_MAX_CHUNKS (64). */
static int parse_chunks(const char* s, int* v, int max)
{
  int k = 0;
  char* end;
  while (*s && k < max) {
    long x = strtol(s, &end, 10);
    if (end == s || x < 0 || x > 64 || (*end && *end != ','))
      return -1;
    v[k++] = (int)x;
    s = *end == ',' ? end + 1 : end;
  }
  return *s ? -1 : k;
}

/* The settings of --moe-algo and --moe-chunks (NULL: the environment's):
 * each algo item, with its own /C, or once per chunk count (flat once).
 * Returns the count, or -1 for a bad list or more than MAX_SET. */
static int parse_settings(const char* algos, const char* chunks, struct setting* out)
{
  int cv[MAX_SET], nc = 0, n = 0;
  if (chunks && (nc = parse_chunks(chunks, cv, MAX_SET)) < 1)
    return -1;
  char* list = strdup(algos ? algos : "");
  int bad = 0;
  char* save = NULL;
  char* tok = algos ? strtok_r(list, ",", &save) : NULL;
  do {
    struct setting x = {"", -1, ""};
    int own = -1;
    if (tok) {
      char* slash = strchr(tok, '/');
      if (slash) {
        int one[1];
        *slash = 0;
        bad |= parse_chunks(slash + 1, one, 1) != 1;
        own = bad ? -1 : one[0];
      }
      bad |= strcmp(tok, "flat") && strcmp(tok, "hier") && strcmp(tok, "auto");
      bad |= own >= 0 && !strcmp(tok, "flat");
      snprintf(x.algo, sizeof x.algo, "%s", tok);
    }
    int flat = !strcmp(x.algo, "flat"), reps = own >= 0 || flat || !nc ? 1 : nc;
    for (int i = 0; i < reps && !bad; i++) {
      if (n == MAX_SET)
        bad = 1;
      else {
        x.chunks = own >= 0 ? own : flat || !nc ? -1 : cv[i];
        const char* a = x.algo[0] ? x.algo : "env";
        if (x.chunks < 0)
          snprintf(x.label, sizeof x.label, "%s", a);
        else
          snprintf(x.label, sizeof x.label, "%s/%d", a, x.chunks);
        out[n++] = x;
      }
    }
  } while (!bad && tok && (tok = strtok_r(NULL, ",", &save)));
  free(list);
  return bad || n == 0 ? -1 : n;
}

/* One communicator per setting, made with its MOECCL_MOE_ALGO and
 * MOECCL_MOE_CHUNKS (read where a communicator is made); the environment
 * is restored after. */
static int setting_comms(struct perf_ctx* c, const struct setting* set, int nset,
                         moecclComm_t* comms)
{
  const char* env_algo = getenv("MOECCL_MOE_ALGO");
  const char* env_chunks = getenv("MOECCL_MOE_CHUNKS");
  char* keep_algo = env_algo ? strdup(env_algo) : NULL;
  char* keep_chunks = env_chunks ? strdup(env_chunks) : NULL;
  int rc = 0;
  for (int i = 0; i < nset && !rc; i++) {
    if (set[i].algo[0])
      perf_algo_env("MOECCL_MOE_ALGO", set[i].algo);
    if (set[i].chunks >= 0) {
      char v[16];
      snprintf(v, sizeof v, "%d", set[i].chunks);
      setenv("MOECCL_MOE_CHUNKS", v, 1);
    }
    rc = perf_comm_init(c->me, c->n, &comms[i]);
    if (rc)
      for (int j = 0; j < i; j++)
        moecclCommAbort(comms[j]);
    keep_algo ? setenv("MOECCL_MOE_ALGO", keep_algo, 1) : unsetenv("MOECCL_MOE_ALGO");
    keep_chunks ? setenv("MOECCL_MOE_CHUNKS", keep_chunks, 1) : unsetenv("MOECCL_MOE_CHUNKS");
  }
  free(keep_algo), free(keep_chunks);
  return rc;
}

static int write_json(const char* path, const struct result* r, int nr, int n)
{
  FILE* f = fopen(path, "w");
  if (!f)
    return -1;
  fprintf(f, "{\n  \"tool\": \"moe_perf\",\n  \"nranks\": %d,\n  \"rows\": [\n", n);
  for (int i = 0; i < nr; i++) {
    const struct result* x = &r[i];
    fprintf(f,
            "    {\"type\": \"%s\", \"setting\": \"%s\", \"tokens\": %zu, \"hidden\": %zu, \"experts\": %d, \"topk\": %d, "
            "\"skew\": %g, \"layout_us\": %.2f, \"moeccl_us\": %.2f, \"mpi_us\": %.2f, "
            "\"speedup\": %.4f, \"vs_first\": %.4f, \"moeccl_bytes\": %.0f, \"per_expert_bytes\": %.0f, "
            "\"saved_fraction\": %.4f, \"hot_rank_load\": %.3f, \"moeccl_wrong\": %lld, "
            "\"mpi_wrong\": %lld, \"cross_wrong\": %lld}%s\n",
            x->type, x->setting, x->g.T, x->g.H, x->g.E, x->g.K, x->g.skew, x->layout_us,
            x->moe_us, x->mpi_us, x->moe_us > 0 ? x->mpi_us / x->moe_us : 0.0,
            x->moe_us > 0 ? x->first_us / x->moe_us : 0.0, x->moe_bytes, x->mpi_bytes,
            x->mpi_bytes > 0 ? 1.0 - x->moe_bytes / x->mpi_bytes : 0.0, x->hot, x->moe_wrong,
            x->mpi_wrong, x->cross_wrong, i + 1 < nr ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return fclose(f);
}

int main(int argc, char** argv)
{
  /* --device cuda: device buffers, forked ranks, no MPI (perf/moe_dev.c) */
  int device = moe_dev_select(&argc, argv);
  if (device != 0)
    return device > 0 ? moe_dev_main(argc, argv) : 2;
  MPI_Init(&argc, &argv);
  struct perf_opts o;
  memset(&o, 0, sizeof o);
  o.iters = 5, o.warmup = 2, o.reps = 7, o.check = 1;
  struct cfg base = {4096, 1024, 16, 2, 1.0, PERF_SEED, NULL};
  int ks[MAX_LIST] = {2, 6}, nk = 2;
  const struct perf_dtype* dts[2];
  int ndt = 0;
  const char* dname = "float";
  const char *set_algos = NULL, *set_chunks = NULL;
  struct setting sets[MAX_SET];
  int nset = 0;
  struct perf_ctx ctx, *c = &ctx;
  perf_init(c, "moe_perf", &o);
  static const struct option lo[] = {
      {"tokens", 1, 0, 't'}, {"hidden", 1, 0, 'H'}, {"experts", 1, 0, 'E'},
      {"topk", 1, 0, 'k'},   {"skew", 1, 0, 's'},   {"dtype", 1, 0, 'd'},
      {"iters", 1, 0, 'n'},  {"warmup", 1, 0, 'w'}, {"reps", 1, 0, 'R'},
      {"check", 1, 0, 'c'},  {"seed", 1, 0, 'S'},   {"json", 1, 0, 'J'},
      {"moe-algo", 1, 0, 'A'}, {"moe-chunks", 1, 0, 'C'},
      {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  int ch, bad = 0, iv;
  while ((ch = getopt_long(argc, argv, "t:H:E:k:s:d:n:w:c:Mh", lo, NULL)) != -1) {
    switch (ch) {
    case 't': bad |= perf_parse_size(optarg, &base.T); break;
    case 'H': bad |= perf_parse_size(optarg, &base.H) || base.H == 0; break;
    case 'E': bad |= perf_parse_int(optarg, 1, 1 << 16, &base.E); break;
    case 'k': bad |= (nk = parse_list(optarg, ks, MAX_LIST)) < 1; break;
    case 's': base.skew = atof(optarg); bad |= base.skew < 0; break;
    case 'd': dname = optarg; break;
    case 'n': bad |= perf_parse_int(optarg, 1, 1 << 20, &o.iters); break;
    case 'w': bad |= perf_parse_int(optarg, 0, 1 << 20, &o.warmup); break;
    case 'R': bad |= perf_parse_int(optarg, 1, 1 << 16, &o.reps); break;
    case 'c': bad |= perf_parse_int(optarg, 0, 1, &iv); o.check = iv; break;
    case 'M': o.memalloc = 1; break;
    case 'S': base.seed = strtoull(optarg, NULL, 0); break;
    case 'J': o.json = optarg; break;
    case 'A': set_algos = optarg; break;
    case 'C': set_chunks = optarg; break;
    case 'h':
      if (c->me == 0)
        usage();
      MPI_Finalize();
      return 0;
    default: bad = 1;
    }
  }
  for (int i = 0; i < perf_ndtypes; i++) {
    const struct perf_dtype* d = &perf_dtypes[i];
    int want = !strcmp(dname, "all") ? d->type == moecclFloat32 || d->type == moecclBfloat16
                                     : !strcmp(dname, d->name) || (d->alias && !strcmp(dname, d->alias));
    if (want && (d->type == moecclFloat32 || d->type == moecclBfloat16))
      dts[ndt++] = d;
  }
  /* the gate weights 2^-(j+1) sum exactly up to K = 24 in float32, 8 in
   * bfloat16: beyond, the exact check would report rounding as wrong */
  int kmax = 24;
  for (int i = 0; i < ndt; i++)
    if (dts[i]->type == moecclBfloat16) kmax = 8;
  for (int i = 0; i < nk; i++) bad |= ks[i] > base.E || ks[i] > kmax;
  if (!bad && (nset = parse_settings(set_algos, set_chunks, sets)) < 1) {
    if (c->me == 0)
      fprintf(stderr,
              "%s: bad --moe-algo or --moe-chunks: flat, hier, auto, hier/C or auto/C, C from "
              "0 to 64, at most %d settings in all\n",
              perf_prog, MAX_SET);
    bad = 1;
  }
  if (bad || ndt == 0 || optind < argc) {
    if (c->me == 0) {
      fprintf(stderr, "%s: bad command line (K <= E, K <= 24, or 8 with bfloat16, where the "
              "weights' sums are exact; dtype float or bfloat16)\n", perf_prog);
      usage();
    }
    MPI_Finalize();
    return 2;
  }
  moecclComm_t comms[MAX_SET];
  if (setting_comms(c, sets, nset, comms) != 0) {
    MPI_Finalize();
    return 1;
  }
  c->comm = comms[0];
  if (c->me == 0) {
    int v = 0;
    moecclGetVersion(&v);
    printf("# moe_perf: moeccl %d dispatch + combine vs host permute + MPI_Alltoall(v)\n", v);
    printf("# nranks %d, T %zu tokens/rank, H %zu, E %d (contiguous placement), skew %g, "
           "%s buffers, iters %d, warmup %d, reps %d (medians), check %d\n",
           c->n, base.T, base.H, base.E, base.skew, o.memalloc ? "moecclMemAlloc" : "malloc",
           o.iters, o.warmup, o.reps, o.check);
    printf("# settings (one communicator each, interleaved rep by rep with MPI):");
    for (int i = 0; i < nset; i++) printf(" %s", sets[i].label);
    printf("\n");
    printf("# time: us per call (layout+dispatch+combine | permute+Alltoall+2 Alltoallv+unpermute),"
           " slowest rank; MB: dispatch rows sent to other ranks, all ranks (combine sends as"
           " many back)\n");
    printf("%-8s %3s %-9s %10s %10s %10s %7s %7s %10s %10s %6s %5s %7s\n", "type", "K",
           "setting", "layout_us", "moeccl_us", "mpi_us", "speedup", "vs_1st", "moeccl_MB",
           "perexp_MB", "saved", "hot", "#wrong");
  }
  struct result res[2 * MAX_LIST * MAX_SET];
  int nres = 0, failed = 0;
  struct perf_ops ops = {fill, clear_outputs, verify, moe_call, mpi_call, select_series};
  for (int di = 0; di < ndt && !failed; di++)
    for (int ki = 0; ki < nk && !failed; ki++) {
      struct cfg g = base;
      g.K = ks[ki], g.dt = dts[di];
      struct moe_state S;
      state_open(c, &S, &g, o.memalloc);
      c->tool = &S;
      c->dt = g.dt;
      struct result r;
      memset(&r, 0, sizeof r);
      r.type = g.dt->name, r.g = g;
      r.moe_wrong = r.mpi_wrong = r.cross_wrong = -1;
      if (state_plan(c, &S, comms, nset) != 0) {
        failed = 1;
        state_close(&S);
        break;
      }
      double rows_moe, rows_mpi, lr[2] = {(double)S.rows_cap, (double)S.rows_cap};
      count_rows(c, &S, &rows_moe, &rows_mpi);
      r.moe_bytes = rows_moe * (double)S.rb, r.mpi_bytes = rows_mpi * (double)S.rb;
      MPI_Allreduce(MPI_IN_PLACE, &lr[0], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &lr[1], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      r.hot = lr[1] > 0 ? lr[0] / (lr[1] / c->n) : 0.0;
      struct result rs[MAX_SET];
      for (int i = 0; i < nset; i++) rs[i] = r, rs[i].setting = sets[i].label;
      if (o.check) {
        select_series(c, 0);
        long long mpi_wrong = perf_check_once(c, &ops, PERF_MPI);
        /* keep the baseline's output for the cross check */
        char* keep = perf_xcalloc(g.T * S.rb + 1, 1);
        memcpy(keep, S.out_mpi, g.T * S.rb);
        for (int i = 0; i < nset && !failed; i++) {
          select_series(c, i);
          long long mw = perf_check_once(c, &ops, PERF_MOECCL);
          rs[i].moe_wrong = mw, rs[i].mpi_wrong = mpi_wrong;
          if (mw < 0) {
            failed = 1;
          } else {
            long long cw = 0;
            for (size_t t = 0; t < g.T; t++)
              for (size_t h = 0; h < g.H; h++)
                cw += get_el(&S, S.out_moe + t * S.rb, h) != get_el(&S, keep + t * S.rb, h);
            MPI_Allreduce(MPI_IN_PLACE, &cw, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
            rs[i].cross_wrong = cw;
          }
        }
        free(keep);
      }
      double moe_us[MAX_SET + 1] = {0};
      long long wrong[MAX_SET + 1];
      if (!failed) {
        struct perf_opts o2 = o;
        o2.check = 0; /* checked above, both sides */
        c->o = &o2;
        failed = perf_time(c, &ops, nset + 1, 1, moe_us, &r.mpi_us, wrong) != 0;
        c->o = &o;
      }
      for (int i = 0; i < nset && o.check && !failed; i++) {
        select_series(c, i);
        clear_outputs(c);
        moe_call(c); /* each setting's result after the timed calls too */
        long long w = c->err == moecclSuccess ? wrong_of(&S, S.out_moe) : 1;
        MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        rs[i].moe_wrong += w;
      }
      for (int i = 0; i < nset && !failed; i++) {
        rs[i].moe_us = moe_us[i], rs[i].layout_us = moe_us[nset], rs[i].mpi_us = r.mpi_us;
        rs[i].first_us = moe_us[0];
        const struct result* x = &rs[i];
        if (c->me == 0) {
          long long w = x->moe_wrong < 0 ? -1 : x->moe_wrong + x->mpi_wrong + x->cross_wrong;
          char ws[24];
          if (w < 0)
            snprintf(ws, sizeof ws, "N/A");
          else
            snprintf(ws, sizeof ws, "%lld", w);
          printf("%-8s %3d %-9s %10.1f %10.1f %10.1f %6.2fx %6.2fx %10.2f %10.2f %5.1f%% %5.2f "
                 "%7s\n",
                 x->type, g.K, x->setting, x->layout_us, x->moe_us, x->mpi_us,
                 x->moe_us > 0 ? x->mpi_us / x->moe_us : 0.0,
                 x->moe_us > 0 ? x->first_us / x->moe_us : 0.0, x->moe_bytes / 1e6,
                 x->mpi_bytes / 1e6,
                 x->mpi_bytes > 0 ? 100.0 * (1.0 - x->moe_bytes / x->mpi_bytes) : 0.0, x->hot,
                 ws);
          fflush(stdout);
        }
        res[nres++] = *x;
      }
      state_close(&S);
    }
  long long wrong_total = 0;
  for (int i = 0; i < nres; i++)
    if (res[i].moe_wrong >= 0)
      wrong_total += res[i].moe_wrong + res[i].mpi_wrong + res[i].cross_wrong;
  if (c->me == 0) {
    double lg = 0;
    for (int i = 0; i < nres; i++) lg += log(res[i].mpi_us / res[i].moe_us);
    if (nres)
      printf("# geomean speedup %.2fx over %d configs; #wrong total %lld\n", exp(lg / nres), nres,
             wrong_total);
    if (o.json && write_json(o.json, res, nres, c->n) != 0)
      fprintf(stderr, "%s: cannot write %s\n", perf_prog, o.json), failed = 1;
  }
  for (int i = 0; i < nset; i++)
    if (failed)
      moecclCommAbort(comms[i]);
    else
      moecclCommDestroy(comms[i]);
  MPI_Finalize();
  return failed ? 1 : wrong_total ? 3 : 0;
}
