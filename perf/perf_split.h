/*
 * perf_split.h - the uneven all-to-all splits that a2a_perf and a2a_sim
 * both model (--dist uniform | zipf:S | moe:E,K): the option's value,
 * cutting a total into weighted blocks, and MoE routing (hot experts placed
 * on ranks, k distinct experts per token).  No MPI: a2a_sim runs without it.
 */
#ifndef MOECCL_PERF_SPLIT_H_
#define MOECCL_PERF_SPLIT_H_

#include <stddef.h>
#include <stdint.h>

#define PERF_MOE_POPULARITY_S 1.2 /* zipf exponent of expert popularity */
#define PERF_MOE_MAX_REDRAWS 32   /* then take the hottest expert not yet chosen */

enum perf_dist_kind { PERF_DIST_UNIFORM, PERF_DIST_ZIPF, PERF_DIST_MOE };

struct perf_dist {
  enum perf_dist_kind kind;
  double zipf_s;    /* zipf: the exponent */
  int moe_e, moe_k; /* moe: experts, distinct experts per token */
};

/* --dist's value into *d, k at most kmax: 0, or -1. */
int perf_parse_dist(const char* s, int kmax, struct perf_dist* d);

/* Cuts total into n blocks proportional to w by rounding the running sum,
 * so the blocks add up to exactly total and equal inputs give equal cuts on
 * every rank.  Zero weights give zero blocks. */
void perf_apportion(const double* w, int n, size_t total, size_t* out);

/* The experts of moe:E,K; the caller owns the arrays. */
struct perf_experts {
  int e, k;
  double* cdf; /* cumulative popularity by popularity rank (e) */
  int* rank;   /* rank hosting the expert of popularity rank r (e) */
  int* picked; /* scratch: popularity ranks chosen for one token (k) */
};

/* Fills cdf and rank for n ranks: popularity is zipf PERF_MOE_POPULARITY_S
 * by popularity rank, the same for every source (a router has hot
 * experts); experts sit on ranks in contiguous even ranges, and a shuffle
 * seeded from seed decides which range hosts which popularity rank. */
void perf_experts_place(struct perf_experts* x, int n, uint64_t seed);
/* w[0..n) = (token, expert) pairs per rank when tokens tokens each go to k
 * distinct experts drawn by popularity from the stream rng: a token bound
 * for two experts of one rank counts twice, as a plain all-to-all dispatch
 * sends it. */
void perf_experts_route(const struct perf_experts* x, size_t tokens, uint64_t rng, double* w,
                        int n);

#endif
