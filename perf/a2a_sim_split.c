/*
 * a2a_sim_split.c - a2a_sim's uneven splits (--dist zipf:S | moe:E,K,
 * a2a_sim_int.h): the byte counts every source sends every destination at one
 * size, and the descriptor of one rank's part of that call.  The models'
 * shared pieces (cutting by weight, routing to experts) are perf_split.c's,
 * which a2a_perf uses too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "a2a_sim_int.h"
#include "perf_rand.h"

#define MOE_TOKENS 256 /* tokens routed per source rank (--dist moe) */

/* Zipf over destinations: the k-th most popular destination of source s is
 * (perm[k] + s) mod n, so that every source has another hot destination. */
static void zipf_weights(const struct opts* o, int n, int src, const int* perm, double* w) {
  for (int k = 0; k < n; k++) w[(perm[k] + src) % n] = pow(k + 1.0, -o->dist.zipf_s);
}

/* MoE dispatch: MOE_TOKENS tokens per source, each sent to k distinct experts
 * (perf_experts_route), from a stream seeded by the source. */
static void moe_weights(const struct opts* o, const struct perf_experts* x, int n, int src,
                        double* w) {
  uint64_t rng = perf_mix64(o->seed ^ (uint64_t)src * 0x9e3779b97f4a7c15ULL);
  perf_experts_route(x, MOE_TOKENS, rng, w, n);
}

void sim_split_alloc(struct split* s, int n) {
  s->n = n;
  s->counts = sim_xcalloc((size_t)n * (size_t)n, sizeof(size_t));
  s->send_displs = sim_xcalloc((size_t)n, sizeof(size_t));
  s->recv_counts = sim_xcalloc((size_t)n, sizeof(size_t));
  s->recv_displs = sim_xcalloc((size_t)n, sizeof(size_t));
}

void sim_split_free(struct split* s) {
  free(s->counts);
  free(s->send_displs);
  free(s->recv_counts);
  free(s->recv_displs);
  memset(s, 0, sizeof *s);
}

/* Fills counts[src * n + dst] so that every source sends total bytes. */
void sim_split_fill(const struct opts* o, struct split* s, size_t total) {
  int n = s->n, picked[MOE_K_MAX];
  double* w = sim_xcalloc((size_t)n, sizeof *w);
  int* perm = sim_xcalloc((size_t)n, sizeof *perm);
  struct perf_experts x = {.picked = picked};
  if (o->dist.kind == PERF_DIST_ZIPF) perf_shuffle(perm, n, perf_mix64(o->seed ^ 0x7a697066ULL));
  if (o->dist.kind == PERF_DIST_MOE) {
    x.e = o->dist.moe_e, x.k = o->dist.moe_k;
    x.cdf = sim_xcalloc((size_t)x.e, sizeof *x.cdf);
    x.rank = sim_xcalloc((size_t)x.e, sizeof *x.rank);
    perf_experts_place(&x, n, o->seed);
  }
  for (int src = 0; src < n; src++) {
    if (o->dist.kind == PERF_DIST_ZIPF) zipf_weights(o, n, src, perm, w);
    else moe_weights(o, &x, n, src, w);
    perf_apportion(w, n, total, &s->counts[(size_t)src * (size_t)n]);
  }
  free(w);
  free(perm);
  free(x.cdf);
  free(x.rank);
}

static size_t pair_bytes(const void* ctx, int src, int dst) {
  const struct split* s = ctx;
  return s->counts[(size_t)src * (size_t)s->n + (size_t)dst];
}

/* The descriptor of rank's part of an uneven call (elements are bytes). */
void sim_split_desc(struct split* s, int rank, moeccl_a2a_desc_t* d) {
  int n = s->n;
  const size_t* row = &s->counts[(size_t)rank * (size_t)n];
  size_t so = 0, ro = 0;
  for (int p = 0; p < n; p++) {
    s->recv_counts[p] = s->counts[(size_t)p * (size_t)n + (size_t)rank];
    s->send_displs[p] = so, so += row[p];
    s->recv_displs[p] = ro, ro += s->recv_counts[p];
  }
  d->send_counts = row;
  d->send_displs = s->send_displs;
  d->recv_counts = s->recv_counts;
  d->recv_displs = s->recv_displs;
  d->elem_size = 1;
  d->pair_bytes = pair_bytes;
  d->pair_ctx = s;
}
