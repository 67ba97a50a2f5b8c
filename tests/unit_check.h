/* The failure counter and CHECK of the single-process unit tests; checks
 * counts the CHECKs run, for a test that prints how many it made. */
#ifndef MOECCL_TESTS_UNIT_CHECK_H_
#define MOECCL_TESTS_UNIT_CHECK_H_

#include <stdio.h>

static int checks, failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

#endif
