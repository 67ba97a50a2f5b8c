/* moe/placement.c without processes: the default placement is today's
 * blocks; balancing skewed loads (Zipf, one expert with half the load) for
 * E = 8, 16, 64, P = 2, 4, 8, X = 0..P lowers max/mean and keeps the rules
 * (slots per rank, one copy of an expert per rank, every expert at least
 * once, X replicas); it is deterministic, sticks to the current placement
 * when that is as good, and renames ranks to move fewer experts; routing
 * splits a replicated expert's tokens evenly, the same however the batch
 * is cut; random shapes up to P copies of an expert keep the rules too;
 * the moves are exactly the newly held (rank, expert) pairs, from
 * holders, spread over them; the tracker rebalances every N steps; bad
 * shapes and loads are refused with a message.  Prints the measured
 * max/mean per case.  Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "placement.h"
#include "unit_check.h"

static char err[256];

/* Zipf loads where expert hot gets half of the total (1000 per expert on
 * average) and the others share the rest as 1/(rank + 1). */
static void skewed_loads(double* load, int E, int hot) {
  double zsum = 0.0, total = 1000.0 * E;
  for (int i = 1; i < E; i++) zsum += 1.0 / i;
  for (int e = 0, i = 1; e < E; e++) {
    if (e == hot) {
      load[e] = E > 1 ? 0.5 * total : total;
      continue;
    }
    load[e] = 0.5 * total * (1.0 / i++) / zsum;
  }
}

static void check_rules(const placement_t* pl, int E, int P, int X, const char* what) {
  CHECK(placement_check(pl, err, sizeof(err)) == 0, "%s: %s", what, err);
  CHECK(pl->E == E && pl->P == P && pl->X == X && pl->slots == E + X && pl->spr == (E + X) / P,
        "%s: shape E %d P %d X %d slots %d spr %d", what, pl->E, pl->P, pl->X, pl->slots, pl->spr);
  int total = 0;
  for (int e = 0; e < E; e++) {
    CHECK(pl->copies[e] >= 1 && pl->copies[e] <= P, "%s: expert %d has %d copies", what, e,
          pl->copies[e]);
    int on = 0;
    for (int r = 0; r < P; r++) on += placement_holds(pl, r, e);
    CHECK(on == pl->copies[e], "%s: expert %d on %d ranks, %d copies", what, e, on, pl->copies[e]);
    total += pl->copies[e];
  }
  CHECK(total == E + X, "%s: %d copies in all, %d slots", what, total, E + X);
}

static void check_default(void) {
  static const int ep[][2] = {{8, 1}, {8, 2}, {8, 4}, {8, 8}, {16, 4}, {64, 8}, {6, 3}};
  for (size_t i = 0; i < sizeof(ep) / sizeof(ep[0]); i++) {
    int E = ep[i][0], P = ep[i][1];
    placement_t pl = {0};
    CHECK(placement_default(&pl, E, P, 0, err, sizeof(err)) == 0, "default E %d P %d: %s", E, P,
          err);
    check_rules(&pl, E, P, 0, "default");
    for (int s = 0; s < E; s++)
      CHECK(pl.slot_expert[s] == s && pl.slot_rank[s] == s / (E / P),
            "default E %d P %d: slot %d holds %d on rank %d", E, P, s, pl.slot_expert[s],
            pl.slot_rank[s]);
    placement_free(&pl);
  }
  /* With replicas: the replicas are of experts 0..X-1 (k % E past E) and
   * the primaries keep their blocks where the replicas fit around them
   * (keep = 1); with E 8 P 2 X 2 both replicas (of 0 and 1, rank 0's) need
   * rank 1, which has room for one, so a primary moves. */
  static const int epx[][4] = {{8, 4, 4, 1},  {8, 2, 2, 0}, {6, 4, 2, 1},
                               {4, 4, 12, 1}, {2, 2, 2, 1}, {3, 3, 6, 1}};
  for (size_t i = 0; i < sizeof(epx) / sizeof(epx[0]); i++) {
    int E = epx[i][0], P = epx[i][1], X = epx[i][2], keep = epx[i][3];
    placement_t pl = {0};
    CHECK(placement_default(&pl, E, P, X, err, sizeof(err)) == 0, "default E %d P %d X %d: %s", E,
          P, X, err);
    check_rules(&pl, E, P, X, "default with replicas");
    for (int e = 0; e < E; e++) {
      int want = 1 + X / E + (e < X % E);
      CHECK(pl.copies[e] == want, "default E %d P %d X %d: expert %d has %d copies, not %d", E, P,
            X, e, pl.copies[e], want);
      CHECK(!keep || placement_holds(&pl, (int)((long long)e * P / E), e),
            "default E %d P %d X %d: expert %d left its block", E, P, X, e);
    }
    placement_free(&pl);
  }
}

