/*
 * The ucx transport as libmoeccl sees it: a proxy ops table whose entry
 * points load the UCX module (moeccl_net_ucx.so: ucx.c, net_module.h) the
 * first time a communicator needs it, and forward to it.
 *
 * Why a module: loading libucs runs its constructor, which installs UCX's
 * handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGHUP (ucs_init ->
 * ucs_debug_init, UCX 1.13 and 1.14).  Linked into libmoeccl, that happened
 * in every program that loaded the library, even runs on shared memory
 * alone, and an application's own crash showed UCX's backtrace.  Now UCX is
 * loaded only when selection (transport.c) asks this transport for its
 * score or its init, which it does only when some peer is on another node
 * (or MOECCL_SHM_DISABLE=1).  The module is never unloaded: UCX cannot be.
 *
 * The module is looked for, first match wins, in each directory of
 * MOECCL_PLUGIN_PATH, then next to the object holding this code
 * (libmoeccl.so, or the program linked with libmoeccl.a): in its moeccl/
 * subdirectory (installed: $libdir/moeccl) and in it (the libtool build
 * tree: .libs), then in the configured $pkglibdir.  A module found but not
 * loadable ends the search: a broken install must not quietly pick another.
 * Without a module the transport is unavailable (score 0, init fails on
 * every rank alike), with one warning.
 */
#include "transport/net_module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "param.h"

#define MODULE_FILE "moeccl_net_ucx.so"
#ifndef MOECCL_PKGLIBDIR
#define MOECCL_PKGLIBDIR ""
#endif

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const moeccl_transport_ops_t* module; /* NULL: unavailable */
static moeccl_net_host_t host;               /* the module keeps a pointer to it */

/* What the module may call (net_module.h). */
static void fill_host(void) {
  moeccl_debug_init();
  host = (moeccl_net_host_t){
      .abi = MOECCL_NET_MODULE_ABI,
      .version = PACKAGE_VERSION,
      .comm_size = sizeof(moeccl_comm_t),
      .req_size = sizeof(moeccl_req_t),
      .ops_size = sizeof(moeccl_transport_ops_t),
      .log_level = moeccl_log_level,
      .log_mask = moeccl_log_mask,
      .log = moeccl_log,
      .error = moeccl_error,
      .comm_fail = moeccl_comm_fail,
      .comm_peer_lost = moeccl_comm_peer_lost,
      .bootstrap_allgather = moeccl_bootstrap_allgather,
      .process_alive = moeccl_process_alive,
      .now = moeccl_now,
  };
}

/* UCX reads its settings once, in that constructor, so these defaults must
 * be in the environment before dlopen.  UCX_ERROR_SIGNALS empty: no handlers
 * for error signals (UCX_HANDLE_ERRORS=none would do that too, but would
 * also make a user's own UCX_ERROR_SIGNALS do nothing); UCX_DEBUG_SIGNO=0:
 * no SIGHUP handler.  A user who sets UCX_ERROR_SIGNALS or
 * UCX_HANDLE_ERRORS asked for UCX's handling and gets it.  setenv never
 * overwrites.  Returns 1 when moeccl turned the error signals off.  (If
 * something else in the process loaded UCX first, none of this matters any
 * more: its constructor has run.) */
static int quiet_ucx_signals(void) {
  setenv("UCX_DEBUG_SIGNO", "0", 0);
  if (getenv("UCX_ERROR_SIGNALS") || getenv("UCX_HANDLE_ERRORS")) return 0;
  setenv("UCX_ERROR_SIGNALS", "", 0);
  return 1;
}

/* Loads dir/MODULE_FILE: 1 with *h set, 0 when there is no such file, -1
 * when there is one that does not load (why says so). */
static int try_dir(const char* dir, size_t len, void** h, char* why, size_t n) {
  char path[4096];
  if (len == 0 || len + sizeof(MODULE_FILE) + 1 > sizeof(path)) return 0;
  snprintf(path, sizeof(path), "%.*s/%s", (int)len, dir, MODULE_FILE);
  if (access(path, F_OK) != 0) return 0;
  *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*h) {
    INFO(NET, "ucx: loaded %s", path);
    return 1;
  }
  const char* e = dlerror();
  snprintf(why, n, "%s", e ? e : path);
  return -1;
}

