/* moe/train_place.c on forked ranks in EP x DP layouts (P x D = 4 x 1,
 * 2 x 3, 3 x 2; E = 12 experts of H = 8, F = 24, 2 layers):
 *
 *   default   place_sync_grads with today's placement (no replicas) gives
 *             bit for bit what grad_allreduce gives for the rank's experts
 *             (values that round, so the order of the sums shows: one
 *             all-reduce over the three packed tensors instead of one per
 *             tensor differs in the last bits at D = 3, measured)
 *   replicas  a balanced placement with X = P replicas: every holder of an
 *             expert gets the sum over all its copies and the D replicas
 *             (against a float64 sum of every rank's values, which each
 *             rank regenerates), the same bits on every holder (an
 *             all-gather over the world compares them), and the experts a
 *             rank does not hold untouched
 *   migrate   from today's placement to a balanced one with replicas and
 *             back (X changes both ways), layer 0 with Adam's moments and
 *             layer 1 without: every held expert's weights (and moments)
 *             are the true ones afterwards, where the rank started with
 *             garbage for the experts it did not hold
 *
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.h"
#include "placement.h"
#include "train_place.h"

typedef struct layout {
  int P, D;
} layout_t;

static const moe_config_t cfg = {2, 12, 2, 8, 24, 0.0f};

/* A value that does not add exactly: what rank `who` puts at element x of
 * expert e of tensor t (w1, w3, w2) of layer l; kind separates weights,
 * moments and gradients. */
static float value(int kind, int who, int l, int t, int e, size_t x) {
  return (float)sin(1.3 + 0.77 * kind + 2.1 * who + 0.37 * l + 0.53 * t + 0.191 * e + 0.011 * x);
}

/* The flat offset of expert e of tensor t of layer l. */
static size_t offset(const moe_params_t* p, int l, int t, int e) {
  const float* base[3] = {p->layer[l].w1, p->layer[l].w3, p->layer[l].w2};
  return (size_t)(base[t] - p->data) + (size_t)e * cfg.hidden * cfg.ffn;
}

static double skew(int e) { return e == 7 ? 6000.0 : 1000.0 / (e + 1); }

static int check_default(const dist_t* ds) {
  moe_params_t g = {0}, g2 = {0};
  placement_t pl = {0};
  char err[200];
  MP_CHECK(moe_params_alloc(&g, &cfg) == 0 && moe_params_alloc(&g2, &cfg) == 0, "no memory");
  MP_CHECK(placement_default(&pl, cfg.experts, ds->P, 0, err, sizeof(err)) == 0, "%s", err);
  for (size_t i = 0; i < g.count; i++) g.data[i] = value(3, ds->rank, 0, 0, 0, i);
  memcpy(g2.data, g.data, g.count * sizeof(float));
  MP_CHECK(grad_allreduce(&cfg, ds, &g) == 0, "grad_allreduce failed");
  for (int l = 0; l < cfg.layers; l++)
    MP_CHECK(place_sync_grads(&cfg, ds, l, &pl, &g2) == 0, "place_sync_grads failed");
  size_t HF = (size_t)cfg.hidden * cfg.ffn;
  for (int l = 0; l < cfg.layers; l++)
    for (int t = 0; t < 3; t++) {
      size_t at = offset(&g, l, t, ds->e0);
      MP_CHECK(memcmp(g.data + at, g2.data + at, ds->nexp * HF * sizeof(float)) == 0,
               "default: layer %d tensor %d differs from grad_allreduce's", l, t);
    }
  moe_params_free(&g), moe_params_free(&g2), placement_free(&pl);
  return 0;
}

/* Fills the experts rank `who` (EP index q) holds under pl with its
 * values, the others with `other`. */
static void fill_held(moe_params_t* p, const placement_t* pl, int kind, int who, int q,
                      float other) {
  size_t HF = (size_t)cfg.hidden * cfg.ffn;
  for (int l = 0; l < cfg.layers; l++)
    for (int t = 0; t < 3; t++)
      for (int e = 0; e < cfg.experts; e++)
        for (size_t x = 0; x < HF; x++)
          p->data[offset(p, l, t, e) + x] =
              placement_holds(pl, q, e) ? value(kind, who, l, t, e, x) : other;
}

