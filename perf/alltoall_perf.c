/*
 * a2a_perf (alltoall_perf.c) - all-to-all benchmark in the style of
 * nccl-tests' alltoall_perf, on the shared harness of perf_common.h.
 *
 * moeccl (every algorithm of -a) and the MPI baseline run on the same
 * processes and the same buffers in one run, interleaved rep by rep, so that
 * their ratios are taken under the same machine noise.  The fastest
 * single-thread copy of the bytes each rank receives (memcpy or streaming
 * stores, best rep), timed in the same run, gives the copy roofline.  With
 * --net-roofline, a full mesh of plain TCP sockets between the ranks moves
 * the same blocks, also in the same run, as the network roofline.
 *
 * What is all-to-all's own lives here: the uneven splits (--dist, whose
 * models a2a_sim shares through perf_split.c), the count layout, the data pattern and its check, the calls, -a, and the
 * tuner summary.  Launch under mpirun; see usage in main() for flags.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_common.h"
#include "perf_split.h"

#define MOE_TOKENS_MAX 4096     /* tokens routed per source rank and size */
#define ALGO_ENV "MOECCL_ALGO"

/* The options of all-to-all's own. */
struct a2a_opts {
  struct perf_dist dist;
  char dist_name[64];
  const char* algo; /* -a value; NULL lets the library choose */
  uint64_t seed;
};

/* Per-source split model, fixed for the run; only the size varies. */
struct model {
  int n;
  enum perf_dist_kind kind;
  uint64_t seed;
  double* zipf_w;     /* zipf: weight of popularity rank r (n) */
  int* rank_perm;     /* zipf: destination of popularity rank r, before rotation (n) */
  struct perf_experts x; /* moe */
  double* w;          /* scratch: weight per destination (n) */
  size_t* row;        /* scratch: one source's counts (n) */
};

/* What one size sends and receives, in elements. */
struct layout {
  size_t bytes;      /* bytes each rank sends, whole elements */
  size_t count;      /* elements each rank sends */
  size_t per_peer;   /* uniform: the count argument of moecclAlltoAll */
  size_t recv_elems; /* elements this rank receives */
  size_t *sc, *sd, *rc, *rd;  /* counts and packed displacements */
  int *isc, *isd, *irc, *ird; /* the same as int, for MPI_Alltoallv */
  int mpi_fits;               /* on every rank all of them fit an int */
  uint64_t digest;            /* hash of the whole count matrix */
};

/* The tool's state behind perf_ctx.tool. */
struct bench {
  const struct a2a_opts* a;
  struct layout L;
  char** algos;
  moecclComm_t* comms;
  int nalgos;
};

/* ---- options ------------------------------------------------------------ */

/* --dist; the header and --json show it normalised (zipf:%g, moe:E,K). */
static int parse_dist(const char* s, struct a2a_opts* o)
{
  const struct perf_dist* d = &o->dist;
  if (perf_parse_dist(s, INT_MAX, &o->dist))
    return -1;
  if (d->kind == PERF_DIST_ZIPF)
    snprintf(o->dist_name, sizeof o->dist_name, "zipf:%g", d->zipf_s);
  else if (d->kind == PERF_DIST_MOE)
    snprintf(o->dist_name, sizeof o->dist_name, "moe:%d,%d", d->moe_e, d->moe_k);
  else
    snprintf(o->dist_name, sizeof o->dist_name, "uniform");
  return 0;
}

enum { OPT_DIST = 256, OPT_SEED, OPT_NETROOF, OPT_SHMROOF };

static const struct option a2a_long_opts[] = {
    {"algo", required_argument, NULL, 'a'},       {"reps", required_argument, NULL, 'r'},
    {"dist", required_argument, NULL, OPT_DIST},  {"seed", required_argument, NULL, OPT_SEED},
    {"net-roofline", optional_argument, NULL, OPT_NETROOF},
    {"shm-roofline", no_argument, NULL, OPT_SHMROOF},
    {NULL, 0, NULL, 0}};

/* One option of all-to-all's own; returns 0, or -1 with the value rejected. */
static int a2a_apply(int c, const char* arg, struct perf_opts* po, void* state)
{
  struct a2a_opts* o = state;
  switch (c) {
  case 'a': o->algo = arg; return 0;
  case 'r': return perf_parse_int(arg, 1, 10000, &po->reps);
  case OPT_DIST: return parse_dist(arg, o);
  case OPT_NETROOF: return po->shm_roof ? -1 : perf_parse_net(arg, po);
  case OPT_SHMROOF: return po->net_roof ? -1 : (po->shm_roof = 1, 0);
  case OPT_SEED: return perf_parse_u64(arg, &o->seed);
  default: return -1;
  }
}

