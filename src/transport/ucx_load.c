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
 * The module is found as net_load.c says (MOECCL_PLUGIN_PATH first).
 * Without a module the transport is unavailable (score 0, init fails on
 * every rank alike), with one warning.
 */
#include "transport/net_load.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const moeccl_transport_ops_t* module; /* NULL: unavailable */

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

static void load_once_fn(void) {
  char why[1024] = "";
  int quiet = quiet_ucx_signals();
  /* With no error signals UCX still points this thread's alternate signal
   * stack at its own; give the application's back. */
  stack_t alt;
  int have_alt = sigaltstack(NULL, &alt) == 0;
  const moeccl_transport_ops_t* m = moeccl_net_load(&moeccl_ucx_ops, why, sizeof(why));
  if (quiet && have_alt) sigaltstack(&alt, NULL);
  if (!m) WARN(NET, "ucx transport unavailable: %s", why);
  else
    INFO(NET, "ucx: UCX's error-signal handlers %s",
         quiet ? "off (UCX_ERROR_SIGNALS=\"\")" : "as UCX_* in the environment set");
  module = m;
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

static moecclResult_t px_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  return moeccl_net_proxy_init(&moeccl_ucx_ops, "UCX", ucx_module(), comm, use, needed, state);
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
