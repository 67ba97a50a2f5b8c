/* Shared by the libFuzzer harnesses of tests/fuzz (scripts/fuzz.sh builds
 * and runs them; README.md there says what each one checks). */
#ifndef MOECCL_FUZZ_H_
#define MOECCL_FUZZ_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerInitialize(int* argc, char*** argv);

/* A broken invariant is a finding like a crash: libFuzzer keeps the input
 * (abort is a deadly signal to it) and the message says which one. */
#define FUZZ_ASSERT(cond, ...)                                                                     \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond);                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* Reads a little-endian integer of n bytes at p (the wire formats' order on
 * every platform moeccl builds on). */
static inline uint64_t fuzz_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static inline void fuzz_put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++, v >>= 8) p[i] = (uint8_t)v;
}

#endif
