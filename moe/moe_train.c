/* moe_train: trains the MoE model of moe/model.h on R ranks, expert x data
 * parallel, through moeccl's dispatch and combine (include/moeccl_moe.h).
 *
 * R = P * D ranks: `moe_train -n R` forks R local ranks (no MPI), or
 * `mpirun -np R moe_train` (MPI only launches the ranks and carries the
 * unique id; built in when configure found MPI).  Ranks [d*P, (d+1)*P) form
 * EP group d, which holds every expert, E/P per rank; rank r takes rows
 * [r*N/R, (r+1)*N/R) of the global batch.  Per layer each rank routes its own
 * tokens, the router statistics are all-reduced over all ranks, dispatch and
 * combine run on the EP communicator, the experts on this rank's E/P experts'
 * rows.  After the backward, the expert gradients are all-reduced over the D
 * replicas of each expert, the router gradients over all ranks; Adam runs on
 * every rank identically.  The result does not depend on the layout beyond
 * float32 summation order.  --chunks C splits each rank's tokens into C
 * chunks with a plan each and pipelines them: chunk k's experts run while
 * chunk k+1's dispatch and chunk k-1's combine run on a host stream (and
 * the same mirrored in the backward).
 *
 * Without --load, a synthetic task: a teacher MoE of the same shape (seed
 * + 1) makes the targets of N random inputs (seed + 2; one batch reused
 * every step, or new inputs every step with --fresh) and the student (seed)
 * learns them; the baseline is the loss of x_L = x on the same batch.
 * With --load DIR, the weights and one batch come from .npy files (every
 * rank reads them all and takes its rows and experts) and every step uses
 * that batch.  --dump DIR: rank 0 writes the first step's output, loss and
 * every gradient (full shapes, gathered from the ranks), before the
 * optimizer step. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef MOE_TRAIN_MPI
#include <mpi.h>
#endif

#include "adam.h"
#include "backend.h"
#include "model.h"
#include "moeccl.h"
#include "moeccl_moe.h"
#include "npy.h"

typedef struct train_options {
  moe_config_t cfg;
  int tokens, steps, threads;
  float lr;
  unsigned long seed;
  const char *load, *dump, *json;
  int fresh;                    /* a new synthetic batch every step */
  int ranks, ep, dp, chunks;    /* -n, --ep, --dp (0: not given), --chunks */
  int set_layers, set_experts, set_hidden, set_ffn, set_tokens; /* given on the command line */
} train_options_t;

static void usage(FILE* out) {
  fprintf(out, "usage: moe_train [options]\n"
               "  --layers L    layers (2)              --experts E   experts per layer (8)\n"
               "  --topk K      experts per token (2)   --hidden H    model width (64)\n"
               "  --ffn F       expert width (128)      --tokens N    tokens per step (256)\n"
               "  --steps S     steps (200)             --lr LR       Adam learning rate (0.003)\n"
               "  --aux A       load-balancing loss weight (0.01)\n"
               "  --seed S      student seed; the teacher is S+1, the inputs S+2 (1)\n"
               "  --fresh       synthetic task: new random inputs every step (default: one\n"
               "                batch of N random inputs, reused every step as with --load)\n"
               "  --threads T   BLAS threads (1, or OPENBLAS_NUM_THREADS)\n"
               "  --load DIR    wg{l}.npy w1_{l}.npy w3_{l}.npy w2_{l}.npy x.npy target.npy;\n"
               "                shapes not given as flags are taken from the files\n"
               "  --dump DIR    first step's out.npy grad_x.npy grad_wg{l}.npy grad_w1_{l}.npy\n"
               "                grad_w3_{l}.npy grad_w2_{l}.npy loss.txt\n"
               "  --json FILE   per-step loss, tokens/s and time split as JSON\n"
               "  -n R          fork R local ranks (default: P * D, or mpirun's -np)\n"
               "  --ep P        expert-parallel ranks per group (default R / D)\n"
               "  --dp D        data-parallel groups (default R / P); R = P * D, P divides E\n"
               "  --chunks C    split each rank's tokens into C chunks per layer, each with\n"
               "                its own plan; a chunk's experts run while the next chunk's\n"
               "                dispatch and the last one's combine are queued on a host\n"
               "                stream (1)\n"
               "  under MPI:    mpirun -np R moe_train [--ep P --dp D] ...\n");
}

static int parse_int(const char* name, const char* text, int min, int* out) {
  char* end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || *end || v < min || v > 1 << 30) {
    fprintf(stderr, "moe_train: --%s %s: want an integer >= %d\n", name, text, min);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_float(const char* name, const char* text, float* out) {
  char* end;
  errno = 0;
  float v = strtof(text, &end);
  if (errno || *end || !(v >= 0.0f)) {
    fprintf(stderr, "moe_train: --%s %s: want a number >= 0\n", name, text);
    return -1;
  }
  *out = v;
  return 0;
}

/* 0, 1 when help was asked, -1 on a bad argument. */
static int parse_options(int argc, char** argv, train_options_t* o) {
  enum {
    O_LAYERS = 256,
    O_EXPERTS,
    O_TOPK,
    O_HIDDEN,
    O_FFN,
    O_TOKENS,
    O_STEPS,
    O_LR,
    O_AUX,
    O_SEED,
    O_THREADS,
    O_LOAD,
    O_DUMP,
    O_JSON,
    O_EP,
    O_DP,
    O_CHUNKS,
    O_FRESH
  };
  static const struct option longopts[] = {
      {"layers", 1, 0, O_LAYERS},   {"experts", 1, 0, O_EXPERTS},
      {"topk", 1, 0, O_TOPK},       {"hidden", 1, 0, O_HIDDEN},
      {"ffn", 1, 0, O_FFN},         {"tokens", 1, 0, O_TOKENS},
      {"steps", 1, 0, O_STEPS},     {"lr", 1, 0, O_LR},
      {"aux", 1, 0, O_AUX},         {"seed", 1, 0, O_SEED},
      {"threads", 1, 0, O_THREADS}, {"load", 1, 0, O_LOAD},
      {"dump", 1, 0, O_DUMP},       {"json", 1, 0, O_JSON},
      {"ep", 1, 0, O_EP},           {"dp", 1, 0, O_DP},
      {"chunks", 1, 0, O_CHUNKS},   {"fresh", 0, 0, O_FRESH},
      {"help", 0, 0, 'h'},          {0, 0, 0, 0}};
  *o = (train_options_t){
      .cfg = {2, 8, 2, 64, 128, 0.01f}, .tokens = 256, .steps = 200, .lr = 0.003f, .seed = 1,
      .chunks = 1};
  int c, seed = 0, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, "hn:", longopts, NULL)) != -1) {
    switch (c) {
      case O_LAYERS:
        rc = parse_int("layers", optarg, 1, &o->cfg.layers);
        o->set_layers = 1;
        break;
      case O_EXPERTS:
        rc = parse_int("experts", optarg, 1, &o->cfg.experts);
        o->set_experts = 1;
        break;
      case O_TOPK: rc = parse_int("topk", optarg, 1, &o->cfg.topk); break;
      case O_HIDDEN:
        rc = parse_int("hidden", optarg, 1, &o->cfg.hidden);
        o->set_hidden = 1;
        break;
      case O_FFN:
        rc = parse_int("ffn", optarg, 1, &o->cfg.ffn);
        o->set_ffn = 1;
        break;
      case O_TOKENS:
        rc = parse_int("tokens", optarg, 1, &o->tokens);
        o->set_tokens = 1;
        break;
      case O_STEPS: rc = parse_int("steps", optarg, 0, &o->steps); break;
      case O_LR: rc = parse_float("lr", optarg, &o->lr); break;
      case O_AUX: rc = parse_float("aux", optarg, &o->cfg.aux); break;
      case O_SEED:
        rc = parse_int("seed", optarg, 0, &seed);
        o->seed = (unsigned long)seed;
        break;
      case O_THREADS: rc = parse_int("threads", optarg, 1, &o->threads); break;
      case O_LOAD: o->load = optarg; break;
      case O_DUMP: o->dump = optarg; break;
      case O_JSON: o->json = optarg; break;
      case O_FRESH: o->fresh = 1; break;
      case O_EP: rc = parse_int("ep", optarg, 1, &o->ep); break;
      case O_DP: rc = parse_int("dp", optarg, 1, &o->dp); break;
      case 'n': rc = parse_int("n", optarg, 1, &o->ranks); break;
      case O_CHUNKS:
        rc = parse_int("chunks", optarg, 1, &o->chunks);
        break;
      case 'h': usage(stdout); return 1;
      default: usage(stderr); return -1;
    }
  }
  if (rc == 0 && optind < argc) {
    fprintf(stderr, "moe_train: unexpected argument %s\n", argv[optind]);
    rc = -1;
  }
  return rc;
}

