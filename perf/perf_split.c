/* The uneven all-to-all splits of a2a_perf and a2a_sim (perf_split.h). */
#include "perf_split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf_rand.h"

/* "E,K": 1 <= E <= 2^20 experts, 1 <= K <= min(E, kmax) per token. */
static int parse_moe(const char* s, int kmax, struct perf_dist* d) {
  char* end;
  long e = strtol(s, &end, 10);
  if (end == s || *end != ',') return -1;
  const char* ks = end + 1;
  long k = strtol(ks, &end, 10);
  if (end == ks || *end || e < 1 || e > (1L << 20) || k < 1 || k > e || k > kmax) return -1;
  d->moe_e = (int)e;
  d->moe_k = (int)k;
  return 0;
}

int perf_parse_dist(const char* s, int kmax, struct perf_dist* d) {
  char* end;
  if (strcmp(s, "uniform") == 0) {
    d->kind = PERF_DIST_UNIFORM;
    return 0;
  }
  if (strncmp(s, "zipf:", 5) == 0) {
    d->zipf_s = strtod(s + 5, &end);
    if (end == s + 5 || *end || !(d->zipf_s >= 0.0 && d->zipf_s <= 100.0)) return -1;
    d->kind = PERF_DIST_ZIPF;
    return 0;
  }
  if (strncmp(s, "moe:", 4) != 0 || parse_moe(s + 4, kmax, d)) return -1;
  d->kind = PERF_DIST_MOE;
  return 0;
}

void perf_apportion(const double* w, int n, size_t total, size_t* out) {
  double sum = 0.0, cum = 0.0;
  size_t prev = 0;
  for (int j = 0; j < n; j++) sum += w[j];
  for (int j = 0; j < n; j++) {
    cum += w[j];
    size_t b = total;
    if (j < n - 1)
      b = sum > 0.0 ? (size_t)floor((double)total * (cum / sum))
                    : total / (size_t)n * (size_t)(j + 1);
    if (b > total) b = total;
    if (b < prev) b = prev;
    out[j] = b - prev;
    prev = b;
  }
}

void perf_experts_place(struct perf_experts* x, int n, uint64_t seed) {
  double cum = 0.0;
  /* rank[] holds the shuffled range indices first, then their ranks */
  perf_shuffle(x->rank, x->e, perf_mix64(seed ^ 0x6d6f65ULL));
  for (int r = 0; r < x->e; r++) {
    cum += pow(r + 1.0, -PERF_MOE_POPULARITY_S);
    x->cdf[r] = cum;
    x->rank[r] = (int)((uint64_t)x->rank[r] * (uint64_t)n / (uint64_t)x->e);
  }
}

static int picked_already(const struct perf_experts* x, int got, int r) {
  for (int i = 0; i < got; i++)
    if (x->picked[i] == r) return 1;
  return 0;
}

/* One popularity rank by popularity, not one of the got already picked for
 * this token; after PERF_MOE_MAX_REDRAWS draws of picked ones, the hottest
 * free one (a very skewed tail would take long to hit, and the hottest free
 * expert is the likeliest outcome anyway). */
static int expert_draw(const struct perf_experts* x, uint64_t* rng, int got) {
  for (int tries = 0; tries < PERF_MOE_MAX_REDRAWS; tries++) {
    double u = perf_rng_unit(rng) * x->cdf[x->e - 1];
    int lo = 0, hi = x->e - 1;
    while (lo < hi) { /* the first popularity rank whose cdf exceeds u */
      int mid = (lo + hi) / 2;
      if (x->cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    if (!picked_already(x, got, lo)) return lo;
  }
  int r = 0;
  while (picked_already(x, got, r)) r++;
  return r;
}

void perf_experts_route(const struct perf_experts* x, size_t tokens, uint64_t rng, double* w,
                        int n) {
  for (int j = 0; j < n; j++) w[j] = 0.0;
  for (size_t t = 0; t < tokens; t++) {
    for (int got = 0; got < x->k; got++) {
      int r = expert_draw(x, &rng, got);
      x->picked[got] = r;
      w[x->rank[r]] += 1.0;
    }
  }
}
