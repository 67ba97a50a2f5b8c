/*
 * Loading a network transport's module (net_module.h) inside libmoeccl:
 * the search for the module file, the checks on what it hands back, and
 * the proxy ops table that loads it on first use and forwards to it,
 * shared by the transports built as modules (ucx_load.c, ofi_load.c), so
 * that every module is found and fronted the same way.  A *_load.c says
 * why its transport is a module, what must be set before its library
 * loads, and its ops table.
 */
#ifndef MOECCL_NET_LOAD_H_
#define MOECCL_NET_LOAD_H_

#include <pthread.h>
#include <stddef.h>

#include "transport/transport.h"

/* A network transport built as a module, as its proxy describes it. */
typedef struct moeccl_net_proxy {
  /* The proxy's ops table: the module's must have its name, caps and memory
   * kinds (moeccl_net_load), and it is loaded as moeccl_net_<name>.so. */
  const moeccl_transport_ops_t* ops;
  /* The network library, as the texts name it: "UCX", "libfabric". */
  const char* lib;
  /* Optional (NULL: moeccl_net_load alone): loads the module by calling
   * moeccl_net_load(ops, why, n), with what the library's constructors read
   * set before it (and undone after it where the library leaves a trace),
   * and logs what it set; returns what moeccl_net_load returned. */
  const moeccl_transport_ops_t* (*load)(const moeccl_transport_ops_t* ops, char* why, size_t n);
} moeccl_net_proxy_t;

/* Loads moeccl_net_<proxy->name>.so as described in net_load.c and returns
 * its ops table, or NULL with why filled (no module, one that does not
 * load, or one whose transport is not the proxy's).  Call it once per
 * transport: the module is never unloaded. */
const moeccl_transport_ops_t* moeccl_net_load(const moeccl_transport_ops_t* proxy, char* why,
                                              size_t n);

/* Loads p's module (p->load, or moeccl_net_load) and returns its ops table,
 * or NULL after one warning that says why (the transport is then
 * unavailable).  Called once per process, by the proxy's entry points. */
const moeccl_transport_ops_t* moeccl_net_proxy_load(const moeccl_net_proxy_t* p);

/* A proxy's init: when needed, loads the module (module(), which runs
 * moeccl_net_proxy_load once); every rank then learns whether every rank
 * has the module, then the module's init runs.  A rank without it
 * could not make the exchanges the module's init makes, and the others
 * would wait on it in theirs.  When not needed it loads nothing and
 * returns at once with *state NULL (transport.h: init). */
moecclResult_t moeccl_net_proxy_init(const moeccl_net_proxy_t* p,
                                     const moeccl_transport_ops_t* (*module)(void),
                                     moeccl_comm_t* comm, const uint8_t* use, int needed,
                                     void** state);

/* Defines the entry points of the proxy described by p (a
 * moeccl_net_proxy_t of the including file), which MOECCL_NET_PROXY_OPS(p)
 * names in its ops table.  score, can_reach and init load the module the
 * first time one of them runs; without one the transport is unavailable
 * (score 0, no peer reached, init fails on every rank alike).  The others
 * forward to the module: a state exists only once the module's init made
 * it.  They are defined per proxy because an op is handed the module's
 * state, not which module made it. */
#define MOECCL_NET_PROXY_ENTRY_POINTS(p)                                                           \
  static pthread_once_t p##_once = PTHREAD_ONCE_INIT;                                              \
  static const moeccl_transport_ops_t* p##_loaded; /* NULL: unavailable */                         \
  static void p##_load(void) { p##_loaded = moeccl_net_proxy_load(&p); }                           \
  static const moeccl_transport_ops_t* p##_module(void) {                                          \
    pthread_once(&p##_once, p##_load);                                                             \
    return p##_loaded;                                                                             \
  }                                                                                                \
  static int p##_score(void) { return p##_module() ? p##_loaded->score() : 0; }                    \
  static int p##_can_reach(const moeccl_comm_t* comm, int peer) {                                  \
    return p##_module() ? p##_loaded->can_reach(comm, peer) : 0;                                   \
  }                                                                                                \
  static moecclResult_t p##_init(moeccl_comm_t* comm, const uint8_t* use, int needed,              \
                                 void** state) {                                                   \
    return moeccl_net_proxy_init(&p, p##_module, comm, use, needed, state);                        \
  }                                                                                                \
  static moecclResult_t p##_post(void* s, moeccl_req_t* r) { return p##_loaded->post(s, r); }      \
  static moecclResult_t p##_progress(void* s, int* progressed) {                                   \
    return p##_loaded->progress(s, progressed);                                                    \
  }                                                                                                \
  static void p##_arm(void* s) { p##_loaded->arm(s); }                                             \
  static void p##_wait(void* s, int64_t timeout_us) { p##_loaded->wait(s, timeout_us); }           \
  static moecclResult_t p##_check_peers(void* s) { return p##_loaded->check_peers(s); }            \
  static void p##_notify_abort(void* s, int culprit) { p##_loaded->notify_abort(s, culprit); }     \
  static void p##_cancel_all(void* s) { p##_loaded->cancel_all(s); }                               \
  static void p##_fini(void* s) { p##_loaded->fini(s); }                                           \
  /* without the module (never loaded: the transport did not start) no answer */                   \
  static moecclResult_t p##_query(void* s, const moeccl_comm_t* comm,                              \
                                  moeccl_transport_attr_t* out) {                                  \
    return p##_loaded ? p##_loaded->query(s, comm, out) : moecclInternalError;                     \
  }

/* The entry points MOECCL_NET_PROXY_ENTRY_POINTS(p) defined, as members of
 * an ops table's initializer. */
#define MOECCL_NET_PROXY_OPS(p)                                                                    \
  .score = p##_score, .can_reach = p##_can_reach, .init = p##_init, .post = p##_post,              \
  .progress = p##_progress, .arm = p##_arm, .wait = p##_wait, .check_peers = p##_check_peers,      \
  .notify_abort = p##_notify_abort, .cancel_all = p##_cancel_all, .fini = p##_fini,                \
  .query = p##_query

#endif