/* The shapes the flags left open, from the files of --load. */
static int infer_shapes(train_options_t* o) {
  char path[4096], err[512];
  moe_npy_t a;
  snprintf(path, sizeof(path), "%s/wg0.npy", o->load);
  if (moe_npy_read(path, &a, err, sizeof(err))) {
    fprintf(stderr, "moe_train: --load: %s\n", err);
    return -1;
  }
  if (a.ndim != 2) {
    fprintf(stderr, "moe_train: --load: %s: %d dimensions, expected 2 ([H, E])\n", path, a.ndim);
    moe_npy_free(&a);
    return -1;
  }
  if (!o->set_hidden) o->cfg.hidden = (int)a.shape[0];
  if (!o->set_experts) o->cfg.experts = (int)a.shape[1];
  moe_npy_free(&a);
  snprintf(path, sizeof(path), "%s/w1_0.npy", o->load);
  if (!o->set_ffn && moe_npy_read(path, &a, err, sizeof(err)) == 0) {
    if (a.ndim == 3) o->cfg.ffn = (int)a.shape[2];
    moe_npy_free(&a);
  }
  snprintf(path, sizeof(path), "%s/x.npy", o->load);
  if (!o->set_tokens && moe_npy_read(path, &a, err, sizeof(err)) == 0) {
    if (a.ndim == 2) o->tokens = (int)a.shape[0];
    moe_npy_free(&a);
  }
  if (!o->set_layers) {
    struct stat st;
    int l = 0;
    do snprintf(path, sizeof(path), "%s/wg%d.npy", o->load, ++l);
    while (stat(path, &st) == 0);
    o->cfg.layers = l;
  }
  return 0;
}

static int load_all(const train_options_t* o, moe_params_t* p, float* x, float* target) {
  const moe_config_t* c = &o->cfg;
  size_t H = c->hidden, E = c->experts, F = c->ffn, N = o->tokens;
  size_t s_wg[2] = {H, E}, s_w13[3] = {E, H, F}, s_w2[3] = {E, F, H}, s_x[2] = {N, H};
  char path[4096], err[4200];
  for (int l = 0; l < c->layers; l++) {
    struct {
      const char* fmt;
      float* dst;
      int nd;
      const size_t* shape;
    } f[4] = {{"%s/wg%d.npy", p->layer[l].wg, 2, s_wg},
              {"%s/w1_%d.npy", p->layer[l].w1, 3, s_w13},
              {"%s/w3_%d.npy", p->layer[l].w3, 3, s_w13},
              {"%s/w2_%d.npy", p->layer[l].w2, 3, s_w2}};
    for (int i = 0; i < 4; i++) {
      snprintf(path, sizeof(path), f[i].fmt, o->load, l);
      if (moe_npy_load(path, f[i].dst, f[i].nd, f[i].shape, err, sizeof(err))) {
        fprintf(stderr, "moe_train: --load: %s\n", err);
        return -1;
      }
    }
  }
  const char* names[2] = {"x", "target"};
  float* dst[2] = {x, target};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof(path), "%s/%s.npy", o->load, names[i]);
    if (moe_npy_load(path, dst[i], 2, s_x, err, sizeof(err))) {
      fprintf(stderr, "moe_train: --load: %s\n", err);
      return -1;
    }
  }
  return 0;
}

static int dump_one(const char* dir, const char* name, const float* data, int nd,
                    const size_t* shape) {
  char path[4096], err[4200];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (moe_npy_write(path, data, nd, shape, err, sizeof(err))) {
    fprintf(stderr, "moe_train: --dump: %s\n", err);
    return -1;
  }
  return 0;
}

