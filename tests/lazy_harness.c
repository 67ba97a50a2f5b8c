/*
 * lazy_harness.c - the program's handlers, the checks and the main that
 * tests/test_net_lazy.c and tests/test_ucx_lazy.c share (lazy_harness.h).
 */
#include "config.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "lazy_harness.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const lazy_test_t* test;
static char handler_msg[128]; /* "test_ucx_lazy: the application's handler ran\n" */
static char alt_stack[64 * 1024];

static void app_handler(int sig, siginfo_t* info, void* ctx) {
  (void)info, (void)ctx;
  if (write(2, handler_msg, strlen(handler_msg)) < 0) _exit(3);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_app_handlers(void) {
  snprintf(handler_msg, sizeof(handler_msg), "%s: the application's handler ran\n", test->name);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = app_handler;
  sa.sa_flags = SA_SIGINFO | (test->alt_stack ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < test->nsignals; i++) sigaction(test->signals[i], &sa, NULL);
  if (!test->alt_stack) return;
  stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof(alt_stack), .ss_flags = 0};
  sigaltstack(&ss, NULL);
}

const char* lazy_handler_object(int sig, void** fn) {
  struct sigaction sa;
  sigaction(sig, NULL, &sa);
  *fn = (sa.sa_flags & SA_SIGINFO) ? (void*)sa.sa_sigaction : (void*)sa.sa_handler;
  Dl_info di;
  if (*fn == (void*)SIG_DFL || *fn == (void*)SIG_IGN || !dladdr(*fn, &di) || !di.dli_fname)
    return "";
  return di.dli_fname;
}

const char* lazy_mapped(const char* const* libs) {
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

/* Before the program's own code: the libraries it links (libmoeccl and
 * what libmoeccl links) have run their constructors, and none may have
 * mapped a network library or taken an error signal.  A sanitizer's runtime
 * (libasan.so, ...) installs its own handlers: those are allowed. */
static int check_at_start(void) {
  const char* lib = lazy_mapped(test->start_libs);
  MP_CHECK(!lib, "start: %s is mapped before main, although no communicator needs the network",
           lib);
  for (int i = 0; i < test->nsignals; i++) {
    void* fn;
    const char* obj = lazy_handler_object(test->signals[i], &fn);
    const char* base = strrchr(obj, '/') ? strrchr(obj, '/') + 1 : obj;
    MP_CHECK(fn == (void*)SIG_DFL || strstr(base, "san.so"),
             "start: %s has a handler (%p in %s) before main's own code ran",
             strsignal(test->signals[i]), fn, obj[0] ? obj : "?");
  }
  return 0;
}

int lazy_check_ours(const char* part, int skip_sig) {
  for (int i = 0; i < test->nsignals; i++) {
    if (test->signals[i] == skip_sig) continue;
    void* fn;
    const char* obj = lazy_handler_object(test->signals[i], &fn);
    MP_CHECK(fn == (void*)app_handler, "%s: the handler of %s is %p in %s, not the program's", part,
             strsignal(test->signals[i]), fn, obj[0] ? obj : "?");
  }
  return 0;
}

int lazy_check_alt_stack(const char* part) {
  stack_t ss;
  MP_CHECK(sigaltstack(NULL, &ss) == 0, "sigaltstack");
  MP_CHECK(ss.ss_sp == alt_stack && !(ss.ss_flags & SS_DISABLE),
           "%s: the alternate signal stack is %p (flags %d), not the program's %p", part, ss.ss_sp,
           ss.ss_flags, (void*)alt_stack);
  return 0;
}

int lazy_alltoalls(moecclComm_t c, int rank, int nranks) {
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
    MP_CHECK(r != moecclSuccess, "badmodule: creation succeeded without a loadable %s module",
             test->lib);
    MP_CHECK(strstr(why, "no network transport") != NULL, "badmodule: the text is: %s", why);
    return test->check_badmodule ? test->check_badmodule(part) : 0;
  }
  MP_CHECK(r == moecclSuccess, "%s: moecclCommInitRank returned %d: %s", part, (int)r,
           mp_last_error_text(NULL));
  mp_comm = c;
  if (test->check(c, part, rank, nranks)) return 1;
  mp_comm = NULL;
  MP_OK_COMM(c, moecclCommDestroy(c));
  return 0;
}

/* badmodule's directory (dir, a mkdtemp template) with a file of the
 * module's name that is no library, in MOECCL_PLUGIN_PATH; file its path.
 * 0 when made. */
static int make_bad_module(char* dir, char* file, size_t n) {
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(file, n, "%s/moeccl_net_%s.so", dir, test->module);
  FILE* f = fopen(file, "w");
  if (!f) return perror(file), 1;
  fputs("not a shared object\n", f);
  fclose(f);
  setenv("MOECCL_PLUGIN_PATH", dir, 1);
  return 0;
}

int lazy_main(const lazy_test_t* t, int argc, char** argv) {
  test = t;
  if (t->start_libs && check_at_start()) return MP_EXIT_FAIL;
  static const int two[] = {2, 0};
  int ranks[8];
  int nr = mp_parse_ranks(argc, argv, two, ranks, 8);
  const char* part = getenv(t->part_env);
  if (!part) part = "shm";
  install_app_handlers();
  char dir[64], file[sizeof(dir) + 32] = "";
  snprintf(dir, sizeof(dir), "/tmp/%s.XXXXXX", t->name);
  if (!strcmp(part, "badmodule") && make_bad_module(dir, file, sizeof(file))) return MP_EXIT_FAIL;
  printf("part %s\n", part);
  mp_opts opts = MP_OPTS_DEFAULT;
  opts.deadline_s = 60;
  opts.no_init = 1;
  int rc = MP_EXIT_SKIP;
  for (int i = 0; i < nr; i++) rc = mp_fold(rc, mp_run_opts(ranks[i], body, (void*)part, &opts));
  if (file[0]) unlink(file), rmdir(dir);
  return mp_fold(rc, mp_run_variants(argc, argv, t->variants, 60));
}
