/* Adaptive expert placement (placement.h): the default and balanced
 * placements of E experts in E + X slots on P ranks, the routing of
 * (token, j) choices to copies, the per-rank loads, the moves between two
 * placements, and the running sums that trigger a rebalance.  Pure C, no
 * library calls; every choice has a fixed tie-break so that all ranks
 * compute the same placement from the same loads. */
#include "placement.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest E * P accepted: far beyond any model, small enough that the
 * [P][E] tables of a build stay a few megabytes. */
#define PLACEMENT_MAX_CELLS (1 << 22)

static int fail(char* err, size_t len, const char* fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* The rules on the shape that every placement keeps. */
static int shape_check(int E, int P, int X, char* err, size_t len) {
  if (E < 1) return fail(err, len, "placement: %d experts, need at least 1", E);
  if (P < 1) return fail(err, len, "placement: %d ranks, need at least 1", P);
  if ((long long)E * P > PLACEMENT_MAX_CELLS)
    return fail(err, len, "placement: %d experts on %d ranks is more than %d expert-ranks", E, P,
                PLACEMENT_MAX_CELLS);
  if (X < 0) return fail(err, len, "placement: %d replicas, cannot be negative", X);
  if ((long long)X > (long long)E * (P - 1))
    return fail(err, len,
                "placement: %d replicas of %d experts on %d ranks: at most E*(P-1) = %lld, since "
                "a rank holds at most one copy of an expert",
                X, E, P, (long long)E * (P - 1));
  if ((E + X) % P != 0)
    return fail(err, len,
                "placement: E + X = %d + %d slots do not split evenly over %d ranks ((E+X) %% P "
                "must be 0)",
                E, X, P);
  return 0;
}

void placement_free(placement_t* pl) {
  free(pl->slot_expert), free(pl->slot_rank), free(pl->copies), free(pl->first);
  free(pl->expert_slots);
  memset(pl, 0, sizeof(*pl));
}

/* Zeroed tables for a shape already checked; 0, or -1 without memory. */
static int placement_alloc(placement_t* pl, int E, int P, int X) {
  memset(pl, 0, sizeof(*pl));
  pl->E = E, pl->P = P, pl->X = X;
  pl->slots = E + X;
  pl->spr = pl->slots / P;
  pl->slot_expert = calloc(pl->slots, sizeof(int));
  pl->slot_rank = calloc(pl->slots, sizeof(int));
  pl->copies = calloc(E, sizeof(int));
  pl->first = calloc(E + 1, sizeof(int));
  pl->expert_slots = calloc(pl->slots, sizeof(int));
  if (pl->slot_expert && pl->slot_rank && pl->copies && pl->first && pl->expert_slots) return 0;
  placement_free(pl);
  return -1;
}

/* The tables that follow from slot_expert: ranks, copies, each expert's
 * slots (ascending, so its copies' ranks ascend too). */
static void placement_derive(placement_t* pl) {
  memset(pl->copies, 0, pl->E * sizeof(int));
  for (int s = 0; s < pl->slots; s++) {
    pl->slot_rank[s] = s / pl->spr;
    pl->copies[pl->slot_expert[s]]++;
  }
  pl->first[0] = 0;
  for (int e = 0; e < pl->E; e++) pl->first[e + 1] = pl->first[e] + pl->copies[e];
  int* next = pl->first; /* filled in place below, then restored */
  for (int s = 0; s < pl->slots; s++) pl->expert_slots[next[pl->slot_expert[s]]++] = s;
  for (int e = pl->E; e > 0; e--) pl->first[e] = pl->first[e - 1];
  pl->first[0] = 0;
}

int placement_copy(placement_t* dst, const placement_t* src) {
  placement_t t;
  if (placement_alloc(&t, src->E, src->P, src->X) != 0) return -1;
  memcpy(t.slot_expert, src->slot_expert, src->slots * sizeof(int));
  placement_derive(&t);
  placement_free(dst);
  *dst = t;
  return 0;
}

int placement_equal(const placement_t* a, const placement_t* b) {
  if (a->E != b->E || a->P != b->P || a->X != b->X) return 0;
  return memcmp(a->slot_expert, b->slot_expert, a->slots * sizeof(int)) == 0;
}

int placement_holds(const placement_t* pl, int r, int e) {
  for (int k = pl->first[e]; k < pl->first[e + 1]; k++)
    if (pl->slot_rank[pl->expert_slots[k]] == r) return 1;
  return 0;
}

int placement_check(const placement_t* pl, char* err, size_t len) {
  if (shape_check(pl->E, pl->P, pl->X, err, len) != 0) return -1;
  if (pl->slots != pl->E + pl->X || pl->spr != pl->slots / pl->P)
    return fail(err, len, "placement: %d slots, %d per rank for E %d X %d P %d", pl->slots, pl->spr,
                pl->E, pl->X, pl->P);
  for (int s = 0; s < pl->slots; s++) {
    int e = pl->slot_expert[s];
    if (e < 0 || e >= pl->E) return fail(err, len, "placement: slot %d holds expert %d", s, e);
    if (s % pl->spr > 0 && e <= pl->slot_expert[s - 1])
      return fail(err, len,
                  "placement: rank %d's slots are not distinct ascending experts (slot %d: "
                  "expert %d after %d)",
                  s / pl->spr, s, e, pl->slot_expert[s - 1]);
    if (pl->slot_rank[s] != s / pl->spr)
      return fail(err, len, "placement: slot %d on rank %d, not %d", s, pl->slot_rank[s],
                  s / pl->spr);
  }
  for (int e = 0; e < pl->E; e++) {
    int n = pl->first[e + 1] - pl->first[e];
    if (pl->copies[e] < 1 || pl->copies[e] != n)
      return fail(err, len, "placement: expert %d has %d copies (%d listed)", e, pl->copies[e], n);
    for (int k = pl->first[e]; k < pl->first[e + 1]; k++)
      if (pl->slot_expert[pl->expert_slots[k]] != e)
        return fail(err, len, "placement: expert %d lists slot %d, which holds %d", e,
                    pl->expert_slots[k], pl->slot_expert[pl->expert_slots[k]]);
  }
  return 0;
}

/* --- building: ranks filled copy by copy --------------------------------------- */

/* The state of a placement being built: each rank's experts (unordered),
 * which experts it has, and its load. */
typedef struct build {
  int E, P, spr;
  int* experts;       /* [P][spr] */
  int* fill;          /* [P] */
  unsigned char* has; /* [P][E] */
  double* load;       /* [P] */
} build_t;

static void build_free(build_t* b) { free(b->experts), free(b->fill), free(b->has), free(b->load); }

static int build_init(build_t* b, int E, int P, int spr) {
  b->E = E, b->P = P, b->spr = spr;
  b->experts = calloc((size_t)P * spr, sizeof(int));
  b->fill = calloc(P, sizeof(int));
  b->has = calloc((size_t)P * E, 1);
  b->load = calloc(P, sizeof(double));
  if (b->experts && b->fill && b->has && b->load) return 0;
  build_free(b);
  return -1;
}

static int build_room(const build_t* b, int r, int e) {
  return b->fill[r] < b->spr && !b->has[(size_t)r * b->E + e];
}

static void build_put(build_t* b, int r, int e, double w) {
  b->experts[(size_t)r * b->spr + b->fill[r]++] = e;
  b->has[(size_t)r * b->E + e] = 1;
  b->load[r] += w;
}

/* The way out when every rank with room already holds e: the least-loaded
 * rank q without e (full, then) gives a copy of one of its experts f that
 * r, the least-loaded rank with room, lacks, to r, and takes e.  Such an f
 * exists: q holds spr distinct experts, none of them e, and r fewer than
 * spr including e.  f is the one that keeps max(load q, load r) lowest. */
static void build_repair(build_t* b, int e, const double* w) {
  int r = -1, q = -1;
  for (int i = 0; i < b->P; i++) {
    if (b->fill[i] < b->spr && (r < 0 || b->load[i] < b->load[r])) r = i;
    if (!b->has[(size_t)i * b->E + e] && (q < 0 || b->load[i] < b->load[q])) q = i;
  }
  int best = -1;
  double best_max = 0;
  for (int i = 0; i < b->spr; i++) {
    int f = b->experts[(size_t)q * b->spr + i];
    if (b->has[(size_t)r * b->E + f]) continue;
    double m = fmax(b->load[q] - w[f] + w[e], b->load[r] + w[f]);
    if (best < 0 || m < best_max || (m == best_max && f < b->experts[(size_t)q * b->spr + best]))
      best = i, best_max = m;
  }
  int f = b->experts[(size_t)q * b->spr + best];
  b->experts[(size_t)q * b->spr + best] = e;
  b->has[(size_t)q * b->E + f] = 0;
  b->has[(size_t)q * b->E + e] = 1;
  b->load[q] += w[e] - w[f];
  build_put(b, r, f, w[f]);
}

static int cmp_int(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

/* out (zeroed or a placement) from a full build: rank rank_of[i] gets
 * build rank i's experts, ascending (rank_of NULL: the same rank). */
static int build_finish(const build_t* b, const int* rank_of, int X, placement_t* out) {
  placement_t t;
  if (placement_alloc(&t, b->E, b->P, X) != 0) return -1;
  for (int i = 0; i < b->P; i++) {
    int* dst = t.slot_expert + (size_t)(rank_of ? rank_of[i] : i) * b->spr;
    memcpy(dst, b->experts + (size_t)i * b->spr, b->spr * sizeof(int));
    qsort(dst, b->spr, sizeof(int), cmp_int);
  }
  placement_derive(&t);
  placement_free(out);
  *out = t;
  return 0;
}

int placement_default(placement_t* pl, int E, int P, int X, char* err, size_t len) {
  if (shape_check(E, P, X, err, len) != 0) return -1;
  build_t b;
  double* zero = calloc(E, sizeof(double)); /* no loads: the repair's ties decide */
  if (!zero || build_init(&b, E, P, (E + X) / P) != 0) {
    free(zero);
    return fail(err, len, "placement: out of memory");
  }
  for (int e = 0; e < E; e++) build_put(&b, (int)((long long)e * P / E), e, 0.0);
  int cursor = 0;
  for (int k = 0; k < X; k++) {
    int e = k % E, placed = 0;
    for (int i = 0; i < P && !placed; i++) {
      int r = (cursor + i) % P;
      if (build_room(&b, r, e)) build_put(&b, r, e, 0.0), cursor = r + 1, placed = 1;
    }
    if (!placed) build_repair(&b, e, zero);
  }
  int rc = build_finish(&b, NULL, X, pl);
  build_free(&b);
  free(zero);
  return rc == 0 ? 0 : fail(err, len, "placement: out of memory");
}

/* --- loads ---------------------------------------------------------------------- */

void placement_rank_load(const placement_t* pl, const double* load, double* per_rank) {
  for (int r = 0; r < pl->P; r++) {
    double sum = 0.0;
    for (int s = r * pl->spr; s < (r + 1) * pl->spr; s++) {
      int e = pl->slot_expert[s];
      sum += load[e] / pl->copies[e];
    }
    per_rank[r] = sum;
  }
}

/* The largest per-rank load; the mean through *mean when not NULL. */
static double rank_load_max(const placement_t* pl, const double* load, double* mean) {
  double* per = malloc(pl->P * sizeof(double));
  if (!per) return HUGE_VAL; /* no memory: reads as no improvement */
  placement_rank_load(pl, load, per);
  double mx = 0.0, sum = 0.0;
  for (int r = 0; r < pl->P; r++) mx = fmax(mx, per[r]), sum += per[r];
  free(per);
  if (mean) *mean = sum / pl->P;
  return mx;
}

double placement_imbalance(const placement_t* pl, const double* load) {
  double mean;
  double mx = rank_load_max(pl, load, &mean);
  return mean > 0.0 ? mx / mean : 1.0;
}

/* --- balancing --------------------------------------------------------------------- */

/* One expert in LPT order: heaviest per copy first, then more copies (the
 * harder to place), then the lower id. */
typedef struct lpt_item {
  double w;
  int copies, e;
} lpt_item_t;

static int cmp_lpt(const void* a, const void* b) {
  const lpt_item_t *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  if (x->copies != y->copies) return x->copies > y->copies ? -1 : 1;
  return (x->e > y->e) - (x->e < y->e);
}

/* X replicas, one at a time, to the expert with the most load per copy
 * (ties: fewer copies, then the lower id; zero loads replicate 0, 1, ...). */
static void choose_copies(const double* load, int E, int P, int X, int* copies) {
  for (int e = 0; e < E; e++) copies[e] = 1;
  for (int k = 0; k < X; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      if (copies[e] >= P) continue;
      if (best < 0) {
        best = e;
        continue;
      }
      double we = load[e] / copies[e], wb = load[best] / copies[best];
      if (we > wb || (we == wb && copies[e] < copies[best])) best = e;
    }
    copies[best]++;
  }
}

/* The least-loaded rank with room for e; ties: one that held e in cur,
 * then the lower rank.  -1 when no rank with room lacks e. */
static int lpt_rank(const build_t* b, int e, const placement_t* cur) {
  int best = -1, best_old = 0;
  for (int r = 0; r < b->P; r++) {
    if (!build_room(b, r, e)) continue;
    int old = cur && placement_holds(cur, r, e);
    if (best < 0 || b->load[r] < b->load[best] || (b->load[r] == b->load[best] && old && !best_old))
      best = r, best_old = old;
  }
  return best;
}

/* Steps 1 and 2 of placement_balance into b (initialised). */
static int balance_lpt(build_t* b, const placement_t* cur, const double* load, int X) {
  int E = b->E;
  int* copies = malloc(E * sizeof(int));
  double* w = malloc(E * sizeof(double));
  lpt_item_t* order = malloc(E * sizeof(lpt_item_t));
  if (!copies || !w || !order) {
    free(copies), free(w), free(order);
    return -1;
  }
  choose_copies(load, E, b->P, X, copies);
  for (int e = 0; e < E; e++) {
    w[e] = load[e] / copies[e];
    order[e] = (lpt_item_t){w[e], copies[e], e};
  }
  qsort(order, E, sizeof(*order), cmp_lpt);
  for (int i = 0; i < E; i++)
    for (int c = 0; c < order[i].copies; c++) {
      int e = order[i].e, r = lpt_rank(b, e, cur);
      if (r >= 0) build_put(b, r, e, w[e]);
      else build_repair(b, e, w);
    }
  free(copies), free(w), free(order);
  return 0;
}

/* A (new rank, old rank) pair and the experts they share. */
typedef struct pair {
  int shared, bin, rank;
} pair_t;

static int cmp_pair(const void* a, const void* b) {
  const pair_t *x = a, *y = b;
  if (x->shared != y->shared) return x->shared > y->shared ? -1 : 1;
  if (x->bin != y->bin) return x->bin < y->bin ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Step 3: rank_of[i] for build rank i, matching cur's ranks greedily by
 * the experts they share (without cur: the identity). */
static int balance_rename(const build_t* b, const placement_t* cur, int* rank_of) {
  int P = b->P;
  for (int i = 0; i < P; i++) rank_of[i] = i;
  if (!cur || P == 1) return 0;
  pair_t* pairs = malloc((size_t)P * P * sizeof(pair_t));
  unsigned char* used = calloc(2 * (size_t)P, 1);
  if (!pairs || !used) {
    free(pairs), free(used);
    return -1;
  }
  for (int i = 0; i < P; i++)
    for (int r = 0; r < P; r++) {
      int n = 0;
      for (int k = 0; k < b->fill[i]; k++) n += placement_holds(cur, r, b->experts[i * b->spr + k]);
      pairs[(size_t)i * P + r] = (pair_t){n, i, r};
    }
  qsort(pairs, (size_t)P * P, sizeof(pair_t), cmp_pair);
  for (size_t k = 0; k < (size_t)P * P; k++)
    if (!used[pairs[k].bin] && !used[P + pairs[k].rank]) {
      rank_of[pairs[k].bin] = pairs[k].rank;
      used[pairs[k].bin] = used[P + pairs[k].rank] = 1;
    }
  free(pairs), free(used);
  return 0;
}

static int load_check(const double* load, int E, char* err, size_t len) {
  for (int e = 0; e < E; e++)
    if (!(load[e] >= 0.0) || isinf(load[e]))
      return fail(err, len, "placement: load of expert %d is %g; loads must be finite and >= 0", e,
                  load[e]);
  return 0;
}

int placement_balance(placement_t* out, const placement_t* cur, const double* load, int E, int P,
                      int X, double margin, char* err, size_t len) {
  if (shape_check(E, P, X, err, len) != 0 || load_check(load, E, err, len) != 0) return -1;
  if (cur && (cur->E != E || cur->P != P))
    return fail(err, len,
                "placement: the current placement is of %d experts on %d ranks, not %d on %d",
                cur->E, cur->P, E, P);
  if (!(margin >= 0.0 && margin < 1.0))
    return fail(err, len, "placement: margin %g, must be in [0, 1)", margin);
  if (out == cur) return fail(err, len, "placement: out and cur are the same placement");
  build_t b;
  int rank_of_small[64], *rank_of = P <= 64 ? rank_of_small : malloc(P * sizeof(int));
  placement_t t = {0};
  int rc = -1;
  if (rank_of && build_init(&b, E, P, (E + X) / P) == 0) {
    if (balance_lpt(&b, cur, load, X) == 0 && balance_rename(&b, cur, rank_of) == 0)
      rc = build_finish(&b, rank_of, X, &t);
    build_free(&b);
  }
  if (rank_of != rank_of_small) free(rank_of);
  if (rc != 0) return fail(err, len, "placement: out of memory");
  /* Step 4: keep cur unless the new one lowers the max by the margin. */
  if (cur && cur->X == X &&
      !(rank_load_max(&t, load, NULL) < (1.0 - margin) * rank_load_max(cur, load, NULL))) {
    placement_free(&t);
    if (placement_copy(&t, cur) != 0) return fail(err, len, "placement: out of memory");
  }
  int changed = !cur || !placement_equal(&t, cur);
  placement_free(out);
  *out = t;
  return changed;
}

/* --- routing and moves --------------------------------------------------------------- */

int placement_route(const placement_t* pl, const int32_t* expert, int n, int K,
                    long long first_token, int32_t* slot) {
  int rc = 0;
  for (int t = 0; t < n; t++)
    for (int j = 0; j < K; j++) {
      int32_t e = expert[(size_t)t * K + j];
      int32_t s = -1;
      if (e >= 0 && e < pl->E) {
        long long c = pl->copies[e], k = (first_token + t + j) % c;
        if (k < 0) k += c;
        s = pl->expert_slots[pl->first[e] + k];
      } else if (e != -1) {
        rc = -1;
      }
      slot[(size_t)t * K + j] = s;
    }
  return rc;
}

int placement_moves(const placement_t* old, const placement_t* nw, placement_move_t* moves,
                    char* err, size_t len) {
  if (old->E != nw->E || old->P != nw->P)
    return fail(err, len, "placement: moves between %d experts on %d ranks and %d on %d", old->E,
                old->P, nw->E, nw->P);
  int* given = calloc(old->slots, sizeof(int)); /* moves sent by each old copy */
  if (!given) return fail(err, len, "placement: out of memory");
  int n = 0;
  for (int s = 0; s < nw->slots; s++) {
    int r = nw->slot_rank[s], e = nw->slot_expert[s];
    if (placement_holds(old, r, e)) continue;
    int best = old->first[e];
    for (int k = old->first[e] + 1; k < old->first[e + 1]; k++)
      if (given[k] < given[best]) best = k;
    given[best]++;
    moves[n++] = (placement_move_t){r, e, old->slot_rank[old->expert_slots[best]]};
  }
  free(given);
  return n;
}

/* --- the running sums ------------------------------------------------------------------ */

int placement_tracker_init(placement_tracker_t* t, int layers, int E, int P, int X, int every,
                           double margin, char* err, size_t len) {
  if (shape_check(E, P, X, err, len) != 0) return -1;
  if (layers < 1) return fail(err, len, "placement: %d layers, need at least 1", layers);
  if (every < 1) return fail(err, len, "placement: rebalance every %d steps, need >= 1", every);
  if (!(margin >= 0.0 && margin < 1.0))
    return fail(err, len, "placement: margin %g, must be in [0, 1)", margin);
  double* load = calloc((size_t)layers * E, sizeof(double));
  if (!load) return fail(err, len, "placement: out of memory");
  *t = (placement_tracker_t){layers, E, P, X, every, margin, 0, load};
  return 0;
}

void placement_tracker_free(placement_tracker_t* t) {
  free(t->load);
  memset(t, 0, sizeof(*t));
}

void placement_tracker_add(placement_tracker_t* t, int layer, const float* counts) {
  double* sum = t->load + (size_t)layer * t->E;
  for (int e = 0; e < t->E; e++) sum[e] += counts[e];
}

int placement_tracker_step(placement_tracker_t* t, const placement_t* cur, placement_t* nw,
                           int* changed, char* err, size_t len) {
  if (++t->steps < t->every) return 0;
  for (int l = 0; l < t->layers; l++) {
    int rc = placement_balance(&nw[l], &cur[l], t->load + (size_t)l * t->E, t->E, t->P, t->X,
                               t->margin, err, len);
    if (rc < 0) return -1;
    changed[l] = rc;
  }
  memset(t->load, 0, (size_t)t->layers * t->E * sizeof(double));
  t->steps = 0;
  return 1;
}