static int dump_all(const train_options_t* o, const moe_params_t* g, const float* out,
                    const float* grad_x, const moe_loss_t* loss) {
  const moe_config_t* c = &o->cfg;
  size_t H = c->hidden, E = c->experts, F = c->ffn, N = o->tokens;
  size_t s_wg[2] = {H, E}, s_w13[3] = {E, H, F}, s_w2[3] = {E, F, H}, s_x[2] = {N, H};
  char name[64], path[4096];
  if (mkdir(o->dump, 0777) && errno != EEXIST) {
    fprintf(stderr, "moe_train: --dump %s: %s\n", o->dump, strerror(errno));
    return -1;
  }
  int rc =
      dump_one(o->dump, "out.npy", out, 2, s_x) | dump_one(o->dump, "grad_x.npy", grad_x, 2, s_x);
  for (int l = 0; l < c->layers; l++) {
    snprintf(name, sizeof(name), "grad_wg%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].wg, 2, s_wg);
    snprintf(name, sizeof(name), "grad_w1_%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].w1, 3, s_w13);
    snprintf(name, sizeof(name), "grad_w3_%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].w3, 3, s_w13);
    snprintf(name, sizeof(name), "grad_w2_%d.npy", l);
    rc |= dump_one(o->dump, name, g->layer[l].w2, 3, s_w2);
  }
  snprintf(path, sizeof(path), "%s/loss.txt", o->dump);
  FILE* f = fopen(path, "w");
  if (!f || fprintf(f, "%.9g\n", loss->total) < 0 || fclose(f)) {
    fprintf(stderr, "moe_train: --dump: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return rc ? -1 : 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* --- the rank layout ------------------------------------------------------------ */

typedef struct dist {
  int rank, nranks;      /* in the world communicator */
  int P, D, d, p;        /* EP size, DP size, this rank's group and index in it */
  int e0, nexp;          /* first local expert, E/P */
  int n0, n, maxn;       /* first global row, local rows, the most any rank has */
  moecclComm_t world;    /* every rank: statistics, loss, router gradients */
  moecclComm_t ep;       /* EP group d: dispatch and combine */
  moecclComm_t dp;       /* the D ranks holding the same experts: expert gradients */
  moecclStream_t stream; /* --chunks > 1: the EP communicator's calls, queued */
} dist_t;

static int row_start(int r, int nranks, int tokens) {
  return (int)((long long)r * tokens / nranks);
}

/* A failed moeccl call: says which, on which rank, and why. */
static int ccl_fail(const dist_t* ds, moecclComm_t comm, const char* what, moecclResult_t r) {
  fprintf(stderr, "moe_train: rank %d: %s: %s: %s\n", ds->rank, what, moecclGetErrorString(r),
          moecclGetLastError(comm));
  return -1;
}
#define CK(ds, comm, call)                                                                   \
  do {                                                                                       \
    moecclResult_t r_ = (call);                                                              \
    if (r_ != moecclSuccess) return ccl_fail(ds, comm, #call, r_);                          \
  } while (0)

/* --- the distributed layer -------------------------------------------------------- */

/* One chunk of a layer's tokens: its plan and expert rows. */
typedef struct dchunk {
  int t0, t;        /* its first local token and token count */
  moecclMoePlan_t plan;
  size_t* recv;     /* [nexp] rows per local expert */
  int* counts;      /* the same as int */
  size_t rows;      /* their sum */
  float *x_rows, *y_rows; /* [cap][H] */
  float *a, *b, *h;       /* [cap][F] */
} dchunk_t;

typedef struct dlayer {
  float* probs;     /* [n][E] */
  int32_t* expert;  /* [n][K] */
  float* gate;      /* [n][K] */
  float* stats;     /* MOE_STATS_LEN(E), global after the forward */
  dchunk_t* chunk;  /* [chunks] */
} dlayer_t;

typedef struct dws {
  int chunks;
  size_t cap; /* expert rows a chunk's buffers hold */
  float* act; /* [L + 1][n][H] */
  dlayer_t* layer;
  float *grad, *grad_next, *tok; /* [n][H] */
  float *dgate, *dlogits;        /* [n][K], [n][E] */
  float *dy_rows[2], *dx_rows[2]; /* [cap][H]; two with chunks, alternating */
  float *da, *db, *dh;           /* [cap][F] */
} dws_t;

static float* falloc(size_t count, int* failed) {
  float* p = calloc(count ? count : 1, sizeof(float));
  *failed |= p == NULL;
  return p;
}

/* The activations, the dispatch's input: moecclMemAlloc memory, so that
 * local peers pick their rows straight from it (moecclMoe(3), gathered
 * dispatch messages). */
static float* act_alloc(size_t count, int* failed) {
  void* p = NULL;
  if (moecclMemAlloc(&p, (count ? count : 1) * sizeof(float)) != moecclSuccess) p = NULL;
  if (p) memset(p, 0, (count ? count : 1) * sizeof(float));
  *failed |= p == NULL;
  return p;
}

static void dws_free(dws_t* w, const moe_config_t* c) {
  if (w->layer)
    for (int l = 0; l < c->layers; l++) {
      dlayer_t* y = &w->layer[l];
      for (int k = 0; y->chunk && k < w->chunks; k++) {
        dchunk_t* ch = &y->chunk[k];
        if (ch->plan) moecclMoePlanDestroy(ch->plan);
        free(ch->recv), free(ch->counts), free(ch->x_rows), free(ch->y_rows);
        free(ch->a), free(ch->b), free(ch->h);
      }
      free(y->probs), free(y->expert), free(y->gate), free(y->stats), free(y->chunk);
    }
  if (w->act) moecclMemFree(w->act);
  free(w->layer), free(w->grad), free(w->grad_next), free(w->tok), free(w->dgate);
  free(w->dlogits), free(w->dy_rows[0]), free(w->dx_rows[0]), free(w->da), free(w->db), free(w->dh);
  free(w->dy_rows[1]), free(w->dx_rows[1]);
  memset(w, 0, sizeof(*w));
}

static int dws_alloc(dws_t* w, const moe_config_t* c, const dist_t* ds, int chunks) {
  memset(w, 0, sizeof(*w));
  size_t n = ds->n, H = c->hidden, F = c->ffn, E = c->experts, K = c->topk;
  /* A rank receives at most one row per (token of a chunk of its EP group,
   * local expert chosen), at most min(K, E/P) per token; a rank's chunk has
   * at most ceil(maxn / chunks) tokens. */
  size_t per = K < (size_t)ds->nexp ? K : (size_t)ds->nexp;
  w->chunks = chunks;
  w->cap = (size_t)ds->P * ((ds->maxn + chunks - 1) / chunks) * per;
  int failed = 0;
  w->act = act_alloc(n * H * (c->layers + 1), &failed);
  w->layer = calloc(c->layers, sizeof(*w->layer));
  failed |= w->layer == NULL;
  for (int l = 0; !failed && l < c->layers; l++) {
    dlayer_t* y = &w->layer[l];
    y->probs = falloc(n * E, &failed);
    y->expert = calloc(n * K + 1, sizeof(int32_t));
    failed |= y->expert == NULL;
    y->gate = falloc(n * K, &failed);
    y->stats = falloc(MOE_STATS_LEN(E), &failed);
    y->chunk = calloc(chunks, sizeof(dchunk_t));
    failed |= !y->chunk;
    for (int k = 0; !failed && k < chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      ch->t0 = row_start(k, chunks, ds->n);
      ch->t = row_start(k + 1, chunks, ds->n) - ch->t0;
      ch->recv = calloc(ds->nexp, sizeof(size_t));
      ch->counts = calloc(ds->nexp, sizeof(int));
      failed |= !ch->recv || !ch->counts;
      ch->x_rows = falloc(w->cap * H, &failed);
      ch->y_rows = falloc(w->cap * H, &failed);
      ch->a = falloc(w->cap * F, &failed);
      ch->b = falloc(w->cap * F, &failed);
      ch->h = falloc(w->cap * F, &failed);
    }
  }
  w->grad = falloc(n * H, &failed);
  w->grad_next = falloc(n * H, &failed);
  w->tok = falloc(n * H, &failed);
  w->dgate = falloc(n * K, &failed);
  w->dlogits = falloc(n * E, &failed);
  for (int i = 0; i < (chunks > 1 ? 2 : 1); i++) {
    w->dy_rows[i] = falloc(w->cap * H, &failed);
    w->dx_rows[i] = falloc(w->cap * H, &failed);
  }
  w->da = falloc(w->cap * F, &failed);
  w->db = falloc(w->cap * F, &failed);
  w->dh = falloc(w->cap * F, &failed);
  return failed ? -1 : 0;
}

static int dws_plans(dws_t* w, const moe_config_t* c, const dist_t* ds) {
  for (int l = 0; l < c->layers; l++)
    for (int k = 0; k < w->chunks; k++)
      CK(ds, ds->ep, moecclMoePlanCreate(&w->layer[l].chunk[k].plan, c->experts, NULL, ds->ep));
  return 0;
}

static float* act_of(const dws_t* w, const moe_config_t* c, const dist_t* ds, int l) {
  return w->act + (size_t)l * ds->n * c->hidden;
}

typedef struct step_timing {
  double router, dispatch, experts, combine, backward, allreduce, optimizer;
  double bexch; /* of backward: in the EP exchanges (or waiting for them) */
} step_timing_t;

/* Time in the EP exchanges of the backward: the call (NULL stream) or the
 * wait for the stream. */
#define BEXCH(tm, stmt)                                                                            \
  do {                                                                                             \
    double bx0_ = now();                                                                           \
    stmt;                                                                                          \
    (tm)->bexch += now() - bx0_;                                                                   \
  } while (0)

/* Forward of every layer on this rank's rows; the loss over the global batch.
 * base_sq: this rank's sum of (x - target)^2, summed into *baseline. */
static int dist_forward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                        const moe_params_t* p, dws_t* w, const float* x, const float* target,
                        moe_loss_t* loss, double* baseline, step_timing_t* tm) {
  size_t n = ds->n, H = c->hidden, HF = (size_t)c->hidden * c->ffn;
  int E = c->experts;
  memcpy(act_of(w, c, ds, 0), x, n * H * sizeof(float));
  double aux = 0.0;
  for (int l = 0; l < c->layers; l++) {
    const moe_layer_params_t* wl = &p->layer[l];
    dlayer_t* y = &w->layer[l];
    const float* xin = act_of(w, c, ds, l);
    float* out = act_of(w, c, ds, l + 1);
    double t0 = now();
    memset(y->stats, 0, MOE_STATS_LEN(E) * sizeof(float));
    moe_router_forward(be, c, wl->wg, xin, (int)n, y->probs, y->expert, y->gate, y->stats);
    CK(ds, ds->world, moecclAllReduce(y->stats, y->stats, MOE_STATS_LEN(E), moecclFloat32,
                                      moecclSum, ds->world, NULL));
    tm->router += now() - t0;
    /* Each chunk has its own plan (the backward finds it again).  With
     * chunks the EP calls are queued on the host stream: chunk k's experts
     * run while chunk k+1's dispatch and chunk k-1's combine are on the
     * wire.  The stream's order, D0 D1 C0 D2 C1 ..., is the same on every
     * rank. */
    size_t K = c->topk;
    moecclStream_t st = w->chunks > 1 ? ds->stream : NULL;
    double t1 = now();
    for (int k = 0; k < w->chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      CK(ds, ds->ep, moecclMoeLayout(ch->plan, y->expert + ch->t0 * K, ch->t, c->topk, 0,
                                     ch->recv, NULL));
      ch->rows = 0;
      for (int i = 0; i < ds->nexp; i++) ch->counts[i] = (int)ch->recv[i], ch->rows += ch->recv[i];
      if (ch->rows > w->cap) {
        fprintf(stderr, "moe_train: rank %d: %zu expert rows, room for %zu\n", ds->rank, ch->rows,
                w->cap);
        return -1;
      }
    }
    dchunk_t* ch0 = &y->chunk[0];
    CK(ds, ds->ep, moecclMoeDispatch(ch0->plan, xin + ch0->t0 * H, ch0->x_rows, w->cap, H,
                                     moecclFloat32, st));
    if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
    tm->dispatch += now() - t1;
    for (int k = 0; k < w->chunks; k++) {
      dchunk_t* ch = &y->chunk[k];
      double t2 = now();
      if (k > 0) {
        dchunk_t* pr = &y->chunk[k - 1];
        CK(ds, ds->ep, moecclMoeCombine(pr->plan, pr->y_rows, w->cap, y->gate + pr->t0 * K,
                                        w->tok + pr->t0 * H, H, moecclFloat32, st));
      }
      if (k + 1 < w->chunks) {
        dchunk_t* nx = &y->chunk[k + 1];
        CK(ds, ds->ep, moecclMoeDispatch(nx->plan, xin + nx->t0 * H, nx->x_rows, w->cap, H,
                                         moecclFloat32, st));
      }
      moe_experts_forward(be, c, ds->nexp, ch->counts, wl->w1 + ds->e0 * HF,
                          wl->w3 + ds->e0 * HF, wl->w2 + ds->e0 * HF, ch->x_rows, ch->a, ch->b,
                          ch->h, ch->y_rows);
      double t3 = now();
      if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
      tm->experts += t3 - t2;
      tm->dispatch += now() - t3; /* the part of the exchanges not hidden */
    }
    dchunk_t* last = &y->chunk[w->chunks - 1];
    double t3 = now();
    CK(ds, ds->ep, moecclMoeCombine(last->plan, last->y_rows, w->cap, y->gate + last->t0 * K,
                                    w->tok + last->t0 * H, H, moecclFloat32, st));
    if (st) CK(ds, ds->ep, moecclHostStreamSynchronize(st));
    tm->combine += now() - t3;
    double t4 = now();
    for (size_t i = 0; i < n * H; i++) out[i] = xin[i] + w->tok[i];
    tm->combine += now() - t4;
    aux += moe_stats_aux_loss(c, y->stats);
  }
  const float* out = act_of(w, c, ds, c->layers);
  double sums[3] = {0.0, (double)n, 0.0};
  for (size_t i = 0; i < n * H; i++) {
    double d = (double)out[i] - target[i], b = (double)x[i] - target[i];
    sums[0] += d * d;
    sums[2] += b * b;
  }
  double t0 = now();
  CK(ds, ds->world, moecclAllReduce(sums, sums, 3, moecclFloat64, moecclSum, ds->world, NULL));
  tm->router += now() - t0;
  loss->mse = sums[1] > 0 ? sums[0] / (sums[1] * H) : 0.0;
  loss->aux = aux;
  loss->total = loss->mse + loss->aux;
  *baseline = sums[1] > 0 ? sums[2] / (sums[1] * H) : 0.0;
  return 0;
}

/* Backward of the last forward: g gets this rank's gradients (its experts'
 * slices and the router's, local sums), grad_x [n][H] dL/dx of its rows. */
static int dist_backward(const moe_backend_ops_t* be, const moe_config_t* c, const dist_t* ds,
                         const moe_params_t* p, dws_t* w, const float* target, int tokens,
                         moe_params_t* g, float* grad_x, step_timing_t* tm) {
  size_t n = ds->n, H = c->hidden, HF = (size_t)c->hidden * c->ffn;
  double t0 = now();
  memset(g->data, 0, g->count * sizeof(float));
  const float* out = act_of(w, c, ds, c->layers);
  float scale = tokens > 0 ? 2.0f / ((float)tokens * (float)H) : 0.0f;
  for (size_t i = 0; i < n * H; i++) w->grad[i] = scale * (out[i] - target[i]);
  for (int l = c->layers - 1; l >= 0; l--) {
    const moe_layer_params_t* wl = &p->layer[l];
    moe_layer_params_t* gl = &g->layer[l];
    dlayer_t* y = &w->layer[l];
    const float* xin = act_of(w, c, ds, l);
    /* The forward's pipeline mirrored: chunk k's experts' backward runs
     * while chunk k+1's combine-backward (a dispatch) and chunk k-1's
     * dispatch-backward (a combine) are on the wire; the row gradients
     * alternate between two buffers. */
    size_t K = c->topk;
    int C = w->chunks;
    moecclStream_t st = C > 1 ? ds->stream : NULL;
    dchunk_t* ch0 = &y->chunk[0];
    BEXCH(tm, CK(ds, ds->ep,
                 moecclMoeCombineBackward(ch0->plan, w->grad + ch0->t0 * H, y->gate + ch0->t0 * K,
                                          ch0->y_rows, w->dy_rows[0], w->cap,
                                          w->dgate + ch0->t0 * K, H, moecclFloat32, st)));
    if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    for (int k = 0; k < C; k++) {
      dchunk_t* ch = &y->chunk[k];
      if (k > 0) {
        dchunk_t* pr = &y->chunk[k - 1];
        CK(ds, ds->ep, moecclMoeDispatchBackward(pr->plan, w->dx_rows[(k - 1) % 2], w->cap,
                                                 w->tok + pr->t0 * H, H, moecclFloat32, st));
      }
      if (k + 1 < C) {
        dchunk_t* nx = &y->chunk[k + 1];
        CK(ds, ds->ep, moecclMoeCombineBackward(nx->plan, w->grad + nx->t0 * H,
                                                y->gate + nx->t0 * K, nx->y_rows,
                                                w->dy_rows[(k + 1) % 2], w->cap,
                                                w->dgate + nx->t0 * K, H, moecclFloat32, st));
      }
      moe_experts_backward(be, c, ds->nexp, ch->counts, wl->w1 + ds->e0 * HF,
                           wl->w3 + ds->e0 * HF, wl->w2 + ds->e0 * HF, ch->x_rows, ch->a, ch->b,
                           ch->h, w->dy_rows[k % 2], gl->w1 + ds->e0 * HF, gl->w3 + ds->e0 * HF,
                           gl->w2 + ds->e0 * HF, w->dx_rows[k % 2], w->da, w->db, w->dh);
      if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    }
    dchunk_t* last = &y->chunk[C - 1];
    BEXCH(tm, CK(ds, ds->ep,
                 moecclMoeDispatchBackward(last->plan, w->dx_rows[(C - 1) % 2], w->cap,
                                           w->tok + last->t0 * H, H, moecclFloat32, st)));
    if (st) BEXCH(tm, CK(ds, ds->ep, moecclHostStreamSynchronize(st)));
    for (size_t i = 0; i < n * H; i++) w->grad_next[i] = w->grad[i] + w->tok[i]; /* residual */
    moe_router_backward(be, c, wl->wg, xin, (int)n, y->probs, y->expert, y->gate, w->dgate,
                        y->stats, w->dlogits, gl->wg, w->grad_next);
    float* swap = w->grad;
    w->grad = w->grad_next;
    w->grad_next = swap;
  }
  memcpy(grad_x, w->grad, n * H * sizeof(float));
  tm->backward = now() - t0;
  return 0;
}

/* The gradients' sums: the router's over every rank, each expert's over
 * its D replicas (the ranks with this EP index). */
static int grad_allreduce(const moe_config_t* c, const dist_t* ds, moe_params_t* g) {
  size_t HF = (size_t)c->hidden * c->ffn, HE = (size_t)c->hidden * c->experts;
  size_t cnt = (size_t)ds->nexp * HF;
  for (int l = 0; l < c->layers; l++) {
    moe_layer_params_t* gl = &g->layer[l];
    if (ds->nranks > 1)
      CK(ds, ds->world,
         moecclAllReduce(gl->wg, gl->wg, HE, moecclFloat32, moecclSum, ds->world, NULL));
    if (ds->D > 1) {
      float* part[3] = {gl->w1 + ds->e0 * HF, gl->w3 + ds->e0 * HF, gl->w2 + ds->e0 * HF};
      for (int i = 0; i < 3; i++)
        CK(ds, ds->dp, moecclAllReduce(part[i], part[i], cnt, moecclFloat32, moecclSum, ds->dp,
                                       NULL));
    }
  }
  return 0;
}

/* Gathers the full shapes on rank 0: every expert's gradients (in place,
 * over the EP group: rank p's slice is block p) and the rows of out and
 * grad_x (padded to maxn rows per rank, compacted on rank 0). */
static int gather_for_dump(const moe_config_t* c, const dist_t* ds, int tokens, moe_params_t* g,
                           const float* out, const float* grad_x, float* full_out,
                           float* full_gx) {
  size_t HF = (size_t)c->hidden * c->ffn, H = c->hidden, cnt = (size_t)ds->nexp * HF;
  if (ds->P > 1)
    for (int l = 0; l < c->layers; l++) {
      float* full[3] = {g->layer[l].w1, g->layer[l].w3, g->layer[l].w2};
      for (int i = 0; i < 3; i++)
        CK(ds, ds->ep,
           moecclAllGather(full[i] + ds->e0 * HF, full[i], cnt, moecclFloat32, ds->ep, NULL));
    }
  size_t blk = (size_t)ds->maxn * H;
  float* send = calloc(blk ? blk : 1, sizeof(float));
  float* recv = ds->rank == 0 ? calloc(blk * ds->nranks + 1, sizeof(float)) : NULL;
  if (!send || (ds->rank == 0 && !recv)) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", ds->rank);
    free(send), free(recv);
    return -1;
  }
  const float* src[2] = {out, grad_x};
  float* dst[2] = {full_out, full_gx};
  for (int i = 0; i < 2; i++) {
    memcpy(send, src[i], (size_t)ds->n * H * sizeof(float));
    moecclResult_t r = moecclGather(send, recv, blk, moecclFloat32, 0, ds->world, NULL);
    if (r != moecclSuccess) {
      free(send), free(recv);
      return ccl_fail(ds, ds->world, "moecclGather", r);
    }
    if (ds->rank == 0)
      for (int q = 0; q < ds->nranks; q++) {
        int r0 = row_start(q, ds->nranks, tokens), r1 = row_start(q + 1, ds->nranks, tokens);
        memcpy(dst[i] + (size_t)r0 * H, recv + blk * q, (size_t)(r1 - r0) * H * sizeof(float));
      }
  }
  free(send), free(recv);
  return 0;
}

/* A fresh batch: random x of the whole batch (every rank draws the same),
 * the teacher's output on this rank's rows as its target. */
static void synthetic_batch(const moe_backend_ops_t* be, const moe_params_t* teacher,
                            moe_workspace_t* ws, moe_rng_t* rng, const dist_t* ds, int tokens,
                            float* xfull, float* x, float* target) {
  size_t H = teacher->cfg.hidden, nh = (size_t)ds->n * H;
  moe_rng_normal(rng, xfull, (size_t)tokens * H, 1.0f);
  memcpy(x, xfull + (size_t)ds->n0 * H, nh * sizeof(float));
  moe_model_forward(be, teacher, ws, x, x, ds->n, NULL, NULL, NULL);
  memcpy(target, moe_model_output(ws), nh * sizeof(float));
}

/* Communicators: world from the id, EP group by d, replicas by p. */
static int dist_init(dist_t* ds, const train_options_t* o, int rank, int nranks,
                     moecclUniqueId id) {
  memset(ds, 0, sizeof(*ds));
  ds->rank = rank;
  ds->nranks = nranks;
  ds->P = o->ep;
  ds->D = o->dp;
  ds->d = rank / ds->P;
  ds->p = rank % ds->P;
  ds->nexp = o->cfg.experts / ds->P;
  ds->e0 = ds->p * ds->nexp;
  ds->n0 = row_start(rank, nranks, o->tokens);
  ds->n = row_start(rank + 1, nranks, o->tokens) - ds->n0;
  ds->maxn = (o->tokens + nranks - 1) / nranks;
  CK(ds, NULL, moecclCommInitRank(&ds->world, nranks, id, rank));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->d, ds->p, &ds->ep, NULL));
  CK(ds, ds->world, moecclCommSplit(ds->world, ds->p, ds->d, &ds->dp, NULL));
  if (o->chunks > 1) CK(ds, ds->ep, moecclHostStreamCreate(&ds->stream));
  return 0;
}

/* After a failure the communicators are aborted first, so that whatever is
 * still queued on the stream fails at once instead of waiting for peers. */
static void dist_fini(dist_t* ds, int failed) {
  if (ds->stream && !failed) moecclHostStreamDestroy(ds->stream);
  moecclComm_t comms[3] = {ds->dp, ds->ep, ds->world};
  for (int i = 0; i < 3; i++)
    if (comms[i]) failed ? moecclCommAbort(comms[i]) : moecclCommDestroy(comms[i]);
  if (ds->stream && failed) moecclHostStreamDestroy(ds->stream);
}

/* One rank's whole run; 0, 1 on failure. */
static int rank_main(const train_options_t* o, int rank, int nranks, moecclUniqueId id) {
  const moe_config_t* c = &o->cfg;
  const moe_backend_ops_t* be = moe_backend_blas(o->threads);
  char blas[512];
  dist_t ds;
  int root = rank == 0;
  if (dist_init(&ds, o, rank, nranks, id)) {
    dist_fini(&ds, 1);
    return 1;
  }
  moe_params_t p = {0}, g = {0}, teacher = {0};
  moe_workspace_t tws = {0};
  dws_t w = {0};
  moe_adam_t adam = {0};
  FILE* json = NULL;
  int status = 1;
  size_t H = c->hidden, nh = (size_t)ds.n * H, NH = (size_t)o->tokens * H;
  int nomem = 0;
  float *x = falloc(nh, &nomem), *target = falloc(nh, &nomem), *grad_x = falloc(nh, &nomem);
  float *xfull = malloc(NH * sizeof(float) + 1), *tfull = malloc(NH * sizeof(float) + 1);
  float *dump_out = NULL, *dump_gx = NULL;
  if (nomem || !xfull || !tfull || moe_params_alloc(&p, c) ||
      moe_params_alloc(&g, c) || dws_alloc(&w, c, &ds, o->chunks) ||
      moe_adam_init(&adam, p.count, o->lr) ||
      (!o->load && (moe_params_alloc(&teacher, c) || moe_workspace_alloc(&tws, c, ds.n))) ||
      (o->dump && root && (!(dump_out = malloc(NH * sizeof(float) + 1)) ||
                           !(dump_gx = malloc(NH * sizeof(float) + 1))))) {
    fprintf(stderr, "moe_train: rank %d: out of memory\n", rank);
    goto done;
  }
  if (dws_plans(&w, c, &ds)) goto done;
  moe_rng_t batch_rng;
  moe_rng_seed(&batch_rng, o->seed + 2);
  if (o->load) {
    if (load_all(o, &p, xfull, tfull)) goto done;
    memcpy(x, xfull + (size_t)ds.n0 * H, nh * sizeof(float));
    memcpy(target, tfull + (size_t)ds.n0 * H, nh * sizeof(float));
  } else {
    moe_params_init_random(&p, o->seed);
    moe_params_init_random(&teacher, o->seed + 1);
  }
  int version = 0;
  moecclGetVersion(&version);
  be->describe(blas, sizeof(blas));
  if (root) {
    printf("# moe_train (moeccl %d.%d.%d), %d rank%s (EP %d x DP %d, %d expert%s and %d-%d tokens "
           "per rank, %d chunk%s): L=%d E=%d K=%d H=%d F=%d N=%d steps=%d lr=%g aux=%g seed=%lu "
           "%s\n# compute: %s\n",
           version / 10000, version / 100 % 100, version % 100, nranks, nranks > 1 ? "s" : "",
           ds.P, ds.D, ds.nexp, ds.nexp > 1 ? "s" : "", o->tokens / nranks, ds.maxn, o->chunks,
           o->chunks > 1 ? "s" : "", c->layers,
           c->experts, c->topk, c->hidden, c->ffn, o->tokens, o->steps, o->lr, c->aux, o->seed,
           o->load    ? o->load
           : o->fresh ? "teacher, fresh inputs"
                      : "teacher, one batch",
           blas);
    printf("# %5s %12s %12s %10s %12s %7s %10s  ms (rank 0): %s\n", "step", "loss", "mse", "aux",
           "baseline", "ratio", "tokens/s",
           "router dispatch experts combine backward (exchanges) allreduce optimizer comm%");
    json = o->json ? fopen(o->json, "w") : NULL;
    if (o->json && !json) {
      fprintf(stderr, "moe_train: --json %s: %s\n", o->json, strerror(errno));
      /* the other ranks stop at the first collective's failure flag below */
    }
  }
  int bad = root && o->json && !json;
  {
    int flag = bad;
    moecclResult_t r = moecclAllReduce(&flag, &flag, 1, moecclInt32, moecclMax, ds.world, NULL);
    if (r != moecclSuccess) {
      ccl_fail(&ds, ds.world, "moecclAllReduce", r);
      goto done;
    }
    if (flag) goto done;
  }
  if (json)
    fprintf(json,
            "{\"layers\": %d, \"experts\": %d, \"topk\": %d, \"hidden\": %d, \"ffn\": %d, "
            "\"tokens\": %d, \"lr\": %g, \"aux\": %g, \"seed\": %lu, \"ranks\": %d, \"ep\": %d, "
            "\"dp\": %d, \"chunks\": %d, \"blas\": \"%s\", \"steps\": [",
            c->layers, c->experts, c->topk, c->hidden, c->ffn, o->tokens, o->lr, c->aux, o->seed,
            nranks, ds.P, ds.D, o->chunks, blas);
  int tty = root && isatty(STDERR_FILENO);
  double first_ratio = 0.0, last_ratio = 0.0;
  step_timing_t sum = {0}; /* over the steps after the first (warm-up) */
  double sum_step = 0.0, sum_comm = 0.0;
  int nsum = 0;
  for (int step = 1; step <= o->steps || (step == 1 && o->dump); step++) {
    if (!o->load && (step == 1 || o->fresh))
      synthetic_batch(be, &teacher, &tws, &batch_rng, &ds, o->tokens, xfull, x, target);
    moe_loss_t loss;
    step_timing_t tm = {0};
    double base = 0.0, t0 = now();
    if (dist_forward(be, c, &ds, &p, &w, x, target, &loss, &base, &tm) ||
        dist_backward(be, c, &ds, &p, &w, target, o->tokens, &g, grad_x, &tm))
      goto done;
    double t1 = now();
    if (grad_allreduce(c, &ds, &g)) goto done;
    tm.allreduce = now() - t1;
    if (step == 1 && o->dump) {
      if (gather_for_dump(c, &ds, o->tokens, &g, act_of(&w, c, &ds, c->layers), grad_x, dump_out,
                          dump_gx))
        goto done;
      int flag = root && dump_all(o, &g, dump_out, dump_gx, &loss);
      moecclResult_t r = moecclAllReduce(&flag, &flag, 1, moecclInt32, moecclMax, ds.world, NULL);
      if (r != moecclSuccess) {
        ccl_fail(&ds, ds.world, "moecclAllReduce", r);
        goto done;
      }
      if (flag) goto done;
    }
    if (step > o->steps) break;
    double t2 = now();
    moe_adam_step(&adam, p.data, g.data);
    double t3 = now();
    tm.optimizer = t3 - t2;
    double ratio = base > 0 ? loss.total / base : 0.0;
    if (step == 1) first_ratio = ratio;
    last_ratio = ratio;
    double tps = o->tokens / (t3 - t0);
    /* communication: the EP exchanges not hidden (dispatch, combine, the
     * backward's) and the gradient all-reduce */
    double comm = tm.dispatch + tm.combine + tm.bexch + tm.allreduce;
    if (step > 1 || o->steps == 1) {
      sum.router += tm.router, sum.dispatch += tm.dispatch, sum.experts += tm.experts;
      sum.combine += tm.combine, sum.backward += tm.backward, sum.bexch += tm.bexch;
      sum.allreduce += tm.allreduce, sum.optimizer += tm.optimizer;
      sum_step += t3 - t0, sum_comm += comm, nsum++;
    }
    if (!root) continue;
    printf("  %5d %12.6g %12.6g %10.4g %12.6g %7.4f %10.0f  %.3f %.3f %.3f %.3f %.3f (%.3f) %.3f "
           "%.3f %.1f\n",
           step, loss.total, loss.mse, loss.aux, base, ratio, tps, 1e3 * tm.router,
           1e3 * tm.dispatch, 1e3 * tm.experts, 1e3 * tm.combine, 1e3 * tm.backward,
           1e3 * tm.bexch, 1e3 * tm.allreduce, 1e3 * tm.optimizer, 100 * comm / (t3 - t0));
    if (tty)
      fprintf(stderr, "\rstep %d/%d loss %.5g (%.1f%% of baseline)", step, o->steps, loss.total,
              100 * ratio);
    if (json)
      fprintf(json,
              "%s\n  {\"step\": %d, \"loss\": %.9g, \"mse\": %.9g, \"aux\": %.9g, "
              "\"baseline\": %.9g, \"tokens_per_s\": %.1f, \"time_s\": {\"router\": %.6g, "
              "\"dispatch\": %.6g, \"experts\": %.6g, \"combine\": %.6g, \"backward\": "
              "%.6g, \"backward_exchanges\": %.6g, \"allreduce\": %.6g, \"optimizer\": %.6g}, "
              "\"comm_share\": %.4f}",
              step > 1 ? "," : "", step, loss.total, loss.mse, loss.aux, base, tps, tm.router,
              tm.dispatch, tm.experts, tm.combine, tm.backward, tm.bexch, tm.allreduce,
              tm.optimizer, comm / (t3 - t0));
  }
  if (tty) fprintf(stderr, "\n");
  if (root && nsum > 0) {
    double k = 1e3 / nsum;
    printf("# mean of steps %d-%d: %.0f tokens/s; ms per step: router %.3f dispatch %.3f experts "
           "%.3f combine %.3f backward %.3f (exchanges %.3f) allreduce %.3f optimizer %.3f; "
           "communication %.1f%% of a step\n",
           o->steps == 1 ? 1 : 2, o->steps, o->tokens * nsum / sum_step, k * sum.router,
           k * sum.dispatch, k * sum.experts, k * sum.combine, k * sum.backward, k * sum.bexch,
           k * sum.allreduce, k * sum.optimizer, 100 * sum_comm / sum_step);
  }
  if (root && o->steps > 0)
    printf("# loss / baseline: %.4f at step 1, %.4f at step %d\n", first_ratio, last_ratio,
           o->steps);
  if (json) fprintf(json, "\n]}\n");
  status = 0;
done:
  if (json && fclose(json)) {
    fprintf(stderr, "moe_train: --json %s: %s\n", o->json, strerror(errno));
    status = 1;
  }
  fflush(stdout);
  dws_free(&w, c);
  dist_fini(&ds, status != 0);
  moe_adam_free(&adam);
  moe_workspace_free(&tws);
  moe_params_free(&p);
  moe_params_free(&g);
  moe_params_free(&teacher);
  free(x), free(target), free(grad_x), free(xfull), free(tfull), free(dump_out), free(dump_gx);
  return status;
}

/* --- launching ------------------------------------------------------------------- */

/* -n R: forks the ranks before any library call, makes the id here (this
 * process serves the rendezvous) and sends it down a pipe to each; waits
 * for them, and stops the others as soon as one fails. */
static int run_forked(const train_options_t* o, int nranks) {
  pid_t* pids = calloc(nranks, sizeof(pid_t));
  int* fds = malloc(nranks * sizeof(int));
  if (!pids || !fds) {
    fprintf(stderr, "moe_train: out of memory\n");
    return 1;
  }
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigaction(SIGPIPE, &ign, NULL);
  int started = 0, status = 0;
  pid_t launcher = getpid();
  for (int r = 0; r < nranks; r++) {
    int pfd[2];
    if (pipe(pfd)) {
      fprintf(stderr, "moe_train: pipe: %s\n", strerror(errno));
      status = 1;
      break;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "moe_train: fork: %s\n", strerror(errno));
      close(pfd[0]), close(pfd[1]);
      status = 1;
      break;
    }
    if (pid == 0) {
      /* A launcher killed (a test's timeout) takes its ranks with it. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      close(pfd[1]);
      for (int i = 0; i < r; i++) close(fds[i]);
      moecclUniqueId id;
      size_t got = 0;
      while (got < sizeof(id)) {
        ssize_t k = read(pfd[0], (char*)&id + got, sizeof(id) - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) _exit(1); /* the launcher gave up */
        got += (size_t)k;
      }
      close(pfd[0]);
      int rc = rank_main(o, r, nranks, id);
      free(pids), free(fds);
      exit(rc);
    }
    close(pfd[0]);
    fds[r] = pfd[1];
    pids[r] = pid;
    started++;
  }
  moecclUniqueId id;
  moecclResult_t res = status ? moecclSuccess : moecclGetUniqueId(&id);
  if (res != moecclSuccess) {
    fprintf(stderr, "moe_train: moecclGetUniqueId: %s: %s\n", moecclGetErrorString(res),
            moecclGetLastError(NULL));
    status = 1;
  }
  for (int r = 0; r < started; r++) {
    if (status == 0 && write(fds[r], &id, sizeof(id)) != (ssize_t)sizeof(id)) status = 1;
    close(fds[r]);
  }
  for (int left = started; left > 0;) {
    int st;
    pid_t pid = wait(&st);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int r = 0; r < started; r++)
      if (pids[r] == pid) {
        pids[r] = 0;
        left--;
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (!WIFEXITED(st))
          fprintf(stderr, "moe_train: rank %d ended by signal %d\n", r, WTERMSIG(st));
        if (rc && !status) {
          status = rc;
          for (int q = 0; q < started; q++) /* the others would wait for it */
            if (pids[q] > 0) kill(pids[q], SIGTERM);
        }
      }
  }
  free(pids), free(fds);
  return status;
}