/* The max per-rank load cannot be below the mean nor below the heaviest
 * copy; it must be no worse than the default's with the same X nor than
 * today's (X = 0, where P divides E), and below both unless nothing can
 * move (one expert per rank and no replica). */
static void check_balance_case(int E, int P, int X, int hot) {
  double* load = malloc(E * sizeof(double));
  double* per = malloc(P * sizeof(double));
  skewed_loads(load, E, hot);
  placement_t today = {0}, dflt = {0}, bal = {0}, again = {0};
  int has_today = E % P == 0, fixed = X == 0 && E == P;
  placement_default(&dflt, E, P, X, err, sizeof(err));
  placement_default(&today, E, P, has_today ? 0 : X, err, sizeof(err));
  int rc = placement_balance(&bal, NULL, load, E, P, X, 0.0, err, sizeof(err));
  CHECK(rc == 1, "balance E %d P %d X %d: %d %s", E, P, X, rc, err);
  char what[64];
  snprintf(what, sizeof(what), "balance E %d P %d X %d", E, P, X);
  check_rules(&bal, E, P, X, what);
  double before = placement_imbalance(&today, load), dimb = placement_imbalance(&dflt, load);
  double after = placement_imbalance(&bal, load);
  placement_rank_load(&bal, load, per);
  double sum = 0.0, total = 0.0, mx = 0.0, heaviest = 0.0;
  for (int r = 0; r < P; r++) sum += per[r], mx = fmax(mx, per[r]);
  for (int e = 0; e < E; e++) total += load[e], heaviest = fmax(heaviest, load[e] / bal.copies[e]);
  CHECK(fabs(sum - total) <= 1e-9 * total, "%s: rank loads sum to %g, not %g", what, sum, total);
  CHECK(mx >= total / P * (1 - 1e-12) && mx >= heaviest * (1 - 1e-12),
        "%s: max %g below a bound (mean %g, heaviest copy %g)", what, mx, total / P, heaviest);
  CHECK(after <= dimb * (1 + 1e-12) && after <= before * (1 + 1e-12),
        "%s: max/mean %.4f worse than the default's %.4f or today's %.4f", what, after, dimb,
        before);
  CHECK(fixed || (after < before && after < dimb),
        "%s: max/mean %.4f not below the default's %.4f and today's %.4f", what, after, dimb,
        before);
  /* With a replica per rank the hot expert (half the load) spreads: its
   * copies alone no longer exceed the mean once it has P copies. */
  if (X >= P - 1 && P > 1)
    CHECK(bal.copies[hot] >= 2, "%s: the hot expert has %d copies", what, bal.copies[hot]);
  CHECK(placement_balance(&again, NULL, load, E, P, X, 0.0, err, sizeof(err)) == 1 &&
            placement_equal(&bal, &again),
        "%s: not deterministic", what);
  printf("E %2d P %d X %d: max/mean today %s%.3f, default with X %.3f, balanced %.3f\n", E, P, X,
         has_today ? "" : "(none: the default with X) ", before, dimb, after);
  placement_free(&today), placement_free(&dflt), placement_free(&bal), placement_free(&again);
  free(load), free(per);
}

