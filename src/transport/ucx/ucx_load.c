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
 * The module is found as net_load.c says (MOECCL_PLUGIN_PATH first), and
 * the entry points are net_load.h's (MOECCL_NET_PROXY_ENTRY_POINTS).
 * Without a module the transport is unavailable (score 0, init fails on
 * every rank alike), with one warning.
 */
#include "transport/net_load.h"

#include <signal.h>
#include <stddef.h>
#include <stdlib.h>

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

/* The module's load (moeccl_net_proxy_t.load): with UCX's handlers off
 * unless the user asked for them. */
static const moeccl_transport_ops_t* load_ucx(const moeccl_transport_ops_t* ops, char* why,
                                              size_t n) {
  int quiet = quiet_ucx_signals();
  /* With no error signals UCX still points this thread's alternate signal
   * stack at its own; give the application's back. */
  stack_t alt;
  int have_alt = sigaltstack(NULL, &alt) == 0;
  const moeccl_transport_ops_t* m = moeccl_net_load(ops, why, n);
  if (quiet && have_alt) sigaltstack(&alt, NULL);
  if (m)
    INFO(NET, "ucx: UCX's error-signal handlers %s",
         quiet ? "off (UCX_ERROR_SIGNALS=\"\")" : "as UCX_* in the environment set");
  return m;
}

static const moeccl_net_proxy_t ucx_proxy = {
    .ops = &moeccl_ucx_ops,
    .lib = "UCX",
    .load = load_ucx,
};

MOECCL_NET_PROXY_ENTRY_POINTS(ucx_proxy)

const moeccl_transport_ops_t moeccl_ucx_ops = {
    .name = "ucx",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    MOECCL_NET_PROXY_OPS(ucx_proxy),
};