static int check_replicas(const dist_t* ds) {
  int E = cfg.experts, P = ds->P, X = P;
  size_t HF = (size_t)cfg.hidden * cfg.ffn, layer_n = 3 * (size_t)E * HF;
  double load[12];
  for (int e = 0; e < E; e++) load[e] = skew(e);
  placement_t pl = {0};
  char err[200];
  MP_CHECK(placement_balance(&pl, NULL, load, E, P, X, 0.0, err, sizeof(err)) == 1, "%s", err);
  moe_params_t g = {0};
  MP_CHECK(moe_params_alloc(&g, &cfg) == 0, "no memory");
  fill_held(&g, &pl, 4, ds->rank, ds->p, -5.0f);
  for (int l = 0; l < cfg.layers; l++)
    MP_CHECK(place_sync_grads(&cfg, ds, l, &pl, &g) == 0, "place_sync_grads failed");
  /* Against the float64 sum over every rank that holds the expert. */
  for (int l = 0; l < cfg.layers; l++)
    for (int t = 0; t < 3; t++)
      for (int e = 0; e < E; e++)
        for (size_t x = 0; x < HF; x++) {
          float got = g.data[offset(&g, l, t, e) + x];
          if (!placement_holds(&pl, ds->p, e)) {
            MP_CHECK(got == -5.0f, "replicas: expert %d, not held, changed to %g", e, got);
            continue;
          }
          double want = 0.0;
          for (int r = 0; r < ds->nranks; r++)
            if (placement_holds(&pl, r % P, e)) want += value(4, r, l, t, e, x);
          MP_CHECK(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                   "replicas: layer %d tensor %d expert %d [%zu]: %.9g, want %.9g", l, t, e, x, got,
                   want);
        }
  /* Every holder of an expert, in every group, has the same bits. */
  float* all = malloc(layer_n * ds->nranks * sizeof(float) * cfg.layers);
  MP_CHECK(all != NULL, "no memory");
  size_t per_rank = layer_n * cfg.layers;
  float* mine = malloc(per_rank * sizeof(float));
  MP_CHECK(mine != NULL, "no memory");
  for (int l = 0, k = 0; l < cfg.layers; l++)
    for (int t = 0; t < 3; t++, k++)
      memcpy(mine + k * E * HF, g.data + offset(&g, l, t, 0), E * HF * sizeof(float));
  MP_OK_COMM(ds->world, moecclAllGather(mine, all, per_rank, moecclFloat32, ds->world, NULL));
  for (int r = 0; r < ds->nranks; r++)
    for (int k = 0; k < 3 * cfg.layers; k++)
      for (int e = 0; e < E; e++)
        if (placement_holds(&pl, r % P, e) && placement_holds(&pl, ds->p, e))
          MP_CHECK(memcmp(all + r * per_rank + (k * E + e) * HF, mine + (k * E + e) * HF,
                          HF * sizeof(float)) == 0,
                   "replicas: expert %d (tensor %d) differs between ranks %d and %d", e, k, r,
                   ds->rank);
  free(all), free(mine);
  moe_params_free(&g), placement_free(&pl);
  return 0;
}

/* After a migration to pl every held expert of every layer must hold the
 * true weights (kind 0) and, where moments moved, the true moments. */
static int check_held(const dist_t* ds, const placement_t* pl, const moe_params_t* p,
                      const moe_adam_t* adam, int moments_layers, const char* what) {
  size_t HF = (size_t)cfg.hidden * cfg.ffn;
  for (int l = 0; l < cfg.layers; l++)
    for (int t = 0; t < 3; t++)
      for (int e = 0; e < cfg.experts; e++) {
        if (!placement_holds(pl, ds->p, e)) continue;
        for (size_t x = 0; x < HF; x++) {
          size_t at = offset(p, l, t, e) + x;
          MP_CHECK(p->data[at] == value(0, 0, l, t, e, x),
                   "%s: layer %d tensor %d expert %d [%zu]: weight %g, want %g", what, l, t, e, x,
                   p->data[at], value(0, 0, l, t, e, x));
          if (l >= moments_layers) continue;
          MP_CHECK(adam->m[at] == value(1, 0, l, t, e, x) && adam->v[at] == value(2, 0, l, t, e, x),
                   "%s: layer %d tensor %d expert %d [%zu]: moments %g %g", what, l, t, e, x,
                   adam->m[at], adam->v[at]);
        }
      }
  return 0;
}

