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
 * that create a communicator themselves:
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

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp_harness.h"

/* libinfinipath's constructor takes all but SIGFPE (and SIGINT, SIGTERM
 * then exit(1)) */
static const int app_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGINT, SIGTERM};
#define NSIG_APP ((int)(sizeof(app_signals) / sizeof(app_signals[0])))

static void app_handler(int sig, siginfo_t* info, void* ctx) {
  (void)info, (void)ctx;
  static const char msg[] = "test_net_lazy: the application's handler ran\n";
  if (write(2, msg, sizeof(msg) - 1) < 0) _exit(3);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_app_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = app_handler;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NSIG_APP; i++) sigaction(app_signals[i], &sa, NULL);
}

/* The object the handler of sig lies in ("" when SIG_DFL/SIG_IGN/unknown). */
static const char* handler_object(int sig, void** fn) {
  struct sigaction sa;
  sigaction(sig, NULL, &sa);
  *fn = (sa.sa_flags & SA_SIGINFO) ? (void*)sa.sa_sigaction : (void*)sa.sa_handler;
  Dl_info di;
  if (*fn == (void*)SIG_DFL || *fn == (void*)SIG_IGN || !dladdr(*fn, &di) || !di.dli_fname)
    return "";
  return di.dli_fname;
}

/* The first network library mapped in this process, or NULL. */
static const char* net_lib_mapped(void) {
  static const char* const libs[] = {"/libfabric.so", "/libinfinipath.so", "/libpsm",
                                     "/libucs.so",    "/libucp.so",        NULL};
  static char found[1024];
  FILE* f = fopen("/proc/self/maps", "r");
  char line[1024];
  const char* hit = NULL;
  while (f && !hit && fgets(line, sizeof(line), f))
    for (int i = 0; libs[i] && !hit; i++)
      if (strstr(line, libs[i])) {
        const char* path = strchr(line, '/');
        snprintf(found, sizeof(found), "%s", path ? path : libs[i]);
        found[strcspn(found, "\n")] = 0;
        hit = found;
      }
  if (f) fclose(f);
  return hit;
}

static int fabric_mapped(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[1024];
  int found = 0;
  while (f && fgets(line, sizeof(line), f))
    if (strstr(line, "/libfabric.so")) found = 1;
  if (f) fclose(f);
  return found;
}

/* Before the program's own code: the libraries it links (libmoeccl and
 * what libmoeccl links) have run their constructors, and none may have
 * mapped a network library or taken an error signal.  A sanitizer's runtime
 * (libasan.so, ...) installs its own handlers: those are allowed. */
static int check_at_start(void) {
  const char* lib = net_lib_mapped();
  MP_CHECK(!lib, "start: %s is mapped before main, although no communicator needs the network",
           lib);
  for (int i = 0; i < NSIG_APP; i++) {
    void* fn;
    const char* obj = handler_object(app_signals[i], &fn);
    const char* base = strrchr(obj, '/') ? strrchr(obj, '/') + 1 : obj;
    MP_CHECK(fn == (void*)SIG_DFL || strstr(base, "san.so"),
             "start: %s has a handler (%p in %s) before main's own code ran",
             strsignal(app_signals[i]), fn, obj[0] ? obj : "?");
  }
  return 0;
}

static int check_ours(const char* part) {
  for (int i = 0; i < NSIG_APP; i++) {
    void* fn;
    const char* obj = handler_object(app_signals[i], &fn);
    MP_CHECK(fn == (void*)app_handler, "%s: the handler of %s is %p in %s, not the program's", part,
             strsignal(app_signals[i]), fn, obj[0] ? obj : "?");
  }
  return 0;
}

