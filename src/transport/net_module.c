/*
 * Module side of a network transport built as a loadable module
 * (net_module.h): the entry point, and the libmoeccl internals the
 * transport's code calls by name, each forwarding to the table libmoeccl
 * handed over.  Everything here is hidden but the entry point, so none of
 * these names can bind to (or be bound from) another object.
 */
#include "transport/net_module.h"

#include <stdio.h>
#include <string.h>

#include "base/param.h"
#include "base/socket.h"

/* Texts are formatted here and passed as "%s": a va_list cannot be handed on
 * to a variadic function.  moeccl keeps at most 512 bytes of an error text
 * (core.h: last_error) and 1024 of a log line. */
#define ERROR_TEXT 512
#define LOG_TEXT 1024

/* Declares char msg[size] holding fmt formatted with the arguments of the
 * variadic function it is used in. */
#define FORMAT_VARARGS(msg, size, fmt)                                                             \
  char msg[size];                                                                                  \
  do {                                                                                             \
    va_list ap;                                                                                    \
    va_start(ap, fmt);                                                                             \
    vsnprintf(msg, sizeof(msg), fmt, ap);                                                          \
    va_end(ap);                                                                                    \
  } while (0)

static const moeccl_net_host_t* host;

int moeccl_log_level = -1; /* set from the host's before the first use */
uint32_t moeccl_log_mask = MOECCL_SUBSYS_ALL;

void moeccl_debug_init(void) {
  if (host) moeccl_log_level = host->log_level, moeccl_log_mask = host->log_mask;
}

void moeccl_log(moeccl_log_level_t level, uint32_t subsys, const char* file, int line,
                const char* fmt, ...) {
  FORMAT_VARARGS(msg, LOG_TEXT, fmt);
  host->log(level, subsys, file, line, "%s", msg);
}

moecclResult_t moeccl_error(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...) {
  FORMAT_VARARGS(msg, ERROR_TEXT, fmt);
  return host->error(comm, err, "%s", msg);
}

moecclResult_t moeccl_comm_fail(moeccl_comm_t* comm, moecclResult_t err, const char* fmt, ...) {
  FORMAT_VARARGS(msg, ERROR_TEXT, fmt);
  return host->comm_fail(comm, err, "%s", msg);
}

moecclResult_t moeccl_comm_peer_lost(moeccl_comm_t* comm, int rank, const char* fmt, ...) {
  FORMAT_VARARGS(msg, ERROR_TEXT, fmt);
  return host->comm_peer_lost(comm, rank, "%s", msg);
}

moecclResult_t moeccl_bootstrap_allgather(moeccl_bootstrap_t* b, void* data, size_t bytes) {
  return host->bootstrap_allgather(b, data, bytes);
}

int moeccl_process_alive(pid_t pid, uint64_t start) { return host->process_alive(pid, start); }

double moeccl_now(void) { return host->now(); }

/* The settings' accessors (param.h) ask the library by name. */
#define PARAM_NAME(NAME, ...) "MOECCL_" #NAME,
static const char* const param_names[MOECCL_NPARAMS] = {MOECCL_PARAM_LIST(PARAM_NAME)};
int64_t moeccl_param_int_at(moeccl_param_id_t id) { return host->param_int(param_names[id]); }
size_t moeccl_param_size_at(moeccl_param_id_t id) { return host->param_size(param_names[id]); }
int moeccl_param_bool_at(moeccl_param_id_t id) { return host->param_bool(param_names[id]); }
const char* moeccl_param_str_at(moeccl_param_id_t id) { return host->param_str(param_names[id]); }

int moeccl_mem_lookup(const void* ptr, size_t bytes, moeccl_mem_handle_t* out) {
  return host->mem_lookup(ptr, bytes, out);
}

__attribute__((visibility("default"))) const moeccl_transport_ops_t*
moeccl_net_module_init(const moeccl_net_host_t* h, char* why, size_t n) {
  if (!h || h->abi != MOECCL_NET_MODULE_ABI) {
    snprintf(why, n, "module ABI %d, the library's %u", MOECCL_NET_MODULE_ABI, h ? h->abi : 0);
    return NULL;
  }
  if (!h->version || strcmp(h->version, PACKAGE_VERSION) != 0) {
    snprintf(why, n, "built for moeccl %s, not the library's %s", PACKAGE_VERSION,
             h->version ? h->version : "?");
    return NULL;
  }
  if (h->host_size != sizeof(moeccl_net_host_t) || h->comm_size != sizeof(moeccl_comm_t) ||
      h->req_size != sizeof(moeccl_req_t) || h->ops_size != sizeof(moeccl_transport_ops_t)) {
    snprintf(why, n, "built from other sources than the library (structure sizes differ)");
    return NULL;
  }
  host = h;
  moeccl_debug_init();
  return &moeccl_net_module_ops;
}
