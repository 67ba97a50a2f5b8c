/*
 * test_ucx_lazy.c - UCX is loaded only when a peer needs it, and does not
 * take over the application's signal handlers (issue 11, section 3).
 *
 * The program installs its own handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE
 * and SIGHUP and its own alternate signal stack, then forks 2 ranks that
 * create a communicator themselves and check, after creation
 * (lazy_harness.h):
 *   shm        one node: no libucs/libucp mapped, UCX_ERROR_SIGNALS untouched,
 *              every handler and the signal stack still the program's;
 *   net        2 simulated nodes, MOECCL_NET=ucx: UCX mapped, handlers and
 *              signal stack still the program's, all-to-alls correct;
 *   auto       the same with MOECCL_NET=auto (UCX loaded for its score);
 *   user       UCX_ERROR_SIGNALS=SIGSEGV set by the user: UCX's SIGSEGV
 *              handler is in place (the user asked), SIGBUS is still ours;
 *   badmodule  MOECCL_PLUGIN_PATH names a directory with a file that is no
 *              module: creation fails on both ranks with a text, no crash.
 * Each part runs in a fresh process (UCX is loaded once per process).
 * Skips (77) in a build without UCX.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazy_harness.h"

static const int app_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGHUP};
static const char* const ucx_libs[] = {"/libucs.so", "/libucp.so", NULL};

/* Before the all-to-alls: where UCX is and what it left to the program. */
static int check_loaded(const char* part) {
  const char* ues = getenv("UCX_ERROR_SIGNALS");
  if (!strcmp(part, "shm")) {
    MP_CHECK(!lazy_mapped(ucx_libs), "shm: UCX is loaded although every peer is on shared memory");
    MP_CHECK(!ues, "shm: UCX_ERROR_SIGNALS was set (%s) although UCX is not needed", ues);
  } else {
    MP_CHECK(lazy_mapped(ucx_libs), "%s: UCX is not loaded on 2 nodes", part);
  }
  if (!strcmp(part, "user")) {
    void* fn;
    const char* obj = lazy_handler_object(SIGSEGV, &fn);
    MP_CHECK(ues && !strcmp(ues, "SIGSEGV"), "user: UCX_ERROR_SIGNALS is now %s",
             ues ? ues : "unset");
    MP_CHECK(strstr(obj, "libucs"),
             "user: UCX_ERROR_SIGNALS=SIGSEGV, but SIGSEGV's handler is %p in %s", fn,
             obj[0] ? obj : "?");
    return lazy_check_ours(part, SIGSEGV);
  }
  if (strcmp(part, "shm"))
    MP_CHECK(ues && !ues[0], "%s: UCX_ERROR_SIGNALS is %s, not moeccl's empty default", part,
             ues ? ues : "unset");
  return lazy_check_ours(part, 0) || lazy_check_alt_stack(part);
}

static int check(moecclComm_t c, const char* part, int rank, int nranks) {
  if (check_loaded(part) || lazy_alltoalls(c, rank, nranks)) return 1;
  if (strcmp(part, "user") && (lazy_check_ours(part, 0) || lazy_check_alt_stack(part))) return 1;
  return 0;
}

static const mp_variant variants[] = {
    {"net", {"UCXL_PART=net", "MOECCL_NET=ucx", "MP_RANKS_PER_NODE=1"}, "2"},
    {"auto", {"UCXL_PART=auto", "MOECCL_NET=auto", "MP_RANKS_PER_NODE=1"}, "2"},
    {"user",
     {"UCXL_PART=user", "MOECCL_NET=ucx", "MP_RANKS_PER_NODE=1", "UCX_ERROR_SIGNALS=SIGSEGV"},
     "2"},
    {"badmodule", {"UCXL_PART=badmodule", "MOECCL_NET=ucx", "MP_RANKS_PER_NODE=1"}, "2"},
    {NULL, {NULL}, NULL},
};

static const lazy_test_t test = {
    .name = "test_ucx_lazy",
    .part_env = "UCXL_PART",
    .module = "ucx",
    .lib = "UCX",
    .signals = app_signals,
    .nsignals = (int)(sizeof(app_signals) / sizeof(app_signals[0])),
    .alt_stack = 1,
    .check = check,
    .variants = variants,
};

int main(int argc, char** argv) {
#ifndef MOECCL_HAVE_UCX
  (void)argc, (void)argv, (void)test;
  printf("SKIP: built without UCX\n");
  return MP_EXIT_SKIP;
#else
  return lazy_main(&test, argc, argv);
#endif
}
