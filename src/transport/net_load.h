/*
 * Loading a network transport's module (net_module.h) inside libmoeccl:
 * the search for the module file and the checks on what it hands back,
 * shared by the proxies of the transports built as modules (ucx_load.c,
 * ofi_load.c), so that every module is found the same way.
 */
#ifndef MOECCL_NET_LOAD_H_
#define MOECCL_NET_LOAD_H_

#include <stddef.h>

#include "transport/transport.h"

/* Loads moeccl_net_<proxy->name>.so as described in net_load.c and returns
 * its ops table, or NULL with why filled (no module, one that does not
 * load, or one whose transport is not the proxy's).  Call it once per
 * transport: the module is never unloaded. */
const moeccl_transport_ops_t* moeccl_net_load(const moeccl_transport_ops_t* proxy, char* why,
                                              size_t n);

/* A proxy's init: every rank first learns whether every rank has the
 * module (m non-NULL; lib names it in the error: "UCX"), then the module's
 * init runs.  A rank without it
 * could not make the exchanges the module's init makes, and the others
 * would wait on it in theirs. */
moecclResult_t moeccl_net_proxy_init(const moeccl_transport_ops_t* proxy, const char* lib,
                                     const moeccl_transport_ops_t* m, moeccl_comm_t* comm,
                                     const uint8_t* use, int needed, void** state);

#endif