/* The search described at the top: the handle, or NULL with why set. */
static void* open_module(char* why, size_t n) {
  void* h = NULL;
  int r = 0;
  const char* list = moeccl_param_str("MOECCL_PLUGIN_PATH");
  for (const char* p = list ? list : ""; *p && r == 0;) {
    size_t len = strcspn(p, ":");
    r = try_dir(p, len, &h, why, n);
    p += len + (p[len] == ':');
  }
  char dir[2048] = ""; /* of the object this code is in */
  Dl_info info;
  if (r == 0 && dladdr((void*)open_module, &info) && info.dli_fname) {
    const char* slash = strrchr(info.dli_fname, '/');
    if (slash && (size_t)(slash - info.dli_fname) < sizeof(dir))
      snprintf(dir, sizeof(dir), "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
  }
  if (dir[0]) {
    char sub[sizeof(dir) + 8];
    snprintf(sub, sizeof(sub), "%s/moeccl", dir);
    r = try_dir(sub, strlen(sub), &h, why, n);
    if (r == 0) r = try_dir(dir, strlen(dir), &h, why, n);
  }
  if (r == 0) r = try_dir(MOECCL_PKGLIBDIR, strlen(MOECCL_PKGLIBDIR), &h, why, n);
  if (r == 0)
    snprintf(why, n, "%s not found (searched MOECCL_PLUGIN_PATH=%s%s%s%s%s, %s)", MODULE_FILE,
             list ? list : "", dir[0] ? ", " : "", dir, dir[0] ? "/moeccl, " : "", dir,
             MOECCL_PKGLIBDIR);
  return h;
}

static void load_once_fn(void) {
  char why[1024] = "";
  fill_host();
  int quiet = quiet_ucx_signals();
  /* With no error signals UCX still points this thread's alternate signal
   * stack at its own; give the application's back. */
  stack_t alt;
  int have_alt = sigaltstack(NULL, &alt) == 0;
  void* h = open_module(why, sizeof(why));
  if (quiet && have_alt) sigaltstack(&alt, NULL);
  const moeccl_transport_ops_t* m = NULL;
  if (h) {
    moeccl_net_module_init_fn init = (moeccl_net_module_init_fn)dlsym(h, MOECCL_NET_MODULE_INIT);
    if (!init) snprintf(why, sizeof(why), "no %s in the module", MOECCL_NET_MODULE_INIT);
    else m = init(&host, why, sizeof(why));
    if (m && (m->caps != moeccl_ucx_ops.caps || m->mem_types != moeccl_ucx_ops.mem_types ||
              m->can_gather)) {
      snprintf(why, sizeof(why), "its transport does not match this library's");
      m = NULL;
    }
  }
  if (!m) WARN(NET, "ucx transport unavailable: %s", why);
  else
    INFO(NET, "ucx: UCX's error-signal handlers %s",
         quiet ? "off (UCX_ERROR_SIGNALS=\"\")" : "as UCX_* in the environment set");
  module = m; /* a module that did not start stays loaded: UCX may be in it */
}

static const moeccl_transport_ops_t* ucx_module(void) {
  pthread_once(&load_once, load_once_fn);
  return module;
}

/* ---- the proxy's entry points ------------------------------------------- */

static int px_score(void) {
  const moeccl_transport_ops_t* m = ucx_module();
  return m ? m->score() : 0;
}

static int px_can_reach(const moeccl_comm_t* comm, int peer) {
  const moeccl_transport_ops_t* m = ucx_module();
  return m ? m->can_reach(comm, peer) : 0;
}

/* Every rank first learns whether every rank has the module: one without
 * it could not make the exchanges the module's init makes, and the others
 * would wait on it in theirs. */
static moecclResult_t px_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  const moeccl_transport_ops_t* m = ucx_module();
  int32_t* have = calloc((size_t)comm->nranks, sizeof(*have));
  if (!have) return moecclSystemError;
  have[comm->rank] = m != NULL;
  moecclResult_t rc = moeccl_bootstrap_allgather(comm->boot, have, sizeof(*have));
  int missing = -1;
  for (int r = 0; rc == moecclSuccess && r < comm->nranks && missing < 0; r++)
    if (!have[r]) missing = r;
  free(have);
  if (rc != moecclSuccess) return rc;
  if (missing >= 0)
    return moeccl_error(comm, moecclSystemError,
                        "ucx: rank %d (%s) has no UCX module (its log says why)", missing,
                        comm->peers[missing].hostname);
  return m->init(comm, use, needed, state);
}

/* A state exists only once the module's init made it. */
static moecclResult_t px_post(void* s, moeccl_req_t* r) { return module->post(s, r); }
static moecclResult_t px_progress(void* s, int* progressed) {
  return module->progress(s, progressed);
}
static void px_arm(void* s) { module->arm(s); }
static void px_wait(void* s, int64_t timeout_us) { module->wait(s, timeout_us); }
static moecclResult_t px_check_peers(void* s) { return module->check_peers(s); }
static void px_notify_abort(void* s, int culprit) { module->notify_abort(s, culprit); }
static void px_cancel_all(void* s) { module->cancel_all(s); }
static void px_fini(void* s) { module->fini(s); }

const moeccl_transport_ops_t moeccl_ucx_ops = {
    .name = "ucx",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    .link = {5.0, 4.5, 1.0, 0.0}, /* UCX picks its own protocols */
    .score = px_score,
    .can_reach = px_can_reach,
    .init = px_init,
    .post = px_post,
    .progress = px_progress,
    .arm = px_arm,
    .wait = px_wait,
    .check_peers = px_check_peers,
    .notify_abort = px_notify_abort,
    .cancel_all = px_cancel_all,
    .fini = px_fini,
};
