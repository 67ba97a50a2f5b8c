/* The seeded randomness of perf/ (perf_rand.h). */
#include "perf_rand.h"

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
