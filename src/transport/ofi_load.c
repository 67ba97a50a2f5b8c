/*
 * The ofi transport as libmoeccl sees it: a proxy ops table whose entry
 * points load the libfabric module (moeccl_net_ofi.so: ofi.c, net_module.h)
 * the first time a communicator needs it, and forward to it.
 *
 * Why a module: libfabric links its providers' libraries, and loading them
 * runs their constructors.  On Debian 12 libfabric 1.20 pulls in
 * libinfinipath.so.4 (psm), whose constructor installs handlers for
 * SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT and SIGTERM: a crash prints psm's
 * backtrace, and SIGINT or SIGTERM becomes exit(1) (checked: a program that
 * raises SIGTERM after loading libfabric exits 1 instead of being killed).
 * Linked into libmoeccl, that happened in every program that loaded the
 * library, even runs on shared memory alone.  Now libfabric is loaded only
 * when selection (transport.c) asks this transport for its score or its
 * init, which it does only when some peer is on another node (or
 * MOECCL_SHM_DISABLE=1), and then with IPATH_NO_BACKTRACE set, which makes
 * that constructor install nothing.  The module is never unloaded
 * (net_load.c).
 *
 * The module is found as net_load.c says (MOECCL_PLUGIN_PATH first).
 * Without a module the transport is unavailable (score 0, init fails on
 * every rank alike), with one warning.
 */
#include "transport/net_load.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const moeccl_transport_ops_t* module; /* NULL: unavailable */

/* libinfinipath reads IPATH_NO_BACKTRACE in its constructor, so it must be
 * in the environment before dlopen; any value, even empty, turns the
 * handlers off, so a user's own setting is kept (setenv never overwrites)
 * and there is no value that asks for them: a program that wants psm's
 * handlers loads libinfinipath before moeccl does (LD_PRELOAD).  If
 * something else in the process loaded it first, its constructor has run
 * and this changes nothing.  Returns 1 when moeccl set it. */
static int quiet_psm_signals(void) {
  if (getenv("IPATH_NO_BACKTRACE")) return 0;
  setenv("IPATH_NO_BACKTRACE", "1", 0);
  return 1;
}

static void load_once_fn(void) {
  char why[1024] = "";
  int quiet = quiet_psm_signals();
  module = moeccl_net_load(&moeccl_ofi_ops, why, sizeof(why));
  if (!module) WARN(NET, "ofi transport unavailable: %s", why);
  else
    INFO(NET, "ofi: IPATH_NO_BACKTRACE %s before loading libfabric",
         quiet ? "set to 1 by moeccl" : "set by the user");
}

static const moeccl_transport_ops_t* ofi_module(void) {
  pthread_once(&load_once, load_once_fn);
  return module;
}

/* ---- the proxy's entry points ------------------------------------------- */

static int px_score(void) {
  const moeccl_transport_ops_t* m = ofi_module();
  return m ? m->score() : 0;
}

static int px_can_reach(const moeccl_comm_t* comm, int peer) {
  const moeccl_transport_ops_t* m = ofi_module();
  return m ? m->can_reach(comm, peer) : 0;
}

static moecclResult_t px_init(moeccl_comm_t* comm, const uint8_t* use, int needed, void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  return moeccl_net_proxy_init(&moeccl_ofi_ops, "libfabric", ofi_module(), comm, use, needed,
                               state);
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

const moeccl_transport_ops_t moeccl_ofi_ops = {
    .name = "ofi",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    /* rendezvous above MOECCL_NET_EAGER_SIZE (ofi.c: post_send) */
    .link = {10.0, 15.0, 1.0, MOECCL_LINK_RNDV_NET_EAGER},
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