static void check_balance(void) {
  static const int Es[] = {8, 16, 64}, Ps[] = {2, 4, 8};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int X = 0; X <= Ps[j]; X++)
        if ((Es[i] + X) % Ps[j] == 0) check_balance_case(Es[i], Ps[j], X, Es[i] / 3);
  /* Shapes where E is not a multiple of P. */
  check_balance_case(6, 4, 2, 5);
  check_balance_case(12, 8, 4, 0);
  check_balance_case(10, 4, 6, 9);
  check_balance_case(14, 4, 2, 13);
}

/* A placement with ranks renamed by r -> (r + shift) % P. */
static void rotate(const placement_t* src, int shift, placement_t* dst) {
  placement_copy(dst, src);
  for (int r = 0; r < src->P; r++)
    memcpy(dst->slot_expert + (size_t)((r + shift) % src->P) * src->spr,
           src->slot_expert + (size_t)r * src->spr, src->spr * sizeof(int));
  placement_t t = {0};
  placement_copy(&t, dst); /* recomputes the derived tables */
  placement_free(dst);
  *dst = t;
}

static void check_sticky(void) {
  int E = 16, P = 4, X = 4;
  double load[16], near[16];
  skewed_loads(load, E, 3);
  for (int e = 0; e < E; e++) near[e] = load[e] * (1.0 + 0.01 * ((e * 7) % 5 - 2));
  placement_t a = {0}, b = {0}, rot = {0}, dflt = {0}, free_bal = {0}, sticky = {0};
  placement_move_t mv[32];
  placement_balance(&a, NULL, load, E, P, X, 0.0, err, sizeof(err));
  /* The same loads again: nothing better, cur kept. */
  CHECK(placement_balance(&b, &a, load, E, P, X, 0.0, err, sizeof(err)) == 0 &&
            placement_equal(&a, &b),
        "rebalancing the same loads changed the placement");
  CHECK(placement_moves(&a, &b, mv, err, sizeof(err)) == 0, "moves to the same placement");
  /* Loads within 2%: a margin of 5% keeps cur. */
  CHECK(placement_balance(&b, &a, near, E, P, X, 0.05, err, sizeof(err)) == 0 &&
            placement_equal(&a, &b),
        "loads within 2%% and a 5%% margin changed the placement");
  /* From a placement that is the balanced one with ranks renamed, the
   * renaming step finds it again: nothing moves. */
  rotate(&a, 1, &rot);
  CHECK(placement_check(&rot, err, sizeof(err)) == 0, "rotated: %s", err);
  placement_t c = {0};
  int rc = placement_balance(&c, &rot, near, E, P, X, 0.0, err, sizeof(err));
  int n = placement_moves(&rot, &c, mv, err, sizeof(err));
  CHECK(rc >= 0 && n <= 2, "from a renamed balanced placement %d moves (rc %d)", n, rc);
  /* From that renamed placement to the balance of other loads (another
   * hot expert): renaming to match the current ranks moves fewer experts
   * than taking the LPT's ranks as they come. */
  double other[16];
  skewed_loads(other, E, 9);
  placement_t plain = {0}, renamed = {0};
  placement_balance(&plain, NULL, other, E, P, X, 0.0, err, sizeof(err));
  CHECK(placement_balance(&renamed, &rot, other, E, P, X, 0.0, err, sizeof(err)) == 1,
        "other loads: no new placement");
  int n_plain = placement_moves(&rot, &plain, mv, err, sizeof(err));
  int n_renamed = placement_moves(&rot, &renamed, mv, err, sizeof(err));
  CHECK(n_renamed < n_plain, "other loads: %d moves with renaming, %d without", n_renamed, n_plain);
  printf("E 16 P 4 X 4, the hot expert 3 -> 9 from a renamed placement: %d moves with "
         "renaming, %d without\n",
         n_renamed, n_plain);
  placement_free(&plain), placement_free(&renamed);
  /* From today's placement the renaming saves moves. */
  placement_default(&dflt, E, P, X, err, sizeof(err));
  placement_balance(&free_bal, NULL, load, E, P, X, 0.0, err, sizeof(err));
  placement_balance(&sticky, &dflt, load, E, P, X, 0.0, err, sizeof(err));
  int n_free = placement_moves(&dflt, &free_bal, mv, err, sizeof(err));
  int n_sticky = placement_moves(&dflt, &sticky, mv, err, sizeof(err));
  CHECK(n_sticky <= n_free, "renaming gave %d moves, %d without", n_sticky, n_free);
  CHECK(fabs(placement_imbalance(&sticky, load) - placement_imbalance(&free_bal, load)) < 1e-12,
        "renaming changed the max/mean: %g against %g", placement_imbalance(&sticky, load),
        placement_imbalance(&free_bal, load));
  printf("E 16 P 4 X 4 from the default placement: %d moves with renaming, %d without\n", n_sticky,
         n_free);
  placement_free(&a), placement_free(&b), placement_free(&rot), placement_free(&c);
  placement_free(&dflt), placement_free(&free_bal), placement_free(&sticky);
}

