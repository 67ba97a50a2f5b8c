/*
 * A network transport built as a loadable module (moeccl_net_ucx.so,
 * moeccl_net_ofi.so): the contract between libmoeccl and the module.
 *
 * libmoeccl exports only its API (moeccl[A-Z]*, src/local.mk), and its
 * internals are hidden, so the module cannot link against them.  Instead
 * libmoeccl hands the module a table of the few internals a transport calls
 * (logging, errors, the bootstrap allgather, the clock, liveness,
 * parameters, moecclMemAlloc regions), and the
 * module gives back its ops table.  The module links its network library
 * (UCX, libfabric), never libmoeccl, so it loads the same under a program
 * linked with libmoeccl.a.  Compiled into the module, net_module.c defines
 * the internals' names (moeccl_log, moeccl_param_size_at, ...) as calls
 * through the table, so the transport's code calls them as libmoeccl's
 * own code does.
 *
 * The module reads moeccl's structures (moeccl_comm_t, moeccl_req_t), so it
 * must come from the same build: the host passes the version and the sizes
 * it was built with, and the module refuses anything else.
 */
#ifndef MOECCL_NET_MODULE_H_
#define MOECCL_NET_MODULE_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm/bootstrap.h"
#include "transport/transport.h"

/* Bumped when this table or the meaning of an entry changes. */
#define MOECCL_NET_MODULE_ABI 2
/* The one symbol a module exports. */
#define MOECCL_NET_MODULE_INIT "moeccl_net_module_init"

typedef struct moeccl_net_host {
  unsigned abi;        /* MOECCL_NET_MODULE_ABI */
  size_t host_size;    /* sizeof(moeccl_net_host_t) */
  const char* version; /* PACKAGE_VERSION of libmoeccl */
  size_t comm_size, req_size, ops_size;
  /* moeccl's log level and subsystem mask, in effect when the module loads
   * (they are read once per process) */
  int log_level;
  uint32_t log_mask;
  /* The internals of the same names (core.h, debug.h, bootstrap.h,
   * socket.h, param.h); the printf-like ones are called with "%s" and
   * the text the module formatted. */
  void (*log)(moeccl_log_level_t level, uint32_t subsys, const char* file, int line,
              const char* fmt, ...);
  moecclResult_t (*error)(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...);
  moecclResult_t (*comm_fail)(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...);
  moecclResult_t (*comm_peer_lost)(moeccl_comm_t* comm, int rank, const char* fmt, ...);
  moecclResult_t (*bootstrap_allgather)(moeccl_bootstrap_t* b, void* data, size_t bytes);
  int (*process_alive)(pid_t pid, uint64_t start);
  double (*now)(void);
  /* Since ABI 2 (the ofi module): parameters, and moecclMemAlloc regions */
  int64_t (*param_int)(const char* name);
  size_t (*param_size)(const char* name);
  int (*param_bool)(const char* name);
  const char* (*param_str)(const char* name);
  int (*mem_lookup)(const void* ptr, size_t bytes, moeccl_mem_handle_t* out);
} moeccl_net_host_t;

/* The module's entry point: its ops table, or NULL with why filled (the
 * host does not match the module's build). */
typedef const moeccl_transport_ops_t* (*moeccl_net_module_init_fn)(const moeccl_net_host_t* host,
                                                                   char* why, size_t n);

/* Module side: the transport's table (ucx.c, ofi.c), which the entry point
 * (net_module.c) returns. */
extern const moeccl_transport_ops_t moeccl_net_module_ops;

#endif
