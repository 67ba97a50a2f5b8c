/*
 * Finding and loading a network transport's module (net_load.h), for the
 * proxies of libmoeccl (ucx_load.c, ofi_load.c), and what their entry
 * points share (the load with its warning, init).
 *
 * The module moeccl_net_<name>.so is looked for, first match wins, in each
 * directory of MOECCL_PLUGIN_PATH, then next to the object holding this code
 * (libmoeccl.so, or the program linked with libmoeccl.a): in its moeccl/
 * subdirectory (installed: $libdir/moeccl) and in it (the libtool build
 * tree: .libs), then in the configured $pkglibdir.  A module found but not
 * loadable ends the search: a broken install must not quietly pick another.
 */
#include "transport/net_load.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/param.h"
#include "transport/net_module.h"

#ifndef MOECCL_PKGLIBDIR
#define MOECCL_PKGLIBDIR ""
#endif

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static moeccl_net_host_t host; /* every module keeps a pointer to it */

/* What a module may call (net_module.h). */
static void fill_host(void) {
  moeccl_debug_init();
  host = (moeccl_net_host_t){
      .abi = MOECCL_NET_MODULE_ABI,
      .host_size = sizeof(moeccl_net_host_t),
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
      .param_int = moeccl_param_int,
      .param_size = moeccl_param_size,
      .param_bool = moeccl_param_bool,
      .param_str = moeccl_param_str,
      .mem_lookup = moeccl_mem_lookup,
  };
}

/* Loads dir/file: 1 with *h set, 0 when there is no such file, -1 when
 * there is one that does not load (why says so). */
static int try_dir(const char* name, const char* dir, size_t len, const char* file, void** h,
                   char* why, size_t n) {
  char path[4096];
  if (len == 0 || len + strlen(file) + 2 > sizeof(path)) return 0;
  snprintf(path, sizeof(path), "%.*s/%s", (int)len, dir, file);
  if (access(path, F_OK) != 0) return 0;
  *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*h) {
    INFO(NET, "%s: loaded %s", name, path);
    return 1;
  }
  const char* e = dlerror();
  snprintf(why, n, "%s", e ? e : path);
  return -1;
}

/* The search described at the top: the handle, or NULL with why set. */
static void* open_module(const char* name, const char* file, char* why, size_t n) {
  void* h = NULL;
  int r = 0;
  const char* list = moeccl_param_plugin_path();
  for (const char* p = list ? list : ""; *p && r == 0;) {
    size_t len = strcspn(p, ":");
    r = try_dir(name, p, len, file, &h, why, n);
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
    r = try_dir(name, sub, strlen(sub), file, &h, why, n);
    if (r == 0) r = try_dir(name, dir, strlen(dir), file, &h, why, n);
  }
  if (r == 0) r = try_dir(name, MOECCL_PKGLIBDIR, strlen(MOECCL_PKGLIBDIR), file, &h, why, n);
  if (r == 0)
    snprintf(why, n, "%s not found (searched MOECCL_PLUGIN_PATH=%s%s%s%s%s, %s)", file,
             list ? list : "", dir[0] ? ", " : "", dir, dir[0] ? "/moeccl, " : "", dir,
             MOECCL_PKGLIBDIR);
  return h;
}

const moeccl_transport_ops_t* moeccl_net_load(const moeccl_transport_ops_t* proxy, char* why,
                                              size_t n) {
  pthread_once(&host_once, fill_host);
  char file[64];
  snprintf(file, sizeof(file), "moeccl_net_%s.so", proxy->name);
  void* h = open_module(proxy->name, file, why, n);
  if (!h) return NULL;
  /* A module that did not start stays loaded: its libraries may not
   * survive being unloaded (UCX cannot be). */
  moeccl_net_module_init_fn init = (moeccl_net_module_init_fn)dlsym(h, MOECCL_NET_MODULE_INIT);
  if (!init) {
    snprintf(why, n, "no %s in the module", MOECCL_NET_MODULE_INIT);
    return NULL;
  }
  const moeccl_transport_ops_t* m = init(&host, why, n);
  if (m && (strcmp(m->name, proxy->name) != 0 || m->caps != proxy->caps ||
            m->mem_types != proxy->mem_types || m->can_gather || !m->query)) {
    snprintf(why, n, "its transport does not match this library's");
    m = NULL;
  }
  return m;
}

const moeccl_transport_ops_t* moeccl_net_proxy_load(const moeccl_net_proxy_t* p) {
  char why[1024] = "";
  const moeccl_transport_ops_t* m =
      p->load ? p->load(p->ops, why, sizeof(why)) : moeccl_net_load(p->ops, why, sizeof(why));
  if (!m) WARN(NET, "%s transport unavailable: %s", p->ops->name, why);
  return m;
}

moecclResult_t moeccl_net_proxy_init(const moeccl_net_proxy_t* p,
                                     const moeccl_transport_ops_t* (*module)(void),
                                     moeccl_comm_t* comm, const uint8_t* use, int needed,
                                     void** state) {
  *state = NULL;
  if (!needed) return moecclSuccess;
  const moeccl_transport_ops_t* m = module();
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
                        "%s: rank %d (%s) has no %s module (its log says why)", p->ops->name,
                        missing, comm->peers[missing].hostname, p->lib);
  return m->init(comm, use, needed, state);
}
