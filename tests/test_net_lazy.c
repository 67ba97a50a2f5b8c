/*
 * test_net_lazy.c - the network libraries (libfabric, UCX) are loaded only
 * when a communicator needs the network, so a program that links libmoeccl
 * keeps its own signal handlers (issue 11, section 3).
 *
 * On Debian 12 libfabric links libinfinipath.so.4 (psm), whose constructor
 * installs a SIGSEGV handler; while libmoeccl linked libfabric, that
 * handler was in place before main in every program using moeccl.  main
 * first checks that no network library is mapped and that SIGSEGV, SIGBUS,
 * SIGILL, SIGFPE, SIGABRT, SIGINT and SIGTERM have the default action (or a
 * sanitizer's), then installs the program's own handlers and forks 2 ranks
 * that create a communicator themselves (lazy_harness.h):
 *   shm        one node: none of libfabric, libinfinipath, libpsm*, libucs,
 *              libucp mapped after creation and all-to-alls, the handlers
 *              still the program's, IPATH_NO_BACKTRACE untouched;
 *   ofi        2 simulated nodes, MOECCL_NET=ofi MOECCL_OFI_PROVIDER=tcp:
 *              libfabric mapped, all-to-alls correct, the handlers still
 *              the program's (moeccl set IPATH_NO_BACKTRACE=1 first);
 *   badmodule  MOECCL_PLUGIN_PATH names a directory with a file
 *              moeccl_net_ofi.so that is no library: creation fails on both
 *              ranks with a text, no crash, and libfabric is not loaded (a
 *              module found but broken ends the search).
 * Each part runs in a fresh process (libmoeccl loads a module once per
 * process).  The ofi parts are skipped in a build without libfabric.
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "lazy_harness.h"

/* libinfinipath's constructor takes all but SIGFPE (and SIGINT, SIGTERM
 * then exit(1)) */
static const int app_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGINT, SIGTERM};
static const char* const net_libs[] = {"/libfabric.so", "/libinfinipath.so", "/libpsm",
                                       "/libucs.so",    "/libucp.so",        NULL};
static const char* const fabric_libs[] = {"/libfabric.so", NULL};

static int check_badmodule(const char* part) {
  MP_CHECK(!lazy_mapped(fabric_libs),
           "badmodule: libfabric is loaded although the module is broken");
  return lazy_check_ours(part, 0);
}

static int check(moecclComm_t c, const char* part, int rank, int nranks) {
  if (lazy_alltoalls(c, rank, nranks)) return 1;
  const char* nb = getenv("IPATH_NO_BACKTRACE");
  if (!strcmp(part, "shm")) {
    const char* lib = lazy_mapped(net_libs);
    MP_CHECK(!lib, "shm: %s is loaded although every peer is on shared memory", lib);
    MP_CHECK(!nb, "shm: IPATH_NO_BACKTRACE was set (%s) although libfabric is not needed", nb);
  } else {
    MP_CHECK(lazy_mapped(fabric_libs), "%s: libfabric is not loaded on 2 nodes over ofi", part);
    MP_CHECK(nb && !strcmp(nb, "1"), "%s: IPATH_NO_BACKTRACE is %s, not moeccl's 1", part,
             nb ? nb : "unset");
  }
  return lazy_check_ours(part, 0);
}

static const mp_variant variants[] = {
#ifdef MOECCL_HAVE_LIBFABRIC
    {"ofi",
     {"NETL_PART=ofi", "MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MP_RANKS_PER_NODE=1"},
     "2"},
    {"badmodule", {"NETL_PART=badmodule", "MOECCL_NET=ofi", "MP_RANKS_PER_NODE=1"}, "2"},
#endif
    {NULL, {NULL}, NULL},
};

static const lazy_test_t test = {
    .name = "test_net_lazy",
    .part_env = "NETL_PART",
    .module = "ofi",
    .lib = "ofi",
    .signals = app_signals,
    .nsignals = (int)(sizeof(app_signals) / sizeof(app_signals[0])),
    .start_libs = net_libs,
    .check = check,
    .check_badmodule = check_badmodule,
    .variants = variants,
};

int main(int argc, char** argv) { return lazy_main(&test, argc, argv); }
