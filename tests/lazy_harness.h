/*
 * lazy_harness.h - what tests/test_net_lazy.c and tests/test_ucx_lazy.c
 * share: a network library (libfabric, UCX) is loaded only when a
 * communicator needs the network, and leaves the program's signal handlers
 * alone (issue 11, section 3).
 *
 * lazy_main installs the program's own handlers for the test's signals
 * (and, if it asks, its own alternate signal stack), then forks 2 ranks
 * that create a communicator themselves and run the test's checks on it.
 * The part (shm when the test's variable is unset) says what to expect;
 * each part runs in a fresh process (libmoeccl loads a module once per
 * process), the others as the test's variants.  One part is shared:
 *   badmodule  MOECCL_PLUGIN_PATH names a directory with a file
 *              moeccl_net_<module>.so that is no library: creation fails on
 *              both ranks with a text, no crash (then the test's own checks).
 */
#ifndef LAZY_HARNESS_H_
#define LAZY_HARNESS_H_

#include "mp_harness.h"

typedef struct lazy_test {
  const char* name;     /* "test_ucx_lazy": in the handler's message, the temporary directory */
  const char* part_env; /* the variable naming the part: "UCXL_PART" */
  const char* module;   /* its module's name: badmodule writes moeccl_net_<module>.so */
  const char* lib;      /* the module, as badmodule's message names it: "UCX" */
  const int* signals;   /* the program's handlers, nsignals of them */
  int nsignals;
  int alt_stack; /* 1: the handlers run on the program's alternate signal stack */
  /* Non-NULL: before main's own code, none of these libraries may be mapped
   * and every signal must have its default action (or a sanitizer's). */
  const char* const* start_libs;
  /* The checks of a part whose creation worked (the communicator is
   * destroyed after them), and, optional, those after badmodule's failure.
   * 0 when they pass. */
  int (*check)(moecclComm_t c, const char* part, int rank, int nranks);
  int (*check_badmodule)(const char* part);
  const mp_variant* variants;
} lazy_test_t;

/* The test's main: exits with what it returns. */
int lazy_main(const lazy_test_t* t, int argc, char** argv);

/* The path of the first of libs (NULL-terminated, "/libucs.so") mapped in
 * this process, or NULL. */
const char* lazy_mapped(const char* const* libs);
/* The object the handler of sig lies in ("" when SIG_DFL/SIG_IGN/unknown);
 * *fn is the handler. */
const char* lazy_handler_object(int sig, void** fn);
/* Whether every signal of the test but skip_sig (0: none) still has the
 * program's handler, and the program's alternate signal stack is in place;
 * 0 when so. */
int lazy_check_ours(const char* part, int skip_sig);
int lazy_check_alt_stack(const char* part);
/* All-to-alls of three sizes (eager and rendezvous), checked. */
int lazy_alltoalls(moecclComm_t c, int rank, int nranks);

#endif