static void check_route(void) {
  int E = 8, P = 4, X = 4, K = 2, n = 1000;
  double load[8];
  skewed_loads(load, E, 0);
  placement_t pl = {0};
  placement_balance(&pl, NULL, load, E, P, X, 0.0, err, sizeof(err));
  int32_t* ids = malloc((size_t)n * K * sizeof(int32_t));
  int32_t *s1 = malloc((size_t)n * K * sizeof(int32_t)), *s2 = malloc((size_t)n * K * 4);
  moe_rng_t rng;
  moe_rng_seed(&rng, 5);
  for (int t = 0; t < n; t++) {
    int a = moe_rng_uniform(&rng) < 0.6 ? 0 : (int)(moe_rng_uniform(&rng) * E);
    int b = (a + 1 + (int)(moe_rng_uniform(&rng) * (E - 1))) % E;
    ids[t * K] = a, ids[t * K + 1] = t % 17 == 0 ? -1 : b;
  }
  long long first = 12345;
  CHECK(placement_route(&pl, ids, n, K, first, s1) == 0, "route refused good ids");
  /* The same batch in two cuts (rows [0, 377) and [377, n)) routes the same. */
  placement_route(&pl, ids, 377, K, first, s2);
  placement_route(&pl, ids + 377 * K, n - 377, K, first + 377, s2 + 377 * K);
  CHECK(memcmp(s1, s2, (size_t)n * K * sizeof(int32_t)) == 0, "route depends on the cut");
  int* per_slot = calloc(pl.slots, sizeof(int));
  for (int i = 0; i < n * K; i++) {
    if (ids[i] < 0) {
      CHECK(s1[i] == -1, "id -1 routed to slot %d", s1[i]);
      continue;
    }
    CHECK(s1[i] >= 0 && s1[i] < pl.slots && pl.slot_expert[s1[i]] == ids[i],
          "(token, j) %d of expert %d to slot %d", i, ids[i], s1[i]);
    per_slot[s1[i]]++;
  }
  /* Even: the copies of an expert get its (token, j) pairs by (t + j) % c,
   * so with random routing each copy's count is within a few standard
   * deviations of the mean (the seed is fixed: no flakiness). */
  for (int e = 0; e < E; e++) {
    int lo = 1 << 30, hi = 0, sum = 0;
    for (int k = pl.first[e]; k < pl.first[e + 1]; k++) {
      int c = per_slot[pl.expert_slots[k]];
      lo = c < lo ? c : lo, hi = c > hi ? c : hi, sum += c;
    }
    double mean = (double)sum / pl.copies[e], tol = 3.0 * sqrt(mean) + 2.0;
    CHECK(lo >= mean - tol && hi <= mean + tol, "expert %d: copies get %d to %d of %d", e, lo, hi,
          sum);
    if (pl.copies[e] > 1)
      printf("route: expert %d, %d copies, %d (token, j): %d to %d per copy\n", e, pl.copies[e],
             sum, lo, hi);
  }
  /* The expert with the most copies chosen by 64 consecutive tokens:
   * exactly even (64 / c or one more per copy). */
  int hot = 0;
  for (int e = 1; e < E; e++) hot = pl.copies[e] > pl.copies[hot] ? e : hot;
  int c = pl.copies[hot];
  int32_t one[64], out[64];
  for (int t = 0; t < 64; t++) one[t] = hot;
  placement_route(&pl, one, 64, 1, 7, out);
  memset(per_slot, 0, pl.slots * sizeof(int));
  for (int t = 0; t < 64; t++) per_slot[out[t]]++;
  for (int k = pl.first[hot]; k < pl.first[hot + 1]; k++)
    CHECK(per_slot[pl.expert_slots[k]] == 64 / c || per_slot[pl.expert_slots[k]] == 64 / c + 1,
          "64 tokens of expert %d over %d copies: %d on slot %d", hot, c,
          per_slot[pl.expert_slots[k]], pl.expert_slots[k]);
  /* Ids outside [-1, E) get -1 and the call says so. */
  int32_t bad[4] = {0, E, -2, -1}, sb[4];
  CHECK(placement_route(&pl, bad, 2, 2, 0, sb) == -1 && sb[1] == -1 && sb[2] == -1 && sb[3] == -1 &&
            sb[0] >= 0,
        "bad ids not refused");
  free(ids), free(s1), free(s2), free(per_slot);
  placement_free(&pl);
}