#ifdef MOE_TRAIN_MPI
/* Launched by mpirun (Open MPI, or a PMI launcher)? */
static int mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}
#endif

/* R, P and D from the flags (and the launcher's R); 0, or -1 with a message. */
static int resolve_layout(train_options_t* o, int launched) {
  int R = launched ? launched : o->ranks;
  if (launched && o->ranks && o->ranks != launched) {
    fprintf(stderr, "moe_train: -n %d under an MPI launch of %d ranks: give one of them\n",
            o->ranks, launched);
    return -1;
  }
  if (!R) R = (o->ep ? o->ep : 1) * (o->dp ? o->dp : 1);
  if (!o->ep && !o->dp) o->ep = R, o->dp = 1;
  else if (!o->ep) o->ep = R % o->dp ? 0 : R / o->dp;
  else if (!o->dp) o->dp = R % o->ep ? 0 : R / o->ep;
  if (o->ep < 1 || o->dp < 1 || (long long)o->ep * o->dp != R) {
    fprintf(stderr, "moe_train: %d ranks do not split as --ep %d x --dp %d (R = P * D)\n", R,
            o->ep, o->dp);
    return -1;
  }
  if (o->cfg.experts % o->ep) {
    fprintf(stderr, "moe_train: --ep %d does not divide the %d experts\n", o->ep,
            o->cfg.experts);
    return -1;
  }
  if (R > 256) {
    fprintf(stderr, "moe_train: %d ranks: at most 256\n", R);
    return -1;
  }
  o->ranks = R;
  return 0;
}