static const struct perf_tool a2a_tool_base = {
    .size_what = "bytes each rank sends",
    .help_mid = "  -a, --algo ALGO|all      set MOECCL_ALGO per series; all = $MOECCL_ALGO_LIST\n"
                "                           or every algorithm and auto (the tuner's choice);\n"
                "                           a comma list also works\n"
                "  -r, --reps N             reps per size, algorithms and MPI interleaved; the\n"
                "                           median is reported (default 5)\n",
    .help_late = "      --dist D             uniform | zipf:S | moe:E,K (default uniform)\n"
                 "      --seed N             seed of the uneven splits (default fixed)\n",
    .help_end = "      --net-roofline[=ADDR]\n"
                "                           time the same exchange over bare TCP sockets on\n"
                "                           ADDR (default 127.0.0.1) and show it as the roofline\n"
                "      --shm-roofline       time the same exchange through bare shared memory (one\n"
                "                           node; blocks up to 1 MiB) and show it as the roofline\n",
    .shortopts = "a:r:",
    .longopts = a2a_long_opts,
    .apply = a2a_apply,
};

/* ---- splits ------------------------------------------------------------- */

static void model_init(struct model* m, const struct a2a_opts* o, int n)
{
  memset(m, 0, sizeof *m);
  m->n = n;
  m->kind = o->dist.kind;
  m->seed = o->seed;
  m->w = perf_xcalloc((size_t)n, sizeof *m->w);
  m->row = perf_xcalloc((size_t)n, sizeof *m->row);
  if (m->kind == PERF_DIST_ZIPF) {
    m->zipf_w = perf_xcalloc((size_t)n, sizeof *m->zipf_w);
    m->rank_perm = perf_xcalloc((size_t)n, sizeof *m->rank_perm);
    for (int r = 0; r < n; r++)
      m->zipf_w[r] = pow(r + 1.0, -o->dist.zipf_s);
    perf_shuffle(m->rank_perm, n, perf_mix64(o->seed ^ 0x7a697066ULL));
  } else if (m->kind == PERF_DIST_MOE) {
    struct perf_experts* x = &m->x;
    x->e = o->dist.moe_e;
    x->k = o->dist.moe_k;
    x->cdf = perf_xcalloc((size_t)x->e, sizeof *x->cdf);
    x->rank = perf_xcalloc((size_t)x->e, sizeof *x->rank);
    x->picked = perf_xcalloc((size_t)x->k, sizeof *x->picked);
    perf_experts_place(x, n, o->seed);
  }
}

static void model_free(struct model* m)
{
  free(m->w);
  free(m->row);
  free(m->zipf_w);
  free(m->rank_perm);
  free(m->x.cdf);
  free(m->x.rank);
  free(m->x.picked);
}

/* The weights of source src's routed tokens: min(total, MOE_TOKENS_MAX)
 * of them, from a stream of (seed, src, size) alone. */
static void moe_weights(struct model* m, int src, size_t total, size_t bytes)
{
  uint64_t rng = perf_mix64(m->seed ^ perf_mix64((uint64_t)src + 1) ^ perf_mix64(bytes ^ 0x5a5aULL));
  size_t tokens = total < MOE_TOKENS_MAX ? total : MOE_TOKENS_MAX;
  perf_experts_route(&m->x, tokens, rng, m->w, m->n);
}

/* Counts (elements) that source src sends to each rank for this size; the
 * same on every rank, from (seed, src, size) alone. */
static void dist_row(struct model* m, int src, size_t total, size_t bytes)
{
  int n = m->n;
  if (m->kind == PERF_DIST_ZIPF) {
    /* Rotating by src puts each source's hot destination on another rank. */
    for (int r = 0; r < n; r++)
      m->w[m->rank_perm[(r + src) % n]] = m->zipf_w[r];
  } else if (m->kind == PERF_DIST_MOE) {
    moe_weights(m, src, total, bytes);
  } else {
    for (int j = 0; j < n; j++)
      m->w[j] = 1.0;
  }
  perf_apportion(m->w, n, total, m->row);
}

