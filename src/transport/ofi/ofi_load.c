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
 * The module is found as net_load.c says (MOECCL_PLUGIN_PATH first), and
 * the entry points are net_load.h's (MOECCL_NET_PROXY_ENTRY_POINTS).
 * Without a module the transport is unavailable (score 0, init fails on
 * every rank alike), with one warning.
 */
#include "transport/net_load.h"

#include <stddef.h>
#include <stdlib.h>

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

/* The module's load (moeccl_net_proxy_t.load): with psm's handlers off. */
static const moeccl_transport_ops_t* load_ofi(const moeccl_transport_ops_t* ops, char* why,
                                              size_t n) {
  int quiet = quiet_psm_signals();
  const moeccl_transport_ops_t* m = moeccl_net_load(ops, why, n);
  if (m)
    INFO(NET, "ofi: IPATH_NO_BACKTRACE %s before loading libfabric",
         quiet ? "set to 1 by moeccl" : "set by the user");
  return m;
}

static const moeccl_net_proxy_t ofi_proxy = {
    .ops = &moeccl_ofi_ops,
    .lib = "libfabric",
    .load = load_ofi,
};

MOECCL_NET_PROXY_ENTRY_POINTS(ofi_proxy)

const moeccl_transport_ops_t moeccl_ofi_ops = {
    .name = "ofi",
    .caps = MOECCL_TRANSPORT_CAP_NETWORK,
    .mem_types = MOECCL_MEM_TYPE_HOST,
    MOECCL_NET_PROXY_OPS(ofi_proxy),
};
