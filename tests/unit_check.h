/* The failure counters and CHECKs of the single-process unit tests.  checks
 * counts the CHECKs run and failures those that failed, for a test that
 * prints how many it made, or how many in a group (the difference of two
 * readings).  A failing CHECK prints "FILE:LINE: message" on stderr;
 * CHECK_EXPR also names the condition, and CHECK_STDOUT prints
 * "FAIL FILE:LINE: message" on stdout, for a test whose failure lines must
 * keep their place among the results it prints there. */
#ifndef MOECCL_TESTS_UNIT_CHECK_H_
#define MOECCL_TESTS_UNIT_CHECK_H_

#include <stdio.h>

static int checks, failures;

/* How many more failures are printed (all are counted); negative: no limit.
 * A test that checks thousands of values with one wrong kernel sets it
 * before each group, so that the group prints its first few only. */
static int check_print_budget = -1;

/* The body of every CHECK: the stream, a text before the call site and one
 * after it, then the message. */
#define UNIT_CHECK_(out, lead, tail, cond, ...)                                                    \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      if (check_print_budget != 0) {                                                               \
        if (check_print_budget > 0) check_print_budget--;                                          \
        fprintf(out, "%s%s:%d: %s", lead, __FILE__, __LINE__, tail);                               \
        fprintf(out, __VA_ARGS__);                                                                 \
        fprintf(out, "\n");                                                                        \
      }                                                                                            \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

#define CHECK(cond, ...) UNIT_CHECK_(stderr, "", "", cond, __VA_ARGS__)
/* "FILE:LINE: FAILED cond: message" on stderr. */
#define CHECK_EXPR(cond, ...) UNIT_CHECK_(stderr, "", "FAILED " #cond ": ", cond, __VA_ARGS__)
#define CHECK_STDOUT(cond, ...) UNIT_CHECK_(stdout, "FAIL ", "", cond, __VA_ARGS__)

#endif