static void layout_alloc(struct layout* L, int n)
{
  memset(L, 0, sizeof *L);
  L->sc = perf_xcalloc((size_t)n, sizeof(size_t));
  L->sd = perf_xcalloc((size_t)n, sizeof(size_t));
  L->rc = perf_xcalloc((size_t)n, sizeof(size_t));
  L->rd = perf_xcalloc((size_t)n, sizeof(size_t));
  L->isc = perf_xcalloc((size_t)n, sizeof(int));
  L->isd = perf_xcalloc((size_t)n, sizeof(int));
  L->irc = perf_xcalloc((size_t)n, sizeof(int));
  L->ird = perf_xcalloc((size_t)n, sizeof(int));
}

static void layout_free(struct layout* L)
{
  free(L->sc); free(L->sd); free(L->rc); free(L->rd);
  free(L->isc); free(L->isd); free(L->irc); free(L->ird);
}

static void fill_counts(struct layout* L, struct model* m, int me, size_t ts)
{
  int n = m->n;
  if (m->kind == PERF_DIST_UNIFORM) {
    L->per_peer = L->bytes / (ts * (size_t)n);
    L->count = L->per_peer * (size_t)n;
    for (int j = 0; j < n; j++)
      L->sc[j] = L->rc[j] = L->per_peer;
    L->digest = perf_mix64(L->per_peer);
    return;
  }
  L->count = L->bytes / ts;
  L->digest = 0;
  /* Every rank builds the whole matrix: row src gives our recvcounts[src];
   * the digest lets the ranks prove they built the same one. */
  for (int src = 0; src < n; src++) {
    dist_row(m, src, L->count, L->count * ts);
    L->rc[src] = m->row[me];
    if (src == me)
      memcpy(L->sc, m->row, (size_t)n * sizeof *L->sc);
    for (int j = 0; j < n; j++)
      L->digest = perf_mix64(L->digest ^ (m->row[j] + 0x9e3779b97f4a7c15ULL * (uint64_t)(j + 1)));
  }
}

static int fits_int(size_t v) { return v <= (size_t)INT_MAX; }

/* Packed displacements (prefix sums) and their int copies for MPI. */
static void fill_displs(struct layout* L, int n)
{
  size_t s = 0, r = 0;
  L->mpi_fits = fits_int(L->per_peer);
  for (int j = 0; j < n; j++) {
    L->sd[j] = s;
    L->rd[j] = r;
    s += L->sc[j];
    r += L->rc[j];
    L->mpi_fits &= fits_int(L->sc[j]) && fits_int(L->rc[j]) && fits_int(L->sd[j]) && fits_int(L->rd[j]);
    L->isc[j] = (int)L->sc[j];
    L->isd[j] = (int)L->sd[j];
    L->irc[j] = (int)L->rc[j];
    L->ird[j] = (int)L->rd[j];
  }
  L->recv_elems = r;
}

static void layout_build(struct layout* L, struct model* m, int me, size_t ts, size_t req)
{
  L->bytes = req;
  fill_counts(L, m, me, ts);
  L->bytes = L->count * ts;
  fill_displs(L, m->n);
}

/* ---- data check --------------------------------------------------------- */

/* Element k of the block from src to dst; depends on all three, so a block
 * from the wrong peer or at the wrong offset does not pass. */
static uint64_t block_key(int src, int dst)
{
  return perf_mix64(PERF_SEED ^ ((uint64_t)(uint32_t)src << 32 | (uint32_t)dst));
}

static uint64_t elem_value(uint64_t key, size_t k) { return perf_mix64(key + k); }

static void fill_send(struct perf_ctx* c)
{
  const struct layout* L = &((struct bench*)c->tool)->L;
  size_t ts = c->dt->size;
  for (int j = 0; j < c->n; j++) {
    uint64_t key = block_key(c->me, j);
    char* p = c->B.send + L->sd[j] * ts;
    for (size_t k = 0; k < L->sc[j]; k++)
      perf_put_bits(p + k * ts, ts, elem_value(key, k));
  }
}

