/*
 * test_ucx_lazy.c - UCX is loaded only when a peer needs it, and does not
 * take over the application's signal handlers (issue 11, section 3).
 *
 * The program installs its own handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE
 * and SIGHUP and its own alternate signal stack, then forks 2 ranks that
 * create a communicator themselves and check, after creation:
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

static const int app_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGHUP};
#define NSIG_APP ((int)(sizeof(app_signals) / sizeof(app_signals[0])))
static char alt_stack[64 * 1024];

static void app_handler(int sig, siginfo_t* info, void* ctx) {
  (void)info, (void)ctx;
  static const char msg[] = "test_ucx_lazy: the application's handler ran\n";
  if (write(2, msg, sizeof(msg) - 1) < 0) _exit(3);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_app_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = app_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NSIG_APP; i++) sigaction(app_signals[i], &sa, NULL);
  stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof(alt_stack), .ss_flags = 0};
  sigaltstack(&ss, NULL);
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

static int ucx_mapped(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[1024];
  int found = 0;
  while (f && fgets(line, sizeof(line), f))
    if (strstr(line, "/libucs.so") || strstr(line, "/libucp.so")) found = 1;
  if (f) fclose(f);
  return found;
}

static int check_ours(const char* part, int skip_sig) {
  for (int i = 0; i < NSIG_APP; i++) {
    if (app_signals[i] == skip_sig) continue;
    void* fn;
    const char* obj = handler_object(app_signals[i], &fn);
    MP_CHECK(fn == (void*)app_handler, "%s: the handler of %s is %p in %s, not the program's", part,
             strsignal(app_signals[i]), fn, obj[0] ? obj : "?");
  }
  return 0;
}

static int check_alt_stack(const char* part) {
  stack_t ss;
  MP_CHECK(sigaltstack(NULL, &ss) == 0, "sigaltstack");
  MP_CHECK(ss.ss_sp == alt_stack && !(ss.ss_flags & SS_DISABLE),
           "%s: the alternate signal stack is %p (flags %d), not the program's %p", part, ss.ss_sp,
           ss.ss_flags, (void*)alt_stack);
  return 0;
}

static int alltoalls(moecclComm_t c, int rank, int nranks) {
  static const size_t counts[] = {16, 4096, 300000}; /* eager and rendezvous over UCX */
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
    MP_CHECK(r != moecclSuccess, "badmodule: creation succeeded without a loadable UCX module");
    MP_CHECK(strstr(why, "no network transport") != NULL, "badmodule: the text is: %s", why);
    return 0;
  }
  MP_CHECK(r == moecclSuccess, "%s: moecclCommInitRank returned %d: %s", part, (int)r,
           mp_last_error_text(NULL));
  mp_comm = c;
  const char* ues = getenv("UCX_ERROR_SIGNALS");
  if (!strcmp(part, "shm")) {
    MP_CHECK(!ucx_mapped(), "shm: UCX is loaded although every peer is on shared memory");
    MP_CHECK(!ues, "shm: UCX_ERROR_SIGNALS was set (%s) although UCX is not needed", ues);
  } else {
    MP_CHECK(ucx_mapped(), "%s: UCX is not loaded on 2 nodes", part);
  }
  if (!strcmp(part, "user")) {
    void* fn;
    const char* obj = handler_object(SIGSEGV, &fn);
    MP_CHECK(ues && !strcmp(ues, "SIGSEGV"), "user: UCX_ERROR_SIGNALS is now %s",
             ues ? ues : "unset");
    MP_CHECK(strstr(obj, "libucs"),
             "user: UCX_ERROR_SIGNALS=SIGSEGV, but SIGSEGV's handler is %p in %s", fn,
             obj[0] ? obj : "?");
    if (check_ours(part, SIGSEGV)) return 1;
  } else {
    if (strcmp(part, "shm"))
      MP_CHECK(ues && !ues[0], "%s: UCX_ERROR_SIGNALS is %s, not moeccl's empty default", part,
               ues ? ues : "unset");
    if (check_ours(part, 0) || check_alt_stack(part)) return 1;
  }
  if (alltoalls(c, rank, nranks)) return 1;
  if (strcmp(part, "user") && (check_ours(part, 0) || check_alt_stack(part))) return 1;
  mp_comm = NULL;
  MP_OK_COMM(c, moecclCommDestroy(c));
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

int main(int argc, char** argv) {
#ifndef MOECCL_HAVE_UCX
  (void)argc, (void)argv, (void)variants, (void)body;
  printf("SKIP: built without UCX\n");
  return MP_EXIT_SKIP;
#else
  static const int two[] = {2, 0};
  int ranks[8];
  int nr = mp_parse_ranks(argc, argv, two, ranks, 8);
  const char* part = getenv("UCXL_PART");
  if (!part) part = "shm";
  install_app_handlers();
  char dir[] = "/tmp/test_ucx_lazy.XXXXXX", file[sizeof(dir) + 32] = "";
  if (!strcmp(part, "badmodule")) { /* a file of the module's name that is no library */
    if (!mkdtemp(dir)) return perror("mkdtemp"), MP_EXIT_FAIL;
    snprintf(file, sizeof(file), "%s/moeccl_net_ucx.so", dir);
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
#endif
}