/* The moves from old to nw must be exactly the (rank, expert) pairs nw
 * holds and old does not, each from a holder in old, spread over them. */
static void check_moves_pair(const placement_t* old, const placement_t* nw, const char* what) {
  placement_move_t* mv = malloc(nw->slots * sizeof(*mv));
  int n = placement_moves(old, nw, mv, err, sizeof(err));
  int want = 0;
  for (int r = 0; r < nw->P; r++)
    for (int e = 0; e < nw->E; e++)
      want += placement_holds(nw, r, e) && !placement_holds(old, r, e);
  CHECK(n == want, "%s: %d moves, %d newly held pairs", what, n, want);
  int* sent = calloc((size_t)old->P * old->E, sizeof(int));
  for (int i = 0; i < n; i++) {
    CHECK(placement_holds(nw, mv[i].rank, mv[i].expert) &&
              !placement_holds(old, mv[i].rank, mv[i].expert),
          "%s: move %d: rank %d expert %d is not newly held", what, i, mv[i].rank, mv[i].expert);
    CHECK(placement_holds(old, mv[i].from, mv[i].expert), "%s: move %d from %d, not a holder", what,
          i, mv[i].from);
    for (int j = 0; j < i; j++)
      CHECK(mv[j].rank != mv[i].rank || mv[j].expert != mv[i].expert, "%s: move %d twice", what, i);
    sent[mv[i].expert * old->P + mv[i].from]++;
  }
  for (int e = 0; e < old->E; e++) {
    int lo = 1 << 30, hi = 0;
    for (int r = 0; r < old->P; r++)
      if (placement_holds(old, r, e))
        lo = sent[e * old->P + r] < lo ? sent[e * old->P + r] : lo,
        hi = sent[e * old->P + r] > hi ? sent[e * old->P + r] : hi;
    CHECK(hi - lo <= 1, "%s: expert %d's holders send %d to %d moves", what, e, lo, hi);
  }
  free(mv), free(sent);
}