static long long verify_recv(struct perf_ctx* c)
{
  const struct layout* L = &((struct bench*)c->tool)->L;
  size_t ts = c->dt->size;
  uint64_t mask = perf_bits_mask(ts);
  long long wrong = 0;
  for (int i = 0; i < c->n; i++) {
    uint64_t key = block_key(i, c->me);
    const char* p = c->B.recv + L->rd[i] * ts;
    for (size_t k = 0; k < L->rc[i]; k++)
      wrong += perf_get_bits(p + k * ts, ts) != (elem_value(key, k) & mask);
  }
  /* Bytes past the last block must not be touched: each element-sized
   * piece of the guard that lost the sentinel counts as one wrong element. */
  return wrong + perf_untouched_wrong(c, c->B.recv + L->recv_elems * ts, PERF_GUARD_BYTES);
}

/* ---- the calls ---------------------------------------------------------- */

static moecclResult_t moe_call(struct perf_ctx* c)
{
  const struct bench* b = c->tool;
  const struct layout* L = &b->L;
  int uniform = b->a->dist.kind == PERF_DIST_UNIFORM;
  moecclResult_t r;
  if (uniform)
    r = moecclAlltoAll(c->B.send, c->B.recv, L->per_peer, c->dt->type, c->comm, NULL);
  else
    r = moecclAlltoAllv(c->B.send, L->sc, L->sd, c->B.recv, L->rc, L->rd, c->dt->type, c->comm,
                        NULL);
  return perf_moe_result(c, r, uniform ? "AlltoAll" : "AlltoAllv", L->bytes);
}

static void mpi_call(struct perf_ctx* c)
{
  const struct bench* b = c->tool;
  const struct layout* L = &b->L;
  MPI_Datatype t = perf_mpi_move_type(c->dt->type);
  if (b->a->dist.kind == PERF_DIST_UNIFORM)
    MPI_Alltoall(c->B.send, (int)L->per_peer, t, c->B.recv, (int)L->per_peer, t, MPI_COMM_WORLD);
  else
    MPI_Alltoallv(c->B.send, L->isc, L->isd, t, c->B.recv, L->irc, L->ird, t, MPI_COMM_WORLD);
}

/* Series a of -a: its communicator and its MOECCL_ALGO. */
static void select_algo(struct perf_ctx* c, int a)
{
  struct bench* b = c->tool;
  c->comm = b->comms[a];
  perf_algo_env(ALGO_ENV, b->algos[a]);
}

static const struct perf_ops a2a_ops = {fill_send, NULL, verify_recv, moe_call, mpi_call,
                                        select_algo};

/* ---- output ------------------------------------------------------------- */

static void print_header(const struct perf_ctx* c, const struct a2a_opts* a, char** algos,
                         int nalgos, const struct perf_table* t)
{
  const struct perf_opts* o = c->o;
  perf_header_top(c);
  if (c->me == 0) {
    printf("# type %s  dist %s  memory %s  stream NULL  algo:", c->dt->name, a->dist_name,
           o->memalloc ? "moecclMemAlloc" : "malloc");
    for (int i = 0; i < nalgos; i++)
      printf("%s%s", i ? "," : " ", algos[i] ? algos[i] : "(library choice)");
    printf("\n");
    if (o->shm_roof && c->net.on) {
      printf("# shm roofline: bare shared memory, copy into the peer's inbox slot, sequence word, "
             "copy out; polling");
      if (c->net.yield)
        printf(" (yielding: %d ranks on %d CPUs)", c->net.local, c->net.cpus);
      printf("; blocks up to %zu bytes\n", c->net.slot);
    } else if (o->shm_roof) {
      printf("# shm roofline: skipped, the %d ranks are not all on one node\n", c->n);
    }
    if (o->net_roof && c->net.on) {
      printf("# net roofline: bare TCP on %s, one socket per pair, TCP_NODELAY, busy polling",
             o->net_addr);
      if (c->net.yield)
        printf(" (yielding: %d ranks on %d CPUs)", c->net.local, c->net.cpus);
      printf(", + own block memcpy\n");
    }
    else if (o->net_roof)
      printf("# net roofline: skipped, the socket mesh on %s failed (see stderr)\n", o->net_addr);
    if (!(o->shm_roof && c->net.on) && !(o->net_roof && c->net.on))
      printf("# copy roofline: every rank at once copies the bytes it receives; the fastest rep of "
             "%s\n", perf_roofline_kernels());
  }
  perf_header_columns(c, t);
}

/* With an "auto" series among forced ones: per size, the tuner's time against
 * the fastest forced algorithm's (ratio > 1: the tuner lost that much). */
