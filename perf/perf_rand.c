/* The seeded randomness of perf/ (perf_rand.h). */
#include "perf_rand.h"

#include <math.h>
#include <stdlib.h>

uint64_t perf_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t perf_rng_next(uint64_t* s) {
  *s += 0x9e3779b97f4a7c15ULL;
  return perf_mix64(*s);
}

double perf_rng_unit(uint64_t* s) { return (double)(perf_rng_next(s) >> 11) * 0x1.0p-53; }

void perf_shuffle(int* p, int n, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < n; i++) p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(perf_rng_next(&s) % (uint64_t)(i + 1));
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

int perf_moe_router(int E, int K, size_t T, double skew, uint64_t seed, int rank, int32_t* ids,
                    float* weights) {
  int used[64];
  if (K < 1 || K > 64 || K > E) return -1;
  double* p = calloc((size_t)E, sizeof *p);
  int* order = calloc((size_t)E, sizeof *order);
  if (!p || !order) {
    free(p), free(order);
    return -1;
  }
  perf_shuffle(order, E, seed ^ 0x5a17ULL); /* the same expert order on every rank */
  for (int i = 0; i < E; i++) p[order[i]] = 1.0 / pow(1.0 + i, skew);
  uint64_t s = seed + 0x1000193ULL * (uint64_t)(rank + 1);
  for (size_t t = 0; t < T; t++)
    for (int j = 0; j < K; j++) {
      double tot = 0;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int i = 0; i < j; i++) taken |= used[i] == e;
        if (!taken) tot += p[e];
      }
      double u = perf_rng_unit(&s) * tot;
      int pick = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int i = 0; i < j; i++) taken |= used[i] == e;
        if (taken) continue;
        pick = e;
        if ((u -= p[e]) < 0) break;
      }
      used[j] = pick;
      ids[t * (size_t)K + (size_t)j] = pick;
      weights[t * (size_t)K + (size_t)j] = ldexpf(1.0f, -(j + 1));
    }
  free(p);
  free(order);
  return 0;
}
