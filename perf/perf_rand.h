/*
 * perf_rand.h - the seeded randomness every perf/ tool draws from (the
 * harness and its tools, a2a_sim without MPI): the same seed gives the same
 * numbers on every rank, so the ranks agree on splits without talking.
 */
#ifndef MOECCL_PERF_RAND_H_
#define MOECCL_PERF_RAND_H_

#include <stddef.h>
#include <stdint.h>

/* splitmix64's finaliser: a well-mixed 64-bit hash of x. */
uint64_t perf_mix64(uint64_t x);
/* splitmix64: the next number of the stream in *s. */
uint64_t perf_rng_next(uint64_t* s);
/* A double in [0, 1) from the top 53 bits of the next number. */
double perf_rng_unit(uint64_t* s);
/* p = a seeded Fisher-Yates permutation of 0..n-1. */
void perf_shuffle(int* p, int n, uint64_t seed);

/* The router output of the MoE perf tools (moe_perf and moe_perf --device
 * draw the same): per token, K <= 64 distinct experts of E, drawn without
 * replacement by p(e) ~ 1 / (1 + e's place in a seeded order)^skew (the
 * order the same on every rank, so the same experts are hot everywhere),
 * from a stream of seed and rank; slot j's gate weight 2^-(j+1).  ids and
 * weights are [T][K].  0, or -1 (no memory, or K out of range). */
int perf_moe_router(int E, int K, size_t T, double skew, uint64_t seed, int rank, int32_t* ids,
                    float* weights);

#endif