static void print_tuner(const struct perf_rows* rows)
{
  int header = 0;
  for (size_t i = 0; i < rows->len; i++) {
    const struct perf_row* a = &rows->v[i];
    if (strcmp(a->label[1], "auto") != 0)
      continue;
    const struct perf_row* best = NULL;
    for (size_t j = 0; j < rows->len; j++) {
      const struct perf_row* r = &rows->v[j];
      if (r->bytes == a->bytes && strcmp(r->label[1], "auto") != 0 &&
          (!best || r->moe_us < best->moe_us))
        best = r;
    }
    if (!best)
      continue;
    if (!header)
      printf("# tuner: %12s %10s %10s %-8s %6s\n", "size", "auto(us)", "best(us)", "best", "ratio");
    header = 1;
    printf("# tuner: %12zu %10.1f %10.1f %-8s %6.2f\n", a->bytes, a->moe_us, best->moe_us,
           best->label[1], best->moe_us > 0 ? a->moe_us / best->moe_us : 1.0);
  }
}

/* ---- driving ------------------------------------------------------------ */

static void agree_on_layout(const struct layout* L)
{
  uint64_t lo = L->digest, hi = L->digest;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (lo != hi) {
    fprintf(stderr, "a2a_perf: ranks computed different splits (seed or libm differs)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* All rows of one size.  Returns -1 when a moeccl call failed. */
static int bench_size(struct perf_ctx* c, struct model* m, size_t req, const struct perf_table* t,
                      struct perf_rows* rows)
{
  struct bench* b = c->tool;
  struct layout* L = &b->L;
  struct perf_row r;
  size_t ts = c->dt->size;
  int nalgos = b->nalgos;
  memset(&r, 0, sizeof r);
  layout_build(L, m, c->me, ts, req);
  agree_on_layout(L);
  int mpi_on = c->o->mpi_baseline;
  if (mpi_on)
    MPI_Allreduce(&L->mpi_fits, &mpi_on, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  unsigned long long recv_bytes = L->recv_elems * ts, recv_max = recv_bytes;
  MPI_Allreduce(MPI_IN_PLACE, &recv_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  c->bytes = L->bytes;
  c->count = L->count;
  c->send_bytes = L->bytes;
  c->recv_bytes = (size_t)recv_bytes;
  r.bytes = L->bytes;
  r.count = L->count;
  r.extra = (size_t)recv_max;
  r.type = c->dt->name;
  snprintf(r.label[0], sizeof r.label[0], "%s", b->a->dist_name);
  r.mpi_wrong = mpi_on && c->o->check ? perf_check_once(c, &a2a_ops, PERF_MPI) : -1;
  r.roof_us = perf_roofline_us(c, (size_t)recv_bytes);
  if (c->net.on) {
    for (int j = 0; j < c->n; j++) {
      c->net.soff[j] = L->sd[j] * ts;
      c->net.slen[j] = L->sc[j] * ts;
      c->net.roff[j] = L->rd[j] * ts;
      c->net.rlen[j] = L->rc[j] * ts;
    }
  }
  r.net_us = perf_net_roofline_us(c, &a2a_ops, L->bytes);
  struct perf_row* out = perf_xcalloc((size_t)nalgos, sizeof *out);
  double* moe_us = perf_xcalloc((size_t)nalgos, sizeof *moe_us);
  long long* wrong = perf_xcalloc((size_t)nalgos, sizeof *wrong);
  for (int a = 0; a < nalgos; a++) {
    out[a] = r;
    perf_algo_env(ALGO_ENV, b->algos[a]);
    perf_algo_label(ALGO_ENV, out[a].label[1], sizeof out[a].label[1], b->algos[a]);
  }
  int rc = perf_time(c, &a2a_ops, nalgos, mpi_on, moe_us, &r.mpi_us, wrong);
  for (int a = 0; a < nalgos && rc == 0; a++) {
    out[a].moe_us = moe_us[a];
    out[a].mpi_us = r.mpi_us;
    out[a].moe_wrong = wrong[a];
    if (c->me == 0)
      perf_print_row(&out[a], t);
    perf_rows_push(rows, &out[a]);
  }
  free(out);
  free(moe_us);
  free(wrong);
  return rc;
}

/* Largest send and receive footprint over all sizes, so one pair of buffers
 * serves the whole run. */
static void footprint(const struct perf_opts* o, struct model* m, int me, size_t* send,
                      size_t* recv, size_t* block)
{
  struct layout L;
  layout_alloc(&L, m->n);
  *send = *recv = *block = 0;
  for (size_t s = o->minbytes; s; s = perf_next_size(o, s)) {
    layout_build(&L, m, me, o->dt->size, s);
    for (int j = 0; j < m->n; j++)
      if (L.sc[j] * o->dt->size > *block)
        *block = L.sc[j] * o->dt->size;
    if (L.bytes > *send)
      *send = L.bytes;
    if (L.recv_elems * o->dt->size > *recv)
      *recv = L.recv_elems * o->dt->size;
  }
  layout_free(&L);
}

static int run(struct perf_ctx* c, const struct a2a_opts* a)
{
  struct bench* b = c->tool;
  const struct perf_opts* o = c->o;
  struct model m;
  struct perf_rows rows = {NULL, 0, 0};
  size_t send_max, recv_max, block_max;
  int failed = 0, me = c->me, n = c->n;
  struct perf_table t = {2, {"dist", "algo"}, {12, 10}, {"dist", "algo"},
                         (double)(n - 1) / n, NULL, "recv_bytes_max", 0, !o->shm_roof,
                         o->net_roof ? "net" : o->shm_roof ? "shm" : NULL};
  c->dt = o->dt;
  model_init(&m, a, n);
  layout_alloc(&b->L, n);
  footprint(o, &m, me, &send_max, &recv_max, &block_max);
  perf_bufs_alloc(&c->B, send_max, recv_max, recv_max + PERF_GUARD_BYTES, o->memalloc);
  if (o->net_roof)
    perf_net_open(c);
  if (o->shm_roof) { /* the largest block of any rank: every inbox slot takes it */
    MPI_Allreduce(MPI_IN_PLACE, &block_max, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
    perf_shm_open(c, block_max < ((size_t)1 << 20) ? block_max : (size_t)1 << 20);
  }
  print_header(c, a, b->algos, b->nalgos, &t);
  for (size_t s = o->minbytes; s && !failed; s = perf_next_size(o, s))
    failed = bench_size(c, &m, s, &t, &rows) != 0;
  long long wrong = 0;
  if (me == 0) {
    print_tuner(&rows);
    wrong = perf_print_summary(&rows, &t, failed);
    if (o->json && perf_write_json(o->json, &rows, &t, n))
      wrong = wrong ? wrong : 1;
  }
  MPI_Bcast(&wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  free(rows.v);
  if (o->net_roof)
    perf_net_free(c);
  if (o->shm_roof)
    perf_shm_free(c);
  perf_bufs_free(&c->B);
  layout_free(&b->L);
  model_free(&m);
  return failed ? -1 : wrong ? 1 : 0;
}

int main(int argc, char** argv)
{
  struct perf_opts o;
  struct a2a_opts a;
  struct perf_ctx c;
  struct bench b;
  struct perf_tool tool = a2a_tool_base;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.dist.kind = PERF_DIST_UNIFORM;
  snprintf(a.dist_name, sizeof a.dist_name, "uniform");
  a.seed = PERF_SEED;
  tool.state = &a;
  MPI_Init(&argc, &argv);
  perf_init(&c, "a2a_perf", &o);
  int pr = perf_parse_opts(argc, argv, c.me, &tool, &o);
  if (pr) {
    MPI_Finalize();
    return pr == 1 ? 0 : 2;
  }
  const char* env = getenv("MOECCL_ALGO_LIST");
  b.a = &a;
  b.nalgos = perf_algo_list(
      a.algo, env && *env ? env : "direct,pairwise,bruck,hier2,hier3,rail,hier2p,railp,hier3p,auto",
      &b.algos);
  if (b.nalgos == 0) {
    if (c.me == 0)
      fprintf(stderr, "a2a_perf: -a names no algorithm (see -h)\n");
    free(b.algos);
    MPI_Finalize();
    return 2;
  }
  b.comms = perf_xcalloc((size_t)b.nalgos, sizeof *b.comms);
  c.tool = &b;
  int rc = 1;
  if (perf_comms_init(ALGO_ENV, b.algos, b.nalgos, c.me, c.n, b.comms) == 0) {
    rc = run(&c, &a);
    if (perf_comms_close(b.comms, b.nalgos, rc < 0, c.me))
      rc = 1;
  }
  for (int i = 0; i < b.nalgos; i++)
    free(b.algos[i]);
  free(b.algos);
  free(b.comms);
  MPI_Finalize();
  return rc ? 1 : 0;
}