static void check_moves(void) {
  int E = 16, P = 4;
  double a[16], b[16];
  skewed_loads(a, E, 2);
  skewed_loads(b, E, 11);
  placement_t d0 = {0}, d4 = {0}, ba = {0}, bb = {0}, b8 = {0};
  placement_default(&d0, E, P, 0, err, sizeof(err));
  placement_default(&d4, E, P, 4, err, sizeof(err));
  placement_balance(&ba, NULL, a, E, P, 4, 0.0, err, sizeof(err));
  placement_balance(&bb, &ba, b, E, P, 4, 0.0, err, sizeof(err));
  placement_balance(&b8, &ba, b, E, P, 8, 0.0, err, sizeof(err));
  check_moves_pair(&d0, &ba, "today -> balanced X 4");
  check_moves_pair(&ba, &bb, "balanced -> other loads");
  check_moves_pair(&ba, &b8, "X 4 -> X 8");
  check_moves_pair(&b8, &d0, "X 8 -> today");
  check_moves_pair(&d4, &d4, "same");
  CHECK(placement_moves(&d0, &d0, NULL, err, sizeof(err)) == 0,
        "no moves from a placement to itself");
  placement_t other = {0};
  placement_default(&other, 8, 4, 0, err, sizeof(err));
  err[0] = 0;
  placement_move_t mv[32];
  CHECK(placement_moves(&d0, &other, mv, err, sizeof(err)) == -1 && err[0],
        "moves between shapes not refused");
  placement_free(&d0), placement_free(&d4), placement_free(&ba), placement_free(&bb);
  placement_free(&b8), placement_free(&other);
}

static void check_tracker(void) {
  int L = 2, E = 8, P = 2, X = 2, N = 3;
  placement_tracker_t t;
  CHECK(placement_tracker_init(&t, L, E, P, X, N, 0.0, err, sizeof(err)) == 0, "tracker: %s", err);
  placement_t cur[2] = {{0}}, nw[2] = {{0}}, want = {0};
  for (int l = 0; l < L; l++) placement_default(&cur[l], E, P, 0, err, sizeof(err));
  double sum[2][8] = {{0}};
  int changed[2] = {-1, -1};
  for (int step = 1; step <= N; step++) {
    for (int l = 0; l < L; l++) {
      float counts[8];
      for (int e = 0; e < E; e++) {
        counts[e] = (float)((l == 0 ? e == 5 : e == 1) ? 300 + step : 10 + e + step);
        sum[l][e] += counts[e];
      }
      placement_tracker_add(&t, l, counts);
    }
    int rc = placement_tracker_step(&t, cur, nw, changed, err, sizeof(err));
    CHECK(rc == (step == N), "tracker step %d returned %d", step, rc);
  }
  for (int l = 0; l < L; l++) {
    placement_balance(&want, &cur[l], sum[l], E, P, X, 0.0, err, sizeof(err));
    CHECK(placement_equal(&nw[l], &want) && changed[l] == 1,
          "tracker layer %d: not the balance of the summed loads (changed %d)", l, changed[l]);
    CHECK(nw[l].copies[l == 0 ? 5 : 1] == 2, "tracker layer %d: the hot expert not replicated", l);
  }
  for (int e = 0; e < E * L; e++) CHECK(t.load[e] == 0.0, "tracker: sums not restarted");
  CHECK(t.steps == 0, "tracker: steps not restarted");
  placement_tracker_free(&t);
  for (int l = 0; l < L; l++) placement_free(&cur[l]), placement_free(&nw[l]);
  placement_free(&want);
}

/* Random shapes (E 1..20, P 1..8, every valid X up to E*(P-1), so that
 * experts get up to P copies and the LPT's way out when every rank with
 * room holds the expert is taken) and random loads with zeros: the
 * balanced and default placements keep the rules, and the moves between
 * them are right. */
static void check_random(void) {
  moe_rng_t rng;
  moe_rng_seed(&rng, 11);
  int cases = 0;
  for (int E = 1; E <= 20; E++)
    for (int P = 1; P <= 8; P++)
      for (int X = (P - E % P) % P; X <= E * (P - 1); X += P) {
        double load[20];
        for (int e = 0; e < E; e++) {
          double u = moe_rng_uniform(&rng);
          load[e] = u < 0.2 ? 0.0 : floor(1000.0 * pow(u, 4.0));
        }
        placement_t d = {0}, b = {0}, b2 = {0};
        char what[64];
        snprintf(what, sizeof(what), "random E %d P %d X %d", E, P, X);
        CHECK(placement_default(&d, E, P, X, err, sizeof(err)) == 0, "%s: %s", what, err);
        check_rules(&d, E, P, X, what);
        CHECK(placement_balance(&b, &d, load, E, P, X, 0.0, err, sizeof(err)) >= 0, "%s: %s", what,
              err);
        check_rules(&b, E, P, X, what);
        CHECK(placement_imbalance(&b, load) <= placement_imbalance(&d, load) * (1 + 1e-12),
              "%s: worse than the default", what);
        CHECK(placement_balance(&b2, NULL, load, E, P, X, 0.0, err, sizeof(err)) == 1, "%s: %s",
              what, err);
        check_rules(&b2, E, P, X, what);
        check_moves_pair(&d, &b, what);
        check_moves_pair(&b2, &d, what);
        placement_free(&d), placement_free(&b), placement_free(&b2);
        cases++;
      }
  printf("random shapes: %d cases\n", cases);
}

