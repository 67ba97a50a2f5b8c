/* The failure counter and CHECK of the single-process unit tests. */
#ifndef MOECCL_TESTS_UNIT_CHECK_H_
#define MOECCL_TESTS_UNIT_CHECK_H_

#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                   \
      fprintf(stderr, "\n");                          \
      failures++;                                     \
    }                                                 \
  } while (0)

#endif