static int alltoalls(moecclComm_t c, int rank, int nranks) {
  static const size_t counts[] = {16, 4096, 300000}; /* eager and rendezvous */
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
    size_t n = counts[k], bytes = n * 4 * (size_t)nranks;
    uint32_t* send = mp_xmalloc(bytes);
    uint32_t* recv = mp_xmalloc(bytes);
    for (int p = 0; p < nranks; p++) mp_fill(send + n * (size_t)p, 4, n, k, rank, p, 0);
    memset(recv, 0, bytes);
    MP_OK_COMM(c, moecclAlltoAll(send, recv, n, moecclUint32, c, NULL));
    for (int p = 0; p < nranks; p++)
      MP_CHECK_BLOCK("alltoall", recv + n * (size_t)p, 4, n, k, p, rank, 0);
    free(send);
    free(recv);
  }
  return 0;
}

static int body(moecclComm_t unused, int rank, int nranks, void* arg) {
  (void)unused;
  const char* part = arg;
  moecclComm_t c = NULL;
  moecclResult_t r = moecclCommInitRank(&c, nranks, mp_unique_id, rank);
  if (!strcmp(part, "badmodule")) {
    const char* why = mp_last_error_text(NULL);
    MP_CHECK(r != moecclSuccess, "badmodule: creation succeeded without a loadable ofi module");
    MP_CHECK(strstr(why, "no network transport") != NULL, "badmodule: the text is: %s", why);
    MP_CHECK(!fabric_mapped(), "badmodule: libfabric is loaded although the module is broken");
    return check_ours(part);
  }
  MP_CHECK(r == moecclSuccess, "%s: moecclCommInitRank returned %d: %s", part, (int)r,
           mp_last_error_text(NULL));
  mp_comm = c;
  if (alltoalls(c, rank, nranks)) return 1;
  if (!strcmp(part, "shm")) {
    const char* lib = net_lib_mapped();
    const char* nb = getenv("IPATH_NO_BACKTRACE");
    MP_CHECK(!lib, "shm: %s is loaded although every peer is on shared memory", lib);
    MP_CHECK(!nb, "shm: IPATH_NO_BACKTRACE was set (%s) although libfabric is not needed", nb);
    if (check_ours(part)) return 1;
  } else {
    MP_CHECK(fabric_mapped(), "%s: libfabric is not loaded on 2 nodes over ofi", part);
    const char* nb = getenv("IPATH_NO_BACKTRACE");
    MP_CHECK(nb && !strcmp(nb, "1"), "%s: IPATH_NO_BACKTRACE is %s, not moeccl's 1", part,
             nb ? nb : "unset");
    if (check_ours(part)) return 1;
  }
  mp_comm = NULL;
  MP_OK_COMM(c, moecclCommDestroy(c));
  return 0;
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

int main(int argc, char** argv) {
  if (check_at_start()) return MP_EXIT_FAIL;
  static const int two[] = {2, 0};
  int ranks[8];
  int nr = mp_parse_ranks(argc, argv, two, ranks, 8);
  const char* part = getenv("NETL_PART");
  if (!part) part = "shm";
  install_app_handlers();
  char dir[] = "/tmp/test_net_lazy.XXXXXX", file[sizeof(dir) + 32] = "";
  if (!strcmp(part, "badmodule")) { /* a file of the module's name that is no library */
    if (!mkdtemp(dir)) return perror("mkdtemp"), MP_EXIT_FAIL;
    snprintf(file, sizeof(file), "%s/moeccl_net_ofi.so", dir);
    FILE* f = fopen(file, "w");
    if (!f) return perror(file), MP_EXIT_FAIL;
    fputs("not a shared object\n", f);
    fclose(f);
    setenv("MOECCL_PLUGIN_PATH", dir, 1);
  }
  printf("part %s\n", part);
  mp_opts opts = MP_OPTS_DEFAULT;
  opts.deadline_s = 60;
  opts.no_init = 1;
  int rc = MP_EXIT_SKIP;
  for (int i = 0; i < nr; i++) rc = mp_fold(rc, mp_run_opts(ranks[i], body, (void*)part, &opts));
  if (file[0]) unlink(file), rmdir(dir);
  return mp_fold(rc, mp_run_variants(argc, argv, variants, 60));
}