/* A refusal must return -1 with a message that names the rule. */
static void refused(int rc, const char* word, const char* what) {
  CHECK(rc == -1 && strstr(err, word), "%s: rc %d, message \"%s\" (want \"%s\")", what, rc, err,
        word);
  err[0] = 0;
}

static void check_refusals(void) {
  placement_t pl = {0}, cur = {0};
  double load[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  refused(placement_default(&pl, 8, 3, 0, err, sizeof(err)), "split evenly", "(E+X) % P");
  refused(placement_default(&pl, 8, 4, 1, err, sizeof(err)), "split evenly", "(E+X) % P, X 1");
  refused(placement_default(&pl, 8, 4, -4, err, sizeof(err)), "negative", "X < 0");
  refused(placement_default(&pl, 2, 2, 4, err, sizeof(err)), "E*(P-1)", "X > E*(P-1)");
  refused(placement_default(&pl, 0, 2, 0, err, sizeof(err)), "experts", "E 0");
  refused(placement_default(&pl, 4, 0, 0, err, sizeof(err)), "ranks", "P 0");
  refused(placement_balance(&pl, NULL, load, 8, 3, 0, 0.0, err, sizeof(err)), "split evenly",
          "balance (E+X) % P");
  refused(placement_balance(&pl, NULL, load, 8, 4, 28, 0.0, err, sizeof(err)), "E*(P-1)",
          "balance X > E*(P-1)");
  refused(placement_balance(&pl, NULL, load, 8, 4, 0, 1.0, err, sizeof(err)), "margin", "margin 1");
  placement_default(&cur, 8, 2, 0, err, sizeof(err));
  refused(placement_balance(&pl, &cur, load, 8, 4, 0, 0.0, err, sizeof(err)), "current",
          "cur of another P");
  refused(placement_balance(&cur, &cur, load, 8, 2, 0, 0.0, err, sizeof(err)), "same",
          "out == cur");
  load[3] = -1;
  refused(placement_balance(&pl, NULL, load, 8, 4, 0, 0.0, err, sizeof(err)), "expert 3",
          "negative load");
  load[3] = NAN;
  refused(placement_balance(&pl, NULL, load, 8, 4, 0, 0.0, err, sizeof(err)), "expert 3",
          "NaN load");
  placement_tracker_t t;
  refused(placement_tracker_init(&t, 2, 8, 4, 0, 0, 0.0, err, sizeof(err)), "every", "every 0");
  refused(placement_tracker_init(&t, 0, 8, 4, 0, 1, 0.0, err, sizeof(err)), "layers", "layers 0");
  CHECK(pl.slot_expert == NULL, "a refusal touched its output");
  /* A hand-broken placement: two copies of one expert on one rank. */
  placement_default(&pl, 4, 2, 2, err, sizeof(err));
  placement_t broken = {0};
  placement_copy(&broken, &pl);
  broken.slot_expert[1] = broken.slot_expert[0];
  refused(placement_check(&broken, err, sizeof(err)), "ascending", "two copies on one rank");
  placement_free(&pl), placement_free(&cur), placement_free(&broken);
}

int main(void) {
  check_default();
  check_balance();
  check_sticky();
  check_route();
  check_moves();
  check_tracker();
  check_random();
  check_refusals();
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