int main(int argc, char** argv) {
  train_options_t o;
  char err[256];
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : 2;
  if (o.load && infer_shapes(&o)) return 1;
  if (moe_config_check(&o.cfg, err, sizeof(err))) {
    fprintf(stderr, "moe_train: %s\n", err);
    return 2;
  }
#ifdef MOE_TRAIN_MPI
  if (mpi_launched()) {
    MPI_Init(&argc, &argv);
    int me = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (resolve_layout(&o, size)) {
      MPI_Finalize();
      return 2;
    }
    moecclUniqueId id;
    memset(&id, 0, sizeof(id));
    int bad = me == 0 && moecclGetUniqueId(&id) != moecclSuccess;
    if (bad)
      fprintf(stderr, "moe_train: moecclGetUniqueId: %s\n", moecclGetLastError(NULL));
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad) {
      MPI_Finalize();
      return 1;
    }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    rc = rank_main(&o, me, size, id);
    if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return rc;
  }
#endif
  if (resolve_layout(&o, 0)) return 2;
  if (o.ranks > 1) return run_forked(&o, o.ranks);
  moecclUniqueId id;
  moecclResult_t r = moecclGetUniqueId(&id);
  if (r != moecclSuccess) {
    fprintf(stderr, "moe_train: moecclGetUniqueId: %s: %s\n", moecclGetErrorString(r),
            moecclGetLastError(NULL));
    return 1;
  }
  return rank_main(&o, 0, 1, id);
}