/* The true values (the same on every rank: `who` 0) on the experts this
 * rank holds under pl, garbage elsewhere. */
static void fill_truth(moe_params_t* p, moe_adam_t* adam, const placement_t* pl, int q) {
  size_t HF = (size_t)cfg.hidden * cfg.ffn;
  for (int l = 0; l < cfg.layers; l++)
    for (int t = 0; t < 3; t++)
      for (int e = 0; e < cfg.experts; e++)
        for (size_t x = 0; x < HF; x++) {
          size_t at = offset(p, l, t, e) + x;
          int held = placement_holds(pl, q, e);
          p->data[at] = held ? value(0, 0, l, t, e, x) : -7.0f;
          adam->m[at] = held ? value(1, 0, l, t, e, x) : -8.0f;
          adam->v[at] = held ? value(2, 0, l, t, e, x) : -9.0f;
        }
}

static int check_migrate(const dist_t* ds) {
  int E = cfg.experts, P = ds->P;
  double load[12];
  for (int e = 0; e < E; e++) load[e] = skew(e);
  placement_t today = {0}, bal = {0};
  char err[200];
  MP_CHECK(placement_default(&today, E, P, 0, err, sizeof(err)) == 0, "%s", err);
  MP_CHECK(placement_balance(&bal, &today, load, E, P, P, 0.0, err, sizeof(err)) == 1, "%s", err);
  moe_params_t p = {0};
  moe_adam_t adam = {0};
  MP_CHECK(moe_params_alloc(&p, &cfg) == 0 && moe_adam_init(&adam, p.count, 0.01f) == 0,
           "no memory");
  fill_truth(&p, &adam, &today, ds->p);
  /* Layer 0 moves with its moments, layer 1 without. */
  MP_CHECK(place_migrate(&cfg, ds, 0, &today, &bal, &p, &adam) == 0, "place_migrate failed");
  MP_CHECK(place_migrate(&cfg, ds, 1, &today, &bal, &p, NULL) == 0, "place_migrate failed");
  if (check_held(ds, &bal, &p, &adam, 1, "today -> balanced")) return 1;
  /* And back, from the state just reached. */
  fill_truth(&p, &adam, &bal, ds->p);
  for (int l = 0; l < cfg.layers; l++)
    MP_CHECK(place_migrate(&cfg, ds, l, &bal, &today, &p, &adam) == 0, "place_migrate failed");
  if (check_held(ds, &today, &p, &adam, cfg.layers, "balanced -> today")) return 1;
  moe_params_free(&p), moe_adam_free(&adam), placement_free(&today), placement_free(&bal);
  return 0;
}

static int body(moecclComm_t world, int rank, int nranks, void* arg) {
  const layout_t* lo = arg;
  dist_t ds;
  memset(&ds, 0, sizeof(ds));
  ds.rank = rank, ds.nranks = nranks, ds.P = lo->P, ds.D = lo->D;
  ds.d = rank / lo->P, ds.p = rank % lo->P;
  ds.nexp = cfg.experts / lo->P, ds.e0 = ds.p * ds.nexp; /* for grad_allreduce */
  ds.nlocal = ds.nexp;
  /* one pipeline stage holding every layer, the default blocks */
  static int ls[2];
  ls[0] = 0, ls[1] = cfg.layers;
  ds.S = 1, ds.Q = nranks, ds.s = 0, ds.q = rank, ds.V = 1, ds.layers = cfg.layers;
  ds.layer_start = ls;
  ds.world = world;
  ds.stage = world;
  MP_OK(moecclCommSplit(world, ds.d, ds.p, &ds.ep, NULL));
  MP_OK(moecclCommSplit(world, ds.p, ds.d, &ds.dp, NULL));
  int rc = (mp_want("default") && check_default(&ds)) ||
           (mp_want("replicas") && check_replicas(&ds)) ||
           (mp_want("migrate") && check_migrate(&ds));
  moecclCommDestroy(ds.dp);
  moecclCommDestroy(ds.ep);
  return rc;
}

int main(void) {
  static layout_t layouts[] = {{4, 1}, {2, 3}, {3, 2}};
  int overall = MP_EXIT_PASS;
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
    printf("EP %d x DP %d:\n", layouts[i].P, layouts[i].D);
    fflush(stdout);
    overall = mp_fold(overall, mp_run(layouts[i].P * layouts[i].D, body, &layouts[i], 120));
  }
  return overall;
}
